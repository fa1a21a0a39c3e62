package repo

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Write intents: how a write of several documents converges without
// transactions. docs/durability.md tables every kind of intent: the
// order of its writes, what a crash leaves, and how it is repaired.
//
// A write of several documents opens an intent (open) before its first
// write: one write_intents document naming what it is about to write.
// When it returns, it closes it (close), saying how it ended (writeEnd):
// done or undone, the intent goes; stopped half way, or with a command
// whose outcome is unknown, it stays, given up, for the repair. An intent
// that outlives its write, by a crash or so, is repaired once abandoned
// (repair.go): rolled back (a create, whose uniqueness was not settled)
// or forward (a change that was checked in full before its first write),
// by its kind's repair, defined beside the write. Who holds an intent,
// and so whether its write may still be running, is its state
// (intentState); the process that holds one has a lease (leases.go).

const (
	colIntents = "write_intents"
	// intentTimeout is the age at which an intent counts as abandoned even
	// though its process runs: no write lasts that long, so the request
	// that wrote it ended without finishing (a panic).
	intentTimeout = 15 * time.Minute
)

// intentKind names a multi-document write, and so how to repair it
// (intentRepairs).
type intentKind string

// The multi-document writes. "Back" kinds are rolled back when abandoned,
// "forward" kinds rolled forward. Each one's write and repair are in the
// file named.
const (
	intentObservations       intentKind = "observations.create" // back: claims of unstored observations go (observations.go)
	intentPatientCreate      intentKind = "patient.create"      // back: without the patient record, its user and claims go (patients.go)
	intentPatientUpdate      intentKind = "patient.update"      // forward: claims the record does not list go (patients.go)
	intentPatientDelete      intentKind = "patient.delete"      // forward: the delete is finished (patients.go)
	intentPractitionerCreate intentKind = "practitioner.create" // back: without the membership, the user goes (users.go)
	intentOrganizationDelete intentKind = "organization.delete" // forward: the delete is finished (organizations.go)
	intentEnroll             intentKind = "enrollments.create"  // forward: every enrollment is made (studies.go)
	intentUnenroll           intentKind = "enrollments.delete"  // forward: enrollments and their answers go (studies.go)
	intentConsents           intentKind = "consents.write"      // forward: every answer is written (studies.go)
	intentInvitationRedeem   intentKind = "invitation.redeem"   // forward: the code is used and the password set (invitations.go)
	intentEHRPull            intentKind = "ehr.pull"            // a lock: the connection's runs still recorded running are interrupted (patientaccess.go)
)

// intentRepairs are the repairs of abandoned intents, by kind (repair),
// each defined beside its write.
var intentRepairs = map[intentKind]func(*DB, context.Context, *intentDoc) error{
	intentObservations:       (*DB).repairObservations,
	intentPatientCreate:      (*DB).undoPatientCreate,
	intentPatientUpdate:      (*DB).repairPatientUpdate,
	intentPatientDelete:      (*DB).repairPatientDelete,
	intentPractitionerCreate: (*DB).undoPractitionerCreate,
	intentOrganizationDelete: (*DB).repairOrganizationDelete,
	intentEnroll:             (*DB).repairEnrollments,
	intentUnenroll:           (*DB).repairUnenrollments,
	intentConsents:           (*DB).repairConsents,
	intentInvitationRedeem:   (*DB).repairRedemption,
	intentEHRPull:            (*DB).interruptPulls,
}

// intentState is where an intent stands: who holds it, and so whether
// its write may still be running (abandoned says when it no longer can).
//
//	open ─> running ─ close: done, undone ─> removed
//	           │ close: half way, unknown
//	           v
//	        givenUp ─ leaseTimeout later ─> abandoned
//	running, adopted ─ lease dead, or intentTimeout ─> abandoned
//	abandoned ─ repair adopts ─> adopted ─ repaired ─> removed
//	adopted ─ repair failed ─> as it was (givenUp, now, when its outcome is unknown)
//
// An intent whose own insert failed with an unknown outcome is put in
// place given up and marked Unbegun (giveUpUnrecorded): its write wrote
// nothing, and its repair only removes it.
type intentState string

const (
	intentRunning intentState = "running" // its write runs, in the process whose lease holds it
	intentGivenUp intentState = "givenUp" // its write returned without settling: no lease holds it
	intentAdopted intentState = "adopted" // a repair runs, in the process whose lease holds it
)

// intentHold is an intent's state and its holder, which move together
// by one compare-and-set (moveIntent).
type intentHold struct {
	State intentState `bson:"state"`
	// Instance is the lease of the process that holds the intent (its
	// writer's while running, its repairer's once adopted); none when it
	// is given up.
	Instance string `bson:"instance"`
	// Since is when the intent entered its state: when its write began,
	// when it was given up, or when it was adopted.
	Since time.Time `bson:"startedAt"`
}

// intentDoc is a document of write_intents. Besides what every intent
// has, each kind sets the fields its repair reads.
type intentDoc struct {
	ID   bson.ObjectID `bson:"_id"`
	Kind intentKind    `bson:"kind"`
	Hold intentHold    `bson:",inline"`
	// Unbegun marks the given-up copy of an intent whose insert failed
	// with an unknown outcome (giveUpUnrecorded): its write stopped there,
	// and its repair settles nothing. It stays so once adopted.
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
	// Began is when a forward write began, which Since no longer says
	// once the intent is given up or adopted: its repair marks its pairs
	// in the intents of the writes that began no later (supersedeEarlier).
	Began time.Time `bson:"began,omitempty"`

	// ehr.pull: the connection whose pulls the lock is.
	ConnectionID int64 `bson:"connectionId,omitempty"`

	// invitation.redeem: the code's record (oauth_tokens _id), the new
	// password's hash and when it changes.
	TokenID      string    `bson:"tokenId,omitempty"`
	PasswordHash string    `bson:"passwordHash,omitempty"`
	ChangedAt    time.Time `bson:"changedAt,omitempty"`
}

// UnmarshalBSON reads an intent; one written before intents had a state
// (none stored) is given up when no instance holds it, running otherwise:
// what its holder then said.
func (in *intentDoc) UnmarshalBSON(data []byte) error {
	type stored intentDoc // without this method
	if err := bson.Unmarshal(data, (*stored)(in)); err != nil {
		return err
	}
	if in.Hold.State == "" {
		in.Hold.State = intentRunning
		if in.Hold.Instance == "" {
			in.Hold.State = intentGivenUp
		}
	}
	return nil
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

// open records the intent in before the first write of a multi-document
// write, running under this process's lease; the caller fills in the
// kind's fields, and may set the _id when the intent is also a lock
// (openIdentifierChange): then a duplicate key says that another write
// holds it. When it fails, the caller fails its write without writing
// anything more (giveUpUnrecorded relies on it).
func (d *DB) open(ctx context.Context, in *intentDoc) error {
	if err := d.hold(ctx); err != nil {
		return err
	}
	if in.ID.IsZero() {
		in.ID = bson.NewObjectID()
	}
	in.Hold = intentHold{State: intentRunning, Instance: d.lease.id, Since: d.nowMillis()}
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

// giveUpUnrecorded gives up (giveUp) the intent of a write whose open
// failed with an unknown outcome, and which so wrote nothing more. Its
// insert may still land, carrying this process's live lease: a write still
// running to every look until intentTimeout (15 minutes), which for an
// identifier change is the patient's identifier lock. In its place goes a
// given-up copy marked Unbegun, whose repair, after leaseTimeout, only
// removes it: one replace, upserted, of the intent as open wrote it. If
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
	copied.Hold, copied.Unbegun = intentHold{State: intentGivenUp, Since: d.nowMillis()}, true
	filter := bson.M{"_id": in.ID, "instance": in.Hold.Instance, "startedAt": in.Hold.Since}
	for range 2 {
		_, err := d.c(colIntents).ReplaceOne(ctx, filter, copied, options.Replace().SetUpsert(true))
		if err == nil || outcomeUnknown(err) {
			return
		}
	}
}

// openForward records the intent of a forward write (enrollments,
// consent answers) and marks the pairs it touches as superseded in every
// other intent touching them. An older write of those pairs that was cut
// short is rolled forward by its repair, which may come a minute later on
// MongoDB (once its process's lease is stale): without the mark it would
// apply its answers over this newer write, bringing back a consent that
// was withdrawn since, or an enrollment that was ended.
func (d *DB) openForward(ctx context.Context, in *intentDoc) error {
	in.Began = d.nowMillis()
	if err := d.open(ctx, in); err != nil {
		return err
	}
	if err := d.supersede(ctx, in, in.Touches, bson.M{}); err != nil {
		// Some marks may have landed, or may still land: an UpdateMany is
		// not atomic across documents, and a definite refusal can come
		// after it changed some. So the intent is given up and rolled
		// forward, as the marks promise the intents they were added to;
		// its repair sends the marks again (supersedeEarlier).
		return d.close(ctx, in, writeHalfWay, fmt.Errorf("record the write intent: %w", err))
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
// writes that began before it, as openForward did, or meant to: its
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

// writeEnd is how a write under an intent ended, and so what close does
// with the intent.
type writeEnd int

const (
	// writeDone: it wrote everything. The intent goes.
	writeDone writeEnd = iota
	// writeUndone: it was refused, and undid what it wrote (or settled it
	// against what is stored). The intent goes.
	writeUndone
	// writeHalfWay: it stopped part way and left what it wrote as it is.
	// The intent stays, given up, for the repair to finish the write (a
	// forward kind) or undo it (a back kind).
	writeHalfWay
	// writeUnknown: a command of it failed with an unknown outcome
	// (outcomeUnknown) and may still be applied, so nothing was settled.
	// The intent stays, given up: its repair settles once the command can
	// no longer land.
	writeUnknown
)

// close ends the intent of a write that returned cause (nil: none), as
// end says, whatever the request's context became: the write is over. It
// returns the write's error: cause, or when there is none, the failure to
// remove the intent. An intent that stays, or fails to be removed, is
// given up (giveUp).
func (d *DB) close(ctx context.Context, in *intentDoc, end writeEnd, cause error) error {
	if end == writeHalfWay || end == writeUnknown {
		d.giveUp(ctx, in)
		return cause
	}
	if err := d.remove(ctx, in); err != nil {
		d.giveUp(ctx, in)
		return cmp.Or(cause, err)
	}
	return cause
}

// forwardEnd is how a write that its repair rolls forward ended, given
// its error: done, or half way, for the repair to finish.
func forwardEnd(err error) writeEnd {
	if err != nil {
		return writeHalfWay
	}
	return writeDone
}

// settledEnd settles what a write that returned cause (nil when it wrote
// everything) wrote, by settle, which undoes or settles it against what
// is stored, and says how the write ended, with its error: done or
// undone when settle succeeded, half way when it failed. Unless cause
// leaves the outcome of its command unknown (outcomeUnknown): that
// command may still be applied after settle has read the store, and
// undo the settle's work (a patient record replaced after its claims were
// settled lists an identifier it does not claim; a record inserted after
// its create was undone has no claims). Then nothing is settled now
// (writeUnknown).
func settledEnd(cause error, settle func() error) (writeEnd, error) {
	if outcomeUnknown(cause) {
		return writeUnknown, cause
	}
	if err := settle(); err != nil {
		return writeHalfWay, undone(cause, err)
	}
	if cause != nil {
		return writeUndone, cause
	}
	return writeDone, nil
}

// remove deletes an intent whose write, or repair, is over. Only the
// intent as its writer (or adopter) holds it goes: a lock intent
// (openIdentifierChange) taken since by another write under the same _id
// stays.
func (d *DB) remove(ctx context.Context, in *intentDoc) error {
	_, err := d.c(colIntents).DeleteOne(context.WithoutCancel(ctx), bson.M{"_id": in.ID, "instance": in.Hold.Instance})
	return err
}

// giveUp hands the intent of a write that returned, half way or with
// its intent unremoved, to no instance, given up as of now: the write is
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
// A remove whose delete was applied but whose reply was lost leaves
// nothing to move, and a lock intent taken since by another write has
// another instance and start: the move, a compare-and-set, leaves both
// alone.
func (d *DB) giveUp(ctx context.Context, in *intentDoc) {
	_ = d.moveIntent(context.WithoutCancel(ctx), in, intentHold{State: intentGivenUp, Since: d.nowMillis()})
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

// moveIntent moves the intent, if it is still as in holds it, to the
// state and holder to; errRepairedElsewhere when it is not.
func (d *DB) moveIntent(ctx context.Context, in *intentDoc, to intentHold) error {
	// FerretDB reads, then writes an update: within this process, the
	// mutex makes the compare-and-set one step; on MongoDB the filter
	// alone is atomic, across processes too.
	d.adopting.Lock()
	defer d.adopting.Unlock()
	res, err := d.c(colIntents).UpdateOne(ctx, bson.M{"_id": in.ID, "instance": in.Hold.Instance, "startedAt": in.Hold.Since},
		bson.M{"$set": bson.M{"state": to.State, "instance": to.Instance, "startedAt": to.Since}})
	switch {
	case err != nil:
		return err
	case res.MatchedCount == 0:
		return errRepairedElsewhere
	}
	in.Hold = to
	return nil
}
