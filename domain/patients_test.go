package domain_test

import (
	"context"
	"testing"

	"exchange/domain"
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
