package handlers_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"exchange/domain"
	"exchange/handlers/handlerstest"
)

// Tests of the bounds the service puts on its inputs: each hostile input
// gets a clear 4xx in its surface's format.

// bdRaw writes raw requests on one connection and reads one answer per
// request, in order; the answers' bodies are read whole.
func bdRaw(t *testing.T, env *handlerstest.Env, requests ...string) []*bdAnswer {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(env.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	r := bufio.NewReader(conn)
	var out []*bdAnswer
	for _, req := range requests {
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatalf("writing %.60q: %v", req, err)
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("answer to %.60q: %v", req, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, &bdAnswer{resp, body})
	}
	return out
}

// bdAnswer is an answer and its body.
type bdAnswer struct {
	*http.Response
	body []byte
}

// bdSurface is the error format a path's surface answers with.
type bdSurface int

const (
	bdFHIR  bdSurface = iota // an OperationOutcome, application/fhir+json
	bdAdmin                  // {"detail": ...}, application/json
)

// bdCheckError checks an error answer: the status, the surface's format,
// and, for an OperationOutcome, the issue code when one is given.
func bdCheckError(t *testing.T, what string, a *bdAnswer, status int, surface bdSurface, issueCode string) map[string]any {
	t.Helper()
	var out map[string]any
	if err := json.Unmarshal(a.body, &out); err != nil {
		t.Errorf("%s: %d, body not JSON: %.200s", what, a.StatusCode, a.body)
		return nil
	}
	if a.StatusCode != status {
		t.Errorf("%s: %d %.300s, want %d", what, a.StatusCode, a.body, status)
	}
	switch surface {
	case bdFHIR:
		if ct := a.Header.Get("Content-Type"); out["resourceType"] != "OperationOutcome" || !strings.HasPrefix(ct, "application/fhir+json") {
			t.Errorf("%s: %s %.300s, want an OperationOutcome", what, ct, a.body)
		} else if issueCode != "" && fxIssueCode(out) != issueCode {
			t.Errorf("%s: issue code %q, want %q (%s)", what, fxIssueCode(out), issueCode, fxOutcomeText(out))
		}
	case bdAdmin:
		if d, ok := out["detail"].(string); !ok || d == "" || len(out) != 1 {
			t.Errorf("%s: %.300s, want {\"detail\": ...}", what, a.body)
		}
	}
	return out
}

// TestErrorsBeforeAnyRouteKeepTheSurfaceFormat: requests the HTTP server
// refuses before any route runs (headers or URL over the read buffer, a
// body over the limit, a broken chunked body, a malformed header) and
// multipart bodies are answered with an OperationOutcome on every FHIR
// path (/FHIR/R5, /fhir/r5, /fhir-import/R4) and {"detail"} on the admin
// API, where before every one of them answered {"detail"} or Fiber's text;
// the server's own error text, which quotes the request's headers, is
// never sent back.
func TestErrorsBeforeAnyRouteKeepTheSurfaceFormat(t *testing.T) {
	env := handlerstest.Start(t)
	doc := env.Practitioner(t, "doc@example.org", false)
	auth := "Authorization: Bearer " + env.Token(t, doc.ID) + "\r\n"
	big := strings.Repeat("a", 20<<10)
	paths := []struct {
		path    string
		surface bdSurface
	}{
		{"/FHIR/R5/Observation", bdFHIR},
		{"/fhir/r5/Patient", bdFHIR},
		{"/FHIR/R5", bdFHIR},
		{"/fhir-import/R4", bdFHIR},
		{"/fhir-import/R4/Procedure", bdFHIR},
		{"/api/v1/patients", bdAdmin},
	}
	multipart := "--b\r\nContent-Disposition: form-data; name=\"resource\"\r\n\r\n{}\r\n--b--\r\n"
	for _, p := range paths {
		for _, tc := range []struct {
			name    string
			request string
			status  int
			code    string
		}{
			{"a header over 16 KiB", "GET " + p.path + " HTTP/1.1\r\nHost: x\r\n" + auth + "X-Big: " + big + "\r\n\r\n",
				http.StatusRequestHeaderFieldsTooLarge, "too-long"},
			{"a URL over 16 KiB", "GET " + p.path + "?x=" + big + " HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n",
				http.StatusRequestHeaderFieldsTooLarge, "too-long"},
			{"a URL over 16 KiB in absolute form", "GET http://x" + p.path + "?x=" + big + " HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n",
				http.StatusRequestHeaderFieldsTooLarge, "too-long"},
			{"a body over 64 MiB", "POST " + p.path + " HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Type: application/fhir+json\r\nContent-Length: 67108865\r\n\r\n",
				http.StatusRequestEntityTooLarge, "too-long"},
			{"a broken chunked body", "POST " + p.path + " HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Type: application/fhir+json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
				http.StatusBadRequest, "invalid"},
			{"a malformed Content-Length", "POST " + p.path + " HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: -5\r\n\r\n",
				http.StatusBadRequest, "invalid"},
			{"a multipart body", "POST " + p.path + " HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Type: multipart/form-data; boundary=b\r\nContent-Length: " +
				strconv.Itoa(len(multipart)) + "\r\n\r\n" + multipart, http.StatusBadRequest, ""},
			{"a broken multipart body", "POST " + p.path + " HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 7\r\n\r\ngarbage",
				http.StatusBadRequest, ""},
		} {
			what := tc.name + " to " + p.path
			a := bdRaw(t, env, tc.request)[0]
			status := tc.status
			if tc.code == "" && strings.HasPrefix(p.path, "/fhir-import/R4") {
				status = http.StatusBadRequest // the source header is missing
			}
			bdCheckError(t, what, a, status, p.surface, tc.code)
			if strings.Contains(string(a.body), "Bearer") || strings.Contains(string(a.body), "aaaaaaaa") {
				t.Errorf("%s: the answer quotes the request: %.300s", what, a.body)
			}
		}
	}

	// On a kept-alive connection, the request after an answered one is
	// told by its own path.
	answers := bdRaw(t, env,
		"GET /api/v1/users/profile HTTP/1.1\r\nHost: x\r\n"+auth+"\r\n",
		"GET /FHIR/R5/metadata HTTP/1.1\r\nHost: x\r\nX-Big: "+big+"\r\n\r\n")
	if answers[0].StatusCode != http.StatusOK {
		t.Fatalf("profile: %d %s", answers[0].StatusCode, answers[0].body)
	}
	bdCheckError(t, "a header over 16 KiB after an answered request", answers[1], http.StatusRequestHeaderFieldsTooLarge, bdFHIR, "too-long")
}

// bdPadded is a heart rate data point padded with leading whitespace to
// exactly size bytes (JSON allows it; the payload is kept as sent).
func bdPadded(t *testing.T, size int) []byte {
	t.Helper()
	dp := fxDataPoint(fxHR, fxHeartRate(fxAt("2024-03-05T10:00:00+01:00")))
	if size < len(dp) {
		t.Fatalf("a data point is %d bytes already", len(dp))
	}
	return append([]byte(strings.Repeat(" ", size-len(dp))), dp...)
}

// TestDataPointSizeIsBounded: one data point is at most
// MAX_DATA_POINT_BYTES (1 MiB by default), counted on the data point
// decoded from its Base64: a larger one is 413 too-long naming the
// attachment, on its own in a batch (the other entries are created), and
// nothing of it is stored. The old service stored any data point a
// request could carry.
func TestDataPointSizeIsBounded(t *testing.T) {
	w := fxNewWorld(t)
	const limit = 1 << 20
	obs := func(id string, size int) map[string]any {
		return fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, identifiers: []string{id}, payload: bdPadded(t, size)}.resource()
	}
	// Single creates, on both FHIR paths.
	for _, tc := range []struct {
		name   string
		path   string
		size   int
		status int
	}{
		{"exactly the limit", fxBase + "/Observation", limit, http.StatusCreated},
		{"one byte over", fxBase + "/Observation", limit + 1, http.StatusRequestEntityTooLarge},
		{"one byte over, on the alias", "/fhir/r5/Observation", limit + 1, http.StatusRequestEntityTooLarge},
		{"ten times over", fxBase + "/Observation", 10 * limit, http.StatusRequestEntityTooLarge},
	} {
		before := fxSnapshot(t, w)
		resp, body := fxDo(t, w.env, "POST", tc.path, map[string]string{"Authorization": "Bearer " + w.tok["doc"]}, fxCompact(obs("size-"+tc.name, tc.size)))
		if tc.status == http.StatusCreated {
			if resp.StatusCode != tc.status {
				t.Errorf("%s: %d %.300s", tc.name, resp.StatusCode, body)
			}
			continue
		}
		out := bdCheckError(t, tc.name, &bdAnswer{resp, body}, tc.status, bdFHIR, "too-long")
		if len(fxArr(out["issue"])) == 0 {
			continue
		}
		if issue := fxObj(fxArr(out["issue"])[0]); fxArr(issue["expression"])[0] != "Observation.valueAttachment.data" ||
			!strings.Contains(fxOutcomeText(out), "MAX_DATA_POINT_BYTES") {
			t.Errorf("%s: issue %v", tc.name, issue)
		}
		if after := fxSnapshot(t, w); fxCompact(after) != fxCompact(before) {
			t.Errorf("%s: the store changed", tc.name)
		}
	}
	// In a batch, the oversized entry alone is refused: FHIR batch entries
	// stand on their own.
	entries := w.batch(t, w.tok["doc"], obs("batch-a", 1000), obs("batch-b", limit+1), obs("batch-c", 1000))
	for i, want := range []string{"201 Created", "413 Request Entity Too Large", "201 Created"} {
		if got := fxObj(entries[i]["response"])["status"]; got != want {
			t.Errorf("batch entry %d: %v, want %s", i, got, want)
		}
	}
	if out := fxObj(fxObj(entries[1]["response"])["outcome"]); fxIssueCode(out) != "too-long" {
		t.Errorf("batch entry 1: outcome %v", out)
	}
	if ids := w.ids(t, w.tok["doc"], "/Observation?identifier="+fxObsIDs+"|batch-b"); len(ids) != 0 {
		t.Errorf("the oversized entry was stored: %v", ids)
	}
}

// TestAdminTextAndListsAreBounded: every string the admin API stores has a
// maximum length by kind (names 200, email addresses 320, identifiers and
// codes 1,000, passwords and secrets 1,000, URLs 2,000, descriptions
// 10,000 characters) and every list at most 1,000 items: beyond, 400
// {"detail"} naming the field, and nothing is stored. The old service
// stored them all, and a 17 MiB family name was a 500 (the database's
// documents stop at 16 MiB). Lengths count characters, not bytes.
func TestAdminTextAndListsAreBounded(t *testing.T) {
	w := admNewWorld(t)
	ctx := context.Background()
	p := w.patient(t, "pat@example.org", "Doe", "Jo", w.org.ID)
	st := w.study(t, w.org.ID, "Study")
	code := w.scopeCode(t, "omh:heart-rate:2.0", "Heart rate")
	if err := w.env.Service.RequestScope(ctx, domain.SystemActor(), st, code.ID); err != nil {
		t.Fatal(err)
	}
	if err := w.env.Service.EnrollPatients(ctx, domain.SystemActor(), st.ID, []int64{p.ID}); err != nil {
		t.Fatal(err)
	}
	long := func(n int) string { return strings.Repeat("x", n) }
	url := func(n int) string { return "https://app.example.org/" + long(n-len("https://app.example.org/")) }
	items := func(n int) []int64 {
		ids := make([]int64, n)
		for i := range ids {
			ids[i] = int64(i + 1)
		}
		return ids
	}
	names := func(n int) []string { return slices.Repeat([]string{"Jo"}, n) }
	email := long(64) + "@" + long(251) + ".org" // 320
	patient := func(change map[string]any) map[string]any {
		body := map[string]any{"email": "new@example.org", "nameFamily": "New", "nameGiven": []string{"Ny"}, "organizationIds": []int64{w.org.ID}}
		maps.Copy(body, change)
		return body
	}
	client := func(change map[string]any) map[string]any {
		body := map[string]any{"name": "App", "clientType": "public", "redirectUris": []string{"https://app.example.org/cb"}}
		maps.Copy(body, change)
		return body
	}
	orgPath, patientPath, studyPath := fmt.Sprintf("/api/v1/organizations/%d", w.org.ID), fmt.Sprintf("/api/v1/patients/%d", p.ID), fmt.Sprintf("/api/v1/studies/%d", st.ID)
	before := admSnapshot(t, w.env)
	for _, tc := range []struct {
		method, path string
		body         any
		field        string
	}{
		{"POST", "/api/v1/organizations", map[string]any{"name": long(201), "type": "prov"}, "name"},
		{"PATCH", orgPath, map[string]any{"name": long(201)}, "name"},
		{"POST", "/api/v1/practitioners", map[string]any{"email": "a" + email, "organizationId": w.org.ID, "role": "member"}, "email"},
		{"POST", "/api/v1/practitioners", map[string]any{"email": "p@example.org", "firstName": long(201), "organizationId": w.org.ID, "role": "member"}, "firstName"},
		{"POST", "/api/v1/practitioners", map[string]any{"email": "p@example.org", "password": long(1001), "organizationId": w.org.ID, "role": "member"}, "password"},
		{"PATCH", fmt.Sprintf("/api/v1/practitioners/%d", w.memberID), map[string]any{"lastName": long(201)}, "lastName"},
		{"POST", "/api/v1/patients", patient(map[string]any{"nameFamily": long(201)}), "nameFamily"},
		{"POST", "/api/v1/patients", patient(map[string]any{"nameGiven": []string{"Jo", long(201)}}), "nameGiven[1]"},
		{"POST", "/api/v1/patients", patient(map[string]any{"nameGiven": names(1001)}), "nameGiven"},
		{"POST", "/api/v1/patients", patient(map[string]any{"phone": long(1001)}), "phone"},
		{"POST", "/api/v1/patients", patient(map[string]any{"email": email + "x"}), "email"},
		{"POST", "/api/v1/patients", patient(map[string]any{"identifiers": []any{admIdentifier(long(1001))}}), "identifiers[0].value"},
		{"POST", "/api/v1/patients", patient(map[string]any{"identifiers": []any{map[string]any{"system": url(1001), "value": "1"}}}), "identifiers[0].system"},
		{"POST", "/api/v1/patients", patient(map[string]any{"identifiers": slices.Repeat([]any{admIdentifier("1")}, 1001)}), "identifiers"},
		{"POST", "/api/v1/patients", patient(map[string]any{"organizationIds": items(1001)}), "organizationIds"},
		{"PATCH", patientPath, map[string]any{"nameFamily": long(17 << 20)}, "nameFamily"},
		{"PATCH", patientPath, map[string]any{"nameGiven": []string{long(17 << 20)}}, "nameGiven[0]"},
		{"POST", "/api/v1/studies", map[string]any{"organizationId": w.org.ID, "name": long(201)}, "name"},
		{"POST", "/api/v1/studies", map[string]any{"organizationId": w.org.ID, "name": "S", "description": long(10_001)}, "description"},
		{"POST", "/api/v1/studies", map[string]any{"organizationId": w.org.ID, "name": "S", "iconUrl": url(2001)}, "iconUrl"},
		{"PATCH", studyPath, map[string]any{"description": long(10_001)}, "description"},
		{"POST", studyPath + "/patients", map[string]any{"patientIds": items(1001)}, "patientIds"},
		{"POST", studyPath + "/scope_requests", map[string]any{"codingSystem": url(1001), "codingCode": "c"}, "codingSystem"},
		{"POST", "/api/v1/data_sources", map[string]any{"name": long(201), "type": "personal_device"}, "name"},
		{"POST", "/api/v1/data_sources", map[string]any{"name": "D", "type": "personal_device", "supportedScopeCodeIds": items(1001)}, "supportedScopeCodeIds"},
		{"POST", "/api/v1/scope_codes", map[string]any{"codingSystem": domain.SystemOpenMHealth, "codingCode": long(1001)}, "codingCode"},
		{"POST", "/api/v1/scope_codes", map[string]any{"codingSystem": domain.SystemOpenMHealth, "codingCode": "omh:x:1.0", "text": long(201)}, "text"},
		{"POST", "/api/v1/fhir_sources", map[string]any{"patient": p.ID, "label": long(201)}, "label"},
		{"POST", patientPath + "/consents", map[string]any{"studyScopeConsents": []any{map[string]any{"studyId": st.ID,
			"scopeConsents": []any{map[string]any{"codingSystem": url(1001), "codingCode": code.Code, "consented": true}}}}}, "codingSystem"},
		{"POST", patientPath + "/consents", map[string]any{"studyScopeConsents": slices.Repeat([]any{map[string]any{"studyId": st.ID}}, 1001)}, "studyScopeConsents"},
		{"POST", patientPath + "/invitation", map[string]any{"clientId": long(1001)}, "clientId"},
		{"POST", "/api/v1/oauth_clients", client(map[string]any{"name": long(201)}), "name"},
		{"POST", "/api/v1/oauth_clients", client(map[string]any{"redirectUris": []string{url(2001)}}), "redirectUris[0]"},
		{"POST", "/api/v1/oauth_clients", client(map[string]any{"redirectUris": slices.Repeat([]string{"https://app.example.org/cb"}, 1001)}), "redirectUris"},
		{"POST", "/api/v1/oauth_clients", client(map[string]any{"allowedOrigins": []string{url(2001)}}), "allowedOrigins[0]"},
	} {
		w.call(t, tc.method, tc.path, w.admin, tc.body, http.StatusBadRequest, tc.field, "at most")
	}
	admSameSnapshot(t, "writes over the bounds", before, admSnapshot(t, w.env))

	// A NUL character is refused in names and identifiers, wherever it is.
	for _, tc := range []struct {
		method, path string
		body         any
		field        string
	}{
		{"POST", "/api/v1/organizations", map[string]any{"name": "Clinic\u0000 B", "type": "prov"}, "name"},
		{"PATCH", orgPath, map[string]any{"name": "\u0000"}, "name"},
		{"POST", "/api/v1/practitioners", map[string]any{"email": "p@example.org", "firstName": "Ann\u0000", "organizationId": w.org.ID, "role": "member"}, "firstName"},
		{"POST", "/api/v1/patients", patient(map[string]any{"nameFamily": "Doe\u0000Smith"}), "nameFamily"},
		{"POST", "/api/v1/patients", patient(map[string]any{"nameGiven": []string{"Jo", "\u0000"}}), "nameGiven[1]"},
		{"POST", "/api/v1/patients", patient(map[string]any{"identifiers": []any{admIdentifier("MRN\u00001")}}), "identifiers[0].value"},
		{"PATCH", patientPath, map[string]any{"phone": "+1\u0000555"}, "phone"},
		{"POST", "/api/v1/studies", map[string]any{"organizationId": w.org.ID, "name": "S\u0000"}, "name"},
		{"POST", "/api/v1/data_sources", map[string]any{"name": "D\u0000", "type": "personal_device"}, "name"},
		{"POST", "/api/v1/scope_codes", map[string]any{"codingSystem": domain.SystemOpenMHealth, "codingCode": "omh:x\u0000:1.0"}, "codingCode"},
	} {
		w.call(t, tc.method, tc.path, w.admin, tc.body, http.StatusBadRequest, tc.field, "NUL")
	}
	admSameSnapshot(t, "writes with NUL", before, admSnapshot(t, w.env))

	// At the bound, a write is taken; characters count, not bytes.
	w.call(t, "POST", "/api/v1/organizations", w.admin, map[string]any{"name": long(200), "type": "prov"}, http.StatusCreated)
	created := w.call(t, "POST", "/api/v1/patients", w.admin, patient(map[string]any{"email": email, "nameFamily": strings.Repeat("é", 200),
		"identifiers": []any{admIdentifier(long(1000))}, "nameGiven": names(1000)}), http.StatusCreated)
	if created["nameFamily"] != strings.Repeat("é", 200) {
		t.Errorf("a 200-character name: %v", created["nameFamily"])
	}
	w.call(t, "POST", "/api/v1/studies", w.admin, map[string]any{"organizationId": w.org.ID, "name": long(200), "description": long(10_000), "iconUrl": url(2000)}, http.StatusCreated)
}

// TestWritesThatChangeNothingMakeNoVersion: a JSON Patch [] (or of test
// operations only), a merge patch of what is there ({} or the same
// values), and a PUT of the current content (meta.versionId and
// lastUpdated aside, members in another order) answer 200 with the
// current version and store nothing; a JSON Patch that is not an array
// (null, an object) is 400. The old service made a version of each.
func TestWritesThatChangeNothingMakeNoVersion(t *testing.T) {
	w := fxNewImported(t)
	c := w.post(t, "doc", w.aliceSrc, fxCondition)
	path := "/Condition/" + c["id"].(string)
	current := string(fxMustRaw(t, w, path))
	var reordered map[string]any // decoded, re-encoded: another member order
	_ = json.Unmarshal([]byte(current), &reordered)
	fxObj(reordered["meta"])["versionId"], fxObj(reordered["meta"])["lastUpdated"] = "7", "2020-01-01T00:00:00Z"
	jsonPatch, mergePatch := "application/json-patch+json", "application/merge-patch+json"
	for _, tc := range []struct {
		name, method, contentType, body string
		status                          int
	}{
		{"an empty JSON Patch", "PATCH", jsonPatch, `[]`, http.StatusOK},
		{"a JSON Patch of a passing test", "PATCH", jsonPatch, `[{"op": "test", "path": "/onsetDateTime", "value": "2015-06-10"}]`, http.StatusOK},
		{"a JSON Patch replacing a value by itself", "PATCH", jsonPatch, `[{"op": "replace", "path": "/onsetDateTime", "value": "2015-06-10"}]`, http.StatusOK},
		{"an empty merge patch", "PATCH", mergePatch, `{}`, http.StatusOK},
		{"a merge patch of the same values", "PATCH", mergePatch, `{"onsetDateTime": "2015-06-10", "subject": {"reference": "Patient/123"}}`, http.StatusOK},
		{"a merge patch removing what is absent", "PATCH", mergePatch, `{"abatementDateTime": null}`, http.StatusOK},
		{"a PUT of the current content", "PUT", "application/fhir+json", current, http.StatusOK},
		{"a PUT of the same, reordered, another versionId", "PUT", "application/fhir+json", fxCompact(reordered), http.StatusOK},
		{"a null JSON Patch", "PATCH", jsonPatch, `null`, http.StatusBadRequest},
		{"a JSON Patch object", "PATCH", jsonPatch, `{}`, http.StatusBadRequest},
		{"an empty body as a JSON Patch", "PATCH", jsonPatch, ``, http.StatusBadRequest},
		{"a null merge patch", "PATCH", mergePatch, `null`, http.StatusBadRequest},
	} {
		resp, body := w.do(t, "doc", tc.method, path, map[string]string{"Content-Type": tc.contentType}, tc.body)
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, resp.StatusCode, body, tc.status)
			continue
		}
		if tc.status != http.StatusOK {
			bdCheckError(t, tc.name, &bdAnswer{resp, body}, tc.status, bdFHIR, "invalid")
		} else if resp.Header.Get("ETag") != `W/"1"` || string(body) != current {
			t.Errorf("%s: ETag %s, answered %s, want the current version", tc.name, resp.Header.Get("ETag"), body)
		}
		if now := string(fxMustRaw(t, w, path)); now != current {
			t.Errorf("%s: the resource changed to %s", tc.name, now)
		}
	}
	// A change still makes a version.
	resp, body := w.do(t, "doc", "PATCH", path, map[string]string{"Content-Type": mergePatch}, `{"onsetDateTime": "2015-06-11"}`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") != `W/"2"` {
		t.Errorf("a change: %d %s %s", resp.StatusCode, resp.Header.Get("ETag"), body)
	}
}

// TestIDsHaveOneSpelling: an integer id names a record only as the service
// writes it: "+1", "01", "1.0", " 1", "0x1" and the like are 404 in FHIR
// and admin paths (400 as a query parameter, a reference, the source
// header or an If-Match version), where the old service answered
// Observation 1 or patient 1 for several of them.
func TestIDsHaveOneSpelling(t *testing.T) {
	w := fxNewImported(t)
	obsID := w.create(t, w.tok["doc"], fxObs{patient: w.alice.ID, device: w.watch, code: fxHR,
		payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2024-03-05T10:00:00+01:00")))})[0]
	alice := strconv.FormatInt(w.alice.ID, 10)
	spellings := func(id string) []string {
		return []string{"+" + id, "0" + id, "00" + id, id + ".0", "%20" + id, id + "%20", "0x" + id, id + "e0", id + "_", "-" + id}
	}
	get := func(path string) (*http.Response, []byte) {
		return fxDo(t, w.env, "GET", path, map[string]string{"Authorization": "Bearer " + w.tok["super"]}, "")
	}
	for _, p := range []struct {
		prefix, id string
		surface    bdSurface
	}{
		{fxBase + "/Observation/", obsID, bdFHIR},
		{"/fhir/r5/Observation/", obsID, bdFHIR},
		{fxBase + "/Patient/", alice, bdFHIR},
		{fxBase + "/Observation/", obsID + "/_history/1", bdFHIR},
		{"/api/v1/patients/", alice, bdAdmin},
		{"/api/v1/organizations/", strconv.FormatInt(w.orgA.ID, 10), bdAdmin},
	} {
		if resp, body := get(p.prefix + p.id); resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s%s: %d %s", p.prefix, p.id, resp.StatusCode, body)
		}
		id, rest, _ := strings.Cut(p.id, "/")
		if rest != "" {
			rest = "/" + rest
		}
		for _, s := range spellings(id) {
			resp, body := get(p.prefix + s + rest)
			bdCheckError(t, "GET "+p.prefix+s+rest, &bdAnswer{resp, body}, http.StatusNotFound, p.surface, "not-found")
		}
	}
	// Elsewhere an id is a field of the request: 400 naming it.
	resp, out := w.env.Send(t, "GET", "/api/v1/practitioners?organizationId=0"+strconv.FormatInt(w.orgA.ID, 10), w.tok["super"], nil)
	bdCheckError(t, "organizationId=01", &bdAnswer{resp, []byte(fxCompact(out))}, http.StatusBadRequest, bdAdmin, "")
	ref := fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2024-03-05T10:00:00+01:00")))}.resource()
	ref["subject"] = map[string]any{"reference": "Patient/0" + alice}
	resp, out = w.env.Send(t, "POST", fxBase+"/Observation", w.tok["doc"], ref)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(fxOutcomeText(out), "Observation.subject") {
		t.Errorf("subject Patient/0%s: %d %v", alice, resp.StatusCode, out)
	}
	resp, body := w.do(t, "doc", "POST", "/Condition", map[string]string{domain.SourceHeader: "0" + strconv.FormatInt(w.aliceSrc.ID, 10)}, fxCondition)
	bdCheckError(t, "source header 01", &bdAnswer{resp, body}, http.StatusBadRequest, bdFHIR, "invalid")
	c := w.post(t, "doc", w.aliceSrc, fxCondition)
	resp, body = w.do(t, "doc", "PATCH", "/Condition/"+c["id"].(string), map[string]string{"Content-Type": "application/json-patch+json", "If-Match": `W/"01"`}, `[]`)
	bdCheckError(t, `If-Match W/"01"`, &bdAnswer{resp, body}, http.StatusBadRequest, bdFHIR, "invalid")
	// Searches by id find nothing under another spelling.
	for _, q := range []string{"/Observation?_id=0" + obsID, "/Observation?patient=0" + alice, "/Observation?patient=Patient/%2B" + alice} {
		if ids := w.ids(t, w.tok["super"], q); len(ids) != 0 {
			t.Errorf("GET %s: found %v", q, ids)
		}
	}
}

// TestUpstreamIDs: the id a FHIR source gave a resource moves into an
// identifier whatever FHIR's id rule says of it (longer than 64
// characters, other printable characters), up to 1,000 characters;
// empty ids, control characters (NUL, line breaks) and surrounding spaces
// are refused with 400 on <type>.id, on the R5 create path and on the R4
// import alike. The old service kept any string, NUL and megabytes
// included.
func TestUpstreamIDs(t *testing.T) {
	w := fxNewImported(t)
	condition := func(id any) string {
		var c map[string]any
		_ = json.Unmarshal([]byte(fxCondition), &c)
		c["id"] = id
		return fxCompact(c)
	}
	procedure := func(id any) string {
		return fxCompact(map[string]any{"resourceType": "Procedure", "id": id, "status": "completed",
			"code": map[string]any{"text": "Appendectomy"}, "subject": map[string]any{"reference": "Patient/1"}})
	}
	for _, tc := range []struct {
		name string
		id   any
		ok   bool
	}{
		{"a FHIR id of 64 characters", strings.Repeat("a", 64), true},
		{"100 characters", strings.Repeat("b", 100), true},
		{"1,000 characters", strings.Repeat("c", 1000), true},
		{"other printable characters", "urn:ehr/Encounter_17 (copy)", true},
		{"1,001 characters", strings.Repeat("d", 1001), false},
		{"a NUL", "e\u0000f", false},
		{"a line break", "g\nh", false},
		{"a tab", "i\tj", false},
		{"surrounding spaces", " k ", false},
		{"empty", "", false},
		{"null", nil, false},
		{"a number", 17, false},
	} {
		want := http.StatusCreated
		if !tc.ok {
			want = http.StatusBadRequest
		}
		// R5 create.
		resp, body := w.do(t, "doc", "POST", "/Condition", fxSourceHeader(w.aliceSrc), condition(tc.id))
		if resp.StatusCode != want {
			t.Errorf("R5 create, %s: %d %.300s, want %d", tc.name, resp.StatusCode, body, want)
		} else if tc.ok && !strings.Contains(string(body), fxCompact(map[string]any{"system": fxSourceURI(w.aliceSrc) + "/id", "value": tc.id})) {
			t.Errorf("R5 create, %s: the identifier is not the id: %.300s", tc.name, body)
		} else if !tc.ok && !strings.Contains(fxOutcomeText(fxDecode(t, body)), "Condition.id") {
			t.Errorf("R5 create, %s: the outcome does not name Condition.id: %s", tc.name, body)
		}
		// R4 import: one entry.
		resp, body = fxDo(t, w.env, "POST", "/fhir-import/R4/Procedure", map[string]string{"Authorization": "Bearer " + w.tok["doc"],
			domain.SourceHeader: strconv.FormatInt(w.aliceSrc.ID, 10)}, procedure(tc.id))
		out := fxDecode(t, body)
		entry := fxObj(fxArr(out["entry"])[0])
		if status := fmt.Sprint(fxObj(entry["response"])["status"]); resp.StatusCode != http.StatusOK || !strings.HasPrefix(status, strconv.Itoa(want)) {
			t.Errorf("R4 import, %s: %d %s, want an entry %d", tc.name, resp.StatusCode, status, want)
		}
	}
}

// TestTimeFramesThatCannotBeReadAreRefused: a data point whose time frame
// passes its schema but cannot be read (an interval that ends before it
// starts, a negative duration, a second 60 that is no leap second) is 422
// naming the member in the data point, in Open mHealth and IEEE 1752
// alike, and nothing is stored; the old service stored it without
// effective[x], so no date search found it. A true leap second
// (23:59:60 UTC ending a month), which the old service also stored
// without effective[x], reads as the instant after it.
func TestTimeFramesThatCannotBeReadAreRefused(t *testing.T) {
	w := fxNewWorld(t)
	before := fxSnapshot(t, w)
	for _, tc := range []struct {
		name, code string
		body       map[string]any
		path       string
	}{
		{"an interval that ends before it starts", fxHR,
			fxHeartRate(fxInterval("start_date_time", "2024-03-05T10:00:00Z", "end_date_time", "2024-03-05T09:00:00Z")), "/body/effective_time_frame/time_interval"},
		{"an interval that ends before it starts, across offsets", fxHR,
			fxHeartRate(fxInterval("start_date_time", "2024-03-05T10:00:00-01:00", "end_date_time", "2024-03-05T10:30:00Z")), "/body/effective_time_frame/time_interval"},
		{"a negative duration", fxSteps,
			fxStepCount(fxInterval("start_date_time", "2024-03-05T10:00:00Z", "duration", fxDuration(-1, "h"))), "/body/effective_time_frame/time_interval/duration"},
		{"a negative duration back from the end", fxHR,
			fxHeartRate(fxInterval("end_date_time", "2024-03-05T10:00:00Z", "duration", fxDuration(-30, "min"))), "/body/effective_time_frame/time_interval/duration"},
		{"an IEEE interval that ends before it starts", fxIEEEPA, map[string]any{"activity_name": "walking",
			"effective_time_frame": fxInterval("start_date_time", "2024-03-05T07:45:00-08:00", "end_date_time", "2024-03-05T07:00:00-08:00")}, "/body/effective_time_frame/time_interval"},
		{"an IEEE negative duration", fxIEEEPA, map[string]any{"activity_name": "walking",
			"effective_time_frame": fxInterval("start_date_time", "2024-03-05T07:00:00-08:00", "duration", fxDuration(-45, "min"))}, "/body/effective_time_frame/time_interval/duration"},
		{"a second 60 that is no leap second", fxHR, fxHeartRate(fxAt("2024-03-05T10:59:60Z")), "/body/effective_time_frame/date_time"},
	} {
		system := fxOMH
		if strings.HasPrefix(tc.code, "ieee:") {
			system = fxIEEE
		}
		obs := fxObs{patient: w.alice.ID, device: w.watch, system: system, code: tc.code, payload: fxDataPoint(tc.code, tc.body)}
		resp, body := fxDo(t, w.env, "POST", fxBase+"/Observation", map[string]string{"Authorization": "Bearer " + w.tok["doc"]}, fxCompact(obs.resource()))
		out := bdCheckError(t, tc.name, &bdAnswer{resp, body}, http.StatusUnprocessableEntity, bdFHIR, "processing")
		if text := fxOutcomeText(out); !strings.Contains(text, "Observation.valueAttachment.data") || !strings.Contains(text, tc.path) {
			t.Errorf("%s: %q does not name %s", tc.name, text, tc.path)
		}
		// In a batch the entry alone is refused.
		entries := w.batch(t, w.tok["doc"], obs.resource())
		if got := fxObj(entries[0]["response"])["status"]; got != "422 Unprocessable Entity" {
			t.Errorf("%s in a batch: %v", tc.name, got)
		}
	}
	if after := fxSnapshot(t, w); fxCompact(after) != fxCompact(before) {
		t.Errorf("refused time frames were stored")
	}
	// A leap second is an instant a date search finds.
	id := w.create(t, w.tok["doc"], fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2016-12-31T23:59:60Z")))})[0]
	if ids := w.ids(t, w.tok["doc"], "/Observation?date=2017-01-01"); !slices.Equal(ids, []string{id}) {
		t.Errorf("a leap second: date=2017-01-01 found %v, want [%s]", ids, id)
	}
	// effective[x] given with it may say the leap second as it is written.
	leap := fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2016-12-31T15:59:60-08:00")))}.resource()
	leap["effectiveDateTime"] = "2016-12-31T15:59:60-08:00"
	if resp, out := w.env.Send(t, "POST", fxBase+"/Observation", w.tok["doc"], leap); resp.StatusCode != http.StatusCreated || out["effectiveDateTime"] != "2016-12-31T16:00:00-08:00" {
		t.Errorf("a leap second given as effectiveDateTime: %d %v", resp.StatusCode, out)
	}
}

// TestNativeObservationMembersAreExact: the native Observation is read as
// strictly as an imported resource: a member named twice (at any depth)
// is 400 naming it, where encoding/json kept the last value (a second
// subject silently won), and member names match exactly, so "Status" is
// an unknown element, where encoding/json read it as status.
func TestNativeObservationMembersAreExact(t *testing.T) {
	w := fxNewWorld(t)
	good := fxCompact(fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, identifiers: []string{"exact-1"},
		payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2024-03-05T10:00:00+01:00")))}.resource())
	// edit adds raw members at the start of the object at path (a JSON
	// text edit: a map could not hold a member twice).
	edit := func(after, members string) string {
		i := strings.Index(good, after)
		if i < 0 {
			t.Fatalf("%s not in %s", after, good)
		}
		i += len(after)
		return good[:i] + members + "," + good[i:]
	}
	bob := fmt.Sprintf(`"subject":{"reference":"Patient/%d"}`, w.bob.ID)
	before := fxSnapshot(t, w)
	for _, tc := range []struct {
		name, body, field string
	}{
		{"a second subject", edit(`{`, bob), "Observation.subject"},
		{"a second status", edit(`{`, `"status":"preliminary"`), "Observation.status"},
		{"a second coding list", edit(`"code":{`, `"coding":[]`), "Observation.code.coding"},
		{"a second identifier value", edit(`"identifier":[{`, `"value":"exact-2"`), "Observation.identifier[0].value"},
		{"a second attachment data", edit(`"valueAttachment":{`, `"data":"e30="`), "Observation.valueAttachment.data"},
		{"Status", edit(`{`, `"Status":"final"`), "Observation.Status"},
		{"Subject", strings.Replace(good, `"subject"`, `"Subject"`, 1), "Observation.Subject"},
		{"a coding's System", strings.Replace(good, `"system":"`+fxOMH, `"System":"`+fxOMH, 1), "Observation.code.coding[0].System"},
		{"ValueAttachment", strings.Replace(good, `"valueAttachment"`, `"ValueAttachment"`, 1), "Observation.ValueAttachment"},
	} {
		resp, body := fxDo(t, w.env, "POST", fxBase+"/Observation", map[string]string{"Authorization": "Bearer " + w.tok["doc"]}, tc.body)
		out := bdCheckError(t, tc.name, &bdAnswer{resp, body}, http.StatusBadRequest, bdFHIR, "invalid")
		if text := fxOutcomeText(out); !strings.Contains(text, tc.field) {
			t.Errorf("%s: %q does not name %s", tc.name, text, tc.field)
		}
		resp, body = fxDo(t, w.env, "POST", fxBase+"/", map[string]string{"Authorization": "Bearer " + w.tok["doc"]},
			`{"resourceType":"Bundle","type":"batch","entry":[{"request":{"method":"POST","url":"Observation"},"resource":`+tc.body+`}]}`)
		if entry := fxObj(fxArr(fxDecode(t, body)["entry"])[0]); resp.StatusCode != http.StatusOK || fxObj(entry["response"])["status"] != "400 Bad Request" {
			t.Errorf("%s in a batch: %d %s", tc.name, resp.StatusCode, body)
		}
	}
	if after := fxSnapshot(t, w); fxCompact(after) != fxCompact(before) {
		t.Errorf("refused Observations were stored")
	}
	if resp, body := fxDo(t, w.env, "POST", fxBase+"/Observation", map[string]string{"Authorization": "Bearer " + w.tok["doc"]}, good); resp.StatusCode != http.StatusCreated {
		t.Errorf("the Observation itself: %d %s", resp.StatusCode, body)
	}
}

// TestEveryRouteRefusesHostileBodies sends hostile bodies (empty, null,
// other JSON kinds, truncated, deeply nested, invalid UTF-8, numbers out
// of range, huge lists, Bundles of broken entries) in each content type to
// every route of the app, as a superuser and as a patient: each answer is
// 2xx or a 4xx in its surface's format (the HTML pages of /o/ and /console
// aside), and handlerstest fails the test on any 5xx answer or error log.
func TestEveryRouteRefusesHostileBodies(t *testing.T) {
	w := fxNewImported(t)
	resource := w.post(t, "doc", w.aliceSrc, fxCondition)
	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	bodies := []string{
		``, `null`, `[]`, `{}`, `"x"`, `0`, `1e999`, `{"a":`, "{\"\xff\xfe\":\"\xc3\x28\"}", deep,
		`{"resourceType":"` + strings.Repeat("x", 100_000) + `"}`,
		`{"resourceType":"Bundle","type":"batch","entry":[null,{},{"request":null},{"request":{"method":"POST","url":"Observation"},"resource":[]}]}`,
		`{"resourceType":"Observation","code":{"coding":[{"system":"https://w3id.org/openmhealth","code":"omh:heart-rate:2.0"}]},"valueAttachment":{"data":"` + strings.Repeat("A", 1<<16) + `"}}`,
		`{"patientIds":[` + strings.Repeat("1,", 5000) + `1]}`,
		`[{"op":"remove","path":"/"},{"op":"move","from":"/a","path":"/a/b"}]`,
		`{"id":9223372036854775808,"organizationId":-1,"nameGiven":[null],"studyScopeConsents":[{"scopeConsents":[null]}]}`,
	}
	types := []string{"application/json", "application/fhir+json", "application/json-patch+json", "application/merge-patch+json", "text/plain"}
	fill := func(route string) string {
		parts := strings.Split(route, "/")
		for i, p := range parts {
			switch {
			case p == ":type":
				parts[i] = "Condition"
			case p == ":id" && strings.Contains(route, ":type"):
				parts[i] = resource["id"].(string)
			case strings.HasPrefix(p, ":"):
				parts[i] = "1"
			case p == "*":
				parts[i] = "token/"
			}
		}
		return strings.Join(parts, "/")
	}
	sent := 0
	for _, route := range w.env.Routes {
		method, path, _ := strings.Cut(route, " ")
		if method == "HEAD" || method == "CONNECT" || method == "TRACE" {
			continue
		}
		path = fill(path)
		surface := bdAdmin
		if strings.HasPrefix(path, "/FHIR/R5") || strings.HasPrefix(path, "/fhir/r5") || strings.HasPrefix(path, "/fhir-import/R4") {
			surface = bdFHIR
		}
		for k, who := range []string{"super", "alice"} {
			for i, body := range bodies {
				if testing.Short() && (i+k)%2 == 1 {
					continue // under -short, each body as one of the two users
				}
				ct := types[i%len(types)]
				resp, data := fxDo(t, w.env, method, path, map[string]string{"Authorization": "Bearer " + w.tok[who], "Content-Type": ct,
					domain.SourceHeader: strconv.FormatInt(w.aliceSrc.ID, 10)}, body)
				sent++
				// The OAuth pages (/o/) and the console (/console) answer in
				// HTML: handlerstest holds them to "no 5xx" only.
				if resp.StatusCode >= 400 && resp.StatusCode < 500 && !strings.HasPrefix(path, "/o/") && !strings.HasPrefix(path, "/console") {
					bdCheckError(t, fmt.Sprintf("%s %s as %s with body %d (%s)", method, path, who, i, ct), &bdAnswer{resp, data}, resp.StatusCode, surface, "")
				}
			}
		}
	}
	t.Logf("%d routes, %d hostile requests", len(w.env.Routes), sent)
}
