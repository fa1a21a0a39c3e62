package repo

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

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
	a := &AuditLog{db: &DB{metrics: m}, log: log, queue: make(chan domain.AuditEvent, 4), done: make(chan struct{}), signIns: newRateLimit(100, 100)}
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

// TestSignInRate: the bucket lets burst through at once, then rate a
// second.
func TestSignInRate(t *testing.T) {
	r := newRateLimit(10, 3)
	now := time.Now()
	got := 0
	for range 10 {
		if r.allow(now) {
			got++
		}
	}
	if got != 3 {
		t.Errorf("%d allowed at once, want the burst of 3", got)
	}
	if !r.allow(now.Add(100*time.Millisecond)) || r.allow(now.Add(100*time.Millisecond)) {
		t.Error("a tenth of a second later, want one more and no second")
	}
}
