package repo_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"exchange/domain"
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
