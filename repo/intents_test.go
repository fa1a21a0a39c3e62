package repo_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"exchange/domain"
	"exchange/repo"
	"exchange/repo/repotest"
)

// A write cut short leaves its intent behind: here an observation batch
// whose claims were written and whose observations were not, by a process
// whose lease has gone stale. Until the repair, its identifier refuses
// nothing forever: a new observation with it takes it once the intent is
// repaired on the spot (the owner's process is dead); the repair at
// start-up releases the other claims and removes the intent and lease.
func TestRepairReleasesTheClaimsOfAnInterruptedBatch(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	claims := repotest.Collection(t, db, "observation_identifiers")
	stale := time.Now().Add(-time.Hour)
	if _, err := repotest.Collection(t, db, "service_instances").InsertOne(ctx, bson.M{"_id": "dead", "renewed": stale}); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i, value := range []string{"a", "b", "c"} {
		key := repo.ClaimKey("urn:example:obs", value)
		keys = append(keys, key)
		if _, err := claims.InsertOne(ctx, bson.M{"_id": key, "system": "urn:example:obs", "value": value,
			"observationId": int64(100 + i), "claimedAt": stale}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := repotest.Collection(t, db, "write_intents").InsertOne(ctx, bson.M{"_id": bson.NewObjectID(), "kind": "observations.create",
		"instance": "dead", "startedAt": stale, "keys": keys, "firstId": int64(100), "lastId": int64(102)}); err != nil {
		t.Fatal(err)
	}
	o := testObservation(1, domain.Identifier{System: "urn:example:obs", Value: "a"})
	if errs := db.CreateObservations(ctx, []*domain.Observation{o}); errs[0] != nil {
		t.Fatalf("an identifier claimed by a dead write: %v", errs[0])
	}
	if n, _ := claims.CountDocuments(ctx, bson.M{"observationId": bson.M{"$gte": 100, "$lte": 102}}); n != 0 {
		t.Errorf("%d claims of the dead write left", n)
	}
	rep, err := db.Repair(ctx, repo.RepairOptions{Exclusive: true})
	if err != nil || rep.Intents != 0 || rep.Leases != 1 {
		t.Errorf("repair after: %+v, %v; want no intent left, the dead lease removed", rep, err)
	}
}

// An observation write's intent names the ids it reserved, not the keys
// it claims (64 KiB of keys for a batch of 1,000): its claims are found by
// the ids they name. While its process runs, a claim of the batch is not
// taken over (a conflict, to send again); once the process is dead, the
// claim is taken on the spot and the repair releases the batch's other
// claims.
func TestObservationIntentsHoldTheClaimsOfTheirIDs(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	claims := repotest.Collection(t, db, "observation_identifiers")
	leases := repotest.Collection(t, db, "service_instances")
	if _, err := leases.InsertOne(ctx, bson.M{"_id": "other", "renewed": time.Now()}); err != nil {
		t.Fatal(err)
	}
	started := time.Now().Add(-time.Minute)
	for i, value := range []string{"a", "b", "c"} {
		if _, err := claims.InsertOne(ctx, bson.M{"_id": repo.ClaimKey("urn:example:obs", value), "system": "urn:example:obs", "value": value,
			"observationId": int64(100 + i), "claimedAt": started}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := repotest.Collection(t, db, "write_intents").InsertOne(ctx, bson.M{"_id": bson.NewObjectID(), "kind": "observations.create",
		"instance": "other", "startedAt": started, "keys": []string{}, "firstId": int64(100), "lastId": int64(102)}); err != nil {
		t.Fatal(err)
	}
	o := testObservation(1, domain.Identifier{System: "urn:example:obs", Value: "b"})
	if errs := db.CreateObservations(ctx, []*domain.Observation{o}); !domain.IsCode(errs[0], domain.CodeConflict) {
		t.Fatalf("an identifier a running write claimed: %v, want CodeConflict", errs[0])
	}
	if _, err := leases.UpdateOne(ctx, bson.M{"_id": "other"}, bson.M{"$set": bson.M{"renewed": time.Now().Add(-time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	o = testObservation(1, domain.Identifier{System: "urn:example:obs", Value: "b"})
	if errs := db.CreateObservations(ctx, []*domain.Observation{o}); errs[0] != nil {
		t.Fatalf("an identifier claimed by a dead write: %v", errs[0])
	}
	if n, _ := claims.CountDocuments(ctx, bson.M{"observationId": bson.M{"$gte": 100, "$lte": 102}}); n != 0 {
		t.Errorf("%d claims of the dead write left", n)
	}
	if n, _ := repotest.Collection(t, db, "write_intents").CountDocuments(ctx, bson.D{}); n != 0 {
		t.Errorf("%d intents left", n)
	}
}

// An observation batch that returns unsettled (here the release of the
// claims of its refused entry fails: the connection is lost as the
// delete is sent) gives its intent up, as a write that is over: once
// leaseTimeout (45 s) has passed, during which the lost delete could
// still land, the identifiers it left claimed are taken by the next
// observation that has them, on another instance and on the batch's
// own, which repairs the intent on the spot, instead of being refused as
// being stored by a request in flight (409) until intentTimeout (15
// minutes) has passed. Before, they are refused so.
func TestAnUnsettledObservationBatchGivesItsIntentUp(t *testing.T) {
	db := repotest.NewDB(t)
	var clock testClock
	clock.set(db)
	ctx := context.Background()
	held := domain.Identifier{System: "urn:example:obs", Value: "held"}
	x := domain.Identifier{System: "urn:example:obs", Value: "x"}
	y := domain.Identifier{System: "urn:example:obs", Value: "y"}
	if errs := db.CreateObservations(ctx, []*domain.Observation{testObservation(1, held)}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	batch, arm := cuttable(t, db, "delete", "observation_identifiers")
	clock.set(batch)
	arm()
	// Another patient's observation with held: refused as a duplicate,
	// after it claimed x and y.
	if errs := batch.CreateObservations(ctx, []*domain.Observation{testObservation(2, x, y, held)}); !domain.IsCode(errs[0], domain.CodeDuplicate) {
		t.Fatalf("the entry with another's identifier: %v, want CodeDuplicate", errs[0])
	}
	claims := repotest.Collection(t, db, "observation_identifiers")
	if n, err := claims.CountDocuments(ctx, bson.M{"_id": bson.M{"$in": []string{repo.ClaimKey(x.System, x.Value), repo.ClaimKey(y.System, y.Value)}}}); err != nil || n != 2 {
		t.Fatalf("%d claims of the refused entry left (%v), want 2: the release did not fail", n, err)
	}

	if errs := db.CreateObservations(ctx, []*domain.Observation{testObservation(1, y)}); !domain.IsCode(errs[0], domain.CodeConflict) {
		t.Errorf("the next observation with y, within leaseTimeout of the give-up: %v, want CodeConflict", errs[0])
	}
	if n, err := repotest.Collection(t, db, "write_intents").CountDocuments(ctx, bson.M{}); err != nil || n != 1 {
		t.Errorf("%d intents within leaseTimeout of the give-up (%v), want the batch's", n, err)
	}
	clock.advance(repo.LeaseTimeout + time.Second)
	if errs := db.CreateObservations(ctx, []*domain.Observation{testObservation(1, y)}); errs[0] != nil {
		t.Errorf("the next observation with y, on another instance: %v, want it stored", errs[0])
	}
	if errs := batch.CreateObservations(ctx, []*domain.Observation{testObservation(1, x)}); errs[0] != nil {
		t.Errorf("the next observation with x, on the batch's instance: %v, want it stored", errs[0])
	}
	if n, err := repotest.Collection(t, db, "write_intents").CountDocuments(ctx, bson.M{}); err != nil || n != 0 {
		t.Errorf("%d intents left (%v)", n, err)
	}
}

// TestAnObservationBatchCutOnTheWireWaitsForItsRepair: a batch whose
// insert of claims, or of observations, fails with an unknown outcome
// (the connection is lost as it is sent) releases nothing: the insert may
// still land, after a release, leaving stored observations without their
// claims (stored twice by the retry) or claims no intent holds. It keeps
// the claims, fails its entries and gives its intent up: within
// leaseTimeout a retry of the batch is refused as being stored by another
// request (CodeConflict) where a claim of it is held and its observation
// not stored, and once leaseTimeout has passed the repair settles the
// batch, whether the insert was lost or landed late: each observation is
// stored once and holds its claim, and no claim is left without its
// observation.
func TestAnObservationBatchCutOnTheWireWaitsForItsRepair(t *testing.T) {
	for _, c := range []struct {
		collection string
		claims     map[bool]int64       // held right after the batch returned, by whether its insert landed
		retry      map[bool]domain.Code // a retry's entries within leaseTimeout ("": stored)
	}{
		{"observation_identifiers", map[bool]int64{false: 0, true: 2}, map[bool]domain.Code{false: "", true: domain.CodeConflict}},
		{"observations", map[bool]int64{false: 2, true: 2}, map[bool]domain.Code{false: domain.CodeConflict, true: domain.CodeDuplicate}},
	} {
		eachLanding(t, c.collection, func(t *testing.T, db *repo.DB, clock *testClock, late bool) {
			ctx := context.Background()
			ids := []domain.Identifier{{System: "urn:example:obs", Value: "x"}, {System: "urn:example:obs", Value: "y"}}
			batchOf := func() []*domain.Observation {
				return []*domain.Observation{testObservation(1, ids[0]), testObservation(1, ids[1])}
			}
			batch, arm := cuttable(t, db, "insert", c.collection)
			clock.set(batch)
			land := arm().land
			if errs := batch.CreateObservations(ctx, batchOf()); errs[0] == nil || errs[1] == nil {
				t.Fatalf("the entries of the cut batch: %v, want both failed", errs)
			}
			if late {
				land()
			}
			claims := repotest.Collection(t, db, "observation_identifiers")
			keys := bson.M{"_id": bson.M{"$in": []string{repo.ClaimKey(ids[0].System, ids[0].Value), repo.ClaimKey(ids[1].System, ids[1].Value)}}}
			if n, err := claims.CountDocuments(ctx, keys); err != nil || n != c.claims[late] {
				t.Errorf("%d claims of the batch after the cut (%v), want %d", n, err, c.claims[late])
			}
			intents := repotest.Collection(t, db, "write_intents")
			if n, err := intents.CountDocuments(ctx, bson.M{}); err != nil || n != 1 {
				t.Errorf("%d intents after the cut (%v), want the batch's, given up", n, err)
			}
			for i, err := range db.CreateObservations(ctx, batchOf()) {
				if want := c.retry[late]; want == "" && err != nil || want != "" && !domain.IsCode(err, want) {
					t.Errorf("entry %d of the retry within leaseTimeout of the give-up: %v, want %q", i, err, want)
				}
			}
			clock.advance(repo.LeaseTimeout + time.Second)
			for i, err := range db.CreateObservations(ctx, batchOf()) {
				var stored *domain.Error
				if err != nil && !(errors.As(err, &stored) && stored.Stored != "") {
					t.Errorf("entry %d of the retry after leaseTimeout: %v, want it stored, now or before", i, err)
				}
			}
			if _, err := db.Repair(ctx, repo.RepairOptions{}); err != nil {
				t.Fatal(err)
			}
			var held []struct {
				ObservationID int64 `bson:"observationId"`
			}
			cur, err := claims.Find(ctx, bson.M{})
			if err == nil {
				err = cur.All(ctx, &held)
			}
			if err != nil || len(held) != 2 {
				t.Errorf("claims after the repair: %+v (%v), want one per identifier", held, err)
			}
			for _, h := range held {
				if _, err := db.ObservationByID(ctx, h.ObservationID); err != nil {
					t.Errorf("a claim names Observation/%d: %v", h.ObservationID, err)
				}
			}
			if n, err := repotest.Collection(t, db, "observations").CountDocuments(ctx, bson.M{}); err != nil || n != 2 {
				t.Errorf("%d observations stored (%v), want each once", n, err)
			}
			if n, err := intents.CountDocuments(ctx, bson.M{}); err != nil || n != 0 {
				t.Errorf("%d intents after the repair (%v)", n, err)
			}
		})
	}
}

// TestACreateCutOnTheWireWaitsForItsRepair: a patient or practitioner
// create whose last insert (the record, the membership) fails with an
// unknown outcome (the connection is lost as it is sent) undoes nothing:
// the insert may still land, after an undo, leaving a patient record
// without its login and claims, or a membership of a user that is gone.
// It keeps what it wrote and gives its intent up: within leaseTimeout a
// create with the same email is refused as one running (CodeConflict),
// and once leaseTimeout has passed the repair keeps the create when its
// insert landed late (the email is then taken) and rolls it back when it
// was lost (the email is then free).
func TestACreateCutOnTheWireWaitsForItsRepair(t *testing.T) {
	mrn := domain.Identifier{System: "urn:example:mrn", Value: "1"}
	for _, c := range []struct {
		kind, collection string
		create           func(d *repo.DB, email string) (userID int64, err error)
	}{
		{"patient", "patients", func(d *repo.DB, email string) (int64, error) {
			u, p := newPatient(email, "P", mrn)
			err := d.CreatePatient(context.Background(), u, p)
			return u.ID, err
		}},
		{"practitioner", "memberships", func(d *repo.DB, email string) (int64, error) {
			u := &domain.User{Email: email, Type: domain.UserPractitioner, IsActive: true}
			err := d.CreatePractitioner(context.Background(), u, &domain.Membership{OrganizationID: 1, Role: domain.RoleMember})
			return u.ID, err
		}},
	} {
		eachLanding(t, c.kind, func(t *testing.T, db *repo.DB, clock *testClock, late bool) {
			ctx := context.Background()
			instance, arm := cuttable(t, db, "insert", c.collection)
			clock.set(instance)
			land := arm().land
			userID, err := c.create(instance, "p@example.org")
			if err == nil {
				t.Fatalf("the %s create whose %s insert was cut succeeded", c.kind, c.collection)
			}
			if late {
				land()
			}
			if _, err := db.UserByID(ctx, userID); err != nil {
				t.Errorf("the login of the cut create: %v, want it kept for the repair", err)
			}
			intents := repotest.Collection(t, db, "write_intents")
			if n, err := intents.CountDocuments(ctx, bson.M{}); err != nil || n != 1 {
				t.Errorf("%d intents after the cut (%v), want the create's, given up", n, err)
			}
			if _, err := c.create(db, "p@example.org"); !domain.IsCode(err, domain.CodeConflict) {
				t.Errorf("a create with the email, within leaseTimeout of the give-up: %v, want CodeConflict", err)
			}
			clock.advance(repo.LeaseTimeout + time.Second)
			if rep, err := db.Repair(ctx, repo.RepairOptions{}); err != nil || rep.Repaired[c.kind+".create"] != 1 {
				t.Errorf("the repair: %+v, %v; want the create's intent repaired", rep, err)
			}
			_, err = c.create(db, "p@example.org")
			if late && !domain.IsCode(err, domain.CodeDuplicate) || !late && err != nil {
				t.Errorf("a create with the email after the repair: %v, want it %s", err, map[bool]string{false: "stored", true: "a duplicate"}[late])
			}
			if late {
				if _, err := db.UserByID(ctx, userID); err != nil {
					t.Errorf("the login of the create that landed: %v", err)
				}
			}
			if late && c.kind == "patient" {
				p, err := db.PatientByUserID(ctx, userID)
				if err != nil {
					t.Fatalf("the record of the create that landed: %v", err)
				}
				checkClaims(t, db, p.ID, "after the repair")
			}
			if n, err := intents.CountDocuments(ctx, bson.M{}); err != nil || n != 0 {
				t.Errorf("%d intents left (%v)", n, err)
			}
		})
	}
}

// enrollmentIntent is an intent of an enrollment of patient 1 in study 1
// by the process of the lease instance, started at, with the given
// superseded list (nil: none).
func enrollmentIntent(instance string, at time.Time, superseded any) bson.M {
	in := bson.M{"_id": bson.NewObjectID(), "kind": "enrollments.create", "instance": instance,
		"startedAt": at, "keys": []string{}, "touches": []string{"1/1"},
		"enrollments": []bson.M{{"studyId": int64(1), "patientId": int64(1), "lastUpdated": at}}}
	if superseded != nil {
		in["superseded"] = superseded
	}
	return in
}

// TestAForwardWriteWhoseMarksWereCutIsRolledForward: an enrollment whose
// marks on the intents of earlier writes of its pairs (openForward) fail
// with an unknown outcome (the connection is lost as they are sent) is
// not dropped at once: the marks may still land, and then the repair of
// an earlier enrollment of the pair, cut short by a dead process, leaves
// the pair to the later one, which nothing would write. It gives its
// intent up; once leaseTimeout has passed the repairs enroll the patient,
// whether the marks were lost or landed late.
func TestAForwardWriteWhoseMarksWereCutIsRolledForward(t *testing.T) {
	eachLanding(t, "", func(t *testing.T, db *repo.DB, clock *testClock, late bool) {
		ctx := context.Background()
		intents := repotest.Collection(t, db, "write_intents")
		if _, err := intents.InsertOne(ctx, enrollmentIntent("gone", time.Now(), nil)); err != nil {
			t.Fatal(err)
		}
		later, arm := cuttable(t, db, "update", "write_intents")
		clock.set(later)
		land := arm().land
		if err := later.CreateEnrollments(ctx, []domain.Enrollment{{StudyID: 1, PatientID: 1}}); err == nil {
			t.Fatal("the enrollment whose marks were cut succeeded")
		}
		if late {
			land()
		}
		if n, err := intents.CountDocuments(ctx, bson.M{}); err != nil || n != 2 {
			t.Errorf("%d intents after the cut (%v), want the earlier one and the enrollment's, given up", n, err)
		}
		clock.advance(repo.LeaseTimeout + time.Second)
		if rep, err := db.Repair(ctx, repo.RepairOptions{}); err != nil || rep.Repaired["enrollments.create"] != 2 {
			t.Errorf("the repair: %+v, %v; want both enrollments rolled forward", rep, err)
		}
		wantEnrolled(t, db, "")
	})
}

// TestAForwardWriteWhoseMarksFailedPartWayIsRolledForward: the update that
// marks a forward write's pairs superseded in earlier intents is not atomic
// across documents (an UpdateMany on MongoDB stops at the first document it
// cannot change, a primary stepping down stops it anywhere): refused with a
// definite error, it may have marked some. An earlier cut-short write so
// marked skips the pair in its repair, so the later write must be rolled
// forward by its own, or the pair is left as neither wrote it. A second
// earlier intent whose superseded list is not an array makes the update
// fail after the first was marked.
func TestAForwardWriteWhoseMarksFailedPartWayIsRolledForward(t *testing.T) {
	ctx := context.Background()
	db, clock := clockedDB(t)
	intents := repotest.Collection(t, db, "write_intents")
	marked, broken := enrollmentIntent("gone", time.Now(), bson.A{}), enrollmentIntent("gone", time.Now(), "not a list")
	if _, err := intents.InsertMany(ctx, []any{marked, broken}); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateEnrollments(ctx, []domain.Enrollment{{StudyID: 1, PatientID: 1}}); err == nil {
		t.Fatal("the enrollment whose marks failed succeeded")
	}
	var first struct{ Superseded []string }
	if err := intents.FindOne(ctx, bson.M{"_id": marked["_id"]}).Decode(&first); err != nil || !slices.Contains(first.Superseded, "1/1") {
		t.Fatalf("the first earlier intent: %+v, %v; the update did not mark it before it failed, so this test shows nothing", first, err)
	}
	if _, err := intents.DeleteOne(ctx, bson.M{"_id": broken["_id"]}); err != nil {
		t.Fatal(err)
	}
	clock.advance(repo.LeaseTimeout + time.Second)
	if _, err := db.Repair(ctx, repo.RepairOptions{}); err != nil {
		t.Fatal(err)
	}
	wantEnrolled(t, db, ", written by the later write's repair")
	if n, err := intents.CountDocuments(ctx, bson.M{}); err != nil || n != 0 {
		t.Errorf("%d intents left (%v)", n, err)
	}
}

// TestARefusedForwardWriteIsRolledForward: a forward write (openForward)
// whose command is refused with a definite error from its marks on (the
// marks, a write of its answers or enrollments, or the delete of its
// intent) returns the error and gives its intent up: once leaseTimeout has
// passed, the repair finishes it, so that every pair it touched ends as it
// said (patients 1 to 3 withdrawn from the study's consent, or
// unenrolled), not as it left them. An earlier write of those pairs
// (enrollments and answers of patients 1 to 4, cut short as far as patient
// 3) by a process that dies only after that repair is marked, by the
// later write or, when its marks were refused, by its repair: its own
// repair, later, writes patient 4 and leaves patients 1 to 3 as the later
// write made them, instead of bringing back an answer they withdrew or an
// enrollment that was ended. Each command from the marks on is refused in
// turn, up to the last the write sends unrefused; the first, the intent's
// insert, writes nothing (TestAWriteWhoseIntentIsCutOnTheWireWritesNothing
// cuts it).
func TestARefusedForwardWriteIsRolledForward(t *testing.T) {
	if testing.Short() {
		t.Skip("faults on the wire: not in the short tier")
	}
	ctx := context.Background()
	const theMarks = 2 // the write's second command, after its intent's insert
	for _, c := range []struct {
		kind  string
		write func(d *repo.DB) error // of patients 1 to 3
		want  pairState              // of patients 1 to 3 after it
	}{
		{"consents.write", func(d *repo.DB) error { return d.WithdrawConsents(ctx, answersOf(1, 2, 3)) }, pairState{Enrolled: true}},
		{"enrollments.delete", func(d *repo.DB) error { return d.DeleteEnrollments(ctx, 1, []int64{1, 2, 3}) }, pairState{}},
	} {
		var sent int
		t.Run(c.kind+" unrefused", func(t *testing.T) { sent = refusedForwardWrite(t, c.write, c.kind, 0, c.want) })
		if sent <= theMarks {
			t.Fatalf("the %s sent %d commands, want more than its intent's insert and marks", c.kind, sent)
		}
		for at := theMarks; at <= sent; at++ {
			t.Run(fmt.Sprintf("%s refused at command %d of %d", c.kind, at, sent), func(t *testing.T) {
				refusedForwardWrite(t, c.write, c.kind, at, c.want)
			})
		}
	}
}

// pairState is what study 1 holds of a patient.
type pairState struct{ Enrolled, Answered bool }

// studyState is what study 1 holds, by patient.
func studyState(t *testing.T, db *repo.DB) map[int64]pairState {
	t.Helper()
	ctx := context.Background()
	state := map[int64]pairState{}
	es, err := db.Enrollments(ctx, domain.EnrollmentQuery{StudyIDs: []int64{1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		state[e.PatientID] = pairState{Enrolled: true}
	}
	cs, err := db.Consents(ctx, domain.ConsentQuery{StudyIDs: []int64{1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		s := state[c.PatientID]
		s.Answered = true
		state[c.PatientID] = s
	}
	return state
}

// answersOf are the patients' consents to scope code 1 of study 1.
func answersOf(patients ...int64) []domain.Consent {
	var cs []domain.Consent
	for _, p := range patients {
		cs = append(cs, domain.Consent{PatientID: p, StudyID: 1, ScopeCodeID: 1, Consented: true, ConsentedTime: time.Now()})
	}
	return cs
}

// refusedForwardWrite runs TestARefusedForwardWriteIsRolledForward's
// case: write, of the kind, from another instance whose at-th command
// (inserts, updates and deletes but the lease's; 0: none) is refused,
// after an earlier write of patients 1 to 4 by a live process "other";
// then a repair after leaseTimeout, the other process alive, and one
// after it died. It returns the number of commands the write sent.
func refusedForwardWrite(t *testing.T, write func(d *repo.DB) error, kind string, at int, want pairState) (sent int) {
	ctx := context.Background()
	db, clock := clockedDB(t)
	leases := repotest.Collection(t, db, "service_instances")
	if _, err := leases.InsertOne(ctx, bson.M{"_id": "other", "renewed": clock.now()}); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateEnrollments(ctx, []domain.Enrollment{{StudyID: 1, PatientID: 1}, {StudyID: 1, PatientID: 2}, {StudyID: 1, PatientID: 3}}); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateConsents(ctx, answersOf(1, 2, 3)); err != nil {
		t.Fatal(err)
	}
	intents := repotest.Collection(t, db, "write_intents")
	var enrollments, answers bson.A // of patients 1 to 4
	for _, p := range []int64{1, 2, 3, 4} {
		enrollments = append(enrollments, bson.M{"studyId": int64(1), "patientId": p, "lastUpdated": clock.now()})
		answers = append(answers, bson.M{"patientId": p, "studyId": int64(1), "scopeCodeId": int64(1), "consented": true,
			"consentedTime": clock.now(), "lastUpdated": clock.now()})
	}
	for _, in := range []bson.M{{"kind": "enrollments.create", "enrollments": enrollments}, {"kind": "consents.write", "consentOp": "answer", "consents": answers}} {
		in["_id"], in["instance"], in["startedAt"], in["began"] = bson.NewObjectID(), "other", clock.now(), clock.now()
		in["keys"], in["touches"] = []string{}, []string{"1/1", "2/1", "3/1", "4/1"}
		if _, err := intents.InsertOne(ctx, in); err != nil {
			t.Fatal(err)
		}
	}

	uri, l := relay(t)
	later := openThrough(t, db, uri, nil)
	clock.set(later)
	refused := 0
	l.failWith(func(command, collection string) fault {
		if collection == "service_instances" || !slices.Contains([]string{"insert", "update", "delete"}, command) {
			return pass
		}
		if sent++; sent == at {
			refused++
			return refuse
		}
		return pass
	})
	err := write(later)
	l.failWith(nil)
	var relayErr mongo.CommandError
	if refused != min(at, 1) || at == 0 && err != nil || at > 0 && !errors.As(err, &relayErr) {
		t.Fatalf("the %s, its command %d refused (%d refusals): %v; want the relay's refusal, if any", kind, at, refused, err)
	}

	laterPairs := func(when string) {
		t.Helper()
		state := studyState(t, db)
		for _, p := range []int64{1, 2, 3} {
			if state[p] != want {
				t.Errorf("%s: patient %d holds %+v, want %+v", when, p, state[p], want)
			}
		}
	}
	clock.advance(repo.LeaseTimeout + time.Second)
	if _, err := leases.UpdateOne(ctx, bson.M{"_id": "other"}, bson.M{"$set": bson.M{"renewed": clock.now()}}); err != nil {
		t.Fatal(err)
	}
	if err := repo.RenewLease(ctx, later); err != nil { // its instance runs on
		t.Fatal(err)
	}
	rep, err := db.Repair(ctx, repo.RepairOptions{})
	if err != nil || rep.Repaired[kind] != min(at, 1) || rep.Running != 2 || len(rep.Failed) != 0 {
		t.Errorf("the repair after leaseTimeout: %+v, %v; want the later write's intent repaired, if refused, and the earlier ones running", rep, err)
	}
	laterPairs("after the later write's repair")

	if _, err := leases.UpdateOne(ctx, bson.M{"_id": "other"}, bson.M{"$set": bson.M{"renewed": clock.now().Add(-time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	if rep, err := db.Repair(ctx, repo.RepairOptions{}); err != nil || rep.Intents != 2 || len(rep.Failed) != 0 {
		t.Errorf("the repair once the other process is dead: %+v, %v; want the earlier writes' intents repaired", rep, err)
	}
	laterPairs("after the earlier writes' repair")
	if s := studyState(t, db)[4]; s != (pairState{Enrolled: true, Answered: true}) {
		t.Errorf("patient 4, whom the earlier writes alone touched, holds %+v after their repair, want enrolled and answered", s)
	}
	if n, err := intents.CountDocuments(ctx, bson.M{}); err != nil || n != 0 {
		t.Errorf("%d intents left (%v)", n, err)
	}
	return sent
}

// TestARepairMarksOnlyTheEarlierWritesOfWhatItHolds: the repair of a
// forward write marks its pairs in the intents of earlier writes
// (supersedeEarlier), but not in the intent of a write that began after
// it, whose marks on it were lost (that write is the later one, and its
// answer stands), nor a pair that an earlier write marked in it (their
// marks crossed, and that write's repair writes the pair). A write that
// began in the same millisecond counts as earlier: which of the two came
// first cannot be told from began, and marking it keeps its repair from
// undoing this one's. Here a withdrawal of patient 1's answer, given up,
// is repaired first; the answer's write, of a process that dies after, is
// repaired then, and must write the answer, or, begun in the same
// millisecond, leave the withdrawal standing.
func TestARepairMarksOnlyTheEarlierWritesOfWhatItHolds(t *testing.T) {
	for _, c := range []struct {
		name       string
		answered   time.Duration // when the answer's write began, from the withdrawal's start
		superseded []string      // the withdrawal's
		want       bool          // patient 1 answered after both repairs
	}{
		{"the answer later, its marks lost", time.Second, []string{}, true},
		{"the answer earlier, their marks crossed", -time.Second, []string{"1/1"}, true},
		{"the answer in the same millisecond, its marks lost", 0, []string{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			db, clock := clockedDB(t)
			leases := repotest.Collection(t, db, "service_instances")
			if _, err := leases.InsertOne(ctx, bson.M{"_id": "other", "renewed": clock.now()}); err != nil {
				t.Fatal(err)
			}
			began := clock.now().Add(-time.Hour).Truncate(time.Millisecond)
			answer := bson.M{"patientId": int64(1), "studyId": int64(1), "scopeCodeId": int64(1), "consented": true, "consentedTime": began, "lastUpdated": began}
			intents := repotest.Collection(t, db, "write_intents")
			if _, err := intents.InsertMany(ctx, []any{
				bson.M{"_id": bson.NewObjectID(), "kind": "consents.write", "consentOp": "withdraw", "consents": bson.A{answer}, "instance": "",
					"startedAt": began, "began": began, "keys": []string{}, "touches": []string{"1/1"}, "superseded": c.superseded},
				bson.M{"_id": bson.NewObjectID(), "kind": "consents.write", "consentOp": "answer", "consents": bson.A{answer}, "instance": "other",
					"startedAt": clock.now(), "began": began.Add(c.answered), "keys": []string{}, "touches": []string{"1/1"}},
			}); err != nil {
				t.Fatal(err)
			}
			for _, step := range []struct {
				renewed  time.Time // the other process's lease
				repaired int
			}{{clock.now(), 1}, {clock.now().Add(-time.Hour), 1}} {
				if _, err := leases.UpdateOne(ctx, bson.M{"_id": "other"}, bson.M{"$set": bson.M{"renewed": step.renewed}}); err != nil {
					t.Fatal(err)
				}
				if rep, err := db.Repair(ctx, repo.RepairOptions{}); err != nil || rep.Repaired["consents.write"] != step.repaired || len(rep.Failed) != 0 {
					t.Fatalf("the repair, the other process's lease renewed %v: %+v, %v; want one intent repaired", step.renewed, rep, err)
				}
			}
			if s := studyState(t, db)[1]; s.Answered != c.want {
				t.Errorf("patient 1 after the repairs: %+v, want answered %v", s, c.want)
			}
		})
	}
}

// TestAnIntentOfARunningProcessIsRepairedAfterIntentTimeout: an intent of
// this very process, whose lease is alive, counts as a write still running
// (no repair touches it) until intentTimeout, after which no write is still
// at it: the request that wrote it ended without finishing (a panic), and
// the repair rolls it forward.
func TestAnIntentOfARunningProcessIsRepairedAfterIntentTimeout(t *testing.T) {
	ctx := context.Background()
	db, clock := clockedDB(t)
	if err := repo.RenewLease(ctx, db); err != nil {
		t.Fatal(err)
	}
	intents := repotest.Collection(t, db, "write_intents")
	if _, err := intents.InsertOne(ctx, enrollmentIntent(repo.LeaseID(db), clock.now(), nil)); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		after            time.Duration
		running, repairs int
	}{{repo.LeaseTimeout + time.Second, 1, 0}, {repo.IntentTimeout, 0, 1}} {
		clock.advance(step.after)
		if err := repo.RenewLease(ctx, db); err != nil {
			t.Fatal(err)
		}
		rep, err := db.Repair(ctx, repo.RepairOptions{})
		if err != nil || rep.Running != step.running || rep.Repaired["enrollments.create"] != step.repairs {
			t.Errorf("after %v: %+v, %v; want %d running, %d repaired", step.after, rep, err, step.running, step.repairs)
		}
	}
	wantEnrolled(t, db, "")
}

// TestAWriteWhoseIntentIsCutOnTheWireWritesNothing: an observation batch
// or an enrollment whose intent insert fails with an unknown outcome (the
// connection is lost as it is sent) fails, having written nothing, and
// puts a given-up copy of the intent in its place: the insert may still
// land, and with this instance's live lease it would count as a write
// running for intentTimeout (15 minutes), after which its repair would
// roll the enrollment forward, a write its caller was told failed. An
// insert that landed before the copy is replaced by it, one that lands
// after is refused as a duplicate key; the copy is repaired after
// leaseTimeout, while the instance runs on, and settles nothing: no
// observation, claim or enrollment is stored, whether the insert was lost
// or landed, before or after.
func TestAWriteWhoseIntentIsCutOnTheWireWritesNothing(t *testing.T) {
	ctx := context.Background()
	id := domain.Identifier{System: "urn:example:obs", Value: "x"}
	for _, c := range []struct {
		kind    string
		write   func(d *repo.DB) error
		written []string // the collections it writes
	}{
		{"observations.create", func(d *repo.DB) error {
			return d.CreateObservations(ctx, []*domain.Observation{testObservation(1, id)})[0]
		}, []string{"observations", "observation_identifiers"}},
		{"enrollments.create", func(d *repo.DB) error {
			return d.CreateEnrollments(ctx, []domain.Enrollment{{StudyID: 1, PatientID: 1}})
		}, []string{"enrollments"}},
	} {
		for _, landing := range []string{"lost", "landed before the give-up", "landed after the give-up"} {
			t.Run(c.kind+" "+landing, func(t *testing.T) {
				db, clock := clockedDB(t)
				instance, arm := cuttable(t, db, "insert", "write_intents")
				clock.set(instance)
				cut := arm()
				if landing == "landed before the give-up" {
					cut.landBefore("update") // the give-up's replace
				}
				if err := c.write(instance); err == nil {
					t.Fatal("the write whose intent insert was cut succeeded")
				}
				if landing == "landed after the give-up" {
					cut.landRefused()
				}
				intents := repotest.Collection(t, db, "write_intents")
				var in struct {
					Kind     string `bson:"kind"`
					Instance string `bson:"instance"`
				}
				if err := intents.FindOne(ctx, bson.M{}).Decode(&in); err != nil || in.Kind != c.kind || in.Instance != "" {
					t.Errorf("the intent after the cut insert: %+v, %v; want the write's, given up", in, err)
				}
				if rep, err := db.Repair(ctx, repo.RepairOptions{}); err != nil || rep.Running != 1 {
					t.Errorf("the repair within leaseTimeout: %+v, %v; want the intent left as running", rep, err)
				}
				clock.advance(repo.LeaseTimeout + time.Second)
				if err := repo.RenewLease(ctx, instance); err != nil { // the instance runs on
					t.Fatal(err)
				}
				if rep, err := db.Repair(ctx, repo.RepairOptions{}); err != nil || rep.Repaired[c.kind] != 1 {
					t.Errorf("the repair after leaseTimeout: %+v, %v; want the intent repaired", rep, err)
				}
				for _, name := range append(c.written, "write_intents") {
					if n, err := repotest.Collection(t, db, name).CountDocuments(ctx, bson.M{}); err != nil || n != 0 {
						t.Errorf("%d documents in %s after the repair (%v), want none", n, name, err)
					}
				}
			})
		}
	}
}

// testClock is a clock for the test's instances (repo.SetClock): the time
// now, moved on by advance.
type testClock struct{ skew atomic.Int64 }

func (c *testClock) now() time.Time { return time.Now().Add(time.Duration(c.skew.Load())) }

func (c *testClock) advance(d time.Duration) { c.skew.Add(int64(d)) }

// set makes c the clock of the instances, before their first write.
func (c *testClock) set(instances ...*repo.DB) {
	for _, d := range instances {
		repo.SetClock(d, c.now)
	}
}

// cuttable opens db's database again, as another instance of the
// service would, through a TCP relay (relay); arm makes the next command
// named command on the collection fail as on a lost connection: the
// connections open through the relay are closed as it is sent, before
// it reaches the server. A command cut so in production may or may not
// reach the server; the cutCommand arm returns sends it late (land). The
// instance is closed when the test ends.
func cuttable(t *testing.T, db *repo.DB, command, collection string) (instance *repo.DB, arm func() *cutCommand) {
	t.Helper()
	uri, l := relay(t)
	var armed atomic.Bool
	c := &cutCommand{t: t, db: db, link: l, command: command, collection: collection}
	instance = openThrough(t, db, uri, &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		coll, _ := e.Command.Lookup(e.CommandName).StringValueOK()
		if e.CommandName == command && coll == collection && armed.Swap(false) {
			sent := slices.Clone(e.Command)
			c.sent.Store(&sent)
			l.cut()
		}
		if next := c.before.Load(); next != nil && e.CommandName == *next && coll == collection && c.before.CompareAndSwap(next, nil) {
			c.land()
		}
	}})
	c.instance = instance
	return instance, func() *cutCommand { armed.Store(true); return c }
}

// openThrough opens db's database again, as another instance of the
// service would, at uri (a relay's), its commands reported to monitor
// (nil: to none). The instance is closed when the test ends.
func openThrough(t *testing.T, db *repo.DB, uri string, monitor *event.CommandMonitor) *repo.DB {
	t.Helper()
	ctx := context.Background()
	instance, err := repo.OpenWith(ctx, uri, db.Name(), repo.Options{Monitor: monitor})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = instance.Close(ctx) })
	return instance
}

// cutCommand is the command a cuttable instance cut.
type cutCommand struct {
	t                   *testing.T
	db                  *repo.DB
	instance            *repo.DB // the instance whose command was cut
	link                *link    // its relay, to fail its other commands (failWith)
	command, collection string
	sent                atomic.Pointer[bson.Raw]
	before              atomic.Pointer[string] // landBefore's command
}

// landBefore lands the cut command (land) as the instance sends its next
// command named next on the collection, before it reaches the server.
func (c *cutCommand) landBefore(next string) { c.before.Store(&next) }

// land sends the cut command on another connection, as a command the
// server applies after the driver gave up on it, and fails the test
// unless it changed something: a "landed late" case that landed nothing
// would pass as the "lost" one.
func (c *cutCommand) land() {
	c.t.Helper()
	if n, refused := c.send(); n == 0 || refused {
		c.t.Fatalf("the cut %s on %s, landing late, changed nothing", c.command, c.collection)
	}
}

// landRefused is land for a command the write made sure would be refused
// when it lands late (an insert whose _id the write took since): it fails
// the test unless the command was refused and changed nothing.
func (c *cutCommand) landRefused() {
	c.t.Helper()
	if n, refused := c.send(); n != 0 || !refused {
		c.t.Fatalf("the cut %s on %s, landing late, was applied (n %d), want it refused", c.command, c.collection, n)
	}
}

// send sends the cut command on another connection: n documents changed,
// and whether the server refused some with a write error.
func (c *cutCommand) send() (n int64, refused bool) {
	c.t.Helper()
	sent := c.sent.Load()
	if sent == nil {
		c.t.Fatalf("no %s on %s was cut", c.command, c.collection)
	}
	elems, err := sent.Elements()
	if err != nil {
		c.t.Fatal(err)
	}
	var cmd bson.D // the command without the session and routing fields the driver adds
	for _, e := range elems {
		if key := e.Key(); key != "lsid" && key != "txnNumber" && !strings.HasPrefix(key, "$") {
			cmd = append(cmd, bson.E{Key: key, Value: e.Value()})
		}
	}
	// An update that matches no document answers ok, write errors
	// aside: the reply's n says whether it landed. The driver returns the
	// write errors of a reply as a WriteException.
	var reply struct {
		N int64 `bson:"n"`
	}
	err = repotest.Collection(c.t, c.db, c.collection).Database().RunCommand(context.Background(), cmd).Decode(&reply)
	if we := (mongo.WriteException{}); errors.As(err, &we) && len(we.WriteErrors) > 0 {
		return reply.N, true
	}
	if err != nil {
		c.t.Fatalf("the cut %s on %s, landing late: %v", c.command, c.collection, err)
	}
	return reply.N, false
}

// eachLanding runs f as the subtests "<name> lost" and "<name> landed
// late", each on a new database whose clock is a test clock: a command
// cut on the wire (cuttable) may or may not reach the server, and the
// store must end consistent either way.
func eachLanding(t *testing.T, name string, f func(t *testing.T, db *repo.DB, clock *testClock, late bool)) {
	for _, late := range []bool{false, true} {
		t.Run(strings.TrimSpace(name+" "+map[bool]string{false: "lost", true: "landed late"}[late]), func(t *testing.T) {
			db, clock := clockedDB(t)
			f(t, db, clock, late)
		})
	}
}

// link is a TCP relay to the test database: cut closes the connections
// open through it, so that the command the driver is about to send on one
// fails as on a lost connection; the driver's next command connects anew.
// failWith makes it fail chosen commands itself.
type link struct {
	mu     sync.Mutex
	conns  []net.Conn
	faults func(command, collection string) fault // nil: every command passes
}

// fault is what a relay does with a command the driver sends through it.
type fault int

const (
	pass fault = iota // sends it on to the server
	// refuse answers it with an error the relay makes, as the server
	// answers a command it did not apply: a definite failure, one that
	// outcomeUnknown does not count as unknown.
	refuse
	// drop closes the connection instead of sending it on: the command
	// is lost on the wire, an unknown outcome (cut, without a late
	// landing).
	drop
)

// failWith makes the relay ask f what to do with each command the driver
// sends through it from now, by the command's name and collection; f is
// asked about one command at a time, in the order the relay reads them.
func (l *link) failWith(f func(command, collection string) fault) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.faults = f
}

// faultOf is what the relay does with the message msg.
func (l *link) faultOf(msg []byte) fault {
	command, collection, ok := commandOf(msg)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !ok || l.faults == nil {
		return pass
	}
	return l.faults(command, collection)
}

// forward copies the driver's messages from down to up, one at a time,
// doing with each what its fault says, until either connection closes;
// then it closes both.
func (l *link) forward(up, down net.Conn) {
	defer func() {
		_ = up.Close()
		_ = down.Close()
	}()
	for {
		msg, err := readMessage(down)
		if err != nil {
			return
		}
		switch l.faultOf(msg) {
		case drop:
			return
		case refuse:
			_, err = down.Write(refusal(msg))
		default:
			_, err = up.Write(msg)
		}
		if err != nil {
			return
		}
	}
}

// The wire protocol's parts the relay reads and writes: every message
// starts with a header of four little-endian int32s (its length,
// requestID, responseTo, opCode); an OP_MSG, the message of every
// command, then has its flags and its sections, the body (kind 0) one
// BSON document whose first field names the command and its collection.
const (
	headerSize = 16
	opMsg      = 2013
)

// readMessage reads the next message on c, whole.
func readMessage(c net.Conn) ([]byte, error) {
	header := make([]byte, headerSize)
	if _, err := io.ReadFull(c, header); err != nil {
		return nil, err
	}
	size := binary.LittleEndian.Uint32(header)
	if size < headerSize {
		return nil, fmt.Errorf("a message of %d bytes", size)
	}
	msg := append(header, make([]byte, size-headerSize)...)
	_, err := io.ReadFull(c, msg[headerSize:])
	return msg, err
}

// commandOf reads the name and collection of the command msg sends; ok is
// false when msg is no OP_MSG command.
func commandOf(msg []byte) (command, collection string, ok bool) {
	if binary.LittleEndian.Uint32(msg[12:]) != opMsg {
		return "", "", false
	}
	for i := headerSize + 4; i+5 <= len(msg); { // sections, after the flags
		kind, size := msg[i], int(binary.LittleEndian.Uint32(msg[i+1:]))
		if i+1+size > len(msg) {
			return "", "", false
		}
		if kind == 0 {
			first, err := bson.Raw(msg[i+1 : i+1+size]).IndexErr(0)
			if err != nil {
				return "", "", false
			}
			collection, _ = first.Value().StringValueOK()
			return first.Key(), collection, true
		}
		i += 1 + size // a document sequence: its size counts itself
	}
	return "", "", false
}

// refusal is the server's answer to the command msg that refuses it: ok
// 0 with an error code that says nothing about the connection or a
// timeout.
func refusal(msg []byte) []byte {
	body, err := bson.Marshal(bson.D{{Key: "ok", Value: 0.0}, {Key: "errmsg", Value: "refused by the test relay"},
		{Key: "code", Value: int32(2)}, {Key: "codeName", Value: "BadValue"}})
	if err != nil {
		panic(err)
	}
	reply := binary.LittleEndian.AppendUint32(nil, uint32(headerSize+4+1+len(body)))
	reply = binary.LittleEndian.AppendUint32(reply, 0) // requestID
	reply = append(reply, msg[4:8]...)                 // responseTo: the command's requestID
	reply = binary.LittleEndian.AppendUint32(reply, opMsg)
	reply = binary.LittleEndian.AppendUint32(reply, 0) // flags
	reply = append(reply, 0)                           // the body section
	return append(reply, body...)
}

// relay starts a link and returns the URI of the test database through
// it; it stops when the test ends.
func relay(t *testing.T) (string, *link) {
	t.Helper()
	if testing.Short() {
		t.Skip("faults on the wire: not in the short tier")
	}
	u, err := url.Parse(repotest.URI())
	if err != nil {
		t.Fatal(err)
	}
	if u.Scheme != "mongodb" || strings.Contains(u.Host, ",") {
		t.Skipf("the test database %s is not one host to relay", u.Redacted())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &link{}
	t.Cleanup(func() {
		_ = ln.Close()
		l.cut()
	})
	target := u.Host
	go func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = down.Close()
				continue
			}
			l.mu.Lock()
			l.conns = append(l.conns, down, up)
			l.mu.Unlock()
			go l.forward(up, down)
			go pipe(down, up)
		}
	}()
	u.Host = ln.Addr().String()
	q := u.Query()
	q.Set("directConnection", "true")
	// A cut command is a write lost on the wire: on a MongoDB replica set
	// the driver would send a retryable one (an intent's DeleteOne) again
	// on a new connection, and it would not fail.
	q.Set("retryWrites", "false")
	u.RawQuery = q.Encode()
	return u.String(), l
}

// pipe copies src to dst until either closes, then closes both.
func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
}

func (l *link) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		_ = c.Close()
	}
	l.conns = nil
}

// Abandoned intents of every kind that rolls back: a patient create cut
// after its login and one identifier claim, a practitioner create cut
// after its login. The dry run reports them and changes nothing; the
// repair removes the logins and claims, and the email and identifier are
// free again.
func TestRepairRollsBackInterruptedCreates(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	users := repotest.Collection(t, db, "users")
	for _, u := range []bson.M{{"_id": int64(50), "email": "p@example.org", "userType": "patient"},
		{"_id": int64(51), "email": "d@example.org", "userType": "practitioner"}} {
		if _, err := users.InsertOne(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	mrn := domain.Identifier{System: "urn:example:mrn", Value: "1"}
	if _, err := repotest.Collection(t, db, "patient_identifiers").InsertOne(ctx, bson.M{"system": mrn.System, "value": mrn.Value, "patientId": int64(60)}); err != nil {
		t.Fatal(err)
	}
	intents := repotest.Collection(t, db, "write_intents")
	for _, in := range []bson.M{
		{"kind": "patient.create", "userId": int64(50), "patientId": int64(60), "keys": []string{repo.ClaimKey(mrn.System, mrn.Value)}},
		{"kind": "practitioner.create", "userId": int64(51), "organizationId": int64(7), "keys": []string{}},
	} {
		in["_id"], in["instance"], in["startedAt"] = bson.NewObjectID(), "gone", time.Now()
		if _, err := intents.InsertOne(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	// Their process holds no lease: it is gone.
	rep, err := db.Repair(ctx, repo.RepairOptions{DryRun: true})
	if err != nil || rep.Intents != 2 || rep.Running != 0 || rep.Repaired["patient.create"] != 1 || rep.Repaired["practitioner.create"] != 1 {
		t.Fatalf("dry run: %+v, %v", rep, err)
	}
	if n, _ := users.CountDocuments(ctx, bson.M{}); n != 2 {
		t.Fatalf("the dry run changed the users: %d", n)
	}
	if rep, err := db.Repair(ctx, repo.RepairOptions{}); err != nil || rep.Repaired["patient.create"] != 1 || rep.Repaired["practitioner.create"] != 1 {
		t.Fatalf("repair: %+v, %v", rep, err)
	}
	if n, _ := users.CountDocuments(ctx, bson.M{}); n != 0 {
		t.Errorf("%d logins of interrupted creates left", n)
	}
	u, p := newPatient("p@example.org", "P", mrn)
	if err := db.CreatePatient(ctx, u, p); err != nil {
		t.Errorf("the email and identifier of a repaired create: %v", err)
	}
}

// Claims of versions before intents (no intent names them) whose owner
// was never stored: a new observation or patient takes the identifier
// over (its own intent naming the key does not stand in its way), and
// the doctor's scan finds and releases the rest.
func TestOrphanClaimsOfOlderVersions(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	claims := repotest.Collection(t, db, "observation_identifiers")
	patientClaims := repotest.Collection(t, db, "patient_identifiers")
	for i, value := range []string{"old-1", "old-2"} {
		if _, err := claims.InsertOne(ctx, bson.M{"system": "urn:example:obs", "value": value, "observationId": int64(900 + i)}); err != nil {
			t.Fatal(err)
		}
		if _, err := patientClaims.InsertOne(ctx, bson.M{"system": "urn:example:mrn", "value": value, "patientId": int64(900 + i)}); err != nil {
			t.Fatal(err)
		}
	}
	o := testObservation(1, domain.Identifier{System: "urn:example:obs", Value: "old-1"})
	if errs := db.CreateObservations(ctx, []*domain.Observation{o}); errs[0] != nil {
		t.Fatalf("an orphan claim of an older version: %v", errs[0])
	}
	u, p := newPatient("p@example.org", "P", domain.Identifier{System: "urn:example:mrn", Value: "old-1"})
	if err := db.CreatePatient(ctx, u, p); err != nil {
		t.Fatalf("an orphan patient identifier of an older version: %v", err)
	}
	want := map[string]int{"observation_identifiers": 1, "patient_identifiers": 1}
	rep, err := db.Repair(ctx, repo.RepairOptions{Scan: true, DryRun: true})
	if err != nil || !maps.Equal(rep.Orphans, want) {
		t.Fatalf("dry run: %+v, %v; want one orphan claim of each", rep, err)
	}
	if rep, err := db.Repair(ctx, repo.RepairOptions{Scan: true}); err != nil || !maps.Equal(rep.Orphans, want) {
		t.Fatalf("repair: %+v, %v", rep, err)
	}
	for _, c := range []*mongo.Collection{claims, patientClaims} {
		if n, _ := c.CountDocuments(ctx, bson.M{}); n != 1 {
			t.Errorf("%s: %d claims left, want the stored owner's", c.Name(), n)
		}
	}
}

// A duplicate names the stored observation, as Stored when it is the same
// observation sent again, and only in the message when it is another; an
// observation without identifiers is its content's: sent again, it is a
// duplicate, not a second observation.
func TestDuplicateObservationsNameTheStoredOne(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	id := domain.Identifier{System: "urn:example:obs", Value: "x"}
	first, bare := testObservation(1, id), testObservation(1)
	if errs := db.CreateObservations(ctx, []*domain.Observation{first, bare}); errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	other := testObservation(1, id)
	other.Payload = []byte(`{"other": true}`)
	errs := db.CreateObservations(ctx, []*domain.Observation{testObservation(1, id), other, testObservation(1)})
	for i, want := range []string{"Observation/1", "", "Observation/2"} {
		if !domain.IsCode(errs[i], domain.CodeDuplicate) || domain.StoredAs(errs[i]) != want {
			t.Errorf("entry %d: %v, stored %q; want a duplicate naming %q", i, errs[i], domain.StoredAs(errs[i]), want)
		}
	}
}

// The repair at start-up is bounded by a time budget: what it leaves is
// reported as left, stays in place, and a later repair (the sweep's)
// finishes it.
func TestRepairIsBounded(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	intents := repotest.Collection(t, db, "write_intents")
	for i := range 3 {
		in := bson.M{"_id": bson.NewObjectID(), "kind": "enrollments.delete", "instance": "gone", "startedAt": time.Now(),
			"studyId": int64(1), "patientIds": []int64{int64(i + 1)}, "keys": []string{}}
		if _, err := intents.InsertOne(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := db.Repair(ctx, repo.RepairOptions{Budget: time.Nanosecond})
	if err != nil || rep.Intents != 3 || rep.Left == 0 || rep.Left+rep.Repaired["enrollments.delete"] != 3 {
		t.Fatalf("a repair out of budget: %+v, %v; want intents left", rep, err)
	}
	if n, _ := intents.CountDocuments(ctx, bson.M{}); n != int64(rep.Left) {
		t.Errorf("%d intents stored, want the %d left", n, rep.Left)
	}
	if rep, err := db.Repair(ctx, repo.RepairOptions{}); err != nil || rep.Repaired["enrollments.delete"] != rep.Intents || rep.Left != 0 {
		t.Errorf("the next repair: %+v, %v", rep, err)
	}
	if n, _ := intents.CountDocuments(ctx, bson.M{}); n != 0 {
		t.Errorf("%d intents left", n)
	}
}

// An instance that stalled past the lease timeout finds its lease removed
// by another instance's repair. Its next renewal writes the lease anew: an
// intent it then records is a write running, which the other instance
// leaves alone, not one of a dead process to roll back under it.
func TestALeaseRemovedWhileItsProcessStalledIsWrittenAgain(t *testing.T) {
	first := repotest.NewDB(t)
	ctx := context.Background()
	second := repotest.OtherInstance(t, first)
	if err := first.CreateEnrollments(ctx, nil); err != nil { // takes the lease
		t.Fatal(err)
	}
	leases := repotest.Collection(t, first, "service_instances")
	if _, err := leases.DeleteOne(ctx, bson.M{"_id": repo.LeaseID(first)}); err != nil {
		t.Fatal(err)
	}
	if err := repo.RenewLease(ctx, first); err != nil {
		t.Fatal(err)
	}
	if n, _ := leases.CountDocuments(ctx, bson.M{"_id": repo.LeaseID(first)}); n != 1 {
		t.Fatalf("the renewal left the lease gone (%d documents)", n)
	}
	if _, err := repotest.Collection(t, first, "write_intents").InsertOne(ctx, bson.M{"_id": bson.NewObjectID(), "kind": "enrollments.create",
		"instance": repo.LeaseID(first), "startedAt": time.Now(), "keys": []string{}}); err != nil {
		t.Fatal(err)
	}
	rep, err := second.Repair(ctx, repo.RepairOptions{})
	if err != nil || rep.Running != 1 || len(rep.Repaired) != 0 {
		t.Errorf("the other instance's repair: %+v, %v; want the running write left alone", rep, err)
	}
}

// A consent answer cut short by a process whose lease is still fresh, and
// withdrawn by the patient on another instance before that lease goes
// stale: the repair that comes later rolls forward the rest of the write,
// but not the withdrawn answer, which would otherwise share the patient's
// data again without consent. The same holds for enrollments ended since.
func TestRepairLeavesWhatALaterWriteChanged(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	leases := repotest.Collection(t, db, "service_instances")
	if _, err := leases.InsertOne(ctx, bson.M{"_id": "other", "renewed": time.Now()}); err != nil {
		t.Fatal(err)
	}
	consents := repotest.Collection(t, db, "consents")
	answer := func(patient int64) bson.M {
		return bson.M{"patientId": patient, "studyId": int64(1), "scopeCodeId": int64(1), "consented": true,
			"consentedTime": time.Now(), "lastUpdated": time.Now()}
	}
	// The cut write answered for patients 1 and 2; patient 1's answer was stored.
	if _, err := consents.InsertOne(ctx, answer(1)); err != nil {
		t.Fatal(err)
	}
	intents := repotest.Collection(t, db, "write_intents")
	for _, in := range []bson.M{
		{"kind": "consents.write", "consentOp": "answer", "consents": []bson.M{answer(1), answer(2)}, "touches": []string{"1/1", "2/1"}},
		{"kind": "enrollments.create", "enrollments": []bson.M{{"studyId": int64(1), "patientId": int64(1)}, {"studyId": int64(1), "patientId": int64(3)}},
			"touches": []string{"1/1", "3/1"}},
	} {
		in["_id"], in["instance"], in["startedAt"], in["keys"] = bson.NewObjectID(), "other", time.Now(), []string{}
		if _, err := intents.InsertOne(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	// Patient 1 withdraws, then is unenrolled, here.
	if err := db.WithdrawConsents(ctx, []domain.Consent{{PatientID: 1, StudyID: 1, ScopeCodeID: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteEnrollments(ctx, 1, []int64{1}); err != nil {
		t.Fatal(err)
	}
	// The other process is gone.
	if _, err := leases.UpdateOne(ctx, bson.M{"_id": "other"}, bson.M{"$set": bson.M{"renewed": time.Now().Add(-time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	rep, err := db.Repair(ctx, repo.RepairOptions{})
	if err != nil || rep.Repaired["consents.write"] != 1 || rep.Repaired["enrollments.create"] != 1 || len(rep.Failed) != 0 {
		t.Fatalf("repair: %+v, %v", rep, err)
	}
	for patient, want := range map[int64]int64{1: 0, 2: 1} {
		if n, _ := consents.CountDocuments(ctx, bson.M{"patientId": patient}); n != want {
			t.Errorf("patient %d: %d answers after the repair, want %d", patient, n, want)
		}
	}
	enrollments := repotest.Collection(t, db, "enrollments")
	for patient, want := range map[int64]int64{1: 0, 3: 1} {
		if n, _ := enrollments.CountDocuments(ctx, bson.M{"patientId": patient}); n != want {
			t.Errorf("patient %d: %d enrollments after the repair, want %d", patient, n, want)
		}
	}
}

// A patient create whose login is stored and whose record is not, by a
// process that still holds its lease (running, or dead and not yet
// known so): the same email again is a conflict to try later, not a
// duplicate, which would tell the client the email is taken for good.
func TestAnEmailOfACreateRunningIsAConflict(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	if _, err := repotest.Collection(t, db, "service_instances").InsertOne(ctx, bson.M{"_id": "other", "renewed": time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := repotest.Collection(t, db, "users").InsertOne(ctx, bson.M{"_id": int64(50), "email": "p@example.org", "userType": "patient"}); err != nil {
		t.Fatal(err)
	}
	if _, err := repotest.Collection(t, db, "write_intents").InsertOne(ctx, bson.M{"_id": bson.NewObjectID(), "kind": "patient.create",
		"instance": "other", "startedAt": time.Now(), "userId": int64(50), "patientId": int64(60), "keys": []string{repo.EmailKey("p@example.org")}}); err != nil {
		t.Fatal(err)
	}
	u, p := newPatient("p@example.org", "P")
	if err := db.CreatePatient(ctx, u, p); !domain.IsCode(err, domain.CodeConflict) {
		t.Errorf("the email of a create running: %v, want CodeConflict", err)
	}
}

// A repair adopts the intent it repairs (it moves it to its own lease, so
// that two instances never repair one intent at once); one that fails
// gives it back, abandoned as it was, and the next sweep tries again
// instead of taking it for a write this instance is still running.
func TestAFailedRepairGivesTheIntentBack(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	intents := repotest.Collection(t, db, "write_intents")
	id, began := bson.NewObjectID(), time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	if _, err := intents.InsertOne(ctx, bson.M{"_id": id, "kind": "a.kind.of.a.later.version", "instance": "gone",
		"startedAt": began, "keys": []string{}}); err != nil {
		t.Fatal(err)
	}
	for sweep := 1; sweep <= 2; sweep++ {
		rep, err := db.Repair(ctx, repo.RepairOptions{})
		if err != nil || len(rep.Failed) != 1 || rep.Running != 0 {
			t.Fatalf("sweep %d: %+v, %v; want the repair failed", sweep, rep, err)
		}
		var in struct {
			Instance  string    `bson:"instance"`
			StartedAt time.Time `bson:"startedAt"`
		}
		if err := intents.FindOne(ctx, bson.M{"_id": id}).Decode(&in); err != nil {
			t.Fatal(err)
		}
		if in.Instance != "gone" || !in.StartedAt.Equal(began) {
			t.Errorf("sweep %d: the intent is %s's from %v, want given back to gone, from %v", sweep, in.Instance, in.StartedAt, began)
		}
	}
}

// clockedDB is a test database on a clock the test moves (testClock).
func clockedDB(t *testing.T) (*repo.DB, *testClock) {
	t.Helper()
	db := repotest.NewDB(t)
	clock := &testClock{}
	clock.set(db)
	return db, clock
}

// wantEnrolled fails t unless patient 1 is enrolled in study 1, once; how
// says by what, after "want patient 1's".
func wantEnrolled(t *testing.T, db *repo.DB, how string) {
	t.Helper()
	es, err := db.Enrollments(context.Background(), domain.EnrollmentQuery{StudyIDs: []int64{1}})
	if err != nil || len(es) != 1 {
		t.Errorf("the enrollments after the repair: %+v, %v; want patient 1's%s", es, err, how)
	}
}

// TestACutObservationInsertThatLandedIsStored: a batch whose insert of
// observations fails with an unknown outcome, but landed before the
// batch looks up what it stored, answers its entries stored, as after any
// insert that failed as a whole (settleInserted): the lookup finds them,
// and the observations stored keep their claims. Before, an unknown
// outcome skipped the lookup and failed every entry, stored or not.
func TestACutObservationInsertThatLandedIsStored(t *testing.T) {
	ctx := context.Background()
	db, clock := clockedDB(t)
	batch, arm := cuttable(t, db, "insert", "observations")
	clock.set(batch)
	arm().landBefore("find") // the lookup of what the insert stored
	ids := []domain.Identifier{{System: "urn:example:obs", Value: "x"}, {System: "urn:example:obs", Value: "y"}}
	for i, err := range batch.CreateObservations(ctx, []*domain.Observation{testObservation(1, ids[0]), testObservation(1, ids[1])}) {
		if err != nil {
			t.Errorf("entry %d of the batch whose insert landed unanswered: %v, want it stored", i, err)
		}
	}
	for _, col := range []string{"observations", "observation_identifiers"} {
		if n, err := repotest.Collection(t, db, col).CountDocuments(ctx, bson.M{}); err != nil || n != 2 {
			t.Errorf("%d documents in %s (%v), want 2", n, col, err)
		}
	}
}
