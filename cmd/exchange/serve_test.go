package main

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"exchange/telemetry"
)

// TestMetricsNotPublicInProduction: with MONGODB_URI (the production
// settings) and no METRICS_TOKEN, /metrics is not served on the public
// port, and start-up says why; with the embedded database it is, with a
// warning; a token or METRICS_ADDR keeps it as configured, silently.
func TestMetricsNotPublicInProduction(t *testing.T) {
	h := http.NotFoundHandler()
	for _, c := range []struct {
		name   string
		s      settings
		served bool
		warns  string
	}{
		{"production", settings{MongoURI: "mongodb://db:27017"}, false, "not served"},
		{"production with a token", settings{MongoURI: "mongodb://db:27017", Metrics: telemetry.MetricsConfig{Token: "metrics-token-0123456789"}}, true, ""},
		{"embedded", settings{}, true, "public"},
		{"embedded with a token", settings{Metrics: telemetry.MetricsConfig{Token: "metrics-token-0123456789"}}, true, ""},
	} {
		var logs bytes.Buffer
		got := mainPortMetrics(&c.s, h, slog.New(slog.NewTextHandler(&logs, nil)))
		if (got != nil) != c.served {
			t.Errorf("%s: served %v, want %v", c.name, got != nil, c.served)
		}
		if c.warns == "" && logs.Len() > 0 || c.warns != "" && !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), c.warns) {
			t.Errorf("%s: start-up said %q, want a warning with %q", c.name, logs.String(), c.warns)
		}
	}
	// Served alone on METRICS_ADDR, there is no handler for the main port.
	if got := mainPortMetrics(&settings{MongoURI: "mongodb://db:27017"}, nil, slog.New(slog.DiscardHandler)); got != nil {
		t.Error("a main-port handler appeared")
	}
}
