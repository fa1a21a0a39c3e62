package mcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// healthTTL is how long a readiness report is reused: probes that arrive
// more often (a load balancer, several) cost the service nothing more.
const healthTTL = 5 * time.Second

// healthTimeout bounds each call of a health check to the service.
const healthTimeout = 3 * time.Second

// healthProbeToken is what the health check introspects: no token, so the
// answer (active: false) only says whether the gateway's client
// credentials were accepted.
const healthProbeToken = "gateway-health-probe"

// healthReport is the answer of /ready.
type healthReport struct {
	// Status is "ok" when the gateway can serve (200), "unhealthy" (503).
	Status string `json:"status"`
	// Service is "ok", "unreachable" or "HTTP <status>": the service's own
	// /ready.
	Service string `json:"service"`
	// Credentials is "accepted" or "refused" by the service's
	// introspection, "unchecked" without SERVICE_CLIENT_SECRET (the gateway
	// then checks tokens with userinfo alone), "unknown" while the service
	// does not answer.
	Credentials string `json:"credentials"`
	// Reason says why the gateway is unhealthy. It names settings, never
	// addresses.
	Reason string `json:"reason,omitempty"`
}

// healthCheck probes the service as the gateway uses it, at most once per
// healthTTL: concurrent probes wait for the one running.
type healthCheck struct {
	svc *service
	now func() time.Time

	mu     sync.Mutex
	at     time.Time // of the last report; zero: none yet
	report healthReport
}

// serveLive is liveness: the gateway answers. It asks nothing of the
// exchange, so an outage there does not get healthy gateways restarted.
func serveLive(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// serveReady is readiness: 200 when the exchange is ready (its /ready)
// and accepts the gateway's client credentials, else 503 with the reason.
func (g *Gateway) serveReady(w http.ResponseWriter, r *http.Request) {
	report := g.health.get(r.Context())
	status := http.StatusOK
	if report.Status != "ok" {
		status = http.StatusServiceUnavailable
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, status, report)
}

func (h *healthCheck) get(ctx context.Context) healthReport {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.at.IsZero() && h.now().Sub(h.at) < healthTTL {
		return h.report
	}
	// The probe outlives a caller that hangs up: its report serves the next.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), healthTimeout)
	defer cancel()
	h.report, h.at = h.probe(ctx), h.now()
	return h.report
}

func (h *healthCheck) probe(ctx context.Context) healthReport {
	unhealthy := healthReport{Status: "unhealthy", Service: "unreachable", Credentials: "unknown", Reason: "the service does not answer at SERVICE_BASE_URL"}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.svc.base+"/ready", nil)
	if err != nil {
		return unhealthy
	}
	resp, err := h.svc.http.Do(req)
	if err != nil {
		return unhealthy
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		unhealthy.Service = fmt.Sprintf("HTTP %d", resp.StatusCode)
		unhealthy.Reason = "the service's /ready answers " + unhealthy.Service
		return unhealthy
	}
	report := healthReport{Status: "ok", Service: "ok", Credentials: "unchecked"}
	if h.svc.clientSecret == "" {
		return report
	}
	_, err = h.svc.introspect(ctx, healthProbeToken)
	var se *serviceError
	switch {
	case err == nil:
		report.Credentials = "accepted"
		return report
	case errors.As(err, &se) && se.kind == failMisconfigured:
		report.Credentials, report.Reason = "unknown", se.detail
		if se.code == "invalid_client" || se.status == http.StatusUnauthorized || se.status == http.StatusForbidden {
			report.Credentials = "refused"
		}
	default:
		report.Credentials, report.Reason = "unknown", "the service's introspection does not answer"
	}
	report.Status = "unhealthy"
	return report
}
