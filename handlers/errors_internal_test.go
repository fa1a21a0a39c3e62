package handlers

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"

	"exchange/domain"
)

// TestUnavailableIsRetryable: a busy embedded database's refusal is 503
// with Retry-After and an OperationOutcome, and is no fault to log.
func TestUnavailableIsRetryable(t *testing.T) {
	var logs bytes.Buffer
	s := &server{log: slog.New(slog.NewJSONHandler(&logs, nil)), metrics: newMetrics(prometheus.NewRegistry(), nil)}
	app := fiber.New(fiber.Config{ErrorHandler: s.handleError})
	app.Use(s.observe)
	app.Get("/FHIR/R5/:type", func(*fiber.Ctx) error {
		return &domain.Error{Code: domain.CodeUnavailable, Message: "the embedded database is busy", RetryAfter: 5 * time.Second}
	})
	resp, err := app.Test(httptest.NewRequest("GET", "/FHIR/R5/Observation", nil))
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		ResourceType string `json:"resourceType"`
		Issue        []struct{ Code, Diagnostics string }
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != fiber.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "5" ||
		body.ResourceType != "OperationOutcome" || len(body.Issue) != 1 || body.Issue[0].Code != "transient" ||
		!strings.Contains(body.Issue[0].Diagnostics, "busy") {
		t.Errorf("a busy search: %d Retry-After %q %+v", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if strings.Contains(logs.String(), "request failed") {
		t.Errorf("a busy answer was logged as a fault: %s", logs.String())
	}
}
