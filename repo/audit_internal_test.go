package repo

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/time/rate"

	"exchange/domain"
)

// TestFailedSignInFloodIsNeverSilent: failed sign-ins beyond their share
// of the queue are dropped without blocking, counted and logged, once
// for a burst.
func TestFailedSignInFloodIsNeverSilent(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	// No writer runs: half of the queue of four fills.
	a := &AuditLog{db: &DB{metrics: m}, log: log, queue: make(chan domain.AuditEvent, 4), done: make(chan struct{}), signIns: rate.NewLimiter(100, 100)}
	a.losses.log = log
	for range 5 {
		if err := a.Record(context.Background(), domain.AuditEvent{Kind: domain.AuditKindSignIn, Outcome: domain.CodeLogin}); err != nil {
			t.Fatal(err)
		}
	}
	if n := testutil.ToFloat64(m.auditLost.WithLabelValues("sign_in_flood")); n != 3 {
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
