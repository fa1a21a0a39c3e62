package handlers_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"exchange/handlers/handlerstest"
	"exchange/repo"
	"exchange/telemetry"
)

// TestHealthIsLivenessAndReadyIsReadiness: /health answers while the
// database does not; /ready names what is not in place.
func TestHealthIsLivenessAndReadyIsReadiness(t *testing.T) {
	down := false
	env := handlerstest.StartWith(t, handlerstest.Options{
		Ping: func(ctx context.Context) error {
			if down {
				return errors.New("no server")
			}
			return nil
		},
		Loaded: map[string]bool{"indexes": true, "omh-schemas": true},
	})
	resp, body := env.GetJSON(t, "/ready", "")
	if resp.StatusCode != http.StatusOK || body["status"] != "ready" || body["database"] != "ok" || body["omh-schemas"] != "ok" {
		t.Errorf("ready: %d %v", resp.StatusCode, body)
	}
	down = true
	resp, body = env.GetJSON(t, "/ready", "")
	if resp.StatusCode != http.StatusServiceUnavailable || body["database"] != "unreachable" || body["status"] != "unavailable" {
		t.Errorf("ready with the database down: %d %v", resp.StatusCode, body)
	}
	resp, body = env.GetJSON(t, "/health", "")
	if resp.StatusCode != http.StatusOK || body["status"] != "ok" {
		t.Errorf("health with the database down: %d %v", resp.StatusCode, body)
	}

	missing := handlerstest.StartWith(t, handlerstest.Options{Loaded: map[string]bool{"indexes": true, "r4-maps": false}})
	resp, body = missing.GetJSON(t, "/ready", "")
	if resp.StatusCode != http.StatusServiceUnavailable || body["r4-maps"] != "missing" || body["database"] != "ok" {
		t.Errorf("ready without the R4 maps: %d %v", resp.StatusCode, body)
	}
}

// TestRequestIDs: a valid X-Request-Id is kept and echoed, anything else
// is replaced by a fresh id; every answer carries one.
func TestRequestIDs(t *testing.T) {
	env := handlerstest.Start(t)
	generated := regexp.MustCompile(`^[0-9a-f]{32}$`)
	id := func(sent string) string {
		t.Helper()
		header := map[string]string{}
		if sent != "" {
			header[telemetry.RequestIDHeader] = sent
		}
		resp, _ := handlerstest.SendTo(t, "GET", env.URL+"/FHIR/R5/metadata", "", nil, header)
		return resp.Header.Get(telemetry.RequestIDHeader)
	}
	for _, valid := range []string{"3f2c9a7e-1b4d-4c8e-9f00-123456789abc", "Root-1.abc:42_x", strings.Repeat("a", telemetry.MaxRequestIDLength)} {
		if got := id(valid); got != valid {
			t.Errorf("X-Request-Id %q came back as %q", valid, got)
		}
	}
	for _, invalid := range []string{"", "two words", `quote"d`, "semi;colon", "equals=sign", strings.Repeat("a", telemetry.MaxRequestIDLength+1)} {
		if got := id(invalid); !generated.MatchString(got) {
			t.Errorf("X-Request-Id %q: answered %q, want a generated id", invalid, got)
		}
	}
	if a, b := id(""), id(""); a == b {
		t.Errorf("two requests got the same id %s", a)
	}
}

// TestRequestLogLines: each request is one JSON line at debug level with
// its id, route template, status, duration and who acted through which
// client; and nothing of what was sent: no token, query value, body
// value, name or email.
func TestRequestLogLines(t *testing.T) {
	var logs handlerstest.LogBuffer
	log, err := telemetry.ParseLogConfig("json", "debug")
	if err != nil {
		t.Fatal(err)
	}
	w := fxNewWorldWith(t, handlerstest.Options{Logger: log.NewLogger(&logs)})
	token := w.tok["doc"]
	header := map[string]string{telemetry.RequestIDHeader: "trace-me-1"}
	handlerstest.SendTo(t, "GET", w.env.URL+fxBase+"/Patient?family=Smithson&name=Alice", token, nil, header)
	secretBody := `{"name": "Secret Study Name", "organizationId": 999}`
	handlerstest.SendTo(t, "POST", w.env.URL+"/api/v1/studies", token, secretBody, nil)
	w.create(t, token, fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2024-03-05T10:00:00Z")))})

	lines := logs.JSONLines(t)
	var search map[string]any
	for _, l := range lines {
		if l["request_id"] == "trace-me-1" {
			search = l
		}
	}
	if search == nil || search["msg"] != "request" || search["route"] != "/FHIR/R5/:type" || search["method"] != "GET" ||
		search["status"] != 200.0 || search["user"] != float64(w.doc.ID) || search["client"] != "exchange-cli" || search["duration_ms"] == nil {
		t.Errorf("the search's line is %v", search)
	}
	all := logs.String()
	for _, secret := range []string{token, "Smithson", "Alice", "Secret Study Name", "alice@example.org", "doc@example.org", "beats/min",
		base64.StdEncoding.EncodeToString(fxDataPoint(fxHR, fxHeartRate(fxAt("2024-03-05T10:00:00Z"))))[:40]} {
		if strings.Contains(all, secret) {
			t.Errorf("the log holds %q:\n%s", secret, all)
		}
	}
}

// TestMetricsEndpoint: /metrics answers only with METRICS_TOKEN, in the
// Prometheus text format, with requests labelled by route template.
func TestMetricsEndpoint(t *testing.T) {
	reg := telemetry.NewRegistry()
	const metricsToken = "metrics-token-0123456789"
	w := fxNewWorldWith(t, handlerstest.Options{Metrics: reg, MetricsToken: metricsToken, DB: repo.Options{Metrics: repo.NewMetrics(reg)}})
	w.create(t, w.tok["doc"], fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2024-03-05T10:00:00Z")))})
	w.search(t, w.tok["doc"], fmt.Sprintf("/Observation?patient=%d", w.alice.ID))
	w.search(t, w.tok["doc"], fmt.Sprintf("/Patient/%d", w.alice.ID))

	scrape := func(token string) (int, string) { return handlerstest.GetText(t, w.env.URL+"/metrics", token) }
	for _, wrong := range []string{"", "metrics-token-012345678", w.tok["super"]} {
		if status, _ := scrape(wrong); status != http.StatusUnauthorized {
			t.Errorf("/metrics with token %q: %d, want 401", wrong, status)
		}
	}
	status, text := scrape(metricsToken)
	if status != http.StatusOK {
		t.Fatalf("/metrics: %d", status)
	}
	for _, want := range []string{
		`exchange_http_requests_total{method="GET",route="/FHIR/R5/:type",status="2xx"}`,
		`exchange_http_requests_total{method="GET",route="/FHIR/R5/:type/:id",status="2xx"}`,
		`exchange_fhir_observations_total{outcome="created"} 1`,
		`exchange_fhir_search_duration_seconds_count{store="native",type="Observation"} 1`,
		`exchange_db_operation_duration_seconds_count{collection="observations",operation="insert"}`,
		`exchange_db_operation_duration_seconds_count{collection="observations",operation="aggregate"}`,
		"go_goroutines", "process_cpu_seconds_total",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, text)
		}
	}
	if regexp.MustCompile(`route="[^"]*/[0-9]+"`).MatchString(text) {
		t.Error("a route label holds an id")
	}
}

// TestAuditTrail: a practitioner's search of a patient's observations is
// recorded with the patients whose data its page held; the patient reads
// it, and only the events about themselves; superusers search the trail
// by every parameter; the trail is read-only and valid R5.
func TestAuditTrail(t *testing.T) {
	w := fxNewWorldWith(t, handlerstest.Options{Audit: true})
	doc, super, alice := w.tok["doc"], w.tok["super"], w.tok["alice"]
	w.create(t, doc,
		fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2024-03-05T10:00:00Z")))},
		fxObs{patient: w.bob.ID, device: w.watch, code: fxHR, payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2024-03-06T10:00:00Z")))})
	if status, _ := w.search(t, doc, fmt.Sprintf("/Observation?patient=%d&code=%s", w.alice.ID, fxHR)); status != http.StatusOK {
		t.Fatalf("the practitioner's search: %d", status)
	}
	if status, _ := w.search(t, super, "/Observation"); status != http.StatusOK { // both patients' observations
		t.Fatalf("the superuser's search: %d", status)
	}
	// A search of a patient out of reach finds nothing, as for an id that
	// does not exist; the trail records it as refused.
	if status, _ := w.search(t, doc, fmt.Sprintf("/Observation?patient=%d", w.carol.ID)); status != http.StatusOK {
		t.Fatalf("a refused search: %d", status)
	}
	if err := w.env.Audit.Close(context.Background()); err != nil { // writes what is queued; reads are not recorded
		t.Fatal(err)
	}

	// Alice finds the practitioner's search of her observations.
	status, bundle := w.search(t, alice, fmt.Sprintf("/AuditEvent?patient=%d&entity-type=Observation&action=E", w.alice.ID))
	if status != http.StatusOK {
		t.Fatalf("alice's search of the trail: %d %v", status, bundle)
	}
	var docSearch map[string]any
	for _, e := range fxMatches(t, bundle) {
		if fxObj(fxObj(fxArr(e["agent"])[0])["who"])["reference"] == fmt.Sprintf("Practitioner/%d", w.doc.ID) {
			docSearch = e
		}
	}
	if docSearch == nil {
		t.Fatalf("alice does not see the practitioner's search: %v", bundle)
	}
	query, _ := base64.StdEncoding.DecodeString(fmt.Sprint(entityWithQuery(docSearch)["query"]))
	if fxObj(docSearch["patient"])["reference"] != fmt.Sprintf("Patient/%d", w.alice.ID) ||
		!strings.Contains(string(query), fmt.Sprintf("patient=%d", w.alice.ID)) ||
		fxObj(fxArr(fxObj(docSearch["code"])["coding"])[0])["code"] != "search-type" ||
		fxObj(fxObj(docSearch["outcome"])["code"])["code"] != "success" {
		t.Errorf("the practitioner's search as alice reads it: %v (query %q)", docSearch, query)
	}
	validator, _ := handlerstest.R5(t)
	issues, err := validator.ValidateObject(docSearch)
	if err != nil || len(issues) > 0 {
		t.Errorf("the AuditEvent is not valid R5: %v %v", issues, err)
	}

	// Every event alice sees is about her; the superuser's search of both
	// patients is among them, and bob finds it too.
	ids := w.ids(t, alice, "/AuditEvent")
	for _, id := range ids {
		_, e := w.env.GetJSON(t, fxBase+"/AuditEvent/"+id, alice)
		if !slices.Contains(auditPatients(e), fmt.Sprintf("Patient/%d", w.alice.ID)) {
			t.Errorf("alice sees AuditEvent/%s, which is not about her: %v", id, e)
		}
	}
	superSearch := w.ids(t, super, fmt.Sprintf("/AuditEvent?agent=Practitioner/%d&entity-type=Observation&action=E", w.super.ID))
	if len(superSearch) != 1 || !slices.Contains(ids, superSearch[0]) || !slices.Contains(w.ids(t, w.tok["bob"], "/AuditEvent"), superSearch[0]) {
		t.Errorf("the superuser's search %v: alice sees %v", superSearch, ids)
	}
	// ... but neither sees the other in it (ownView): the superuser, both.
	for _, reader := range []struct {
		token string
		other int64
	}{{alice, w.bob.ID}, {w.tok["bob"], w.alice.ID}} {
		if _, e := w.env.GetJSON(t, fxBase+"/AuditEvent/"+superSearch[0], reader.token); auditNames(e, reader.other) {
			t.Errorf("a patient reads the superuser's search of both with Patient/%d: %v", reader.other, e)
		}
	}
	if _, e := w.env.GetJSON(t, fxBase+"/AuditEvent/"+superSearch[0], super); !auditNames(e, w.alice.ID) || !auditNames(e, w.bob.ID) {
		t.Errorf("the superuser's own search, as the superuser reads it: %v", e)
	}
	// The refused search is recorded, with the patient it named.
	refused := w.ids(t, super, fmt.Sprintf("/AuditEvent?patient=%d&agent=Practitioner/%d", w.carol.ID, w.doc.ID))
	if len(refused) != 1 {
		t.Errorf("the refused search of carol's data: %v", refused)
	}

	// Nobody else reads the trail, and it takes no writes.
	if ids := w.ids(t, alice, fmt.Sprintf("/AuditEvent?patient=%d", w.bob.ID)); len(ids) != 0 { // bob is out of her sight: none
		t.Errorf("alice searching bob's events: %v", ids)
	}
	if status, _ := w.search(t, doc, "/AuditEvent"); status != http.StatusForbidden {
		t.Errorf("a practitioner searching the trail: %d", status)
	}
	bobsOnly := w.ids(t, w.tok["bob"], "/AuditEvent?entity-type=Observation&action=C")
	if len(bobsOnly) == 0 {
		t.Fatal("bob has no create event")
	}
	if resp, _ := w.env.GetJSON(t, fxBase+"/AuditEvent/"+bobsOnly[0], w.tok["carol"]); resp.StatusCode != http.StatusForbidden {
		t.Errorf("carol reading an event about bob: %d", resp.StatusCode)
	}
	for _, m := range []struct{ method, path string }{{"POST", "/AuditEvent"}, {"PUT", "/AuditEvent/" + ids[0]}, {"PATCH", "/AuditEvent/" + ids[0]},
		{"DELETE", "/AuditEvent/" + ids[0]}, {"PUT", "/AuditEvent/3f2c9a7e-1b4d-4c8e-9f00-123456789abc"}} {
		resp, body := w.env.Send(t, m.method, fxBase+m.path, super, `{"resourceType": "AuditEvent"}`)
		if resp.StatusCode != http.StatusMethodNotAllowed || body["resourceType"] != "OperationOutcome" {
			t.Errorf("%s %s: %d %v", m.method, m.path, resp.StatusCode, body)
		}
	}
	// Superusers search by date.
	today := time.Now().UTC().Format("2006-01-02")
	if n := len(w.ids(t, super, "/AuditEvent?date=ge"+today)); n != 4 { // the create, two searches and the refused one
		t.Errorf("events of today: %d", n)
	}
	if n := len(w.ids(t, super, "/AuditEvent?date=lt2000-01-01")); n != 0 {
		t.Errorf("events before 2000: %d", n)
	}
}

// TestAuditTrailOwnView: a patient reads an event that touched others as
// their own view (domain AuditEvent.ownView), on every path (search,
// read, _elements, a patient-scoped token of a superuser): no other
// patient's id, in the entities or in the query, whose other values are
// redacted but for codes; labelled REDACTED. The superuser reads it whole.
func TestAuditTrailOwnView(t *testing.T) {
	w := fxNewWorldWith(t, handlerstest.Options{Audit: true})
	doc, super := w.tok["doc"], w.tok["super"]
	w.create(t, doc,
		fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2024-03-05T10:00:00Z")))},
		fxObs{patient: w.bob.ID, device: w.watch, code: fxHR, payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2024-03-06T10:00:00Z")))})
	asked := fmt.Sprintf("/Observation?patient=%d,Patient/%d&code=%s&patient.identifier=%s|A-1,%s|B-2", w.alice.ID, w.bob.ID, fxHR, fxMRN, fxMRN)
	if status, body := w.search(t, doc, asked); status != http.StatusOK || len(fxMatches(t, body)) != 2 {
		t.Fatalf("the practitioner's search of both: %d %v", status, body)
	}
	validator, _ := handlerstest.R5(t)
	superCtx, _, err := w.env.OAuth.IssueScopedAccessToken(w.ctx, w.super.ID, time.Hour, []string{"patient/*.rs"}, w.bob.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Two patient/ scopes reach AuditEvents: two alternatives of reach,
	// which a patient= filter on another patient must not cross.
	superCtx2, _, err := w.env.OAuth.IssueScopedAccessToken(w.ctx, w.super.ID, time.Hour, []string{"patient/*.rs", "patient/AuditEvent.s"}, w.bob.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.env.Audit.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	found := w.ids(t, super, fmt.Sprintf("/AuditEvent?agent=Practitioner/%d&action=E", w.doc.ID))
	if len(found) != 1 {
		t.Fatalf("the practitioner's search in the trail: %v", found)
	}
	path := fxBase + "/AuditEvent/" + found[0]
	if _, e := w.env.GetJSON(t, path, super); !auditNames(e, w.alice.ID) || !auditNames(e, w.bob.ID) ||
		!strings.Contains(auditQuery(e), "B-2") || fxObj(e["meta"])["security"] != nil {
		t.Errorf("the superuser reads the event whole: %v (query %q)", e, auditQuery(e))
	}

	for _, reader := range []struct {
		name, token string
		self, other int64
	}{{"alice", w.tok["alice"], w.alice.ID, w.bob.ID}, {"bob", w.tok["bob"], w.bob.ID, w.alice.ID}, {"the superuser's app for bob", superCtx, w.bob.ID, w.alice.ID},
		{"the superuser's app for bob with two scopes", superCtx2, w.bob.ID, w.alice.ID}} {
		var seen []map[string]any
		_, e := w.env.GetJSON(t, path, reader.token)
		seen = append(seen, e)
		for _, q := range []string{"/AuditEvent?action=E", "/AuditEvent?action=E&_elements=entity,patient"} {
			status, bundle := w.search(t, reader.token, q)
			if status != http.StatusOK {
				t.Fatalf("%s: %s: %d %v", reader.name, q, status, bundle)
			}
			seen = append(seen, fxMatches(t, bundle)...)
		}
		if len(seen) != 3 {
			t.Errorf("%s finds the event %d times, want 3 (%v)", reader.name, len(seen), seen)
		}
		// Nor does a filter on the other patient tell which events touched
		// them: refused to a patient, who may not read them; nothing found
		// by the superuser's apps.
		q := fmt.Sprintf("/AuditEvent?action=E&patient=%d", reader.other)
		if status, bundle := w.search(t, reader.token, q); status != http.StatusForbidden && (status != http.StatusOK || len(fxArr(bundle["entry"])) > 0) {
			t.Errorf("%s: %s: %d %v, want 403 or nothing found", reader.name, q, status, bundle)
		}
		if issues, err := validator.ValidateObject(seen[0]); err != nil || len(issues) > 0 {
			t.Errorf("%s's own view is not valid R5: %v %v", reader.name, issues, err)
		}
		want := url.Values{"code": {fxHR}, "patient": {fmt.Sprint(w.alice.ID) + ",(redacted)"}, "patient.identifier": {"(redacted),(redacted)"}}
		if reader.self == w.bob.ID {
			want["patient"] = []string{fmt.Sprintf("(redacted),Patient/%d", w.bob.ID)}
		}
		for _, e := range seen {
			if auditNames(e, reader.other) || !auditNames(e, reader.self) {
				t.Errorf("%s reads the search of both with the other patient, or without themselves: %v", reader.name, e)
			}
			if got, _ := url.ParseQuery(auditQuery(e)); !reflect.DeepEqual(got, want) {
				t.Errorf("%s reads the query as %v, want %v", reader.name, got, want)
			}
			if e["meta"] != nil && fmt.Sprint(fxObj(e["meta"])["security"]) != "[map[code:REDACTED display:redacted system:http://terminology.hl7.org/CodeSystem/v3-ObservationValue]]" {
				t.Errorf("%s: the redacted event is not labelled so: %v", reader.name, e["meta"])
			}
		}
	}
}

// auditNames reports whether an AuditEvent names the patient anywhere: an
// entity, its patient, its query.
func auditNames(e map[string]any, patient int64) bool {
	ref := fmt.Sprintf("Patient/%d", patient)
	if slices.Contains(auditPatients(e), ref) || fxObj(e["patient"])["reference"] == ref {
		return true
	}
	q, _ := url.ParseQuery(auditQuery(e))
	for _, vs := range q {
		for _, v := range vs {
			for _, part := range strings.Split(v, ",") {
				if part == ref || part == fmt.Sprint(patient) {
					return true
				}
			}
		}
	}
	return false
}

// auditQuery is the decoded query of an AuditEvent; "" when it has none.
func auditQuery(e map[string]any) string {
	q, _ := base64.StdEncoding.DecodeString(fmt.Sprint(entityWithQuery(e)["query"]))
	return string(q)
}

// entityWithQuery is the entity of an AuditEvent that carries its query.
func entityWithQuery(e map[string]any) map[string]any {
	for _, x := range fxArr(e["entity"]) {
		if fxObj(x)["query"] != nil {
			return fxObj(x)
		}
	}
	return nil
}

// auditPatients are the references of an AuditEvent's patient entities.
func auditPatients(e map[string]any) []string {
	var out []string
	for _, x := range fxArr(e["entity"]) {
		if ref, _ := fxObj(fxObj(x)["what"])["reference"].(string); strings.HasPrefix(ref, "Patient/") {
			out = append(out, ref)
		}
	}
	return out
}

// TestReadyNamesAStorePastItsSize: /ready says when the embedded database
// is past the size it searches comfortably, and stays 200 (it serves,
// slower). /ready answers anyone: the line gives no count.
func TestReadyNamesAStorePastItsSize(t *testing.T) {
	env := handlerstest.StartWith(t, handlerstest.Options{ComfortableObservations: 2,
		Loaded: map[string]bool{"indexes": true}, Logger: slog.New(slog.DiscardHandler)})
	observe := func(n int) { env.AddBareObservations(t, n) }
	observe(2)
	resp, body := env.GetJSON(t, "/ready", "")
	if _, said := body["embeddedDatabase"]; resp.StatusCode != http.StatusOK || said {
		t.Errorf("/ready within the size: %d %v", resp.StatusCode, body)
	}
	observe(1)
	resp, body = env.GetJSON(t, "/ready", "")
	line, _ := body["embeddedDatabase"].(string)
	if resp.StatusCode != http.StatusOK || body["status"] != "ready" || !strings.Contains(line, "past its comfortable size") ||
		!strings.Contains(line, "MONGODB_URI") {
		t.Errorf("/ready past the size: %d %v", resp.StatusCode, body)
	}
	for k, v := range body {
		if s := fmt.Sprint(v); strings.ContainsAny(s, "0123456789") {
			t.Errorf("/ready's %s gives a number to anyone: %q", k, s)
		}
	}
}
