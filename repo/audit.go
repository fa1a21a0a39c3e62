package repo

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"golang.org/x/time/rate"

	"exchange/domain"
)

// colAuditEvents is the audit trail: one document per event, written by an
// AuditLog, read by FHIR as AuditEvent, deleted after AUDIT_RETENTION.
const colAuditEvents = "audit_events"

// auditDoc is a document of audit_events; the field names are those
// fhirsearch's configuration table searches (docs/document-model.md documents them).
type auditDoc struct {
	ID          int64     `bson:"_id"`
	LastUpdated time.Time `bson:"lastUpdated"` // when the event was recorded
	Action      string    `bson:"action"`
	Kind        string    `bson:"kind"`
	Outcome     string    `bson:"outcome,omitempty"` // the error code; absent: success
	UserID      int64     `bson:"userId,omitempty"`
	Agent       string    `bson:"agent,omitempty"`
	ClientID    string    `bson:"clientId,omitempty"`
	// IdentityProvider: who vouched for the user (a federated sign-in's
	// provider, an exchanged ID token's issuer).
	IdentityProvider string   `bson:"identityProvider,omitempty"`
	RequestID        string   `bson:"requestId,omitempty"`
	Address          string   `bson:"address,omitempty"`
	EntityTypes      []string `bson:"entityTypes"`
	Entities         []string `bson:"entities"`
	Query            string   `bson:"query,omitempty"`
	PatientIDs       []int64  `bson:"patientIds"`
}

func toAuditDoc(e domain.AuditEvent) auditDoc {
	return auditDoc{ID: e.ID, LastUpdated: e.Recorded.UTC().Truncate(time.Millisecond), Action: string(e.Action), Kind: string(e.Kind),
		Outcome: string(e.Outcome), UserID: e.UserID, Agent: e.Agent, ClientID: e.ClientID, IdentityProvider: e.IdentityProvider, RequestID: e.RequestID,
		Address: e.Address, EntityTypes: nonNil(e.EntityTypes), Entities: nonNil(e.Entities), Query: e.Query,
		PatientIDs: nonNilIDs(e.PatientIDs)}
}

func (x auditDoc) event() domain.AuditEvent {
	return domain.AuditEvent{ID: x.ID, Recorded: x.LastUpdated, Action: domain.AuditAction(x.Action), Kind: domain.AuditKind(x.Kind),
		Outcome: domain.Code(x.Outcome), UserID: x.UserID, Agent: x.Agent, ClientID: x.ClientID, IdentityProvider: x.IdentityProvider, RequestID: x.RequestID,
		Address: x.Address, EntityTypes: x.EntityTypes, Entities: x.Entities, Query: x.Query, PatientIDs: x.PatientIDs}
}

// AuditEventByID implements domain.AuditStore.
func (d *DB) AuditEventByID(ctx context.Context, id int64) (*domain.AuditEvent, error) {
	var x auditDoc
	if err := d.findOne(ctx, colAuditEvents, bson.M{"_id": id}, &x, fmt.Sprintf("AuditEvent/%d does not exist", id)); err != nil {
		return nil, err
	}
	e := x.event()
	return &e, nil
}

// SearchAuditEvents implements domain.AuditStore.
func (d *DB) SearchAuditEvents(ctx context.Context, plan *domain.SearchPlan) (domain.SearchResult[domain.AuditEvent], error) {
	return runSearch(ctx, d, plan, auditDoc.event)
}

// writeAuditEvents stores events under ids of one block.
func (d *DB) writeAuditEvents(ctx context.Context, events []domain.AuditEvent) error {
	first, err := d.batchIDs(ctx, colAuditEvents, len(events))
	if err != nil {
		return err
	}
	docs := make([]any, len(events))
	for i, e := range events {
		e.ID = first + int64(i)
		docs[i] = toAuditDoc(e)
	}
	_, err = d.c(colAuditEvents).InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	return err
}

// auditDeleteBatch is how many events one delete of DeleteAuditEventsBefore
// removes: a retention that starts late (or shrinks) deletes a backlog in
// steps that each hold the database briefly.
const auditDeleteBatch = 1000

// DeleteAuditEventsBefore deletes the events recorded before t, oldest
// first, auditDeleteBatch at a time, and returns how many went. It stops
// early, without error, when ctx ends.
func (d *DB) DeleteAuditEventsBefore(ctx context.Context, t time.Time) (int64, error) {
	var total int64
	opts := options.Find().SetSort(bson.D{{Key: "lastUpdated", Value: 1}, {Key: "_id", Value: 1}}).
		SetLimit(auditDeleteBatch).SetProjection(bson.D{{Key: "_id", Value: 1}})
	for ctx.Err() == nil {
		var batch []idDoc
		if err := d.findAll(ctx, colAuditEvents, bson.M{"lastUpdated": bson.M{"$lt": t}}, &batch, opts); err != nil {
			return total, err
		}
		if len(batch) == 0 {
			break
		}
		ids := make([]int64, len(batch))
		for i, x := range batch {
			ids[i] = x.ID
		}
		res, err := d.c(colAuditEvents).DeleteMany(ctx, bson.M{"_id": bson.M{"$in": ids}})
		if err != nil {
			return total, err
		}
		total += res.DeletedCount
		if len(batch) < auditDeleteBatch {
			break
		}
	}
	return total, nil
}

// AuditLog is the writer of the audit trail (a domain.Auditor). Record
// queues an event; one goroutine writes the queue in batches of up to
// auditBatch events, at least every auditFlushEvery. The queue is bounded
// (AUDIT_BUFFER), and what happens when it is full depends on who can
// cause the event:
//
//   - An event of a signed-in actor (every event about patient data) is
//     never dropped: Record waits for room, up to auditWait, then writes
//     the event itself, at once; only when that write fails too does it
//     return CodeUnavailable, and the request is answered 503 instead of
//     going on unaudited. A full queue thus slows requests down to what
//     the database writes, and sheds none of them.
//   - A failed sign-in, which anyone can cause without credentials, is
//     rate-limited (signInRate) and may use half of the queue at most:
//     beyond, it is counted (exchange_audit_events_lost_total{reason=
//     "sign_in_flood"}) and summed up in the log, one line per
//     lossLogEvery, never crowding out the events above.
//
// A batch the database refuses three times is lost, counted
// (write_failed) and logged. Close writes what is queued. A crash loses
// what is queued and not yet written: at most the queue's size, and about
// one flush interval of events under normal load.
type AuditLog struct {
	db      *DB
	log     *slog.Logger
	queue   chan domain.AuditEvent
	mu      sync.RWMutex // guards closed against Record's sends (read-locked while sending)
	closed  bool
	done    chan struct{}
	losses  lossReport
	retries []time.Duration
	signIns *rate.Limiter // failed sign-ins recorded (a token bucket)
	wait    time.Duration
}

// Batching of the audit writer.
const (
	auditBatch      = 500
	auditFlushEvery = time.Second
	// auditWait bounds how long an event waits for room in a full queue
	// before its request writes it itself.
	auditWait = 2 * time.Second
	// signInRate and signInBurst bound the failed sign-ins recorded per
	// second (and at once) by one instance.
	signInRate  = 20
	signInBurst = 200
	// directWriteTimeout bounds an event's own write.
	directWriteTimeout = 10 * time.Second
)

// NewAuditLog starts the audit writer of d with a queue of buffer events.
func (d *DB) NewAuditLog(log *slog.Logger, buffer int) *AuditLog {
	a := &AuditLog{db: d, log: log, queue: make(chan domain.AuditEvent, buffer), done: make(chan struct{}),
		retries: []time.Duration{100 * time.Millisecond, time.Second}, signIns: rate.NewLimiter(signInRate, signInBurst), wait: auditWait}
	a.losses.log = log
	go a.run()
	return a
}

var _ domain.Auditor = (*AuditLog)(nil)

// Record implements domain.Auditor (see AuditLog for what a full queue
// does).
func (a *AuditLog) Record(ctx context.Context, e domain.AuditEvent) error {
	if failedSignIn(e) {
		a.recordSignIn(e)
		return nil
	}
	if a.enqueue(ctx, e) {
		return nil
	}
	// Full for auditWait, or closing: the request writes its event.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), directWriteTimeout)
	defer cancel()
	if err := a.db.writeAuditEvents(wctx, []domain.AuditEvent{e}); err != nil {
		a.log.Error("an audit event could not be written: its request is refused", "error", err)
		a.lost(1, "write_failed")
		return domain.Errorf(domain.CodeUnavailable, "the audit trail cannot record this request now; try again later")
	}
	if m := a.db.metrics; m != nil {
		m.auditWritten.Add(1)
		m.auditDirect.Inc()
	}
	return nil
}

// failedSignIn reports whether e is a refused sign-in: an event anyone
// can cause without credentials.
func failedSignIn(e domain.AuditEvent) bool {
	return e.Kind == domain.AuditKindSignIn && e.Outcome != ""
}

// enqueue queues e, waiting up to a.wait (and while ctx lasts) for room;
// false when it could not, or the log is closed.
func (a *AuditLog) enqueue(ctx context.Context, e domain.AuditEvent) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed {
		return false
	}
	select {
	case a.queue <- e:
		return true
	default:
	}
	wait := time.NewTimer(a.wait)
	defer wait.Stop()
	select {
	case a.queue <- e:
		return true
	case <-wait.C:
	case <-ctx.Done():
	}
	return false
}

// recordSignIn queues a failed sign-in if the rate allows and the queue
// is less than half full: the other half is for the events of signed-in
// actors. Else it is counted and logged as lost, never waited for.
func (a *AuditLog) recordSignIn(e domain.AuditEvent) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed || len(a.queue) >= cap(a.queue)/2 || !a.signIns.Allow() {
		a.lost(1, "sign_in_flood")
		return
	}
	select {
	case a.queue <- e:
	default:
		a.lost(1, "sign_in_flood")
	}
}

// Close stops taking events, writes what is queued (until ctx ends) and
// waits for the writer.
func (a *AuditLog) Close(ctx context.Context) error {
	a.mu.Lock()
	if !a.closed {
		a.closed = true
		close(a.queue)
	}
	a.mu.Unlock()
	select {
	case <-a.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("audit trail: %d events not written at shut-down: %w", len(a.queue), ctx.Err())
	}
}

// run writes the queue until Close, then what is left.
func (a *AuditLog) run() {
	defer close(a.done)
	defer a.losses.flush()
	tick := time.NewTicker(auditFlushEvery)
	defer tick.Stop()
	batch := make([]domain.AuditEvent, 0, auditBatch)
	for {
		select {
		case e, ok := <-a.queue:
			if !ok {
				a.write(batch)
				return
			}
			if batch = append(batch, e); len(batch) == auditBatch {
				batch = a.write(batch)
			}
		case <-tick.C:
			batch = a.write(batch)
		}
	}
}

// write stores a batch, trying again after each of a.retries, and returns
// the batch emptied for reuse.
func (a *AuditLog) write(batch []domain.AuditEvent) []domain.AuditEvent {
	if len(batch) == 0 {
		return batch
	}
	var err error
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = a.db.writeAuditEvents(ctx, batch)
		cancel()
		if err == nil || try == len(a.retries) {
			break
		}
		time.Sleep(a.retries[try])
	}
	if err != nil {
		a.log.Error("audit events could not be written", "events", len(batch), "error", err)
		a.lost(len(batch), "write_failed")
	} else if m := a.db.metrics; m != nil {
		m.auditWritten.Add(float64(len(batch)))
	}
	return batch[:0]
}

// lost counts events that will not be written, and says so in the log.
func (a *AuditLog) lost(n int, reason string) {
	if m := a.db.metrics; m != nil {
		m.auditLost.WithLabelValues(reason).Add(float64(n))
	}
	a.losses.report(n, reason)
}

// lossReport logs lost audit events: the first loss at once, then at most
// one line per lossLogEvery with the count since the last line, so a
// full queue under load is one line, not one per request.
type lossReport struct {
	log      *slog.Logger
	mu       sync.Mutex
	last     time.Time
	unlogged int
}

const lossLogEvery = 10 * time.Second

// flush logs the losses not logged yet.
func (r *lossReport) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unlogged > 0 {
		r.log.Error("audit events lost: the audit trail is incomplete", "events", r.unlogged)
		r.unlogged = 0
	}
}

func (r *lossReport) report(n int, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unlogged += n
	if now := time.Now(); now.Sub(r.last) >= lossLogEvery {
		r.log.Error("audit events lost: the audit trail is incomplete", "events", r.unlogged, "reason", reason)
		r.last, r.unlogged = now, 0
	}
}
