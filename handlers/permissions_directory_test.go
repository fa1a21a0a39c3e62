package handlers_test

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	"exchange/domain"
	"exchange/handlers/handlerstest"
)

// person is someone the directory could leak: their marks are values
// found nowhere else (names, email, phone).
type person struct {
	name  string // the actor name, when the person is an actor
	id    int64  // user id
	pat   int64  // patient id; 0 for practitioners
	marks map[string]string
}

// directoryPeople gives every person of the matrix world unique marks and
// adds three more: a practitioner in no organization, a colleague of the
// outsider in B, and a patient of B.
func directoryPeople(w *world) (map[string]*person, int64) {
	svc, ctx := w.env.Service, w.ctx
	people := map[string]*person{}
	n := 0
	marks := func(email string) map[string]string {
		n++
		return map[string]string{"given name": fmt.Sprintf("Gvn%dq", n), "family name": fmt.Sprintf("Fam%dq", n), "email": email}
	}
	orgB := must(svc.OrganizationByName(ctx, "Elsewhere", 0)).ID
	practitioner := func(name string, u *domain.User) {
		p := &person{name: name, id: u.ID, marks: marks(u.Email)}
		u.FirstName, u.LastName = p.marks["given name"], p.marks["family name"]
		if _, err := w.env.DB.ChangeUser(ctx, u.ID, domain.UserChange{FirstName: &u.FirstName, LastName: &u.LastName}); err != nil {
			w.t.Fatal(err)
		}
		people[name] = p
	}
	for _, name := range []string{"superuser", "manager", "member", "viewer", "outsider"} {
		practitioner(name, must(svc.UserByEmail(ctx, name+"@example.org")))
	}
	practitioner("loner", must(svc.CreateUser(ctx, domain.NewUser{Email: "loner@example.org", Type: domain.UserPractitioner})))
	practitioner("colleagueB", must(svc.CreateUser(ctx, domain.NewUser{Email: "colleague-b@example.org", Type: domain.UserPractitioner})))
	if err := svc.AddMember(ctx, sys, orgB, people["colleagueB"].id, domain.RoleMember); err != nil {
		w.t.Fatal(err)
	}
	patient := func(name string, pat *domain.Patient) {
		u := must(svc.UserByID(ctx, pat.UserID))
		p := &person{name: name, id: u.ID, pat: pat.ID, marks: marks(u.Email)}
		p.marks["phone"] = fmt.Sprintf("+1-555-01%02d", n)
		family, given, phone := p.marks["family name"], []string{p.marks["given name"]}, p.marks["phone"]
		must(svc.UpdatePatient(ctx, sys, pat.ID, domain.PatientPatch{FamilyName: &family, GivenNames: &given, Phone: &phone}))
		people[name] = p
	}
	patient("patient", w.patient)
	patient("otherPatient", w.other)
	patient("strangerPatient", must(svc.CreatePatient(ctx, sys, domain.NewPatient{Email: "stranger@example.org",
		FamilyName: "X", GivenNames: []string{"Y"}, OrganizationIDs: []int64{orgB}})))
	return people, orgB
}

// mayBeSeen is the ceiling of the permission model, written out: whom each
// actor may see. A superuser sees everyone; a practitioner sees
// themselves, the colleagues of their organizations and those
// organizations' patients; a patient sees themselves and the practitioners
// of their organizations; no one else sees anyone.
var mayBeSeen = map[string][]string{
	"manager":      {"manager", "member", "viewer", "patient", "otherPatient"},
	"member":       {"manager", "member", "viewer", "patient", "otherPatient"},
	"viewer":       {"manager", "member", "viewer", "patient", "otherPatient"},
	"outsider":     {"outsider", "colleagueB", "strangerPatient"},
	"patient":      {"patient", "manager", "member", "viewer"},
	"otherPatient": {"otherPatient", "manager", "member", "viewer"},
}

// TestUserDirectoryLeaksNoOne sends every list, search and read of people
// (admin API and FHIR projections), with searches that would match anyone,
// as every actor, and checks that no mark of a person the actor may not
// see appears anywhere in any answer, unless the request itself carried it
// (a lookup by exact email names the email it looks up).
func TestUserDirectoryLeaksNoOne(t *testing.T) {
	t.Parallel() // its own exchange and database
	w := newWorld(t)
	people, orgB := directoryPeople(w)
	A, S := w.orgA.ID, w.study.ID
	paths := []string{
		"/api/v1/users", "/api/v1/users?email=example", "/api/v1/users?email=Fam", "/api/v1/users/profile",
		fmt.Sprintf("/api/v1/organizations/%d/users", A), fmt.Sprintf("/api/v1/organizations/%d/users", orgB),
		"/api/v1/practitioners", fmt.Sprintf("/api/v1/practitioners?organizationId=%d", A), fmt.Sprintf("/api/v1/practitioners?organizationId=%d", orgB),
		"/api/v1/patients", "/api/v1/patients?name=Fam", "/api/v1/patients?name=Gvn",
		fmt.Sprintf("/api/v1/patients?organizationId=%d", A), fmt.Sprintf("/api/v1/patients?organizationId=%d", orgB),
		fmt.Sprintf("/api/v1/patients?studyId=%d", S), fmt.Sprintf("/api/v1/studies/%d/patients", S),
		"/api/v1/studies", fmt.Sprintf("/api/v1/studies/%d", S), "/api/v1/organizations", "/api/v1/organizations/0", "/api/v1/oauth_clients", "/api/v1/fhir_sources",
		"/FHIR/R5/Patient", "/FHIR/R5/Patient?name=Fam", "/FHIR/R5/Patient?family=Fam", "/FHIR/R5/Patient?given=Gvn",
		fmt.Sprintf("/FHIR/R5/Patient?_has:Group:member:_id=%d", S), fmt.Sprintf("/FHIR/R5/Patient?patient.organization=Organization/%d", orgB),
		"/FHIR/R5/Practitioner", "/FHIR/R5/Practitioner?name=Gvn", fmt.Sprintf("/FHIR/R5/Practitioner?_has:Group:member:_id=%d", S),
		fmt.Sprintf("/FHIR/R5/Practitioner?patient.organization=Organization/%d", orgB),
		"/FHIR/R5/Group", fmt.Sprintf("/FHIR/R5/Group/%d", S), "/FHIR/R5/Organization", "/FHIR/R5/Observation", "/FHIR/R5/Device",
	}
	for _, p := range people {
		paths = append(paths, "/api/v1/users?email="+url.QueryEscape(p.marks["email"]), "/api/v1/patients/global_lookup?email="+url.QueryEscape(p.marks["email"]))
		if p.pat != 0 {
			paths = append(paths, fmt.Sprintf("/api/v1/patients/%d", p.pat), fmt.Sprintf("/api/v1/patients/%d/consents", p.pat),
				fmt.Sprintf("/FHIR/R5/Patient/%d", p.pat), fmt.Sprintf("/FHIR/R5/Patient?_id=%d", p.pat),
				fmt.Sprintf("/FHIR/R5/Practitioner?patient=Patient/%d", p.pat))
		} else {
			paths = append(paths, fmt.Sprintf("/api/v1/practitioners/%d", p.id), fmt.Sprintf("/FHIR/R5/Practitioner/%d", p.id),
				fmt.Sprintf("/FHIR/R5/Practitioner?_id=%d", p.id))
		}
	}
	cases, leaks := 0, 0
	for _, actor := range matrixActors {
		for _, path := range paths {
			body := getBody(t, w.env.URL+path, w.tokens[actor])
			asked, _ := url.QueryUnescape(path)
			for _, p := range people {
				if actor == "superuser" || p.name == actor || slices.Contains(mayBeSeen[actor], p.name) {
					continue
				}
				for field, mark := range p.marks {
					cases++
					if strings.Contains(body, mark) && !strings.Contains(asked, mark) {
						leaks++
						t.Errorf("%s: GET %s shows the %s of %s (%q)", actor, path, field, p.name, mark)
					}
				}
			}
		}
	}
	// The superuser sees everyone: the marks are where the checks look.
	if all := getBody(t, w.env.URL+"/api/v1/users?email=example", w.tokens["superuser"]); !strings.Contains(all, people["strangerPatient"].marks["family name"]) {
		t.Errorf("the superuser's directory does not show everyone:\n%s", all)
	}
	t.Logf("user directory: %d actors x %d requests x people and fields = %d checks, %d leaks", len(matrixActors), len(paths), cases, leaks)
}

// getBody sends GET with a bearer token (none: empty) and returns the body.
func getBody(t *testing.T, rawURL, token string) string {
	t.Helper()
	_, body := handlerstest.GetText(t, rawURL, token)
	return body
}
