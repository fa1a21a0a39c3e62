package handlers_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"exchange/domain"
	"exchange/handlers/handlerstest"
)

// The Bulk Data conformance checks: what the reference Bulk Data test kit
// (Inferno's bulk data export tests) asks of a server's $export, walked
// against the real service, with a runner of export jobs beside it.

// exporting is a world with an export runner.
func exporting(t *testing.T, o handlerstest.Options) *fxWorld {
	if o.Exports == nil {
		o.Exports = &handlerstest.Exports{}
	}
	o.TrustedProxies = behindLoopbackProxy.TrustedProxies
	return fxNewWorldWith(t, o)
}

// kickOff sends a kick-off and returns the answer and its status URL.
func (w *fxWorld) kickOff(t *testing.T, method, path, token string, header map[string]string, body string) (*http.Response, string) {
	t.Helper()
	h := map[string]string{"Accept": "application/fhir+json", "Prefer": "respond-async"}
	for k, v := range header {
		h[k] = v
	}
	if token != "" {
		h["Authorization"] = "Bearer " + token
	}
	resp, _ := fxDo(t, w.env, method, fxBase+path, h, body)
	return resp, resp.Header.Get("Content-Location")
}

// exportManifest polls a status URL (as told by Retry-After) until the
// export completes, and returns its manifest.
func (w *fxWorld) exportManifest(t *testing.T, status, token string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, body := fxGetAbs(t, status, token, nil)
		switch resp.StatusCode {
		case http.StatusAccepted:
			if resp.Header.Get("X-Progress") == "" || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("a running export's status lacks X-Progress or Retry-After: %v", resp.Header)
			}
		case http.StatusOK:
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("manifest Content-Type %q, want application/json", ct)
			}
			if resp.Header.Get("Expires") == "" {
				t.Error("a manifest without Expires")
			}
			return fxDecode(t, body)
		default:
			t.Fatalf("status %s: %d %s", status, resp.StatusCode, body)
		}
		if time.Now().After(deadline) {
			t.Fatal("the export did not finish in a minute")
		}
		time.Sleep(time.Second) // Retry-After: 1
	}
}

// fxGetAbs GETs an absolute URL with a token and headers.
func fxGetAbs(t *testing.T, rawURL, token string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	// The default transport would ask for gzip and undo it unseen.
	req.Header.Set("Accept-Encoding", header["Accept-Encoding"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// exported downloads every file of a manifest and returns the resources
// by type, checking what the test kit checks of each file: one type per
// file, NDJSON whose every line parses with that resourceType, as many
// lines as the manifest's count.
func (w *fxWorld) exported(t *testing.T, m map[string]any, token string) map[string][]map[string]any {
	t.Helper()
	for _, key := range []string{"transactionTime", "request", "requiresAccessToken", "output", "error"} {
		if _, ok := m[key]; !ok {
			t.Errorf("the manifest lacks %s: %v", key, m)
		}
	}
	if m["requiresAccessToken"] != true {
		t.Errorf("requiresAccessToken %v", m["requiresAccessToken"])
	}
	if _, err := time.Parse(time.RFC3339, fmt.Sprint(m["transactionTime"])); err != nil {
		t.Errorf("transactionTime %v", m["transactionTime"])
	}
	out := map[string][]map[string]any{}
	for _, o := range fxArr(m["output"]) {
		file := fxObj(o)
		typ, link := fmt.Sprint(file["type"]), fmt.Sprint(file["url"])
		if u, err := url.Parse(link); err != nil || !u.IsAbs() {
			t.Errorf("a file URL that is not absolute: %q", link)
		}
		if resp, _ := fxGetAbs(t, link, "", nil); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("a file downloaded without the token: %d", resp.StatusCode)
		}
		resp, body := fxGetAbs(t, link, token, map[string]string{"Accept": "application/fhir+ndjson"})
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/fhir+ndjson" {
			t.Fatalf("file %s: %d %s %s", link, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		lines := 0
		sc := bufio.NewScanner(bytes.NewReader(body))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines++
			var r map[string]any
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("file %s line %d does not parse: %v", link, lines, err)
			}
			if r["resourceType"] != typ {
				t.Errorf("file %s of type %s holds a %v", link, typ, r["resourceType"])
			}
			out[typ] = append(out[typ], r)
		}
		if fmt.Sprint(lines) != fmt.Sprint(file["count"]) {
			t.Errorf("file %s: %d lines, the manifest counts %v", link, lines, file["count"])
		}
		// The same file, compressed for a client that takes gzip.
		resp, zipped := fxGetAbs(t, link, token, map[string]string{"Accept-Encoding": "gzip"})
		if resp.Header.Get("Content-Encoding") != "gzip" {
			t.Errorf("file %s: Content-Encoding %q with Accept-Encoding gzip", link, resp.Header.Get("Content-Encoding"))
		} else if zr, err := gzip.NewReader(bytes.NewReader(zipped)); err != nil {
			t.Error(err)
		} else if plain, _ := io.ReadAll(zr); !bytes.Equal(plain, body) {
			t.Errorf("file %s: the gzip holds other bytes", link)
		}
	}
	return out
}

// refs lists the ids of resources, sorted; of observations, their
// patient/code pairs.
func exportedIDs(resources []map[string]any) []string {
	var out []string
	for _, r := range resources {
		out = append(out, fmt.Sprint(r["id"]))
	}
	slices.Sort(out)
	return out
}

func observationsByPatient(resources []map[string]any) map[string][]string {
	out := map[string][]string{}
	for _, r := range resources {
		patient := fmt.Sprint(fxObj(r["subject"])["reference"])
		code := fmt.Sprint(fxObj(fxArr(fxObj(r["code"])["coding"])[0])["code"])
		out[patient] = append(out[patient], code)
	}
	for _, codes := range out {
		slices.Sort(codes)
	}
	return out
}

// exportData uploads observations of the world's patients: alice and bob
// heart rate and blood pressure, dave heart rate, carol heart rate.
func (w *fxWorld) exportData(t *testing.T) {
	t.Helper()
	obs := func(p *domain.Patient, code string, body map[string]any) fxObs {
		return fxObs{patient: p.ID, device: w.watch, code: code, payload: fxDataPoint(code, body)}
	}
	at := fxAt("2024-03-05T10:00:00Z")
	w.create(t, w.tok["super"],
		obs(w.alice, fxHR, fxHeartRate(at)), obs(w.alice, fxBP, fxBloodPressure(at)),
		obs(w.bob, fxHR, fxHeartRate(at)), obs(w.bob, fxBP, fxBloodPressure(at)),
		obs(w.dave, fxHR, fxHeartRate(at)), obs(w.carol, fxHR, fxHeartRate(at)))
}

func TestBulkExportConformance(t *testing.T) {
	w := exporting(t, handlerstest.Options{Audit: true})
	w.exportData(t)
	doc := w.tok["doc"]
	group := fmt.Sprintf("/Group/%d/$export", w.s1.ID)

	t.Run("no token is 401", func(t *testing.T) {
		if resp, _ := w.kickOff(t, "GET", group, "", nil, ""); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%d", resp.StatusCode)
		}
	})
	t.Run("Accept other than FHIR JSON is refused", func(t *testing.T) {
		if resp, _ := w.kickOff(t, "GET", group, doc, map[string]string{"Accept": "application/xml"}, ""); resp.StatusCode != http.StatusNotAcceptable {
			t.Errorf("%d", resp.StatusCode)
		}
	})
	t.Run("bad parameters are 400 with an OperationOutcome", func(t *testing.T) {
		for _, q := range []string{"_outputFormat=text/csv", "_since=yesterday", "_type=Nonsense", "_type=Practitioner", "_unknown=1",
			"_typeFilter=Observation?patient=1", "_typeFilter=Observation?_count=5", "_typeFilter=Observation?nope=1", "_elements=bad-name"} {
			resp, body := fxDo(t, w.env, "GET", fxBase+group+"?"+q, map[string]string{"Authorization": "Bearer " + doc, "Prefer": "respond-async"}, "")
			if resp.StatusCode != http.StatusBadRequest || fxDecode(t, body)["resourceType"] != "OperationOutcome" {
				t.Errorf("%s: %d %s", q, resp.StatusCode, body)
			}
		}
	})
	t.Run("a study the caller may not read is not found", func(t *testing.T) {
		resp, _ := w.kickOff(t, "GET", fmt.Sprintf("/Group/%d/$export", w.s3.ID), doc, nil, "")
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%d", resp.StatusCode)
		}
	})

	var statusURL string
	t.Run("202 with an absolute Content-Location", func(t *testing.T) {
		resp, loc := w.kickOff(t, "GET", group, doc, nil, "")
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("%d", resp.StatusCode)
		}
		if u, err := url.Parse(loc); err != nil || !u.IsAbs() {
			t.Fatalf("Content-Location %q", loc)
		}
		statusURL = loc
	})
	t.Run("only the owner sees the job", func(t *testing.T) {
		for _, other := range []string{w.tok["viewer"], w.tok["super"], w.tok["alice"]} {
			if resp, _ := fxGetAbs(t, statusURL, other, nil); resp.StatusCode != http.StatusNotFound {
				t.Errorf("another user polled the job: %d", resp.StatusCode)
			}
			if resp, _ := fxDo(t, w.env, "DELETE", strings.TrimPrefix(statusURL, w.env.URL), map[string]string{"Authorization": "Bearer " + other}, ""); resp.StatusCode != http.StatusNotFound {
				t.Errorf("another user deleted the job: %d", resp.StatusCode)
			}
		}
		if resp, _ := fxGetAbs(t, statusURL, "", nil); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("polled without a token: %d", resp.StatusCode)
		}
	})
	t.Run("a Group export holds the study's patients and their consented codes", func(t *testing.T) {
		m := w.exportManifest(t, statusURL, doc)
		if !strings.HasSuffix(fmt.Sprint(m["request"]), group) {
			t.Errorf("request %v", m["request"])
		}
		got := w.exported(t, m, doc)
		patients := []string{fmt.Sprint(w.alice.ID), fmt.Sprint(w.bob.ID), fmt.Sprint(w.dave.ID)}
		slices.Sort(patients)
		if ids := exportedIDs(got["Patient"]); !slices.Equal(ids, patients) {
			t.Errorf("patients %v, want the study's %v", ids, patients)
		}
		// alice consented to both codes, bob to heart rate only (blood
		// pressure refused), dave answered nothing, carol is elsewhere.
		want := map[string][]string{fmt.Sprintf("Patient/%d", w.alice.ID): {fxBP, fxHR}, fmt.Sprintf("Patient/%d", w.bob.ID): {fxHR}}
		if byPatient := observationsByPatient(got["Observation"]); fmt.Sprint(byPatient) != fmt.Sprint(want) {
			t.Errorf("observations %v, want %v", byPatient, want)
		}
		if ids := exportedIDs(got["Group"]); !slices.Equal(ids, []string{fmt.Sprint(w.s1.ID)}) {
			t.Errorf("groups %v", ids)
		}
		if ids := exportedIDs(got["Organization"]); !slices.Equal(ids, []string{fmt.Sprint(w.orgA.ID)}) {
			t.Errorf("organizations %v", ids)
		}
		if ids := exportedIDs(got["Device"]); !slices.Equal(ids, []string{fmt.Sprint(w.watch)}) {
			t.Errorf("devices %v", ids)
		}
	})
	t.Run("DELETE is 202, then the status is 404", func(t *testing.T) {
		resp, _ := fxDo(t, w.env, "DELETE", strings.TrimPrefix(statusURL, w.env.URL), map[string]string{"Authorization": "Bearer " + doc}, "")
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("DELETE: %d", resp.StatusCode)
		}
		resp, body := fxGetAbs(t, statusURL, doc, nil)
		if resp.StatusCode != http.StatusNotFound || fxDecode(t, body)["resourceType"] != "OperationOutcome" {
			t.Errorf("status after DELETE: %d %s", resp.StatusCode, body)
		}
	})
	t.Run("the three spellings of NDJSON", func(t *testing.T) {
		for _, f := range []string{"application/fhir+ndjson", "application/ndjson", "ndjson"} {
			resp, loc := w.kickOff(t, "GET", group+"?_type=Patient&_outputFormat="+url.QueryEscape(f), doc, nil, "")
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("%s: %d", f, resp.StatusCode)
			}
			if got := w.exported(t, w.exportManifest(t, loc, doc), doc); len(got["Patient"]) != 3 {
				t.Errorf("%s: %d patients", f, len(got["Patient"]))
			}
		}
	})
	t.Run("POST with a Parameters body, and _typeFilter", func(t *testing.T) {
		body := `{"resourceType":"Parameters","parameter":[{"name":"_type","valueString":"Observation"},
			{"name":"_typeFilter","valueString":"Observation?code=` + fxBP + `"}]}`
		resp, loc := w.kickOff(t, "POST", group, doc, map[string]string{"Content-Type": "application/fhir+json"}, body)
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("%d", resp.StatusCode)
		}
		got := w.exported(t, w.exportManifest(t, loc, doc), doc)
		want := map[string][]string{fmt.Sprintf("Patient/%d", w.alice.ID): {fxBP}}
		if byPatient := observationsByPatient(got["Observation"]); fmt.Sprint(byPatient) != fmt.Sprint(want) || len(got) != 1 {
			t.Errorf("%v, want only %v", byPatient, want)
		}
	})
	t.Run("_since, and patients who joined the study since", func(t *testing.T) {
		since := time.Now().UTC()
		time.Sleep(5 * time.Millisecond)
		at := fxAt("2024-04-01T10:00:00Z")
		w.create(t, w.tok["super"], fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, payload: fxDataPoint(fxHR, fxHeartRate(at))},
			fxObs{patient: w.bob.ID, device: w.watch, code: fxBP, payload: fxDataPoint(fxBP, fxBloodPressure(at))})
		// carol joins S1 now: her earlier heart rate is new to the study.
		orgs := []int64{w.orgB.ID, w.orgA.ID}
		if _, err := w.env.Service.UpdatePatient(w.ctx, fxSys, w.carol.ID, domain.PatientPatch{OrganizationIDs: &orgs}); err != nil {
			t.Fatal(err)
		}
		w.consent(w.carol, w.s1, map[*domain.ScopeCode]bool{w.hr: true})
		resp, loc := w.kickOff(t, "GET", group+"?_type=Observation&_since="+since.Format(time.RFC3339Nano), doc, nil, "")
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("%d", resp.StatusCode)
		}
		got := w.exported(t, w.exportManifest(t, loc, doc), doc)
		// alice's new heart rate; bob's new blood pressure is refused
		// consent; carol's old heart rate, as she joined since.
		want := map[string][]string{fmt.Sprintf("Patient/%d", w.alice.ID): {fxHR}, fmt.Sprintf("Patient/%d", w.carol.ID): {fxHR}}
		if byPatient := observationsByPatient(got["Observation"]); fmt.Sprint(byPatient) != fmt.Sprint(want) {
			t.Errorf("%v, want %v", byPatient, want)
		}
	})
	t.Run("lenient handling names the ignored parameter in the manifest", func(t *testing.T) {
		resp, loc := w.kickOff(t, "GET", group+"?_type=Group&includeAssociatedData=LatestProvenanceResources", doc,
			map[string]string{"Prefer": "respond-async, handling=lenient"}, "")
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("%d", resp.StatusCode)
		}
		m := w.exportManifest(t, loc, doc)
		errs := fxArr(m["error"])
		if len(errs) != 1 || fxObj(errs[0])["type"] != "OperationOutcome" {
			t.Fatalf("error %v", m["error"])
		}
		_, body := fxGetAbs(t, fmt.Sprint(fxObj(errs[0])["url"]), doc, nil)
		if !strings.Contains(string(body), "includeAssociatedData") || !strings.Contains(string(body), `"OperationOutcome"`) {
			t.Errorf("error file %s", body)
		}
	})
	t.Run("the audit trail records kick-offs, completions and downloads", func(t *testing.T) {
		if err := w.env.Audit.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		_, bundle := w.search(t, w.tok["alice"], "/AuditEvent?_count=1000")
		kinds := map[string]int{}
		for _, e := range fxMatches(t, bundle) {
			kinds[fmt.Sprint(fxObj(fxArr(fxObj(e["code"])["coding"])[0])["code"])]++
		}
		for _, kind := range []string{"bulk-export-completed", "bulk-export-download"} {
			if kinds[kind] == 0 {
				t.Errorf("alice sees no %s event of the exports of her data: %v", kind, kinds)
			}
		}
		_, bundle = w.search(t, w.tok["super"], fmt.Sprintf("/AuditEvent?agent=Practitioner/%d&_count=1000", w.doc.ID))
		found := false
		for _, e := range fxMatches(t, bundle) {
			found = found || fxObj(fxArr(fxObj(e["code"])["coding"])[0])["code"] == "bulk-export"
		}
		if !found {
			t.Error("no kick-off event of the practitioner's exports")
		}
	})
}

// TestBulkExportLevels: who may export what at each level.
func TestBulkExportLevels(t *testing.T) {
	w := exporting(t, handlerstest.Options{})
	w.exportData(t)
	t.Run("system level: superusers and backend clients only", func(t *testing.T) {
		if resp, _ := w.kickOff(t, "GET", "/$export", w.tok["doc"], nil, ""); resp.StatusCode != http.StatusForbidden {
			t.Errorf("a practitioner's system export: %d", resp.StatusCode)
		}
		resp, loc := w.kickOff(t, "GET", "/$export?_type=Patient", w.tok["super"], nil, "")
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("a superuser's system export: %d", resp.StatusCode)
		}
		if got := w.exported(t, w.exportManifest(t, loc, w.tok["super"]), w.tok["super"]); len(got["Patient"]) != 4 {
			t.Errorf("%d patients, want all 4", len(got["Patient"]))
		}
		// A backend client acting for the practitioner exports what the
		// practitioner may read: organization A's patients, not carol.
		key := handlerstest.NewBackendKey(t, "ES384")
		client := w.env.BackendClient(t, key, w.doc.ID, 0)
		token := w.env.BackendToken(t, key, client.ID, "system/Patient.rs system/Observation.rs")
		resp, loc = w.kickOff(t, "GET", "/$export", token, nil, "")
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("a backend client's system export: %d", resp.StatusCode)
		}
		got := w.exported(t, w.exportManifest(t, loc, token), token)
		if ids := exportedIDs(got["Patient"]); slices.Contains(ids, fmt.Sprint(w.carol.ID)) || len(ids) != 3 {
			t.Errorf("the backend client exported patients %v", ids)
		}
		if len(got) != 2 {
			t.Errorf("types %v: the token's scopes reach Patient and Observation only", len(got))
		}
	})
	t.Run("patient level: a patient exports their own record", func(t *testing.T) {
		resp, loc := w.kickOff(t, "GET", "/Patient/$export", w.tok["alice"], nil, "")
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("%d", resp.StatusCode)
		}
		got := w.exported(t, w.exportManifest(t, loc, w.tok["alice"]), w.tok["alice"])
		if ids := exportedIDs(got["Patient"]); !slices.Equal(ids, []string{fmt.Sprint(w.alice.ID)}) {
			t.Errorf("patients %v", ids)
		}
		for p := range observationsByPatient(got["Observation"]) {
			if p != fmt.Sprintf("Patient/%d", w.alice.ID) {
				t.Errorf("alice exported %s's observations", p)
			}
		}
		if resp, _ := w.kickOff(t, "GET", fmt.Sprintf("/Patient/$export?patient=Patient/%d", w.bob.ID), w.tok["alice"], nil, ""); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("alice asked for bob's record: %d", resp.StatusCode)
		}
	})
	t.Run("the Open mHealth format", func(t *testing.T) {
		resp, loc := w.kickOff(t, "GET", "/Patient/$export?_outputFormat=application/x-omh%2Bndjson", w.tok["alice"], nil, "")
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("%d", resp.StatusCode)
		}
		m := w.exportManifest(t, loc, w.tok["alice"])
		for _, o := range fxArr(m["output"]) {
			_, body := fxGetAbs(t, fmt.Sprint(fxObj(o)["url"]), w.tok["alice"], nil)
			for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
				var r map[string]any
				if err := json.Unmarshal([]byte(line), &r); err != nil || r["patient"] != fmt.Sprint(w.alice.ID) ||
					fxObj(fxObj(r["data_point"])["header"])["schema_id"] == nil || r["effective_start"] == nil {
					t.Errorf("line %s (%v)", line, err)
				}
			}
		}
	})
}

// TestBulkExportQueue: polling faster than told is 429, and a full queue
// refuses a kick-off with 429.
func TestBulkExportQueue(t *testing.T) {
	w := fxNewWorldWith(t, handlerstest.Options{TrustedProxies: behindLoopbackProxy.TrustedProxies}) // no runner: jobs wait
	resp, loc := w.kickOff(t, "GET", "/Patient/$export", w.tok["doc"], nil, "")
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("%d", resp.StatusCode)
	}
	if resp, _ := fxGetAbs(t, loc, w.tok["doc"], nil); resp.StatusCode != http.StatusAccepted || resp.Header.Get("X-Progress") != "queued" {
		t.Fatalf("first poll: %d %v", resp.StatusCode, resp.Header)
	}
	if resp, _ := fxGetAbs(t, loc, w.tok["doc"], nil); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a poll sooner than Retry-After: %d %v", resp.StatusCode, resp.Header)
	}
	time.Sleep(time.Second)
	if resp, _ := fxGetAbs(t, loc, w.tok["doc"], nil); resp.StatusCode != http.StatusAccepted {
		t.Errorf("a poll after Retry-After: %d", resp.StatusCode)
	}
	// One owner holds at most domain.MaxOwnerExports unfinished jobs.
	for i := 1; i < domain.MaxOwnerExports; i++ {
		if resp, _ := w.kickOff(t, "GET", "/Patient/$export", w.tok["doc"], nil, ""); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("kick-off %d: %d", i+1, resp.StatusCode)
		}
	}
	resp, _ = w.kickOff(t, "GET", "/Patient/$export", w.tok["doc"], nil, "")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a kick-off beyond the owner's share: %d", resp.StatusCode)
	}
}

// TestExportPermissionMatrix: who may kick off each level of $export, and
// that a job's status, files and deletion are its owner's alone (anyone
// else: 404, as for a job that does not exist). The actors are the
// permission matrix's.
func TestExportPermissionMatrix(t *testing.T) {
	w := newWorldWith(t, handlerstest.Options{Exports: &handlerstest.Exports{}})
	kickOff := func(path, token string) (int, string) {
		resp, _ := fxDo(t, w.env, "GET", path, map[string]string{"Authorization": "Bearer " + token, "Prefer": "respond-async"}, "")
		loc := resp.Header.Get("Content-Location")
		if resp.StatusCode == http.StatusAccepted { // out of the owner's share of the queue again
			fxDo(t, w.env, "DELETE", strings.TrimPrefix(loc, w.env.URL), map[string]string{"Authorization": "Bearer " + token}, "")
		}
		return resp.StatusCode, loc
	}
	for _, row := range []struct {
		name, path, want string
	}{
		{"system $export", "/FHIR/R5/$export", "202 403 403 403 403 403 403 401 401"},
		{"Patient/$export", "/FHIR/R5/Patient/$export", "202 202 202 202 202 202 202 401 401"},
		{"Group/$export", fmt.Sprintf("/FHIR/R5/Group/%d/$export", w.study.ID), "202 202 202 202 404 202 404 401 401"},
	} {
		want := strings.Fields(row.want)
		for i, actor := range matrixActors {
			if got, _ := kickOff(row.path, w.tokens[actor]); fmt.Sprint(got) != want[i] {
				t.Errorf("%s as %s: %d, want %s", row.name, actor, got, want[i])
			}
		}
	}
	// The member's job, completed: only the member polls, downloads and
	// deletes it.
	resp, _ := fxDo(t, w.env, "GET", fmt.Sprintf("/FHIR/R5/Group/%d/$export?_type=Patient", w.study.ID),
		map[string]string{"Authorization": "Bearer " + w.tokens["member"]}, "")
	status := resp.Header.Get("Content-Location")
	var file string
	for deadline := time.Now().Add(30 * time.Second); file == "" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if resp, body := fxGetAbs(t, status, w.tokens["member"], nil); resp.StatusCode == http.StatusOK {
			file = fmt.Sprint(fxObj(fxArr(fxDecode(t, body)["output"])[0])["url"])
		}
	}
	if file == "" {
		t.Fatal("the member's export did not complete")
	}
	// The member's token held to a patient, through the same client, is
	// not the owner: the job was made with the member's full access.
	member := must(w.env.Service.UserByEmail(w.ctx, "member@example.org"))
	held, _, err := w.env.OAuth.IssueScopedAccessToken(w.ctx, member.ID, time.Hour, []string{"openid", "launch/patient", "patient/*.rs"}, w.other.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, url := range []string{status, file} {
		if resp, _ := fxGetAbs(t, url, held, nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("the member's export with a token held to a patient: GET %s = %d, want 404", url, resp.StatusCode)
		}
	}
	for _, row := range []struct {
		name, method, url, want string
	}{
		{"status", "GET", status, "404 404 200 404 404 404 404 401 401"},
		{"file", "GET", file, "404 404 200 404 404 404 404 401 401"},
		{"DELETE", "DELETE", status, "404 404 202 404 404 404 404 401 401"},
	} {
		want := strings.Fields(row.want)
		for i, actor := range matrixActors {
			if actor == "member" && row.method == "GET" {
				time.Sleep(time.Second) // as Retry-After asks
			}
			resp, _ := fxDo(t, w.env, row.method, strings.TrimPrefix(row.url, w.env.URL), map[string]string{"Authorization": "Bearer " + w.tokens[actor]}, "")
			if fmt.Sprint(resp.StatusCode) != want[i] {
				t.Errorf("%s of the member's export as %s: %d, want %s", row.name, actor, resp.StatusCode, want[i])
			}
		}
	}
}

// TestBulkExportAcrossInstances: two instances on one database, files in
// GridFS: each answers any job's status and serves its files, and of the
// two runners one runs each job.
func TestBulkExportAcrossInstances(t *testing.T) {
	w := exporting(t, handlerstest.Options{Exports: &handlerstest.Exports{GridFS: true, FileResources: 2}})
	w.exportData(t)
	other := handlerstest.StartWith(t, handlerstest.Options{Database: w.env.DB, Exports: &handlerstest.Exports{GridFS: true, FileResources: 2}})
	doc := w.tok["doc"]
	var statuses []string
	for range 3 {
		resp, loc := w.kickOff(t, "GET", fmt.Sprintf("/Group/%d/$export?_type=Patient,Observation", w.s1.ID), doc, nil, "")
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("%d", resp.StatusCode)
		}
		statuses = append(statuses, strings.Replace(loc, w.env.URL, other.URL, 1))
	}
	for _, status := range statuses {
		got := w.exported(t, w.exportManifest(t, status, doc), doc) // through the other instance
		if len(got["Patient"]) != 3 || len(got["Observation"]) != 3 {
			t.Errorf("%d patients and %d observations, want 3 and 3", len(got["Patient"]), len(got["Observation"]))
		}
	}
}
