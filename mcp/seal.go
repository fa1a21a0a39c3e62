package mcp

import (
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"golang.org/x/crypto/chacha20poly1305"
)

// MinBrokerKeyLength is the shortest MCP_BROKER_KEY the gateway accepts.
const MinBrokerKeyLength = 32

// blobKind tags what a sealed blob is. The tag is the AEAD's additional
// data, so a blob sealed as one kind never opens as another: a state
// cannot be presented as a code, nor a code as a refresh token.
type blobKind string

const (
	kindClient  blobKind = "client"  // a client registration: the client_id itself
	kindState   blobKind = "state"   // the state of a pending authorization at the service
	kindCode    blobKind = "code"    // the gateway's authorization code
	kindRefresh blobKind = "refresh" // a wrapped refresh token of the service

	// The approval page's: the request it asks about (a form field), the
	// browser's CSRF nonce (a cookie) and the approvals the browser
	// remembers (a cookie). Each of them opens only as itself, so a cookie
	// of one kind cannot stand in for the other, nor for a form field.
	kindApprovalRequest blobKind = "approval-request"
	kindCSRF            blobKind = "csrf"
	kindApprovals       blobKind = "approvals"
)

// Errors of Open. Neither says why a blob failed to authenticate: a
// tampered, truncated, foreign-key or wrong-kind blob all look the same.
var (
	errBlobInvalid = errors.New("invalid or tampered")
	errBlobExpired = errors.New("expired")
)

// sealer seals and opens the broker's blobs with XChaCha20-Poly1305 under
// a key derived from MCP_BROKER_KEY (HKDF-SHA256). A blob is
// base64url(nonce || ciphertext) of {"exp": unix seconds, "d": payload}.
type sealer struct {
	aead cipher.AEAD
	now  func() time.Time
}

func newSealer(brokerKey string, now func() time.Time) (*sealer, error) {
	if len(brokerKey) < MinBrokerKeyLength {
		return nil, fmt.Errorf("MCP_BROKER_KEY: required, at least %d characters (it keys the broker's sealed codes, states and refresh tokens; for example: openssl rand -base64 48)", MinBrokerKeyLength)
	}
	key, err := hkdf.Key(sha256.New, []byte(brokerKey), nil, "exchange mcp gateway broker blobs v1", chacha20poly1305.KeySize)
	if err != nil {
		return nil, err
	}
	aead, err := chacha20poly1305.NewX(key)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead, now: now}, nil
}

type envelope struct {
	Expires int64           `json:"exp"`
	Data    json.RawMessage `json:"d"`
}

// seal encrypts payload as a blob of the kind that expires after ttl.
func (s *sealer) seal(kind blobKind, ttl time.Duration, payload any) (string, error) {
	data, err := json.Marshal(payload)
	if err != nil {
		return "", err
	}
	plain, err := json.Marshal(envelope{Expires: s.now().Add(ttl).Unix(), Data: data})
	if err != nil {
		return "", err
	}
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	_, _ = rand.Read(nonce) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(s.aead.Seal(nonce, nonce, plain, []byte(kind))), nil
}

// open decrypts a blob of the kind into payload. Returns errBlobInvalid
// for anything that does not authenticate as that kind under this key, and
// errBlobExpired once its lifetime has passed.
func (s *sealer) open(kind blobKind, blob string, payload any) error {
	raw, err := base64.RawURLEncoding.DecodeString(blob)
	if err != nil || len(raw) < s.aead.NonceSize()+s.aead.Overhead() {
		return errBlobInvalid
	}
	nonce, box := raw[:s.aead.NonceSize()], raw[s.aead.NonceSize():]
	plain, err := s.aead.Open(nil, nonce, box, []byte(kind))
	if err != nil {
		return errBlobInvalid
	}
	var env envelope
	if err := json.Unmarshal(plain, &env); err != nil {
		return errBlobInvalid
	}
	if !s.now().Before(time.Unix(env.Expires, 0)) {
		return errBlobExpired
	}
	if err := json.Unmarshal(env.Data, payload); err != nil {
		return errBlobInvalid
	}
	return nil
}
