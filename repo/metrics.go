package repo

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"

	"exchange/telemetry"
)

// Metrics are the storage's series: the latency of every database
// operation (watched by a driver CommandMonitor), the waits for the
// embedded database's search slots, and the audit writer's outcomes. A
// nil *Metrics counts nothing.
type Metrics struct {
	operations          *prometheus.HistogramVec
	failures            *prometheus.CounterVec
	searchWaits         *prometheus.CounterVec
	searchWaitedSeconds prometheus.Histogram
	auditWritten        prometheus.Counter
	auditDirect         prometheus.Counter
	auditLost           *prometheus.CounterVec
}

// NewMetrics registers the storage's series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	ns := "exchange"
	m := &Metrics{
		operations: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "db_operation_duration_seconds",
			Help: "Database commands, by collection and command (find, insert, aggregate, ...), from the driver's command monitor.", Buckets: telemetry.LatencyBuckets},
			[]string{"collection", "operation"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "db_operation_failures_total",
			Help: "Database commands that failed (a duplicate key included), by collection and command."}, []string{"collection", "operation"}),
		searchWaits: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "embedded_search_waits_total",
			Help: "Searches that waited for a slot of the embedded database (EMBEDDED_SEARCH_SLOTS), by outcome: admitted, refused (503 after EMBEDDED_SEARCH_QUEUE) or abandoned by the client."}, []string{"outcome"}),
		searchWaitedSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "embedded_search_wait_seconds",
			Help: "How long searches waited for a slot of the embedded database.", Buckets: telemetry.LatencyBuckets}),
		auditWritten: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "audit_events_written_total",
			Help: "Audit events written to audit_events."}),
		auditDirect: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "audit_events_written_directly_total",
			Help: "Audit events their request wrote itself, the queue of AUDIT_BUFFER events being full: a sign that the audit trail holds requests back."}),
		auditLost: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "audit_events_lost_total",
			Help: "Audit events not written, by reason: sign_in_flood (failed sign-ins beyond their rate or share of the queue), write_failed (the request was refused)."}, []string{"reason"}),
	}
	reg.MustRegister(m.operations, m.failures, m.searchWaits, m.searchWaitedSeconds, m.auditWritten, m.auditDirect, m.auditLost)
	return m
}

// commandMonitor watches the driver's commands for their latency. A
// command's collection is known when it starts, its duration when it
// ends: the started ones wait in a map by request id.
type commandMonitor struct {
	m       *Metrics
	started sync.Map // request id -> collection label
}

func (m *Metrics) monitor() *event.CommandMonitor {
	if m == nil {
		return nil
	}
	c := &commandMonitor{m: m}
	return &event.CommandMonitor{
		Started: c.commandStarted,
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
			c.finished(e.RequestID, e.CommandName, e.Duration.Seconds(), false)
		},
		Failed: func(_ context.Context, e *event.CommandFailedEvent) {
			c.finished(e.RequestID, e.CommandName, e.Duration.Seconds(), true)
		},
	}
}

func (c *commandMonitor) commandStarted(_ context.Context, e *event.CommandStartedEvent) {
	c.started.Store(e.RequestID, collectionLabel(e.Command, e.CommandName))
}

func (c *commandMonitor) finished(requestID int64, command string, seconds float64, failed bool) {
	col, ok := c.started.LoadAndDelete(requestID)
	if !ok {
		return
	}
	c.m.operations.WithLabelValues(col.(string), command).Observe(seconds)
	if failed {
		c.m.failures.WithLabelValues(col.(string), command).Inc()
	}
}

// knownCollections bound the collection label: any other name (a
// command on no collection, a test's) is "other".
var knownCollections = map[string]bool{
	colCounters: true, colUsers: true, colOrganizations: true, colMemberships: true, colPatients: true,
	colPatientIdentifiers: true, colStudies: true, colEnrollments: true, colScopeCodes: true, colScopeRequests: true,
	colConsents: true, colDataSources: true, colStudyDataSources: true, colFHIRSources: true, colOAuthClients: true,
	colOAuthTokens: true, colLoginThrottle: true, colIDBlocks: true, colObservations: true, colObservationIdentifier: true,
	colResources: true, colAuditEvents: true, colInvitationRedemptions: true,
	colExportJobs: true, colExportFiles: true, colExportChunks: true,
}

// collectionLabel is the collection a command works on: the value of its
// first element (find: "users"), or of "collection" for getMore.
func collectionLabel(cmd bson.Raw, name string) string {
	var v bson.RawValue
	if name == "getMore" {
		v = cmd.Lookup("collection")
	} else if elems, err := cmd.Elements(); err == nil && len(elems) > 0 {
		v = elems[0].Value()
	}
	if s, ok := v.StringValueOK(); ok && knownCollections[s] {
		return s
	}
	return "other"
}

// composeMonitors is one CommandMonitor calling each of ms (nil ones
// left out): the metrics' and any other watcher's.
func composeMonitors(ms ...*event.CommandMonitor) *event.CommandMonitor {
	var live []*event.CommandMonitor
	for _, m := range ms {
		if m != nil {
			live = append(live, m)
		}
	}
	switch len(live) {
	case 0:
		return nil
	case 1:
		return live[0]
	}
	return &event.CommandMonitor{
		Started: func(ctx context.Context, e *event.CommandStartedEvent) {
			for _, m := range live {
				if m.Started != nil {
					m.Started(ctx, e)
				}
			}
		},
		Succeeded: func(ctx context.Context, e *event.CommandSucceededEvent) {
			for _, m := range live {
				if m.Succeeded != nil {
					m.Succeeded(ctx, e)
				}
			}
		},
		Failed: func(ctx context.Context, e *event.CommandFailedEvent) {
			for _, m := range live {
				if m.Failed != nil {
					m.Failed(ctx, e)
				}
			}
		},
	}
}
