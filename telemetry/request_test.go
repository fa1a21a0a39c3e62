package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"exchange/telemetry"
)

// TestLogRequest: the request line has the same fields in both programs,
// the extra ones after them; a probe's is written at debug level only.
func TestLogRequest(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil)) // info and above
	ctx := context.Background()
	telemetry.LogRequest(ctx, log, true, "probe-1", http.MethodGet, "/health", 200, time.Millisecond)
	if buf.Len() != 0 {
		t.Fatalf("a probe logged at info: %s", buf.String())
	}
	telemetry.LogRequest(ctx, log, false, "req-1", http.MethodPost, "/FHIR/R5/:type", 201, 1500*time.Microsecond, slog.Int64("user", 7))
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	want := map[string]any{"level": "INFO", "msg": "request", "request_id": "req-1", "method": "POST", "route": "/FHIR/R5/:type",
		"status": 201.0, "duration_ms": 1.5, "user": 7.0}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("%s: %v, want %v", k, line[k], v)
		}
	}
	if len(line) != len(want)+1 { // and time
		t.Errorf("the line has other fields: %s", buf.String())
	}

	buf.Reset()
	debug := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	telemetry.LogRequest(ctx, debug, true, "probe-2", http.MethodGet, "/health", 200, time.Millisecond)
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil || line["level"] != "DEBUG" || line["request_id"] != "probe-2" {
		t.Errorf("a probe at debug level: %s (%v)", buf.String(), err)
	}
}
