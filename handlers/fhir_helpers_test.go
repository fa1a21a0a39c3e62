package handlers_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"exchange/domain"
	"exchange/handlers/handlerstest"
)

// Helpers of the FHIR tests (fhir_*_test.go). Their names start with fx so
// that they stay apart from the other test files of the package.

const (
	fxOMH     = domain.SystemOpenMHealth
	fxIEEE    = domain.SystemIEEE1752
	fxMRN     = "http://hospital.example.org/mrn"
	fxObsIDs  = "https://device.example.org/observation-id"
	fxBase    = "/FHIR/R5"
	fxHR      = "omh:heart-rate:2.0"
	fxBP      = "omh:blood-pressure:4.0"
	fxSteps   = "omh:step-count:3.0"
	fxIEEEPA  = "ieee:physical-activity:1.0"
	fxPA      = "omh:physical-activity:1.2" // its time frame is optional
	fxStatusS = "http://hl7.org/fhir/observation-status"
)

var fxSys = domain.SystemActor()

// fxMust returns v, or stops the test binary when fixture setup fails.
func fxMust[T any](v T, err error) T {
	if err != nil {
		panic(fmt.Sprintf("FHIR test fixture: %v", err))
	}
	return v
}

// fxWorld is the fixture of the FHIR tests:
//
//	organization A "Clinic" (prov) with department A1 "Cardiology" (dept),
//	organization B "Elsewhere" (prov)
//	practitioners: super (superuser), doc (member of A), viewer (viewer of
//	A), nurse (member of A1), outsider (manager of B)
//	patients: alice (A and A1), bob (A), dave (A), carol (B)
//	studies: S1 of A (heart rate, blood pressure, steps, IEEE and Open
//	mHealth physical activity; Watch), S2 of A (heart rate, blood pressure;
//	Cuff), S3 of B (heart rate; Cuff, Scale)
//	alice in S1 consents to all five; bob in S1 to heart rate (blood
//	pressure refused), in S2 to blood pressure; dave in S1 answers nothing,
//	in S2 consents to heart rate; carol in S3 consents to heart rate.
type fxWorld struct {
	t   *testing.T
	env *handlerstest.Env
	ctx context.Context

	orgA, orgA1, orgB *domain.Organization
	// users and their tokens
	super, doc, viewer, nurse, outsider *domain.User
	tok                                 map[string]string

	alice, bob, carol, dave *domain.Patient
	hr, bp, steps, ieee, pa *domain.ScopeCode
	watch, cuff, scale      int64
	s1, s2, s3              *domain.Study
}

// fxNewWorld starts the exchange with the fixture. The test runs in
// parallel with the other parallel tests of the package.
func fxNewWorld(t *testing.T) *fxWorld { return fxNewWorldWith(t, behindLoopbackProxy) }

// fxNewWorldWith is fxNewWorld on an exchange started with options (the
// tests' own address trusted as a proxy, or not).
func fxNewWorldWith(t *testing.T, o handlerstest.Options) *fxWorld {
	t.Helper()
	t.Parallel()
	env := handlerstest.StartWith(t, o)
	w := &fxWorld{t: t, env: env, ctx: context.Background(), tok: map[string]string{}}
	svc, ctx := env.Service, w.ctx
	w.orgA = fxMust(svc.CreateOrganization(ctx, fxSys, domain.NewOrganization{Name: "Clinic", Type: "prov"}))
	w.orgA1 = fxMust(svc.CreateOrganization(ctx, fxSys, domain.NewOrganization{Name: "Cardiology", Type: "dept", PartOf: w.orgA.ID}))
	w.orgB = fxMust(svc.CreateOrganization(ctx, fxSys, domain.NewOrganization{Name: "Elsewhere", Type: "prov"}))
	practitioner := func(name string, org int64, role domain.Role, superuser bool) *domain.User {
		u := fxMust(svc.CreateUser(ctx, domain.NewUser{Email: name + "@example.org", Type: domain.UserPractitioner,
			IsSuperuser: superuser, FirstName: strings.ToUpper(name[:1]) + name[1:], LastName: "Practitioner"}))
		if org != 0 {
			if err := svc.AddMember(ctx, fxSys, org, u.ID, role); err != nil {
				t.Fatal(err)
			}
		}
		w.tok[name] = env.Token(t, u.ID)
		return u
	}
	w.super = practitioner("super", 0, "", true)
	w.doc = practitioner("doc", w.orgA.ID, domain.RoleMember, false)
	w.viewer = practitioner("viewer", w.orgA.ID, domain.RoleViewer, false)
	w.nurse = practitioner("nurse", w.orgA1.ID, domain.RoleMember, false)
	w.outsider = practitioner("outsider", w.orgB.ID, domain.RoleManager, false)

	patient := func(name string, in domain.NewPatient) *domain.Patient {
		in.Email = name + "@example.org"
		p := fxMust(svc.CreatePatient(ctx, fxSys, in))
		w.tok[name] = env.Token(t, p.UserID)
		return p
	}
	w.alice = patient("alice", domain.NewPatient{FamilyName: "Ødegård", GivenNames: []string{"Alice", "Marie"}, BirthDate: "1980-05-17",
		Phone: "+1 555 0100", Identifiers: []domain.Identifier{{System: fxMRN, Value: "A-1"}}, OrganizationIDs: []int64{w.orgA.ID, w.orgA1.ID}})
	w.bob = patient("bob", domain.NewPatient{FamilyName: "Smith", GivenNames: []string{"Bob"}, BirthDate: "1975-12-01",
		Identifiers: []domain.Identifier{{System: fxMRN, Value: "B-2"}}, OrganizationIDs: []int64{w.orgA.ID}})
	w.dave = patient("dave", domain.NewPatient{FamilyName: "Jones", GivenNames: []string{"Dave"}, OrganizationIDs: []int64{w.orgA.ID}})
	w.carol = patient("carol", domain.NewPatient{FamilyName: "Smithson", GivenNames: []string{"Carol"}, BirthDate: "1990-01-01",
		Identifiers: []domain.Identifier{{System: fxMRN, Value: "C-3"}}, OrganizationIDs: []int64{w.orgB.ID}})

	w.hr = fxMust(svc.EnsureScopeCode(ctx, fxOMH, fxHR, "Heart rate"))
	w.bp = fxMust(svc.EnsureScopeCode(ctx, fxOMH, fxBP, "Blood pressure"))
	// The step count scope is coded on the IEEE system: the two native
	// systems are interchangeable for consent.
	w.steps = fxMust(svc.EnsureScopeCode(ctx, fxIEEE, fxSteps, "Step count"))
	w.ieee = fxMust(svc.EnsureScopeCode(ctx, fxIEEE, fxIEEEPA, "Physical activity"))
	w.pa = fxMust(svc.EnsureScopeCode(ctx, fxOMH, fxPA, "Physical activity (Open mHealth)"))
	source := func(name string, typ domain.DataSourceType) int64 {
		return fxMust(svc.CreateDataSource(ctx, fxSys, domain.NewDataSource{Name: name, Type: typ})).ID
	}
	w.watch = source("Watch", domain.DataSourcePersonalDevice)
	w.cuff = source("Cuff", domain.DataSourceMedicalDevice)
	w.scale = source("Scale", domain.DataSourceMedicalDevice)

	study := func(org int64, name string, codes []*domain.ScopeCode, sources ...int64) *domain.Study {
		st := fxMust(svc.CreateStudy(ctx, fxSys, domain.NewStudy{OrganizationID: org, Name: name, Description: name + " description"}))
		for _, c := range codes {
			if err := svc.RequestScope(ctx, fxSys, st, c.ID); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range sources {
			fxMust(svc.AddStudyDataSource(ctx, fxSys, st.ID, s))
		}
		return st
	}
	w.s1 = study(w.orgA.ID, "Sleep and heart", []*domain.ScopeCode{w.hr, w.bp, w.steps, w.ieee, w.pa}, w.watch)
	w.s2 = study(w.orgA.ID, "Pressure", []*domain.ScopeCode{w.hr, w.bp}, w.cuff)
	w.s3 = study(w.orgB.ID, "Elsewhere study", []*domain.ScopeCode{w.hr}, w.cuff, w.scale)

	w.consent(w.alice, w.s1, map[*domain.ScopeCode]bool{w.hr: true, w.bp: true, w.steps: true, w.ieee: true, w.pa: true})
	w.consent(w.bob, w.s1, map[*domain.ScopeCode]bool{w.hr: true, w.bp: false})
	w.consent(w.bob, w.s2, map[*domain.ScopeCode]bool{w.bp: true})
	w.consent(w.dave, w.s1, nil)
	w.consent(w.dave, w.s2, map[*domain.ScopeCode]bool{w.hr: true})
	w.consent(w.carol, w.s3, map[*domain.ScopeCode]bool{w.hr: true})
	return w
}

// consent enrolls the patient in the study and answers the scopes.
func (w *fxWorld) consent(p *domain.Patient, st *domain.Study, answers map[*domain.ScopeCode]bool) {
	w.t.Helper()
	if err := w.env.Service.EnrollPatients(w.ctx, fxSys, st.ID, []int64{p.ID}); err != nil {
		w.t.Fatal(err)
	}
	if len(answers) == 0 {
		return
	}
	var scopes []domain.ScopeConsent
	for c, yes := range answers {
		scopes = append(scopes, domain.ScopeConsent{System: c.System, Code: c.Code, Consented: &yes})
	}
	if err := w.env.Service.AnswerConsents(w.ctx, fxSys, p.ID, []domain.StudyScopeConsents{{StudyID: st.ID, Scopes: scopes}}); err != nil {
		w.t.Fatal(err)
	}
}

// ---- Open mHealth data points ----

var fxDataPointSeq atomic.Int64

// fxDataPoint returns a data point of the native code with the body and an
// Open mHealth header, indented so that its bytes differ from any
// re-encoding.
func fxDataPoint(code string, body any) []byte {
	return fxDataPointWith(map[string]any{"id": fmt.Sprintf("dp-%d", fxDataPointSeq.Add(1)), "creation_date_time": "2024-06-01T12:00:00Z"}, code, body)
}

// fxIEEEDataPoint is fxDataPoint with an IEEE 1752 header, as JupyterHealth
// Exchange's clients send them.
func fxIEEEDataPoint(code string, body any) []byte {
	n := fxDataPointSeq.Add(1)
	return fxDataPointWith(map[string]any{"uuid": fmt.Sprintf("%08x-7d1c-4c3a-9b2e-%012x", n, n), "source_creation_date_time": "2024-06-01T05:00:00-07:00",
		"modality": "sensed"}, code, body)
}

// fxDataPointWith returns a data point with the header members given (and
// the schema_id of the code) and the body; a json.RawMessage body is kept
// as it is.
func fxDataPointWith(header map[string]any, code string, body any) []byte {
	parts := strings.Split(code, ":")
	header["schema_id"] = map[string]any{"namespace": parts[0], "name": parts[1], "version": parts[2]}
	dp := map[string]any{"header": header, "body": body}
	data, err := json.MarshalIndent(dp, "", "   ")
	if err != nil {
		panic(err)
	}
	return data
}

// fxAt is a date_time time frame.
func fxAt(dateTime string) map[string]any { return map[string]any{"date_time": dateTime} }

// fxInterval is a time_interval time frame of alternating keys and values.
func fxInterval(kv ...any) map[string]any {
	in := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		in[kv[i].(string)] = kv[i+1]
	}
	return map[string]any{"time_interval": in}
}

// fxDuration is an OMH duration.
func fxDuration(value float64, unit string) map[string]any {
	return map[string]any{"value": value, "unit": unit}
}

func withFrame(body map[string]any, frame any) map[string]any {
	if frame != nil {
		body["effective_time_frame"] = frame
	}
	return body
}

// Bodies of the three Open mHealth schemas the tests use; frame nil leaves
// the time frame out.
func fxHeartRate(frame any) map[string]any {
	return withFrame(map[string]any{"heart_rate": map[string]any{"value": 64, "unit": "beats/min"}}, frame)
}

func fxBloodPressure(frame any) map[string]any {
	return withFrame(map[string]any{
		"systolic_blood_pressure":  map[string]any{"value": 121, "unit": "mmHg"},
		"diastolic_blood_pressure": map[string]any{"value": 79, "unit": "mmHg"},
	}, frame)
}

func fxStepCount(frame any) map[string]any {
	return withFrame(map[string]any{"step_count": map[string]any{"value": 4200, "unit": "steps"}}, frame)
}

// ---- FHIR resources ----

// fxObs describes an Observation to create.
type fxObs struct {
	patient     int64
	device      int64
	system      string // of the native coding; OMH when empty
	code        string
	status      string // final when empty
	identifiers []string
	extra       []map[string]any // more codings
	payload     []byte
}

func (o fxObs) resource() map[string]any {
	system, status := o.system, o.status
	if system == "" {
		system = fxOMH
	}
	if status == "" {
		status = "final"
	}
	coding := []any{map[string]any{"system": system, "code": o.code}}
	for _, c := range o.extra {
		coding = append(coding, c)
	}
	r := map[string]any{
		"resourceType": "Observation",
		"status":       status,
		"code":         map[string]any{"coding": coding},
		"subject":      map[string]any{"reference": fmt.Sprintf("Patient/%d", o.patient)},
		"device":       map[string]any{"reference": fmt.Sprintf("Device/%d", o.device)},
		"valueAttachment": map[string]any{
			"contentType": "application/json",
			"data":        base64.StdEncoding.EncodeToString(o.payload),
		},
	}
	if len(o.identifiers) > 0 {
		var ids []any
		for _, v := range o.identifiers {
			ids = append(ids, map[string]any{"system": fxObsIDs, "value": v})
		}
		r["identifier"] = ids
	}
	return r
}

// fxBatch is a batch Bundle creating the resources.
func fxBatch(resources ...any) map[string]any {
	entries := make([]any, len(resources))
	for i, r := range resources {
		entries[i] = map[string]any{"resource": r, "request": map[string]any{"method": "POST", "url": "Observation"}}
	}
	return map[string]any{"resourceType": "Bundle", "type": "batch", "entry": entries}
}

// batch posts a batch Bundle and returns its entries; the answer must be a
// batch-response Bundle with one entry per request entry.
func (w *fxWorld) batch(t *testing.T, token string, resources ...any) []map[string]any {
	t.Helper()
	resp, out := w.env.Send(t, "POST", fxBase+"/", token, fxBatch(resources...))
	if resp.StatusCode != http.StatusOK || out["resourceType"] != "Bundle" || out["type"] != "batch-response" {
		t.Fatalf("batch: %d %v", resp.StatusCode, out)
	}
	entries := fxEntries(t, out)
	if len(entries) != len(resources) {
		t.Fatalf("batch of %d answered %d entries", len(resources), len(entries))
	}
	return entries
}

// create creates observations in one batch and returns their ids; every
// entry must be created.
func (w *fxWorld) create(t *testing.T, token string, obs ...fxObs) []string {
	t.Helper()
	resources := make([]any, len(obs))
	for i, o := range obs {
		resources[i] = o.resource()
	}
	var ids []string
	for i, e := range w.batch(t, token, resources...) {
		resp := fxObj(e["response"])
		if resp["status"] != "201 Created" {
			t.Fatalf("entry %d: %v", i, e)
		}
		ids = append(ids, fxObj(e["resource"])["id"].(string))
	}
	return ids
}

// ---- HTTP and Bundles ----

// fxDo sends a request with headers and returns the answer and its body.
func fxDo(t *testing.T, env *handlerstest.Env, method, path string, header map[string]string, body string) (*http.Response, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, env.URL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if body != "" && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/fhir+json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, data
}

func fxDecode(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("not JSON: %v: %s", err, data)
	}
	return out
}

func fxObj(v any) map[string]any { m, _ := v.(map[string]any); return m }

func fxArr(v any) []any { a, _ := v.([]any); return a }

// fxEntries returns the entries of a Bundle: a searchset carries entry,
// an empty array when nothing matched; other Bundles leave an empty one
// out, as FHIR JSON does.
func fxEntries(t *testing.T, bundle map[string]any) []map[string]any {
	t.Helper()
	v, present := bundle["entry"]
	raw, ok := v.([]any)
	switch {
	case present && !ok:
		t.Fatalf("entry is not an array in %v", bundle)
	case !present && bundle["type"] == "searchset":
		t.Fatalf("a searchset without entry: %v", bundle)
	case present && len(raw) == 0 && bundle["type"] != "searchset":
		t.Fatalf("an empty entry array in %v", bundle)
	}
	out := make([]map[string]any, len(raw))
	for i, e := range raw {
		out[i] = e.(map[string]any)
	}
	return out
}

// fxMatches returns the resources of the match entries of a searchset.
func fxMatches(t *testing.T, bundle map[string]any) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, e := range fxEntries(t, bundle) {
		if fxObj(e["search"])["mode"] == "match" {
			out = append(out, fxObj(e["resource"]))
		}
	}
	return out
}

// fxOutcomes returns the resources of the outcome entries of a searchset.
func fxOutcomes(t *testing.T, bundle map[string]any) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, e := range fxEntries(t, bundle) {
		if fxObj(e["search"])["mode"] == "outcome" {
			out = append(out, fxObj(e["resource"]))
		}
	}
	return out
}

func fxIDsOf(resources []map[string]any) []string {
	ids := []string{}
	for _, r := range resources {
		ids = append(ids, r["id"].(string))
	}
	return ids
}

// fxLink returns a Bundle's link of the relation, or "".
func fxLink(bundle map[string]any, relation string) string {
	for _, l := range fxArr(bundle["link"]) {
		if fxObj(l)["relation"] == relation {
			return fxObj(l)["url"].(string)
		}
	}
	return ""
}

// search sends GET fxBase+path and returns the status and the body.
func (w *fxWorld) search(t *testing.T, token, path string) (int, map[string]any) {
	t.Helper()
	resp, body := w.env.GetJSON(t, fxBase+path, token)
	return resp.StatusCode, body
}

// ids runs a search that must succeed on one page and returns the ids of
// its matches, in order.
func (w *fxWorld) ids(t *testing.T, token, path string) []string {
	t.Helper()
	status, body := w.search(t, token, path)
	if status != http.StatusOK || body["type"] != "searchset" {
		t.Fatalf("GET %s: %d %v", path, status, body)
	}
	if next := fxLink(body, "next"); next != "" {
		t.Fatalf("GET %s: more than one page (%s)", path, next)
	}
	return fxIDsOf(fxMatches(t, body))
}

// fxOutcomeText returns the diagnostics of an OperationOutcome's issues.
func fxOutcomeText(out map[string]any) string {
	var parts []string
	for _, i := range fxArr(out["issue"]) {
		d, _ := fxObj(i)["diagnostics"].(string)
		parts = append(parts, d)
	}
	return strings.Join(parts, "; ")
}

// fxIssueCode returns the code of an OperationOutcome's first issue.
func fxIssueCode(out map[string]any) string {
	issues := fxArr(out["issue"])
	if len(issues) == 0 {
		return ""
	}
	c, _ := fxObj(issues[0])["code"].(string)
	return c
}

// fxSorted returns the ids sorted numerically, for comparing sets.
func fxSorted(ids []string) []string {
	out := slices.Clone(ids)
	slices.SortFunc(out, func(a, b string) int {
		x, _ := strconv.ParseInt(a, 10, 64)
		y, _ := strconv.ParseInt(b, 10, 64)
		return int(x - y)
	})
	return out
}

// fxPath joins a path and query parameters (encoded).
func fxPath(path string, kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Add(kv[i], kv[i+1])
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// fxCompact renders JSON compactly, for messages.
func fxCompact(v any) string {
	data, _ := json.Marshal(v)
	var buf bytes.Buffer
	_ = json.Compact(&buf, data)
	return buf.String()
}
