package telemetry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"time"
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

// LogRequest writes the one log line of an answered request, the same in
// both programs: "request" with its id, method, route template (never the
// raw path: its values may be names), status and duration, then extra
// (internal ids, such as the acting user's). Never a query, a header or a
// body: they may hold health data or secrets. A probe's request (a load
// balancer's /health, a scraper's /metrics: every few seconds) is logged
// at debug level, the others at info; below the level logged, nothing is
// built.
func LogRequest(ctx context.Context, log *slog.Logger, probe bool, id, method, route string, status int, took time.Duration, extra ...slog.Attr) {
	level := slog.LevelInfo
	if probe {
		level = slog.LevelDebug
	}
	if !log.Enabled(ctx, level) {
		return
	}
	attrs := append([]slog.Attr{slog.String("request_id", id), slog.String("method", method), slog.String("route", route),
		slog.Int("status", status), slog.Float64("duration_ms", float64(took.Microseconds())/1000)}, extra...)
	log.LogAttrs(ctx, level, "request", attrs...)
}
