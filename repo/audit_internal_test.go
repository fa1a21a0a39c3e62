package repo

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"exchange/domain"
)

// TestAuditQueueFullIsNeverSilent: with the writer behind, an event that
// finds the queue full is dropped without blocking the request, counted
// and logged, once for a burst.
func TestAuditQueueFullIsNeverSilent(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	// No writer runs: the queue of two fills.
	a := &AuditLog{db: &DB{metrics: m}, log: log, queue: make(chan domain.AuditEvent, 2), done: make(chan struct{})}
	a.losses.log = log
	for range 5 {
		a.Record(context.Background(), domain.AuditEvent{})
	}
	if n := testutil.ToFloat64(m.auditLost.WithLabelValues("buffer_full")); n != 3 {
		t.Errorf("lost events counted: %v, want 3", n)
	}
	if n := strings.Count(logs.String(), "audit events lost"); n != 1 {
		t.Errorf("%d log lines for one burst of losses, want 1:\n%s", n, logs.String())
	}
	a.losses.flush()
	if !strings.Contains(logs.String(), `"events":2`) {
		t.Errorf("the losses after the first line were not logged at the end:\n%s", logs.String())
	}
}
