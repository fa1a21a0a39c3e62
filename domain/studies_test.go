package domain_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"exchange/domain"
	"exchange/repo"
	"exchange/repo/repotest"
)

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
	third, err := f.svc.CreatePatient(ctx, sys, domain.NewPatient{Email: "c@example.org", FamilyName: "P", GivenNames: []string{"Pat"}, OrganizationIDs: []int64{org.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.svc.EnrollPatients(ctx, sys, st.ID, []int64{third.ID, ids[0]}); !domain.IsCode(err, domain.CodeDuplicate) {
		t.Errorf("enrolling an enrolled patient: %v, want CodeDuplicate", err)
	}
	if err := f.svc.UnenrollPatients(ctx, sys, st.ID, []int64{ids[0], third.ID}); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("removing a patient who is not enrolled: %v, want CodeNotFound", err)
	}
	if enrolled, answered := state(); !reflect.DeepEqual(enrolled, ids) || !reflect.DeepEqual(answered, ids) {
		t.Errorf("after refused requests: enrolled %v, consented %v; want both %v", enrolled, answered, ids)
	}
	if err := f.svc.UnenrollPatients(ctx, sys, st.ID, ids); err != nil {
		t.Fatal(err)
	}
	if enrolled, answered := state(); len(enrolled) != 0 || len(answered) != 0 {
		t.Errorf("after the removal: enrolled %v, consented %v; want none", enrolled, answered)
	}
}

// TestConsentWritesReadTheAnswersOncePerStudy: checking a consent write
// reads the patient's answers to a study once, not once per scope.
func TestConsentWritesReadTheAnswersOncePerStudy(t *testing.T) {
	reg := prometheus.NewRegistry()
	db := repotest.NewDBWith(t, repo.Options{Metrics: repo.NewMetrics(reg)})
	svc := domain.NewService(domain.Config{Store: db, SourceBase: "https://exchange.example.org/fhir-source"})
	ctx := context.Background()
	sys := domain.SystemActor()
	org := must(svc.CreateOrganization(ctx, sys, domain.NewOrganization{Name: "Clinic", Type: "prov"}))
	st := must(svc.CreateStudy(ctx, sys, domain.NewStudy{OrganizationID: org.ID, Name: "Hearts"}))
	var answers []domain.ScopeConsent
	yes := true
	for _, code := range []string{"omh:heart-rate:2.0", "omh:step-count:2.0", "omh:body-weight:2.0"} {
		c := must(svc.CreateScopeCode(ctx, sys, domain.SystemOpenMHealth, code, code))
		if _, err := svc.AddScopeRequest(ctx, sys, st.ID, domain.ScopeRef{ID: c.ID}); err != nil {
			t.Fatal(err)
		}
		answers = append(answers, domain.ScopeConsent{System: c.System, Code: c.Code, Consented: &yes})
	}
	finds := map[int]int{}
	for i, n := range []int{1, len(answers)} {
		p := must(svc.CreatePatient(ctx, sys, domain.NewPatient{Email: fmt.Sprintf("p%d@example.org", i), FamilyName: "P", GivenNames: []string{"Pat"},
			OrganizationIDs: []int64{org.ID}}))
		if err := svc.EnrollPatients(ctx, sys, st.ID, []int64{p.ID}); err != nil {
			t.Fatal(err)
		}
		before := repotest.Operations(t, reg, "consents", "find")
		if err := svc.AnswerConsents(ctx, sys, p.ID, []domain.StudyScopeConsents{{StudyID: st.ID, Scopes: answers[:n]}}); err != nil {
			t.Fatal(err)
		}
		finds[n] = repotest.Operations(t, reg, "consents", "find") - before
	}
	if finds[1] != finds[len(answers)] {
		t.Errorf("answering 1 scope read the consents %d times, answering %d scopes %d times", finds[1], len(answers), finds[len(answers)])
	}
}
