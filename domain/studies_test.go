package domain_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"exchange/domain"
	"exchange/repo"
)

// failingEnrollments is the real store, except that removing the
// enrollment of one patient fails, as an interrupted request would; with
// lostReply the removal happens and only its answer is lost.
type failingEnrollments struct {
	*repo.DB
	patientID int64
	lostReply bool
}

func (s *failingEnrollments) DeleteEnrollment(ctx context.Context, studyID, patientID int64) error {
	if patientID == s.patientID {
		if s.lostReply {
			_ = s.DB.DeleteEnrollment(ctx, studyID, patientID)
		}
		return errors.New("injected failure")
	}
	return s.DB.DeleteEnrollment(ctx, studyID, patientID)
}

// A removal from a study that fails half-way puts everything back, so that
// the retry finds every patient enrolled and completes.
func TestUnenrollPatientsIsAllOrNone(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	sys := domain.SystemActor()
	org, err := f.svc.CreateOrganization(ctx, sys, domain.NewOrganization{Name: "Clinic", Type: "prov"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := f.svc.CreateStudy(ctx, sys, domain.NewStudy{OrganizationID: org.ID, Name: "Hearts"})
	if err != nil {
		t.Fatal(err)
	}
	code, err := f.svc.CreateScopeCode(ctx, sys, domain.SystemOpenMHealth, "omh:heart-rate:2.0", "Heart rate")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.AddScopeRequest(ctx, sys, st.ID, domain.ScopeRef{ID: code.ID}); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, email := range []string{"a@example.org", "b@example.org"} {
		p, err := f.svc.CreatePatient(ctx, sys, domain.NewPatient{Email: email, FamilyName: "P", GivenNames: []string{"Pat"}, OrganizationIDs: []int64{org.ID}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.ID)
	}
	if err := f.svc.EnrollPatients(ctx, sys, st.ID, ids); err != nil {
		t.Fatal(err)
	}
	yes := true
	for _, id := range ids {
		err := f.svc.AnswerConsents(ctx, sys, id, []domain.StudyScopeConsents{{StudyID: st.ID,
			Scopes: []domain.ScopeConsent{{System: code.System, Code: code.Code, Consented: &yes}}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	state := func() ([]int64, []int64) {
		t.Helper()
		es, err := f.db.Enrollments(ctx, domain.EnrollmentQuery{StudyIDs: []int64{st.ID}})
		if err != nil {
			t.Fatal(err)
		}
		cs, err := f.db.Consents(ctx, domain.ConsentQuery{StudyIDs: []int64{st.ID}})
		if err != nil {
			t.Fatal(err)
		}
		var enrolled, answered []int64
		for _, e := range es {
			enrolled = append(enrolled, e.PatientID)
		}
		for _, c := range cs {
			if c.Consented {
				answered = append(answered, c.PatientID)
			}
		}
		return enrolled, answered
	}

	for _, lostReply := range []bool{false, true} {
		failing := domain.NewService(domain.Config{Store: &failingEnrollments{DB: f.db, patientID: ids[1], lostReply: lostReply}})
		if err := failing.UnenrollPatients(ctx, sys, st.ID, ids); err == nil {
			t.Fatal("the injected failure was not reported")
		}
		if enrolled, answered := state(); !reflect.DeepEqual(enrolled, ids) || !reflect.DeepEqual(answered, ids) {
			t.Errorf("after a failed removal (reply lost: %t): enrolled %v, consented %v; want both %v", lostReply, enrolled, answered, ids)
		}
	}
	if err := f.svc.UnenrollPatients(ctx, sys, st.ID, ids); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if enrolled, answered := state(); len(enrolled) != 0 || len(answered) != 0 {
		t.Errorf("after the retry: enrolled %v, consented %v; want none", enrolled, answered)
	}
}
