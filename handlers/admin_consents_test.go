package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"testing"
	"time"

	"exchange/domain"
)

// admConsentFixture is a patient enrolled in a study of the world's
// organization that requests heart rate and step count and collects from a
// ring; a second study requests heart rate only.
type admConsentFixture struct {
	*admWorld
	patient       *domain.Patient
	study, second *domain.Study
	hr, steps     *domain.ScopeCode
	unrequested   *domain.ScopeCode
	ring          int64
	path          string
}

func admNewConsentFixture(t *testing.T) *admConsentFixture {
	t.Helper()
	w := admNewWorld(t)
	ctx := context.Background()
	sys := domain.SystemActor()
	f := &admConsentFixture{admWorld: w}
	f.hr = w.scopeCode(t, "omh:heart-rate:2.0", "Heart rate")
	f.steps = w.scopeCode(t, "omh:step-count:2.0", "Step count")
	f.unrequested = w.scopeCode(t, "omh:body-weight:2.0", "Body weight")
	ring, err := w.env.Service.CreateDataSource(ctx, sys, domain.NewDataSource{Name: "Ring", Type: domain.DataSourcePersonalDevice, SupportedScopeCodeIDs: []int64{f.hr.ID}})
	if err != nil {
		t.Fatal(err)
	}
	f.ring = ring.ID
	f.study = w.study(t, w.org.ID, "Sleep")
	f.second = w.study(t, w.org.ID, "Cardio")
	for _, c := range []*domain.ScopeCode{f.hr, f.steps} {
		if _, err := w.env.Service.AddScopeRequest(ctx, sys, f.study.ID, domain.ScopeRef{ID: c.ID}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.env.Service.AddScopeRequest(ctx, sys, f.second.ID, domain.ScopeRef{ID: f.hr.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.env.Service.AddStudyDataSource(ctx, sys, f.study.ID, f.ring); err != nil {
		t.Fatal(err)
	}
	f.patient = w.patient(t, "p@example.org", "Doe", "Jo", w.org.ID)
	if err := w.env.Service.EnrollPatients(ctx, sys, f.study.ID, []int64{f.patient.ID}); err != nil {
		t.Fatal(err)
	}
	f.path = fmt.Sprintf("/api/v1/patients/%d/consents", f.patient.ID)
	return f
}

// body is a consent write for one study; consented nil leaves it out.
func admConsentBody(studyID int64, answers ...any) map[string]any {
	var scopes []map[string]any
	for i := 0; i < len(answers); i += 2 {
		c := answers[i].(*domain.ScopeCode)
		s := map[string]any{"codingSystem": c.System, "codingCode": c.Code}
		if answers[i+1] != nil {
			s["consented"] = answers[i+1]
		}
		scopes = append(scopes, s)
	}
	return map[string]any{"studyScopeConsents": []any{map[string]any{"studyId": studyID, "scopeConsents": scopes}}}
}

// checkScopeCode checks a scope code object: exactly {id, codingSystem,
// codingCode, text}.
func admCheckScopeCode(t *testing.T, what string, got any, want *domain.ScopeCode) {
	t.Helper()
	m, ok := got.(map[string]any)
	if !ok || len(m) != 4 || m["id"] != float64(want.ID) || m["codingSystem"] != want.System || m["codingCode"] != want.Code || m["text"] != want.Text {
		t.Errorf("%s: scope code %v, want {id: %d, codingSystem: %s, codingCode: %s, text: %s}", what, got, want.ID, want.System, want.Code, want.Text)
	}
}

// admKeys returns the sorted keys of an object.
func admKeys(m map[string]any) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// admStudyHead checks the common part of a study in the consent document.
func (f *admConsentFixture) checkStudyHead(t *testing.T, what string, s map[string]any, st *domain.Study, list string) {
	t.Helper()
	if got, want := admKeys(s), []string{"dataSources", "id", "name", list, "organization"}; !slices.Equal(got, func() []string { sort.Strings(want); return want }()) {
		t.Errorf("%s: keys %v, want %v", what, got, want)
	}
	if admID(t, s) != st.ID || s["name"] != st.Name {
		t.Errorf("%s: study %v, want %d %s", what, s, st.ID, st.Name)
	}
	if org := admObj(t, s, "organization"); admID(t, org) != f.org.ID || org["name"] != f.org.Name || org["type"] != "prov" {
		t.Errorf("%s: organization %v", what, org)
	}
	sources := admList(t, s, "dataSources")
	if st.ID == f.study.ID {
		if len(sources) != 1 || admID(t, sources[0]) != f.ring || sources[0]["name"] != "Ring" || sources[0]["type"] != "personal_device" {
			t.Errorf("%s: data sources %v", what, sources)
		}
	} else if len(sources) != 0 {
		t.Errorf("%s: data sources %v, want none", what, sources)
	}
}

// admExpectedAnswer is one answered scope in the consent document.
type admExpectedAnswer struct {
	code      *domain.ScopeCode
	consented bool
}

// check reads the consent document and compares it with the expected
// state: the pending scopes and the answers of the main study (the second
// study is not enrolled unless said).
func (f *admConsentFixture) check(t *testing.T, step, token string, pending []*domain.ScopeCode, answers []admExpectedAnswer, notBefore time.Time) map[string]any {
	t.Helper()
	doc := f.call(t, "GET", f.path, token, nil, http.StatusOK)
	if got := admKeys(doc); !slices.Equal(got, []string{"consolidatedConsentedScopes", "patient", "studies", "studiesPendingConsent"}) {
		t.Errorf("%s: keys %v", step, got)
	}
	if p := admObj(t, doc, "patient"); admID(t, p) != f.patient.ID || p["nameFamily"] != "Doe" {
		t.Errorf("%s: patient %v", step, p)
	}

	var consented []*domain.ScopeCode
	for _, a := range answers {
		if a.consented {
			consented = append(consented, a.code)
		}
	}
	consolidated := admList(t, doc, "consolidatedConsentedScopes")
	if len(consolidated) != len(consented) {
		t.Errorf("%s: consolidatedConsentedScopes %v, want %d", step, consolidated, len(consented))
	} else {
		for i, c := range consented {
			admCheckScopeCode(t, step+": consolidated", consolidated[i], c)
		}
	}

	pendingStudies := admList(t, doc, "studiesPendingConsent")
	if len(pending) == 0 {
		if len(pendingStudies) != 0 {
			t.Errorf("%s: studiesPendingConsent %v, want none", step, pendingStudies)
		}
	} else if len(pendingStudies) != 1 {
		t.Errorf("%s: studiesPendingConsent %v, want the study", step, pendingStudies)
	} else {
		f.checkStudyHead(t, step+": pending study", pendingStudies[0], f.study, "pendingScopeConsents")
		scopes := admList(t, pendingStudies[0], "pendingScopeConsents")
		if len(scopes) != len(pending) {
			t.Errorf("%s: pendingScopeConsents %v, want %d", step, scopes, len(pending))
		} else {
			for i, c := range pending {
				if v, ok := scopes[i]["consented"]; !ok || v != nil || len(scopes[i]) != 2 {
					t.Errorf("%s: pending scope %v, want {code, consented: null}", step, scopes[i])
				}
				admCheckScopeCode(t, step+": pending", scopes[i]["code"], c)
			}
		}
	}

	answered := admList(t, doc, "studies")
	if len(answers) == 0 {
		if len(answered) != 0 {
			t.Errorf("%s: studies %v, want none", step, answered)
		}
		return doc
	}
	if len(answered) != 1 {
		t.Errorf("%s: studies %v, want the study", step, answered)
		return doc
	}
	f.checkStudyHead(t, step+": answered study", answered[0], f.study, "scopeConsents")
	scopes := admList(t, answered[0], "scopeConsents")
	if len(scopes) != len(answers) {
		t.Errorf("%s: scopeConsents %v, want %d", step, scopes, len(answers))
		return doc
	}
	for i, a := range answers {
		admCheckScopeCode(t, step+": answer", scopes[i]["code"], a.code)
		if scopes[i]["consented"] != a.consented || len(scopes[i]) != 3 {
			t.Errorf("%s: answer %v, want consented %v", step, scopes[i], a.consented)
		}
		s, _ := scopes[i]["consentedTime"].(string)
		at, err := time.Parse(time.RFC3339Nano, s)
		if err != nil || at.Location() != time.UTC || s[len(s)-1] != 'Z' || at.Before(notBefore.Add(-time.Second)) || at.After(f.env.Clock.Now().Add(time.Minute)) {
			t.Errorf("%s: consentedTime %q, want a UTC time after %v", step, s, notBefore)
		}
	}
	return doc
}

func TestConsentsLifecycle(t *testing.T) {
	f := admNewConsentFixture(t)
	t0 := time.Now()

	// Pending: nothing answered.
	f.check(t, "pending", f.member, []*domain.ScopeCode{f.hr, f.steps}, nil, t0)

	// Given.
	out := f.call(t, "POST", f.path, f.member, admConsentBody(f.study.ID, f.hr, true), http.StatusCreated)
	if admID(t, admObj(t, out, "patient")) != f.patient.ID || len(admList(t, out, "studies")) != 1 {
		t.Errorf("POST answers the document: %v", out)
	}
	given := f.check(t, "given", f.viewer, []*domain.ScopeCode{f.steps}, []admExpectedAnswer{{f.hr, true}}, t0)
	givenTime := admList(t, admList(t, given, "studies")[0], "scopeConsents")[0]["consentedTime"]

	// Refused, later.
	f.env.Clock.Advance(time.Hour)
	t1 := f.env.Clock.Now()
	out = f.call(t, "PATCH", f.path, f.member, admConsentBody(f.study.ID, f.hr, false), http.StatusOK)
	if len(admList(t, out, "consolidatedConsentedScopes")) != 0 {
		t.Errorf("PATCH answers the document: %v", out)
	}
	refused := f.check(t, "refused", f.admin, []*domain.ScopeCode{f.steps}, []admExpectedAnswer{{f.hr, false}}, t1)
	if refusedTime := admList(t, admList(t, refused, "studies")[0], "scopeConsents")[0]["consentedTime"]; refusedTime == givenTime {
		t.Errorf("the refusal kept the consent time %v", givenTime)
	}

	// Deleted: pending again.
	resp, body := f.env.Send(t, "DELETE", f.path, f.member, admConsentBody(f.study.ID, f.hr, nil))
	if resp.StatusCode != http.StatusNoContent || body != nil {
		t.Fatalf("DELETE: %d %v", resp.StatusCode, body)
	}
	f.check(t, "deleted", f.member, []*domain.ScopeCode{f.hr, f.steps}, nil, t0)

	// Answered again from pending; then both answered: nothing pending.
	f.call(t, "POST", f.path, f.member, admConsentBody(f.study.ID, f.steps, true, f.hr, true), http.StatusCreated)
	f.check(t, "all given", f.member, nil, []admExpectedAnswer{{f.hr, true}, {f.steps, true}}, t1)

	// Changing and withdrawing what is not answered is 404 and changes
	// nothing.
	f.call(t, "DELETE", f.path, f.member, admConsentBody(f.study.ID, f.hr, nil, f.steps, nil), http.StatusNoContent)
	before := admSnapshot(t, f.env)
	f.call(t, "PATCH", f.path, f.member, admConsentBody(f.study.ID, f.hr, false), http.StatusNotFound)
	f.call(t, "DELETE", f.path, f.member, admConsentBody(f.study.ID, f.hr, nil), http.StatusNotFound)
	admSameSnapshot(t, "changes of unanswered scopes", before, admSnapshot(t, f.env))
	f.check(t, "back to pending", f.member, []*domain.ScopeCode{f.hr, f.steps}, nil, t0)
}

func TestConsentsConflictsAndValidation(t *testing.T) {
	f := admNewConsentFixture(t)
	t0 := time.Now()
	f.call(t, "POST", f.path, f.member, admConsentBody(f.study.ID, f.hr, true), http.StatusCreated)

	// A second answer for the same scope is 409 and changes nothing, also
	// when the write mixes a new scope with the answered one, in either
	// order.
	before := admSnapshot(t, f.env)
	f.call(t, "POST", f.path, f.member, admConsentBody(f.study.ID, f.hr, false), http.StatusConflict)
	f.call(t, "POST", f.path, f.member, admConsentBody(f.study.ID, f.steps, true, f.hr, false), http.StatusConflict)
	f.call(t, "POST", f.path, f.member, admConsentBody(f.study.ID, f.hr, false, f.steps, true), http.StatusConflict)
	admSameSnapshot(t, "conflicting answers", before, admSnapshot(t, f.env))
	f.check(t, "after conflicts", f.member, []*domain.ScopeCode{f.steps}, []admExpectedAnswer{{f.hr, true}}, t0)

	// Bad writes name the field and change nothing.
	for _, tc := range []struct {
		name   string
		body   any
		status int
		field  string
	}{
		{"a scope the study did not request", admConsentBody(f.study.ID, f.unrequested, true), http.StatusBadRequest, "studyScopeConsents[0].scopeConsents[0]"},
		{"an unknown scope", map[string]any{"studyScopeConsents": []any{map[string]any{"studyId": f.study.ID, "scopeConsents": []any{
			map[string]any{"codingSystem": domain.SystemOpenMHealth, "codingCode": "omh:nothing", "consented": true}}}}}, http.StatusBadRequest, "studyScopeConsents[0].scopeConsents[0]"},
		{"no answer", admConsentBody(f.study.ID, f.steps, nil), http.StatusBadRequest, "consented"},
		{"a study the patient is not in", admConsentBody(f.second.ID, f.hr, true), http.StatusBadRequest, "studyId"},
		{"an unknown study", admConsentBody(9999, f.hr, true), http.StatusBadRequest, "studyId"},
		{"a scope listed twice", admConsentBody(f.study.ID, f.steps, true, f.steps, false), http.StatusBadRequest, "studyScopeConsents[0].scopeConsents[1]"},
		{"no studies", map[string]any{"studyScopeConsents": []any{}}, http.StatusBadRequest, "studyScopeConsents"},
		{"no scopes", map[string]any{"studyScopeConsents": []any{map[string]any{"studyId": f.study.ID, "scopeConsents": []any{}}}}, http.StatusBadRequest, "scopeConsents"},
		{"a string answer", map[string]any{"studyScopeConsents": []any{map[string]any{"studyId": f.study.ID, "scopeConsents": []any{
			map[string]any{"codingSystem": f.steps.System, "codingCode": f.steps.Code, "consented": "yes"}}}}}, http.StatusBadRequest, "consented"},
		{"an unknown field", map[string]any{"studyScopeConsents": []any{}, "extra": 1}, http.StatusBadRequest, "extra"},
		{"a viewer", admConsentBody(f.study.ID, f.steps, true), http.StatusForbidden, ""},
	} {
		token := f.member
		if tc.name == "a viewer" {
			token = f.viewer
		}
		resp, out := f.env.Send(t, "POST", f.path, token, tc.body)
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d %v, want %d", tc.name, resp.StatusCode, out, tc.status)
			continue
		}
		admCheckDetail(t, tc.name, out, tc.field)
	}
	f.call(t, "PATCH", f.path, f.member, admConsentBody(f.study.ID, f.unrequested, true), http.StatusBadRequest, "scopeConsents[0]")
	f.call(t, "PATCH", f.path, f.member, admConsentBody(f.study.ID, f.hr, nil), http.StatusBadRequest, "consented")
	f.call(t, "DELETE", f.path, f.member, admConsentBody(f.study.ID, f.unrequested, nil), http.StatusBadRequest, "scopeConsents[0]")
	// A PATCH of an answered and an unanswered scope changes neither.
	f.call(t, "PATCH", f.path, f.member, admConsentBody(f.study.ID, f.hr, false, f.steps, false), http.StatusNotFound)
	f.call(t, "GET", "/api/v1/patients/9999/consents", f.admin, nil, http.StatusNotFound)
	admSameSnapshot(t, "refused consent writes", before, admSnapshot(t, f.env))

	// Several studies in one write.
	if err := f.env.Service.EnrollPatients(context.Background(), domain.SystemActor(), f.second.ID, []int64{f.patient.ID}); err != nil {
		t.Fatal(err)
	}
	both := map[string]any{"studyScopeConsents": []any{
		admConsentBody(f.study.ID, f.steps, false)["studyScopeConsents"].([]any)[0],
		admConsentBody(f.second.ID, f.hr, true)["studyScopeConsents"].([]any)[0],
	}}
	doc := f.call(t, "POST", f.path, f.member, both, http.StatusCreated)
	if pending := admList(t, doc, "studiesPendingConsent"); len(pending) != 0 {
		t.Errorf("pending after answering everything: %v", pending)
	}
	studies := admList(t, doc, "studies")
	if len(studies) != 2 || admID(t, studies[0]) != f.study.ID || admID(t, studies[1]) != f.second.ID {
		t.Fatalf("studies: %v", studies)
	}
	// Heart rate is consented in both studies: listed once.
	consolidated := admList(t, doc, "consolidatedConsentedScopes")
	if len(consolidated) != 1 {
		t.Fatalf("consolidated: %v", consolidated)
	}
	admCheckScopeCode(t, "consolidated", consolidated[0], f.hr)
}

func TestConsentsByThePatient(t *testing.T) {
	f := admNewConsentFixture(t)
	t0 := time.Now()
	token := f.env.Token(t, f.patient.UserID)
	f.check(t, "pending", token, []*domain.ScopeCode{f.hr, f.steps}, nil, t0)
	f.call(t, "POST", f.path, token, admConsentBody(f.study.ID, f.hr, true, f.steps, false), http.StatusCreated)
	f.check(t, "answered by the patient", token, nil, []admExpectedAnswer{{f.hr, true}, {f.steps, false}}, t0)
	f.call(t, "PATCH", f.path, token, admConsentBody(f.study.ID, f.steps, true), http.StatusOK)
	f.check(t, "changed by the patient", f.member, nil, []admExpectedAnswer{{f.hr, true}, {f.steps, true}}, t0)
	f.call(t, "DELETE", f.path, token, admConsentBody(f.study.ID, f.hr, nil), http.StatusNoContent)
	f.check(t, "withdrawn by the patient", token, []*domain.ScopeCode{f.hr}, []admExpectedAnswer{{f.steps, true}}, t0)

	// Another patient may neither read nor answer: the patient is not there for them.
	other := f.patient2(t)
	f.call(t, "GET", f.path, other, nil, http.StatusNotFound)
	f.call(t, "POST", f.path, other, admConsentBody(f.study.ID, f.hr, true), http.StatusNotFound)
	f.check(t, "after another patient tried", token, []*domain.ScopeCode{f.hr}, []admExpectedAnswer{{f.steps, true}}, t0)
}

// patient2 returns the token of another patient of the organization,
// enrolled in the same study.
func (f *admConsentFixture) patient2(t *testing.T) string {
	t.Helper()
	p := f.admWorld.patient(t, "other@example.org", "Other", "Ola", f.org.ID)
	if err := f.env.Service.EnrollPatients(context.Background(), domain.SystemActor(), f.study.ID, []int64{p.ID}); err != nil {
		t.Fatal(err)
	}
	return f.env.Token(t, p.UserID)
}
