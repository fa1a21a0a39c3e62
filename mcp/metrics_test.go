package mcp_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"exchange/handlers/handlerstest"
	"exchange/mcp"
	"exchange/telemetry"
)

// lockedBuffer is a log many goroutines write.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// requestIDs returns the request id of each line logged for a route
// prefix.
func (l *lockedBuffer) requestIDs(t *testing.T, routePrefix string) map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		var m struct {
			Msg       string `json:"msg"`
			Route     string `json:"route"`
			RequestID string `json:"request_id"`
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON log line: %q", line)
		}
		if m.Msg == "request" && strings.HasPrefix(m.Route, routePrefix) {
			ids[m.RequestID] = true
		}
	}
	return ids
}

// TestGatewayMetricsAndRequestIDs: the gateway's /metrics (behind
// METRICS_TOKEN) counts tool calls by tool and outcome, its calls to the
// exchange by endpoint and status, and its requests by route pattern; the
// id of an /mcp request reaches the exchange's log lines of the calls it
// made.
func TestGatewayMetricsAndRequestIDs(t *testing.T) {
	logConfig, _ := telemetry.ParseLogConfig("json", "info")
	var serviceLog, gatewayLog lockedBuffer
	s := &stack{env: handlerstest.StartWith(t, handlerstest.Options{Logger: logConfig.NewLogger(&serviceLog)})}
	w := s.seed(t)
	reg := telemetry.NewRegistry()
	const token = "gateway-metrics-token-0123"
	g := s.startGateway(t, func(c *mcp.Config) {
		c.Metrics, c.MetricsHandler, c.Log = reg, telemetry.MetricsHandler(reg, token), logConfig.NewLogger(&gatewayLog)
	})
	c := g.mcpClient(t, s.userToken(t, w.managerA))
	callJSON(t, c, "get_study", map[string]any{"study_id": w.studyA})
	if _, isError := call(t, c, "get_study", map[string]any{"study_id": 9999}); !isError {
		t.Fatal("get_study of a missing study is no tool error")
	}

	get := func(auth string) (int, string) {
		req, _ := http.NewRequest("GET", g.URL+"/metrics", nil)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if status, _ := get(""); status != http.StatusUnauthorized {
		t.Errorf("/metrics without the token: %d", status)
	}
	status, text := get(token)
	if status != http.StatusOK {
		t.Fatalf("/metrics: %d", status)
	}
	for _, want := range []string{
		`gateway_tool_calls_total{outcome="ok",tool="get_study"} 1`,
		`gateway_tool_calls_total{outcome="tool_error",tool="get_study"} 1`,
		`gateway_upstream_request_duration_seconds_count{endpoint="api",status="2xx"}`,
		`gateway_upstream_request_duration_seconds_count{endpoint="api",status="4xx"}`,
		`gateway_http_requests_total{method="POST",route="/mcp",status="2xx"}`,
		"go_goroutines",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	mcpCalls := gatewayLog.requestIDs(t, "/mcp")
	joined := 0
	for id := range serviceLog.requestIDs(t, "/api/v1/") {
		if mcpCalls[id] {
			joined++
		}
	}
	if joined < 2 {
		t.Errorf("%d of the exchange's API requests carry the id of the /mcp request that made them, want both get_study calls'", joined)
	}
}
