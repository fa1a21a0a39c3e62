package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"exchange/domain"
	"exchange/oauth"
)

const admMRN = "http://hospital.example.org/mrn"

func admIdentifier(value string) map[string]any {
	return map[string]any{"system": admMRN, "value": value}
}

// admIdentifiers returns the identifiers of a patient body as system|value.
func admIdentifiers(t *testing.T, p map[string]any) []string {
	t.Helper()
	var out []string
	for _, i := range admList(t, p, "identifiers") {
		out = append(out, fmt.Sprint(i["system"], "|", i["value"]))
	}
	return out
}

func TestPatientsCreate(t *testing.T) {
	w := admNewWorld(t)
	ctx := context.Background()
	created := w.call(t, "POST", "/api/v1/patients", w.member, map[string]any{
		"email": "Zoe@Example.org", "nameFamily": "Ødegård", "nameGiven": []string{"Zoë", "Anne"}, "birthDate": "1990-05-06",
		"phone": "+47 123", "identifiers": []any{admIdentifier("MRN-1")}, "organizationIds": []int64{w.org.ID}}, http.StatusCreated)
	id := admID(t, created)
	if created["nameFamily"] != "Ødegård" || created["nameGiven"] != "Zoë Anne" || fmt.Sprint(created["givenNames"]) != "[Zoë Anne]" || created["birthDate"] != "1990-05-06" ||
		fmt.Sprint(created["organizationIds"]) != fmt.Sprintf("[%d]", w.org.ID) || created["lastUpdated"] == nil {
		t.Errorf("created: %v", created)
	}
	if got := admIdentifiers(t, created); !slices.Equal(got, []string{admMRN + "|MRN-1"}) {
		t.Errorf("identifiers: %v", got)
	}
	if telecom := fmt.Sprint(created["telecom"]); telecom != "[map[system:email value:zoe@example.org] map[system:phone value:+47 123]]" {
		t.Errorf("telecom: %s", telecom)
	}
	user, err := w.env.Service.UserByID(ctx, admID(t, created, "userId"))
	if err != nil || user.Email != "zoe@example.org" || user.Type != domain.UserPatient {
		t.Fatalf("login: %+v %v", user, err)
	}
	if got := w.call(t, "GET", fmt.Sprintf("/api/v1/patients/%d", id), w.viewer, nil, http.StatusOK); fmt.Sprint(got) != fmt.Sprint(created) {
		t.Errorf("GET %v, want %v", got, created)
	}

	// A clashing identifier is 409 and stores nothing: no user, no patient,
	// no identifier.
	before := admSnapshot(t, w.env)
	w.call(t, "POST", "/api/v1/patients", w.member, map[string]any{
		"email": "clash@example.org", "nameFamily": "Clash", "nameGiven": []string{"Cy"},
		"identifiers": []any{admIdentifier("MRN-9"), admIdentifier("MRN-1")}, "organizationIds": []int64{w.org.ID}}, http.StatusConflict, "MRN-1")
	admSameSnapshot(t, "a clashing identifier", before, admSnapshot(t, w.env))
	if _, err := w.env.Service.UserByEmail(ctx, "clash@example.org"); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("the refused patient's login exists: %v", err)
	}
	// The identifier that was free is still free.
	w.call(t, "POST", "/api/v1/patients", w.member, map[string]any{
		"email": "free@example.org", "nameFamily": "Free", "nameGiven": []string{"Fi"},
		"identifiers": []any{admIdentifier("MRN-9")}, "organizationIds": []int64{w.org.ID}}, http.StatusCreated)

	// Bad input names the field and stores nothing.
	before = admSnapshot(t, w.env)
	good := func(change map[string]any) map[string]any {
		body := map[string]any{"email": "new@example.org", "nameFamily": "New", "nameGiven": []string{"Ny"}, "organizationIds": []int64{w.org.ID}}
		for k, v := range change {
			if v == nil {
				delete(body, k)
			} else {
				body[k] = v
			}
		}
		return body
	}
	for _, tc := range []struct {
		change map[string]any
		status int
		field  string
	}{
		{map[string]any{"email": "zoe@example.org"}, http.StatusConflict, "email"},
		{map[string]any{"email": "nope"}, http.StatusBadRequest, "email"},
		{map[string]any{"nameFamily": nil}, http.StatusBadRequest, "nameFamily"},
		{map[string]any{"nameGiven": []string{" "}}, http.StatusBadRequest, "nameGiven"},
		{map[string]any{"birthDate": "06/05/1990"}, http.StatusBadRequest, "birthDate"},
		{map[string]any{"birthDate": "2999-01-01"}, http.StatusBadRequest, "birthDate"},
		{map[string]any{"organizationIds": []int64{}}, http.StatusBadRequest, "organizationIds"},
		{map[string]any{"organizationIds": []int64{9999}}, http.StatusBadRequest, "organizationIds"},
		{map[string]any{"identifiers": []any{map[string]any{"system": "mrn", "value": "1"}}}, http.StatusBadRequest, "identifiers[0].system"},
		{map[string]any{"identifiers": []any{admIdentifier(" ")}}, http.StatusBadRequest, "identifiers[0].value"},
		{map[string]any{"identifiers": []any{admIdentifier("A"), admIdentifier("A")}}, http.StatusBadRequest, "identifiers[1]"},
		{map[string]any{"identifiers": "MRN"}, http.StatusBadRequest, "identifiers"},
		{map[string]any{"gender": "x"}, http.StatusBadRequest, "gender"},
	} {
		w.call(t, "POST", "/api/v1/patients", w.member, good(tc.change), tc.status, tc.field)
	}
	w.call(t, "POST", "/api/v1/patients", w.viewer, good(nil), http.StatusForbidden)
	admSameSnapshot(t, "refused patient creates", before, admSnapshot(t, w.env))
}

func TestPatientsFilters(t *testing.T) {
	w := admNewWorld(t)
	ctx := context.Background()
	other, err := w.env.Service.CreateOrganization(ctx, domain.SystemActor(), domain.NewOrganization{Name: "Other", Type: "prov"})
	if err != nil {
		t.Fatal(err)
	}
	zoe := w.patient(t, "zoe@example.org", "Ødegård", "Zoë", w.org.ID)
	zorro := w.patient(t, "zorro@example.org", "Vega", "Diego", w.org.ID, other.ID)
	ann := w.patient(t, "ann@example.org", "Zoller", "Ann", other.ID)
	if _, err := w.env.Service.UpdatePatient(ctx, domain.SystemActor(), zorro.ID, domain.PatientPatch{Identifiers: &[]domain.Identifier{{System: admMRN, Value: "Z-1"}}}); err != nil {
		t.Fatal(err)
	}
	st := w.study(t, w.org.ID, "Sleep")
	if err := w.env.Service.EnrollPatients(ctx, domain.SystemActor(), st.ID, []int64{zoe.ID}); err != nil {
		t.Fatal(err)
	}
	find := func(token, query string) []int64 {
		t.Helper()
		return admIDs(t, w.call(t, "GET", "/api/v1/patients?"+query, token, nil, http.StatusOK))
	}
	for _, tc := range []struct {
		query string
		want  []int64
	}{
		{"", []int64{zoe.ID, zorro.ID, ann.ID}},
		{fmt.Sprintf("organizationId=%d", w.org.ID), []int64{zoe.ID, zorro.ID}},
		{fmt.Sprintf("organizationId=%d", other.ID), []int64{zorro.ID, ann.ID}},
		{fmt.Sprintf("studyId=%d", st.ID), []int64{zoe.ID}},
		{"identifier=" + url.QueryEscape(admMRN+"|Z-1"), []int64{zorro.ID}},
		{"identifier=" + url.QueryEscape(admMRN+"|Z-2"), []int64{}},
		{"identifier=" + url.QueryEscape("http://other.example.org|Z-1"), []int64{}},
		// Prefixes of family or given names, any case, any accents.
		{"name=zo", []int64{zoe.ID, ann.ID}},
		{"name=ZOE", []int64{zoe.ID}},
		{"name=" + url.QueryEscape("Zoë"), []int64{zoe.ID}},
		{"name=ode", []int64{zoe.ID}},
		{"name=" + url.QueryEscape("ØDEGÅRD"), []int64{zoe.ID}},
		{"name=diego", []int64{zorro.ID}},
		{"name=oe", []int64{}},
		{"name=.%2A", []int64{}},
		// Filters combine.
		{fmt.Sprintf("name=zo&organizationId=%d", other.ID), []int64{ann.ID}},
		{fmt.Sprintf("studyId=%d&organizationId=%d", st.ID, other.ID), []int64{}},
	} {
		if got := find(w.admin, tc.query); !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
			t.Errorf("?%s: %v, want %v", tc.query, got, tc.want)
		}
	}
	// A practitioner sees the patients of their organizations only.
	if got := find(w.viewer, "name=zo"); !slices.Equal(got, []int64{zoe.ID}) {
		t.Errorf("the viewer's name=zo: %v", got)
	}
	// A patient sees themselves.
	if got := find(w.env.Token(t, zorro.UserID), ""); !slices.Equal(got, []int64{zorro.ID}) {
		t.Errorf("the patient's list: %v", got)
	}
	// Bad filters name the parameter.
	w.call(t, "GET", "/api/v1/patients?identifier=|MRN-1", w.admin, nil, http.StatusBadRequest, "identifier")
	w.call(t, "GET", "/api/v1/patients?identifier="+url.QueryEscape(admMRN+"|"), w.admin, nil, http.StatusBadRequest, "identifier")
	w.call(t, "GET", "/api/v1/patients?organizationId=x", w.admin, nil, http.StatusBadRequest, "organizationId")
	w.call(t, "GET", "/api/v1/patients?organizationId=9999", w.admin, nil, http.StatusBadRequest, "organizationId")
	w.call(t, "GET", "/api/v1/patients?studyId=9999", w.admin, nil, http.StatusBadRequest, "studyId")
	w.call(t, "GET", fmt.Sprintf("/api/v1/patients?organizationId=%d", other.ID), w.viewer, nil, http.StatusForbidden)
}

func TestPatientsUpdate(t *testing.T) {
	w := admNewWorld(t)
	ctx := context.Background()
	other, err := w.env.Service.CreateOrganization(ctx, domain.SystemActor(), domain.NewOrganization{Name: "Other", Type: "prov"})
	if err != nil {
		t.Fatal(err)
	}
	a := w.call(t, "POST", "/api/v1/patients", w.member, map[string]any{"email": "a@example.org", "nameFamily": "A", "nameGiven": []string{"Al"},
		"identifiers": []any{admIdentifier("X")}, "organizationIds": []int64{w.org.ID}}, http.StatusCreated)
	aPath := fmt.Sprintf("/api/v1/patients/%d", admID(t, a))
	findByMRN := func(value string) []int64 {
		t.Helper()
		return admIDs(t, w.call(t, "GET", "/api/v1/patients?identifier="+url.QueryEscape(admMRN+"|"+value), w.admin, nil, http.StatusOK))
	}

	// Swap X for Y: X becomes free, Y is claimed.
	swapped := w.call(t, "PATCH", aPath, w.member, map[string]any{"identifiers": []any{admIdentifier("Y")}, "nameGiven": []string{"Alan", "B"}}, http.StatusOK)
	if got := admIdentifiers(t, swapped); !slices.Equal(got, []string{admMRN + "|Y"}) || swapped["nameGiven"] != "Alan B" || fmt.Sprint(swapped["givenNames"]) != "[Alan B]" || swapped["nameFamily"] != "A" {
		t.Errorf("swapped: %v", swapped)
	}
	if got := findByMRN("X"); len(got) != 0 {
		t.Errorf("X still finds %v", got)
	}
	// The login follows the record's names.
	profile := w.call(t, "GET", "/api/v1/users/profile", w.env.Token(t, admID(t, a, "userId")), nil, http.StatusOK)
	if profile["firstName"] != "Alan" || profile["lastName"] != "A" || admObj(t, profile, "patient")["nameGiven"] == nil {
		t.Errorf("profile after the name change: %v", profile)
	}
	if got := findByMRN("Y"); !slices.Equal(got, []int64{admID(t, a)}) {
		t.Errorf("Y finds %v", got)
	}
	b := w.call(t, "POST", "/api/v1/patients", w.member, map[string]any{"email": "b@example.org", "nameFamily": "B", "nameGiven": []string{"Bo"},
		"identifiers": []any{admIdentifier("X")}, "organizationIds": []int64{w.org.ID}}, http.StatusCreated)
	w.call(t, "POST", "/api/v1/patients", w.member, map[string]any{"email": "c@example.org", "nameFamily": "C", "nameGiven": []string{"Cy"},
		"identifiers": []any{admIdentifier("Y")}, "organizationIds": []int64{w.org.ID}}, http.StatusConflict, "Y")

	// Taking B's X is 409 and changes nothing, not even the other fields.
	before := admSnapshot(t, w.env)
	w.call(t, "PATCH", aPath, w.member, map[string]any{"identifiers": []any{admIdentifier("Z"), admIdentifier("X")}, "nameFamily": "Changed"}, http.StatusConflict, "X")
	admSameSnapshot(t, "a PATCH taking an identifier", before, admSnapshot(t, w.env))
	if got := w.call(t, "GET", aPath, w.admin, nil, http.StatusOK); !slices.Equal(admIdentifiers(t, got), []string{admMRN + "|Y"}) || got["nameFamily"] != "A" {
		t.Errorf("after the refused PATCH: %v", got)
	}
	if got := findByMRN("Z"); len(got) != 0 {
		t.Errorf("Z was claimed by a refused PATCH: %v", got)
	}
	if got := findByMRN("X"); !slices.Equal(got, []int64{admID(t, b)}) {
		t.Errorf("X finds %v, want B", got)
	}
	// Keeping one and adding one.
	kept := w.call(t, "PATCH", aPath, w.member, map[string]any{"identifiers": []any{admIdentifier("Y"), admIdentifier("Z")}}, http.StatusOK)
	if got := admIdentifiers(t, kept); !slices.Equal(got, []string{admMRN + "|Y", admMRN + "|Z"}) {
		t.Errorf("kept and added: %v", got)
	}
	if got := findByMRN("Y"); !slices.Equal(got, []int64{admID(t, a)}) {
		t.Errorf("Y after adding Z: %v", got)
	}

	// Other fields.
	w.call(t, "PATCH", aPath, w.member, map[string]any{"birthDate": "not a date"}, http.StatusBadRequest, "birthDate")
	w.call(t, "PATCH", aPath, w.member, map[string]any{"email": "new@example.org"}, http.StatusBadRequest, "email")
	w.call(t, "PATCH", aPath, w.viewer, map[string]any{"nameFamily": "V"}, http.StatusForbidden)
	w.call(t, "PATCH", aPath, w.member, map[string]any{"nameFamily": "Adams"}, http.StatusOK)
	if found := admResults(t, w.call(t, "GET", "/api/v1/users?email=a%40example", w.admin, nil, http.StatusOK)); len(found) != 1 || found[0]["lastName"] != "Adams" || found[0]["firstName"] != "Alan" {
		t.Errorf("the login after a family name change: %v", found)
	}
	if got := admIDs(t, w.call(t, "GET", "/api/v1/patients?name=adam", w.admin, nil, http.StatusOK)); !slices.Equal(got, []int64{admID(t, a)}) {
		t.Errorf("name=adam after the change: %v", got)
	}
	phone := w.call(t, "PATCH", aPath, w.member, map[string]any{"phone": "555", "birthDate": "2000-01-01"}, http.StatusOK)
	if fmt.Sprint(phone["telecom"]) != "[map[system:email value:a@example.org] map[system:phone value:555]]" || phone["birthDate"] != "2000-01-01" {
		t.Errorf("phone: %v", phone)
	}

	// organizationIds: moving into an organization needs manage_data there.
	w.call(t, "PATCH", aPath, w.member, map[string]any{"organizationIds": []int64{w.org.ID, other.ID}}, http.StatusForbidden)
	w.call(t, "PATCH", aPath, w.admin, map[string]any{"organizationIds": []int64{}}, http.StatusBadRequest, "organizationIds")
	w.call(t, "PATCH", aPath, w.admin, map[string]any{"organizationIds": []int64{9999}}, http.StatusBadRequest, "organizationIds")
	moved := w.call(t, "PATCH", aPath, w.admin, map[string]any{"organizationIds": []int64{other.ID, w.org.ID, other.ID}}, http.StatusOK)
	if fmt.Sprint(moved["organizationIds"]) != fmt.Sprintf("[%d %d]", w.org.ID, other.ID) {
		t.Errorf("moved: %v", moved)
	}
	if got := admIDs(t, w.call(t, "GET", fmt.Sprintf("/api/v1/patients?organizationId=%d", other.ID), w.admin, nil, http.StatusOK)); !slices.Equal(got, []int64{admID(t, a)}) {
		t.Errorf("patients of the other organization: %v", got)
	}
	// Out of the member's organization: they can no longer see it.
	w.call(t, "PATCH", aPath, w.admin, map[string]any{"organizationIds": []int64{other.ID}}, http.StatusOK)
	w.call(t, "GET", aPath, w.member, nil, http.StatusNotFound)
	w.call(t, "PATCH", "/api/v1/patients/9999", w.admin, map[string]any{"nameFamily": "N"}, http.StatusNotFound)
}

func TestPatientsDelete(t *testing.T) {
	w := admNewWorld(t)
	ctx := context.Background()
	sys := domain.SystemActor()
	p := w.patient(t, "p@example.org", "Doe", "Jo", w.org.ID)
	keep := w.patient(t, "keep@example.org", "Keep", "Kim", w.org.ID)
	if _, err := w.env.Service.UpdatePatient(ctx, sys, p.ID, domain.PatientPatch{Identifiers: &[]domain.Identifier{{System: admMRN, Value: "D-1"}}}); err != nil {
		t.Fatal(err)
	}
	hr := w.scopeCode(t, "omh:heart-rate:2.0", "Heart rate")
	st := w.study(t, w.org.ID, "Study")
	if _, err := w.env.Service.AddScopeRequest(ctx, sys, st.ID, domain.ScopeRef{ID: hr.ID}); err != nil {
		t.Fatal(err)
	}
	yes := true
	for _, x := range []*domain.Patient{p, keep} {
		if err := w.env.Service.EnrollPatients(ctx, sys, st.ID, []int64{x.ID}); err != nil {
			t.Fatal(err)
		}
		if err := w.env.Service.AnswerConsents(ctx, sys, x.ID, []domain.StudyScopeConsents{{StudyID: st.ID, Scopes: []domain.ScopeConsent{{System: hr.System, Code: hr.Code, Consented: &yes}}}}); err != nil {
			t.Fatal(err)
		}
	}
	patientToken := w.env.Token(t, p.UserID)
	path := fmt.Sprintf("/api/v1/patients/%d", p.ID)

	// FHIR sources keep the patient.
	src, err := w.env.Service.CreateFHIRSource(ctx, sys, p.ID, 0, "Phone")
	if err != nil {
		t.Fatal(err)
	}
	w.call(t, "DELETE", path, w.admin, nil, http.StatusConflict)
	if err := w.env.Service.DeleteFHIRSource(ctx, sys, src.ID); err != nil {
		t.Fatal(err)
	}
	// Viewers and the patient themselves may not.
	w.call(t, "DELETE", path, w.viewer, nil, http.StatusForbidden)
	w.call(t, "DELETE", path, patientToken, nil, http.StatusForbidden)

	w.call(t, "DELETE", path, w.member, nil, http.StatusNoContent)
	w.call(t, "GET", path, w.admin, nil, http.StatusNotFound)
	w.call(t, "DELETE", path, w.admin, nil, http.StatusNotFound)
	if _, err := w.env.Service.UserByID(ctx, p.UserID); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("the login is left: %v", err)
	}
	w.call(t, "GET", "/api/v1/users/profile", patientToken, nil, http.StatusUnauthorized)
	enrolled := admIDs(t, w.call(t, "GET", fmt.Sprintf("/api/v1/studies/%d/patients", st.ID), w.admin, nil, http.StatusOK))
	if !slices.Equal(enrolled, []int64{keep.ID}) {
		t.Errorf("enrolled after the delete: %v", enrolled)
	}
	snap := admSnapshot(t, w.env)
	if n := len(snap["consents"]); n != 1 {
		t.Errorf("%d consents left, want the other patient's 1: %v", n, snap["consents"])
	}
	if n := len(snap["enrollments"]); n != 1 {
		t.Errorf("%d enrollments left, want 1", n)
	}
	if n := len(snap["patient_identifiers"]); n != 0 {
		t.Errorf("identifiers left: %v", snap["patient_identifiers"])
	}
	// The identifier is free again.
	w.call(t, "POST", "/api/v1/patients", w.member, map[string]any{"email": "p@example.org", "nameFamily": "Doe", "nameGiven": []string{"Jo"},
		"identifiers": []any{admIdentifier("D-1")}, "organizationIds": []int64{w.org.ID}}, http.StatusCreated)
}

func TestPatientsInvitation(t *testing.T) {
	w := admNewWorld(t)
	p := w.patient(t, "p@example.org", "Doe", "Jo", w.org.ID)
	client, _ := w.env.Client(t, oauth.ClientRegistration{Name: "Patient app", Type: domain.ClientPublic, RedirectURIs: []string{"https://app.example.test/invite"}})
	path := fmt.Sprintf("/api/v1/patients/%d/invitation", p.ID)

	out := w.call(t, "POST", path, w.member, map[string]any{"clientId": client.ID}, http.StatusCreated)
	link, err := url.Parse(fmt.Sprint(out["invitationLink"]))
	if err != nil || link.Scheme != "https" || link.Host != "app.example.test" || link.Path != "/invite" || link.Query().Get("code") == "" {
		t.Errorf("invitation link %v", out["invitationLink"])
	}
	if admID(t, out, "patientId") != p.ID || out["clientId"] != client.ID || out["expiresAt"] == nil {
		t.Errorf("invitation: %v", out)
	}
	// Each invitation is a new code.
	again := w.call(t, "POST", path, w.member, map[string]any{"clientId": client.ID}, http.StatusCreated)
	if again["invitationLink"] == out["invitationLink"] {
		t.Error("two invitations share a code")
	}

	w.call(t, "POST", path, w.member, map[string]any{"clientId": "no-such-client"}, http.StatusBadRequest, "clientId")
	w.call(t, "POST", path, w.member, map[string]any{}, http.StatusBadRequest, "clientId")
	w.call(t, "POST", path, w.viewer, map[string]any{"clientId": client.ID}, http.StatusForbidden)
	w.call(t, "POST", "/api/v1/patients/9999/invitation", w.admin, map[string]any{"clientId": client.ID}, http.StatusNotFound)
}

// A patient cannot leave an organization while enrolled in one of its
// studies: enrollment needs the study's organization.
func TestAdminPatientLeavesOrganizationOnlyWhenNotEnrolled(t *testing.T) {
	w := admNewWorld(t)
	other, err := w.env.Service.CreateOrganization(context.Background(), domain.SystemActor(), domain.NewOrganization{Name: "Clinic", Type: "prov"})
	if err != nil {
		t.Fatal(err)
	}
	p := w.patient(t, "mover@example.org", "Mover", "Mo", w.org.ID, other.ID)
	st := w.study(t, w.org.ID, "Study")
	w.call(t, "POST", fmt.Sprintf("/api/v1/studies/%d/patients", st.ID), w.admin, map[string]any{"patientIds": []int64{p.ID}}, http.StatusCreated)
	path := fmt.Sprintf("/api/v1/patients/%d", p.ID)
	before := admSnapshot(t, w.env)
	w.call(t, "PATCH", path, w.admin, map[string]any{"organizationIds": []int64{other.ID}}, http.StatusConflict)
	admSameSnapshot(t, "a refused move", before, admSnapshot(t, w.env))
	w.call(t, "DELETE", fmt.Sprintf("/api/v1/studies/%d/patients", st.ID), w.admin, map[string]any{"patientIds": []int64{p.ID}}, http.StatusNoContent)
	moved := w.call(t, "PATCH", path, w.admin, map[string]any{"organizationIds": []int64{other.ID}}, http.StatusOK)
	if fmt.Sprint(moved["organizationIds"]) != fmt.Sprintf("[%d]", other.ID) {
		t.Errorf("after unenrolling: %v", moved["organizationIds"])
	}
}
