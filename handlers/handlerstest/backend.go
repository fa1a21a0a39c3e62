package handlerstest

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v3"
	"github.com/golang-jwt/jwt/v5"

	"exchange/domain"
	"exchange/oauth"
)

// BackendKey is the key pair of a SMART backend client in tests: it signs
// client assertions (RS384 or ES384) and publishes its public JWKS.
type BackendKey struct {
	Alg     string // RS384 or ES384
	KeyID   string
	private crypto.Signer
}

var (
	rsaBackendKey = sync.OnceValue(func() crypto.Signer {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		return k
	})
	ecBackendKey = sync.OnceValue(func() crypto.Signer {
		k, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
		if err != nil {
			panic(err)
		}
		return k
	})
)

// NewBackendKey returns a key pair for alg (RS384 or ES384) with a kid of
// its own; the keys themselves are made once per test binary (an RSA key
// takes a while).
func NewBackendKey(t testing.TB, alg string) *BackendKey {
	t.Helper()
	k := &BackendKey{Alg: alg, KeyID: alg + "-" + strings.ReplaceAll(t.Name(), "/", "-")}
	switch alg {
	case "RS384":
		k.private = rsaBackendKey()
	case "ES384":
		k.private = ecBackendKey()
	default:
		t.Fatalf("no backend key for %s", alg)
	}
	return k
}

// JWKS is the public JSON Web Key Set of the key.
func (k *BackendKey) JWKS(t testing.TB) string {
	t.Helper()
	b, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: k.private.Public(), KeyID: k.KeyID, Algorithm: k.Alg}}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Assertion signs a client assertion for clientID at tokenURL, valid for
// lifetime, with a fresh jti; edit may change its claims and header first.
func (k *BackendKey) Assertion(t testing.TB, clientID, tokenURL string, lifetime time.Duration, edit func(claims jwt.MapClaims, header map[string]any)) string {
	t.Helper()
	claims := jwt.MapClaims{"iss": clientID, "sub": clientID, "aud": tokenURL,
		"exp": time.Now().Add(lifetime).Unix(), "jti": rand.Text()}
	token := jwt.NewWithClaims(jwt.GetSigningMethod(k.Alg), claims)
	token.Header["kid"] = k.KeyID
	if edit != nil {
		edit(claims, token.Header)
	}
	signed, err := token.SignedString(k.private)
	if err != nil {
		t.Fatal(err)
	}
	return signed
}

// BackendClient registers a backend client acting for the practitioner
// userID (or, when 0, the organization organizationID), with key's JWKS.
func (e *Env) BackendClient(t testing.TB, key *BackendKey, userID, organizationID int64) *domain.OAuthClient {
	t.Helper()
	c, _, err := e.OAuth.RegisterClient(context.Background(), oauth.ClientRegistration{Name: "Backend " + key.KeyID, Type: domain.ClientBackend,
		JWKS: key.JWKS(t), ActsForUserID: userID, ActsForOrganizationID: organizationID})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TokenRequest sends a client_credentials request with assertion, and
// decodes the answer.
func (e *Env) TokenRequest(t testing.TB, scope, assertion string) (*http.Response, map[string]any) {
	t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}, "scope": {scope},
		"client_assertion_type": {"urn:ietf:params:oauth:client-assertion-type:jwt-bearer"}, "client_assertion": {assertion}}
	return SendTo(t, "POST", e.URL+"/o/token/", "", form.Encode(), map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
}

// BackendToken signs in as the backend client with scope and returns the
// access token.
func (e *Env) BackendToken(t testing.TB, key *BackendKey, clientID, scope string) string {
	t.Helper()
	resp, body := e.TokenRequest(t, scope, key.Assertion(t, clientID, e.URL+"/o/token/", 4*time.Minute, nil))
	token, _ := body["access_token"].(string)
	if resp.StatusCode != http.StatusOK || token == "" {
		t.Fatalf("backend sign-in: %d %v", resp.StatusCode, body)
	}
	return token
}
