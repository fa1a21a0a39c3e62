package mcp

import (
	"context"
	"net/http"
	"strings"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/prometheus/client_golang/prometheus"

	"exchange/telemetry"
)

// metrics are the gateway's series: its requests by route pattern, tool
// calls by tool and outcome, and its calls to the exchange by endpoint
// and status class. Labels come from closed sets: the mux's patterns, the
// registered tools, a few endpoints.
type metrics struct {
	http     *telemetry.HTTPMetrics
	tools    *prometheus.CounterVec
	upstream *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	ns := "gateway"
	m := &metrics{
		http: telemetry.NewHTTPMetrics(reg, ns),
		tools: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "tool_calls_total",
			Help: "MCP tool calls, by tool and outcome: ok, tool_error (an answer the assistant reads), unavailable (the exchange did not answer), error."},
			[]string{"tool", "outcome"}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "upstream_request_duration_seconds",
			Help: "Calls to the exchange, by endpoint (token, introspect, userinfo, register, fhir, api, health, other) and status class (2xx, ..., error: no answer).", Buckets: telemetry.LatencyBuckets},
			[]string{"endpoint", "status"}),
	}
	reg.MustRegister(m.tools, m.upstream)
	return m
}

// toolOutcome counts a tool call by how it ended.
func (m *metrics) toolOutcome(tool string, res *mcpgo.CallToolResult, err error) {
	outcome := "ok"
	switch {
	case err != nil && err == errServiceUnavailable:
		outcome = "unavailable"
	case err != nil:
		outcome = "error"
	case res != nil && res.IsError:
		outcome = "tool_error"
	}
	m.tools.WithLabelValues(tool, outcome).Inc()
}

// countTools is the tools' outermost middleware: it sees what guard made of
// the call.
func (m *metrics) countTools() server.ToolHandlerMiddleware {
	return func(next server.ToolHandlerFunc) server.ToolHandlerFunc {
		return func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			res, err := next(ctx, req)
			m.toolOutcome(req.Params.Name, res, err)
			return res, err
		}
	}
}

// upstreamEndpoint names the exchange endpoint of a path, for a label.
func upstreamEndpoint(path string) string {
	for _, e := range []struct{ prefix, name string }{
		{"/o/token", "token"}, {"/o/introspect", "introspect"}, {"/o/userinfo", "userinfo"}, {"/o/applications", "register"},
		{"/FHIR/", "fhir"}, {"/api/", "api"}, {"/ready", "health"}, {"/health", "health"},
	} {
		if strings.HasPrefix(path, e.prefix) {
			return e.name
		}
	}
	return "other"
}

// upstream is the transport of the gateway's calls to the exchange: it
// passes the request id of the call's own request on (X-Request-Id, so
// the exchange's log lines join the gateway's) and times each call.
type upstream struct {
	next http.RoundTripper
	m    *metrics
}

func (u upstream) RoundTrip(r *http.Request) (*http.Response, error) {
	if id, ok := r.Context().Value(requestIDKey{}).(string); ok && r.Header.Get(telemetry.RequestIDHeader) == "" {
		r = r.Clone(r.Context())
		r.Header.Set(telemetry.RequestIDHeader, id)
	}
	start := time.Now()
	resp, err := u.next.RoundTrip(r)
	status := "error"
	if err == nil {
		status = telemetry.StatusClass(resp.StatusCode)
	}
	u.m.upstream.WithLabelValues(upstreamEndpoint(r.URL.Path), status).Observe(time.Since(start).Seconds())
	return resp, err
}

type requestIDKey struct{}

// probes are the routes load balancers and scrapers call every few
// seconds: logged at debug level only.
var probes = map[string]bool{"GET /health": true, "GET /ready": true, "GET /metrics": true}

// statusRecorder keeps the status a handler wrote; it stays a Flusher
// for the Streamable HTTP transport's event streams.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// observe is the gateway's one middleware: the request's id (a valid
// X-Request-Id kept, else a new one; echoed, and passed on to the
// exchange), its count and latency by route pattern, and its log line
// (telemetry.LogRequest).
func (g *Gateway) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := telemetry.RequestID(r.Header.Get(telemetry.RequestIDHeader))
		w.Header().Set(telemetry.RequestIDHeader, id)
		rec := &statusRecorder{ResponseWriter: w}
		r = r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id))
		next.ServeHTTP(rec, r)
		route := r.Pattern // set by the mux on the request it was given
		if route == "" {
			route = "unmatched"
		}
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		took := time.Since(start)
		g.metrics.http.Observe(route, telemetry.Method(r.Method), status, took)
		telemetry.LogRequest(r.Context(), g.log, probes[route], id, r.Method, route, status, took)
	})
}
