package domain_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"exchange/domain"
	"exchange/repo/repotest"
)

// A patient who owns native observations is kept, as one with FHIR
// sources is: the observations would lose their owner.
func TestDeletePatientWithObservationsConflicts(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	sys := domain.SystemActor()
	org, err := f.svc.CreateOrganization(ctx, sys, domain.NewOrganization{Name: "Clinic", Type: "prov"})
	if err != nil {
		t.Fatal(err)
	}
	var ps []*domain.Patient
	for _, email := range []string{"a@example.org", "b@example.org"} {
		p, err := f.svc.CreatePatient(ctx, sys, domain.NewPatient{Email: email, FamilyName: "P", GivenNames: []string{"Pat"}, OrganizationIDs: []int64{org.ID}})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	withData, without := ps[0], ps[1]
	o := &domain.Observation{PatientID: withData.ID, DataSourceID: 1, Status: "final", Code: "omh:heart-rate:2.0",
		Codings:     []domain.Coding{{System: domain.SystemOpenMHealth, Code: "omh:heart-rate:2.0"}},
		ContentType: "application/json", Payload: []byte(`{}`)}
	if errs := f.db.CreateObservations(ctx, []*domain.Observation{o}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if err := f.svc.DeletePatient(ctx, sys, withData.ID); !domain.IsCode(err, domain.CodeConflict) {
		t.Errorf("deleting a patient with observations: %v, want conflict", err)
	}
	if _, err := f.svc.PatientByID(ctx, sys, withData.ID); err != nil {
		t.Errorf("the refused patient is gone: %v", err)
	}
	if _, err := f.svc.UserByEmail(ctx, "a@example.org"); err != nil {
		t.Errorf("the refused patient's user is gone: %v", err)
	}
	if err := f.svc.DeletePatient(ctx, sys, without.ID); err != nil {
		t.Errorf("deleting a patient without data: %v", err)
	}
	if _, err := f.svc.PatientByID(ctx, sys, without.ID); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("the deleted patient is still there: %v", err)
	}
}

// TestConcurrentPatientUpdatesKeepBothChanges: updates of different
// fields of one patient sent at once each keep their change: the one
// that finds the record changed under it applies its patch again.
func TestConcurrentPatientUpdatesKeepBothChanges(t *testing.T) {
	w := newWorld(t)
	f, p := w.f, w.patient
	ctx := context.Background()
	sys := domain.SystemActor()
	for round := range 4 {
		birthDate, phone := fmt.Sprintf("199%d-01-01", round), fmt.Sprintf("+4112345678%d", round)
		family := fmt.Sprintf("Family %d", round)
		patches := []domain.PatientPatch{{BirthDate: &birthDate}, {Phone: &phone}, {FamilyName: &family}}
		start := make(chan struct{})
		errs := make([]error, len(patches))
		var wg sync.WaitGroup
		for i, patch := range patches {
			wg.Go(func() {
				<-start
				_, errs[i] = f.svc.UpdatePatient(ctx, sys, p.ID, patch)
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d, update %d: %v", round, i, err)
			}
		}
		got, err := f.svc.PatientByID(ctx, sys, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		gotPhone := ""
		for _, c := range got.Telecom {
			if c.System == "phone" {
				gotPhone = c.Value
			}
		}
		if got.BirthDate != birthDate || gotPhone != phone || got.FamilyName != family {
			t.Errorf("round %d: %s, %v, %s; want %s, %s, %s: an update was lost", round, got.BirthDate, got.Telecom, got.FamilyName, birthDate, phone, family)
		}
	}
}

// racedPatient is a patient p@example.org (password "the first password")
// in a service over a recordRace store that races the patient's user.
func racedPatient(t *testing.T) (*recordRace, *domain.Service, *domain.Patient) {
	t.Helper()
	store := &recordRace{DB: repotest.NewDB(t), raced: "user"}
	svc := domain.NewService(domain.Config{Store: store})
	ctx, sys := context.Background(), domain.SystemActor()
	org, err := svc.CreateOrganization(ctx, sys, domain.NewOrganization{Name: "Clinic", Type: "prov"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := svc.CreatePatient(ctx, sys, domain.NewPatient{Email: "p@example.org", Password: "the first password",
		FamilyName: "P", GivenNames: []string{"Pat"}, OrganizationIDs: []int64{org.ID}})
	if err != nil {
		t.Fatal(err)
	}
	return store, svc, p
}

// TestPatientNamesLeaveTheLoginsCredentials: a change of a patient's names
// carries them to the patient's login, and only them. A password the
// patient chose while the update ran (accepting an invitation, say) stays:
// the update does not write back a user it read before.
func TestPatientNamesLeaveTheLoginsCredentials(t *testing.T) {
	store, svc, p := racedPatient(t)
	ctx, sys := context.Background(), domain.SystemActor()
	const chosen = "the password chosen meanwhile"
	store.change = func() {
		if err := svc.SetPassword(ctx, "p@example.org", chosen); err != nil {
			t.Error(err)
		}
	}
	family, given := "Renamed", []string{"Jo"}
	if _, err := svc.UpdatePatient(ctx, sys, p.ID, domain.PatientPatch{FamilyName: &family, GivenNames: &given}); err != nil {
		t.Fatal(err)
	}
	store.changeOnce("user") // the update read no user: the change comes after it
	u, err := svc.Authenticate(ctx, "p@example.org", chosen, "192.0.2.1")
	if err != nil {
		t.Fatalf("sign in with the password chosen meanwhile: %v", err)
	}
	if u.FirstName != "Jo" || u.LastName != "Renamed" {
		t.Errorf("the login's names: %q %q, want Jo Renamed", u.FirstName, u.LastName)
	}
}

// TestPasswordResetLeavesADeactivationStanding: a password reset that read
// the user before a superuser deactivated them writes the password, not
// the user it read: the deactivation stands, and the new password does
// not sign in.
func TestPasswordResetLeavesADeactivationStanding(t *testing.T) {
	store, svc, p := racedPatient(t)
	ctx, sys := context.Background(), domain.SystemActor()
	store.change = func() {
		if _, err := svc.SetUserActive(ctx, sys, p.UserID, false, nil); err != nil {
			t.Error(err)
		}
	}
	const reset = "the password reset meanwhile"
	if err := svc.SetPassword(ctx, "p@example.org", reset); err != nil {
		t.Fatal(err)
	}
	if store.change != nil {
		t.Fatal("the password reset read no user")
	}
	u, err := store.DB.UserByID(ctx, p.UserID)
	if err != nil {
		t.Fatal(err)
	}
	if u.IsActive {
		t.Error("the password reset made the deactivated user active again")
	}
	if _, err := svc.Authenticate(ctx, "p@example.org", reset, "192.0.2.1"); err == nil {
		t.Error("a deactivated user signs in with the password reset meanwhile")
	}
}

// TestPatientIdentifierAdditionsAndRemovals pins what AddIdentifiers and
// RemoveIdentifiers do with the list the update reads: a removal of an
// absent identifier changes nothing; an addition of one already there, or
// of one also removed, is refused (400) and writes nothing; with
// Identifiers they change that list; and an addition passes the update's
// own checks (an identifier another patient holds is a duplicate).
func TestPatientIdentifierAdditionsAndRemovals(t *testing.T) {
	w := newWorld(t)
	f, p := w.f, w.patient
	ctx, sys := context.Background(), domain.SystemActor()
	a, b, c := domain.Identifier{System: "urn:mrn", Value: "A"}, domain.Identifier{System: "urn:mrn", Value: "B"}, domain.Identifier{System: "urn:mrn", Value: "C"}
	start := []domain.Identifier{a, b}
	if _, err := f.svc.UpdatePatient(ctx, sys, p.ID, domain.PatientPatch{Identifiers: &start}); err != nil {
		t.Fatal(err)
	}
	_, err := f.svc.CreatePatient(ctx, sys, domain.NewPatient{Email: "other@example.org", FamilyName: "O", GivenNames: []string{"Oli"},
		OrganizationIDs: []int64{w.org.ID}, Identifiers: []domain.Identifier{{System: "urn:mrn", Value: "held"}}})
	if err != nil {
		t.Fatal(err)
	}
	want := start
	for _, tc := range []struct {
		name  string
		patch domain.PatientPatch
		code  domain.Code // "" for success
		after []domain.Identifier
	}{
		{"remove an absent one", domain.PatientPatch{RemoveIdentifiers: []domain.Identifier{c}}, "", []domain.Identifier{a, b}},
		{"add one already there", domain.PatientPatch{AddIdentifiers: []domain.Identifier{a}}, domain.CodeInvalid, nil},
		{"add and remove the same", domain.PatientPatch{AddIdentifiers: []domain.Identifier{c}, RemoveIdentifiers: []domain.Identifier{c}}, domain.CodeInvalid, nil},
		{"add and remove the same present one", domain.PatientPatch{AddIdentifiers: []domain.Identifier{a}, RemoveIdentifiers: []domain.Identifier{a}}, domain.CodeInvalid, nil},
		{"add one twice", domain.PatientPatch{AddIdentifiers: []domain.Identifier{c, c}}, domain.CodeInvalid, nil},
		{"add one another patient holds", domain.PatientPatch{AddIdentifiers: []domain.Identifier{{System: "urn:mrn", Value: "held"}}}, domain.CodeDuplicate, nil},
		{"add one without a system", domain.PatientPatch{AddIdentifiers: []domain.Identifier{{Value: "x"}}}, domain.CodeInvalid, nil},
		{"remove one and add another", domain.PatientPatch{AddIdentifiers: []domain.Identifier{c}, RemoveIdentifiers: []domain.Identifier{a}}, "", []domain.Identifier{b, c}},
		{"with the whole list", domain.PatientPatch{Identifiers: &[]domain.Identifier{a}, AddIdentifiers: []domain.Identifier{b}, RemoveIdentifiers: []domain.Identifier{a}}, "", []domain.Identifier{b}},
	} {
		_, err := f.svc.UpdatePatient(ctx, sys, p.ID, tc.patch)
		if tc.code == "" && err != nil || tc.code != "" && !domain.IsCode(err, tc.code) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.code)
		}
		if tc.after != nil {
			want = tc.after
		}
		got, err := f.svc.PatientByID(ctx, sys, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Identifiers, want) {
			t.Errorf("%s: identifiers %v, want %v", tc.name, got.Identifiers, want)
		}
	}
}
