package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"exchange/domain"
	"exchange/handlers/handlerstest"
)

// The ids of the authorization matrix that must not leak: which patients
// exist. Every request that names a patient (or a record that belongs to
// one: an observation, a FHIR source) answers a patient the caller may not
// see exactly as one that does not exist: same status, same headers, same
// body but for the id itself. Only a token or role that rules the
// interaction out altogether is refused, and then alike for both.

// hiddenProbe is one request that names something of a patient: path,
// body and header take the probed value in place of {v}; of says what the
// value is (a patient id, an identifier value, a FHIR source id, an
// observation id).
type hiddenProbe struct {
	method, path string
	body         string
	header       map[string]string
	of           string
}

// hiddenProbes are the requests, under the FHIR base unless they start
// with /api/ or /fhir-import/.
func hiddenProbes(w *scopeWorld) []hiddenProbe {
	below := "_source:below=" + handlerstest.SourceBase + "/"
	obs := func(subject string) string {
		b, _ := json.Marshal(fxObs{device: w.dataSource, code: fxHR, payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2025-03-01T08:00:00Z")))}.resource())
		return strings.Replace(string(b), `"reference":"Patient/0"`, `"reference":"`+subject+`"`, 1)
	}
	consents := func(consented string) string {
		return fmt.Sprintf(`{"studyScopeConsents": [{"studyId": %d, "scopeConsents": [{"codingSystem": %q, "codingCode": %q%s}]}]}`,
			w.study.ID, w.bp.System, w.bp.Code, consented)
	}
	p := func(method, path, body string) hiddenProbe {
		return hiddenProbe{method: method, path: path, body: body, of: "patient"}
	}
	return []hiddenProbe{
		p("GET", "/Patient/{v}", ""),
		p("GET", "/Patient/{v}/_history/1", ""),
		p("GET", "/Patient?_id={v}", ""),
		p("GET", "/Patient?patient={v}", ""),
		p("GET", "/Observation?patient={v}", ""),
		p("GET", "/Observation?patient=Patient/{v}&_summary=count", ""),
		p("GET", "/Observation/$stats?patient={v}", ""),
		p("GET", "/Observation?subject=Patient/{v}", ""),
		p("GET", "/Observation?patient={v}&patient._has:Group:member:_id="+strconv.FormatInt(w.study.ID, 10), ""),
		p("GET", "/Practitioner?patient={v}", ""),
		p("GET", "/Organization?patient={v}", ""),
		p("GET", "/Group?patient={v}", ""),
		p("GET", "/Device?patient={v}", ""),
		p("GET", "/AuditEvent?patient={v}", ""),
		p("GET", "/Condition?patient={v}&"+below, ""),
		p("POST", "/Observation", obs("Patient/{v}")),
		{method: "GET", path: "/Observation?patient.identifier=urn:test:mrn|{v}", of: "identifier"},
		{method: "GET", path: "/Patient?patient.identifier=urn:test:mrn|{v}", of: "identifier"},
		{method: "GET", path: "/api/v1/patients?identifier=urn:test:mrn|{v}", of: "identifier"},
		{method: "GET", path: "/api/v1/patients?identifier={v}", of: "identifier"},
		{method: "GET", path: "/api/v1/patients?patient_identifier_value={v}", of: "identifier"},
		{method: "GET", path: "/api/v1/patients/global_lookup?email={v}", of: "email"},
		{method: "GET", path: "/Observation/{v}", of: "observation"},
		{method: "GET", path: "/Observation/{v}/_history/1", of: "observation"},
		p("GET", "/api/v1/patients/{v}", ""),
		p("PATCH", "/api/v1/patients/{v}", `{"phone": "+1-555-0199"}`),
		p("DELETE", "/api/v1/patients/{v}", ""),
		p("POST", "/api/v1/patients/{v}/invitation", `{"clientId": "`+w.clientID+`"}`),
		p("GET", "/api/v1/patients/{v}/invitations", ""),
		p("DELETE", "/api/v1/patients/{v}/invitations/none", ""),
		p("POST", "/api/v1/patients/{v}/invitations/none/reissue", ""),
		p("GET", "/api/v1/patients/{v}/consents", ""),
		p("POST", "/api/v1/patients/{v}/consents", consents(`, "consented": true`)),
		p("PATCH", "/api/v1/patients/{v}/consents", consents(`, "consented": false`)),
		p("DELETE", "/api/v1/patients/{v}/consents", consents("")),
		p("POST", "/api/v1/fhir_sources", `{"patient": {v}, "label": "Probe"}`),
		p("POST", fmt.Sprintf("/api/v1/studies/%d/patients", w.study.ID), `{"patientIds": [{v}]}`),
		{method: "GET", path: "/api/v1/fhir_sources/{v}", of: "source"},
		{method: "DELETE", path: "/api/v1/fhir_sources/{v}", of: "source"},
		{method: "POST", path: "/Condition", body: conditionBody("probe", "problem-list-item"), header: map[string]string{domain.SourceHeader: "{v}"}, of: "source"},
		{method: "POST", path: "/fhir-import/R4/Condition", body: conditionBody("probe", "problem-list-item"), header: map[string]string{domain.SourceHeader: "{v}"}, of: "source"},
	}
}

// hiddenCaller is a caller and the patient it may not see (a name of
// scopeWorld.ids): of another organization, another patient, or out of
// the token's patient context.
type hiddenCaller struct {
	token  string // a world actor or a scoped token
	hidden string
}

var hiddenCallers = []hiddenCaller{
	{"manager", "S"}, {"member", "S"}, {"viewer", "S"}, {"outsider", "P"}, {"patient", "O"}, {"otherPatient", "P"},
	{"ctx.rs", "O"}, {"ctx.cruds", "O"}, {"pt.obs", "O"}, {"super.ctx", "O"},
}

// absent are values that name nothing, of each kind.
var absent = map[string]string{"patient": "987654321", "identifier": "absent-0", "source": "987654322", "observation": "987654323",
	"email": "absent-0@example.org"}

// TestHiddenPatientsLookAbsent sends every request that names a patient
// with a patient the caller may not see and with one that does not exist,
// and compares the answers: status, headers and body (with the value
// itself and what changes with time left out) must be the same.
func TestHiddenPatientsLookAbsent(t *testing.T) {
	t.Parallel() // its own exchange and database
	w := newScopeWorld(t)
	svc, ctx := w.env.Service, w.ctx
	// A patient of the other organization, with an observation, a FHIR
	// source and an identifier, like the world's two patients.
	orgB := must(svc.OrganizationByName(ctx, "Elsewhere", 0))
	stranger := must(svc.CreatePatient(ctx, sys, domain.NewPatient{Email: "stranger@example.org", FamilyName: "Roe", GivenNames: []string{"Sam"},
		OrganizationIDs: []int64{orgB.ID}}))
	studyB := must(svc.CreateStudy(ctx, sys, domain.NewStudy{OrganizationID: orgB.ID, Name: "Study B"}))
	if err := svc.RequestScope(ctx, sys, studyB, w.heartRate.ID); err != nil {
		t.Fatal(err)
	}
	if err := svc.EnrollPatients(ctx, sys, studyB.ID, []int64{stranger.ID}); err != nil {
		t.Fatal(err)
	}
	yes := true
	if err := svc.AnswerConsents(ctx, sys, stranger.ID, []domain.StudyScopeConsents{{StudyID: studyB.ID,
		Scopes: []domain.ScopeConsent{{System: w.heartRate.System, Code: w.heartRate.Code, Consented: &yes}}}}); err != nil {
		t.Fatal(err)
	}
	w.ids["S"] = strconv.FormatInt(stranger.ID, 10)
	w.src["S"] = must(svc.CreateFHIRSource(ctx, sys, stranger.ID, 0, "EHR of S")).ID
	resp, out := w.env.Send(t, "POST", fxBase+"/Observation", w.world.tokens["superuser"], w.observation(stranger, fxHR, fxHeartRate(fxAt("2025-01-03T08:00:00Z"))))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("the stranger's observation: %d %v", resp.StatusCode, out)
	}
	observations := map[string]string{"P": w.ids["hrP"], "O": w.ids["hrO"], "S": out["id"].(string)}
	identifiers, emails := map[string]string{}, map[string]string{}
	for name, p := range map[string]*domain.Patient{"P": w.patient, "O": w.other, "S": stranger} {
		emails[name] = must(svc.UserByID(ctx, p.UserID)).Email
	}
	for name, id := range map[string]int64{"P": w.patient.ID, "O": w.other.ID, "S": stranger.ID} {
		identifiers[name] = fmt.Sprintf("mrn-%d", id)
		must(svc.UpdatePatient(ctx, sys, id, domain.PatientPatch{Identifiers: &[]domain.Identifier{{System: "urn:test:mrn", Value: identifiers[name]}}}))
	}
	// The superuser's token finds every value: the probes name what exists.
	valueOf := func(of, name string) string {
		switch of {
		case "identifier":
			return identifiers[name]
		case "email":
			return emails[name]
		case "source":
			return strconv.FormatInt(w.src[name], 10)
		case "observation":
			return observations[name]
		}
		return w.ids[name]
	}
	token := func(name string) string {
		if tok, ok := w.tokens[name]; ok {
			return tok
		}
		return w.world.tokens[name]
	}
	cases, differ := 0, 0
	for _, probe := range hiddenProbes(w) {
		for _, c := range hiddenCallers {
			hidden, none := valueOf(probe.of, c.hidden), absent[probe.of]
			a := sendProbe(t, w, probe, token(c.token), hidden)
			b := sendProbe(t, w, probe, token(c.token), none)
			cases++
			if diff := a.differs(b, hidden, none); diff != "" {
				differ++
				t.Errorf("%s %s as %s: a hidden %s (%s) and an absent one (%s) are told apart by %s", probe.method, probe.path, c.token, probe.of, hidden, none, diff)
			}
		}
	}
	t.Logf("hidden patients: %d probes x %d callers = %d pairs, %d told apart", len(hiddenProbes(w)), len(hiddenCallers), cases, differ)
}

// probeAnswer is an answer as compared: status, headers, body, and the
// path the request was sent to (which a Bundle's self link repeats).
type probeAnswer struct {
	status int
	header http.Header
	body   string
	path   string
}

// sendProbe sends the probe with value in place of {v}.
func sendProbe(t *testing.T, w *scopeWorld, p hiddenProbe, token, value string) probeAnswer {
	t.Helper()
	path := strings.ReplaceAll(p.path, "{v}", value)
	if !strings.HasPrefix(path, "/api/") && !strings.HasPrefix(path, "/fhir-import/") {
		path = fxBase + path
	}
	header := map[string]string{"Authorization": "Bearer " + token}
	if p.body != "" && strings.HasPrefix(path, "/api/") {
		header["Content-Type"] = "application/json"
	}
	for k, v := range p.header {
		header[k] = strings.ReplaceAll(v, "{v}", value)
	}
	resp, body := fxDo(t, w.env, p.method, path, header, strings.ReplaceAll(p.body, "{v}", value))
	return probeAnswer{status: resp.StatusCode, header: resp.Header, body: string(body), path: path}
}

// volatileHeaders change from one answer to the next whatever was asked.
var volatileHeaders = []string{"Date", "Content-Length", "X-Request-Id"}

// volatileMembers change from one Bundle to the next whatever was asked.
var volatileMembers = regexp.MustCompile(`"(id|timestamp|lastUpdated)":\s*"[^"]*"`)

// differs names what tells a from b once the value each was sent with is
// left out: "" when nothing does.
func (a probeAnswer) differs(b probeAnswer, aValue, bValue string) string {
	if a.status != b.status {
		return fmt.Sprintf("the status, %d and %d", a.status, b.status)
	}
	var names []string
	for k := range a.header {
		names = append(names, k)
	}
	for k := range b.header {
		if _, ok := a.header[k]; !ok {
			names = append(names, k)
		}
	}
	for _, k := range names {
		if slices.Contains(volatileHeaders, k) {
			continue
		}
		if diff := handlerstest.Unlike(strings.Join(a.header[k], "\n"), strings.Join(b.header[k], "\n"), aValue, bValue); diff != "" {
			return "the header " + k + ": " + diff
		}
	}
	volatile := func(x probeAnswer) string {
		return strings.ReplaceAll(volatileMembers.ReplaceAllString(x.body, `"$1": "*"`), x.path, "{path}")
	}
	if diff := handlerstest.Unlike(volatile(a), volatile(b), aValue, bValue); diff != "" {
		return "the body: " + diff
	}
	return ""
}

// TestHiddenPatientsLookAbsentInTheTrail: a patient who searches their
// own data together with another patient reads, in their own audit
// trail, the same events whether that patient exists out of their sight
// or not at all (else the outcome, refused or not, would tell which ids
// exist); the hidden patient still finds the attempt in theirs, refused.
func TestHiddenPatientsLookAbsentInTheTrail(t *testing.T) {
	w := fxNewWorldWith(t, handlerstest.Options{Audit: true})
	alice, carol := w.tok["alice"], w.tok["carol"]
	w.create(t, w.tok["doc"], fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2024-03-05T10:00:00Z")))})
	// With her data on the page (code=fxHR), and without (another code).
	for _, code := range []string{fxHR, "urn:test:none|none"} {
		for _, other := range []int64{w.carol.ID, 987654321} {
			if status, _ := w.search(t, alice, fmt.Sprintf("/Observation?patient=%d,%d&code=%s", w.alice.ID, other, code)); status != http.StatusOK {
				t.Fatalf("alice's search with %d: %d", other, status)
			}
		}
	}
	if err := w.env.Audit.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	status, bundle := w.search(t, alice, fmt.Sprintf("/AuditEvent?action=E&agent=Patient/%d&_sort=date", w.alice.ID))
	if status != http.StatusOK {
		t.Fatalf("alice's trail: %d %v", status, bundle)
	}
	var seen []string
	for _, e := range fxMatches(t, bundle) {
		seen = append(seen, fmt.Sprint(auditQuery(e), " ", fxObj(fxObj(e["outcome"])["code"])["code"]))
	}
	// Each search named her, so each is in her trail, with her data on
	// the page or not (a search about a patient reads their data,
	// whatever it finds): once per search, whichever the other id was.
	hr := url.Values{"code": {fxHR}, "patient": {fmt.Sprint(w.alice.ID) + ",(redacted)"}}.Encode()
	none := url.Values{"code": {"urn:test:none|none"}, "patient": {fmt.Sprint(w.alice.ID) + ",(redacted)"}}.Encode()
	if want := []string{hr + " success", hr + " success", none + " success", none + " success"}; !slices.Equal(seen, want) {
		t.Errorf("alice's own searches in her trail: %q, want %q", seen, want)
	}
	status, bundle = w.search(t, carol, fmt.Sprintf("/AuditEvent?action=E&agent=Patient/%d", w.alice.ID))
	if matches := fxMatches(t, bundle); status != http.StatusOK || len(matches) != 2 {
		t.Fatalf("carol's trail of alice's searches naming her: %d %v", status, bundle)
	}
	for _, e := range fxMatches(t, bundle) {
		if code := fxObj(fxObj(e["outcome"])["code"])["code"]; code == "success" || !auditNames(e, w.carol.ID) || auditNames(e, w.alice.ID) {
			t.Errorf("carol reads alice's search of her as %v", e)
		}
	}
}
