package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"exchange/console"
	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/oauth"
	"exchange/repo"
	"exchange/repo/repotest"
	"exchange/smartclient/ehrtest"

	"github.com/prometheus/client_golang/prometheus"
)

func TestMain(m *testing.M) { repotest.Main(m) }

// caller is a signed-in browser of one kind of user.
type caller struct {
	name string
	b    *handlerstest.Browser
	csrf string
}

var csrfField = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

// signIn signs a user in through the exchange's login page, as a browser
// would, and keeps the CSRF token of the console's forms. Redirects are
// not followed: each answer's status is the test's to check.
func signIn(t *testing.T, env *handlerstest.Env, name, email string) *caller {
	t.Helper()
	c := &caller{name: name, b: handlerstest.NewBrowser(t, func(*url.URL) bool { return true })}
	if email == "" {
		return c
	}
	_, page := c.b.Do("GET", env.URL+"/o/login/?next=/console/", nil)
	resp, _ := c.b.Login(page, email, handlerstest.Password)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/" {
		t.Fatalf("sign in %s: %d %s", email, resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, page = c.b.Do("GET", env.URL+"/console/", nil)
	m := csrfField.FindStringSubmatch(page)
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("console home of %s: %d\n%s", email, resp.StatusCode, page)
	}
	c.csrf = m[1]
	return c
}

// post submits a console form with the caller's CSRF token.
func (c *caller) post(env *handlerstest.Env, path string, form url.Values) (*http.Response, string) {
	f := url.Values{"csrf_token": {c.csrf}}
	for k, v := range form {
		f[k] = v
	}
	return c.b.Do("POST", env.URL+path, f)
}

// fixture is an organization with a study, patients and practitioners in
// every role, another organization, and what the forms act on.
type fixture struct {
	env                         *handlerstest.Env
	org, other                  *domain.Organization
	study                       *domain.Study
	hr, steps                   *domain.ScopeCode
	device, spare               *domain.DataSourceView
	patient, outsiderPatient    *domain.Patient
	unenrolled                  *domain.Patient
	invitee                     *domain.Patient // without a login: one who may be invited
	member, removable, newcomer *domain.User
	source                      *domain.FHIRSource
	client                      *domain.OAuthClient
	callers                     map[string]*caller
	// export is a completed export of the study by the member, and
	// exportFile one of its files.
	export, exportFile string
	// jwks is the public key set of a backend client to register.
	jwks string
	// ehr is a test EHR of one record, the brand ehrBrand, to which the
	// patient connects (connection).
	ehr      *ehrtest.EHR
	ehrBrand int64
	t        testing.TB
}

// connection is the patient's connection to the test EHR, made again
// when a form disconnected it.
func (f *fixture) connection() int64 {
	return f.env.ConnectEHR(f.t, f.ehr, f.ehrBrand, f.patient, ehrtest.OneRecordPatient)
}

func newFixture(t *testing.T) *fixture { t.Helper(); return newFixtureWith(t, handlerstest.Options{}) }

// newFixtureWith is newFixture with the exchange's settings.
func newFixtureWith(t *testing.T, o handlerstest.Options) *fixture {
	t.Helper()
	if o.Exports == nil {
		o.Exports = &handlerstest.Exports{}
	}
	if o.EHR == nil {
		o.EHR = handlerstest.FastEHRClient()
	}
	env := handlerstest.StartWith(t, o)
	ctx := context.Background()
	svc, sys := env.Service, domain.SystemActor()
	f := &fixture{env: env, callers: map[string]*caller{}, t: t}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var err error
	f.org, err = svc.CreateOrganization(ctx, sys, domain.NewOrganization{Name: "Clinic", Type: "prov"})
	must(err)
	f.other, err = svc.CreateOrganization(ctx, sys, domain.NewOrganization{Name: "Elsewhere", Type: "prov"})
	must(err)
	f.hr, err = svc.EnsureScopeCode(ctx, domain.SystemOpenMHealth, "omh:heart-rate:2.0", "Heart rate")
	must(err)
	f.steps, err = svc.EnsureScopeCode(ctx, domain.SystemOpenMHealth, "omh:step-count:3.0", "Step count")
	must(err)
	f.device, err = svc.CreateDataSource(ctx, sys, domain.NewDataSource{Name: "Tracker", Type: domain.DataSourcePersonalDevice, SupportedScopeCodeIDs: []int64{f.hr.ID}})
	must(err)
	f.spare, err = svc.CreateDataSource(ctx, sys, domain.NewDataSource{Name: "Scale", Type: domain.DataSourcePersonalDevice})
	must(err)
	f.study, err = svc.CreateStudy(ctx, sys, domain.NewStudy{OrganizationID: f.org.ID, Name: "Study"})
	must(err)
	_, err = svc.AddScopeRequest(ctx, sys, f.study.ID, domain.ScopeRef{ID: f.hr.ID})
	must(err)
	_, err = svc.AddStudyDataSource(ctx, sys, f.study.ID, f.device.ID)
	must(err)
	newPatient := func(email string, org int64) *domain.Patient {
		p, err := svc.CreatePatient(ctx, sys, domain.NewPatient{Email: email, Password: handlerstest.Password, FamilyName: "Doe",
			GivenNames: []string{strings.Split(email, "@")[0]}, BirthDate: "1980-01-02", OrganizationIDs: []int64{org}})
		must(err)
		return p
	}
	f.patient = newPatient("pat@example.org", f.org.ID)
	f.unenrolled = newPatient("later@example.org", f.org.ID)
	f.outsiderPatient = newPatient("quinn@example.org", f.other.ID)
	f.invitee, err = svc.CreatePatient(ctx, sys, domain.NewPatient{Email: "new.patient@example.org", FamilyName: "Doe",
		GivenNames: []string{"Nia"}, OrganizationIDs: []int64{f.org.ID}})
	must(err)
	must(svc.EnrollPatients(ctx, sys, f.study.ID, []int64{f.patient.ID}))
	f.source, err = svc.CreateFHIRSource(ctx, sys, f.patient.ID, 0, "Hospital EHR")
	must(err)
	practitioner := func(email string, org int64, role domain.Role) *domain.User {
		u := env.Practitioner(t, email, false)
		if org != 0 {
			must(svc.AddMember(ctx, sys, org, u.ID, role))
		}
		return u
	}
	su := env.Practitioner(t, "admin@example.org", true)
	practitioner("manager@example.org", f.org.ID, domain.RoleManager)
	f.member = practitioner("member@example.org", f.org.ID, domain.RoleMember)
	practitioner("viewer@example.org", f.org.ID, domain.RoleViewer)
	practitioner("outsider@example.org", f.other.ID, domain.RoleManager)
	f.removable = practitioner("leaving@example.org", f.org.ID, domain.RoleViewer)
	f.newcomer = practitioner("newcomer@example.org", 0, "")
	f.client, _, err = env.OAuth.RegisterClient(ctx, oauth.ClientRegistration{Name: "Dashboard", Type: domain.ClientConfidential,
		RedirectURIs: []string{"https://dash.example.test/cb"}, UserID: su.ID})
	must(err)
	f.ehr = ehrtest.Start(t, ehrtest.OneRecord(t))
	f.ehrBrand = env.RegisterEHR(t, f.ehr, "Console Health")
	for name, email := range map[string]string{"superuser": "admin@example.org", "manager": "manager@example.org",
		"member": "member@example.org", "viewer": "viewer@example.org", "outsider": "outsider@example.org",
		"patient": "pat@example.org", "other patient": "quinn@example.org", "anonymous": ""} {
		f.callers[name] = signIn(t, env, name, email)
	}
	f.export, f.exportFile = completedExport(t, env, f.member.ID, f.study.ID)
	f.jwks = handlerstest.NewBackendKey(t, "ES384").JWKS(t)
	return f
}

// completedExport runs an export of the study as the user (in the
// console: no client) to its end, and returns its id and a file's name.
func completedExport(t *testing.T, env *handlerstest.Env, userID, studyID int64) (string, string) {
	t.Helper()
	ctx := context.Background()
	actor, err := env.Service.Actor(ctx, userID)
	if err != nil {
		t.Fatal(err)
	}
	j, err := env.Service.StartExport(ctx, actor, domain.ExportRequest{Level: domain.ExportGroup, GroupID: studyID, Format: domain.ExportFHIR},
		domain.DefaultExportLimits)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if j, err = env.Service.ExportJobFor(ctx, actor, j.ID); err != nil {
			t.Fatal(err)
		}
		if j.State == domain.ExportCompleted && len(j.Outputs) > 0 {
			return j.ID, j.Outputs[0].Name
		}
	}
	t.Fatalf("the export is %s after 30 s", j.State)
	return "", ""
}

// everyone are the signed-in callers.
var everyone = []string{"superuser", "manager", "member", "viewer", "outsider", "patient", "other patient"}

// pageCase is a page and who may read it; the page of a patient is not
// there (404, as for a patient that does not exist) for those who may not
// see the patient (unseen).
type pageCase struct {
	path    string
	allowed []string
	unseen  []string
	// status overrides the status of callers (a page that refuses its
	// own input: an EHR callback with a state no one began).
	status map[string]int
}

// pageCases are the pages TestPagePermissions checks: each GET route of
// the console (TestPermissionTestsCoverEveryRoute).
func pageCases(f *fixture) []pageCase {
	readers := []string{"superuser", "manager", "member", "viewer", "patient"}
	others := []string{"outsider", "other patient"}
	return []pageCase{
		{"/console/", everyone, nil, nil},
		{"/console/organizations/", everyone, nil, nil},
		{fmt.Sprintf("/console/organizations/%d/", f.org.ID), readers, nil, nil},
		{"/console/studies/", everyone, nil, nil},
		{fmt.Sprintf("/console/studies/%d/", f.study.ID), readers, nil, nil},
		{"/console/patients/", everyone, nil, nil},
		{fmt.Sprintf("/console/patients/%d/", f.patient.ID), readers, others, nil},
		{fmt.Sprintf("/console/patients/%d/data", f.patient.ID), readers, others, nil},
		{fmt.Sprintf("/console/patients/%d/data.csv", f.patient.ID), readers, others, nil},
		{fmt.Sprintf("/console/patients/%d/data.ndjson", f.patient.ID), readers, others, nil},
		{fmt.Sprintf("/console/studies/%d/patients/%d/data", f.study.ID, f.patient.ID), readers, nil, nil},
		{fmt.Sprintf("/console/studies/%d/patients/%d/data.csv", f.study.ID, f.patient.ID), readers, nil, nil},
		{fmt.Sprintf("/console/studies/%d/patients/%d/data.ndjson", f.study.ID, f.patient.ID), readers, nil, nil},
		{"/console/sources/", everyone, nil, nil},
		{fmt.Sprintf("/console/fhir-sources/%d/", f.source.ID), readers, others, nil},
		{"/console/clients/", []string{"superuser"}, nil, nil},
		// An export is its owner's alone; to anyone else it does not exist.
		{"/console/exports/" + f.export + "/", []string{"member"}, notMember, nil},
		{"/console/exports/" + f.export + "/" + f.exportFile, []string{"member"}, notMember, nil},
		{"/console/identity-providers/", []string{"superuser"}, nil, nil},
		{"/console/records/", []string{"patient", "other patient"}, nil, nil},
		{fmt.Sprintf("/console/patients/%d/records", f.patient.ID), readers, others, nil},
		{"/console/records/callback?state=not-begun&code=x", nil, nil, map[string]int{"patient": 400, "other patient": 400}},
	}
}

// notMember are the signed-in callers but the member.
var notMember = []string{"superuser", "manager", "viewer", "outsider", "patient", "other patient"}

// TestPagePermissions: each page answers every kind of user as the
// permission model says (readers 200, others the API's 403), and sends a
// visitor without a session to the login page.
func TestPagePermissions(t *testing.T) {
	f := newFixture(t)
	for _, tc := range pageCases(f) {
		for _, name := range append(everyone, "anonymous") {
			resp, body := f.callers[name].b.Do("GET", f.env.URL+tc.path, nil)
			want := http.StatusForbidden
			switch {
			case name == "anonymous":
				want = http.StatusSeeOther
			case tc.status[name] != 0:
				want = tc.status[name]
			case contains(tc.allowed, name):
				want = http.StatusOK
			case contains(tc.unseen, name):
				want = http.StatusNotFound
			}
			if resp.StatusCode != want {
				t.Errorf("GET %s as %s: %d, want %d\n%.300s", tc.path, name, resp.StatusCode, want, body)
				continue
			}
			if name == "anonymous" && resp.Header.Get("Location") != "/o/login/?next="+url.QueryEscape(tc.path) && !strings.Contains(tc.path, "?") {
				t.Errorf("GET %s without a session: Location %q", tc.path, resp.Header.Get("Location"))
			}
			if want != http.StatusSeeOther && resp.Header.Get("Cache-Control") != "no-store" {
				t.Errorf("GET %s as %s: Cache-Control %q", tc.path, name, resp.Header.Get("Cache-Control"))
			}
		}
	}
	// Unknown ids, and pages past the end of a list, answer as the API does.
	for _, path := range []string{"/console/patients/999/", "/console/studies/x/", "/console/nowhere",
		fmt.Sprintf("/console/organizations/%d/?page=2", f.org.ID), fmt.Sprintf("/console/studies/%d/?page=2", f.study.ID),
		fmt.Sprintf("/console/organizations/%d/?page=9223372036854775807", f.org.ID)} {
		if resp, _ := f.callers["superuser"].b.Do("GET", f.env.URL+path, nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, resp.StatusCode)
		}
	}
}

// formCase is a form, who may not post it, and who may, with the status
// of their post. A form on a patient the caller may not see answers as
// for a patient that does not exist (unseen: the status by caller; 403
// for the others denied).
type formCase struct {
	path   func() string
	form   url.Values
	denied []string
	by     string
	want   int
	unseen map[string]int
}

// formCases are the forms TestFormPermissions checks, in order: each POST
// route of the console (TestPermissionTestsCoverEveryRoute).
func formCases(f *fixture) []formCase {
	study := fmt.Sprintf("/console/studies/%d", f.study.ID)
	patient := fmt.Sprintf("/console/patients/%d", f.patient.ID)
	invitee := fmt.Sprintf("/console/patients/%d", f.invitee.ID)
	notInvitees := map[string]int{"outsider": 404, "patient": 404, "other patient": 404}
	org := fmt.Sprintf("/console/organizations/%d", f.org.ID)
	invitation := func() string {
		list, err := f.env.OAuth.Invitations(context.Background(), []int64{f.invitee.UserID})
		if err != nil || len(list) == 0 {
			return "none"
		}
		return list[len(list)-1].ID
	}
	type form = url.Values
	return []formCase{
		{fixed(org + "/members"), form{"email": {"newcomer@example.org"}, "role": {"member"}}, []string{"member", "viewer", "outsider", "patient"}, "manager", http.StatusSeeOther, nil},
		{fixed(fmt.Sprintf("%s/members/%d", org, f.removable.ID)), form{"role": {"member"}}, []string{"member", "viewer", "outsider", "patient"}, "manager", http.StatusSeeOther, nil},
		{fixed(fmt.Sprintf("%s/members/%d/remove", org, f.removable.ID)), nil, []string{"member", "viewer", "outsider", "patient"}, "manager", http.StatusSeeOther, nil},
		{fixed("/console/studies/"), form{"organization": {fmt.Sprint(f.org.ID)}, "name": {"New study"}}, []string{"viewer", "outsider", "patient"}, "member", http.StatusSeeOther, nil},
		{fixed(study + "/"), form{"name": {"Renamed"}, "description": {"d"}, "version": {f.study.LastUpdated.UTC().Format(time.RFC3339Nano)}}, []string{"viewer", "outsider", "patient"}, "member", http.StatusSeeOther, nil},
		{fixed(study + "/scopes"), form{"scope": {fmt.Sprint(f.steps.ID)}}, []string{"viewer", "outsider", "patient"}, "manager", http.StatusSeeOther, nil},
		{fixed(fmt.Sprintf("%s/scopes/%d/remove", study, f.steps.ID)), nil, []string{"viewer", "outsider", "patient"}, "manager", http.StatusSeeOther, nil},
		{fixed(study + "/data-sources"), form{"source": {fmt.Sprint(f.spare.ID)}}, []string{"viewer", "outsider", "patient"}, "manager", http.StatusSeeOther, nil},
		{fixed(fmt.Sprintf("%s/data-sources/%d/remove", study, f.spare.ID)), nil, []string{"viewer", "outsider", "patient"}, "manager", http.StatusSeeOther, nil},
		{fixed(study + "/enroll"), form{"patient": {fmt.Sprint(f.unenrolled.ID)}}, []string{"viewer", "outsider", "patient"}, "manager", http.StatusSeeOther, nil},
		{fixed(study + "/unenroll"), form{"patient": {fmt.Sprint(f.unenrolled.ID)}}, []string{"viewer", "outsider", "patient"}, "manager", http.StatusSeeOther, nil},
		{fixed("/console/patients/"), form{"organization": {fmt.Sprint(f.org.ID)}, "email": {"new@example.org"}, "family": {"New"}, "given": {"Nia"}},
			[]string{"viewer", "outsider", "patient"}, "member", http.StatusSeeOther, nil},
		{fixed(patient + "/identifiers"), form{"system": {"urn:mrn"}, "value": {"1"}}, []string{"viewer", "outsider", "other patient"}, "patient", http.StatusSeeOther, map[string]int{"outsider": 404, "other patient": 404}},
		{fixed(patient + "/identifiers/remove"), form{"system": {"urn:mrn"}, "value": {"1"}}, []string{"viewer", "outsider", "other patient"}, "member", http.StatusSeeOther, map[string]int{"outsider": 404, "other patient": 404}},
		{fixed(invitee + "/invitations"), nil, []string{"viewer", "outsider", "patient", "other patient"}, "manager", http.StatusCreated, notInvitees},
		{func() string { return invitee + "/invitations/" + invitation() + "/reissue" }, nil, []string{"viewer", "outsider", "patient"}, "member", http.StatusCreated, notInvitees},
		{func() string { return invitee + "/invitations/" + invitation() + "/cancel" }, nil, []string{"viewer", "outsider", "patient"}, "manager", http.StatusSeeOther, notInvitees},
		// A patient with a login: a member may not replace it, a manager may.
		{fixed(fmt.Sprintf("/console/patients/%d/invitations", f.unenrolled.ID)), form{"replaceLogin": {"yes"}}, []string{"member", "viewer", "outsider", "patient", "other patient"},
			"manager", http.StatusCreated, notInvitees},
		{fixed("/console/consents"), form{"patient": {fmt.Sprint(f.patient.ID)}, "study": {fmt.Sprint(f.study.ID)}, "system": {f.hr.System}, "code": {f.hr.Code}, "answer": {"share"}},
			[]string{"viewer", "outsider", "other patient"}, "patient", http.StatusSeeOther, map[string]int{"outsider": 404, "other patient": 404}},
		{fixed("/console/data-sources"), form{"name": {"Ring"}, "type": {"personal_device"}, "scopes": {fmt.Sprint(f.hr.ID)}}, []string{"manager", "patient"}, "superuser", http.StatusSeeOther, nil},
		{fixed("/console/scope-codes"), form{"schema": {"omh:body-height:2.0"}}, []string{"manager", "patient"}, "superuser", http.StatusSeeOther, nil},
		{fixed("/console/fhir-sources"), form{"patient": {fmt.Sprint(f.patient.ID)}, "label": {"Clinic app"}}, []string{"viewer", "outsider", "other patient"}, "member", http.StatusSeeOther, map[string]int{"outsider": 400, "other patient": 400}},
		{fixed("/console/clients/"), form{"name": {"App"}, "type": {"public"}, "grant": {"authorization_code"}, "redirectUris": {"https://app.example.test/cb"}, "algorithm": {"RS256"}},
			[]string{"manager", "patient"}, "superuser", http.StatusCreated, nil},
		{fixed("/console/clients/" + f.client.ID + "/rotate"), nil, []string{"manager", "patient"}, "superuser", http.StatusOK, nil},
		{fixed("/console/clients/backend"), form{"name": {"Pipeline"}, "jwks": {f.jwks}, "actsFor": {"me"}}, []string{"manager", "patient"}, "superuser", http.StatusCreated, nil},
		{fixed(study + "/export"), nil, []string{"outsider", "other patient"}, "viewer", http.StatusSeeOther, map[string]int{"outsider": 404, "other patient": 404}},
		{fixed(patient + "/export"), nil, []string{"outsider", "other patient"}, "patient", http.StatusSeeOther, map[string]int{"outsider": 404, "other patient": 404}},
		{fixed("/console/exports/" + f.export + "/delete"), nil, notMember, "member", http.StatusSeeOther,
			map[string]int{"superuser": 404, "manager": 404, "viewer": 404, "outsider": 404, "patient": 404, "other patient": 404}},
		{fixed("/console/identity-providers/"), form{"kind": {"saml"}, "id": {"campus"}, "name": {"Campus"}, "metadataUrl": {"https://idp.campus.example/metadata"},
			"firstSignIn": {"create"}, "allowedEmailDomains": {"campus.example, example.edu"}}, []string{"manager", "patient"}, "superuser", http.StatusSeeOther, nil},
		{fixed("/console/identity-providers/campus/invitations"), form{"email": {"new@campus.example"}}, []string{"manager", "patient"}, "superuser", http.StatusSeeOther, nil},
		{fixed("/console/identity-providers/campus/invitations/remove"), form{"email": {"new@campus.example"}}, []string{"manager", "patient"}, "superuser", http.StatusSeeOther, nil},
		{fixed("/console/identity-providers/campus/remove"), nil, []string{"manager", "patient"}, "superuser", http.StatusSeeOther, nil},
		// Patient access: only a patient connects, and pulls, changes and
		// disconnects their own connection.
		{fixed("/console/records/connect"), form{"brand": {fmt.Sprint(f.ehrBrand)}}, []string{"superuser", "manager"}, "patient", http.StatusOK, nil},
		{func() string { return fmt.Sprintf("/console/records/%d/sync", f.connection()) }, nil, []string{"manager", "viewer", "outsider", "other patient"},
			"patient", http.StatusSeeOther, map[string]int{"outsider": 404, "other patient": 404}},
		{func() string { return fmt.Sprintf("/console/records/%d/keep-updated", f.connection()) }, form{"keepUpdated": {"false"}},
			[]string{"superuser", "manager", "outsider", "other patient"}, "patient", http.StatusSeeOther, map[string]int{"outsider": 404, "other patient": 404}},
		{func() string { return fmt.Sprintf("/console/records/%d/disconnect", f.connection()) }, nil, []string{"manager", "viewer", "outsider", "other patient"},
			"patient", http.StatusSeeOther, map[string]int{"outsider": 404, "other patient": 404}},
	}
}

// TestFormPermissions: every form is refused (403, nothing changes) to
// those the permission model refuses, before it is accepted from one who
// may; without a session it is 401, without its CSRF token 403.
func TestFormPermissions(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, tc := range formCases(f) {
		for _, name := range tc.denied {
			path := tc.path()
			want, ok := tc.unseen[name]
			if !ok {
				want = http.StatusForbidden
			}
			if resp, body := f.callers[name].post(f.env, path, tc.form); resp.StatusCode != want {
				t.Errorf("POST %s as %s: %d, want %d\n%.400s", path, name, resp.StatusCode, want, body)
			}
		}
		path := tc.path()
		if resp, _ := f.callers["anonymous"].post(f.env, path, tc.form); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("POST %s without a session: %d, want 401", path, resp.StatusCode)
		}
		forged := *f.callers[tc.by]
		forged.csrf = "forged-forged-forged-forged-forged-forged"
		if resp, _ := forged.post(f.env, path, tc.form); resp.StatusCode != http.StatusForbidden {
			t.Errorf("POST %s as %s with a forged CSRF token: %d, want 403", path, tc.by, resp.StatusCode)
		}
		if resp, body := f.callers[tc.by].post(f.env, path, tc.form); resp.StatusCode != tc.want {
			t.Errorf("POST %s as %s: %d, want %d\n%.600s", path, tc.by, resp.StatusCode, tc.want, body)
		}
	}
	// What the accepted forms did.
	if m, err := f.env.Service.Membership(ctx, f.org.ID, f.newcomer.ID); err != nil || m.Role != domain.RoleMember {
		t.Errorf("the newcomer's membership: %+v, %v", m, err)
	}
	if _, err := f.env.Service.Membership(ctx, f.org.ID, f.removable.ID); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("the removed member: %v", err)
	}
	if st, _ := f.env.Service.StudyByID(ctx, domain.SystemActor(), f.study.ID); st.Name != "Renamed" {
		t.Errorf("the study's name: %q", st.Name)
	}
	overview, err := f.env.Service.PatientConsents(ctx, domain.SystemActor(), f.patient.ID)
	if err != nil || len(overview.ConsolidatedConsentedScopes) != 1 || overview.ConsolidatedConsentedScopes[0].ID != f.hr.ID {
		t.Errorf("the patient's consent: %+v, %v", overview, err)
	}
}

// TestWriteControlsFollowPermissions: a viewer is offered no form but
// sign-out; a manager gets the study's forms; a patient never sees another
// patient's page.
func TestWriteControlsFollowPermissions(t *testing.T) {
	f := newFixture(t)
	forms := regexp.MustCompile(`<form method="post" action="([^"]+)"`)
	actions := func(name, path string) []string {
		_, page := f.callers[name].b.Do("GET", f.env.URL+path, nil)
		var out []string
		for _, m := range forms.FindAllStringSubmatch(page, -1) {
			// An export reads: a viewer may start one.
			if m[1] != "/o/logout/" && !strings.HasSuffix(m[1], "/export") {
				out = append(out, m[1])
			}
		}
		return out
	}
	for _, path := range []string{fmt.Sprintf("/console/studies/%d/", f.study.ID), fmt.Sprintf("/console/patients/%d/", f.patient.ID),
		fmt.Sprintf("/console/organizations/%d/", f.org.ID), "/console/studies/", "/console/patients/", "/console/sources/"} {
		if got := actions("viewer", path); len(got) != 0 {
			t.Errorf("a viewer is offered forms on %s: %v", path, got)
		}
	}
	got := actions("manager", fmt.Sprintf("/console/studies/%d/", f.study.ID))
	for _, want := range []string{"/scopes", "/data-sources", "/enroll", "/unenroll"} {
		if !containsSuffix(got, want) {
			t.Errorf("the manager's study page lacks the form %s: %v", want, got)
		}
	}
	if resp, _ := f.callers["patient"].b.Do("GET", fmt.Sprintf("%s/console/patients/%d/", f.env.URL, f.outsiderPatient.ID), nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("a patient opening another patient's page: %d", resp.StatusCode)
	}
}

// TestSecurityHeaders: a strict CSP without inline script or style, no
// framing, no referrer; and no style attribute in a page with a chart.
func TestSecurityHeaders(t *testing.T) {
	f := newFixture(t)
	resp, _ := f.callers["manager"].b.Do("GET", f.env.URL+"/console/", nil)
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "form-action 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("Referrer-Policy") != "no-referrer" {
		t.Errorf("headers: %v", resp.Header)
	}
}

func fixed(path string) func() string { return func() string { return path } }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func containsSuffix(list []string, suffix string) bool {
	for _, x := range list {
		if strings.HasSuffix(x, suffix) {
			return true
		}
	}
	return false
}

// TestSchemaPicker: a superuser adds a kind of data from the Open mHealth
// and the IEEE 1752 schemas, each coded on its namespace's system; the
// picker leaves out the schemas that have a scope code already.
func TestSchemaPicker(t *testing.T) {
	f := newFixture(t)
	su := f.callers["superuser"]
	_, page := su.b.Do("GET", f.env.URL+"/console/sources/", nil)
	for _, want := range []string{`<optgroup label="Open mHealth">`, `<optgroup label="IEEE 1752">`,
		`<option value="omh:body-height:2.0">`, `<option value="ieee:sleep-stage-summary:1.0">`} {
		if !strings.Contains(page, want) {
			t.Errorf("the schema picker lacks %s", want)
		}
	}
	if strings.Contains(page, `<option value="omh:heart-rate:2.0">`) {
		t.Errorf("the picker offers heart-rate 2.0, which has a scope code")
	}
	if resp, body := su.post(f.env, "/console/scope-codes", url.Values{"schema": {"ieee:sleep-stage-summary:1.0"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("add ieee:sleep-stage-summary:1.0: %d\n%.600s", resp.StatusCode, body)
	}
	codes, err := f.env.Service.ListScopeCodes(context.Background(), domain.Page{Number: 1, Size: domain.MaxPageSize})
	if err != nil || !slices.ContainsFunc(codes.Items, func(c domain.ScopeCode) bool {
		return c.System == domain.SystemIEEE1752 && c.Code == "ieee:sleep-stage-summary:1.0" && c.Text == "Sleep stage summary"
	}) {
		t.Errorf("no IEEE scope code for sleep-stage-summary: %+v, %v", codes.Items, err)
	}
	for _, bad := range []string{"ieee:heart-rate:2.0", "omh:sleep-stage-summary:1.0", "body-height:2.0", "fhir:body-height:2.0", ""} {
		if resp, body := su.post(f.env, "/console/scope-codes", url.Values{"schema": {bad}}); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("add %q: %d, want 400\n%.300s", bad, resp.StatusCode, body)
		}
	}
}

// TestCanonicalIDs: an id in a page's path or a form is written as the
// console writes it; "01", "+1" and " 1" name no page (404) and choose
// nothing (400), so that one record has one URL.
func TestCanonicalIDs(t *testing.T) {
	f := newFixture(t)
	su := f.callers["superuser"]
	id := fmt.Sprint(f.study.ID)
	if resp, _ := su.b.Do("GET", f.env.URL+"/console/studies/"+id+"/", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("the study's page: %d", resp.StatusCode)
	}
	for _, bad := range []string{"0" + id, "+" + id, "%20" + id, "00", "-" + id} {
		if resp, _ := su.b.Do("GET", f.env.URL+"/console/studies/"+bad+"/", nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET /console/studies/%s/: %d, want 404", bad, resp.StatusCode)
		}
	}
	patient := fmt.Sprint(f.patient.ID)
	for _, bad := range []string{"0" + patient, "+" + patient, " " + patient} {
		if resp, body := su.post(f.env, "/console/fhir-sources", url.Values{"patient": {bad}, "label": {"Clinic app"}}); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("POST /console/fhir-sources patient %q: %d, want 400\n%.300s", bad, resp.StatusCode, body)
		}
	}
	if resp, body := su.post(f.env, "/console/data-sources", url.Values{"name": {"Ring"}, "type": {"personal_device"}, "scopes": {"0" + fmt.Sprint(f.hr.ID)}}); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("POST /console/data-sources scopes 0%d: %d, want 400\n%.300s", f.hr.ID, resp.StatusCode, body)
	}
}

// TestSignOutComesBack: the console's sign-out form ends the session and
// comes back to the console, which, signed out, offers the login page that
// leads back to it (not the /o/ page that says "You are signed out" and
// nothing else).
func TestSignOutComesBack(t *testing.T) {
	f := newFixture(t)
	m := f.callers["manager"]
	_, page := m.b.Do("GET", f.env.URL+"/console/", nil)
	if !strings.Contains(page, `<input type="hidden" name="next" value="/console/">`) {
		t.Fatalf("the sign-out form has no next:\n%s", page)
	}
	resp, body := m.b.Do("POST", f.env.URL+"/o/logout/", url.Values{"csrf_token": {m.csrf}, "next": {"/console/"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/" {
		t.Fatalf("sign out: %d to %q\n%.300s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	resp, _ = m.b.Do("GET", f.env.URL+"/console/", nil)
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/o/login/?next=") {
		t.Errorf("the console after sign-out: %d to %q, want the login page", resp.StatusCode, loc)
	}
}

// TestASessionReadsItsUserOnce: a console page reads its user once, for
// the login session's check (a password change or deactivation ends it)
// and the page's actor alike, as a bearer token does
// (TestABearerTokenReadsItsUserOnce).
func TestASessionReadsItsUserOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	env := handlerstest.StartWith(t, handlerstest.Options{DB: repo.Options{Metrics: repo.NewMetrics(reg)}})
	env.Patient(t, "pat@example.org")
	env.Practitioner(t, "doc@example.org", false)
	for _, email := range []string{"pat@example.org", "doc@example.org"} {
		c := signIn(t, env, email, email)
		before := repotest.Operations(t, reg, "users", "find")
		if resp, page := c.b.Do("GET", env.URL+"/console/", nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s's home: %d\n%.300s", email, resp.StatusCode, page)
		}
		if n := repotest.Operations(t, reg, "users", "find") - before; n != 1 {
			t.Errorf("%s's page read the user %d times, want once", email, n)
		}
	}
}

// TestOrganizationsArePaged: the organization tree is read and shown a
// page at a time, on its page and on the home page.
func TestOrganizationsArePaged(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for i := range 25 {
		if _, err := f.env.Service.CreateOrganization(ctx, domain.SystemActor(), domain.NewOrganization{Name: fmt.Sprintf("Ward %d", i),
			Type: "dept", PartOf: f.org.ID}); err != nil {
			t.Fatal(err)
		}
	}
	links := regexp.MustCompile(`href="/console/organizations/\d+/"`)
	m := f.callers["manager"] // the clinic and its 25 wards
	for _, tc := range []struct {
		path   string
		status int
		orgs   int
		more   string
	}{
		{"/console/organizations/", http.StatusOK, 20, `href="/console/organizations/?page=2" rel="next"`},
		{"/console/organizations/?page=2", http.StatusOK, 6, `href="/console/organizations/?page=1" rel="prev"`},
		{"/console/organizations/?page=3", http.StatusNotFound, 0, ""},
		{"/console/", http.StatusOK, 10, `<a href="/console/organizations/">All 26 organizations</a>`},
	} {
		resp, page := m.b.Do("GET", f.env.URL+tc.path, nil)
		if resp.StatusCode != tc.status {
			t.Errorf("GET %s: %d, want %d", tc.path, resp.StatusCode, tc.status)
			continue
		}
		if got := len(links.FindAllString(page, -1)); got != tc.orgs {
			t.Errorf("GET %s: %d organizations, want %d", tc.path, got, tc.orgs)
		}
		if !strings.Contains(page, tc.more) {
			t.Errorf("GET %s: no %s", tc.path, tc.more)
		}
	}
}

// TestPermissionTestsCoverEveryRoute: each page and form of a signed-in
// user is in TestPagePermissions or TestFormPermissions, so a route added
// without its permission case fails here.
func TestPermissionTestsCoverEveryRoute(t *testing.T) {
	f := newFixture(t)
	mux := http.NewServeMux()
	for _, pattern := range console.SignedInPatterns() {
		mux.HandleFunc(pattern, func(http.ResponseWriter, *http.Request) {})
	}
	tested := map[string]bool{}
	route := func(method, path string) {
		_, pattern := mux.Handler(httptest.NewRequest(method, path, nil))
		tested[pattern] = true
	}
	for _, tc := range pageCases(f) {
		route("GET", tc.path)
	}
	for _, tc := range formCases(f) {
		route("POST", tc.path())
	}
	for _, pattern := range console.SignedInPatterns() {
		if !tested[pattern] {
			t.Errorf("%s is in no permission test", pattern)
		}
	}
}

// TestHiddenPatientsLookAbsent: the pages and forms of a patient the
// caller may not see answer exactly as those of a patient that does not
// exist (status and page, but for the id), so the console tells no one
// which patient ids exist.
func TestHiddenPatientsLookAbsent(t *testing.T) {
	f := newFixture(t)
	const absent = "987654321"
	hidden := fmt.Sprint(f.patient.ID)
	pages := []string{"/console/patients/{v}/", "/console/patients/{v}/data", "/console/patients/{v}/data.csv", "/console/patients/{v}/data.ndjson"}
	forms := []struct {
		path string
		form url.Values
	}{
		{"/console/patients/{v}/identifiers", url.Values{"system": {"urn:mrn"}, "value": {"1"}}},
		{"/console/patients/{v}/identifiers/remove", url.Values{"system": {"urn:mrn"}, "value": {"1"}}},
		{"/console/patients/{v}/invitations", nil},
		{"/console/consents", url.Values{"patient": {"{v}"}, "study": {fmt.Sprint(f.study.ID)}, "system": {f.hr.System}, "code": {f.hr.Code}, "answer": {"share"}}},
		{"/console/fhir-sources", url.Values{"patient": {"{v}"}, "label": {"Probe"}}},
	}
	with := func(s, v string) string { return strings.ReplaceAll(s, "{v}", v) }
	for _, name := range []string{"outsider", "other patient"} {
		c := f.callers[name]
		compare := func(what string, send func(v string) (*http.Response, string)) {
			a, aBody := send(hidden)
			b, bBody := send(absent)
			if a.StatusCode != b.StatusCode {
				t.Errorf("%s as %s: %d for a hidden patient, %d for an absent one", what, name, a.StatusCode, b.StatusCode)
			} else if diff := handlerstest.Unlike(aBody, bBody, hidden, absent); diff != "" {
				t.Errorf("%s as %s: a hidden patient and an absent one are told apart by %s", what, name, diff)
			}
		}
		for _, p := range pages {
			compare("GET "+p, func(v string) (*http.Response, string) { return c.b.Do("GET", f.env.URL+with(p, v), nil) })
		}
		for _, fm := range forms {
			compare("POST "+fm.path, func(v string) (*http.Response, string) {
				form := url.Values{}
				for k, vs := range fm.form {
					form[k] = []string{with(vs[0], v)}
				}
				return c.post(f.env, with(fm.path, v), form)
			})
		}
	}
}
