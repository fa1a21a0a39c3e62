package oauth

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
)

// signingKey is the RSA key that signs ID tokens, with its key id.
type signingKey struct {
	private *rsa.PrivateKey
	kid     string
}

func newSigningKey(k *rsa.PrivateKey) signingKey {
	// The key id is the RFC 7638 thumbprint, so it changes exactly when
	// the key does and clients refetch the JWKS.
	e := base64.RawURLEncoding.EncodeToString(big.NewInt(int64(k.E)).Bytes())
	n := base64.RawURLEncoding.EncodeToString(k.N.Bytes())
	sum := sha256.Sum256([]byte(`{"e":"` + e + `","kty":"RSA","n":"` + n + `"}`))
	return signingKey{private: k, kid: base64.RawURLEncoding.EncodeToString(sum[:])}
}

// jwk is a public key in JWK form (RFC 7517).
type jwk struct {
	Kty string `json:"kty"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	Kid string `json:"kid"`
	N   string `json:"n"`
	E   string `json:"e"`
}

// jwks returns the key set that verifies ID tokens.
func (k signingKey) jwks() map[string][]jwk {
	pub := k.private.PublicKey
	return map[string][]jwk{"keys": {{
		Kty: "RSA", Use: "sig", Alg: "RS256", Kid: k.kid,
		N: base64.RawURLEncoding.EncodeToString(pub.N.Bytes()),
		E: base64.RawURLEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes()),
	}}}
}

// MinRSABits is the smallest RSA key accepted for signing ID tokens.
const MinRSABits = 2048

// ParseRSAPrivateKey reads an RSA private key from PEM (PKCS #1 or PKCS #8).
func ParseRSAPrivateKey(pemBytes []byte) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return nil, errors.New("no PEM block found")
	}
	var key *rsa.PrivateKey
	switch block.Type {
	case "RSA PRIVATE KEY":
		k, err := x509.ParsePKCS1PrivateKey(block.Bytes)
		if err != nil {
			return nil, err
		}
		key = k
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, err
		}
		rk, ok := k.(*rsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("the key is %T, not RSA", k)
		}
		key = rk
	default:
		return nil, fmt.Errorf("PEM block is %q, not a private key", block.Type)
	}
	if key.N.BitLen() < MinRSABits {
		return nil, fmt.Errorf("the key has %d bits; at least %d are needed", key.N.BitLen(), MinRSABits)
	}
	return key, nil
}

// GenerateRSAPrivateKeyPEM returns a new 2048-bit RSA key in PKCS #8 PEM.
func GenerateRSAPrivateKeyPEM() ([]byte, error) {
	k, err := rsa.GenerateKey(rand.Reader, MinRSABits)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
