package domain

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
)

// sealer encrypts what the exchange keeps secret at rest: the client
// secrets of identity providers and of its registrations at EHRs, the
// tokens of patients' EHR connections and the PKCE verifiers of those
// begun. AES-256-GCM under Config.SecretsKey, which the service derives
// from SECRET_KEY for this purpose (HKDF-SHA256), so that every instance
// sharing the database opens what another sealed; each value is bound to
// what it belongs to (its purpose, the additional data: a token to its
// patient and EHR), so one copied onto another record does not open.
// Changing SECRET_KEY makes them unreadable.
type sealer struct {
	aead cipher.AEAD
}

// newSealer is the sealer of a 32-byte key; it panics on another length,
// a defect of the wiring.
func newSealer(key []byte) *sealer {
	block, err := aes.NewCipher(key)
	if err != nil {
		panic("the secrets key: " + err.Error())
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic("the secrets key: " + err.Error())
	}
	return &sealer{aead: aead}
}

// errSealed is a sealed value that does not open: another key sealed it,
// or for another purpose, or it was changed.
var errSealed = errors.New("a sealed secret does not open: SECRET_KEY changed since it was sealed, or the record was altered")

// Seal encrypts plain for purpose: a random nonce, then the ciphertext.
func (s *sealer) Seal(plain []byte, purpose string) ([]byte, error) {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return s.aead.Seal(nonce, nonce, plain, []byte(purpose)), nil
}

// Open decrypts what Seal sealed for the same purpose.
func (s *sealer) Open(sealed []byte, purpose string) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return nil, errSealed
	}
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte(purpose))
	if err != nil {
		return nil, errSealed
	}
	return plain, nil
}
