package repo_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"

	"exchange/domain"
	"exchange/repo"
	"exchange/repo/repotest"
)

func testObservation(patientID int64, ids ...domain.Identifier) *domain.Observation {
	return &domain.Observation{PatientID: patientID, DataSourceID: 1, Status: "final", Code: "omh:heart-rate:2.0",
		Codings:     []domain.Coding{{System: domain.SystemOpenMHealth, Code: "omh:heart-rate:2.0"}},
		Identifiers: ids, ContentType: "application/json", Payload: []byte(`{}`)}
}

// An insert of observations that fails as a whole after part of it was
// written (here the driver sends the first batch, then refuses a document
// larger than a message) reports only the unstored entries as failed, and
// releases only their identifier claims.
func TestCreateObservationsSettlesAWholeInsertFailure(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	kept := domain.Identifier{System: "urn:example:obs", Value: "kept"}
	freed := domain.Identifier{System: "urn:example:obs", Value: "freed"}
	small := testObservation(1, kept)
	huge := testObservation(1, freed)
	huge.Payload = bytes.Repeat([]byte("x"), 50<<20) // over the 48 MB message limit
	errs := db.CreateObservations(ctx, []*domain.Observation{small, huge})
	if errs[0] != nil || errs[1] == nil {
		t.Fatalf("errors = %v, want the small one stored and the huge one refused", errs)
	}
	if _, err := db.ObservationByID(ctx, small.ID); err != nil {
		t.Errorf("the stored observation: %v", err)
	}
	if _, err := db.ObservationByID(ctx, huge.ID); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("the refused observation: %v", err)
	}
	errs = db.CreateObservations(ctx, []*domain.Observation{testObservation(1, freed), testObservation(1, kept)})
	if errs[0] != nil {
		t.Errorf("the refused observation's identifier is still claimed: %v", errs[0])
	}
	if !domain.IsCode(errs[1], domain.CodeDuplicate) {
		t.Errorf("the stored observation's identifier was released: %v", errs[1])
	}
}

// A claim insert that fails as a whole after part of it was written (a
// claim larger than a message) stores nothing and releases every claim.
func TestCreateObservationsReleasesClaimsAfterAWholeClaimFailure(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	first := domain.Identifier{System: "urn:example:obs", Value: "first"}
	huge := domain.Identifier{System: "urn:example:obs", Value: strings.Repeat("x", 50<<20)}
	errs := db.CreateObservations(ctx, []*domain.Observation{testObservation(1, first), testObservation(1, huge)})
	if errs[0] == nil || errs[1] == nil {
		t.Fatalf("errors = %v, want both refused", errs)
	}
	if errs := db.CreateObservations(ctx, []*domain.Observation{testObservation(1, first)}); errs[0] != nil {
		t.Errorf("the refused observation's identifier is still claimed: %v", errs[0])
	}
}

func TestPatientHoldsObservations(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	if errs := db.CreateObservations(ctx, []*domain.Observation{testObservation(7)}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	for patientID, want := range map[int64]bool{7: true, 8: false} {
		if got, err := db.PatientHoldsObservations(ctx, patientID); err != nil || got != want {
			t.Errorf("patient %d: %v, %v; want %v", patientID, got, err, want)
		}
	}
}

// A resend is told from the claims it finds taken, without reading the
// observations, only when the claim still names its observation after the
// intents of the writes in flight were read: here the write that holds
// the claim (its intent live, its observation not stored) fails and
// releases the claim and ends its intent between the resend's first read
// of the claim and its read of the intents. Trusting the first read would
// answer the entry as stored, naming an observation that is not; it is
// stored instead.
func TestAClaimReleasedWhileAResendReadsIsNotTakenForStored(t *testing.T) {
	ctx := context.Background()
	var once sync.Once
	var release func()
	db := repotest.NewDBWith(t, repo.Options{Monitor: &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "find" && e.Command.Lookup("find").StringValue() == "write_intents" && release != nil {
			once.Do(release)
		}
	}}})
	id := domain.Identifier{System: "urn:example:obs", Value: "x"}
	const inFlight = 999_999 // the id of the other write's observation, not stored
	claims, intents := repotest.Collection(t, db, "observation_identifiers"), repotest.Collection(t, db, "write_intents")
	claim := bson.M{"_id": repo.ClaimKey(id.System, id.Value), "system": id.System, "value": id.Value, "observationId": int64(inFlight),
		"claimedAt": time.Now(), "content": "the other write's"}
	if _, err := claims.InsertOne(ctx, claim); err != nil {
		t.Fatal(err)
	}
	write := bson.M{"_id": bson.NewObjectID(), "kind": "observations.create", "state": "running", "instance": repo.LeaseID(db),
		"startedAt": time.Now(), "keys": bson.A{}, "firstId": int64(inFlight), "lastId": int64(inFlight)}
	if _, err := intents.InsertOne(ctx, write); err != nil {
		t.Fatal(err)
	}
	release = func() {
		if _, err := claims.DeleteOne(ctx, bson.M{"_id": claim["_id"]}); err != nil {
			t.Error(err)
		}
		if _, err := intents.DeleteOne(ctx, bson.M{"_id": write["_id"]}); err != nil {
			t.Error(err)
		}
	}
	o := testObservation(1, id)
	if err := db.CreateObservations(ctx, []*domain.Observation{o})[0]; err != nil {
		t.Fatalf("the observation whose identifier was released meanwhile: %v, want it stored", err)
	}
	if _, err := db.ObservationByID(ctx, o.ID); err != nil {
		t.Error(err)
	}
}

// A claim written before claims kept their observation's content (none
// stored) is checked against its observation, which is read: a resend is
// answered as before, the same observation as stored and another one as
// a different observation.
func TestAClaimWithoutContentIsCheckedAgainstItsObservation(t *testing.T) {
	var commands repotest.Commands
	db := repotest.NewDBWith(t, repo.Options{Monitor: commands.Monitor()})
	ctx := context.Background()
	id := domain.Identifier{System: "urn:example:obs", Value: "x"}
	first := testObservation(1, id)
	if err := db.CreateObservations(ctx, []*domain.Observation{first})[0]; err != nil {
		t.Fatal(err)
	}
	if _, err := repotest.Collection(t, db, "observation_identifiers").UpdateMany(ctx, bson.M{}, bson.M{"$unset": bson.M{"content": 1}}); err != nil {
		t.Fatal(err)
	}
	other := testObservation(1, id)
	other.Payload = []byte(`{"other": true}`)
	before := commands.Snapshot()
	errs := db.CreateObservations(ctx, []*domain.Observation{testObservation(1, id)})
	if !domain.IsCode(errs[0], domain.CodeDuplicate) || domain.StoredAs(errs[0]) != "Observation/1" {
		t.Errorf("the same observation again: %v, stored %q; want a duplicate naming Observation/1", errs[0], domain.StoredAs(errs[0]))
	}
	if n := commands.Since(before)["observations find"]; n != 1 {
		t.Errorf("the resend read the observations %d times, want once", n)
	}
	errs = db.CreateObservations(ctx, []*domain.Observation{other})
	if !domain.IsCode(errs[0], domain.CodeDuplicate) || domain.StoredAs(errs[0]) != "" || !strings.Contains(errs[0].Error(), "a different observation") {
		t.Errorf("another observation with the identifier: %v; want a duplicate naming none", errs[0])
	}
}
