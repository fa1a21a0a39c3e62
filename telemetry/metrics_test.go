package telemetry_test

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"exchange/handlers/handlerstest"
	"exchange/telemetry"
)

func TestParseMetricsConfig(t *testing.T) {
	for _, tc := range []struct{ addr, token, err string }{
		{"", "", ""},
		{":9090", "a-token-of-16-chars", ""},
		{"127.0.0.1:0", "", ""},
		{"9090", "", "METRICS_ADDR"},
		{"", "short", "METRICS_TOKEN"},
	} {
		_, err := telemetry.ParseMetricsConfig(tc.addr, tc.token)
		if (tc.err == "") != (err == nil) || (err != nil && !strings.HasPrefix(err.Error(), tc.err+":")) {
			t.Errorf("%q %q: %v, want an error naming %q", tc.addr, tc.token, err, tc.err)
		}
	}
}

// TestMetricsServedAlone: with METRICS_ADDR, /metrics is served there,
// behind the token, and not handed to the main port.
func TestMetricsServedAlone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, err := telemetry.ParseMetricsConfig(addr, "metrics-token-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	onMain, stop, err := c.Serve(telemetry.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if onMain != nil {
		t.Error("a handler for the main port as well")
	}
	get := func(token string) (int, string) { return handlerstest.GetText(t, "http://"+addr+"/metrics", token) }
	if status, _ := get("metrics-token-0123456780"); status != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d", status)
	}
	status, body := get("metrics-token-0123456789")
	if status != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Errorf("the token: %d %.80s", status, body)
	}
	// What a memory limit costs: the limit, and the GC's share of the CPU.
	for _, series := range []string{"go_gc_gomemlimit_bytes", "go_cpu_classes_gc_total_cpu_seconds_total", "go_cpu_classes_total_cpu_seconds_total",
		"go_cpu_classes_idle_cpu_seconds_total"} {
		if !strings.Contains(body, "\n"+series+" ") {
			t.Errorf("/metrics lacks %s", series)
		}
	}
}

// TestMetricsTokenScheme: the Authorization scheme matches in any case
// (RFC 9110 11.1); the token itself must be exact.
func TestMetricsTokenScheme(t *testing.T) {
	h := telemetry.MetricsHandler(telemetry.NewRegistry(), "metrics-token-0123456789")
	for header, want := range map[string]int{
		"Bearer metrics-token-0123456789": http.StatusOK,
		"bearer metrics-token-0123456789": http.StatusOK,
		"BEARER metrics-token-0123456789": http.StatusOK,
		"Bearer metrics-token-012345678":  http.StatusUnauthorized,
		"Bearer METRICS-TOKEN-0123456789": http.StatusUnauthorized,
		"Basic metrics-token-0123456789":  http.StatusUnauthorized,
		"metrics-token-0123456789":        http.StatusUnauthorized,
		"":                                http.StatusUnauthorized,
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header.Set("Authorization", header)
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("Authorization %q: %d, want %d", header, rec.Code, want)
		}
	}
}
