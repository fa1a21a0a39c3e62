package telemetry

import (
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MetricsConfig is METRICS_ADDR and METRICS_TOKEN, checked.
type MetricsConfig struct {
	// Addr is where /metrics is served on its own (host:port); empty: on
	// the program's main port.
	Addr string
	// Token, when set, must be presented as a bearer token to read
	// /metrics.
	Token string
}

// MinMetricsTokenLength is the shortest METRICS_TOKEN accepted.
const MinMetricsTokenLength = 16

// ParseMetricsConfig checks METRICS_ADDR and METRICS_TOKEN; the error names
// the setting at fault.
func ParseMetricsConfig(addr, token string) (MetricsConfig, error) {
	c := MetricsConfig{Addr: strings.TrimSpace(addr), Token: strings.TrimSpace(token)}
	if c.Addr != "" {
		if _, port, err := net.SplitHostPort(c.Addr); err != nil || port == "" {
			return c, fmt.Errorf("METRICS_ADDR: %q is not host:port (such as :9090)", addr)
		}
	}
	if c.Token != "" && len(c.Token) < MinMetricsTokenLength {
		return c, fmt.Errorf("METRICS_TOKEN: must be at least %d characters", MinMetricsTokenLength)
	}
	return c, nil
}

// NewRegistry returns a registry with the Go runtime and process
// collectors, for a program's own series to join. Beside the collector's
// defaults it exports the soft memory limit (go_gc_gomemlimit_bytes) and
// the runtime's estimate of the CPU the garbage collector takes, with the
// total and idle time to compare it with (go_cpu_classes_*_cpu_seconds_total):
// what a memory limit costs shows there.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.GoRuntimeMetricsRule{Matcher: gcCPUMetrics})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// gcCPUMetrics are the runtime/metrics names of the memory limit, and of
// the GC's CPU, the total and the idle time.
var gcCPUMetrics = regexp.MustCompile(`^/(gc/gomemlimit:bytes|cpu/classes/(gc/total|idle|total):cpu-seconds)$`)

// MetricsHandler serves what g gathers in the Prometheus text format. With
// a token, only requests bearing it (Authorization: Bearer <token>, the
// scheme in any case) are answered; others get 401. The comparison takes the same time whatever
// the guess.
func MetricsHandler(g prometheus.Gatherer, token string) http.Handler {
	h := promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	if token == "" {
		return h
	}
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The scheme is case-insensitive (RFC 9110 11.1); the token is not.
		scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
			http.Error(w, "metrics: a bearer token is required (METRICS_TOKEN)", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Serve arranges /metrics as configured, behind Token: with Addr, alone on
// a listener of its own, away from the program's public port (stop closes
// it); else it returns the handler the program serves on its main port
// (stop does nothing).
func (c MetricsConfig) Serve(g prometheus.Gatherer, log *slog.Logger) (onMainPort http.Handler, stop func(), err error) {
	h := MetricsHandler(g, c.Token)
	if c.Addr == "" {
		return h, func() {}, nil
	}
	stop, err = serveAlone(c.Addr, h, log)
	return nil, stop, err
}

// serveAlone serves h as /metrics alone on addr.
func serveAlone(addr string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("METRICS_ADDR: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Info("metrics listening", "addr", ln.Addr().String())
	return func() { _ = srv.Close() }, nil
}

// HTTPMetrics are the request series every HTTP server of ours has.
type HTTPMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewHTTPMetrics registers <namespace>_http_requests_total and
// <namespace>_http_request_duration_seconds, by route template, method and
// status class.
func NewHTTPMetrics(reg prometheus.Registerer, namespace string) *HTTPMetrics {
	labels := []string{"route", "method", "status"}
	m := &HTTPMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "http_requests_total",
			Help: "HTTP requests answered, by route template, method and status class (2xx, 4xx, ...)."}, labels),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "http_request_duration_seconds",
			Help: "Time to answer an HTTP request, by route template, method and status class.", Buckets: LatencyBuckets}, labels),
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

// LatencyBuckets are the histogram buckets of our latencies: 1 ms to 30 s
// (a search of the embedded database at its limits takes seconds).
var LatencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// Observe counts one answered request. route must be a template ("/FHIR/R5/:type"), never
// a raw path: ids would make the label set unbounded.
func (m *HTTPMetrics) Observe(route, method string, status int, took time.Duration) {
	class := StatusClass(status)
	m.requests.WithLabelValues(route, method, class).Inc()
	m.duration.WithLabelValues(route, method, class).Observe(took.Seconds())
}

// StatusClass is "2xx", "4xx", ... for a status code.
func StatusClass(status int) string {
	if status < 100 || status > 599 {
		return "other"
	}
	return strconv.Itoa(status/100) + "xx"
}

// Method bounds a request method for a label: the standard ones, else
// "other".
func Method(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return m
	}
	return "other"
}
