package repo_test

import (
	"context"
	"testing"

	"exchange/domain"
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
