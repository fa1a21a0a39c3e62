package telemetry

import (
	"crypto/rand"
	"encoding/hex"
)

// RequestIDHeader carries a request's id: accepted from the client when
// valid, else generated, and echoed in the response.
const RequestIDHeader = "X-Request-Id"

// MaxRequestIDLength is the longest request id accepted from a client.
const MaxRequestIDLength = 128

// RequestID returns the id of a request: incoming when it is a valid id
// (1 to 128 characters of A-Z, a-z, 0-9, '-', '_', '.' and ':', which
// covers UUIDs and the ids proxies generate, and leaves out anything that
// could break a log line or a header), else a new random one (32 hex
// digits).
func RequestID(incoming string) string {
	if validRequestID(incoming) {
		return incoming
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

func validRequestID(s string) bool {
	if len(s) == 0 || len(s) > MaxRequestIDLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.', c == ':':
		default:
			return false
		}
	}
	return true
}
