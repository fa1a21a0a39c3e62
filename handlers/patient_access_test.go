package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
	"exchange/fhirdefs/fhirdefstest"
	"exchange/handlers/handlerstest"
	"exchange/repo/repotest"
	"exchange/smartclient"
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

// fastEHRClient is the exchange's EHR client with short waits.
func fastEHRClient() *smartclient.Client {
	c := smartclient.New()
	c.Retries, c.Backoff = 2, func(int) time.Duration { return 5 * time.Millisecond }
	return c
}

func newPAWorld(t *testing.T, limits domain.PullLimits) *paWorld {
	t.Helper()
	return newPAWorldWith(t, ehrtest.Start(t, fhirdefstest.SyntheaDir()), handlerstest.Options{PullLimits: limits})
}

// newPAWorldWith is newPAWorld on a test EHR and options of its own.
func newPAWorldWith(t *testing.T, ehr *ehrtest.EHR, o handlerstest.Options) *paWorld {
	t.Helper()
	o.EHR = fastEHRClient()
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
