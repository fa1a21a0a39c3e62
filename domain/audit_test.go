package domain_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"exchange/domain"
	"exchange/repo/repotest"
)

// recorder is an Auditor that keeps what it is given: the port the
// repository's writer implements, watched here from the domain's side.
type recorder struct {
	mu     sync.Mutex
	events []domain.AuditEvent
	// full makes Record refuse, as a trail that cannot keep an event does.
	full bool
}

func (r *recorder) Record(_ context.Context, e domain.AuditEvent) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.full {
		return domain.Errorf(domain.CodeUnavailable, "the audit trail is full")
	}
	r.events = append(r.events, e)
	return nil
}

// take returns the events recorded since the last take.
func (r *recorder) take() []domain.AuditEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

// TestAuditedUseCases: each use case on patient data, consent and
// credentials records what the audit trail shows: the kind and action,
// who (user, patient reference, client), from where, the entities, the
// patients, and how it ended; the system actor's acts are not recorded.
func TestAuditedUseCases(t *testing.T) {
	rec := &recorder{}
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	db := repotest.NewDB(t)
	svc := domain.NewService(domain.Config{Store: db, SourceBase: "https://exchange.example.org/fhir-source", Auditor: rec,
		Now: func() time.Time { return now }})
	ctx := domain.WithOrigin(context.Background(), domain.Origin{RequestID: "req-1", Address: "192.0.2.7"})
	sys := domain.SystemActor()

	org, err := svc.CreateOrganization(ctx, sys, domain.NewOrganization{Name: "Clinic", Type: "prov"})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := svc.CreateOrganization(ctx, sys, domain.NewOrganization{Name: "Elsewhere", Type: "prov"})
	doc, err := svc.CreateUser(ctx, domain.NewUser{Email: "doc@example.org", Password: "long enough", Type: domain.UserPractitioner})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.AddMember(ctx, sys, org.ID, doc.ID, domain.RoleManager); err != nil {
		t.Fatal(err)
	}
	patient, err := svc.CreatePatient(ctx, sys, domain.NewPatient{Email: "pat@example.org", Password: "the password",
		FamilyName: "Doe", GivenNames: []string{"Jo"}, OrganizationIDs: []int64{org.ID}})
	if err != nil {
		t.Fatal(err)
	}
	stranger, _ := svc.CreatePatient(ctx, sys, domain.NewPatient{Email: "far@example.org", FamilyName: "Far", GivenNames: []string{"Al"}, OrganizationIDs: []int64{other.ID}})
	study, _ := svc.CreateStudy(ctx, sys, domain.NewStudy{OrganizationID: org.ID, Name: "S"})
	hr, _ := svc.EnsureScopeCode(ctx, domain.SystemOpenMHealth, "omh:heart-rate:2.0", "Heart rate")
	if err := svc.RequestScope(ctx, sys, study, hr.ID); err != nil {
		t.Fatal(err)
	}
	if err := svc.EnrollPatients(ctx, sys, study.ID, []int64{patient.ID}); err != nil {
		t.Fatal(err)
	}
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("the system actor's acts were recorded: %+v", got)
	}

	actor, err := svc.Actor(ctx, doc.ID)
	if err != nil {
		t.Fatal(err)
	}
	actor.ClientID = "app-1"
	patientUser, _ := svc.PatientByUserID(ctx, patient.UserID)
	patientActor, _ := svc.Actor(ctx, patientUser.UserID)
	yes := true
	practitioner := fmt.Sprintf("Practitioner/%d", doc.ID)
	patientRef, strangerRef := fmt.Sprintf("Patient/%d", patient.ID), fmt.Sprintf("Patient/%d", stranger.ID)

	for _, c := range []struct {
		name     string
		act      func() error
		kind     domain.AuditKind
		action   domain.AuditAction
		outcome  domain.Code
		agent    string
		patients []int64
		entities []string
	}{
		{"read a patient", func() error { _, err := svc.PatientByID(ctx, actor, patient.ID); return err },
			domain.AuditKindRead, domain.AuditRead, "", practitioner, []int64{patient.ID}, []string{patientRef}},
		{"read a patient out of reach", func() error { _, err := svc.PatientByID(ctx, actor, stranger.ID); return err },
			domain.AuditKindRead, domain.AuditRead, domain.CodeForbidden, practitioner, []int64{stranger.ID}, []string{strangerRef}},
		{"list patients", func() error {
			_, err := svc.ListPatients(ctx, actor, domain.PatientFilter{}, domain.Page{Number: 1, Size: 10})
			return err
		},
			domain.AuditKindSearch, domain.AuditExecute, "", practitioner, []int64{patient.ID}, nil},
		{"answer consents", func() error {
			return svc.AnswerConsents(ctx, patientActor, patient.ID, []domain.StudyScopeConsents{{StudyID: study.ID,
				Scopes: []domain.ScopeConsent{{System: hr.System, Code: hr.Code, Consented: &yes}}}})
		}, domain.AuditKindCreate, domain.AuditCreate, "", patientRef, []int64{patient.ID}, nil},
		{"read consents", func() error { _, err := svc.PatientConsents(ctx, actor, patient.ID); return err },
			domain.AuditKindRead, domain.AuditRead, "", practitioner, []int64{patient.ID}, nil},
		{"withdraw consents", func() error {
			return svc.WithdrawConsents(ctx, patientActor, patient.ID, []domain.StudyScopeConsents{{StudyID: study.ID,
				Scopes: []domain.ScopeConsent{{System: hr.System, Code: hr.Code}}}})
		}, domain.AuditKindDelete, domain.AuditDelete, "", patientRef, []int64{patient.ID}, nil},
		{"sign in", func() error {
			_, err := svc.Authenticate(ctx, "PAT@example.org", "the password", "192.0.2.7")
			return err
		},
			domain.AuditKindSignIn, domain.AuditExecute, "", patientRef, []int64{patient.ID}, nil},
		{"a refused sign-in names the account", func() error { _, err := svc.Authenticate(ctx, "pat@example.org", "wrong", "192.0.2.7"); return err },
			domain.AuditKindSignIn, domain.AuditExecute, domain.CodeLogin, patientRef, []int64{patient.ID}, nil},
		{"a sign-in of no account", func() error { _, err := svc.Authenticate(ctx, "nobody@example.org", "wrong", "192.0.2.7"); return err },
			domain.AuditKindSignIn, domain.AuditExecute, domain.CodeLogin, "", nil, nil},
		{"a token issued", func() error { svc.TokenIssued(ctx, doc.ID, "app-1"); return nil },
			domain.AuditKindToken, domain.AuditExecute, "", practitioner, nil, nil},
	} {
		_ = c.act()
		got := rec.take()
		if len(got) != 1 {
			t.Errorf("%s: %d events recorded, want 1: %+v", c.name, len(got), got)
			continue
		}
		e := got[0]
		if e.Kind != c.kind || e.Action != c.action || e.Outcome != c.outcome || e.Agent != c.agent ||
			!slices.Equal(e.PatientIDs, c.patients) || !slices.Equal(e.Entities, c.entities) {
			t.Errorf("%s: recorded %+v\nwant kind %s, action %s, outcome %q, agent %q, patients %v, entities %v",
				c.name, e, c.kind, c.action, c.outcome, c.agent, c.patients, c.entities)
		}
		if e.RequestID != "req-1" || e.Address != "192.0.2.7" || !e.Recorded.Equal(now) {
			t.Errorf("%s: origin %q %q at %v", c.name, e.RequestID, e.Address, e.Recorded)
		}
		if e.Agent == practitioner && c.kind != domain.AuditKindToken && e.ClientID != "app-1" {
			t.Errorf("%s: client %q, want app-1", c.name, e.ClientID)
		}
	}
}

// TestUnauditedReadsAreRefused: when the trail cannot keep a read's event,
// the read answers CodeUnavailable (503), never the data: no patient data
// leaves unaudited.
func TestUnauditedReadsAreRefused(t *testing.T) {
	rec := &recorder{}
	db := repotest.NewDB(t)
	svc := domain.NewService(domain.Config{Store: db, Auditor: rec})
	ctx := context.Background()
	sys := domain.SystemActor()
	org, err := svc.CreateOrganization(ctx, sys, domain.NewOrganization{Name: "Clinic", Type: "prov"})
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := svc.CreateUser(ctx, domain.NewUser{Email: "doc@example.org", Type: domain.UserPractitioner})
	if err := svc.AddMember(ctx, sys, org.ID, doc.ID, domain.RoleMember); err != nil {
		t.Fatal(err)
	}
	patient, err := svc.CreatePatient(ctx, sys, domain.NewPatient{Email: "pat@example.org", FamilyName: "Doe", GivenNames: []string{"Jo"}, OrganizationIDs: []int64{org.ID}})
	if err != nil {
		t.Fatal(err)
	}
	actor, err := svc.Actor(ctx, doc.ID)
	if err != nil {
		t.Fatal(err)
	}
	rec.full = true
	if p, err := svc.PatientByID(ctx, actor, patient.ID); !domain.IsCode(err, domain.CodeUnavailable) || p != nil {
		t.Errorf("PatientByID with a full trail: %v, %v", p, err)
	}
	if l, err := svc.ListPatients(ctx, actor, domain.PatientFilter{}, domain.Page{Number: 1, Size: 10}); !domain.IsCode(err, domain.CodeUnavailable) {
		t.Errorf("ListPatients with a full trail: %d patients, %v", len(l.Items), err)
	}
	if _, err := svc.PatientConsents(ctx, actor, patient.ID); !domain.IsCode(err, domain.CodeUnavailable) {
		t.Errorf("PatientConsents with a full trail: %v", err)
	}
	rec.full = false
	if _, err := svc.PatientByID(ctx, actor, patient.ID); err != nil {
		t.Errorf("PatientByID once the trail keeps events: %v", err)
	}
}
