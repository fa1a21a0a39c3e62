package repo_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"

	"exchange/domain"
	"exchange/repo"
	"exchange/repo/repotest"
)

// TestUpdatePatientIsCompareAndSet: two updates read the same record; the
// second to store is refused (CodeVersionMismatch) instead of replacing
// the first's change, and changes nothing: the identifier it would have
// added is not left claimed. Read again, it stores.
func TestUpdatePatientIsCompareAndSet(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	u, p := newPatient("p@example.org", "Before")
	if err := db.CreatePatient(ctx, u, p); err != nil {
		t.Fatal(err)
	}
	read := func() *domain.Patient {
		t.Helper()
		got, err := db.PatientByID(ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	old := read()
	first, second := *old, *old
	first.FamilyName = "After"
	if err := db.UpdatePatient(ctx, old, &first); err != nil {
		t.Fatal(err)
	}
	mrn := domain.Identifier{System: "urn:example:mrn", Value: "1"}
	second.BirthDate, second.Identifiers = "1990-01-02", []domain.Identifier{mrn}
	if err := db.UpdatePatient(ctx, old, &second); !domain.IsCode(err, domain.CodeVersionMismatch) {
		t.Fatalf("an update from a record changed since: %v, want version-mismatch", err)
	}
	if got := read(); got.FamilyName != "After" || got.BirthDate != "" || len(got.Identifiers) != 0 {
		t.Errorf("after the refused update: %+v", got)
	}
	if n, _ := repotest.Collection(t, db, "patient_identifiers").CountDocuments(ctx, map[string]any{}); n != 0 {
		t.Errorf("the refused update left %d identifier claims", n)
	}
	// Applied again to the record as it is, it stores; so does an update
	// within the millisecond of the one before.
	current := read()
	again := *current
	again.BirthDate, again.Identifiers = "1990-01-02", []domain.Identifier{mrn}
	if err := db.UpdatePatient(ctx, current, &again); err != nil {
		t.Fatal(err)
	}
	current = read()
	quick := *current
	quick.FamilyName = "Quick"
	if err := db.UpdatePatient(ctx, current, &quick); err != nil {
		t.Fatal(err)
	}
	if got := read(); got.FamilyName != "Quick" || got.BirthDate != "1990-01-02" || len(got.Identifiers) != 1 || !got.LastUpdated.After(current.LastUpdated) {
		t.Errorf("after the updates: %+v (before: %v)", got, current.LastUpdated)
	}
	if err := db.UpdatePatient(ctx, current, &quick); !domain.IsCode(err, domain.CodeVersionMismatch) {
		t.Errorf("the same update from a record changed since: %v", err)
	}
}

// stepHook runs step, another request, just before the at-th command a
// watched instance sends about patients (their records, claims and
// intents): a deterministic interleaving of two writes on the real store.
type stepHook struct {
	at, sent int
	step     func()
}

func (h *stepHook) started(e *event.CommandStartedEvent) {
	switch coll, _ := e.Command.Lookup(e.CommandName).StringValueOK(); coll {
	case "patients", "patient_identifiers", "write_intents":
	default:
		return
	}
	h.sent++
	if step := h.step; h.sent == h.at && step != nil {
		h.step = nil
		step()
	}
}

// instance opens db's database again, as another instance of the service
// would, with a driver that reports each command to the hook before it
// sends it; it is closed when the test ends.
func (h *stepHook) instance(t *testing.T, db *repo.DB) *repo.DB {
	t.Helper()
	ctx := context.Background()
	watched, err := repo.OpenWith(ctx, repotest.URI(), db.Name(), repo.Options{Monitor: &event.CommandMonitor{
		Started: func(_ context.Context, e *event.CommandStartedEvent) { h.started(e) }}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = watched.Close(ctx) })
	return watched
}

// arm makes the hook run step at the at-th command from now.
func (h *stepHook) arm(at int, step func()) { h.at, h.sent, h.step = at, 0, step }

// identifierUpdateRaces are updates of one patient's identifiers that run
// into each other: A, read from the record as it starts (or as an earlier
// update left it), and C, which reads the record when it runs, at a step
// of A. x and z are identifiers no other patient has, y one that another
// patient has.
var identifierUpdateRaces = []struct {
	name    string
	start   func(x domain.Identifier) []domain.Identifier
	earlier bool // an update of the name lands between A's read and its write: A loses its replace
	a       func(x, y domain.Identifier) []domain.Identifier
	c       func(current []domain.Identifier, x, z domain.Identifier) []domain.Identifier
}{
	{name: "both add x",
		a: func(x, _ domain.Identifier) []domain.Identifier { return []domain.Identifier{x} },
		c: func(cur []domain.Identifier, x, _ domain.Identifier) []domain.Identifier { return with(cur, x) }},
	{name: "A loses to an earlier update, both add x", earlier: true,
		a: func(x, _ domain.Identifier) []domain.Identifier { return []domain.Identifier{x} },
		c: func(cur []domain.Identifier, x, _ domain.Identifier) []domain.Identifier { return with(cur, x) }},
	{name: "A adds x and another's y, C adds x",
		a: func(x, y domain.Identifier) []domain.Identifier { return []domain.Identifier{x, y} },
		c: func(cur []domain.Identifier, x, _ domain.Identifier) []domain.Identifier { return with(cur, x) }},
	{name: "A drops x, C adds z",
		start: func(x domain.Identifier) []domain.Identifier { return []domain.Identifier{x} },
		a:     func(_, _ domain.Identifier) []domain.Identifier { return nil },
		c:     func(cur []domain.Identifier, _, z domain.Identifier) []domain.Identifier { return with(cur, z) }},
	{name: "A loses to an earlier update and drops x, C adds z", earlier: true,
		start: func(x domain.Identifier) []domain.Identifier { return []domain.Identifier{x} },
		a:     func(_, _ domain.Identifier) []domain.Identifier { return nil },
		c:     func(cur []domain.Identifier, _, z domain.Identifier) []domain.Identifier { return with(cur, z) }},
	{name: "A adds x, C drops it",
		a: func(x, _ domain.Identifier) []domain.Identifier { return []domain.Identifier{x} },
		c: func(cur []domain.Identifier, x, _ domain.Identifier) []domain.Identifier {
			return slices.DeleteFunc(slices.Clone(cur), func(id domain.Identifier) bool { return id == x })
		}},
}

func with(ids []domain.Identifier, id domain.Identifier) []domain.Identifier {
	if slices.Contains(ids, id) {
		return ids
	}
	return append(slices.Clone(ids), id)
}

// TestInterleavedIdentifierUpdatesKeepTheRecordsClaims: whatever step of
// an update of a patient's identifiers another update of that patient
// runs at (here on another instance, which A's running write does not
// block in-process), each either stores or is refused, and afterwards
// the patient's claims are exactly the identifiers its stored record
// lists. A stored identifier without its claim could be given to a second
// patient; a claim the record does not list refuses the identifier to
// every other patient forever.
func TestInterleavedIdentifierUpdatesKeepTheRecordsClaims(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	other := repotest.OtherInstance(t, db)
	hook := &stepHook{}
	watched := hook.instance(t, db)
	y := domain.Identifier{System: "urn:example:mrn", Value: "taken"}
	if u, q := newPatient("q@example.org", "Q", y); db.CreatePatient(ctx, u, q) != nil {
		t.Fatal("create the patient holding y")
	}
	refusal := func(err error) bool {
		return err == nil || domain.IsCode(err, domain.CodeVersionMismatch) || domain.IsCode(err, domain.CodeConflict) || domain.IsCode(err, domain.CodeDuplicate)
	}
	for i, race := range identifierUpdateRaces {
		for at := 1; ; at++ {
			if at > 40 {
				t.Fatalf("%s: A sends more than 40 commands", race.name)
			}
			x := domain.Identifier{System: fmt.Sprintf("urn:example:race-%d", i), Value: fmt.Sprintf("x-%d", at)}
			z := domain.Identifier{System: x.System, Value: fmt.Sprintf("z-%d", at)}
			var start []domain.Identifier
			if race.start != nil {
				start = race.start(x)
			}
			u, p := newPatient(fmt.Sprintf("p%d-%d@example.org", i, at), "P", start...)
			if err := db.CreatePatient(ctx, u, p); err != nil {
				t.Fatal(err)
			}
			old, err := db.PatientByID(ctx, p.ID)
			if err != nil {
				t.Fatal(err)
			}
			if race.earlier {
				renamed := *old
				renamed.FamilyName = "B"
				if err := db.UpdatePatient(ctx, old, &renamed); err != nil {
					t.Fatal(err)
				}
			}
			var errC error
			ran := false
			hook.arm(at, func() {
				ran = true
				cur, err := other.PatientByID(ctx, p.ID)
				if err != nil {
					t.Fatal(err)
				}
				next := *cur
				next.FamilyName, next.Identifiers = "C", race.c(cur.Identifiers, x, z)
				errC = other.UpdatePatient(ctx, cur, &next)
			})
			a := *old
			a.FamilyName, a.Identifiers = "A", race.a(x, y)
			errA := watched.UpdatePatient(ctx, old, &a)
			if !ran {
				break // A sent fewer commands: every step was tried
			}
			if !refusal(errA) || !refusal(errC) {
				t.Errorf("%s, C at A's command %d: A %v, C %v", race.name, at, errA, errC)
			}
			checkClaims(t, db, p.ID, fmt.Sprintf("%s, C at A's command %d (A: %v, C: %v)", race.name, at, errA, errC))
		}
	}
}

// checkClaims fails the test unless the patient's identifier claims are
// the identifiers its stored record lists, each refusing another patient,
// and no write intent is left.
func checkClaims(t *testing.T, db *repo.DB, patientID int64, when string) {
	t.Helper()
	ctx := context.Background()
	stored, err := db.PatientByID(ctx, patientID)
	if err != nil {
		t.Fatal(err)
	}
	var claims []struct {
		System string `bson:"system"`
		Value  string `bson:"value"`
	}
	cur, err := repotest.Collection(t, db, "patient_identifiers").Find(ctx, bson.M{"patientId": patientID})
	if err == nil {
		err = cur.All(ctx, &claims)
	}
	if err != nil {
		t.Fatal(err)
	}
	var claimed []domain.Identifier
	for _, c := range claims {
		claimed = append(claimed, domain.Identifier{System: c.System, Value: c.Value})
	}
	for _, id := range stored.Identifiers {
		if !slices.Contains(claimed, id) {
			u, other := newPatient(fmt.Sprintf("dup-%d@example.org", patientID), "Dup", id)
			err := db.CreatePatient(ctx, u, other)
			t.Errorf("%s: the record lists %s|%s, which it does not claim: another patient given it: %v", when, id.System, id.Value, err)
		}
	}
	for _, id := range claimed {
		if !slices.Contains(stored.Identifiers, id) {
			t.Errorf("%s: claim on %s|%s, which the record does not list, is left", when, id.System, id.Value)
		}
	}
	if n, _ := repotest.Collection(t, db, "write_intents").CountDocuments(ctx, bson.M{}); n != 0 {
		t.Errorf("%s: %d write intents left", when, n)
	}
}

// TestRepairsOfOneUpdateLeaveALaterUpdatesClaims: an update that adds x
// dies after claiming it; two instances repair its intent at once (the
// sweep of each), and a later update adds x again meanwhile. Whatever step
// of the first repair the second and the later update run at, the
// patient's claims end as its record lists them: a repair that read the
// record before the later update stored x does not take the claim that
// update relies on.
func TestRepairsOfOneUpdateLeaveALaterUpdatesClaims(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	hook := &stepHook{}
	watched := hook.instance(t, db)
	for at := 1; ; at++ {
		if at > 40 {
			t.Fatal("the repair sends more than 40 commands")
		}
		x := domain.Identifier{System: "urn:example:mrn", Value: fmt.Sprintf("x-%d", at)}
		u, p := newPatient(fmt.Sprintf("p%d@example.org", at), "P")
		if err := db.CreatePatient(ctx, u, p); err != nil {
			t.Fatal(err)
		}
		old, err := db.PatientByID(ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		dead := repotest.OtherInstance(t, db)
		cut := *old
		cut.Identifiers = []domain.Identifier{x}
		if err := repo.InterruptedPatientUpdate(ctx, dead, old, &cut); err != nil {
			t.Fatal(err)
		}
		_ = dead.Close(ctx) // its lease goes: the intent is abandoned
		var errLater error
		ran := false
		hook.arm(at, func() {
			ran = true
			if _, err := db.Repair(ctx, repo.RepairOptions{}); err != nil {
				t.Errorf("the second repair: %v", err)
			}
			cur, err := db.PatientByID(ctx, p.ID)
			if err != nil {
				t.Fatal(err)
			}
			later := *cur
			later.Identifiers = []domain.Identifier{x}
			errLater = db.UpdatePatient(ctx, cur, &later)
		})
		if _, err := watched.Repair(ctx, repo.RepairOptions{}); err != nil {
			t.Errorf("the first repair: %v", err)
		}
		if !ran {
			break
		}
		if errLater != nil && !domain.IsCode(errLater, domain.CodeConflict) {
			t.Errorf("the later update, at the repair's command %d: %v", at, errLater)
		}
		checkClaims(t, db, p.ID, fmt.Sprintf("the later update at the first repair's command %d (%v)", at, errLater))
	}
}

// TestAFailedSettleLeavesNoLock: an update of a patient's identifiers
// whose settle fails (its read of the record does) returns the error and
// leaves its intent for the repair, as a write that is over: once
// leaseTimeout (45 s) has passed, during which a write of it that failed
// on the wire could still land, the next change of the patient's
// identifiers, on another instance too, repairs it and stores, instead
// of being refused as running into a write in flight until intentTimeout
// (15 minutes) has passed. Before, it is refused so.
func TestAFailedSettleLeavesNoLock(t *testing.T) {
	var step atomic.Pointer[func()]
	db := repotest.NewDBWith(t, repo.Options{Monitor: &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if coll, _ := e.Command.Lookup(e.CommandName).StringValueOK(); coll == "patients" && e.CommandName == "find" {
			if s := step.Swap(nil); s != nil {
				(*s)()
			}
		}
	}}})
	other := repotest.OtherInstance(t, db)
	var clock testClock
	clock.set(db, other)
	ctx := context.Background()
	patients := repotest.Collection(t, db, "patients")
	old := createdPatient(t, db)
	x := domain.Identifier{System: "urn:example:mrn", Value: "x"}
	withX := withIdentifiers(old, x)
	var stored bson.M
	corrupt := func() { // the record as replaced, made unreadable for the settle's read
		if err := patients.FindOne(ctx, bson.M{"_id": old.ID}).Decode(&stored); err != nil {
			t.Error(err)
		}
		if _, err := patients.UpdateOne(ctx, bson.M{"_id": old.ID}, bson.M{"$set": bson.M{"identifiers": "unreadable"}}); err != nil {
			t.Error(err)
		}
	}
	step.Store(&corrupt)
	if err := db.UpdatePatient(ctx, old, withX); err == nil {
		t.Fatal("the update whose settle failed succeeded")
	}
	if _, err := patients.ReplaceOne(ctx, bson.M{"_id": old.ID}, stored); err != nil {
		t.Fatal(err)
	}

	now, err := db.PatientByID(ctx, old.ID)
	if err != nil {
		t.Fatal(err)
	}
	changeAfterTheGrace(t, other, &clock, now)
	var claims []struct {
		Value string `bson:"value"`
	}
	cur, err := repotest.Collection(t, db, "patient_identifiers").Find(ctx, bson.M{"patientId": old.ID})
	if err != nil {
		t.Fatal(err)
	}
	if err := cur.All(ctx, &claims); err != nil || len(claims) != 1 || claims[0].Value != "z" {
		t.Errorf("the patient's claims: %+v, %v; want z alone", claims, err)
	}
	if n, err := repotest.Collection(t, db, "write_intents").CountDocuments(ctx, bson.M{}); err != nil || n != 0 {
		t.Errorf("%d intents left (%v)", n, err)
	}
}

// TestAnUnendedUpdateLeavesNoLock: an update of a patient's identifiers
// that stored, but whose intent could not be removed (the connection is
// lost as the delete is sent), gives the intent up: once leaseTimeout
// (45 s) has passed, during which the lost delete could still land, the
// next change of the patient's identifiers, on another instance too,
// repairs it (there is nothing left to settle) and stores, instead of
// being refused as running into a write in flight until intentTimeout
// (15 minutes). Before, it is refused so.
func TestAnUnendedUpdateLeavesNoLock(t *testing.T) {
	db, clock := clockedDB(t)
	ctx := context.Background()
	x := domain.Identifier{System: "urn:example:mrn", Value: "x"}
	p, _ := cutIdentifierUpdate(t, db, clock, "delete", "write_intents", x, nil)
	now, err := db.PatientByID(ctx, p.ID)
	if err != nil || !slices.Equal(now.Identifiers, []domain.Identifier{x}) {
		t.Fatalf("the record after the update: %+v, %v; want it stored", now, err)
	}

	changeAfterTheGrace(t, db, clock, now)
	if n, err := repotest.Collection(t, db, "write_intents").CountDocuments(ctx, bson.M{}); err != nil || n != 0 {
		t.Errorf("%d intents left (%v)", n, err)
	}
}

// TestAnIdentifierUpdateCutOnTheWireWaitsForItsRepair: an update of a
// patient's identifiers whose replace of the record fails with an unknown
// outcome (the connection is lost as it is sent) settles nothing: the
// replace may still land, and a settle before it (which releases the
// claim on x the record as read does not list) would leave the record
// listing x unclaimed, free for another patient. It keeps the claim and
// gives its intent up. One whose intent insert, the patient's identifier
// lock, fails so stops there and puts a given-up copy of the intent in its
// place: the insert may still land, and with this instance's live lease it
// would hold the lock for intentTimeout (15 minutes), refusing every
// change of the patient's identifiers; landing after the copy, it is
// refused as a duplicate key. Either way the next change of the
// identifiers within leaseTimeout is refused (CodeConflict), and after it
// (the cut instance running on) the repair settles the claims against the
// record as it is then, whether the command was lost or landed late.
func TestAnIdentifierUpdateCutOnTheWireWaitsForItsRepair(t *testing.T) {
	x := domain.Identifier{System: "urn:example:mrn", Value: "x"}
	for _, c := range []struct {
		command, collection string
		landLate            func(*cutCommand)
		claimed             int64 // claims on x after the cut
	}{
		{"update", "patients", (*cutCommand).land, 1},
		{"insert", "write_intents", (*cutCommand).landRefused, 0},
	} {
		eachLanding(t, c.collection, func(t *testing.T, db *repo.DB, clock *testClock, late bool) {
			ctx := context.Background()
			p, cut := cutIdentifierUpdate(t, db, clock, c.command, c.collection, x, nil)
			if late {
				c.landLate(cut)
			}
			if n, err := repotest.Collection(t, db, "patient_identifiers").CountDocuments(ctx, bson.M{"patientId": p.ID, "value": x.Value}); err != nil || n != c.claimed {
				t.Errorf("%d claims on x after the cut (%v), want %d", n, err, c.claimed)
			}
			var intent struct {
				Instance string `bson:"instance"`
			}
			if err := repotest.Collection(t, db, "write_intents").FindOne(ctx, bson.M{}).Decode(&intent); err != nil || intent.Instance != "" {
				t.Errorf("the intent after the cut: %+v, %v; want the update's, given up", intent, err)
			}
			now, err := db.PatientByID(ctx, p.ID)
			if listed := late && c.collection == "patients"; err != nil || listed != slices.Contains(now.Identifiers, x) {
				t.Fatalf("the record after the cut: %+v, %v; want x listed only when the replace landed", now, err)
			}
			changeAfterTheGrace(t, db, clock, now, cut.instance)
			checkClaims(t, db, p.ID, "after the repair")
		})
	}
}

// TestACutLockInsertWhoseGiveUpFails: an update of a patient's
// identifiers whose lock insert is cut on the wire puts a given-up copy of
// its intent in its place, with an upserted replace (giveUpUnrecorded),
// and here that replace fails too. Refused once with a definite error (as
// when the insert lands between the upsert's match and its insert, which
// is then refused as a duplicate of it), the replace is sent again and
// places the copy: the next change of the identifiers is refused within
// leaseTimeout and stored after it, whether the insert was lost, landed
// before the give-up, or lands after it (refused then as a duplicate key).
// Refused twice, or cut (an unknown outcome, not tried again), it places
// nothing: a lost insert leaves no lock, and the next change is stored at
// once; one that landed, before or after, is a write running under the
// instance's live lease, the patient's lock, until intentTimeout (the
// doc's "the intent, if it lands, waits for intentTimeout"): the next
// change is refused within leaseTimeout and after it, and stored once
// intentTimeout has passed, having repaired the intent. Either way the
// claims then match the record, and no intent is left.
func TestACutLockInsertWhoseGiveUpFails(t *testing.T) {
	x := domain.Identifier{System: "urn:example:mrn", Value: "x"}
	theGrace := []time.Duration{repo.LeaseTimeout + time.Second}
	untilIntentTimeout := []time.Duration{repo.LeaseTimeout + time.Second, repo.IntentTimeout - repo.LeaseTimeout}
	for _, c := range []struct {
		name    string
		replace fault                    // what the relay does with the give-up's replaces
		failed  int                      // to how many
		waits   map[bool][]time.Duration // the next change's waits (changeAfter), by whether the insert landed
	}{
		{"refused once", refuse, 1, map[bool][]time.Duration{false: theGrace, true: theGrace}},
		{"refused twice", refuse, 2, map[bool][]time.Duration{false: nil, true: untilIntentTimeout}},
		{"cut", drop, 1, map[bool][]time.Duration{false: nil, true: untilIntentTimeout}},
	} {
		copied := c.replace == refuse && c.failed == 1
		for _, landing := range []string{"lost", "landed before the give-up", "landed after the give-up"} {
			t.Run("the replace "+c.name+", the insert "+landing, func(t *testing.T) {
				ctx := context.Background()
				db, clock := clockedDB(t)
				replaces := 0
				p, cut := cutIdentifierUpdate(t, db, clock, "insert", "write_intents", x, func(cut *cutCommand) {
					cut.link.failWith(func(command, collection string) fault {
						if command != "update" || collection != "write_intents" {
							return pass
						}
						if replaces++; replaces <= c.failed {
							return c.replace
						}
						return pass
					})
					if landing == "landed before the give-up" {
						cut.landBefore("update")
					}
				})
				if replaces < c.failed {
					t.Fatalf("the give-up sent %d replaces, want %d failed", replaces, c.failed)
				}
				switch {
				case landing != "landed after the give-up":
				case copied:
					cut.landRefused()
				default:
					cut.land()
				}
				now, err := db.PatientByID(ctx, p.ID)
				if err != nil {
					t.Fatal(err)
				}
				changeAfter(t, db, clock, now, c.waits[landing != "lost"], cut.instance)
				checkClaims(t, db, p.ID, "after the change")
				if n, err := repotest.Collection(t, db, "write_intents").CountDocuments(ctx, bson.M{}); err != nil || n != 0 {
					t.Errorf("%d intents left (%v)", n, err)
				}
			})
		}
	}
}

// createdPatient creates a patient without identifiers on db and returns
// it as stored.
func createdPatient(t *testing.T, db *repo.DB) *domain.Patient {
	t.Helper()
	ctx := context.Background()
	u, p := newPatient("p@example.org", "P")
	if err := db.CreatePatient(ctx, u, p); err != nil {
		t.Fatal(err)
	}
	stored, err := db.PatientByID(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	return stored
}

// TestACutLockInsertLeavesAnotherWritesLock: an update of a patient's
// identifiers whose lock insert is cut on the wire while another
// instance's update holds the lock puts its given-up copy in place of its
// own intent only: the other update's lock stays as it was, its write's.
func TestACutLockInsertLeavesAnotherWritesLock(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	old := createdPatient(t, db)
	withY := withIdentifiers(old, domain.Identifier{System: "urn:example:mrn", Value: "y"})
	if err := repo.InterruptedPatientUpdate(ctx, repotest.OtherInstance(t, db), old, withY); err != nil {
		t.Fatal(err)
	}
	intents := repotest.Collection(t, db, "write_intents")
	var held, after bson.Raw
	if err := intents.FindOne(ctx, bson.M{}).Decode(&held); err != nil {
		t.Fatal(err)
	}
	watched, arm := cuttable(t, db, "insert", "write_intents")
	arm()
	withX := withIdentifiers(old, domain.Identifier{System: "urn:example:mrn", Value: "x"})
	if err := watched.UpdatePatient(ctx, old, withX); err == nil {
		t.Fatal("the update whose lock insert was cut succeeded")
	}
	if err := intents.FindOne(ctx, bson.M{}).Decode(&after); err != nil || !bytes.Equal(after, held) {
		t.Errorf("the other update's lock after the cut: %v, %v; want it as it was: %v", after, err, held)
	}
}

// cutIdentifierUpdate creates a patient on db, then sends, from another
// instance whose command named command on collection is cut (cuttable),
// an update that adds x to its identifiers, which fails. prepare (nil:
// none) sets up the cut before the update is sent. It returns the patient
// as created, and the cut command. clock is db's clock.
func cutIdentifierUpdate(t *testing.T, db *repo.DB, clock *testClock, command, collection string, x domain.Identifier, prepare func(*cutCommand)) (*domain.Patient, *cutCommand) {
	t.Helper()
	ctx := context.Background()
	u, p := newPatient("p@example.org", "P")
	if err := db.CreatePatient(ctx, u, p); err != nil {
		t.Fatal(err)
	}
	watched, arm := cuttable(t, db, command, collection)
	clock.set(watched)
	old, err := watched.PatientByID(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	withX := withIdentifiers(old, x)
	cut := arm()
	if prepare != nil {
		prepare(cut)
	}
	if err := watched.UpdatePatient(ctx, old, withX); err == nil {
		t.Fatalf("the update whose %s on %s was cut succeeded", command, collection)
	}
	return p, cut
}

// changeAfterTheGrace sends the patient's identifiers, now as stored, a
// change to z alone after an update of them gave its intent up: within
// leaseTimeout it is refused (CodeConflict), while that update's last
// command may still land; once the clock has moved past it, it repairs the
// intent and is stored. The instances alive renew their leases once the
// clock has moved, as running instances do.
func changeAfterTheGrace(t *testing.T, db *repo.DB, clock *testClock, now *domain.Patient, alive ...*repo.DB) {
	t.Helper()
	changeAfter(t, db, clock, now, []time.Duration{repo.LeaseTimeout + time.Second}, alive...)
}

// changeAfter sends the patient's identifiers, now as stored, a change to
// z alone, and again each time the clock has moved on by the next of
// waits: it is refused (CodeConflict) every time but the last, while the
// lock of an earlier update holds them, and stored the last time, having
// repaired that update's intent. The instances alive renew their leases
// each time the clock has moved, as running instances do.
func changeAfter(t *testing.T, db *repo.DB, clock *testClock, now *domain.Patient, waits []time.Duration, alive ...*repo.DB) {
	t.Helper()
	ctx := context.Background()
	withZ := withIdentifiers(now, domain.Identifier{System: "urn:example:mrn", Value: "z"})
	var waited time.Duration
	for i := 0; ; i++ {
		err := db.UpdatePatient(ctx, now, withZ)
		if i == len(waits) {
			if err != nil {
				t.Fatalf("the next change of the identifiers, %v after the cut: %v, want it stored", waited, err)
			}
			return
		}
		if !domain.IsCode(err, domain.CodeConflict) {
			t.Fatalf("the next change of the identifiers, %v after the cut: %v, want CodeConflict", waited, err)
		}
		clock.advance(waits[i])
		waited += waits[i]
		for _, d := range alive {
			if err := repo.RenewLease(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestARepairCutOnTheWireWaitsAgain: a repair whose own write fails with
// an unknown outcome (here the release of a claim that the record of an
// update given up does not list: the connection is lost as the delete is
// sent) gives the intent back given up as of then, not abandoned as it
// was: the delete may still land, and had the next change of the
// identifiers repaired the intent at once and claimed the identifier
// again, the late delete would release that new claim, leaving the
// record listing an identifier no claim holds, free for another patient.
// Within leaseTimeout the change is refused (CodeConflict); after it, it
// is stored and the claims match the record, whether the delete was lost
// or landed late.
func TestARepairCutOnTheWireWaitsAgain(t *testing.T) {
	eachLanding(t, "", func(t *testing.T, db *repo.DB, clock *testClock, late bool) {
		ctx := context.Background()
		x := domain.Identifier{System: "urn:example:mrn", Value: "x"}
		p, _ := cutIdentifierUpdate(t, db, clock, "update", "patients", x, nil) // the replace lost: x claimed, not listed
		clock.advance(repo.LeaseTimeout + time.Second)
		fixer, arm := cuttable(t, db, "delete", "patient_identifiers")
		clock.set(fixer)
		land := arm().land
		if rep, err := fixer.Repair(ctx, repo.RepairOptions{}); err == nil && len(rep.Failed) == 0 {
			t.Fatalf("the repair whose release of x was cut: %+v, want it failed", rep)
		}
		now, err := db.PatientByID(ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		withX := withIdentifiers(now, x)
		if err := db.UpdatePatient(ctx, now, withX); !domain.IsCode(err, domain.CodeConflict) {
			t.Fatalf("a change adding x, within leaseTimeout of the cut repair: %v, want CodeConflict", err)
		}
		if late {
			land()
		}
		clock.advance(repo.LeaseTimeout + time.Second)
		if err := db.UpdatePatient(ctx, now, withX); err != nil {
			t.Fatalf("a change adding x, after leaseTimeout: %v, want it stored", err)
		}
		checkClaims(t, db, p.ID, "after the change")
		if n, err := repotest.Collection(t, db, "patient_identifiers").CountDocuments(ctx, bson.M{"patientId": p.ID, "value": x.Value}); err != nil || n != 1 {
			t.Errorf("%d claims on x after the change (%v), want 1", n, err)
		}
	})
}

// TestARepairCutAsItAdoptsWaitsAgain: a repair whose adoption of the
// intent (the compare-and-set that moves it to the repairer's lease) is
// cut on the wire gives the intent up as of then, whether the adoption
// was lost, landed before that give-up, or lands after it (refused then):
// had the adoption landed unanswered, the intent would look like a write
// of the repairer, alive, and hold the patient's identifier lock for
// intentTimeout. The next change waits leaseTimeout, as after any cut
// command, and then repairs the intent and is stored.
func TestARepairCutAsItAdoptsWaitsAgain(t *testing.T) {
	for _, landing := range []string{"lost", "landed unanswered", "landed after the give-up"} {
		t.Run(landing, func(t *testing.T) {
			ctx := context.Background()
			db, clock := clockedDB(t)
			x := domain.Identifier{System: "urn:example:mrn", Value: "x"}
			p, _ := cutIdentifierUpdate(t, db, clock, "update", "patients", x, nil) // the replace lost: x claimed, not listed
			clock.advance(repo.LeaseTimeout + time.Second)
			fixer, arm := cuttable(t, db, "update", "write_intents")
			clock.set(fixer)
			cut := arm()
			if landing == "landed unanswered" {
				cut.landBefore("update")
			}
			if rep, err := fixer.Repair(ctx, repo.RepairOptions{}); err == nil && len(rep.Failed) == 0 {
				t.Fatalf("the repair whose adoption was cut: %+v, want it failed", rep)
			}
			switch {
			case landing == "landed unanswered" && cut.before.Load() != nil:
				cut.land() // the repair sent no other update: the adoption lands now
			case landing == "landed after the give-up":
				if n, _ := cut.send(); n != 0 {
					t.Fatalf("the cut adoption, landing after the give-up, changed %d intents, want none", n)
				}
			}
			now, err := db.PatientByID(ctx, p.ID)
			if err != nil {
				t.Fatal(err)
			}
			changeAfterTheGrace(t, db, clock, now, fixer)
			checkClaims(t, db, p.ID, "after the change")
		})
	}
}

// withIdentifiers is a copy of p that lists ids: the record an update of
// p's identifiers stores.
func withIdentifiers(p *domain.Patient, ids ...domain.Identifier) *domain.Patient {
	c := *p
	c.Identifiers = ids
	return &c
}
