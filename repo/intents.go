package repo

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"exchange/domain"
)

// Write intents and instance leases: how a write that spans documents
// converges without transactions (the package doc states the design).
//
// A write that touches several documents first inserts one intent
// document naming what it is about to write, and deletes it after its
// last write. An intent that outlives its write marks a write that was
// cut short; it is abandoned once the process that wrote it is gone (or,
// when the write returned without removing it, leaseTimeout after: giveUp),
// and repairing it rolls the write back (a create, whose uniqueness was not
// settled) or forward (a change that was checked in full before its
// first write). A write whose command returned an unknown outcome
// (outcomeUnknown) leaves its settle to that repair too (settleWrite);
// one whose intent insert returned so puts a given-up copy in its place
// (giveUpUnrecorded).
// Every process that writes intents holds a lease, an
// instance document it renews; a lease not renewed for leaseTimeout
// belongs to a dead process.

const (
	colIntents = "write_intents"
	// leaseRenew is how often a process renews its lease; leaseTimeout
	// how long a lease may go unrenewed before its process counts as dead.
	leaseRenew   = 10 * time.Second
	leaseTimeout = 45 * time.Second
	// intentTimeout is the age at which an intent counts as abandoned even
	// though its process runs: no write lasts that long, so the request
	// that wrote it ended without finishing (a panic).
	intentTimeout = 15 * time.Minute
)

// intentKind names a multi-document write, and so how to repair it.
type intentKind string

// The multi-document writes. "Back" kinds are rolled back when abandoned,
// "forward" kinds rolled forward.
const (
	intentObservations       intentKind = "observations.create" // back: claims of unstored observations go
	intentPatientCreate      intentKind = "patient.create"      // back: without the patient record, its user and claims go
	intentPatientUpdate      intentKind = "patient.update"      // forward: claims the record does not list go
	intentPatientDelete      intentKind = "patient.delete"      // forward: the delete is finished
	intentPractitionerCreate intentKind = "practitioner.create" // back: without the membership, the user goes
	intentOrganizationDelete intentKind = "organization.delete" // forward: the delete is finished
	intentEnroll             intentKind = "enrollments.create"  // forward: every enrollment is made
	intentUnenroll           intentKind = "enrollments.delete"  // forward: enrollments and their answers go
	intentConsents           intentKind = "consents.write"      // forward: every answer is written
	intentInvitationRedeem   intentKind = "invitation.redeem"   // forward: the code is used and the password set (invitations.go)
)

// intentDoc is a document of write_intents. Besides what every intent
// has, each kind sets the fields its repair reads.
type intentDoc struct {
	ID        bson.ObjectID `bson:"_id"`
	Kind      intentKind    `bson:"kind"`
	Instance  string        `bson:"instance"` // the lease of the process writing it
	StartedAt time.Time     `bson:"startedAt"`
	// Unbegun marks the given-up copy of an intent whose insert failed
	// with an unknown outcome (giveUpUnrecorded): its write stopped there,
	// and its repair settles nothing.
	Unbegun bool `bson:"unbegun,omitempty"`
	// Keys are the claim keys (claimKey) the write may take: how a write
	// that collides with one finds the intent. Observation intents list
	// none: their claims name an id of FirstID..LastID, by which a
	// colliding write finds them (settleObservationClaim).
	Keys []string `bson:"keys"`

	FirstID        int64           `bson:"firstId,omitempty"` // observations: the ids reserved
	LastID         int64           `bson:"lastId,omitempty"`
	UserID         int64           `bson:"userId,omitempty"`
	PatientID      int64           `bson:"patientId,omitempty"`
	OrganizationID int64           `bson:"organizationId,omitempty"`
	StudyID        int64           `bson:"studyId,omitempty"`
	PatientIDs     []int64         `bson:"patientIds,omitempty"`
	Identifiers    []codedValueDoc `bson:"identifiers,omitempty"` // patient.update: the claims taken or released
	Enrollments    []enrollmentDoc `bson:"enrollments,omitempty"`
	ConsentOp      consentOp       `bson:"consentOp,omitempty"`
	Consents       []consentDoc    `bson:"consents,omitempty"`
	// Touches are the (patient, study) pairs (pairKey) whose enrollment or
	// answers a forward write changes; Superseded, those a later write
	// changed since, which this one's repair leaves as they are.
	Touches    []string `bson:"touches,omitempty"`
	Superseded []string `bson:"superseded,omitempty"`
	// Began is when a forward write began, which StartedAt no longer says
	// once the intent is given up or adopted: its repair marks its pairs
	// in the intents of the writes that began no later (supersedeEarlier).
	Began time.Time `bson:"began,omitempty"`

	// invitation.redeem: the code's record (oauth_tokens _id), the new
	// password's hash and when it changes.
	TokenID      string    `bson:"tokenId,omitempty"`
	PasswordHash string    `bson:"passwordHash,omitempty"`
	ChangedAt    time.Time `bson:"changedAt,omitempty"`
}

// claimKey is the key of a claim on (system, value): fixed length, and
// unambiguous whatever the two strings hold.
func claimKey(system, value string) string {
	// The hash of "<len(system)>:<system>|<value>", its input made in a
	// buffer on the stack when it fits: every observation stored takes a
	// claim, and formatting the input cost two allocations of the three.
	var buf [256]byte
	in := append(strconv.AppendInt(buf[:0], int64(len(system)), 10), ':')
	in = append(append(append(in, system...), '|'), value...)
	sum := sha256.Sum256(in)
	var hexSum [2 * sha256.Size]byte
	hex.Encode(hexSum[:], sum[:])
	return string(hexSum[:])
}

// instanceDoc is a document of service_instances: one process's lease.
type instanceDoc struct {
	ID        string    `bson:"_id"`
	Host      string    `bson:"host"`
	PID       int       `bson:"pid"`
	StartedAt time.Time `bson:"startedAt"`
	Renewed   time.Time `bson:"renewed"`
}

// lease is this process's instance document and the loop renewing it.
type lease struct {
	id   string
	mu   sync.Mutex
	held bool
	stop chan struct{}
	done chan struct{}
}

func newLease() *lease {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return &lease{id: hex.EncodeToString(b)}
}

// hold makes sure the lease is written and renewed; the first intent of
// a process takes it.
func (d *DB) hold(ctx context.Context) error {
	l := d.lease
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held {
		return nil
	}
	if err := d.writeLease(ctx); err != nil {
		return fmt.Errorf("take the instance lease: %w", err)
	}
	l.held, l.stop, l.done = true, make(chan struct{}), make(chan struct{})
	go d.renew(l.stop, l.done)
	return nil
}

// writeLease renews this process's lease, writing it anew when it is
// gone: another instance removes a lease left unrenewed for leaseTimeout
// (this process stalled, or could not reach the database), and without
// it every intent this process writes would look abandoned to the others,
// which would repair writes still running.
func (d *DB) writeLease(ctx context.Context) error {
	host, _ := os.Hostname()
	now := d.nowMillis()
	_, err := d.c(colInstances).UpdateOne(ctx, bson.M{"_id": d.lease.id},
		bson.M{"$set": bson.M{"renewed": now}, "$setOnInsert": bson.M{"host": host, "pid": os.Getpid(), "startedAt": now}},
		options.UpdateOne().SetUpsert(true))
	return err
}

// renew keeps the lease fresh until stop closes; a failed renewal is
// tried again at the next tick.
func (d *DB) renew(stop, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(leaseRenew)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), leaseRenew)
			_ = d.writeLease(ctx)
			cancel()
		}
	}
}

// release ends the lease of a process closing cleanly: its intents are
// all ended, and the document goes.
func (d *DB) release(ctx context.Context) {
	l := d.lease
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held {
		return
	}
	close(l.stop)
	<-l.done
	l.held = false
	_, _ = d.c(colInstances).DeleteOne(ctx, bson.M{"_id": l.id})
}

// begin records an intent before the first write of a multi-document
// write; the caller fills in the kind's fields, and may set the _id when
// the intent is also a lock (beginIdentifierChange): then a duplicate key
// says that another write holds it. When it fails, the caller fails its
// write without writing anything more (giveUpUnrecorded relies on it).
func (d *DB) begin(ctx context.Context, in *intentDoc) error {
	if err := d.hold(ctx); err != nil {
		return err
	}
	if in.ID.IsZero() {
		in.ID = bson.NewObjectID()
	}
	in.Instance, in.StartedAt = d.lease.id, d.nowMillis()
	if in.Keys == nil {
		in.Keys = []string{}
	}
	if _, err := d.c(colIntents).InsertOne(ctx, in); err != nil {
		if outcomeUnknown(err) {
			d.giveUpUnrecorded(ctx, in)
		}
		return fmt.Errorf("record the write intent: %w", err)
	}
	return nil
}

// giveUpUnrecorded gives up (giveUp) the intent of a write whose begin
// failed with an unknown outcome, and which so wrote nothing more. Its
// insert may still land, carrying this process's live lease: a write still
// running to every look until intentTimeout (15 minutes), which for an
// identifier change is the patient's identifier lock. In its place goes a
// given-up copy marked Unbegun, whose repair, after leaseTimeout, only
// removes it: one replace, upserted, of the intent as begin wrote it. If
// the insert was lost, the copy is inserted; if it landed, it is replaced;
// if it lands later, it is a duplicate key and refused. A lock intent of
// another write under the same _id has another instance and start: the
// upsert, refused as a duplicate, leaves it alone. A refusal is tried once
// more: the insert may have landed between the upsert's match, which found
// nothing, and its insert, refused then as a duplicate of it; the second
// try matches it. If the replace fails, the intent, if it lands, waits for
// intentTimeout.
func (d *DB) giveUpUnrecorded(ctx context.Context, in *intentDoc) {
	ctx = context.WithoutCancel(ctx)
	copied := *in
	copied.Instance, copied.StartedAt, copied.Unbegun = noInstance, d.nowMillis(), true
	filter := bson.M{"_id": in.ID, "instance": in.Instance, "startedAt": in.StartedAt}
	for range 2 {
		_, err := d.c(colIntents).ReplaceOne(ctx, filter, copied, options.Replace().SetUpsert(true))
		if err == nil || outcomeUnknown(err) {
			return
		}
	}
}

// end removes an intent after its write's last step, whatever the
// request's context became: the write is over. Only the intent as its
// writer (or adopter) holds it goes: a lock intent (beginIdentifierChange)
// taken since by another write under the same _id stays.
func (d *DB) end(ctx context.Context, in *intentDoc) error {
	_, err := d.c(colIntents).DeleteOne(context.WithoutCancel(ctx), bson.M{"_id": in.ID, "instance": in.Instance})
	return err
}

// beginForward records the intent of a forward write (enrollments,
// consent answers) and marks the pairs it touches as superseded in every
// other intent touching them. An older write of those pairs that was cut
// short is rolled forward by its repair, which may come a minute later on
// MongoDB (once its process's lease is stale): without the mark it would
// apply its answers over this newer write, bringing back a consent that
// was withdrawn since, or an enrollment that was ended.
func (d *DB) beginForward(ctx context.Context, in *intentDoc) error {
	in.Began = d.nowMillis()
	if err := d.begin(ctx, in); err != nil {
		return err
	}
	if err := d.supersede(ctx, in, in.Touches, bson.M{}); err != nil {
		// Some marks may have landed, or may still land: an UpdateMany is
		// not atomic across documents, and a definite refusal can come
		// after it changed some. So the intent is given up and rolled
		// forward, as the marks promise the intents they were added to;
		// its repair sends the marks again (supersedeEarlier).
		return d.finish(ctx, in, fmt.Errorf("record the write intent: %w", err), false)
	}
	return nil
}

// supersede marks the pairs, of the forward write in, as superseded in
// the other intents touching them that filter selects.
func (d *DB) supersede(ctx context.Context, in *intentDoc, pairs []string, filter bson.M) error {
	if len(pairs) == 0 {
		return nil
	}
	filter["_id"], filter["touches"] = bson.M{"$ne": in.ID}, bson.M{"$in": pairs}
	_, err := d.c(colIntents).UpdateMany(ctx, filter, bson.M{"$addToSet": bson.M{"superseded": bson.M{"$each": pairs}}})
	return err
}

// supersedeEarlier marks, before the repair of a forward write rolls it
// forward, the pairs it still holds (current) in the intents of the
// writes that began before it, as beginForward did, or meant to: its
// marks may have been refused, all or some, or lost on the wire, and then
// the repair of an earlier write cut short, coming after this one's (its
// process dies later), would write its answers over this write's,
// bringing back a consent that was withdrawn. The intents of writes that
// began after it are left alone: those supersede it. A write that began
// in the same millisecond (Began's precision, which two requests of one
// process share easily) counts as earlier: which came first cannot be
// told, and of the two repairs the first then marks the other, which
// leaves the pair as the first wrote it instead of undoing it. A pair
// another write marked in this one since, whatever its start (two writes
// whose marks crossed), is left alone: that write's repair writes it.
// Intents written before Began was (none set) neither mark nor are
// marked.
func (d *DB) supersedeEarlier(ctx context.Context, in *intentDoc) error {
	if in.Began.IsZero() {
		return nil
	}
	held := slices.DeleteFunc(slices.Clone(in.Touches), func(pair string) bool { return slices.Contains(in.Superseded, pair) })
	return d.supersede(ctx, in, held, bson.M{"began": bson.M{"$lte": in.Began}})
}

// pairKey is the key of a (patient, study) pair in Touches.
func pairKey(patientID, studyID int64) string {
	return strconv.FormatInt(patientID, 10) + "/" + strconv.FormatInt(studyID, 10)
}

// touch adds the pair to the pairs the intent's write changes.
func (in *intentDoc) touch(patientID, studyID int64) {
	if k := pairKey(patientID, studyID); !slices.Contains(in.Touches, k) {
		in.Touches = append(in.Touches, k)
	}
}

// current says whether the pair is still the intent's to write: no later
// write changed it.
func (in *intentDoc) current(patientID, studyID int64) bool {
	return !slices.Contains(in.Superseded, pairKey(patientID, studyID))
}

// finish ends the intent of a write that returned cause (conclude), and
// returns cause, or, when the write succeeded, the failure to remove its
// intent.
func (d *DB) finish(ctx context.Context, in *intentDoc, cause error, settled bool) error {
	if err := d.conclude(ctx, in, cause == nil || settled); cause == nil {
		return err
	}
	return cause
}

// conclude ends the intent of a write that returned: when the write settled
// (it succeeded, or undid itself), the intent goes; when it failed half
// way, or the intent could not be removed, it stays for the repair, given
// up (giveUp). It returns the failure to remove it.
func (d *DB) conclude(ctx context.Context, in *intentDoc, settled bool) error {
	if !settled {
		d.giveUp(ctx, in)
		return nil
	}
	err := d.end(ctx, in)
	if err != nil {
		d.giveUp(ctx, in)
	}
	return err
}

// giveUp hands the intent of a write that returned, half way or with
// its intent unremoved, to no instance, as started now: the write is
// over, so the repair need not wait for intentTimeout (this process's
// lease is alive), during which the next write that finds the intent in
// its way takes it for a write still running and is refused: an update
// of the patient's identifiers, whose intent is the patient's identifier
// lock, for 15 minutes after one failed settle. But it is not repaired
// at once either: a write that returned a network error was sent, and
// the server may still apply it (the connection was cut, not the
// command); a repair before it lands would settle a state the late write
// then changes (a patient record replaced after its claims were settled
// lists an identifier it no longer claims). The intent counts as
// abandoned leaseTimeout after it was given up (abandoned), the time
// after which the package assumes no write of a dead process is still in
// flight. If the move fails, the intent keeps waiting for intentTimeout.
// An end whose delete was applied but whose reply was lost leaves
// nothing to move, and a lock intent taken since by another write has
// another instance and start: the move, a compare-and-set, leaves both
// alone.
func (d *DB) giveUp(ctx context.Context, in *intentDoc) {
	_ = d.moveIntent(context.WithoutCancel(ctx), in, noInstance, d.nowMillis())
}

// noInstance is the instance of a given-up intent: no lease has its id,
// and its start is when it was given up (giveUp).
const noInstance = ""

// settleWrite ends the intent of a write that returned cause (nil when it
// succeeded) after settle, which undoes or settles against what is stored
// what the write did (undone), unless cause leaves the outcome of its
// command unknown (outcomeUnknown): that command may still be applied
// after settle has read the store, and undo the settle's work (a patient
// record replaced after its claims were settled lists an identifier it
// does not claim; a record inserted after its create was undone has no
// claims). Then nothing is settled now and the intent is given up
// (giveUp): its repair settles once the command can no longer land.
func (d *DB) settleWrite(ctx context.Context, in *intentDoc, cause error, settle func() error) error {
	if outcomeUnknown(cause) {
		return d.finish(ctx, in, cause, false)
	}
	err := settle()
	return d.finish(ctx, in, undone(cause, err), err == nil)
}

// outcomeUnknown says whether err leaves unknown whether the server applied
// the command that returned it: the connection was lost, or the command
// or its context timed out or was cancelled, while it may have been in
// flight. Such a command may have been applied, or still be, on a
// connection the server has not yet found closed; a definite error from
// the server (a duplicate key, a refused document) says it was not.
func outcomeUnknown(err error) bool {
	return err != nil && (mongo.IsNetworkError(err) || mongo.IsTimeout(err) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}

// undone is the error of a write that failed with cause and then undid
// (or settled) what it wrote, which failed with undo.
func undone(cause, undo error) error {
	switch {
	case undo == nil:
		return cause
	case cause == nil:
		return undo
	}
	return fmt.Errorf("%w (and undoing the partial write failed: %v)", cause, undo)
}

// abandoned says whether an intent's write can no longer be running.
func (d *DB) abandoned(ctx context.Context, in *intentDoc, now time.Time, exclusive bool) (bool, error) {
	switch {
	case exclusive || now.Sub(in.StartedAt) > intentTimeout:
		return true, nil
	case in.Instance == noInstance: // given up: its last write may still land
		return now.Sub(in.StartedAt) > leaseTimeout, nil
	case in.Instance == d.lease.id:
		return false, nil
	}
	return d.leaseLapsed(ctx, in.Instance, now)
}

// leaseLapsed reports whether the process holding the instance lease is
// gone: its lease is removed, or unrenewed for leaseTimeout. What the
// process was doing (a write, an export job) can no longer be running.
func (d *DB) leaseLapsed(ctx context.Context, instance string, now time.Time) (bool, error) {
	var owner instanceDoc
	err := d.c(colInstances).FindOne(ctx, bson.M{"_id": instance}).Decode(&owner)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return now.Sub(owner.Renewed) > leaseTimeout, nil
}

// settleKey makes way for a write (under the intent own, if any) that
// found the claim key taken by an owner that is not stored: abandoned
// intents holding the key are repaired. live says that another running
// write holds it.
func (d *DB) settleKey(ctx context.Context, key string, own *intentDoc) (live bool, err error) {
	return d.settleIntents(ctx, bson.M{"keys": key}, own)
}

// settleObservationClaim is settleKey for a claim on an observation key
// whose owner, the observation id it names, is not stored. Observation
// intents name the ids they reserved, not the keys they claim (a batch of
// 1,000 listed 64 KiB of keys, and writing and removing that intent cost
// the embedded database more CPU per batch than the batch's own
// checks): the intents that may hold the claim are those whose range
// covers its owner. Every claim of a batch names an id of the batch's
// range, written after its intent, so a claim of a write in flight is
// found exactly as by its key.
func (d *DB) settleObservationClaim(ctx context.Context, owner int64, own *intentDoc) (live bool, err error) {
	return d.settleIntents(ctx, observationIntentsOf(owner), own)
}

// observationIntentsOf selects the observation intents whose reserved
// ids include id.
func observationIntentsOf(id int64) bson.M {
	return bson.M{"kind": intentObservations, "firstId": bson.M{"$lte": id}, "lastId": bson.M{"$gte": id}}
}

// settleIntents repairs the abandoned intents among those filter selects
// (but own); live says that another running write holds one of them.
func (d *DB) settleIntents(ctx context.Context, filter bson.M, own *intentDoc) (live bool, err error) {
	var held []intentDoc
	if err := d.findAll(ctx, colIntents, filter, &held); err != nil {
		return false, err
	}
	now := d.now()
	for i := range held {
		in := &held[i]
		if own != nil && in.ID == own.ID {
			continue
		}
		gone, err := d.abandoned(ctx, in, now, false)
		if err != nil {
			return false, err
		}
		if !gone {
			live = true
			continue
		}
		switch err := d.repair(ctx, in); {
		case errors.Is(err, errRepairedElsewhere):
			live = true
		case err != nil:
			return false, err
		}
	}
	return live, nil
}

// errRepairedElsewhere: another process, or another request of this one,
// adopted the intent first and repairs it.
var errRepairedElsewhere = errors.New("the write intent is being repaired elsewhere")

// repair settles one abandoned intent, then removes it. It adopts the
// intent first: one compare-and-set moves it, as it was read, to this
// process's lease with a fresh start. Of the processes (or requests) that
// found it abandoned only one repairs it (the others get
// errRepairedElsewhere), and every later look sees a running write.
// Without it two repairs of one intent could run at once, and a repair
// that read the state before the other ended the intent could act on it
// after a new write had started: a repair of a patient update would
// release the claim that a later update of the patient, begun once the
// intent was gone, relies on. A repair that fails with a definite error
// gives the intent back to its writer and start, abandoned still, for the
// next sweep (or colliding write) to try again; one whose own
// command failed with an unknown outcome (outcomeUnknown) gives it back
// given up as of now (giveUp), as a write does: that command may still
// land, and a repair at once, and the write begun after it, would be
// undone by it (a late release of a claim the next update made again).
// So does one whose adoption failed so (giveUpAdoption): landed
// unanswered, it would hold the intent for intentTimeout.
func (d *DB) repair(ctx context.Context, in *intentDoc) error {
	if err := d.hold(ctx); err != nil {
		return err
	}
	writer, began := in.Instance, in.StartedAt
	adopted := d.nowMillis()
	if !adopted.After(began) {
		adopted = began.Add(time.Millisecond)
	}
	if err := d.moveIntent(ctx, in, d.lease.id, adopted); err != nil {
		if outcomeUnknown(err) {
			d.giveUpAdoption(ctx, in, adopted)
		}
		return err
	}
	err := d.settleAbandoned(ctx, in)
	if err == nil {
		err = d.end(ctx, in)
	}
	if err != nil {
		if outcomeUnknown(err) {
			writer, began = noInstance, d.nowMillis()
		}
		_ = d.moveIntent(context.WithoutCancel(ctx), in, writer, began)
		return fmt.Errorf("repair the %s write intent %s: %w", in.Kind, in.ID.Hex(), err)
	}
	return nil
}

// giveUpAdoption gives up (giveUp), as of adopted, the intent whose
// adoption by repair failed with an unknown outcome. The adoption may have
// landed unanswered, or still land: the intent would then be held by this
// process's live lease, a write still running to every look until
// intentTimeout (for an identifier change, the patient's identifier lock).
// Two compare-and-sets, each of one state the intent may be in: as read
// (then a late adoption, which matches only that state, is refused), and
// as adopted. If both fail, another process moved it (it repairs it), or
// the give-up was cut too and the intent waits for intentTimeout.
func (d *DB) giveUpAdoption(ctx context.Context, in *intentDoc, adopted time.Time) {
	ctx = context.WithoutCancel(ctx)
	if err := d.moveIntent(ctx, in, noInstance, adopted); !errors.Is(err, errRepairedElsewhere) {
		return
	}
	landed := *in
	landed.Instance, landed.StartedAt = d.lease.id, adopted
	_ = d.moveIntent(ctx, &landed, noInstance, adopted)
}

// moveIntent hands the intent, if it is still as in holds it, to the
// process of the lease instance, as started then; errRepairedElsewhere
// when it is not.
func (d *DB) moveIntent(ctx context.Context, in *intentDoc, instance string, started time.Time) error {
	// FerretDB reads, then writes an update: within this process, the
	// mutex makes the compare-and-set one step; on MongoDB the filter
	// alone is atomic, across processes too.
	d.adopting.Lock()
	defer d.adopting.Unlock()
	res, err := d.c(colIntents).UpdateOne(ctx, bson.M{"_id": in.ID, "instance": in.Instance, "startedAt": in.StartedAt},
		bson.M{"$set": bson.M{"instance": instance, "startedAt": started}})
	switch {
	case err != nil:
		return err
	case res.MatchedCount == 0:
		return errRepairedElsewhere
	}
	in.Instance, in.StartedAt = instance, started
	return nil
}

// settleAbandoned undoes or finishes, by its kind, the write of an
// abandoned intent.
func (d *DB) settleAbandoned(ctx context.Context, in *intentDoc) error {
	if in.Unbegun {
		// Its write never got past begin: it wrote nothing to undo, and
		// rolling it forward would make from nothing a write that its
		// caller was told failed before any of its documents was written.
		return nil
	}
	if err := d.supersedeEarlier(ctx, in); err != nil {
		return err
	}
	var err error
	switch in.Kind {
	case intentObservations:
		err = d.releaseUnstoredClaims(ctx, in.FirstID, in.LastID)
	case intentPatientCreate:
		err = d.undoPatientCreate(ctx, in)
	case intentPatientUpdate:
		err = d.settlePatientClaims(ctx, in.PatientID, in.Identifiers)
	case intentPatientDelete:
		err = d.deletePatientDocuments(ctx, in.PatientID, in.UserID)
	case intentPractitionerCreate:
		err = d.undoPractitionerCreate(ctx, in)
	case intentOrganizationDelete:
		err = d.deleteOrganizationDocuments(ctx, in.OrganizationID)
	case intentEnroll:
		err = d.insertEnrollments(ctx, slices.DeleteFunc(in.Enrollments, func(e enrollmentDoc) bool { return !in.current(e.PatientID, e.StudyID) }))
	case intentUnenroll:
		err = d.deleteEnrollments(ctx, in.StudyID, slices.DeleteFunc(in.PatientIDs, func(id int64) bool { return !in.current(id, in.StudyID) }))
	case intentConsents:
		err = d.writeConsents(ctx, in.ConsentOp, slices.DeleteFunc(in.Consents, func(c consentDoc) bool { return !in.current(c.PatientID, c.StudyID) }))
	case intentInvitationRedeem:
		if err = d.redeem(ctx, in); domain.IsCode(err, domain.CodeNotFound) {
			err = nil // nothing (more) to do
		}
	default:
		err = fmt.Errorf("unknown kind %q", in.Kind)
	}
	return err
}

// RepairOptions says how much Repair may assume and do.
type RepairOptions struct {
	// Exclusive: no other process can be writing, as when this process
	// started the embedded database; every intent is then abandoned, not
	// only those of dead processes.
	Exclusive bool
	// DryRun reports without changing anything.
	DryRun bool
	// Budget bounds the time spent on intents (0: none); what is left is
	// reported and repaired by a later call.
	Budget time.Duration
	// Scan also looks for identifier claims whose owner is not stored,
	// left by writes of versions before intents: a pass over every
	// claim, for the doctor command.
	Scan bool
}

// RepairReport is what Repair found and did.
type RepairReport struct {
	Intents  int            // intents found
	Repaired map[string]int // abandoned intents repaired (to be, in a dry run), by kind
	Running  int            // intents of writes still running
	Left     int            // abandoned intents the budget left for later
	Orphans  map[string]int // (Scan) claims whose owner is not stored, by collection
	Leases   int            // leases of dead processes removed
	Failed   []error        // intents whose repair failed
	Elapsed  time.Duration
}

// Repair heals what interrupted writes left half done: it repairs every
// abandoned intent, oldest first, removes the leases of dead processes,
// and with Scan releases orphan claims. It is bounded by the number of
// intents (a few: the writes running when a process died), not by the
// size of the store, except for Scan.
func (d *DB) Repair(ctx context.Context, o RepairOptions) (rep RepairReport, err error) {
	started := d.now()
	rep = RepairReport{Repaired: map[string]int{}, Orphans: map[string]int{}}
	defer func() { rep.Elapsed = d.now().Sub(started) }()
	var intents []intentDoc
	if err := d.findAll(ctx, colIntents, bson.D{}, &intents); err != nil {
		return rep, err
	}
	slices.SortFunc(intents, func(a, b intentDoc) int { return a.StartedAt.Compare(b.StartedAt) })
	rep.Intents = len(intents)
	for i := range intents {
		in := &intents[i]
		gone, err := d.abandoned(ctx, in, started, o.Exclusive)
		if err != nil {
			return rep, err
		}
		switch {
		case !gone:
			rep.Running++
		case o.Budget > 0 && d.now().Sub(started) > o.Budget:
			rep.Left++
		case o.DryRun:
			rep.Repaired[string(in.Kind)]++
		default:
			switch err := d.repair(ctx, in); {
			case errors.Is(err, errRepairedElsewhere):
				rep.Running++
			case err != nil:
				rep.Failed = append(rep.Failed, err)
			default:
				rep.Repaired[string(in.Kind)]++
			}
		}
	}
	if err := d.removeDeadLeases(ctx, started, o, &rep); err != nil {
		return rep, err
	}
	if o.Scan {
		if err := d.scanClaims(ctx, o.DryRun, &rep); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// removeDeadLeases deletes the leases of processes that are gone and
// hold no intent any more.
func (d *DB) removeDeadLeases(ctx context.Context, now time.Time, o RepairOptions, rep *RepairReport) error {
	var leases []instanceDoc
	if err := d.findAll(ctx, colInstances, bson.D{}, &leases); err != nil {
		return err
	}
	for _, l := range leases {
		if l.ID == d.lease.id || !o.Exclusive && now.Sub(l.Renewed) <= leaseTimeout {
			continue
		}
		if n, err := d.c(colIntents).CountDocuments(ctx, bson.M{"instance": l.ID}); err != nil || n > 0 {
			continue // its intents come first
		}
		rep.Leases++
		if !o.DryRun {
			if _, err := d.c(colInstances).DeleteOne(ctx, bson.M{"_id": l.ID}); err != nil {
				return err
			}
		}
	}
	return nil
}

// scanClaims releases the identifier claims whose owner is not stored
// and that no write in progress holds: claims left by versions before
// write intents. It reads every claim and every owner id once.
func (d *DB) scanClaims(ctx context.Context, dryRun bool, rep *RepairReport) error {
	for _, s := range []struct{ claims, owners, field string }{
		{colObservationIdentifier, colObservations, "observationId"},
		{colPatientIdentifiers, colPatients, "patientId"},
	} {
		var owners []idDoc
		if err := d.findAll(ctx, s.owners, bson.D{}, &owners, options.Find().SetProjection(bson.M{"_id": 1})); err != nil {
			return err
		}
		stored := make(map[int64]bool, len(owners))
		for _, o := range owners {
			stored[o.ID] = true
		}
		cur, err := d.c(s.claims).Find(ctx, bson.D{}, options.Find().SetProjection(bson.M{"_id": 1, "system": 1, "value": 1, s.field: 1}))
		if err != nil {
			return err
		}
		var candidates []bson.M
		for cur.Next(ctx) {
			var c bson.M
			if err := cur.Decode(&c); err != nil {
				return err
			}
			if owner, _ := c[s.field].(int64); !stored[owner] {
				candidates = append(candidates, c)
			}
		}
		if err := cur.Err(); err != nil {
			return err
		}
		// Writes that began during the pass: their intents, read now,
		// hold their claims; then the owner is looked up again.
		var intents []intentDoc
		if err := d.findAll(ctx, colIntents, bson.D{}, &intents); err != nil {
			return err
		}
		held := map[string]bool{}
		var ranges [][2]int64 // observation intents hold the claims naming their ids
		for _, in := range intents {
			for _, k := range in.Keys {
				held[k] = true
			}
			if in.Kind == intentObservations {
				ranges = append(ranges, [2]int64{in.FirstID, in.LastID})
			}
		}
		var orphans []any
		for _, c := range candidates {
			system, _ := c["system"].(string)
			value, _ := c["value"].(string)
			owner, _ := c[s.field].(int64)
			if held[claimKey(system, value)] ||
				s.claims == colObservationIdentifier && slices.ContainsFunc(ranges, func(r [2]int64) bool { return owner >= r[0] && owner <= r[1] }) {
				continue
			}
			if stored, err := d.exists(ctx, s.owners, c[s.field]); stored || err != nil {
				if err != nil {
					return err
				}
				continue
			}
			orphans = append(orphans, c["_id"])
		}
		rep.Orphans[s.claims] = len(orphans)
		if len(orphans) > 0 && !dryRun {
			if _, err := d.c(s.claims).DeleteMany(ctx, bson.M{"_id": bson.M{"$in": orphans}}); err != nil {
				return err
			}
		}
	}
	return nil
}
