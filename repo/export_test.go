package repo

import (
	"context"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"golang.org/x/time/rate"

	"exchange/domain"
)

// RawDocument returns a stored document as the Mongo shell would see it.
func RawDocument(ctx context.Context, d *DB, collection string, id any) (bson.M, error) {
	var m bson.M
	err := d.c(collection).FindOne(ctx, bson.M{"_id": id}).Decode(&m)
	return m, err
}

// HoldSearchSlots takes every search slot of d until release: the
// embedded database is as busy as it may be. On MongoDB (no slots) it
// takes nothing.
func HoldSearchSlots(d *DB) (release func()) {
	if d.searches == nil {
		return func() {}
	}
	for range cap(d.searches) {
		d.searches <- struct{}{}
	}
	return func() {
		for range cap(d.searches) {
			<-d.searches
		}
	}
}

// ClaimKey is the _id of a claim on (system, value).
func ClaimKey(system, value string) string { return claimKey(system, value) }

// RenewLease runs one tick of d's lease renewal.
func RenewLease(ctx context.Context, d *DB) error { return d.writeLease(ctx) }

// LeaseTimeout is how long a lease may go unrenewed, and a given-up
// intent wait, before the write counts as abandoned.
const LeaseTimeout = leaseTimeout

// IntentTimeout is the age at which an intent counts as abandoned though
// its process runs.
const IntentTimeout = intentTimeout

// SetClock makes now d's clock. It must be set before d's first write
// intent, which starts the lease's renewal: that goroutine reads the
// clock too.
func SetClock(d *DB, now func() time.Time) {
	d.lease.mu.Lock()
	defer d.lease.mu.Unlock()
	if d.lease.held {
		panic("repo.SetClock: the lease is held; set the clock before the first write intent")
	}
	d.now = now
}

// LeaseID is the id of d's instance lease.
func LeaseID(d *DB) string { return d.lease.id }

// EmailKey is the claim key of an email address.
func EmailKey(email string) string { return emailKey(email) }

// InterruptedPatientUpdate runs an update of the patient's identifiers up
// to its replace and stops there, as a process killed at that point
// leaves it: its intent and the claims on the identifiers it adds.
func InterruptedPatientUpdate(ctx context.Context, d *DB, old, p *domain.Patient) error {
	added := missingFrom(p.Identifiers, old.Identifiers)
	in := identifierChange(p.ID, added, missingFrom(old.Identifiers, p.Identifiers))
	if err := d.openIdentifierChange(ctx, in); err != nil {
		return err
	}
	return d.claimIdentifiers(ctx, in, p.ID, added)
}

// ObservationStatsScan is the embedded database's way of summarizing, run
// on any server (DB.ObservationStats picks the aggregation on MongoDB).
func (d *DB) ObservationStatsScan(ctx context.Context, plan *domain.SearchPlan) (domain.ObservationSummary, error) {
	return d.observationStatsScan(ctx, plan)
}

// ObservationStatsGroup is MongoDB's way of summarizing.
func (d *DB) ObservationStatsGroup(ctx context.Context, plan *domain.SearchPlan) (domain.ObservationSummary, error) {
	return d.observationStatsGroup(ctx, plan)
}

// SetWALLimit sets the write-ahead log's bound of the embedded databases
// started next, and returns the undo.
func SetWALLimit(n int64) func() {
	old := walLimit
	walLimit = n
	return func() { walLimit = old }
}

// PatientFilter is the filter of d.ListPatients for q.
func PatientFilter(ctx context.Context, d *DB, q domain.PatientQuery) (bson.D, error) {
	return d.patientFilter(ctx, q)
}

// SetWALCheckEvery sets how often the embedded databases started next look
// at their write-ahead logs, and returns the undo.
func SetWALCheckEvery(d time.Duration) func() {
	old := walCheckEvery
	walCheckEvery = d
	return func() { walCheckEvery = old }
}

// StalledAuditLog is an AuditLog of d whose writer never runs: its queue
// of buffer events fills and stays full, and a full queue is waited on
// for wait.
func StalledAuditLog(d *DB, log *slog.Logger, buffer int, wait time.Duration) *AuditLog {
	a := &AuditLog{db: d, log: log, queue: make(chan domain.AuditEvent, buffer), done: make(chan struct{}),
		signIns: rate.NewLimiter(signInRate, signInBurst), wait: wait}
	a.losses.log = log
	return a
}
