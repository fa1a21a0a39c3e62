package mcp_test

import (
	"net/http"
	"strings"
	"testing"

	"exchange/handlers/handlerstest"
	"exchange/mcp"
	"exchange/telemetry"
)

// requestIDs returns the request id of each line a log holds for a route
// prefix.
func requestIDs(t *testing.T, log *handlerstest.LogBuffer, routePrefix string) map[string]bool {
	ids := map[string]bool{}
	for _, m := range log.JSONLines(t) {
		if route, _ := m["route"].(string); m["msg"] == "request" && strings.HasPrefix(route, routePrefix) {
			ids[m["request_id"].(string)] = true
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
	var serviceLog, gatewayLog handlerstest.LogBuffer
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

	get := func(auth string) (int, string) { return handlerstest.GetText(t, g.URL+"/metrics", auth) }
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

	mcpCalls := requestIDs(t, &gatewayLog, "/mcp")
	joined := 0
	for id := range requestIDs(t, &serviceLog, "/api/v1/") {
		if mcpCalls[id] {
			joined++
		}
	}
	if joined < 2 {
		t.Errorf("%d of the exchange's API requests carry the id of the /mcp request that made them, want both get_study calls'", joined)
	}
}
