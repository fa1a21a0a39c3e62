package handlers_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/converter"
)

// The R4 import at /fhir-import/R4: request checks, per-entry outcomes
// with the data-loss report, routing to the imported and native stores.

const fxImportBase = "/fhir-import/R4"

// importR4 posts to the R4 import as a user, naming a source id ("" for
// none), and returns the status and the decoded answer.
func (w *fxImported) importR4(t *testing.T, who, source, path, body string) (int, map[string]any) {
	t.Helper()
	h := map[string]string{"Authorization": "Bearer " + w.tok[who]}
	if source != "" {
		h["X-SERVICE-FHIR-Source-ID"] = source
	}
	resp, out := fxDo(t, w.env, "POST", fxImportBase+path, h, body)
	return resp.StatusCode, fxDecode(t, out)
}

// fxImportEntry is a batch-response entry of an import, read.
type fxImportEntry struct {
	status   string
	resource map[string]any
	issues   []map[string]any
}

func fxImportEntries(t *testing.T, b map[string]any) []fxImportEntry {
	t.Helper()
	if b["resourceType"] != "Bundle" || b["type"] != "batch-response" {
		t.Fatalf("not a batch-response Bundle: %v", b)
	}
	var out []fxImportEntry
	for _, e := range fxArr(b["entry"]) {
		resp := fxObj(fxObj(e)["response"])
		var issues []map[string]any
		for _, i := range fxArr(fxObj(resp["outcome"])["issue"]) {
			issues = append(issues, fxObj(i))
		}
		res, _ := fxObj(e)["resource"].(map[string]any)
		out = append(out, fxImportEntry{status: fmt.Sprint(resp["status"]), resource: res, issues: issues})
	}
	return out
}

func TestImportR4RequestChecks(t *testing.T) {
	w := fxNewImported(t)
	patient := `{"resourceType": "Patient", "id": "p1", "gender": "female"}`
	src := fmt.Sprint(w.aliceSrc.ID)
	for _, c := range []struct {
		name, who, source string
		status            int
		code              string
	}{
		{"no source header", "doc", "", 400, "invalid"},
		{"a source that is not a number", "doc", "abc", 400, "invalid"},
		{"an unknown source", "doc", "99999", 400, "invalid"},
		{"a source of a patient the caller may not see: as an unknown one", "outsider", src, 400, "invalid"},
		{"a viewer may not write", "viewer", src, 403, "forbidden"},
	} {
		status, out := w.importR4(t, c.who, c.source, "/Patient", patient)
		if status != c.status || out["resourceType"] != "OperationOutcome" || fxObj(fxArr(out["issue"])[0])["code"] != c.code {
			t.Errorf("%s: %d %v", c.name, status, out)
		}
	}
	for _, method := range []string{"GET", "PUT", "PATCH", "DELETE"} {
		for _, path := range []string{"", "/Patient", "/Patient/p1"} {
			resp, body := fxDo(t, w.env, method, fxImportBase+path, map[string]string{"Authorization": "Bearer " + w.tok["doc"]}, "")
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" || !strings.Contains(string(body), "OperationOutcome") {
				t.Errorf("%s %s: %d %s", method, path, resp.StatusCode, body)
			}
		}
	}
	if resp, _ := fxDo(t, w.env, "POST", fxImportBase+"/Patient", nil, patient); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no token: %d", resp.StatusCode)
	}
	// Bodies refused whole, in words a client can act on (no Go type names).
	tooMany := `{"resourceType":"Bundle","type":"batch","entry":[` + strings.Repeat(`{},`, 10_000) + `{}]}`
	for _, c := range []struct{ name, path, body, want string }{
		{"a Bundle that is an array", "", `[1,2]`, "the Bundle must be a JSON object"},
		{"a Bundle that is a string", "", `"x"`, "the Bundle must be a JSON object"},
		{"a Bundle cut short", "", `{"resourceType":"Bundle","entry":[`, "the Bundle is not valid JSON"},
		{"an entry that is not an object", "", `{"resourceType":"Bundle","entry":[1]}`, "must be an object"},
		{"more than 10,000 entries", "", tooMany, "at most 10000"},
	} {
		status, out := w.importR4(t, "doc", src, c.path, c.body)
		text := fmt.Sprint(out)
		if status != 400 || !strings.Contains(text, c.want) || strings.Contains(text, "handlers.") || strings.Contains(text, "Go value") {
			t.Errorf("%s: %d %v", c.name, status, out)
		}
	}
	// A member named twice is refused, as an R5 create refuses it.
	status, out := w.importR4(t, "doc", src, "/Patient", `{"resourceType": "Patient", "id": "p2", "gender": "female", "gender": "male"}`)
	if entries := fxArr(out["entry"]); status != 200 || len(entries) != 1 || !strings.Contains(fmt.Sprint(entries[0]), `the member "gender" appears twice`) {
		t.Errorf("duplicate member: %d %v", status, out)
	}
	// So is one named twice deeper in, and a string that is not UTF-8:
	// the converter reads the JSON strictly, not settling either by a map.
	for name, body := range map[string]string{
		"nested duplicate": `{"resourceType": "Patient", "name": [{"family": "Doe", "family": "Roe"}]}`,
		"invalid UTF-8":    "{\"resourceType\": \"Patient\", \"name\": [{\"family\": \"Do\xffe\"}]}",
	} {
		status, out := w.importR4(t, "doc", src, "/Patient", body)
		e := fxArr(out["entry"])
		if status != 200 || len(e) != 1 || !strings.HasPrefix(fmt.Sprint(fxObj(fxObj(e[0])["response"])["status"]), "400") ||
			!strings.Contains(fmt.Sprint(e[0]), "the R4 resource is not valid JSON") {
			t.Errorf("%s: %d %v", name, status, out)
		}
	}
	if n := w.count(t); n != 0 {
		t.Errorf("%d resources stored by refused requests", n)
	}
}

func TestImportR4OneResource(t *testing.T) {
	w := fxNewImported(t)
	src := fmt.Sprint(w.aliceSrc.ID)
	longID := strings.Repeat("x", 100) // an R4 id has at most 64 characters
	condition := `{"resourceType": "Condition", "id": "` + longID + `",
		"clinicalStatus": {"coding": [{"system": "http://terminology.hl7.org/CodeSystem/condition-clinical", "code": "active"}]},
		"code": {"coding": [{"system": "http://snomed.info/sct", "code": "44054006"}]},
		"subject": {"reference": "Patient/123"}, "onsetDateTime": "2015-06-10",
		"evidence": [{"code": [{"text": "glucose"}], "detail": [{"reference": "Observation/o1"}]}]}`
	status, out := w.importR4(t, "doc", src, "/Condition", condition)
	if status != http.StatusOK {
		t.Fatalf("%d %v", status, out)
	}
	e := fxImportEntries(t, out)
	if len(e) != 1 || e[0].status != "201 Created" || len(e[0].issues) != 1 || e[0].issues[0]["severity"] != "information" ||
		!strings.Contains(fmt.Sprint(e[0].issues[0]["diagnostics"]), converter.MapSetVersion) {
		t.Fatalf("entry %+v", e)
	}
	r := e[0].resource
	if !fxUUID.MatchString(fmt.Sprint(r["id"])) || fxObj(r["meta"])["source"] != fxSourceURI(w.aliceSrc) {
		t.Errorf("stamped %v", r)
	}
	if ids := fxArr(r["identifier"]); len(ids) != 1 || fxObj(ids[0])["value"] != longID || fxObj(ids[0])["system"] != fxSourceURI(w.aliceSrc)+"/id" {
		t.Errorf("identifier %v", r["identifier"])
	}
	evidence := fxArr(r["evidence"])
	if len(evidence) != 2 || fmt.Sprint(evidence[0]) != "map[concept:map[text:glucose]]" ||
		fxCompact(evidence[1]) != `{"reference":{"identifier":{"system":"`+fxSourceURI(w.aliceSrc)+`/id","value":"o1"},"reference":"Observation/48a1c302-28f7-5f09-bef0-f8c56e22d8aa"}}` {
		t.Errorf("evidence (CodeableConcept and Reference into CodeableReference) %v", evidence)
	}
	// Stored and readable like any imported resource; a second import is a duplicate.
	resp, body := w.do(t, "doc", "GET", "/Condition/"+fmt.Sprint(r["id"]), nil, "")
	if resp.StatusCode != http.StatusOK || fxDecode(t, body)["onsetDateTime"] != "2015-06-10" {
		t.Errorf("read %d %s", resp.StatusCode, body)
	}
	_, again := w.importR4(t, "doc", src, "/Condition", condition)
	if e := fxImportEntries(t, again); e[0].status != "409 Conflict" || e[0].issues[0]["code"] != "duplicate" || e[0].resource != nil {
		t.Errorf("re-import %+v", e)
	}
	// The type the URL names must be the resource's.
	_, wrong := w.importR4(t, "doc", src, "/Patient", condition)
	if e := fxImportEntries(t, wrong); e[0].status != "400 Bad Request" {
		t.Errorf("type mismatch %+v", e)
	}
	if n := w.count(t); n != 1 {
		t.Errorf("%d resources stored, want 1", n)
	}
}

// The R4 id becomes the resource's upstream identifier by its value, however
// the sender escaped it; an id that is not a string is refused by its field,
// and nothing is stored for it.
func TestImportR4IDForms(t *testing.T) {
	w := fxNewImported(t)
	src := fmt.Sprint(w.aliceSrc.ID)
	for _, c := range []struct{ name, id, status, value string }{
		{"escaped", `"p\u002F3\u003c"`, "201 Created", "p/3<"},
		{"a number", `12`, "400 Bad Request", ""},
		{"an object", `{"x": [1, 2]}`, "400 Bad Request", ""},
		{"an array", `["p4"]`, "400 Bad Request", ""},
	} {
		_, out := w.importR4(t, "doc", src, "/Patient", `{"resourceType": "Patient", "id": `+c.id+`, "gender": "female"}`)
		e := fxImportEntries(t, out)
		if len(e) != 1 || e[0].status != c.status {
			t.Errorf("%s: %+v", c.name, e)
			continue
		}
		if c.value == "" {
			if !strings.Contains(fmt.Sprint(e[0].issues), "Patient.id") {
				t.Errorf("%s: the refusal names no field: %+v", c.name, e[0].issues)
			}
			continue
		}
		if ids := fxArr(e[0].resource["identifier"]); len(ids) != 1 || fxObj(ids[0])["value"] != c.value {
			t.Errorf("%s: identifier %v", c.name, e[0].resource["identifier"])
		}
	}
	if n := w.count(t); n != 1 {
		t.Errorf("%d resources stored, want 1", n)
	}
}

// What the conversion did is in each entry's OperationOutcome: a code the
// official ConceptMaps translated (information), a value dropped even
// when its text survives elsewhere (warning), an element R5 requires and
// R4 could not give (information); each with its path.
func TestImportR4Fidelity(t *testing.T) {
	w := fxNewImported(t)
	src := fmt.Sprint(w.aliceSrc.ID)
	entries := []string{
		`{"resourceType": "Encounter", "id": "e1", "status": "finished", "_status": {"extension": [{"url": "http://example.org/n", "valueString": "closed"}]},
			"class": {"system": "http://terminology.hl7.org/CodeSystem/v3-ActCode", "code": "AMB"}, "subject": {"reference": "Patient/p1"}}`,
		`{"resourceType": "Organization", "id": "o1", "name": "555-0100", "telecom": [{"system": "phone", "value": "555-0100"}],
			"contact": [{"telecom": [{"system": "phone", "value": "555-0199"}]}]}`,
		`{"resourceType": "Coverage", "id": "c1", "status": "active", "beneficiary": {"reference": "Patient/p1"}, "payor": [{"reference": "Organization/o1"}]}`,
	}
	body := `{"resourceType": "Bundle", "type": "batch", "entry": [{"resource": ` + strings.Join(entries, `}, {"resource": `) + `}]}`
	status, out := w.importR4(t, "doc", src, "", body)
	if status != http.StatusOK {
		t.Fatalf("%d %v", status, out)
	}
	e := fxImportEntries(t, out)
	issues := func(x fxImportEntry) string {
		var s []string
		for _, i := range x.issues {
			s = append(s, fmt.Sprintf("%v %v %v", i["severity"], i["expression"], i["diagnostics"]))
		}
		return strings.Join(s, "; ")
	}
	want := []string{
		"information <nil> converted from R4 with no detected field loss (" + converter.MapSetVersion + "); " +
			"information [Encounter.status] R4 code finished translated to R5 code completed by ConceptMap http://hl7.org/fhir/uv/xver/ConceptMap/enc.status-4to5",
		"warning [Organization.telecom] the R4 value at Organization.telecom has no place in the R5 resource and was dropped (" + converter.MapSetVersion + ")",
		"warning [Coverage.payor] the R4 value at Coverage.payor has no place in the R5 resource and was dropped (" + converter.MapSetVersion + "); " +
			"information [Coverage.kind] R5 requires Coverage.kind, which the R4 resource does not give: it is sent without a value, marked by the data-absent-reason extension (unsupported)",
	}
	for i, x := range e {
		if x.status != "201 Created" || issues(x) != want[i] {
			t.Errorf("entry %d: %s, %s\nwant %s", i, x.status, issues(x), want[i])
		}
	}
	if len(e) != 3 {
		t.Fatalf("%d entries", len(e))
	}
	// Stored as converted: the translated code with its extension, the
	// required element marked absent.
	if r := e[0].resource; r["status"] != "completed" || fmt.Sprint(r["_status"]) != "map[extension:[map[url:http://example.org/n valueString:closed]]]" {
		t.Errorf("Encounter %v", r)
	}
	if r := e[2].resource; fmt.Sprint(r["_kind"]) != "map[extension:[map[url:http://hl7.org/fhir/StructureDefinition/data-absent-reason valueCode:unsupported]]]" {
		t.Errorf("Coverage %v", r)
	}
}

// A null value aligned with an extension is valid R4 JSON: the import
// takes the resource, and since R5 JSON (as the official schema reads
// it) has no null among values, the entry's OperationOutcome reports the
// extension dropped; the other values are stored.
func TestImportR4NullValueWithAnExtension(t *testing.T) {
	w := fxNewImported(t)
	status, out := w.importR4(t, "doc", fmt.Sprint(w.aliceSrc.ID), "/Patient", `{"resourceType": "Patient",
		"name": [{"given": [null, "Ann"], "_given": [{"extension": [{"url": "http://x", "valueString": "y"}]}, null]}]}`)
	if status != http.StatusOK {
		t.Fatalf("%d %v", status, out)
	}
	e := fxImportEntries(t, out)
	if len(e) != 1 || e[0].status != "201 Created" || fmt.Sprint(e[0].resource["name"]) != "[map[given:[Ann]]]" ||
		!slices.ContainsFunc(e[0].issues, func(i map[string]any) bool {
			return i["severity"] == "warning" && fmt.Sprint(i["expression"]) == "[Patient.name._given]"
		}) {
		t.Errorf("%+v, want 201 with Patient.name._given reported dropped", e)
	}
}

func TestImportR4Bundle(t *testing.T) {
	w := fxNewImported(t)
	src := fmt.Sprint(w.aliceSrc.ID)
	hr := fxObs{device: w.watch, code: fxHR, identifiers: []string{"r4-hr-1"}, payload: fxDataPoint(fxHR, fxHeartRate(map[string]any{"date_time": "2025-01-02T03:04:05Z"}))}.resource()
	hr["subject"] = map[string]any{"reference": "Patient/upstream-77"}
	hr["id"] = "obs-1"
	// R4 has no valueAttachment, so an Open mHealth Observation cannot
	// carry its data point in R4: it takes the native path, which refuses
	// it for that reason, and nothing reaches the imported store.
	delete(hr, "valueAttachment")
	entries := []any{
		// 0: converted with a loss: Encounter.classHistory has no R5 home,
		// and R5 has no status `arrived` (its ConceptMap has no
		// translation): invalid, so refused with both.
		map[string]any{"resource": json.RawMessage(`{"resourceType": "Encounter", "id": "enc1", "status": "arrived",
			"class": {"code": "AMB"}, "classHistory": [{"class": {"code": "IMP"}, "period": {"start": "2020"}}]}`)},
		// 1: a Device: its patient has no R5 home: created with a warning.
		map[string]any{"resource": json.RawMessage(`{"resourceType": "Device", "id": "d1", "status": "active", "patient": {"reference": "Patient/p1"}}`),
			"request": map[string]any{"method": "POST", "url": "Device"}},
		// 2: not a create.
		map[string]any{"resource": json.RawMessage(`{"resourceType": "Patient", "id": "p1"}`), "request": map[string]any{"method": "PUT", "url": "Patient/p1"}},
		// 3: a type no R4 -> R5 map converts (R5 has no Media).
		map[string]any{"resource": json.RawMessage(`{"resourceType": "Media", "id": "m1", "status": "completed", "content": {"contentType": "image/png"}}`)},
		// 4: malformed R4 (a date the R4 check refuses).
		map[string]any{"resource": json.RawMessage(`{"resourceType": "Patient", "id": "p2", "birthDate": "yesterday"}`)},
		// 5: an Open mHealth heart rate: the native path.
		map[string]any{"resource": hr},
		// 6: no resource.
		map[string]any{"request": map[string]any{"method": "POST", "url": "Patient"}},
		// 7: not R4 at all.
		map[string]any{"resource": json.RawMessage(`{"resourceType": "Nonsense"}`)},
	}
	body, _ := json.Marshal(map[string]any{"resourceType": "Bundle", "type": "transaction", "entry": entries})
	status, out := w.importR4(t, "doc", src, "", string(body))
	if status != http.StatusOK {
		t.Fatalf("%d %v", status, out)
	}
	e := fxImportEntries(t, out)
	if len(e) != len(entries) {
		t.Fatalf("%d entries for %d", len(e), len(entries))
	}
	severities := func(x fxImportEntry) string {
		var s []string
		for _, i := range x.issues {
			s = append(s, fmt.Sprintf("%v %v %v", i["severity"], i["code"], i["expression"]))
		}
		return strings.Join(s, "; ")
	}
	want := []struct{ status, issues string }{
		{"400 Bad Request", "error invalid [Encounter.status]; warning informational [Encounter.classHistory]"},
		{"201 Created", "warning informational [Device.patient]"},
		{"400 Bad Request", "error invalid [Bundle.entry[2].request.method]"},
		{"400 Bad Request", "error not-supported <nil>"},
		{"400 Bad Request", "error invalid [Patient.birthDate]"},
		{"400 Bad Request", "error invalid [Observation.valueAttachment.contentType]"},
		{"400 Bad Request", "error invalid [Bundle.entry[6].resource]"},
		{"400 Bad Request", "error not-supported <nil>"},
	}
	for i, x := range e {
		if x.status != want[i].status || severities(x) != want[i].issues {
			t.Logf("entry %d issues: %v", i, x.issues)
			t.Errorf("entry %d: %s, %s; want %s, %s", i, x.status, severities(x), want[i].status, want[i].issues)
		}
	}
	if n := w.count(t); n != 1 {
		t.Errorf("%d imported resources, want 1 (the Device)", n)
	}
	var device map[string]any
	if err := w.resources.FindOne(w.ctx, bson.M{"resourceType": "Device"}).Decode(&device); err != nil || device["upstreamId"] != "d1" {
		t.Errorf("stored Device %v %v", device, err)
	}
}

// A missing or null resource is named as such, at the place it is missing.
func TestImportR4MissingResources(t *testing.T) {
	w := fxNewImported(t)
	src := fmt.Sprint(w.aliceSrc.ID)
	_, out := w.importR4(t, "doc", src, "", `{"resourceType": "Bundle", "type": "batch", "entry": [{"resource": null}, {}]}`)
	entries := fxImportEntries(t, out)
	if len(entries) != 2 {
		t.Fatalf("%d entries answered for 2: %v", len(entries), out)
	}
	for i, e := range entries {
		if e.status != "400 Bad Request" || fmt.Sprint(e.issues[0]["expression"]) != fmt.Sprintf("[Bundle.entry[%d].resource]", i) ||
			!strings.Contains(fmt.Sprint(e.issues[0]["diagnostics"]), "is required") {
			t.Errorf("entry %d: %+v", i, e)
		}
	}
	for _, body := range []string{"", "null"} {
		_, out := w.importR4(t, "doc", src, "/Patient", body)
		if e := fxImportEntries(t, out); e[0].status != "400 Bad Request" || fmt.Sprint(e[0].issues[0]["expression"]) != "[Patient]" ||
			!strings.Contains(fmt.Sprint(e[0].issues[0]["diagnostics"]), "request body is required") {
			t.Errorf("body %q: %+v", body, e)
		}
	}
}

// TestImportR4EntryIsTheStoredJSON: a created entry of the answer carries
// the resource byte for byte as the store keeps it and a read sends it
// (markup, escapes and decimals as written).
func TestImportR4EntryIsTheStoredJSON(t *testing.T) {
	w := fxNewImported(t)
	h := map[string]string{"Authorization": "Bearer " + w.tok["doc"], "X-SERVICE-FHIR-Source-ID": fmt.Sprint(w.aliceSrc.ID)}
	body := `{"resourceType": "Bundle", "type": "batch", "entry": [{"resource": {"resourceType": "Condition", "id": "c9",
		"subject": {"reference": "Patient/p"}, "code": {"text": "<b>flu</b> & \u00e9 \u2028"},
		"onsetAge": {"value": 1.50, "unit": "a"}}}]}`
	resp, out := fxDo(t, w.env, "POST", fxImportBase, h, body)
	e := fxImportEntries(t, fxDecode(t, out))
	if resp.StatusCode != http.StatusOK || len(e) != 1 || e[0].status != "201 Created" {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	read, stored := fxDo(t, w.env, "GET", "/FHIR/R5/Condition/"+fmt.Sprint(e[0].resource["id"]), map[string]string{"Authorization": "Bearer " + w.tok["doc"]}, "")
	if read.StatusCode != http.StatusOK || !bytes.Contains(out, append(append([]byte(`"resource":`), stored...), ',')) {
		t.Errorf("the entry's resource is not the stored JSON %s:\n%s", stored, out)
	}
}

// TestImportR4RefusesNullsAndOverflows: FHIR JSON has no null members and
// a decimal must be a number: the R4 check refuses both, each entry a 400
// whose OperationOutcome names the element, and stores nothing.
func TestImportR4RefusesNullsAndOverflows(t *testing.T) {
	w := fxNewImported(t)
	src := fmt.Sprint(w.aliceSrc.ID)
	for _, c := range []struct{ name, path, body, at string }{
		{"a null name", "/Patient", `{"resourceType": "Patient", "name": null}`, "Patient.name"},
		{"a null extension sibling", "/Patient", `{"resourceType": "Patient", "birthDate": "1990-01-01", "_birthDate": null}`, "Patient.birthDate"},
		{"a decimal beyond range", "/Observation", `{"resourceType": "Observation", "status": "final", "code": {"text": "x"}, "valueQuantity": {"value": 1e999999}}`, "Observation.valueQuantity.value"},
		{"a null item of a datatype", "/Patient", `{"resourceType": "Patient", "name": [null]}`, "Patient.name[0]"},
		{"a null value without an extension", "/Patient", `{"resourceType": "Patient", "name": [{"given": [null]}]}`, "Patient.name[0].given[0]"},
		{"a null value aligned with a null", "/Patient", `{"resourceType": "Patient", "name": [{"given": [null, "Ann"], "_given": [null, {"id": "g"}]}]}`, "Patient.name[0].given[0]"},
		{"extensions longer than the values", "/Patient", `{"resourceType": "Patient", "name": [{"given": [null], "_given": [{"id": "g"}, {"id": "h"}]}]}`, "Patient.name[0].given"},
		{"extensions shorter than the values", "/Patient", `{"resourceType": "Patient", "name": [{"given": [null, "Ann"], "_given": [{"id": "g"}]}]}`, "Patient.name[0].given"},
	} {
		status, out := w.importR4(t, "doc", src, c.path, c.body)
		if status != http.StatusOK {
			t.Fatalf("%s: %d %v", c.name, status, out)
		}
		e := fxImportEntries(t, out)
		if len(e) != 1 || e[0].status != "400 Bad Request" || e[0].resource != nil ||
			!slices.ContainsFunc(e[0].issues, func(i map[string]any) bool { return fmt.Sprint(i["expression"]) == "["+c.at+"]" }) {
			t.Errorf("%s: %+v, want 400 naming %s", c.name, e, c.at)
		}
	}
	if n := w.count(t); n != 0 {
		t.Errorf("%d resources stored, want none", n)
	}
}
