package handlers_test

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/repo/repotest"
)

// The authorization matrix of scope-limited tokens: every FHIR endpoint
// and every admin endpoint, sent with tokens whose scopes narrow what the
// user may do. A scope is a ceiling: a refused write leaves the database
// as it was, a read never returns what the scopes exclude, and nothing is
// ever allowed that the user's permission (the matrix of
// permissions_test.go) refuses.

// scopedToken is a token of a world user with scopes, and a patient
// context (ctx: the world's patient) for patient/ scopes.
type scopedToken struct {
	name, user string
	scopes     []string
	ctx        bool
}

const (
	hrScope       = "user/Observation.rs?code=https://w3id.org/openmhealth|omh:heart-rate:2.0"
	problemsScope = "user/Condition.rs?category=http://terminology.hl7.org/CodeSystem/condition-category|problem-list-item"
)

var scopedTokens = []scopedToken{
	{"pt.obs", "patient", []string{"openid", "patient/Observation.rs"}, false},
	{"ctx.rs", "member", []string{"openid", "launch/patient", "patient/*.rs"}, true},
	{"user.Patient.r", "member", []string{"user/Patient.r"}, false},
	{"user.rs", "member", []string{"user/*.rs"}, false},
	{"admin.read", "member", []string{"openid", "exchange/admin.read"}, false},
	{"hr.only", "member", []string{hrScope}, false},
	{"problems", "member", []string{problemsScope}, false},
	{"cruds", "member", []string{"user/*.cruds"}, false},
	{"ctx.cruds", "member", []string{"patient/*.cruds"}, true},
	{"super.admin.write", "superuser", []string{"exchange/admin.write"}, false},
	{"super.ctx", "superuser", []string{"patient/*.rs"}, true},
	// Admin scopes in a token with a patient context (a SMART launch)
	// reach that patient alone on the admin API (heldToContext).
	{"ctx.admin", "member", []string{"openid", "launch/patient", "exchange/admin.read", "exchange/admin.write"}, true},
}

// heldToContext are the admin rows whose answer differs for a token with
// a patient context from its user's: the rows about another patient,
// who is answered as one that does not exist (400 where the id is a
// field of the body).
var heldToContext = map[string]string{
	"DELETE patient":                        "404",
	"POST invitation, patient with a login": "404",
	"POST invitation replacing a login":     "404",
	"POST consents":                         "404",
	"PATCH consents":                        "404",
	"DELETE consents":                       "404",
	"POST enrollment":                       "400",
	"DELETE enrollment":                     "404",
}

// scopeWorld is the permission matrix's world with data in both stores:
// the patient's heart rate and blood pressure and the other patient's heart
// rate (native); a problem and an encounter diagnosis of the patient and a
// problem of the other patient (imported); a data source no study uses;
// and the audit trail of their creation.
type scopeWorld struct {
	*world
	tokens map[string]string // by scopedToken name
	ids    map[string]string // FHIR ids by name: P, O, A, B, hrP, bpP, hrO, probP, encP, probO, study, cuff, spare
	src    map[string]int64  // FHIR source by patient name
}

func newScopeWorld(t *testing.T) *scopeWorld {
	w := &scopeWorld{world: newWorldWith(t, handlerstest.Options{Audit: true}), tokens: map[string]string{}, ids: map[string]string{}, src: map[string]int64{}}
	ctx, svc := w.ctx, w.env.Service
	w.answer(w.patient, w.bp, true)
	w.enroll(w.other)
	w.answer(w.other, w.heartRate, true)
	orgB := must(svc.OrganizationByName(ctx, "Elsewhere", 0))
	spare := must(svc.CreateDataSource(ctx, sys, domain.NewDataSource{Name: "Spare", Type: domain.DataSourcePatientApp}))
	id := func(n int64) string { return strconv.FormatInt(n, 10) }
	w.ids["P"], w.ids["O"], w.ids["A"], w.ids["B"] = id(w.patient.ID), id(w.other.ID), id(w.orgA.ID), id(orgB.ID)
	w.ids["study"], w.ids["cuff"], w.ids["spare"] = id(w.study.ID), id(w.dataSource), id(spare.ID)
	w.src["P"], w.src["O"] = w.fhirSource, must(svc.CreateFHIRSource(ctx, sys, w.other.ID, 0, "EHR of O")).ID
	for name, o := range map[string]struct {
		patient *domain.Patient
		code    string
		body    map[string]any
	}{
		"hrP": {w.patient, fxHR, fxHeartRate(fxAt("2025-01-01T08:00:00Z"))},
		"bpP": {w.patient, fxBP, fxBloodPressure(fxAt("2025-01-01T08:00:00Z"))},
		"hrO": {w.other, fxHR, fxHeartRate(fxAt("2025-01-02T08:00:00Z"))},
	} {
		resp, out := w.env.Send(t, "POST", fxBase+"/Observation", w.world.tokens["superuser"], w.observation(o.patient, o.code, o.body))
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("observation %s: %d %v", name, resp.StatusCode, out)
		}
		w.ids[name] = out["id"].(string)
	}
	for name, c := range map[string]struct{ patient, category string }{
		"probP": {"P", "problem-list-item"}, "encP": {"P", "encounter-diagnosis"}, "probO": {"O", "problem-list-item"},
	} {
		w.ids[name] = w.condition(t, c.patient, c.category)
	}
	// The events of the creations, once the audit trail has written them:
	// one about the patient only, one about the other patient only.
	w.ids["auditP"] = w.auditEvent(t, "action=C&entity-type=Observation&patient="+w.ids["P"])
	w.ids["auditO"] = w.auditEvent(t, "action=C&entity-type=Observation&patient="+w.ids["O"])
	// And the event of a search that touched both: a patient's own view
	// names only them (domain AuditEvent.ownView).
	if resp, out := w.env.GetJSON(t, fxBase+"/Observation?code="+fxHR, w.world.tokens["superuser"]); resp.StatusCode != http.StatusOK {
		t.Fatalf("the superuser's search of both patients: %d %v", resp.StatusCode, out)
	}
	super := must(svc.UserByEmail(ctx, "superuser@example.org"))
	w.ids["auditPO"] = w.auditEvent(t, fmt.Sprintf("action=E&agent=Practitioner/%d", super.ID))
	for _, st := range matrixTokens() {
		if st.through != nil {
			w.tokens[st.name] = w.tokenThrough(t, st)
			continue
		}
		userID := w.patient.UserID
		if st.user != "patient" {
			userID = must(svc.UserByEmail(ctx, st.user+"@example.org")).ID
		}
		var patient int64
		if st.ctx {
			patient = w.patient.ID
		}
		token, _, err := w.env.OAuth.IssueScopedAccessToken(ctx, userID, time.Hour, st.scopes, patient)
		if err != nil {
			t.Fatalf("token %s: %v", st.name, err)
		}
		w.tokens[st.name] = token
	}
	return w
}

func (w *scopeWorld) observation(p *domain.Patient, code string, body map[string]any) map[string]any {
	return fxObs{patient: p.ID, device: w.dataSource, code: code, payload: fxDataPoint(code, body)}.resource()
}

// conditionBody is an imported Condition of a category, under an upstream id.
func conditionBody(upstream, category string) string {
	return fmt.Sprintf(`{"resourceType": "Condition", "id": %q,
		"clinicalStatus": {"coding": [{"system": "http://terminology.hl7.org/CodeSystem/condition-clinical", "code": "active"}]},
		"category": [{"coding": [{"system": "http://terminology.hl7.org/CodeSystem/condition-category", "code": %q}]}],
		"code": {"coding": [{"system": "http://snomed.info/sct", "code": "44054006"}]},
		"subject": {"reference": "Patient/upstream"}}`, upstream, category)
}

// condition imports a Condition into the patient's FHIR source as the
// superuser and returns its id.
func (w *scopeWorld) condition(t *testing.T, patient, category string) string {
	t.Helper()
	resp, out := handlerstest.SendTo(t, "POST", w.env.URL+fxBase+"/Condition", w.world.tokens["superuser"],
		conditionBody(w.name("c-"), category), map[string]string{domain.SourceHeader: fmt.Sprint(w.src[patient])})
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("condition: %d %v", resp.StatusCode, out)
	}
	return out["id"].(string)
}

// auditEvent returns the id of the first event an AuditEvent search
// finds, waiting for the audit trail, which writes off the request path,
// to hold it.
func (w *scopeWorld) auditEvent(t *testing.T, search string) string {
	t.Helper()
	query := fxBase + "/AuditEvent?" + search
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, out := w.env.GetJSON(t, query, w.world.tokens["superuser"])
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("the audit trail (%s): %d %v", search, resp.StatusCode, out)
		}
		if entry := fxArr(out["entry"]); len(entry) > 0 {
			return fxObj(fxObj(entry[0])["resource"])["id"].(string)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the audit trail never recorded an event of %s", search)
		}
	}
}

// scopeRow is one FHIR request: prepare returns the path (under the FHIR
// base, or absolute from /) and body, a header for writes to the imported
// store; want is the answer per token, other the answer of the others:
// a status, "[name ...]" for exactly those resources found, "total N" for
// a count, "entries S S" for the statuses of a batch-response, "about
// name" for AuditEvents found, each about that patient, or "own name" for
// AuditEvents read or found as that patient's own view: about them, and
// not naming the other patient (O) in an entity, the patient or the query.
type scopeRow struct {
	method  string
	prepare func(w *scopeWorld) (path string, body any, header map[string]string)
	want    map[string]string
	other   string
}

func get(path string) func(*scopeWorld) (string, any, map[string]string) {
	return func(w *scopeWorld) (string, any, map[string]string) { return w.expand(path), nil, nil }
}

// expand replaces {name} with the id of name.
func (w *scopeWorld) expand(path string) string {
	for name, id := range w.ids {
		path = strings.ReplaceAll(path, "{"+name+"}", id)
	}
	return path
}

func (w *scopeWorld) source(patient string) map[string]string {
	return map[string]string{domain.SourceHeader: fmt.Sprint(w.src[patient])}
}

// outOfContext is want with status for the token held to the world
// patient's context that may write (ctx.cruds), for a request that names
// another patient's record.
func outOfContext(want map[string]string, status string) map[string]string {
	want["ctx.cruds"] = status
	return want
}

func scopeRows() map[string]scopeRow {
	below := "_source:below=" + handlerstest.SourceBase + "/"
	denied := "403"
	writers := func(ok string, also ...string) map[string]string {
		m := map[string]string{"cruds": ok, "ctx.cruds": ok}
		for _, t := range also {
			m[t] = denied
		}
		return m
	}
	return map[string]scopeRow{
		"search Observation": {"GET", get("/Observation"), map[string]string{
			"pt.obs": "[hrP bpP]", "ctx.rs": "[hrP bpP]", "user.rs": "[hrP bpP hrO]", "hr.only": "[hrP hrO]",
			"cruds": "[hrP bpP hrO]", "ctx.cruds": "[hrP bpP]", "super.ctx": "[hrP bpP]"}, denied},
		"search another patient's Observations": {"GET", get("/Observation?patient=Patient/{O}"), map[string]string{
			"pt.obs": "[]", "ctx.rs": "[]", "user.rs": "[hrO]", "hr.only": "[hrO]", "cruds": "[hrO]", "ctx.cruds": "[]", "super.ctx": "[]"}, denied},
		"search Observations by another code": {"GET", get("/Observation?code=omh:blood-pressure:4.0"), map[string]string{
			"pt.obs": "[bpP]", "ctx.rs": "[bpP]", "user.rs": "[bpP]", "hr.only": "[]", "cruds": "[bpP]", "ctx.cruds": "[bpP]", "super.ctx": "[bpP]"}, denied},
		"search Observations by id": {"GET", get("/Observation?_id={bpP},{hrO}&_include=Observation:patient&_revinclude=Provenance:target"), map[string]string{
			"pt.obs": "[bpP]", "ctx.rs": "[bpP]", "user.rs": "[bpP hrO]", "hr.only": "[hrO]", "cruds": "[bpP hrO]", "ctx.cruds": "[bpP]", "super.ctx": "[bpP]"}, denied},
		"count Observations": {"GET", get("/Observation?_summary=count"), map[string]string{
			"pt.obs": "total 2", "ctx.rs": "total 2", "user.rs": "total 3", "hr.only": "total 2", "cruds": "total 3", "ctx.cruds": "total 2", "super.ctx": "total 2"}, denied},
		// Observation/$stats: what the same search counts, per code.
		"summarize Observations": {"GET", get("/Observation/$stats"), map[string]string{
			"pt.obs": "stats 2", "ctx.rs": "stats 2", "user.rs": "stats 3", "hr.only": "stats 2", "cruds": "stats 3", "ctx.cruds": "stats 2", "super.ctx": "stats 2"}, denied},
		"summarize another patient's Observations": {"GET", get("/Observation/$stats?patient=Patient/{O}"), map[string]string{
			"pt.obs": "stats 0", "ctx.rs": "stats 0", "user.rs": "stats 1", "hr.only": "stats 1", "cruds": "stats 1", "ctx.cruds": "stats 0", "super.ctx": "stats 0"}, denied},
		"summarize a study's Observations": {"GET", get("/Observation/$stats?patient._has:Group:member:_id={study}"), map[string]string{
			"pt.obs": "stats 2", "ctx.rs": "stats 2", "user.rs": "stats 3", "hr.only": "stats 2", "cruds": "stats 3", "ctx.cruds": "stats 2", "super.ctx": "stats 2"}, denied},
		"search a study's Observations": {"GET", get("/Observation?patient._has:Group:member:_id={study}"), map[string]string{
			"pt.obs": "[hrP bpP]", "ctx.rs": "[hrP bpP]", "user.rs": "[hrP bpP hrO]", "hr.only": "[hrP hrO]", "cruds": "[hrP bpP hrO]", "ctx.cruds": "[hrP bpP]", "super.ctx": "[hrP bpP]"}, denied},
		"read an Observation": {"GET", get("/Observation/{hrP}"), map[string]string{
			"pt.obs": "200", "ctx.rs": "200", "user.rs": "200", "hr.only": "200", "cruds": "200", "ctx.cruds": "200", "super.ctx": "200"}, denied},
		"read an Observation the constraint excludes": {"GET", get("/Observation/{bpP}"), map[string]string{
			"hr.only": "404", "pt.obs": "200", "ctx.rs": "200", "user.rs": "200", "cruds": "200", "ctx.cruds": "200", "super.ctx": "200"}, denied},
		"read another patient's Observation": {"GET", get("/Observation/{hrO}"), map[string]string{
			"user.rs": "200", "hr.only": "200", "cruds": "200", "pt.obs": "404", "ctx.rs": "404", "ctx.cruds": "404", "super.ctx": "404"}, denied},
		"vread another patient's Observation": {"GET", get("/Observation/{hrO}/_history/1"), map[string]string{
			"user.rs": "200", "hr.only": "200", "cruds": "200", "pt.obs": "404", "ctx.rs": "404", "ctx.cruds": "404", "super.ctx": "404"}, denied},
		"search Observation for some elements": {"GET", get("/Observation?_elements=status"), map[string]string{
			"pt.obs": "[hrP bpP]", "ctx.rs": "[hrP bpP]", "user.rs": "[hrP bpP hrO]", "hr.only": "[hrP hrO]",
			"cruds": "[hrP bpP hrO]", "ctx.cruds": "[hrP bpP]", "super.ctx": "[hrP bpP]"}, denied},
		"search AuditEvent":                        {"GET", get("/AuditEvent"), map[string]string{"super.ctx": "about P"}, denied},
		"search AuditEvent about another patient":  {"GET", get("/AuditEvent?patient={O}"), map[string]string{"super.ctx": "[]"}, denied},
		"read an AuditEvent about the patient":     {"GET", get("/AuditEvent/{auditP}"), map[string]string{"super.ctx": "200"}, denied},
		"read an AuditEvent about another patient": {"GET", get("/AuditEvent/{auditO}"), map[string]string{"super.ctx": "404"}, denied},
		"read an AuditEvent about both patients":   {"GET", get("/AuditEvent/{auditPO}"), map[string]string{"super.ctx": "own P"}, denied},
		"search AuditEvents of searches":           {"GET", get("/AuditEvent?action=E"), map[string]string{"super.ctx": "own P"}, denied},
		"search Patient": {"GET", get("/Patient"), map[string]string{
			"ctx.rs": "[P]", "user.rs": "[P O]", "cruds": "[P O]", "ctx.cruds": "[P]", "super.ctx": "[P]"}, denied},
		"read the patient": {"GET", get("/Patient/{P}"), map[string]string{
			"ctx.rs": "200", "user.Patient.r": "200", "user.rs": "200", "cruds": "200", "ctx.cruds": "200", "super.ctx": "200"}, denied},
		"read another patient": {"GET", get("/Patient/{O}"), map[string]string{
			"user.Patient.r": "200", "user.rs": "200", "cruds": "200", "ctx.rs": "404", "ctx.cruds": "404", "super.ctx": "404"}, denied},
		"count Practitioner": {"GET", get("/Practitioner?_summary=count"), map[string]string{ // A's three, not the outsider or the superuser
			"ctx.rs": "total 3", "user.rs": "total 3", "cruds": "total 3", "ctx.cruds": "total 3", "super.ctx": "total 3"}, denied},
		"search Organization": {"GET", get("/Organization"), map[string]string{
			"ctx.rs": "[A]", "user.rs": "[A]", "cruds": "[A]", "ctx.cruds": "[A]", "super.ctx": "[A]"}, denied},
		"read an organization out of context": {"GET", get("/Organization/{B}"), map[string]string{"super.ctx": "404"}, denied},
		"search Group": {"GET", get("/Group"), map[string]string{
			"ctx.rs": "[study]", "user.rs": "[study]", "cruds": "[study]", "ctx.cruds": "[study]", "super.ctx": "[study]"}, denied},
		"search Device": {"GET", get("/Device"), map[string]string{
			"ctx.rs": "[cuff]", "user.rs": "[cuff spare]", "cruds": "[cuff spare]", "ctx.cruds": "[cuff]", "super.ctx": "[cuff]"}, denied},
		"read a device out of context": {"GET", get("/Device/{spare}"), map[string]string{"user.rs": "200", "cruds": "200",
			"ctx.rs": "404", "ctx.cruds": "404", "super.ctx": "404"}, denied},
		"search imported Conditions": {"GET", get("/Condition?" + below), map[string]string{
			"ctx.rs": "[probP encP]", "user.rs": "[probP encP probO]", "problems": "[probP probO]", "cruds": "[probP encP probO]",
			"ctx.cruds": "[probP encP]", "super.ctx": "[probP encP]"}, denied},
		"search imported Conditions of another category": {"GET", get("/Condition?" + below + "&category=encounter-diagnosis"), map[string]string{
			"ctx.rs": "[encP]", "user.rs": "[encP]", "problems": "[]", "cruds": "[encP]", "ctx.cruds": "[encP]", "super.ctx": "[encP]"}, denied},
		"read an imported problem": {"GET", get("/Condition/{probP}"), map[string]string{
			"ctx.rs": "200", "user.rs": "200", "problems": "200", "cruds": "200", "ctx.cruds": "200", "super.ctx": "200"}, denied},
		"read an imported Condition the constraint excludes": {"GET", get("/Condition/{encP}"), map[string]string{
			"ctx.rs": "200", "user.rs": "200", "problems": "404", "cruds": "200", "ctx.cruds": "200", "super.ctx": "200"}, denied},
		"read another patient's imported Condition": {"GET", get("/Condition/{probO}"), map[string]string{
			"ctx.rs": "404", "user.rs": "200", "problems": "200", "cruds": "200", "ctx.cruds": "404", "super.ctx": "404"}, denied},

		"create an Observation": {"POST", func(w *scopeWorld) (string, any, map[string]string) {
			return "/Observation", w.observation(w.patient, fxHR, fxHeartRate(fxAt("2025-02-01T08:00:00Z"))), nil
		}, writers("201"), denied},
		"create another patient's Observation": {"POST", func(w *scopeWorld) (string, any, map[string]string) {
			return "/Observation", w.observation(w.other, fxHR, fxHeartRate(fxAt("2025-02-01T08:00:00Z"))), nil
		}, writers("201", "ctx.cruds"), denied},
		"create an imported Condition": {"POST", func(w *scopeWorld) (string, any, map[string]string) {
			return "/Condition", conditionBody(w.name("new-"), "problem-list-item"), w.source("P")
		}, writers("201"), denied},
		"create another patient's imported Condition": {"POST", func(w *scopeWorld) (string, any, map[string]string) {
			return "/Condition", conditionBody(w.name("new-"), "problem-list-item"), w.source("O")
		}, outOfContext(writers("201"), "400"), denied}, // a source out of the context: as an unknown one
		"update an imported Condition": {"PUT", func(w *scopeWorld) (string, any, map[string]string) {
			return "/Condition/" + w.ids["probP"], strings.Replace(conditionBody("x", "problem-list-item"), `"id": "x"`, `"id": "`+w.ids["probP"]+`"`, 1), nil
		}, writers("200"), denied},
		"update another patient's imported Condition": {"PUT", func(w *scopeWorld) (string, any, map[string]string) {
			return "/Condition/" + w.ids["probO"], strings.Replace(conditionBody("x", "problem-list-item"), `"id": "x"`, `"id": "`+w.ids["probO"]+`"`, 1), nil
		}, writers("200", "ctx.cruds"), denied},
		"patch an imported Condition": {"PATCH", func(w *scopeWorld) (string, any, map[string]string) {
			return "/Condition/" + w.ids["encP"], `{"onsetDateTime": "2020-01-01"}`, map[string]string{"Content-Type": "application/merge-patch+json"}
		}, writers("200"), denied},
		"delete an imported Condition": {"DELETE", func(w *scopeWorld) (string, any, map[string]string) {
			return "/Condition/" + w.condition(w.t, "P", "problem-list-item"), nil, nil
		}, writers("204"), denied},
		"delete another patient's imported Condition": {"DELETE", func(w *scopeWorld) (string, any, map[string]string) {
			return "/Condition/" + w.condition(w.t, "O", "problem-list-item"), nil, nil
		}, writers("204", "ctx.cruds"), denied},
		"batch of both stores": {"POST", func(w *scopeWorld) (string, any, map[string]string) {
			return "/", map[string]any{"resourceType": "Bundle", "type": "batch", "entry": []any{
				map[string]any{"request": map[string]any{"method": "POST", "url": "Observation"}, "resource": w.observation(w.patient, fxHR, fxHeartRate(fxAt("2025-02-01T08:00:00Z")))},
				map[string]any{"request": map[string]any{"method": "POST", "url": "Condition"}, "resource": rawJSON(conditionBody(w.name("b-"), "problem-list-item"))},
			}}, w.source("P")
		}, map[string]string{"cruds": "entries 201 201", "ctx.cruds": "entries 201 201"}, "entries 403 403"},
		"R4 import": {"POST", func(w *scopeWorld) (string, any, map[string]string) {
			return "/fhir-import/R4/Condition", conditionBody(w.name("r4-"), "problem-list-item"), w.source("P")
		}, map[string]string{"cruds": "entries 201", "ctx.cruds": "entries 201"}, "entries 403"},
	}
}

// TestScopeMatrix sends every FHIR row and every admin endpoint of the
// permission matrix with each scope-limited token: 0 leaks. Under -short
// each row goes with a fifth of the tokens, every token with a fifth of
// the rows (shortPair); the permission matrix's with a third.
func TestScopeMatrix(t *testing.T) {
	t.Parallel() // its own exchange and database
	w := newScopeWorld(t)
	rows := scopeRows()
	names := make([]string, 0, len(rows))
	for name := range rows {
		names = append(names, name)
	}
	// Reads first, so that the writes' resources do not join the results.
	slices.SortFunc(names, func(a, b string) int {
		if ra, rb := rows[a].method == "GET", rows[b].method == "GET"; ra != rb {
			if ra {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	cases := 0
	for r, name := range names {
		row := rows[name]
		for k, st := range matrixTokens() {
			if !shortPair(r, k, scopeMatrixShare) {
				continue
			}
			want, ok := row.want[cmp.Or(st.like, st.name)]
			if !ok {
				want = row.other
			}
			want = cmp.Or(st.every, want)
			cases++
			w.checkFHIR(t, name, row, st.name, want)
		}
	}
	// The admin API: allowed only with the exchange/admin scope of the
	// method, and then exactly as the permission matrix says.
	admin := matrixRows(w.world)
	for r, name := range slices.Sorted(maps.Keys(admin)) {
		row := admin[name]
		for k, st := range matrixTokens() {
			if !shortPair(r, k, scopeMatrixShare) {
				continue
			}
			want := "403"
			read := row.method == "GET"
			adminRead := slices.Contains(st.scopes, domain.ScopeAdminRead) || slices.Contains(st.scopes, domain.ScopeMCP)
			if (read && adminRead) || (!read && slices.Contains(st.scopes, domain.ScopeAdminWrite)) {
				want = strings.Fields(row.want)[slices.Index(matrixActors, st.user)]
				if held, ok := heldToContext[name]; ok && st.ctx {
					want = held
				}
			}
			want = cmp.Or(st.every, want)
			path, body := row.prepare(w.world, st.user)
			var before map[string][]string
			if !read {
				before = repotest.Snapshot(t, w.env.DB)
			}
			resp, out := w.env.Send(t, row.method, path, w.tokens[st.name], body)
			cases++
			if got := strconv.Itoa(resp.StatusCode); got != want {
				t.Errorf("admin %s with %s: %s %s = %s, want %s (%v)", name, st.name, row.method, path, got, want, out)
				continue
			}
			if resp.StatusCode >= 400 {
				if out["detail"] == nil {
					t.Errorf("admin %s with %s: %d without a detail: %v", name, st.name, resp.StatusCode, out)
				}
				if !read && !reflect.DeepEqual(before, repotest.Snapshot(t, w.env.DB)) {
					t.Errorf("admin %s with %s: the refused %s changed the database", name, st.name, row.method)
				}
			}
		}
	}
	t.Logf("scope matrix: %d FHIR rows and %d admin endpoints x %d tokens: %d cases", len(rows), len(admin), len(matrixTokens()), cases)
}

// shortPair reports whether a matrix sends row r with token or actor k:
// all pairs, or under -short one in every (r+k) modulo every, so that
// each row and each token is still sent while there are at least every
// of each.
func shortPair(r, k, every int) bool { return !testing.Short() || (r+k)%every == 0 }

// scopeMatrixShare is the share of the scope matrix -short sends: one
// pair in five (17 tokens, 117 rows).
const scopeMatrixShare = 5

// checkFHIR sends one FHIR row with one token and checks the answer.
func (w *scopeWorld) checkFHIR(t *testing.T, name string, row scopeRow, token, want string) {
	t.Helper()
	path, body, header := row.prepare(w)
	if !strings.HasPrefix(path, "/fhir-import/") {
		path = fxBase + path
	}
	var before map[string][]string
	if row.method != "GET" {
		before = repotest.Snapshot(t, w.env.DB)
	}
	resp, out := handlerstest.SendTo(t, row.method, w.env.URL+path, w.tokens[token], body, header)
	fail := func(format string, args ...any) {
		t.Errorf("%s with %s: %s %s: %s", name, token, row.method, path, fmt.Sprintf(format, args...))
	}
	kind, arg, _ := strings.Cut(want, " ")
	switch {
	case kind == "stats":
		if resp.StatusCode != http.StatusOK {
			fail("%d, want 200 (%v)", resp.StatusCode, out)
			return
		}
		total := 0.0
		for _, p := range fxArr(out["parameter"]) {
			for _, part := range fxArr(fxObj(p)["part"]) {
				if fxObj(part)["name"] == "count" {
					n, _ := strconv.ParseFloat(fxObj(part)["valueInteger64"].(string), 64)
					total += n
				}
			}
		}
		if got := fmt.Sprint(total); got != arg {
			fail("$stats counts %s, want %s (%v)", got, arg, out)
		}
	case strings.HasPrefix(want, "["), kind == "total":
		if resp.StatusCode != http.StatusOK {
			fail("%d, want 200 (%v)", resp.StatusCode, out)
			return
		}
		if kind == "total" {
			if got := fmt.Sprint(out["total"]); got != arg {
				fail("total %s, want %s", got, arg)
			}
			return
		}
		var found []string
		for _, e := range fxArr(out["entry"]) {
			if fxObj(fxObj(e)["search"])["mode"] == "match" {
				r := fxObj(fxObj(e)["resource"])
				found = append(found, w.nameOf(r["resourceType"].(string), r["id"].(string)))
			}
		}
		wanted := strings.Fields(strings.Trim(want, "[]"))
		slices.Sort(found)
		slices.Sort(wanted)
		if !slices.Equal(found, wanted) {
			fail("found %v, want %v", found, wanted)
		}
	case kind == "about":
		matches := 0
		for _, e := range fxArr(out["entry"]) {
			if fxObj(fxObj(e)["search"])["mode"] != "match" {
				continue
			}
			matches++
			if r := fxObj(fxObj(e)["resource"]); !slices.Contains(auditPatients(r), "Patient/"+w.ids[arg]) {
				fail("AuditEvent/%v is not about %s: %v", r["id"], arg, r)
			}
		}
		if resp.StatusCode != http.StatusOK || matches == 0 {
			fail("%d with %d events, want 200 with events about %s (%v)", resp.StatusCode, matches, arg, out)
		}
	case kind == "own":
		events := []map[string]any{out}
		if out["resourceType"] == "Bundle" {
			events = nil
			for _, e := range fxArr(out["entry"]) {
				events = append(events, fxObj(fxObj(e)["resource"]))
			}
		}
		self, _ := strconv.ParseInt(w.ids[arg], 10, 64)
		other, _ := strconv.ParseInt(w.ids["O"], 10, 64)
		if resp.StatusCode != http.StatusOK || len(events) == 0 {
			fail("%d with %d events, want 200 with events as %s's own (%v)", resp.StatusCode, len(events), arg, out)
		}
		for _, e := range events {
			if !auditNames(e, self) || auditNames(e, other) {
				fail("AuditEvent/%v is not %s's own view: %v", e["id"], arg, e)
			}
		}
	case kind == "entries":
		var got []string
		for _, e := range fxArr(out["entry"]) {
			got = append(got, strings.Fields(fmt.Sprint(fxObj(fxObj(e)["response"])["status"]))[0])
		}
		if resp.StatusCode != http.StatusOK || strings.Join(got, " ") != arg {
			fail("%d entries %v, want %s (%v)", resp.StatusCode, got, arg, out)
		}
		if !strings.Contains(arg, "201") && !reflect.DeepEqual(before, repotest.Snapshot(t, w.env.DB)) {
			fail("the refused entries changed the database")
		}
	default:
		if got := strconv.Itoa(resp.StatusCode); got != want {
			fail("%s, want %s (%v)", got, want, out)
			return
		}
		if resp.StatusCode < 400 {
			return
		}
		if out["resourceType"] != "OperationOutcome" {
			fail("%d without an OperationOutcome: %v", resp.StatusCode, out)
		}
		if row.method != "GET" && !reflect.DeepEqual(before, repotest.Snapshot(t, w.env.DB)) {
			fail("the refused %s changed the database", row.method)
		}
	}
}

// typeOf is the resource type of each name of scopeWorld.ids.
var typeOf = map[string]string{"P": "Patient", "O": "Patient", "A": "Organization", "B": "Organization", "study": "Group",
	"cuff": "Device", "spare": "Device", "hrP": "Observation", "bpP": "Observation", "hrO": "Observation",
	"probP": "Condition", "encP": "Condition", "probO": "Condition", "auditP": "AuditEvent", "auditO": "AuditEvent", "auditPO": "AuditEvent"}

// nameOf names a resource of the world, or returns Type/id.
func (w *scopeWorld) nameOf(resourceType, id string) string {
	for name, v := range w.ids {
		if v == id && typeOf[name] == resourceType {
			return name
		}
	}
	return resourceType + "/" + id
}

// rawJSON embeds a JSON text in a request body.
type rawJSON string

func (r rawJSON) MarshalJSON() ([]byte, error) { return []byte(r), nil }

// TestScopeRefusalsNameTheScope: a FHIR refusal is an OperationOutcome
// (forbidden) naming the scope missing; an admin one a detail naming it.
func TestScopeRefusalsNameTheScope(t *testing.T) {
	w := newScopeWorld(t)
	resp, out := w.env.GetJSON(t, fxBase+"/Patient", w.tokens["pt.obs"])
	if resp.StatusCode != http.StatusForbidden || fxIssueCode(out) != "forbidden" || !strings.Contains(fxOutcomeText(out), "patient/Patient.s or user/Patient.s") {
		t.Errorf("FHIR refusal: %d %v", resp.StatusCode, out)
	}
	resp, out = w.env.Send(t, "POST", fxBase+"/Observation", w.tokens["ctx.rs"], w.observation(w.patient, fxHR, fxHeartRate(fxAt("2025-02-01T08:00:00Z"))))
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(fxOutcomeText(out), "patient/Observation.c or user/Observation.c") {
		t.Errorf("FHIR write refusal: %d %v", resp.StatusCode, out)
	}
	resp, out = w.env.Send(t, "POST", "/api/v1/studies", w.tokens["admin.read"], map[string]any{"organizationId": w.orgA.ID, "name": "S"})
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(fmt.Sprint(out["detail"]), "exchange/admin.write") {
		t.Errorf("admin refusal: %d %v", resp.StatusCode, out)
	}
}

// TestAdminScopesHeldToPatientContext: exchange/admin.read and
// exchange/admin.write in a token with a patient context (a SMART launch)
// reach that patient alone on the admin API, as its patient/ scopes would
// on FHIR: another patient of the same organization answers as one that
// does not exist, and lists hold the context patient only.
func TestAdminScopesHeldToPatientContext(t *testing.T) {
	w := newWorld(t)
	w.enroll(w.other)
	member := must(w.env.Service.UserByEmail(w.ctx, "member@example.org"))
	token := func(scopes ...string) string {
		tok, _, err := w.env.OAuth.IssueScopedAccessToken(w.ctx, member.ID, time.Hour, append([]string{"openid", "launch/patient"}, scopes...), w.patient.ID)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	read, write := token(domain.ScopeAdminRead), token(domain.ScopeAdminRead, domain.ScopeAdminWrite)
	P, O := w.patient.ID, w.other.ID
	for _, c := range []struct {
		method, path, token string
		body                any
		want                int
	}{
		{"GET", fmt.Sprintf("/api/v1/patients/%d", P), read, nil, http.StatusOK},
		{"GET", fmt.Sprintf("/api/v1/patients/%d", O), read, nil, http.StatusNotFound},
		{"GET", fmt.Sprintf("/api/v1/patients/%d/consents", O), read, nil, http.StatusNotFound},
		{"GET", fmt.Sprintf("/api/v1/patients/%d/invitations", O), read, nil, http.StatusNotFound},
		{"PATCH", fmt.Sprintf("/api/v1/patients/%d", O), write, map[string]any{"phone": "+1-555-0199"}, http.StatusNotFound},
		{"POST", fmt.Sprintf("/api/v1/patients/%d/invitation", O), write, map[string]any{"clientId": w.clientID}, http.StatusNotFound},
		{"PATCH", fmt.Sprintf("/api/v1/patients/%d", P), write, map[string]any{"phone": "+1-555-0198"}, http.StatusOK},
	} {
		if resp, out := w.env.Send(t, c.method, c.path, c.token, c.body); resp.StatusCode != c.want {
			t.Errorf("%s %s: %d %v, want %d", c.method, c.path, resp.StatusCode, out, c.want)
		}
	}
	for _, path := range []string{"/api/v1/patients", fmt.Sprintf("/api/v1/patients?organizationId=%d", w.orgA.ID), fmt.Sprintf("/api/v1/studies/%d/patients", w.study.ID)} {
		resp, out := w.env.GetJSON(t, path, read)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, out)
		}
		for _, r := range out["results"].([]any) {
			if id := r.(map[string]any)["id"]; id != float64(P) {
				t.Errorf("GET %s lists patient %v beside the context patient %d", path, id, P)
			}
		}
	}
}
