package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/repo/repotest"
)

// The imported store over FHIR: creates naming their FHIR source,
// provenance, versions, the R5 gate, and search on the 28 types.

var fxUUID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// fxImported is the FHIR fixture with a FHIR source for alice and one for
// carol.
type fxImported struct {
	*fxWorld
	aliceSrc, carolSrc *domain.FHIRSource
	// resources is the imported store's collection, read directly as an
	// analyst would.
	resources *mongo.Collection
}

func fxNewImported(t *testing.T) *fxImported { return fxNewImportedWith(t, behindLoopbackProxy) }

// fxNewImportedWith is fxNewImported on an exchange started with options.
func fxNewImportedWith(t *testing.T, o handlerstest.Options) *fxImported {
	w := &fxImported{fxWorld: fxNewWorldWith(t, o)}
	w.aliceSrc = fxMust(w.env.Service.CreateFHIRSource(w.ctx, fxSys, w.alice.ID, 0, "Hospital EHR"))
	w.carolSrc = fxMust(w.env.Service.CreateFHIRSource(w.ctx, fxSys, w.carol.ID, 0, "Clinic EHR"))
	w.resources = repotest.Collection(t, w.env.DB, "resources")
	return w
}

func fxSourceURI(src *domain.FHIRSource) string {
	return domain.SourceURI(handlerstest.SourceBase, src.ID)
}

func fxSourceHeader(src *domain.FHIRSource) map[string]string {
	return map[string]string{domain.SourceHeader: fmt.Sprint(src.ID)}
}

// do sends a FHIR request as a user, with more headers.
func (w *fxImported) do(t *testing.T, who, method, path string, header map[string]string, body string) (*http.Response, []byte) {
	t.Helper()
	h := map[string]string{"Authorization": "Bearer " + w.tok[who]}
	for k, v := range header {
		h[k] = v
	}
	return fxDo(t, w.env, method, fxBase+path, h, body)
}

// post creates a resource and returns it; the create must succeed.
func (w *fxImported) post(t *testing.T, who string, src *domain.FHIRSource, resource string) map[string]any {
	t.Helper()
	var rt struct{ ResourceType string }
	_ = json.Unmarshal([]byte(resource), &rt)
	resp, body := w.do(t, who, "POST", "/"+rt.ResourceType, fxSourceHeader(src), resource)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create %s: %d %s", rt.ResourceType, resp.StatusCode, body)
	}
	return fxDecode(t, body)
}

// count is the number of documents of the imported store.
func (w *fxImported) count(t *testing.T) int64 {
	t.Helper()
	n, err := w.resources.CountDocuments(w.ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// fxIssues returns the issues of an OperationOutcome.
func fxIssues(t *testing.T, body []byte) []map[string]any {
	t.Helper()
	oo := fxDecode(t, body)
	if oo["resourceType"] != "OperationOutcome" {
		t.Fatalf("not an OperationOutcome: %s", body)
	}
	var out []map[string]any
	for _, i := range fxArr(oo["issue"]) {
		out = append(out, fxObj(i))
	}
	return out
}

const fxCondition = `{"resourceType": "Condition", "id": "upstream-1",
	"meta": {"profile": ["http://hl7.org/fhir/us/core/StructureDefinition/us-core-condition-problems-health-concerns"]},
	"clinicalStatus": {"coding": [{"system": "http://terminology.hl7.org/CodeSystem/condition-clinical", "code": "active"}]},
	"code": {"coding": [{"system": "http://snomed.info/sct", "code": "44054006"}]},
	"subject": {"reference": "Patient/123"},
	"onsetDateTime": "2015-06-10"}`

func TestImportedCreateNamesItsSource(t *testing.T) {
	w := fxNewImported(t)
	withMeta := func(resource, source string) string {
		return strings.Replace(resource, `"meta": {`, `"meta": {"source": "`+source+`", `, 1)
	}
	withID := func(resource, id string) string { return strings.Replace(resource, "upstream-1", id, 1) }
	for _, c := range []struct {
		name, who string
		header    map[string]string
		body      string
		status    int
		source    *domain.FHIRSource // where it is stored
		issue     string
	}{
		{"the header", "doc", fxSourceHeader(w.aliceSrc), withID(fxCondition, "h"), http.StatusCreated, w.aliceSrc, ""},
		{"meta.source", "doc", nil, withID(withMeta(fxCondition, fxSourceURI(w.aliceSrc)), "m"), http.StatusCreated, w.aliceSrc, ""},
		{"both: the header wins", "super", fxSourceHeader(w.carolSrc), withID(withMeta(fxCondition, fxSourceURI(w.aliceSrc)), "b"), http.StatusCreated, w.carolSrc, ""},
		{"the patient themselves", "alice", fxSourceHeader(w.aliceSrc), withID(fxCondition, "p"), http.StatusCreated, w.aliceSrc, ""},
		{"neither", "doc", nil, fxCondition, http.StatusBadRequest, nil, "invalid"},
		{"meta.source under another base", "doc", nil, withMeta(fxCondition, "https://elsewhere.example.org/fhir-source/1"), http.StatusBadRequest, nil, "invalid"},
		{"an unknown source in the header", "doc", map[string]string{domain.SourceHeader: "424242"}, fxCondition, http.StatusBadRequest, nil, "invalid"},
		{"an unknown source in meta.source", "doc", nil, withMeta(fxCondition, handlerstest.SourceBase+"/424242"), http.StatusBadRequest, nil, "invalid"},
		{"a header that is no id", "doc", map[string]string{domain.SourceHeader: "ehr"}, fxCondition, http.StatusBadRequest, nil, "invalid"},
		{"a source of a patient of another organization", "outsider", fxSourceHeader(w.aliceSrc), fxCondition, http.StatusBadRequest, nil, "invalid"},
		{"a viewer may not write", "viewer", fxSourceHeader(w.aliceSrc), fxCondition, http.StatusForbidden, nil, "forbidden"},
		{"another patient's source", "alice", fxSourceHeader(w.carolSrc), fxCondition, http.StatusBadRequest, nil, "invalid"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := w.count(t)
			resp, body := w.do(t, c.who, "POST", "/Condition", c.header, c.body)
			if resp.StatusCode != c.status {
				t.Fatalf("%d %s, want %d", resp.StatusCode, body, c.status)
			}
			if c.status != http.StatusCreated {
				if issues := fxIssues(t, body); issues[0]["code"] != c.issue {
					t.Errorf("issue %v, want %s", issues, c.issue)
				}
				if w.count(t) != before {
					t.Error("a refused create wrote something")
				}
				return
			}
			r := fxDecode(t, body)
			meta := fxObj(r["meta"])
			id, _ := r["id"].(string)
			if !fxUUID.MatchString(id) || meta["source"] != fxSourceURI(c.source) || meta["versionId"] != "1" || !fxInstant.MatchString(fmt.Sprint(meta["lastUpdated"])) {
				t.Errorf("stored %s", body)
			}
			if resp.Header.Get("Location") != w.env.URL+fxBase+"/Condition/"+id+"/_history/1" || resp.Header.Get("ETag") != `W/"1"` || resp.Header.Get("Last-Modified") == "" {
				t.Errorf("headers %v", resp.Header)
			}
		})
	}
}

func TestImportedProvenance(t *testing.T) {
	w := fxNewImported(t)
	// The JSON as sent: member order, decimals, unicode and an upstream id
	// longer than FHIR ids may be.
	long := strings.Repeat("x", 120)
	sent := `{"resourceType":"Observation","id":"` + long + `","status":"final",` +
		`"code":{"coding":[{"system":"http://loinc.org","code":"8867-4"}],"text":"Fréquence cardiaque"},` +
		`"identifier":[{"system":"http://ehr.example.org/obs","value":"o-1"}],` +
		`"valueQuantity":{"value":61.50,"unit":"/min","system":"http://unitsofmeasure.org","code":"/min"},"note":[{"text":"1e2 < 3 & \"quoted\""}]}`
	r := w.post(t, "doc", w.aliceSrc, sent)
	id := r["id"].(string)
	resp, stored := w.do(t, "doc", "GET", "/Observation/"+id, nil, "")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") != `W/"1"` || resp.Header.Get("Content-Type") != "application/fhir+json" {
		t.Fatalf("read: %d %v %s", resp.StatusCode, resp.Header, stored)
	}
	meta := fxObj(r["meta"])
	want := `{"resourceType":"Observation","id":"` + id + `","meta":{"versionId":"1","lastUpdated":"` + meta["lastUpdated"].(string) +
		`","source":"` + fxSourceURI(w.aliceSrc) + `"},"status":"final",` +
		`"code":{"coding":[{"system":"http://loinc.org","code":"8867-4"}],"text":"Fréquence cardiaque"},` +
		`"identifier":[{"system":"http://ehr.example.org/obs","value":"o-1"},{"system":"` + fxSourceURI(w.aliceSrc) + `/id","value":"` + long + `"}],` +
		`"valueQuantity":{"value":61.50,"unit":"/min","system":"http://unitsofmeasure.org","code":"/min"},"note":[{"text":"1e2 < 3 & \"quoted\""}]}`
	if string(stored) != want {
		t.Errorf("stored\n%s\nwant\n%s", stored, want)
	}
	// In a search Bundle, the same bytes.
	_, bundle := w.do(t, "doc", "GET", "/Observation?_source="+url.QueryEscape(fxSourceURI(w.aliceSrc)), nil, "")
	if !strings.Contains(string(bundle), want) {
		t.Errorf("the search Bundle does not hold the stored JSON: %s", bundle)
	}

	// A type without identifier keeps the upstream id beside the resource.
	p := w.post(t, "doc", w.aliceSrc, `{"resourceType": "Provenance", "id": "prov-1", "target": [{"reference": "Condition/c"}],
		"agent": [{"who": {"reference": "Practitioner/p"}}]}`)
	if _, has := p["identifier"]; has {
		t.Errorf("an identifier on a Provenance: %v", p)
	}
	var doc struct {
		UpstreamID string `bson:"upstreamId"`
		SourceID   int64  `bson:"sourceId"`
		Resource   bson.M `bson:"resource"`
	}
	if err := w.resources.FindOne(w.ctx, bson.D{{Key: "_id", Value: p["id"]}}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if doc.UpstreamID != "prov-1" || doc.SourceID != w.aliceSrc.ID || doc.Resource["resourceType"] != "Provenance" {
		t.Errorf("document %+v", doc)
	}
}

func TestImportedDuplicates(t *testing.T) {
	w := fxNewImported(t)
	stored := w.post(t, "super", w.aliceSrc, fxCondition)
	resp, body := w.do(t, "super", "POST", "/Condition", fxSourceHeader(w.aliceSrc), fxCondition)
	if resp.StatusCode != http.StatusConflict || fxIssues(t, body)[0]["code"] != "duplicate" ||
		!strings.HasSuffix(resp.Header.Get("Location"), fxBase+"/Condition/"+stored["id"].(string)) {
		t.Fatalf("a second create: %d, Location %q: %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	// The same upstream id from another source, or of another type, is
	// another resource; so is a resource without an id whose content
	// differs. The same content without an id, sent again, is the same
	// resource (a resend after a timeout must not store it twice), and
	// the 409 names it.
	w.post(t, "super", w.carolSrc, fxCondition)
	w.post(t, "super", w.aliceSrc, `{"resourceType": "Patient", "id": "upstream-1"}`)
	w.post(t, "super", w.aliceSrc, `{"resourceType": "Patient"}`)
	first := w.post(t, "super", w.aliceSrc, `{"resourceType": "Patient", "gender": "female"}`)
	resp, body = w.do(t, "super", "POST", "/Patient", fxSourceHeader(w.aliceSrc), `{"resourceType": "Patient", "gender": "female"}`)
	if want := fxBase + "/Patient/" + first["id"].(string); resp.StatusCode != http.StatusConflict || !strings.HasSuffix(resp.Header.Get("Location"), want) {
		t.Errorf("the same Patient without an id again: %d, Location %q, want 409 at %s: %s", resp.StatusCode, resp.Header.Get("Location"), want, body)
	}
	if n := w.count(t); n != 5 {
		t.Errorf("%d resources stored, want 5", n)
	}
}

func TestImportedRouting(t *testing.T) {
	w := fxNewImported(t)
	// An Observation coded to Open mHealth is native, with or without a
	// source; one on LOINC is imported.
	native := fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2024-06-01T10:00:00Z")))}
	raw, _ := json.Marshal(native.resource())
	resp, body := w.do(t, "alice", "POST", "/Observation", fxSourceHeader(w.aliceSrc), string(raw))
	if resp.StatusCode != http.StatusCreated || fxUUID.Match([]byte(fmt.Sprint(fxDecode(t, body)["id"]))) {
		t.Errorf("native: %d %s", resp.StatusCode, body)
	}
	loinc := w.post(t, "alice", w.aliceSrc, `{"resourceType": "Observation", "status": "final", "code": {"coding": [{"system": "http://loinc.org", "code": "8867-4"}]}}`)
	if !fxUUID.MatchString(loinc["id"].(string)) {
		t.Errorf("LOINC: %v", loinc)
	}
	// Creates of the projected types with a source are imported; without
	// one they are refused, never written to the admin entities.
	pat := w.post(t, "doc", w.aliceSrc, `{"resourceType": "Patient", "name": [{"family": "Imported"}]}`)
	if !fxUUID.MatchString(pat["id"].(string)) {
		t.Errorf("Patient: %v", pat)
	}
	src := fxSourceHeader(w.aliceSrc)
	for _, c := range []struct {
		path   string
		header map[string]string
		body   string
		issue  string
	}{
		{"/Patient", nil, `{"resourceType": "Patient"}`, "invalid"},
		{"/Bundle", src, `{"resourceType": "Bundle", "type": "collection"}`, "not-supported"},
		{"/Parameters", src, `{"resourceType": "Parameters"}`, "not-supported"},
		{"/Spaceship", src, `{"resourceType": "Spaceship"}`, "not-supported"},
		{"/Condition", src, `{"resourceType": "Patient"}`, "invalid"},
		{"/Condition", src, `[1, 2]`, "invalid"},
		{"/Condition", src, `{"resourceType": "Condition", "resourceType": "Condition"}`, "invalid"},
		{"/Condition", src, `{"resourceType": "Condition"} {}`, "invalid"},
	} {
		resp, body := w.do(t, "doc", "POST", c.path, c.header, c.body)
		if resp.StatusCode != http.StatusBadRequest || fxIssues(t, body)[0]["code"] != c.issue {
			t.Errorf("POST %s %s: %d %s", c.path, c.body, resp.StatusCode, body)
		}
	}
}

func TestImportedValidation(t *testing.T) {
	w := fxNewImported(t)
	resp, body := w.do(t, "doc", "POST", "/Condition", fxSourceHeader(w.aliceSrc), `{"resourceType": "Condition",
		"clinicalStatus": {"coding": [{"system": "http://terminology.hl7.org/CodeSystem/condition-clinical", "code": "sleeping"}]},
		"onsetDateTime": "2015-13-45", "colour": "blue"}`)
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var expressions []string
	for _, is := range fxIssues(t, body) {
		if is["severity"] != "error" || is["code"] != "invalid" || is["diagnostics"] == "" {
			t.Errorf("issue %v", is)
		}
		for _, e := range fxArr(is["expression"]) {
			expressions = append(expressions, e.(string))
		}
	}
	slices.Sort(expressions)
	// The unknown element, the bad date, the code outside the required
	// binding and the missing subject, each with its path.
	want := []string{"Condition.clinicalStatus", "Condition.colour", "Condition.onsetDateTime", "Condition.subject"}
	for _, e := range want {
		if !slices.ContainsFunc(expressions, func(got string) bool { return strings.HasPrefix(got, e) }) {
			t.Errorf("no issue at %s in %v", e, expressions)
		}
	}
	if w.count(t) != 0 {
		t.Error("an invalid resource was stored")
	}
}

// TestImportedMembersAreExact: an imported resource is read as strictly
// below its top level as at it. A member named twice deeper in was
// validated and indexed as a map kept it (the last) but stored and served
// with both; a string that is not UTF-8 was stored and served as sent,
// making the answers invalid JSON text. Both are 400 now, on create and
// on update, and nothing is stored.
func TestImportedMembersAreExact(t *testing.T) {
	w := fxNewImported(t)
	stored := w.post(t, "doc", w.aliceSrc, fxCondition)
	id := stored["id"].(string)
	before := w.count(t)
	condition := func(id, subject string) string {
		return `{"resourceType": "Condition", ` + id + `"clinicalStatus": {"text": "active"}, "subject": ` + subject + `}`
	}
	for name, c := range map[string]struct{ subject, want string }{
		"a nested duplicate": {fmt.Sprintf(`{"reference": "Patient/%d", "reference": "Patient/%d"}`, w.alice.ID, w.bob.ID), `the member "reference" appears twice`},
		"invalid UTF-8":      {"{\"reference\": \"Patient/x\", \"display\": \"Do\xffe\"}", "UTF-8"},
	} {
		resp, body := w.do(t, "doc", "POST", "/Condition", fxSourceHeader(w.aliceSrc), condition("", c.subject))
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(fxOutcomeText(fxDecode(t, body)), c.want) {
			t.Errorf("create with %s: %d %s", name, resp.StatusCode, body)
		}
		resp, body = w.do(t, "doc", "PUT", "/Condition/"+id, fxSourceHeader(w.aliceSrc), condition(`"id": "`+id+`", `, c.subject))
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(fxOutcomeText(fxDecode(t, body)), c.want) {
			t.Errorf("update with %s: %d %s", name, resp.StatusCode, body)
		}
	}
	if n := w.count(t); n != before {
		t.Errorf("%d resources, %d before", n, before)
	}
	resp, body := w.do(t, "doc", "GET", "/Condition/"+id, nil, "")
	if got := fxDecode(t, body); resp.StatusCode != http.StatusOK || fxObj(got["meta"])["versionId"] != "1" {
		t.Errorf("the stored Condition changed: %d %s", resp.StatusCode, body)
	}
}

func TestImportedVersions(t *testing.T) {
	w := fxNewImported(t)
	c := w.post(t, "doc", w.aliceSrc, fxCondition)
	id := c["id"].(string)
	path := "/Condition/" + id
	read := func() map[string]any {
		t.Helper()
		resp, body := w.do(t, "doc", "GET", path, nil, "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("read: %d %s", resp.StatusCode, body)
		}
		return fxDecode(t, body)
	}
	version := func(r map[string]any) string { return fmt.Sprint(fxObj(r["meta"])["versionId"]) }
	put := func(r map[string]any) string { data, _ := json.Marshal(r); return string(data) }

	// PUT replaces: version 2, the upstream identifier kept.
	c["onsetDateTime"] = "2016-01-01"
	delete(c, "identifier")
	resp, body := w.do(t, "doc", "PUT", path, map[string]string{"If-Match": `W/"1"`}, put(c))
	if resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") != `W/"2"` {
		t.Fatalf("PUT: %d %s", resp.StatusCode, body)
	}
	if r := read(); version(r) != "2" || r["onsetDateTime"] != "2016-01-01" || !strings.Contains(fxCompact(r), `"value":"upstream-1"`) {
		t.Errorf("after PUT: %v", r)
	}
	// A stale version is refused, and so is a PUT that names another id
	// or moves the resource to another source.
	for _, c2 := range []struct {
		name   string
		header map[string]string
		body   string
		status int
	}{
		{"stale If-Match", map[string]string{"If-Match": `W/"1"`}, put(read()), http.StatusPreconditionFailed},
		{"malformed If-Match", map[string]string{"If-Match": `yesterday`}, put(read()), http.StatusBadRequest},
		{"another id", nil, strings.Replace(put(read()), id, "0b6a4f8e-5b4e-4c1a-9d2b-3a1e0f6b7c8d", 1), http.StatusBadRequest},
		{"another source", fxSourceHeader(w.carolSrc), put(read()), http.StatusBadRequest},
		{"invalid R5", nil, strings.Replace(put(read()), `"onsetDateTime":"2016-01-01"`, `"onsetDateTime":"soon"`, 1), http.StatusBadRequest},
		{"another type", nil, strings.Replace(put(read()), `"resourceType":"Condition"`, `"resourceType":"Goal"`, 1), http.StatusBadRequest},
	} {
		resp, body := w.do(t, "doc", "PUT", path, c2.header, c2.body)
		if resp.StatusCode != c2.status {
			t.Errorf("%s: %d %s, want %d", c2.name, resp.StatusCode, body, c2.status)
		}
	}
	if version(read()) != "2" {
		t.Errorf("a refused PUT changed the resource: %v", read())
	}

	// JSON Patch, then merge patch, each a version; a failed test op is 422.
	jsonPatch := map[string]string{"Content-Type": "application/json-patch+json", "If-Match": `W/"2"`}
	resp, body = w.do(t, "doc", "PATCH", path, jsonPatch, `[{"op": "replace", "path": "/onsetDateTime", "value": "2017-02-02"}]`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") != `W/"3"` {
		t.Fatalf("JSON Patch: %d %s", resp.StatusCode, body)
	}
	resp, body = w.do(t, "doc", "PATCH", path, map[string]string{"Content-Type": "application/merge-patch+json"},
		`{"note": [{"text": "reviewed"}], "onsetDateTime": null, "onsetAge": {"value": 40.50, "unit": "a", "system": "http://unitsofmeasure.org", "code": "a"}}`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") != `W/"4"` {
		t.Fatalf("merge patch: %d %s", resp.StatusCode, body)
	}
	if r := read(); r["onsetDateTime"] != nil || fxObj(fxArr(r["note"])[0])["text"] != "reviewed" {
		t.Errorf("after the patches: %v", r)
	}
	for _, c2 := range []struct {
		name, contentType, body string
		status                  int
	}{
		{"a failing test", "application/json-patch+json", `[{"op": "test", "path": "/onsetAge/value", "value": 41}]`, http.StatusUnprocessableEntity},
		{"a malformed patch", "application/json-patch+json", `{"op": "add"}`, http.StatusBadRequest},
		{"a patch that breaks R5", "application/json-patch+json", `[{"op": "remove", "path": "/subject"}]`, http.StatusBadRequest},
		{"a FHIRPath Patch", "application/fhir+json", `{"resourceType": "Parameters"}`, http.StatusUnsupportedMediaType},
	} {
		resp, body := w.do(t, "doc", "PATCH", path, map[string]string{"Content-Type": c2.contentType}, c2.body)
		if resp.StatusCode != c2.status {
			t.Errorf("%s: %d %s, want %d", c2.name, resp.StatusCode, body, c2.status)
		}
	}
	if !strings.Contains(string(fxMustRaw(t, w, path)), `"value":40.50`) {
		t.Errorf("the merge patch lost the decimal's precision: %s", fxMustRaw(t, w, path))
	}
	// vread of the current version; older ones are not kept.
	if resp, _ := w.do(t, "doc", "GET", path+"/_history/4", nil, ""); resp.StatusCode != http.StatusOK {
		t.Errorf("vread 4: %d", resp.StatusCode)
	}
	if resp, _ := w.do(t, "doc", "GET", path+"/_history/1", nil, ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("vread 1: %d", resp.StatusCode)
	}
	// Who may change it: a viewer reads but may not write; an outsider
	// does not see it at all.
	if resp, _ := w.do(t, "viewer", "DELETE", path, nil, ""); resp.StatusCode != http.StatusForbidden {
		t.Errorf("viewer DELETE: %d", resp.StatusCode)
	}
	if resp, _ := w.do(t, "outsider", "GET", path, nil, ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("outsider GET: %d", resp.StatusCode)
	}
	if resp, _ := w.do(t, "outsider", "PATCH", path, jsonPatch, `[]`); resp.StatusCode != http.StatusNotFound {
		t.Errorf("outsider PATCH: %d", resp.StatusCode)
	}
	// DELETE with a stale version, then for good.
	if resp, _ := w.do(t, "doc", "DELETE", path, map[string]string{"If-Match": `W/"3"`}, ""); resp.StatusCode != http.StatusPreconditionFailed {
		t.Errorf("stale DELETE: %d", resp.StatusCode)
	}
	if resp, _ := w.do(t, "doc", "DELETE", path, map[string]string{"If-Match": `W/"4"`}, ""); resp.StatusCode != http.StatusNoContent {
		t.Errorf("DELETE: %d", resp.StatusCode)
	}
	for _, method := range []string{"GET", "PUT"} {
		if resp, _ := w.do(t, "doc", method, path, nil, put(c)); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s after DELETE: %d", method, resp.StatusCode)
		}
	}
	// Deleting it again has no effect (FHIR R5 http.html#delete).
	if resp, body := w.do(t, "doc", "DELETE", path, nil, ""); resp.StatusCode != http.StatusNoContent {
		t.Errorf("DELETE after DELETE: %d %s", resp.StatusCode, body)
	}
}

// TestImportedDeleteAgain: a DELETE whose answer was lost is sent again,
// and answers as the first did. FHIR R5 (http.html#delete): deleting a
// resource already deleted, or one that does not exist at all, has no
// effect and answers 200 or 204. Nothing else is deleted, and the rights
// a delete needs are still checked.
func TestImportedDeleteAgain(t *testing.T) {
	w := fxNewImported(t)
	gone := w.post(t, "doc", w.aliceSrc, fxCondition)["id"].(string)
	kept := w.post(t, "doc", w.aliceSrc, strings.Replace(fxCondition, "upstream-1", "upstream-2", 1))["id"].(string)
	if gone == kept {
		t.Fatal("the two Conditions have one id")
	}
	if resp, body := w.do(t, "doc", "DELETE", "/Condition/"+gone, map[string]string{"If-Match": `W/"1"`}, ""); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", resp.StatusCode, body)
	}
	for _, c := range []struct {
		name, who, path string
		header          map[string]string
		status          int
	}{
		{"the retry", "doc", "/Condition/" + gone, nil, http.StatusNoContent},
		{"the retry with its If-Match", "doc", "/Condition/" + gone, map[string]string{"If-Match": `W/"1"`}, http.StatusNoContent},
		{"a resource never stored", "doc", "/Condition/" + uuid.NewString(), nil, http.StatusNoContent},
		{"an outsider, of a resource out of sight", "outsider", "/Condition/" + kept, nil, http.StatusNoContent},
		{"a stale If-Match on a resource that is there", "doc", "/Condition/" + kept, map[string]string{"If-Match": `W/"7"`}, http.StatusPreconditionFailed},
		{"a viewer, who may not delete", "viewer", "/Condition/" + kept, nil, http.StatusForbidden},
	} {
		if resp, body := w.do(t, c.who, "DELETE", c.path, c.header, ""); resp.StatusCode != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, resp.StatusCode, body, c.status)
		}
	}
	if resp, body := w.do(t, "doc", "GET", "/Condition/"+kept, nil, ""); resp.StatusCode != http.StatusOK {
		t.Errorf("the Condition no one deleted: %d %s", resp.StatusCode, body)
	}
}

// TestImportedDeleteOfNothingIsAudited: a DELETE that finds nothing
// answers 204 (TestImportedDeleteAgain), but the audit trail does not
// record it as a delete: an outsider who sent DELETE for a resource out of
// their sight did not delete it, and the trail says the delete found
// nothing. The one delete that took effect is recorded as done.
func TestImportedDeleteOfNothingIsAudited(t *testing.T) {
	o := behindLoopbackProxy
	o.Audit = true
	w := fxNewImportedWith(t, o)
	gone := w.post(t, "doc", w.aliceSrc, fxCondition)["id"].(string)
	kept := w.post(t, "doc", w.aliceSrc, strings.Replace(fxCondition, "upstream-1", "upstream-2", 1))["id"].(string)
	for _, c := range []struct{ who, id string }{{"doc", gone}, {"doc", gone}, {"outsider", kept}} {
		if resp, body := w.do(t, c.who, "DELETE", "/Condition/"+c.id, nil, ""); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("%s's DELETE of %s: %d %s", c.who, c.id, resp.StatusCode, body)
		}
	}
	if err := w.env.Audit.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	events := repotest.Collection(t, w.env.DB, "audit_events")
	for _, c := range []struct {
		id             string
		done, notFound int64
	}{{gone, 1, 1}, {kept, 0, 1}} {
		audited := func(outcome any) int64 {
			n, err := events.CountDocuments(w.ctx, bson.M{"action": "D", "entities": "Condition/" + c.id, "outcome": outcome})
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		done, notFound := audited(bson.M{"$exists": false}), audited(string(domain.CodeNotFound))
		if done != c.done || notFound != c.notFound {
			t.Errorf("Condition/%s: %d deletes audited as done and %d as finding nothing, want %d and %d", c.id, done, notFound, c.done, c.notFound)
		}
	}
}

func fxMustRaw(t *testing.T, w *fxImported, path string) []byte {
	t.Helper()
	_, body := w.do(t, "doc", "GET", path, nil, "")
	return body
}

func TestImportedWritesOnNativeRecordsAre405(t *testing.T) {
	w := fxNewImported(t)
	ids := w.create(t, w.tok["alice"], fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2024-06-01T10:00:00Z")))})
	for _, path := range []string{"/Observation/" + ids[0], fmt.Sprintf("/Patient/%d", w.alice.ID), fmt.Sprintf("/Organization/%d", w.orgA.ID),
		fmt.Sprintf("/Group/%d", w.s1.ID), fmt.Sprintf("/Device/%d", w.watch), fmt.Sprintf("/Practitioner/%d", w.doc.ID)} {
		for _, method := range []string{"PUT", "PATCH", "DELETE"} {
			resp, body := w.do(t, "super", method, path, map[string]string{"Content-Type": "application/json-patch+json"}, "[]")
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET" || fxIssues(t, body)[0]["code"] != "not-supported" {
				t.Errorf("%s %s: %d %v %s", method, path, resp.StatusCode, resp.Header, body)
			}
		}
	}
	// A FHIR source that holds resources is not deleted.
	w.post(t, "doc", w.aliceSrc, fxCondition)
	resp, out := w.env.Send(t, "DELETE", fmt.Sprintf("/api/v1/fhir_sources/%d", w.aliceSrc.ID), w.tok["super"], nil)
	if resp.StatusCode != http.StatusConflict {
		t.Errorf("deleting a FHIR source that holds resources: %d %v", resp.StatusCode, out)
	}
	// Nor a data source that is the Device of stored observations, even
	// once no study collects from it.
	for _, st := range []*domain.Study{w.s1, w.s2, w.s3} {
		_ = w.env.Service.RemoveStudyDataSource(w.ctx, fxSys, st.ID, w.watch) // linked or not
	}
	resp, out = w.env.Send(t, "DELETE", fmt.Sprintf("/api/v1/data_sources/%d", w.watch), w.tok["super"], nil)
	if resp.StatusCode != http.StatusConflict || !strings.Contains(fmt.Sprint(out["detail"]), "Device of stored observations") {
		t.Errorf("deleting the Device of observations: %d %v", resp.StatusCode, out)
	}
}

// fxTypeCase is one type of testdata/imported_types.json: a resource each
// query finds, another none finds.
type fxTypeCase struct {
	Match   json.RawMessage `json:"match"`
	Other   json.RawMessage `json:"other"`
	Queries []string        `json:"queries"`
}

// TestImportedSearchEveryType searches each of the 28 types with a
// parameter of each kind it declares.
func TestImportedSearchEveryType(t *testing.T) {
	w := fxNewImported(t)
	data, err := os.ReadFile(filepath.Join("testdata", "imported_types.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases map[string]fxTypeCase
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) != 28 {
		t.Fatalf("%d types", len(cases))
	}
	fill := func(s string) string {
		return strings.NewReplacer("{patient}", fmt.Sprint(w.alice.ID), "{other}", fmt.Sprint(w.carol.ID)).Replace(s)
	}
	below := "_source:below=" + url.QueryEscape(handlerstest.SourceBase+"/")
	for _, typ := range slices.Sorted(func(yield func(string) bool) {
		for k := range cases {
			if !yield(k) {
				return
			}
		}
	}) {
		c := cases[typ]
		id := w.post(t, "super", w.aliceSrc, fill(string(c.Match)))["id"].(string)
		w.post(t, "super", w.carolSrc, fill(string(c.Other)))
		for _, q := range c.Queries {
			q = strings.ReplaceAll(fill(q), "{id}", id)
			resp, body := w.do(t, "super", "GET", "/"+typ+"?"+below+"&"+q, map[string]string{"Prefer": "handling=strict"}, "")
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s?%s: %d %s", typ, q, resp.StatusCode, body)
				continue
			}
			if got := fxIDsOf(fxMatches(t, fxDecode(t, body))); !slices.Equal(got, []string{id}) {
				t.Errorf("%s?%s found %v, want [%s]", typ, q, got, id)
			}
		}
	}
}

func TestImportedSourceSelectsTheStore(t *testing.T) {
	w := fxNewImported(t)
	mine := w.post(t, "doc", w.aliceSrc, fxCondition)["id"].(string)
	theirs := w.post(t, "super", w.carolSrc, fxCondition)["id"].(string)
	// A resource of carol's source about alice: alice's by reference.
	aboutAlice := w.post(t, "super", w.carolSrc, strings.NewReplacer("upstream-1", "upstream-2", "Patient/123", fmt.Sprintf("Patient/%d", w.alice.ID)).Replace(fxCondition))["id"].(string)
	search := func(who, query string) (int, []string) {
		t.Helper()
		resp, body := w.do(t, who, "GET", "/Condition?"+query, nil, "")
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode, nil
		}
		got := fxIDsOf(fxMatches(t, fxDecode(t, body)))
		slices.Sort(got)
		return resp.StatusCode, got
	}
	sorted := func(ids ...string) []string { slices.Sort(ids); return ids }
	exact := func(src *domain.FHIRSource) string { return "_source=" + url.QueryEscape(fxSourceURI(src)) }
	below := "_source:below=" + url.QueryEscape(handlerstest.SourceBase+"/")
	for _, c := range []struct {
		who, query string
		status     int
		want       []string
	}{
		{"doc", exact(w.aliceSrc), http.StatusOK, []string{mine}},
		{"doc", exact(w.carolSrc), http.StatusOK, []string{}}, // a source of a patient out of reach: as one that does not exist
		{"super", exact(w.carolSrc), http.StatusOK, sorted(theirs, aboutAlice)},
		{"doc", "_source=" + url.QueryEscape(handlerstest.SourceBase+"/424242"), http.StatusOK, []string{}},
		{"doc", below, http.StatusOK, []string{mine}},
		{"alice", below, http.StatusOK, []string{mine}},
		{"outsider", below, http.StatusOK, sorted(theirs, aboutAlice)},
		{"super", below, http.StatusOK, sorted(mine, theirs, aboutAlice)},
		{"super", below + fmt.Sprintf("&patient=%d", w.alice.ID), http.StatusOK, sorted(mine, aboutAlice)},
		{"super", below + fmt.Sprintf("&patient=Patient/%d", w.carol.ID), http.StatusOK, sorted(theirs, aboutAlice)},
		{"outsider", below + fmt.Sprintf("&patient=%d", w.alice.ID), http.StatusOK, []string{}},
		{"super", "", http.StatusOK, []string{}}, // Condition has no native store
		{"super", "_source=" + url.QueryEscape("https://elsewhere.example.org/x"), http.StatusOK, []string{}},
	} {
		status, got := search(c.who, c.query)
		if status != c.status || (c.want != nil && !slices.Equal(got, c.want)) {
			t.Errorf("%s: Condition?%s: %d %v, want %d %v", c.who, c.query, status, got, c.status, c.want)
		}
	}
	// Without _source, Patient is the native projection; with it, the
	// imported patients.
	imported := w.post(t, "doc", w.aliceSrc, `{"resourceType": "Patient", "name": [{"family": "Ødegård"}]}`)["id"].(string)
	_, native := w.do(t, "doc", "GET", "/Patient?family=odegard", nil, "")
	_, fromSource := w.do(t, "doc", "GET", "/Patient?family=odegard&"+below, nil, "")
	if got := fxIDsOf(fxMatches(t, fxDecode(t, native))); !slices.Equal(got, []string{fmt.Sprint(w.alice.ID)}) {
		t.Errorf("native Patient search: %v", got)
	}
	if got := fxIDsOf(fxMatches(t, fxDecode(t, fromSource))); !slices.Equal(got, []string{imported}) {
		t.Errorf("imported Patient search: %v", got)
	}
	// An imported-only parameter without _source is ignored (listed in an
	// outcome), or refused under strict handling.
	resp, body := w.do(t, "doc", "GET", "/Patient?gender=male", map[string]string{"Prefer": "handling=strict"}, "")
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("strict imported-only parameter: %d %s", resp.StatusCode, body)
	}
}

func TestImportedPagingAndSort(t *testing.T) {
	w := fxNewImported(t)
	var want []string
	for i, onset := range []string{"2015-06-10", "2013-01-01", "2014-03-03", ""} {
		c := strings.Replace(fxCondition, "upstream-1", fmt.Sprintf("u-%d", i), 1)
		if onset == "" {
			c = strings.Replace(c, `,
	"onsetDateTime": "2015-06-10"`, "", 1)
		} else {
			c = strings.Replace(c, "2015-06-10", onset, 1)
		}
		want = append(want, w.post(t, "doc", w.aliceSrc, c)["id"].(string))
	}
	// Ascending by date: 2013, 2014, 2015, then the undated one.
	asc := []string{want[1], want[2], want[0], want[3]}
	below := "_source:below=" + url.QueryEscape(handlerstest.SourceBase)
	for _, c := range []struct {
		sort string
		want []string
	}{
		{"onset-date", asc},
		{"-onset-date", []string{want[0], want[2], want[1], want[3]}},
		{"_lastUpdated", want},
	} {
		var got []string
		next := "/Condition?" + below + "&_count=1&_sort=" + c.sort
		for pages := 0; next != ""; pages++ {
			if pages > 5 {
				t.Fatal("paging does not end")
			}
			_, body := w.do(t, "doc", "GET", next, nil, "")
			b := fxDecode(t, body)
			got = append(got, fxIDsOf(fxMatches(t, b))...)
			next = ""
			for _, l := range fxArr(b["link"]) {
				if fxObj(l)["relation"] == "next" {
					next = strings.TrimPrefix(fxObj(l)["url"].(string), w.env.URL+fxBase)
				}
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("_sort=%s: %v, want %v", c.sort, got, c.want)
		}
	}
	_, body := w.do(t, "doc", "GET", "/Condition?"+below+"&_summary=count&onset-date=ge2014", nil, "")
	if total := fxDecode(t, body)["total"]; total != float64(2) {
		t.Errorf("_summary=count: %v", total)
	}
	_, body = w.do(t, "doc", "GET", "/Condition?_summary=count", nil, "")
	if total := fxDecode(t, body)["total"]; total != float64(0) {
		t.Errorf("_summary=count without _source: %v", total)
	}
}

func TestImportedBatch(t *testing.T) {
	w := fxNewImported(t)
	native := fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2024-06-01T10:00:00Z")))}.resource()
	condition := func(id, source string) map[string]any {
		var r map[string]any
		_ = json.Unmarshal([]byte(strings.Replace(fxCondition, "upstream-1", id, 1)), &r)
		if source != "" {
			r["meta"] = map[string]any{"source": source}
		}
		return r
	}
	entry := func(url string, r any) any {
		return map[string]any{"resource": r, "request": map[string]any{"method": "POST", "url": url}}
	}
	bundle, _ := json.Marshal(map[string]any{"resourceType": "Bundle", "type": "batch", "entry": []any{
		entry("Observation", native),
		entry("Condition", condition("b-1", "")),                      // the request's header names alice's source
		entry("Condition", condition("b-2", fxSourceURI(w.carolSrc))), // the header wins: alice's
		entry("Condition", condition("b-1", "")),                      // the same upstream id again
		entry("Basic", map[string]any{"resourceType": "Basic"}),
		entry("Condition", map[string]any{"resourceType": "Condition", "colour": "red"}),
	}})
	resp, body := w.do(t, "doc", "POST", "/", fxSourceHeader(w.aliceSrc), string(bundle))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var statuses []string
	for _, e := range fxEntries(t, fxDecode(t, body)) {
		statuses = append(statuses, fmt.Sprint(fxObj(e["response"])["status"]))
	}
	want := []string{"201 Created", "201 Created", "201 Created", "409 Conflict", "400 Bad Request", "400 Bad Request"}
	if !slices.Equal(statuses, want) {
		t.Errorf("statuses %v, want %v", statuses, want)
	}
	n, err := w.resources.CountDocuments(w.ctx, bson.D{{Key: "sourceId", Value: w.aliceSrc.ID}})
	if err != nil || n != 2 {
		t.Errorf("%d resources under alice's source (%v), want 2", n, err)
	}
}
