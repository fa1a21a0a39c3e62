package repo_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
	"exchange/fhirsearch"
	"exchange/repo"
	"exchange/repo/repotest"
)

// observationSearch is a plan of a search of every observation.
func observationSearch(t *testing.T) *domain.SearchPlan {
	t.Helper()
	q, err := fhirsearch.NewTranslator(configuredTypes(t), []byte("k"), "https://exchange.example.org/fhir-source", nil).Parse("Observation", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := q.Plan(domain.Scope{})
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// TestEmbeddedSearchSlots: on FerretDB, a search that finds every slot
// taken waits EMBEDDED_SEARCH_QUEUE, then is refused with CodeUnavailable
// and counted; once a slot frees, searches run. MongoDB is never bounded.
func TestEmbeddedSearchSlots(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := repo.NewMetrics(reg)
	db := repotest.NewDBWith(t, repo.Options{Metrics: m, SearchSlots: 1, SearchQueue: 50 * time.Millisecond})
	ctx := context.Background()
	plan := observationSearch(t)
	release := repo.HoldSearchSlots(db)
	_, err := db.SearchObservations(ctx, plan)
	release()
	if !repotest.IsFerretDB(t) {
		if err != nil {
			t.Errorf("a search on MongoDB: %v", err)
		}
		return
	}
	if !domain.IsCode(err, domain.CodeUnavailable) {
		t.Fatalf("a search with every slot taken: %v, want CodeUnavailable", err)
	}
	if _, err := db.SearchObservations(ctx, plan); err != nil {
		t.Errorf("a search with a slot free: %v", err)
	}
	if n := counterValue(t, reg, "exchange_embedded_search_waits_total", "refused"); n != 1 {
		t.Errorf("refused waits counted: %v, want 1", n)
	}
}

// counterValue is the value of a counter's sample with one label value.
func counterValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			if f.GetName() == name && label == "" && len(s.GetLabel()) == 0 {
				return s.GetCounter().GetValue() // a series without labels
			}
			for _, l := range s.GetLabel() {
				if f.GetName() == name && l.GetValue() == label {
					return s.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{%s}", name, label)
	return 0
}

// TestObservationCount counts from the collection's statistics.
func TestObservationCount(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	docs := make([]any, 7)
	for i := range docs {
		docs[i] = bson.M{"_id": int64(i + 1), "patientId": int64(1)}
	}
	if _, err := repotest.Collection(t, db, "observations").InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	if n, err := db.ObservationCount(ctx); err != nil || n != 7 {
		t.Errorf("ObservationCount = %d, %v; want 7", n, err)
	}
}

// TestAuditLogWritesOnClose: events recorded are written by Close, each
// with an id of its own, and read back as they were recorded; an event
// recorded after Close is written by its request itself.
func TestAuditLogWritesOnClose(t *testing.T) {
	reg := prometheus.NewRegistry()
	db := repotest.NewDBWith(t, repo.Options{Metrics: repo.NewMetrics(reg)})
	ctx := context.Background()
	var logs bytes.Buffer
	a := db.NewAuditLog(slog.New(slog.NewJSONHandler(&logs, nil)), 100)
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for i := range 30 {
		if err := a.Record(ctx, domain.AuditEvent{Recorded: at.Add(time.Duration(i) * time.Second), Action: domain.AuditRead, Kind: domain.AuditKindRead,
			UserID: 3, Agent: "Practitioner/3", ClientID: "app", RequestID: "req", Address: "10.0.0.1",
			EntityTypes: []string{"Observation"}, Entities: []string{"Observation/9"}, PatientIDs: []int64{4, 5}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := repotest.Collection(t, db, "audit_events").CountDocuments(ctx, bson.D{}); n != 30 {
		t.Fatalf("%d events written, want 30", n)
	}
	e, err := db.AuditEventByID(ctx, 30)
	if err != nil || e.Agent != "Practitioner/3" || e.ClientID != "app" || !e.Recorded.Equal(at.Add(29*time.Second)) ||
		len(e.PatientIDs) != 2 || e.Entities[0] != "Observation/9" || e.Outcome != "" {
		t.Errorf("AuditEvent/30 = %+v, %v", e, err)
	}
	if err := a.Record(ctx, domain.AuditEvent{Recorded: at, UserID: 3, PatientIDs: []int64{4}}); err != nil {
		t.Fatalf("an event after Close: %v", err)
	}
	if n, _ := repotest.Collection(t, db, "audit_events").CountDocuments(ctx, bson.D{}); n != 31 {
		t.Errorf("%d events written, want 31: the one after Close too", n)
	}
}

// TestAuditFullQueueLosesNoPatientEvent: with the queue full and its
// writer stalled, an event of a signed-in actor waits, then is written by
// its request: none is lost, where the old writer dropped them. A flood
// of failed sign-ins takes half the queue at most and never makes the
// others wait longer.
func TestAuditFullQueueLosesNoPatientEvent(t *testing.T) {
	reg := prometheus.NewRegistry()
	db := repotest.NewDBWith(t, repo.Options{Metrics: repo.NewMetrics(reg)})
	ctx := context.Background()
	a := repo.StalledAuditLog(db, slog.New(slog.DiscardHandler), 4, 20*time.Millisecond)
	for range 50 {
		if err := a.Record(ctx, domain.AuditEvent{Kind: domain.AuditKindSignIn, Outcome: domain.CodeLogin, Address: "198.51.100.7"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := counterValue(t, reg, "exchange_audit_events_lost_total", "sign_in_flood"); n != 48 {
		t.Errorf("failed sign-ins dropped: %v, want 48 (two fit in half the queue)", n)
	}
	// Two events of the patient fit in the other half at once; the rest
	// wait, then are written directly.
	for i := range 6 {
		started := time.Now()
		if err := a.Record(ctx, domain.AuditEvent{Action: domain.AuditRead, Kind: domain.AuditKindSearch, UserID: 3, Agent: "Practitioner/3",
			EntityTypes: []string{"Observation"}, PatientIDs: []int64{7}, Query: fmt.Sprintf("patient=7&n=%d", i)}); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if waited := time.Since(started); i < 2 && waited > 10*time.Millisecond {
			t.Errorf("event %d waited %v with room in the queue", i, waited)
		}
	}
	n, err := repotest.Collection(t, db, "audit_events").CountDocuments(ctx, bson.M{"patientIds": int64(7)})
	if err != nil || n != 4 {
		t.Errorf("%d events of patient 7 written directly (%v), want 4; 2 wait in the queue", n, err)
	}
	if got := counterValue(t, reg, "exchange_audit_events_written_directly_total", ""); got != 4 {
		t.Errorf("written directly: %v, want 4", got)
	}
}

// TestDeleteAuditEventsBefore deletes the older events, in batches, and
// keeps the rest.
func TestDeleteAuditEventsBefore(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	cutoff := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var docs []any
	for i := range 2510 {
		when := cutoff.Add(-time.Duration(i+1) * time.Minute)
		if i >= 2500 {
			when = cutoff.Add(time.Duration(i) * time.Minute)
		}
		docs = append(docs, bson.M{"_id": int64(i + 1), "lastUpdated": when, "patientIds": bson.A{}})
	}
	col := repotest.Collection(t, db, "audit_events")
	if _, err := col.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	n, err := db.DeleteAuditEventsBefore(ctx, cutoff)
	if err != nil || n != 2500 {
		t.Errorf("deleted %d, %v; want 2500", n, err)
	}
	if left, _ := col.CountDocuments(ctx, bson.D{}); left != 10 {
		t.Errorf("%d events left, want 10", left)
	}
}
