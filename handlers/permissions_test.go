package handlers_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/oauth"
	"exchange/repo/repotest"
	"exchange/smartclient/ehrtest"
)

// The actors of the permission matrix, in the order of each row's statuses.
var matrixActors = []string{"superuser", "manager", "member", "viewer", "outsider", "patient", "otherPatient", "anonymous", "expired"}

// world is the fixture every row of the matrix acts on: organization A
// (with a manager, a member, a viewer and two patients) and organization B
// (with the outsider), a study of A with a data source and two requested
// scopes, the patient enrolled with one answer and one pending scope.
type world struct {
	t      *testing.T
	env    *handlerstest.Env
	ctx    context.Context
	tokens map[string]string
	orgA   *domain.Organization
	member *domain.User
	// patient is "the patient" actor; other is "another patient" of A.
	patient, other *domain.Patient
	study          *domain.Study
	dataSource     int64
	heartRate, bp  *domain.ScopeCode
	fhirSource     int64
	clientID       string
	fresh          int
	// ehr is a test EHR of one patient, registered as the brand ehrBrand,
	// to which the patient connects (connectedEHR).
	ehr      *ehrtest.EHR
	ehrBrand int64
}

var sys = domain.SystemActor()

// must returns v, or stops the test binary when fixture setup fails: the
// matrix means nothing over a broken fixture.
func must[T any](v T, err error) T {
	if err != nil {
		panic(fmt.Sprintf("fixture setup failed: %v", err))
	}
	return v
}

func newWorld(t *testing.T) *world { return newWorldWith(t, handlerstest.Options{}) }

// newWorldWith is newWorld on an exchange started with options.
func newWorldWith(t *testing.T, o handlerstest.Options) *world {
	if o.EHR == nil {
		o.EHR = handlerstest.FastEHRClient()
	}
	env := handlerstest.StartWith(t, o)
	w := &world{t: t, env: env, ctx: context.Background(), tokens: map[string]string{}}
	svc, ctx := env.Service, w.ctx
	w.orgA = must(svc.CreateOrganization(ctx, sys, domain.NewOrganization{Name: "Clinic", Type: "prov"}))
	orgB := must(svc.CreateOrganization(ctx, sys, domain.NewOrganization{Name: "Elsewhere", Type: "prov"}))
	// Practitioners have a password, so that the scope matrix can sign
	// one in through the OAuth flow.
	practitioner := func(name string, org int64, role domain.Role, superuser bool) *domain.User {
		u := must(svc.CreateUser(ctx, domain.NewUser{Email: name + "@example.org", Password: handlerstest.Password, Type: domain.UserPractitioner,
			IsSuperuser: superuser, FirstName: name}))
		if org != 0 {
			if err := svc.AddMember(ctx, sys, org, u.ID, role); err != nil {
				t.Fatal(err)
			}
		}
		w.tokens[name] = env.Token(t, u.ID)
		return u
	}
	practitioner("superuser", 0, "", true)
	practitioner("manager", w.orgA.ID, domain.RoleManager, false)
	w.member = practitioner("member", w.orgA.ID, domain.RoleMember, false)
	practitioner("viewer", w.orgA.ID, domain.RoleViewer, false)
	practitioner("outsider", orgB.ID, domain.RoleManager, false)
	w.patient = w.newPatient()
	w.tokens["patient"] = env.Token(t, w.patient.UserID)
	w.other = w.newPatient()
	w.tokens["otherPatient"] = env.Token(t, w.other.UserID)
	w.tokens["anonymous"] = ""
	env.Clock.Advance(-2 * time.Hour)
	expired, _, err := env.OAuth.IssueAccessToken(ctx, w.patient.UserID, time.Hour)
	w.tokens["expired"] = must(expired, err)
	env.Clock.Advance(2 * time.Hour)

	w.heartRate = must(svc.EnsureScopeCode(ctx, domain.SystemOpenMHealth, "omh:heart-rate:2.0", "Heart rate"))
	w.bp = must(svc.EnsureScopeCode(ctx, domain.SystemOpenMHealth, "omh:blood-pressure:4.0", "Blood pressure"))
	w.dataSource = must(svc.CreateDataSource(ctx, sys, domain.NewDataSource{Name: "Cuff", Type: domain.DataSourceMedicalDevice})).ID
	w.study = w.newStudy()
	for _, c := range []*domain.ScopeCode{w.heartRate, w.bp} {
		if err := svc.RequestScope(ctx, sys, w.study, c.ID); err != nil {
			t.Fatal(err)
		}
	}
	must(svc.AddStudyDataSource(ctx, sys, w.study.ID, w.dataSource))
	w.enroll(w.patient)
	w.answer(w.patient, w.heartRate, true)
	w.fhirSource = w.newFHIRSource()
	client, _ := env.Client(t, oauth.ClientRegistration{Name: "App", Type: domain.ClientPublic, RedirectURIs: []string{"https://app.example.org/cb"}})
	w.clientID = client.ID
	w.ehr = ehrtest.Start(t, ehrtest.OneRecord(t))
	w.ehrBrand = env.RegisterEHR(t, w.ehr, "Matrix Health")
	return w
}

// connectedEHR returns the patient's connection to the test EHR, made
// (again, when a row deleted it), once no pull of it runs.
func (w *world) connectedEHR() int64 {
	return w.env.ConnectEHR(w.t, w.ehr, w.ehrBrand, w.patient, ehrtest.OneRecordPatient)
}

// name returns a fresh name, so every allowed write has something of its own.
func (w *world) name(prefix string) string {
	w.fresh++
	return fmt.Sprintf("%s%d", prefix, w.fresh)
}

// patientEmail is the email of a patient's login.
func (w *world) patientEmail(p *domain.Patient) string {
	return must(w.env.Service.UserByID(w.ctx, p.UserID)).Email
}

func (w *world) newPatient() *domain.Patient {
	return must(w.env.Service.CreatePatient(w.ctx, sys, domain.NewPatient{Email: w.name("patient") + "@example.org",
		FamilyName: "Doe", GivenNames: []string{"Jo"}, OrganizationIDs: []int64{w.orgA.ID}}))
}

// newPatientWithLogin is a patient of A who chose a password.
func (w *world) newPatientWithLogin() *domain.Patient {
	return must(w.env.Service.CreatePatient(w.ctx, sys, domain.NewPatient{Email: w.name("login") + "@example.org", Password: "a password of theirs",
		FamilyName: "Doe", GivenNames: []string{"Jo"}, OrganizationIDs: []int64{w.orgA.ID}}))
}

func (w *world) newStudy() *domain.Study {
	return must(w.env.Service.CreateStudy(w.ctx, sys, domain.NewStudy{OrganizationID: w.orgA.ID, Name: w.name("Study ")}))
}

// newInvitation issues an invitation of the patient and returns its id.
func (w *world) newInvitation() string {
	must(w.env.OAuth.IssuePatientCode(w.ctx, w.patient.UserID, w.clientID))
	list := must(w.env.OAuth.Invitations(w.ctx, []int64{w.patient.UserID}))
	return list[len(list)-1].ID
}

func (w *world) newFHIRSource() int64 {
	return must(w.env.Service.CreateFHIRSource(w.ctx, sys, w.patient.ID, 0, w.name("EHR "))).ID
}

func (w *world) enroll(p *domain.Patient) *domain.Patient {
	if err := w.env.Service.EnrollPatients(w.ctx, sys, w.study.ID, []int64{p.ID}); err != nil {
		w.t.Fatal(err)
	}
	return p
}

func (w *world) answers(code *domain.ScopeCode, consented *bool) []domain.StudyScopeConsents {
	return []domain.StudyScopeConsents{{StudyID: w.study.ID, Scopes: []domain.ScopeConsent{{System: code.System, Code: code.Code, Consented: consented}}}}
}

func (w *world) answer(p *domain.Patient, code *domain.ScopeCode, consented bool) {
	if err := w.env.Service.AnswerConsents(w.ctx, sys, p.ID, w.answers(code, &consented)); err != nil && !domain.IsCode(err, domain.CodeDuplicate) {
		w.t.Fatal(err)
	}
}

// consentTarget is the patient whose blood pressure answer a consent write
// changes: the patient themselves when they act (with the answer reset to
// the state the write needs), else a new enrolled patient.
func (w *world) consentTarget(actor string, answered bool) int64 {
	p := w.patient
	if actor != "patient" {
		p = w.enroll(w.newPatient())
	} else if err := w.env.Service.WithdrawConsents(w.ctx, sys, p.ID, w.answers(w.bp, nil)); err != nil && !domain.IsCode(err, domain.CodeNotFound) {
		w.t.Fatal(err)
	}
	if answered {
		w.answer(p, w.bp, true)
	}
	return p.ID
}

var consentBody = func(w *world, consented *bool) map[string]any {
	scope := map[string]any{"codingSystem": w.bp.System, "codingCode": w.bp.Code}
	if consented != nil {
		scope["consented"] = *consented
	}
	return map[string]any{"studyScopeConsents": []any{map[string]any{"studyId": w.study.ID, "scopeConsents": []any{scope}}}}
}

// matrixRow is one endpoint: prepare returns the path and body one actor
// sends (creating fresh targets where a write would otherwise collide), and
// want the expected status per actor, in matrixActors order.
type matrixRow struct {
	method  string
	prepare func(w *world, actor string) (string, any)
	want    string
}

func at(path string, args ...any) func(*world, string) (string, any) {
	return func(*world, string) (string, any) { return fmt.Sprintf(path, args...), nil }
}

const (
	allRead      = "200 200 200 200 200 200 200 401 401"
	staffRead    = "200 200 200 200 200 403 403 401 401"
	orgARead     = "200 200 200 200 403 200 200 401 401"
	orgAMembers  = "200 200 200 200 403 403 403 401 401"
	patientRead  = "200 200 200 200 403 200 403 401 401"
	onlySuper    = "201 403 403 403 403 403 403 401 401"
	managersOnly = "201 201 403 403 403 403 403 401 401"
	dataWriters  = "201 201 201 403 403 403 403 401 401"
)

func swap(want, from, to string) string { return strings.ReplaceAll(want, from, to) }

// unseen is want with status for the actors, for whom the patient a row
// names is out of sight: answered as one that does not exist (404; 400
// where the id is a field of the body).
func unseen(want, status string, actors ...string) string {
	f := strings.Fields(want)
	for _, a := range actors {
		f[slices.Index(matrixActors, a)] = status
	}
	return strings.Join(f, " ")
}

// notTheirs are the actors who may not see the patient of org A that a
// row names (the patient actor's own record, or another patient of A).
var notTheirs = []string{"outsider", "otherPatient"}

func matrixRows(w *world) map[string]matrixRow {
	A, P, S := w.orgA.ID, w.patient.ID, w.study.ID
	yes, no := true, false
	return map[string]matrixRow{
		"GET profile": {"GET", at("/api/v1/users/profile"), allRead},
		"GET users":   {"GET", at("/api/v1/users?email=member@example.org"), "200 200 403 403 200 403 403 401 401"},
		"PATCH user": {"PATCH", func(w *world, _ string) (string, any) {
			return fmt.Sprintf("/api/v1/users/%d", w.newPractitioner()), map[string]any{"isActive": false}
		}, swap(onlySuper, "201", "200")},
		"GET organizations": {"GET", at("/api/v1/organizations"), allRead},
		"POST top-level org": {"POST", func(w *world, _ string) (string, any) {
			return "/api/v1/organizations", map[string]any{"name": w.name("Org "), "type": "prov"}
		}, onlySuper},
		"POST sub-organization": {"POST", func(w *world, _ string) (string, any) {
			return "/api/v1/organizations", map[string]any{"name": w.name("Dept "), "type": "dept", "partOf": A}
		}, managersOnly},
		// The organization directory (names, types, the tree) is for every
		// signed-in user; its members and patients are not.
		"GET organization": {"GET", at("/api/v1/organizations/%d", A), allRead},
		"GET root":         {"GET", at("/api/v1/organizations/0"), allRead},
		// Each PATCH changes something: one that changes nothing keeps
		// the version (TestEmptyPatchChangesNothing).
		"PATCH organization": {"PATCH", func(w *world, _ string) (string, any) {
			return fmt.Sprintf("/api/v1/organizations/%d", A), map[string]any{"name": w.name("Clinic ")}
		}, swap(managersOnly, "201", "200")},
		"DELETE organization": {"DELETE", func(w *world, _ string) (string, any) {
			o := must(w.env.Service.CreateOrganization(w.ctx, sys, domain.NewOrganization{Name: w.name("Empty "), Type: "team", PartOf: A}))
			return fmt.Sprintf("/api/v1/organizations/%d", o.ID), nil
		}, swap(managersOnly, "201", "204")},
		"GET tree":        {"GET", at("/api/v1/organizations/%d/tree", A), allRead},
		"GET members":     {"GET", at("/api/v1/organizations/%d/users", A), orgAMembers},
		"GET org studies": {"GET", at("/api/v1/organizations/%d/studies", A), orgARead},
		"POST member": {"POST", func(w *world, _ string) (string, any) {
			return fmt.Sprintf("/api/v1/organizations/%d/users", A), map[string]any{"userId": w.newPractitioner(), "role": "member"}
		}, managersOnly},
		"PATCH member": {"PATCH", func(w *world, _ string) (string, any) {
			return fmt.Sprintf("/api/v1/organizations/%d/users/%d", A, w.newMember()), map[string]any{"role": "viewer"}
		}, swap(managersOnly, "201", "200")},
		"DELETE member": {"DELETE", func(w *world, _ string) (string, any) {
			return fmt.Sprintf("/api/v1/organizations/%d/users/%d", A, w.newMember()), nil
		}, swap(managersOnly, "201", "204")},
		"GET practitioners": {"GET", at("/api/v1/practitioners"), staffRead},
		"POST practitioner": {"POST", func(w *world, _ string) (string, any) {
			return "/api/v1/practitioners", map[string]any{"email": w.name("doc") + "@example.org", "organizationId": A, "role": "viewer"}
		}, managersOnly},
		"GET practitioner": {"GET", at("/api/v1/practitioners/%d", w.member.ID), orgAMembers},
		"PATCH practitioner": {"PATCH", func(w *world, _ string) (string, any) {
			return fmt.Sprintf("/api/v1/practitioners/%d", w.member.ID), map[string]any{"firstName": w.name("member")}
		}, "200 403 200 403 403 403 403 401 401"},
		"GET patients": {"GET", at("/api/v1/patients"), allRead},
		"POST patient": {"POST", func(w *world, _ string) (string, any) {
			return "/api/v1/patients", map[string]any{"email": w.name("new") + "@example.org", "nameFamily": "New", "nameGiven": []string{"Ny"}, "organizationIds": []int64{A}}
		}, dataWriters},
		"GET patient": {"GET", at("/api/v1/patients/%d", P), unseen(patientRead, "404", notTheirs...)},
		// Everyone may ask; those who may not see the patient find nothing,
		// as for an email nobody has (TestHiddenPatientsLookAbsent).
		"GET patient lookup": {"GET", func(w *world, _ string) (string, any) {
			return "/api/v1/patients/global_lookup?email=" + url.QueryEscape(w.patientEmail(w.patient)), nil
		}, allRead},
		"PATCH patient": {"PATCH", func(w *world, _ string) (string, any) {
			return fmt.Sprintf("/api/v1/patients/%d", P), map[string]any{"phone": w.name("+1-555-0")}
		}, unseen("200 200 200 403 403 200 403 401 401", "404", notTheirs...)},
		"DELETE patient": {"DELETE", func(w *world, _ string) (string, any) {
			return fmt.Sprintf("/api/v1/patients/%d", w.newPatient().ID), nil
		}, unseen(swap(dataWriters, "201", "204"), "404", "outsider", "patient", "otherPatient")},
		"POST invitation": {"POST", func(w *world, _ string) (string, any) {
			return fmt.Sprintf("/api/v1/patients/%d/invitation", P), map[string]any{"clientId": w.clientID}
		}, unseen(dataWriters, "404", notTheirs...)},
		// A patient who has a login is invited only after a manager
		// replaced it: no one takes over an account in use.
		"POST invitation, patient with a login": {"POST", func(w *world, _ string) (string, any) {
			return fmt.Sprintf("/api/v1/patients/%d/invitation", w.newPatientWithLogin().ID), map[string]any{"clientId": w.clientID}
		}, "409 409 409 403 404 404 404 401 401"},
		"POST invitation replacing a login": {"POST", func(w *world, _ string) (string, any) {
			return fmt.Sprintf("/api/v1/patients/%d/invitation", w.newPatientWithLogin().ID), map[string]any{"clientId": w.clientID, "replaceLogin": true}
		}, "201 201 403 403 404 404 404 401 401"},
		"GET invitations": {"GET", at("/api/v1/patients/%d/invitations", P), unseen(patientRead, "404", notTheirs...)},
		"DELETE invitation": {"DELETE", func(w *world, _ string) (string, any) {
			return fmt.Sprintf("/api/v1/patients/%d/invitations/%s", P, w.newInvitation()), nil
		}, unseen(swap(dataWriters, "201", "204"), "404", notTheirs...)},
		"POST invitation reissue": {"POST", func(w *world, _ string) (string, any) {
			return fmt.Sprintf("/api/v1/patients/%d/invitations/%s/reissue", P, w.newInvitation()), nil
		}, unseen(dataWriters, "404", notTheirs...)},
		"GET consents": {"GET", at("/api/v1/patients/%d/consents", P), unseen(patientRead, "404", notTheirs...)},
		"POST consents": {"POST", func(w *world, a string) (string, any) {
			return fmt.Sprintf("/api/v1/patients/%d/consents", w.consentTarget(a, false)), consentBody(w, &yes)
		}, unseen("201 201 201 403 403 201 403 401 401", "404", notTheirs...)},
		"PATCH consents": {"PATCH", func(w *world, a string) (string, any) {
			return fmt.Sprintf("/api/v1/patients/%d/consents", w.consentTarget(a, true)), consentBody(w, &no)
		}, unseen("200 200 200 403 403 200 403 401 401", "404", notTheirs...)},
		"DELETE consents": {"DELETE", func(w *world, a string) (string, any) {
			return fmt.Sprintf("/api/v1/patients/%d/consents", w.consentTarget(a, true)), consentBody(w, nil)
		}, unseen("204 204 204 403 403 204 403 401 401", "404", notTheirs...)},
		"GET studies": {"GET", at("/api/v1/studies"), allRead},
		"POST study": {"POST", func(w *world, _ string) (string, any) {
			return "/api/v1/studies", map[string]any{"organizationId": A, "name": w.name("Study ")}
		}, dataWriters},
		"GET study": {"GET", at("/api/v1/studies/%d", S), patientRead},
		"PATCH study": {"PATCH", func(w *world, _ string) (string, any) {
			return fmt.Sprintf("/api/v1/studies/%d", S), map[string]any{"description": w.name("Updated ")}
		}, swap(dataWriters, "201", "200")},
		"DELETE study":       {"DELETE", func(w *world, _ string) (string, any) { return fmt.Sprintf("/api/v1/studies/%d", w.newStudy().ID), nil }, swap(dataWriters, "201", "204")},
		"GET study patients": {"GET", at("/api/v1/studies/%d/patients", S), orgAMembers},
		"POST enrollment": {"POST", func(w *world, _ string) (string, any) {
			return fmt.Sprintf("/api/v1/studies/%d/patients", S), map[string]any{"patientIds": []int64{w.newPatient().ID}}
		}, dataWriters},
		"DELETE enrollment": {"DELETE", func(w *world, _ string) (string, any) {
			return fmt.Sprintf("/api/v1/studies/%d/patients", S), map[string]any{"patientIds": []int64{w.enroll(w.newPatient()).ID}}
		}, swap(dataWriters, "201", "204")},
		"GET scope requests": {"GET", at("/api/v1/studies/%d/scope_requests", S), patientRead},
		"POST scope request": {"POST", func(w *world, _ string) (string, any) {
			return fmt.Sprintf("/api/v1/studies/%d/scope_requests", w.newStudy().ID), map[string]any{"scopeCodeId": w.bp.ID}
		}, dataWriters},
		"DELETE scope request": {"DELETE", func(w *world, _ string) (string, any) {
			return fmt.Sprintf("/api/v1/studies/%d/scope_requests/%d", w.studyWithRequest(), w.bp.ID), nil
		}, swap(dataWriters, "201", "204")},
		"GET study sources": {"GET", at("/api/v1/studies/%d/data_sources", S), patientRead},
		"POST study source": {"POST", func(w *world, _ string) (string, any) {
			return fmt.Sprintf("/api/v1/studies/%d/data_sources", w.newStudy().ID), map[string]any{"dataSourceId": w.dataSource}
		}, dataWriters},
		"DELETE study source": {"DELETE", func(w *world, _ string) (string, any) {
			return fmt.Sprintf("/api/v1/studies/%d/data_sources/%d", w.studyWithSource(), w.dataSource), nil
		}, swap(dataWriters, "201", "204")},
		"GET data sources": {"GET", at("/api/v1/data_sources"), allRead},
		"POST data source": {"POST", func(w *world, _ string) (string, any) {
			return "/api/v1/data_sources", map[string]any{"name": w.name("Device "), "type": "personal_device"}
		}, onlySuper},
		"GET data source": {"GET", at("/api/v1/data_sources/%d", w.dataSource), allRead},
		"PATCH data source": {"PATCH", func(w *world, _ string) (string, any) {
			return fmt.Sprintf("/api/v1/data_sources/%d", w.dataSource), map[string]any{"name": w.name("Cuff ")}
		}, swap(onlySuper, "201", "200")},
		"DELETE data source": {"DELETE", func(w *world, _ string) (string, any) {
			d := must(w.env.Service.CreateDataSource(w.ctx, sys, domain.NewDataSource{Name: w.name("Spare "), Type: domain.DataSourcePatientApp}))
			return fmt.Sprintf("/api/v1/data_sources/%d", d.ID), nil
		}, swap(onlySuper, "201", "204")},
		"GET scope codes": {"GET", at("/api/v1/scope_codes"), allRead},
		"GET OMH schemas": {"GET", at("/api/v1/omh_schemas"), allRead},
		"GET OMH schema":  {"GET", at("/api/v1/omh_schemas/heart-rate/2.0"), allRead},
		"GET IEEE schema": {"GET", at("/api/v1/omh_schemas/ieee/sleep-episode/1.0"), allRead},
		"POST scope code": {"POST", func(w *world, _ string) (string, any) {
			return "/api/v1/scope_codes", map[string]any{"codingSystem": domain.SystemOpenMHealth, "codingCode": w.name("omh:custom-")}
		}, onlySuper},
		"GET FHIR sources": {"GET", at("/api/v1/fhir_sources"), allRead},
		"POST FHIR source": {"POST", func(w *world, _ string) (string, any) {
			return "/api/v1/fhir_sources", map[string]any{"patient": P, "label": w.name("Upstream ")}
		}, unseen("201 201 201 403 403 201 403 401 401", "400", notTheirs...)},
		"GET FHIR source": {"GET", at("/api/v1/fhir_sources/%d", w.fhirSource), unseen(patientRead, "404", notTheirs...)},
		"DELETE FHIR source": {"DELETE", func(w *world, _ string) (string, any) {
			return fmt.Sprintf("/api/v1/fhir_sources/%d", w.newFHIRSource()), nil
		}, unseen("204 204 204 403 403 204 403 401 401", "404", notTheirs...)},
		"GET EHR brands": {"GET", at("/api/v1/patient-access/brands?q=matrix"), allRead},
		"POST EHR brands": {"POST", func(w *world, _ string) (string, any) {
			return "/api/v1/patient-access/brands", brandsBundle("https://"+w.name("ehr")+".example.org/fhir", "Other Health", "Other Clinic")
		}, swap(onlySuper, "201", "200")},
		"GET EHR clients": {"GET", at("/api/v1/patient-access/clients"), swap(onlySuper, "201", "200")},
		"PUT EHR client": {"PUT", func(w *world, _ string) (string, any) {
			return "/api/v1/patient-access/clients", map[string]any{"vendor": "other", "clientId": w.name("client-")}
		}, swap(onlySuper, "201", "200")},
		// Patients connect themselves only: no practitioner, no superuser.
		"POST EHR connection": {"POST", func(w *world, _ string) (string, any) {
			return "/api/v1/patient-access/connections", map[string]any{"brand": w.ehrBrand}
		}, "403 403 403 403 403 201 201 401 401"},
		"PATCH EHR connection": {"PATCH", func(w *world, _ string) (string, any) {
			return fmt.Sprintf("/api/v1/patient-access/connections/%d", w.connectedEHR()), map[string]any{"keepUpdated": true}
		}, unseen("403 403 403 403 403 200 403 401 401", "404", notTheirs...)},
		"POST EHR connection sync": {"POST", func(w *world, _ string) (string, any) {
			return fmt.Sprintf("/api/v1/patient-access/connections/%d/sync", w.connectedEHR()), nil
		}, unseen("202 403 403 403 403 202 403 401 401", "404", notTheirs...)},
		"DELETE EHR connection": {"DELETE", func(w *world, _ string) (string, any) {
			return fmt.Sprintf("/api/v1/patient-access/connections/%d", w.connectedEHR()), nil
		}, unseen("204 403 403 403 403 204 403 401 401", "404", notTheirs...)},
		"GET EHR connections": {"GET", func(w *world, _ string) (string, any) {
			w.connectedEHR()
			return fmt.Sprintf("/api/v1/patients/%d/connections", P), nil
		}, unseen(patientRead, "404", notTheirs...)},
		"GET EHR imports":   {"GET", at("/api/v1/patients/%d/imports", P), unseen(patientRead, "404", notTheirs...)},
		"GET OAuth clients": {"GET", at("/api/v1/oauth_clients"), swap(onlySuper, "201", "200")},
		"POST OAuth client": {"POST", func(w *world, _ string) (string, any) {
			return "/api/v1/oauth_clients", map[string]any{"name": w.name("App "), "clientType": "public", "redirectUris": []string{"https://app.example.org/cb"}}
		}, onlySuper},
		"GET identity providers": {"GET", at("/api/v1/identity_providers"), swap(onlySuper, "201", "200")},
		"POST identity provider": {"POST", func(w *world, _ string) (string, any) {
			return "/api/v1/identity_providers", map[string]any{"id": w.name("idp-"), "kind": "oidc", "name": "University",
				"issuer": "https://login.uni.example", "clientId": "exchange"}
		}, onlySuper},
		"GET identity provider": {"GET", func(w *world, _ string) (string, any) {
			return "/api/v1/identity_providers/" + w.newIdentityProvider(), nil
		}, swap(onlySuper, "201", "200")},
		"PATCH identity provider": {"PATCH", func(w *world, _ string) (string, any) {
			return "/api/v1/identity_providers/" + w.newIdentityProvider(), map[string]any{"name": "Campus"}
		}, swap(onlySuper, "201", "200")},
		"DELETE identity provider": {"DELETE", func(w *world, _ string) (string, any) {
			return "/api/v1/identity_providers/" + w.newIdentityProvider(), nil
		}, swap(onlySuper, "201", "204")},
		"GET identity invitations": {"GET", func(w *world, _ string) (string, any) {
			return "/api/v1/identity_providers/" + w.newIdentityProvider() + "/invitations", nil
		}, swap(onlySuper, "201", "200")},
		"POST identity invitation": {"POST", func(w *world, _ string) (string, any) {
			return "/api/v1/identity_providers/" + w.newIdentityProvider() + "/invitations", map[string]any{"email": "new@uni.example"}
		}, onlySuper},
		"DELETE identity invitation": {"DELETE", func(w *world, _ string) (string, any) {
			id := w.newIdentityProvider()
			must(w.env.Service.InviteToIdentityProvider(w.ctx, sys, id, "new@uni.example"))
			return "/api/v1/identity_providers/" + id + "/invitations/new@uni.example", nil
		}, swap(onlySuper, "201", "204")},
	}
}

// newIdentityProvider configures an identity provider and returns its id.
func (w *world) newIdentityProvider() string {
	p := must(w.env.Service.CreateIdentityProvider(w.ctx, sys, domain.IdentityProvider{ID: w.name("idp-"), Kind: domain.IdentityOIDC,
		Name: "University", Issuer: "https://login.uni.example", ClientID: "exchange", ClientSecret: "secret"}))
	return p.ID
}

// versionedPatches are the matrix's rows of the PATCH routes whose
// records carry their version (ETag) and honour If-Match.
var versionedPatches = []string{"PATCH user", "PATCH organization", "PATCH practitioner", "PATCH patient", "PATCH study", "PATCH data source"}

// TestPermissionMatrixStaleIfMatch sends the matrix's rows of versioned
// PATCHes again as every actor, with If-Match naming a version the record
// has left: those a row lets change the record get 412 and nothing is
// written; everyone else gets the row's answer to the same request
// without If-Match, word for word, with that stale tag, the current one
// or "*", so that a refusal tells nothing of the record's version (the
// use cases check the version only once the actor may make the change).
func TestPermissionMatrixStaleIfMatch(t *testing.T) {
	t.Parallel() // its own exchange and database
	w := newWorld(t)
	rows := matrixRows(w)
	for _, name := range versionedPatches {
		row := rows[name]
		for i, actor := range matrixActors {
			path, body := row.prepare(w, actor)
			stale, current := w.movedOn(t, path, body)
			allowed := strings.Fields(row.want)[i] == "200"
			tags := []string{stale, current, "*"}
			var plainResp *http.Response
			var plain map[string]any
			if allowed {
				tags = tags[:1]
			} else {
				plainResp, plain = w.env.Send(t, row.method, path, w.tokens[actor], body)
			}
			before := repotest.Snapshot(t, w.env.DB)
			for _, tag := range tags {
				resp, out := handlerstest.SendTo(t, row.method, w.env.URL+path, w.tokens[actor], body, map[string]string{"If-Match": tag})
				switch {
				case allowed && (resp.StatusCode != http.StatusPreconditionFailed || out["detail"] == nil):
					t.Errorf("%s as %s from a stale version: %d %v, want 412", name, actor, resp.StatusCode, out)
				case !allowed && (resp.StatusCode != plainResp.StatusCode || !reflect.DeepEqual(out, plain)):
					t.Errorf("%s as %s with If-Match %s: %d %v, without %d %v", name, actor, tag, resp.StatusCode, out, plainResp.StatusCode, plain)
				}
			}
			if !reflect.DeepEqual(before, repotest.Snapshot(t, w.env.DB)) {
				t.Errorf("%s as %s with If-Match changed the database", name, actor)
			}
		}
	}
}

// movedOn returns two versions (ETags) of the record a PATCH path names:
// the one it has, stale once the superuser has sent it body, and the one
// that makes current. A user's version is read as its practitioner's, the
// same record (the matrix's users are practitioners).
func (w *world) movedOn(t *testing.T, path string, body any) (stale, current string) {
	t.Helper()
	superuser := w.tokens["superuser"]
	resp, _ := w.env.Send(t, "GET", strings.Replace(path, "/users/", "/practitioners/", 1), superuser, nil)
	stale = resp.Header.Get("ETag")
	resp, out := w.env.Send(t, "PATCH", path, superuser, body)
	current = resp.Header.Get("ETag")
	if resp.StatusCode != http.StatusOK || stale == "" || current == stale {
		t.Fatalf("PATCH %s as the superuser: %d %v, version %q after %q; want a new one", path, resp.StatusCode, out, current, stale)
	}
	return stale, current
}

func (w *world) newPractitioner() int64 {
	return must(w.env.Service.CreateUser(w.ctx, domain.NewUser{Email: w.name("prac") + "@example.org", Type: domain.UserPractitioner})).ID
}

func (w *world) newMember() int64 {
	id := w.newPractitioner()
	if err := w.env.Service.AddMember(w.ctx, sys, w.orgA.ID, id, domain.RoleMember); err != nil {
		w.t.Fatal(err)
	}
	return id
}

func (w *world) studyWithRequest() int64 {
	st := w.newStudy()
	must(w.env.Service.AddScopeRequest(w.ctx, sys, st.ID, domain.ScopeRef{ID: w.bp.ID}))
	return st.ID
}

func (w *world) studyWithSource() int64 {
	st := w.newStudy()
	must(w.env.Service.AddStudyDataSource(w.ctx, sys, st.ID, w.dataSource))
	return st.ID
}

// TestPermissionMatrix sends every admin endpoint as every kind of actor
// and checks the status; a refused write must leave the database exactly
// as it was. Under -short each endpoint goes as a third of the actors,
// every actor to a third of the endpoints (shortPair).
func TestPermissionMatrix(t *testing.T) {
	t.Parallel() // its own exchange and database
	w := newWorld(t)
	rows := matrixRows(w)
	cases := 0
	var sent []string // "METHOD path" of every request, for the routes check
	for r, name := range slices.Sorted(maps.Keys(rows)) {
		row := rows[name]
		want := strings.Fields(row.want)
		if len(want) != len(matrixActors) {
			t.Fatalf("%s: %d statuses for %d actors", name, len(want), len(matrixActors))
		}
		for i, actor := range matrixActors {
			if !shortPair(r, i, 3) {
				continue
			}
			path, body := row.prepare(w, actor)
			var before map[string][]string
			if row.method != "GET" {
				before = repotest.Snapshot(t, w.env.DB)
			}
			resp, out := w.env.Send(t, row.method, path, w.tokens[actor], body)
			cases++
			sent = append(sent, row.method+" "+path)
			if got := strconv.Itoa(resp.StatusCode); got != want[i] {
				t.Errorf("%s as %s: %s %s = %s, want %s (%v)", name, actor, row.method, path, got, want[i], out)
				continue
			}
			if resp.StatusCode >= 400 {
				if out["detail"] == nil {
					t.Errorf("%s as %s: %d without a detail: %v", name, actor, resp.StatusCode, out)
				}
				if resp.StatusCode == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
					t.Errorf("%s as %s: 401 without WWW-Authenticate", name, actor)
				}
				if row.method != "GET" && !reflect.DeepEqual(before, repotest.Snapshot(t, w.env.DB)) {
					t.Errorf("%s as %s: the refused %s changed the database", name, actor, row.method)
				}
			}
		}
	}
	t.Logf("permission matrix: %d endpoints x %d actors = %d cases", len(rows), len(matrixActors), cases)
	// Every route of the admin API has its row: a route added without one
	// would escape the matrix (and TestScopeMatrix, which sends these rows).
	for _, route := range w.env.Routes {
		method, path, _ := strings.Cut(route, " ")
		if !strings.HasPrefix(path, "/api/v1/") || method == "HEAD" {
			continue
		}
		pattern := regexp.MustCompile("^" + method + " " + regexp.MustCompile(`:[A-Za-z]+`).ReplaceAllString(path, `[^/?]+`) + `(\?.*)?$`)
		if !slices.ContainsFunc(sent, pattern.MatchString) {
			t.Errorf("%s has no row in the permission matrix", route)
		}
	}
}
