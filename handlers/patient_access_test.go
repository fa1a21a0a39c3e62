package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
	"exchange/fhirdefs/fhirdefstest"
	"exchange/handlers/handlerstest"
	"exchange/repo/repotest"
	"exchange/smartclient/ehrtest"
	"exchange/telemetry"
)

// Patient access against the in-process test EHR serving the Synthea
// sample: a patient connects their EHR (SMART standalone launch, the
// exchange the client), and the exchange pulls their record into the
// imported store, through the R4 import.

// paWorld is an exchange with patient access, the test EHR registered as
// one brand, and a patient signed in to the console in a browser.
type paWorld struct {
	env     *handlerstest.Env
	ehr     *ehrtest.EHR
	super   string // a superuser's token
	brand   int64
	patient *domain.Patient
	email   string
	token   string // the patient's
	browser *handlerstest.Browser
	// ehrPatient is the EHR's patient the next connection signs in as.
	ehrPatient string
}

func newPAWorld(t *testing.T, limits domain.PullLimits) *paWorld {
	t.Helper()
	return newPAWorldWith(t, ehrtest.Start(t, fhirdefstest.SyntheaDir()), handlerstest.Options{PullLimits: limits})
}

// newPAWorldWith is newPAWorld on a test EHR and options of its own.
func newPAWorldWith(t *testing.T, ehr *ehrtest.EHR, o handlerstest.Options) *paWorld {
	t.Helper()
	o.EHR = handlerstest.FastEHRClient()
	env := handlerstest.StartWith(t, o)
	ehr.RedirectURI = env.URL + "/console/records/callback"
	w := &paWorld{env: env, ehr: ehr, super: env.Token(t, env.Practitioner(t, "super@example.org", true).ID)}
	resp, out := env.Send(t, "POST", "/api/v1/patient-access/brands?vendor=testvendor", w.super, brandsBundle(ehr.Base, "Test Health", "Test Health - Main Campus"))
	if resp.StatusCode != http.StatusOK || out["brands"] != 1.0 {
		t.Fatalf("brand import: %d %v", resp.StatusCode, out)
	}
	resp, out = env.Send(t, "GET", "/api/v1/patient-access/brands?q=test", w.super, nil)
	results := fxArr(out["results"])
	if resp.StatusCode != http.StatusOK || len(results) != 1 {
		t.Fatalf("brand search: %d %v", resp.StatusCode, out)
	}
	w.brand = int64(fxObj(results[0])["brand_id"].(float64))
	resp, out = env.Send(t, "PUT", "/api/v1/patient-access/clients", w.super, map[string]any{"vendor": "testvendor", "clientId": ehr.ClientID})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("client registration: %d %v", resp.StatusCode, out)
	}
	w.email = "pat@example.org"
	w.patient = env.Patient(t, w.email)
	w.token = env.Token(t, w.patient.UserID)
	w.browser = signedIn(t, env, w.email)
	w.ehrPatient = ehr.Patients()[0]
	return w
}

// signedIn is a browser signed in to the console as a user.
func signedIn(t *testing.T, env *handlerstest.Env, email string) *handlerstest.Browser {
	t.Helper()
	b := handlerstest.NewBrowser(t, nil)
	_, page := b.Do("GET", env.URL+"/console/records/", nil)
	if resp, page := b.Login(page, email, handlerstest.Password); resp.StatusCode != http.StatusOK || !strings.Contains(page, "connected records") {
		t.Fatalf("sign-in: %d %s", resp.StatusCode, page)
	}
	return b
}

// brandsBundle is a User-access Brands Bundle of one brand with an
// endpoint and one facility, its references in three forms: a urn:uuid
// fullUrl (the facility's partOf), Endpoint/id, a bare id of another
// endpoint (inactive, so not the one taken).
func brandsBundle(base, brand, facility string) string {
	return `{"resourceType": "Bundle", "type": "collection", "entry": [
		{"fullUrl": "urn:uuid:5d3bd1ec-7a7c-4d7e-9f7a-3a9a4dd1c001", "resource": {"resourceType": "Organization", "id": "brand-1", "name": "` + brand + `",
			"endpoint": [{"reference": "old-endpoint"}, {"reference": "Endpoint/ep-1"}]}},
		{"fullUrl": "urn:uuid:5d3bd1ec-7a7c-4d7e-9f7a-3a9a4dd1c002", "resource": {"resourceType": "Endpoint", "id": "ep-1", "status": "active",
			"connectionType": {"system": "http://terminology.hl7.org/CodeSystem/endpoint-connection-type", "code": "hl7-fhir-rest"},
			"address": "` + base + `"}},
		{"resource": {"resourceType": "Endpoint", "id": "old-endpoint", "status": "off", "connectionType": {"code": "hl7-fhir-rest"},
			"address": "https://retired.example.org/fhir"}},
		{"resource": {"resourceType": "Organization", "id": "site-1", "name": "` + facility + `",
			"partOf": {"reference": "urn:uuid:5d3bd1ec-7a7c-4d7e-9f7a-3a9a4dd1c001"},
			"address": [{"line": ["1 Main St"], "city": "Springfield", "state": "IL", "postalCode": "62701"}]}}]}`
}

// connect makes the patient's connection as the API and a browser do: the
// API begins it, the browser goes to the EHR (which signs the patient in)
// and back to the console's callback. It returns the page the browser
// ends on.
func (w *paWorld) connect(t *testing.T, keepUpdated bool) (*http.Response, string) {
	t.Helper()
	w.ehr.SignIn(w.ehrPatient)
	resp, out := w.env.Send(t, "POST", "/api/v1/patient-access/connections", w.token, map[string]any{"brand": w.brand, "keepUpdated": keepUpdated})
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("connect: %d %v", resp.StatusCode, out)
	}
	return w.browser.Do("GET", out["authorizeUrl"].(string), nil)
}

// runs returns the patient's pulls, newest first, once none is running.
func (w *paWorld) runs(t *testing.T) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		resp, out := w.env.Send(t, "GET", fmt.Sprintf("/api/v1/patients/%d/imports?pageSize=100", w.patient.ID), w.token, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("imports: %d %v", resp.StatusCode, out)
		}
		var runs []map[string]any
		running := false
		for _, r := range fxArr(out["results"]) {
			runs = append(runs, fxObj(r))
			running = running || fxObj(r)["outcome"] == "running"
		}
		if !running {
			return runs
		}
		if time.Now().After(deadline) {
			t.Fatalf("a pull is still running: %v", runs)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// runType is the result of a type in a run.
func runType(run map[string]any, typ string) map[string]any {
	for _, x := range fxArr(run["types"]) {
		if fxObj(x)["type"] == typ {
			return fxObj(x)
		}
	}
	return nil
}

func count(x map[string]any, field string) int {
	n, _ := x[field].(float64)
	return int(n)
}

// connection returns the patient's one connection.
func (w *paWorld) connection(t *testing.T) map[string]any {
	t.Helper()
	resp, out := w.env.Send(t, "GET", fmt.Sprintf("/api/v1/patients/%d/connections", w.patient.ID), w.token, nil)
	list := fxArr(out["results"])
	if resp.StatusCode != http.StatusOK || len(list) != 1 {
		t.Fatalf("connections: %d %v", resp.StatusCode, out)
	}
	return fxObj(list[0])
}

// TestPatientAccessPullsTheRecord: a patient connects their EHR and the
// exchange pulls their record: the authorize request as SMART asks (PKCE
// S256, a state of 256 bits, aud, v1 scopes with offline access), the
// EHR's patient id made the patient's identifier, every type of the
// patient stored whole, in one FHIR source, and walkable (references
// resolved). A second pull is incremental and stores nothing; a resource
// changed at the EHR is counted, and left as stored. Tokens are sealed in
// the database and never in the logs.
func TestPatientAccessPullsTheRecord(t *testing.T) {
	var logs handlerstest.LogBuffer
	log, err := telemetry.ParseLogConfig("json", "debug")
	if err != nil {
		t.Fatal(err)
	}
	ehr := ehrtest.Start(t, fhirdefstest.SyntheaDir())
	w := newPAWorldWith(t, ehr, handlerstest.Options{Logger: log.NewLogger(&logs)})
	resp, page := w.connect(t, true)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "Connected: your record is being copied") {
		t.Fatalf("callback: %d %s", resp.StatusCode, page)
	}
	auth := ehr.Authorize()
	scopes := strings.Fields(auth.Get("scope"))
	for _, want := range []string{"openid", "fhirUser", "launch/patient", "offline_access", "patient/Patient.read", "patient/Condition.read", "patient/Observation.read"} {
		if !slicesContains(scopes, want) {
			t.Errorf("scope %q not asked: %v", want, scopes)
		}
	}
	if auth.Get("aud") != ehr.Base || auth.Get("code_challenge_method") != "S256" || len(auth.Get("state")) < 43 || auth.Get("redirect_uri") != w.env.URL+"/console/records/callback" {
		t.Errorf("authorize request %v", auth)
	}
	runs := w.runs(t)
	if len(runs) != 1 || runs[0]["outcome"] != "completed" || runs[0]["trigger"] != "connect" {
		t.Fatalf("runs %v", runs)
	}
	run := runs[0]
	for _, typ := range []string{"Condition", "Encounter", "Procedure", "MedicationRequest", "Immunization", "DocumentReference", "Observation"} {
		x := runType(run, typ)
		want := ehr.Count(typ, w.ehrPatient)
		if count(x, "fetched") != want || count(x, "stored") != want || count(x, "refused") != 0 {
			t.Errorf("%s: %v, the EHR holds %d", typ, x, want)
		}
	}
	if x := runType(run, "Patient"); count(x, "stored") != 1 {
		t.Errorf("Patient: %v", x)
	}
	if x := runType(run, "Encounter"); fxObj(x["dropped"])["Encounter.reasonCode"] == nil {
		t.Errorf("what the maps drop of Encounters is not in the run: %v", x)
	}
	// The identifier, the source, and the record walkable by the EHR's ids.
	p := fxMust(w.env.Service.PatientByID(context.Background(), domain.SystemActor(), w.patient.ID))
	if !slicesContains(p.Identifiers, domain.Identifier{System: ehr.Base, Value: w.ehrPatient}) {
		t.Errorf("identifiers %v", p.Identifiers)
	}
	conn := w.connection(t)
	source := domain.SourceURI(handlerstest.SourceBase, int64(conn["fhirSource"].(float64)))
	if conn["status"] != "connected" || conn["keepUpdated"] != true || conn["fhirBaseUrl"] != ehr.Base || conn["ehrPatientId"] != w.ehrPatient {
		t.Errorf("connection %v", conn)
	}
	_, body := w.env.Send(t, "GET", "/FHIR/R5/Encounter?_summary=count&_source="+url.QueryEscape(source)+"&patient=Patient/"+w.ehrPatient, w.token, nil)
	if body["total"] != float64(ehr.Count("Encounter", w.ehrPatient)) {
		t.Errorf("the patient's encounters by the EHR's reference: %v", body)
	}
	_, body = w.env.Send(t, "GET", "/FHIR/R5/Observation?_source="+url.QueryEscape(source)+"&category=vital-signs", w.token, nil)
	if len(fxMatches(t, body)) != 2 {
		t.Errorf("vital signs: %v", body)
	}

	// Pulled again: what changed since (incremental), here nothing.
	resp, out := w.env.Send(t, "POST", fmt.Sprintf("/api/v1/patient-access/connections/%v/sync", conn["id"]), w.token, nil)
	if resp.StatusCode != http.StatusAccepted || out["outcome"] != "running" {
		t.Fatalf("sync: %d %v", resp.StatusCode, out)
	}
	runs = w.runs(t)
	// The Patient is read each time (a duplicate); nothing else changed.
	if t0 := runs[0]; t0["outcome"] != "completed" || t0["since"] == nil || totals(t0, "stored") != 0 || totals(t0, "fetched") != 1 {
		t.Errorf("the incremental pull %v", t0)
	}
	if rec := ehr.Recorded(); len(rec.LastUpdatedGT) == 0 {
		t.Errorf("no _lastUpdated search: %+v", rec)
	}
	// A Condition changed at the EHR: counted changed, not stored again.
	var conditionID string
	for _, c := range pulledIDs(t, w, source, "Condition") {
		conditionID = c
		break
	}
	if !ehr.Touch("Condition", conditionID, func(r map[string]any) { r["recordedDate"] = "2024-09-01" }) {
		t.Fatalf("no Condition %s at the EHR", conditionID)
	}
	w.env.Send(t, "POST", fmt.Sprintf("/api/v1/patient-access/connections/%v/sync", conn["id"]), w.token, nil)
	runs = w.runs(t)
	if x := runType(runs[0], "Condition"); count(x, "fetched") != 1 || count(x, "changed") != 1 || count(x, "stored") != 0 {
		t.Errorf("a changed Condition: %v", x)
	}
	// What the patient's console shows.
	_, page = w.browser.Do("GET", w.env.URL+"/console/records/", nil)
	if !strings.Contains(page, "Test Health") || !strings.Contains(page, fmt.Sprintf("<td>%d</td>", totals(run, "stored"))) || !strings.Contains(page, "completed") {
		t.Errorf("records page: %s", page)
	}
	// Sealed at rest, never logged.
	conns := repotest.Collection(t, w.env.DB, "ehr_connections")
	var doc bson.M
	if err := conns.FindOne(context.Background(), bson.M{}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	dump := fmt.Sprint(doc)
	for _, secret := range ehr.Issued() {
		if strings.Contains(dump, secret) || strings.Contains(logs.String(), secret) {
			t.Errorf("a token is in the database or the log")
		}
	}
}

func totals(run map[string]any, field string) int {
	n := 0
	for _, x := range fxArr(run["types"]) {
		n += count(fxObj(x), field)
	}
	return n
}

func slicesContains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// pulledIDs are the upstream ids of a type stored in a source.
func pulledIDs(t *testing.T, w *paWorld, source, typ string) []string {
	t.Helper()
	_, body := w.env.Send(t, "GET", "/FHIR/R5/"+typ+"?_count=1000&_source="+url.QueryEscape(source), w.token, nil)
	var ids []string
	for _, r := range fxMatches(t, body) {
		for _, ident := range fxArr(r["identifier"]) {
			if fxObj(ident)["system"] == source+"/id" {
				ids = append(ids, fmt.Sprint(fxObj(ident)["value"]))
			}
		}
	}
	return ids
}

// TestPatientAccessFaults: each type is read on its own. A type the EHR
// refuses (403) and one whose second page fails (500, after retries) are
// skipped with their reasons and the rest of the record is pulled: the
// run is partial. Observations are searched by category, which the EHR
// demands. A resource whose id has more than FHIR's 64 characters is
// stored, its id kept as its identifier.
func TestPatientAccessFaults(t *testing.T) {
	w := newPAWorld(t, domain.PullLimits{PageSize: 20})
	longID := strings.Repeat("c", 80)
	w.ehr.Add(w.ehrPatient, map[string]any{"resourceType": "Condition", "id": longID,
		"meta":           map[string]any{"lastUpdated": "2024-08-06T18:12:57Z"},
		"clinicalStatus": map[string]any{"coding": []any{map[string]any{"system": "http://terminology.hl7.org/CodeSystem/condition-clinical", "code": "active"}}},
		"code":           map[string]any{"text": "a condition of a long id"}, "subject": map[string]any{"reference": "Patient/" + w.ehrPatient}})
	w.ehr.SetFaults(ehrtest.Faults{Refuse: map[string]int{"Immunization": 403}, FailPage: map[string]bool{"Procedure#2": true}})
	w.connect(t, false)
	run := w.runs(t)[0]
	if run["outcome"] != "partial" {
		t.Errorf("outcome %v", run["outcome"])
	}
	if x := runType(run, "Immunization"); !strings.Contains(fmt.Sprint(x["skipped"]), "403") || count(x, "fetched") != 0 {
		t.Errorf("Immunization: %v", x)
	}
	if x := runType(run, "Procedure"); !strings.Contains(fmt.Sprint(x["skipped"]), "500") || count(x, "stored") != 20 {
		t.Errorf("Procedure: %v", x)
	}
	if x := runType(run, "Condition"); count(x, "stored") != w.ehr.Count("Condition", w.ehrPatient) || x["skipped"] != nil {
		t.Errorf("Condition: %v", x)
	}
	if x := runType(run, "Observation"); count(x, "stored") != 3 || x["skipped"] != nil {
		t.Errorf("Observation (by category): %v", x)
	}
	if x := runType(run, "Encounter"); count(x, "stored") != w.ehr.Count("Encounter", w.ehrPatient) {
		t.Errorf("Encounter, after the skipped types: %v", x)
	}
	source := domain.SourceURI(handlerstest.SourceBase, int64(run["fhirSource"].(float64)))
	_, body := w.env.Send(t, "GET", "/FHIR/R5/Condition?_source="+url.QueryEscape(source)+"&identifier="+url.QueryEscape(source+"/id|"+longID), w.token, nil)
	if len(fxMatches(t, body)) != 1 {
		t.Errorf("the Condition of a long id: %v", body)
	}
}

// TestPatientAccessSkipsWhatItCannotRead: a 400 or 404 to a type's
// search, or an answer that is not a Bundle, skips that type with its
// reason, and the rest of the record is pulled; a resource that is not
// valid R4 is refused alone, the rest of its type stored; an Observation
// found by two category searches is read once. The run and the
// connection are each an audit event of the patient's.
func TestPatientAccessSkipsWhatItCannotRead(t *testing.T) {
	w := newPAWorldWith(t, ehrtest.Start(t, fhirdefstest.SyntheaDir()), handlerstest.Options{Audit: true})
	w.ehr.Add(w.ehrPatient, map[string]any{"resourceType": "Condition", "id": "not-valid-r4",
		"meta":           map[string]any{"lastUpdated": "2024-08-06T18:12:57Z"},
		"clinicalStatus": "active", "code": map[string]any{"text": "a clinical status that is not a CodeableConcept"},
		"subject": map[string]any{"reference": "Patient/" + w.ehrPatient}})
	category := func(code string) map[string]any {
		return map[string]any{"coding": []any{map[string]any{"system": "http://terminology.hl7.org/CodeSystem/observation-category", "code": code}}}
	}
	w.ehr.Add(w.ehrPatient, map[string]any{"resourceType": "Observation", "id": "two-categories", "status": "final",
		"meta":     map[string]any{"lastUpdated": "2024-08-06T18:12:57Z"},
		"category": []any{category("vital-signs"), category("laboratory")}, "code": map[string]any{"text": "found by two searches"},
		"subject": map[string]any{"reference": "Patient/" + w.ehrPatient}, "valueQuantity": map[string]any{"value": 1.5}})
	w.ehr.SetFaults(ehrtest.Faults{Refuse: map[string]int{"Immunization": 400, "Procedure": 404}, NotBundle: map[string]bool{"CarePlan": true}})
	w.connect(t, false)
	run := w.runs(t)[0]
	if run["outcome"] != "partial" {
		t.Errorf("outcome %v", run["outcome"])
	}
	for typ, want := range map[string]string{"Immunization": "400", "Procedure": "404", "CarePlan": "not a FHIR Bundle"} {
		if x := runType(run, typ); !strings.Contains(fmt.Sprint(x["skipped"]), want) || count(x, "stored") != 0 {
			t.Errorf("%s: %v, want skipped for %q", typ, x, want)
		}
	}
	if x := runType(run, "Condition"); count(x, "refused") != 1 || count(x, "stored") != w.ehr.Count("Condition", w.ehrPatient)-1 ||
		!strings.Contains(fmt.Sprint(x["reasons"]), "clinicalStatus") {
		t.Errorf("Condition, one of them invalid: %v", x)
	}
	if x := runType(run, "Encounter"); count(x, "stored") != w.ehr.Count("Encounter", w.ehrPatient) || x["skipped"] != nil {
		t.Errorf("Encounter, after the skipped types: %v", x)
	}
	if x, n := runType(run, "Observation"), w.ehr.Count("Observation", w.ehrPatient); count(x, "fetched") != n || count(x, "stored") != n || count(x, "duplicates") != 0 {
		t.Errorf("Observation, one under two categories: %v, the EHR holds %d", x, n)
	}
	// The audit trail is written in batches: wait for the run's event.
	kinds := map[string]int{}
	for deadline := time.Now().Add(20 * time.Second); kinds["ehr-pull"] == 0 && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		_, bundle := w.env.Send(t, "GET", "/FHIR/R5/AuditEvent?_count=1000", w.token, nil)
		clear(kinds)
		for _, e := range fxMatches(t, bundle) {
			kinds[fmt.Sprint(fxObj(fxArr(fxObj(e["code"])["coding"])[0])["code"])]++
		}
	}
	if kinds["ehr-pull"] != 1 || kinds["ehr-connection"] != 1 {
		t.Errorf("the patient's audit events by kind: %v, want one ehr-pull and one ehr-connection", kinds)
	}
}

// TestPatientAccessBounds: each bound of a pull ends as documented. A
// type with more pages than a search may read stops (partial); a resource
// over the bytes of one is refused alone; a run that reaches its count of
// resources stops (limit-reached). An EHR that advertises SMART v2 is
// asked for .rs scopes. The schedule pulls again the connections whose
// patients allow it, and only those.
func TestPatientAccessBounds(t *testing.T) {
	t.Run("pages and bytes", func(t *testing.T) {
		w := newPAWorld(t, domain.PullLimits{PageSize: 20, MaxPagesPerType: 1, MaxResourceBytes: 1 << 20})
		allergies := w.ehr.Count("AllergyIntolerance", w.ehrPatient)
		w.ehr.Add(w.ehrPatient, map[string]any{"resourceType": "AllergyIntolerance", "id": "too-large",
			"meta": map[string]any{"lastUpdated": "2024-08-06T18:12:57Z"},
			"code": map[string]any{"text": "an allergy with a long note"}, "patient": map[string]any{"reference": "Patient/" + w.ehrPatient},
			"note": []any{map[string]any{"text": strings.Repeat("n", 3<<19)}}})
		w.connect(t, false)
		run := w.runs(t)[0]
		if run["outcome"] != "partial" {
			t.Errorf("outcome %v", run["outcome"])
		}
		if x := runType(run, "Procedure"); !strings.Contains(fmt.Sprint(x["skipped"]), "stopped after 1 pages") || count(x, "stored") != 20 {
			t.Errorf("Procedure, more than a page: %v", x)
		}
		if x := runType(run, "AllergyIntolerance"); count(x, "refused") != 1 || count(x, "stored") != allergies ||
			!strings.Contains(fmt.Sprint(x["reasons"]), "larger than 1 MiB") {
			t.Errorf("AllergyIntolerance, one too large: %v", x)
		}
		if n, err := w.env.Service.SyncDue(context.Background(), time.Millisecond); err != nil || n != 0 {
			t.Errorf("scheduled pulls of a connection not kept up to date: %d, %v", n, err)
		}
	})
	t.Run("resources of a run, v2 scopes, schedule", func(t *testing.T) {
		w := newPAWorld(t, domain.PullLimits{MaxResources: 25})
		w.ehr.SetFaults(ehrtest.Faults{ScopesV2: true})
		w.connect(t, true)
		scopes := strings.Fields(w.ehr.Authorize().Get("scope"))
		if !slicesContains(scopes, "patient/Condition.rs") || slicesContains(scopes, "patient/Condition.read") {
			t.Errorf("scopes asked of a SMART v2 EHR: %v", scopes)
		}
		run := w.runs(t)[0]
		if run["outcome"] != "limit-reached" || totals(run, "fetched") != 25 {
			t.Errorf("run %v: outcome %v, fetched %d", run["id"], run["outcome"], totals(run, "fetched"))
		}
		if n, err := w.env.Service.SyncDue(context.Background(), time.Hour); err != nil || n != 0 {
			t.Errorf("scheduled pulls of a connection pulled just now: %d, %v", n, err)
		}
		if n, err := w.env.Service.SyncDue(context.Background(), time.Millisecond); err != nil || n != 1 {
			t.Fatalf("scheduled pulls of a connection due: %d, %v", n, err)
		}
		if runs := w.runs(t); len(runs) != 2 || runs[0]["trigger"] != "schedule" {
			t.Errorf("runs after the schedule: %v", runs)
		}
	})
}

// TestPatientAccessTokenWithoutPatient: a token response without the
// patient connects nothing: a clear error, no connection, no identifier,
// no FHIR source, and the token revoked at the EHR.
func TestPatientAccessTokenWithoutPatient(t *testing.T) {
	w := newPAWorld(t, domain.PullLimits{})
	w.ehr.SetFaults(ehrtest.Faults{NoPatient: true})
	resp, page := w.connect(t, true)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, "names no patient") {
		t.Errorf("callback: %d %s", resp.StatusCode, page)
	}
	resp, out := w.env.Send(t, "GET", fmt.Sprintf("/api/v1/patients/%d/connections", w.patient.ID), w.token, nil)
	if resp.StatusCode != http.StatusOK || len(fxArr(out["results"])) != 0 {
		t.Errorf("connections: %d %v", resp.StatusCode, out)
	}
	p := fxMust(w.env.Service.PatientByID(context.Background(), domain.SystemActor(), w.patient.ID))
	sources := fxMust(w.env.Service.FHIRSourcesOfPatient(context.Background(), domain.SystemActor(), w.patient.ID, domain.Page{Number: 1, Size: 10}))
	if len(p.Identifiers) != 0 || sources.Total != 0 {
		t.Errorf("identifiers %v, sources %v", p.Identifiers, sources)
	}
	if rec := w.ehr.Recorded(); len(rec.Revoked) != 1 {
		t.Errorf("revoked %d tokens, want the one issued", len(rec.Revoked))
	}
}

// TestPatientAccessTokenExpiresMidRun: an access token the EHR refuses
// before its time is refreshed, when the patient let the exchange keep the
// record up to date, and the run goes on; without offline access the run
// ends (token-rejected), the connection asks to be made again, and a pull
// is refused until then.
func TestPatientAccessTokenExpiresMidRun(t *testing.T) {
	w := newPAWorld(t, domain.PullLimits{PageSize: 50})
	w.ehr.SetFaults(ehrtest.Faults{RefuseTokenAfter: 5})
	w.connect(t, true)
	if run := w.runs(t)[0]; run["outcome"] != "completed" || w.ehr.Recorded().Refreshes == 0 {
		t.Errorf("with a refresh token: %v, %d refreshes", run["outcome"], w.ehr.Recorded().Refreshes)
	}

	w = newPAWorld(t, domain.PullLimits{PageSize: 50})
	w.ehr.SetFaults(ehrtest.Faults{RefuseTokenAfter: 5})
	w.connect(t, false)
	run := w.runs(t)[0]
	if run["outcome"] != "token-rejected" || totals(run, "stored") == 0 {
		t.Errorf("without: %v", run)
	}
	conn := w.connection(t)
	if conn["status"] != "reconnect" {
		t.Errorf("connection %v", conn)
	}
	if resp, out := w.env.Send(t, "POST", fmt.Sprintf("/api/v1/patient-access/connections/%v/sync", conn["id"]), w.token, nil); resp.StatusCode != http.StatusConflict {
		t.Errorf("sync of a connection to make again: %d %v", resp.StatusCode, out)
	}
	// Connected again: the same connection, back in service.
	w.ehr.SetFaults(ehrtest.Faults{})
	w.connect(t, false)
	if again := w.connection(t); again["id"] != conn["id"] || again["status"] != "connected" {
		t.Errorf("connected again: %v", again)
	}
}

// TestPatientAccessDuplicatePull: a second full pull stores nothing: every
// resource is a duplicate; and a pull while another of the connection
// holds its lock (on any instance) is refused with 409.
func TestPatientAccessDuplicatePull(t *testing.T) {
	w := newPAWorld(t, domain.PullLimits{})
	w.ehrPatient = w.ehr.Patients()[2] // a patient of a smaller record
	w.connect(t, false)
	first := w.runs(t)[0]
	conn := w.connection(t)
	resp, out := w.env.Send(t, "POST", fmt.Sprintf("/api/v1/patient-access/connections/%v/sync", conn["id"]), w.token, nil)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("sync: %d %v", resp.StatusCode, out)
	}
	second := w.runs(t)[0]
	if second["outcome"] != "completed" || second["since"] != nil || totals(second, "stored") != 0 ||
		totals(second, "duplicates") != totals(first, "stored") || totals(second, "fetched") != totals(first, "fetched") {
		t.Errorf("the second pull: %v\nthe first: %v", second, first)
	}
	release, err := w.env.DB.LockEHRPull(context.Background(), int64(conn["id"].(float64)))
	if err != nil {
		t.Fatal(err)
	}
	if resp, out := w.env.Send(t, "POST", fmt.Sprintf("/api/v1/patient-access/connections/%v/sync", conn["id"]), w.token, nil); resp.StatusCode != http.StatusConflict {
		t.Errorf("sync while another pull runs: %d %v", resp.StatusCode, out)
	}
	release()
}

// TestPatientAccessRefusals: the EHR's record of a patient connected to
// one patient of the exchange cannot be connected to another (409,
// nothing connected); a callback is used once, and only by the patient
// who began it; practitioners connect no one.
func TestPatientAccessRefusals(t *testing.T) {
	w := newPAWorld(t, domain.PullLimits{})
	w.ehrPatient = w.ehr.Patients()[2]
	w.connect(t, false)
	w.runs(t)

	other := w.env.Patient(t, "other@example.org")
	otherToken := w.env.Token(t, other.UserID)
	otherBrowser := signedIn(t, w.env, "other@example.org")
	resp, out := w.env.Send(t, "POST", "/api/v1/patient-access/connections", otherToken, map[string]any{"brand": w.brand})
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("connect: %d %v", resp.StatusCode, out)
	}
	resp, page := otherBrowser.Do("GET", out["authorizeUrl"].(string), nil)
	if resp.StatusCode != http.StatusConflict || !strings.Contains(page, "already connected to another patient") {
		t.Errorf("the same EHR record for another patient: %d %s", resp.StatusCode, page)
	}
	resp, list := w.env.Send(t, "GET", fmt.Sprintf("/api/v1/patients/%d/connections", other.ID), otherToken, nil)
	if resp.StatusCode != http.StatusOK || len(fxArr(list["results"])) != 0 {
		t.Errorf("the other patient's connections: %v", list)
	}

	// Begun by the patient, finished in the other's browser: refused; the
	// state is then spent.
	_, out = w.env.Send(t, "POST", "/api/v1/patient-access/connections", w.token, map[string]any{"brand": w.brand})
	stop := handlerstest.NewBrowser(t, func(to *url.URL) bool { return strings.HasPrefix(to.Path, "/console/records/callback") })
	resp, _ = stop.Do("GET", out["authorizeUrl"].(string), nil)
	callback := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusFound || !strings.Contains(callback, "state=") {
		t.Fatalf("the EHR's redirect: %d %q", resp.StatusCode, callback)
	}
	if resp, page := otherBrowser.Do("GET", callback, nil); resp.StatusCode != http.StatusForbidden || !strings.Contains(page, "begun by another patient") {
		t.Errorf("another patient's callback: %d %s", resp.StatusCode, page)
	}
	if resp, page := w.browser.Do("GET", callback, nil); resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, "finished already") {
		t.Errorf("the callback used again: %d %s", resp.StatusCode, page)
	}
	if resp, _ := w.env.Send(t, "POST", "/api/v1/patient-access/connections", w.super, map[string]any{"brand": w.brand}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a superuser connects: %d", resp.StatusCode)
	}
}

// TestPatientAccessConfidentialClient: a registration with a secret is
// answered without it and stored sealed, and the code is redeemed with
// the secret in the Authorization header, as an EHR that registered a
// confidential client demands.
func TestPatientAccessConfidentialClient(t *testing.T) {
	w := newPAWorld(t, domain.PullLimits{})
	w.ehrPatient = w.ehr.Patients()[2]
	const secret = "the exchange's secret at the test EHR"
	w.ehr.ClientSecret = secret
	resp, out := w.env.Send(t, "PUT", "/api/v1/patient-access/clients", w.super, map[string]any{"vendor": "testvendor", "clientId": w.ehr.ClientID, "clientSecret": secret})
	if resp.StatusCode != http.StatusOK || out["hasSecret"] != true || strings.Contains(fxCompact(out), secret) {
		t.Fatalf("client registration: %d %v", resp.StatusCode, out)
	}
	resp, out = w.env.Send(t, "GET", "/api/v1/patient-access/clients", w.super, nil)
	if resp.StatusCode != http.StatusOK || strings.Contains(fxCompact(out), secret) || !strings.Contains(fxCompact(out), `"hasSecret":true`) {
		t.Errorf("client registrations: %d %v", resp.StatusCode, out)
	}
	var doc bson.Raw
	if err := repotest.Collection(t, w.env.DB, "ehr_clients").FindOne(context.Background(), bson.M{}).Decode(&doc); err != nil || strings.Contains(string(doc), secret) {
		t.Errorf("the registration as stored holds its secret (%v)", err)
	}
	if resp, page := w.connect(t, false); resp.StatusCode != http.StatusOK || !strings.Contains(page, "Connected") {
		t.Fatalf("callback: %d %s", resp.StatusCode, page)
	}
	if run := w.runs(t)[0]; run["outcome"] != "completed" {
		t.Errorf("run %v", run)
	}
}

// TestPatientAccessDisconnect: disconnecting revokes the token at the EHR
// and deletes it; what was pulled stays, the patient's data.
func TestPatientAccessDisconnect(t *testing.T) {
	w := newPAWorld(t, domain.PullLimits{})
	w.ehrPatient = w.ehr.Patients()[2]
	w.connect(t, true)
	run := w.runs(t)[0]
	conn := w.connection(t)
	// A superuser's SMART launch held to another patient does not reach it.
	other := w.env.Patient(t, "other@example.org")
	super := must(w.env.Service.UserByEmail(context.Background(), "super@example.org"))
	held, _, err := w.env.OAuth.IssueScopedAccessToken(context.Background(), super.ID, time.Hour,
		[]string{"openid", "launch/patient", domain.ScopeAdminRead, domain.ScopeAdminWrite}, other.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/api/v1/patient-access/connections/%v/sync", "/api/v1/patient-access/connections/%v"} {
		method := map[bool]string{true: "POST", false: "DELETE"}[strings.HasSuffix(path, "/sync")]
		if resp, out := w.env.Send(t, method, fmt.Sprintf(path, conn["id"]), held, nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s %s held to another patient: %d %v", method, path, resp.StatusCode, out)
		}
	}
	resp, out := w.env.Send(t, "DELETE", fmt.Sprintf("/api/v1/patient-access/connections/%v", conn["id"]), w.token, nil)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("disconnect: %d %v", resp.StatusCode, out)
	}
	if rec := w.ehr.Recorded(); len(rec.Revoked) != 1 {
		t.Errorf("revoked %v", rec.Revoked)
	}
	resp, out = w.env.Send(t, "GET", fmt.Sprintf("/api/v1/patients/%d/connections", w.patient.ID), w.token, nil)
	if resp.StatusCode != http.StatusOK || len(fxArr(out["results"])) != 0 {
		t.Errorf("connections after: %d %v", resp.StatusCode, out)
	}
	n, err := repotest.Collection(t, w.env.DB, "resources").CountDocuments(context.Background(), bson.M{"sourceId": int64(run["fhirSource"].(float64))})
	if err != nil || int(n) != totals(run, "stored") {
		t.Errorf("%d resources stay, want %d (%v)", n, totals(run, "stored"), err)
	}
	if resp, _ := w.env.Send(t, "DELETE", fmt.Sprintf("/api/v1/patient-access/connections/%v", conn["id"]), w.token, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("disconnected again: %d", resp.StatusCode)
	}
}

// TestEHRBrands: a Brands Bundle imports with its references in every
// form (urn:uuid fullUrls, Type/id, bare ids), idempotently; the picker's
// search matches facility, city and brand by word prefix without case or
// accents, filters by state and postal code, sorts by brand then facility
// and bounds its answer; superusers import.
func TestEHRBrands(t *testing.T) {
	env := handlerstest.Start(t)
	super := env.Token(t, env.Practitioner(t, "super@example.org", true).ID)
	patient := env.Token(t, env.Patient(t, "pat@example.org").UserID)
	bundle := `{"resourceType": "Bundle", "type": "collection", "entry": [
		{"fullUrl": "urn:uuid:11111111-1111-4111-8111-111111111111", "resource": {"resourceType": "Endpoint", "status": "active",
			"connectionType": {"code": "hl7-fhir-rest"}, "address": "https://fhir.zeta.example.org/R4/"}},
		{"fullUrl": "urn:uuid:22222222-2222-4222-8222-222222222222", "resource": {"resourceType": "Organization", "name": "Zeta Health",
			"endpoint": [{"reference": "urn:uuid:11111111-1111-4111-8111-111111111111"}]}},
		{"resource": {"resourceType": "Organization", "name": "Zeta Clinic Springfield", "partOf": {"reference": "urn:uuid:22222222-2222-4222-8222-222222222222"},
			"address": [{"text": "9 Elm St, Springfield, IL 62704", "city": "Springfield", "state": "IL", "postalCode": "62704"}]}},
		{"resource": {"resourceType": "Endpoint", "id": "ab", "status": "active", "connectionType": {"code": "hl7-fhir-rest"}, "address": "https://ehr.alpha.example.org/fhir"}},
		{"resource": {"resourceType": "Organization", "id": "alpha", "name": "Álpha Médical", "endpoint": [{"reference": "ab"}],
			"address": [{"city": "Chicago", "state": "il", "postalCode": "60601", "line": ["1 Lake St"]}, {"city": "Peoria", "state": "IL", "postalCode": "61602"}]}},
		{"resource": {"resourceType": "Organization", "id": "lost", "name": "No Endpoint Clinic"}}]}`
	if resp, out := env.Send(t, "POST", "/api/v1/patient-access/brands", patient, bundle); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a patient imports: %d %v", resp.StatusCode, out)
	}
	resp, out := env.Send(t, "POST", "/api/v1/patient-access/brands", super, bundle)
	if resp.StatusCode != http.StatusOK || out["brands"] != 2.0 || out["brandsCreated"] != 2.0 || out["facilitiesCreated"] != 3.0 ||
		len(fxArr(out["skipped"])) != 1 || !strings.Contains(fmt.Sprint(out["skipped"]), "No Endpoint Clinic") {
		t.Fatalf("import: %d %v", resp.StatusCode, out)
	}
	if resp, out := env.Send(t, "POST", "/api/v1/patient-access/brands", super, bundle); resp.StatusCode != http.StatusOK ||
		out["brandsCreated"] != 0.0 || out["brandsUpdated"] != 0.0 || out["facilitiesCreated"] != 0.0 {
		t.Errorf("imported again: %d %v", resp.StatusCode, out)
	}
	search := func(query string) []string {
		t.Helper()
		resp, out := env.Send(t, "GET", "/api/v1/patient-access/brands"+query, patient, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %v", query, resp.StatusCode, out)
		}
		var got []string
		for _, r := range fxArr(out["results"]) {
			f := fxObj(r)
			got = append(got, fmt.Sprintf("%s|%s|%s|%s", f["brand_name"], f["facility_name"], f["city"], f["fhir_base_url"]))
		}
		return got
	}
	all := search("")
	want := []string{"Álpha Médical|Álpha Médical|Chicago|https://ehr.alpha.example.org/fhir", "Álpha Médical|Álpha Médical|Peoria|https://ehr.alpha.example.org/fhir",
		"Zeta Health|Zeta Clinic Springfield|Springfield|https://fhir.zeta.example.org/R4"}
	if strings.Join(all, "\n") != strings.Join(want, "\n") {
		t.Errorf("all:\n%s\nwant\n%s", strings.Join(all, "\n"), strings.Join(want, "\n"))
	}
	for query, n := range map[string]int{"?q=alpha": 2, "?q=MEDICAL": 2, "?q=spring": 1, "?q=zeta+clinic": 1, "?q=peoria": 1, "?q=clinic+alpha": 0,
		"?state=il": 3, "?postal=626": 0, "?postal=6270": 1, "?q=health&state=IL": 1, "?limit=1": 1, "?q=nowhere": 0} {
		if got := search(query); len(got) != n {
			t.Errorf("%s: %v, want %d", query, got, n)
		}
	}
	for _, query := range []string{"?limit=101", "?limit=0x", "?city=Chicago", "?limit=-1"} {
		if resp, out := env.Send(t, "GET", "/api/v1/patient-access/brands"+query, patient, nil); resp.StatusCode != http.StatusBadRequest || out["detail"] == nil {
			t.Errorf("%s: %d %v", query, resp.StatusCode, out)
		}
	}
}

// TestPatientAccessKeepsChangesMadeDuringAPull: the patient turns keeping
// the record up to date off while a pull runs; the end of the pull does
// not turn it back on (it writes its own fields to the connection as it
// is then, not the copy it read when it began).
func TestPatientAccessKeepsChangesMadeDuringAPull(t *testing.T) {
	w := newPAWorld(t, domain.PullLimits{})
	var once sync.Once
	w.ehr.SetFaults(ehrtest.Faults{BeforeSearch: func(string) {
		once.Do(func() {
			var id any
			resp, out := w.env.Send(t, "GET", fmt.Sprintf("/api/v1/patients/%d/connections", w.patient.ID), w.token, nil)
			if list := fxArr(out["results"]); resp.StatusCode == http.StatusOK && len(list) == 1 {
				id = fxObj(list[0])["id"]
			}
			if resp, out := w.env.Send(t, "PATCH", fmt.Sprintf("/api/v1/patient-access/connections/%v", id), w.token, map[string]any{"keepUpdated": false}); resp.StatusCode != http.StatusOK {
				t.Errorf("turning updates off during the pull: %d %v", resp.StatusCode, out)
			}
		})
	}})
	w.connect(t, true)
	w.runs(t)
	if conn := w.connection(t); conn["keepUpdated"] != false {
		t.Errorf("after the pull the connection keeps the record up to date again: %v", conn)
	}
}
