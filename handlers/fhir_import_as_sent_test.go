package handlers_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"exchange/handlers/handlerstest"
	"exchange/telemetry"
)

// What an EHR sends, taken as sent: the R4 import and an R5 create follow
// the same rules.

// TestBase64WhitespaceOneRule: Base64 with whitespace among its characters
// (MIME-style line breaks) is taken by an R5 create as by the R4 import,
// and both store it without, the same bytes in R5's format; everything
// else stays as sent. Base64 that is malformed without its whitespace is
// refused by both.
func TestBase64WhitespaceOneRule(t *testing.T) {
	w := fxNewImported(t)
	const spaced = `SGVsbG8g\nd29y\r\nbGQ= `
	const compact = `"data":"SGVsbG8gd29ybGQ="`
	r5 := func(id, data string) string {
		return `{"resourceType": "DocumentReference", "id": "` + id + `", "status": "current",
			"contained": [{"resourceType": "Binary", "id": "b", "contentType": "text/plain", "data": "` + data + `"}],
			"subject": {"reference": "Patient/1"},
			"content": [{"attachment": {"contentType": "text/plain", "size": "11"}}, {"attachment": {"contentType": "text/plain", "data": "` + data + `", "title": "a  b\n"}}],
			"extension": [{"url": "http://example.org/ratio", "valueDecimal": 1.50}]}`
	}
	resp, body := w.do(t, "doc", "POST", "/DocumentReference", fxSourceHeader(w.aliceSrc), r5("r5-doc", spaced))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("R5 create: %d %s", resp.StatusCode, body)
	}
	if s := string(body); strings.Count(s, compact) != 2 || !strings.Contains(s, `"title":"a  b\n"`) || !strings.Contains(s, `"valueDecimal":1.50`) {
		t.Errorf("R5 create stored %s", body)
	}
	r4 := `{"resourceType": "DocumentReference", "id": "r4-doc", "status": "current", "subject": {"reference": "Patient/1"},
		"content": [{"attachment": {"contentType": "text/plain", "data": "` + spaced + `"}}]}`
	status, out := w.importR4(t, "doc", fmt.Sprint(w.aliceSrc.ID), "/DocumentReference", r4)
	entries := fxImportEntries(t, out)
	if status != 200 || len(entries) != 1 || entries[0].status != "201 Created" || !strings.Contains(fxCompact(entries[0].resource), compact) {
		t.Errorf("R4 import: %d %v", status, out)
	}
	// Malformed once the whitespace is gone: refused by both, at its path.
	resp, body = w.do(t, "doc", "POST", "/DocumentReference", fxSourceHeader(w.aliceSrc), r5("r5-bad", `SGVs\nbG8`))
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "DocumentReference.contained[0].data") {
		t.Errorf("malformed R5: %d %s", resp.StatusCode, body)
	}
	status, out = w.importR4(t, "doc", fmt.Sprint(w.aliceSrc.ID), "/DocumentReference", strings.Replace(r4, spaced, `SGVs\nbG8`, 1))
	if entries := fxImportEntries(t, out); status != 200 || len(entries) != 1 || !strings.HasPrefix(entries[0].status, "400") {
		t.Errorf("malformed R4: %d %v", status, out)
	}
}

// TestDecimalsKeptAsSent: a decimal with more digits than a 64-bit float
// holds (Synthea's Patients carry 0.0006122107609236168) is imported and
// created with its text as sent, and read back so.
func TestDecimalsKeptAsSent(t *testing.T) {
	w := fxNewImported(t)
	const ext = `"extension":[{"url":"http://synthetichealth.github.io/synthea/quality-adjusted-life-years","valueDecimal":0.0006122107609236168},{"url":"http://example.org/big","valueDecimal":123456789012345678901234567890.10}]`
	status, out := w.importR4(t, "doc", fmt.Sprint(w.aliceSrc.ID), "/Patient", `{"resourceType":"Patient","id":"syn-1",`+ext+`,"gender":"female"}`)
	entries := fxImportEntries(t, out)
	if status != 200 || len(entries) != 1 || entries[0].status != "201 Created" {
		t.Fatalf("R4 import: %d %v", status, out)
	}
	resp, body := w.do(t, "doc", "GET", "/Patient/"+fmt.Sprint(entries[0].resource["id"]), nil, "")
	if resp.StatusCode != 200 || !strings.Contains(string(body), ext) {
		t.Errorf("read: %d %s", resp.StatusCode, body)
	}
	resp, body = w.do(t, "doc", "POST", "/Patient", fxSourceHeader(w.aliceSrc), `{"resourceType":"Patient","id":"syn-2",`+ext+`}`)
	if resp.StatusCode != http.StatusCreated || !strings.Contains(string(body), ext) {
		t.Errorf("R5 create: %d %s", resp.StatusCode, body)
	}
}

// TestImportLossesLoggedOnce: what an import's conversions dropped is one
// log line per request, counting each path, not a line per value (a
// Synthea import of 7,000 resources wrote 2,000 alike); it names element
// paths, never values.
func TestImportLossesLoggedOnce(t *testing.T) {
	var logs handlerstest.LogBuffer
	log, err := telemetry.ParseLogConfig("json", "info")
	if err != nil {
		t.Fatal(err)
	}
	w := fxNewImportedWith(t, handlerstest.Options{TrustedProxies: behindLoopbackProxy.TrustedProxies, Logger: log.NewLogger(&logs)})
	device := func(id string) string {
		return `{"resource": {"resourceType": "Device", "id": "` + id + `", "status": "active", "patient": {"reference": "Patient/p1", "display": "Secret Person"}}}`
	}
	bundle := `{"resourceType": "Bundle", "type": "batch", "entry": [` + device("d1") + `, ` + device("d2") + `,
		{"resource": {"resourceType": "Organization", "id": "o1", "name": "Clinic", "telecom": [{"system": "phone", "value": "555-0100"}]}},
		{"resource": {"resourceType": "Condition", "id": "c1", "subject": {"reference": "Patient/p1"}, "code": {"text": "x"}}}]}`
	status, out := w.importR4(t, "doc", fmt.Sprint(w.aliceSrc.ID), "", bundle)
	if status != 200 || len(fxImportEntries(t, out)) != 4 {
		t.Fatalf("import: %d %v", status, out)
	}
	var lines []map[string]any
	for _, l := range logs.JSONLines(t) {
		if strings.Contains(fmt.Sprint(l["msg"]), "dropped") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || lines[0]["resources"] != 3.0 || lines[0]["values"] != 3.0 ||
		lines[0]["paths"] != "Device.patient=2 Organization.telecom=1" || lines[0]["source"] != float64(w.aliceSrc.ID) {
		t.Errorf("loss lines %v", lines)
	}
	if all := logs.String(); strings.Contains(all, "Secret Person") || strings.Contains(all, "555-0100") {
		t.Errorf("the log holds values: %s", all)
	}
}

// TestMedicationRequestByCode: MedicationRequest?code= searches the
// medication's concept (a CodeableReference in R5), imported from R4's
// medicationCodeableConcept; it was ignored, and counted every request.
func TestMedicationRequestByCode(t *testing.T) {
	w := fxNewImported(t)
	request := func(id, code string) string {
		return `{"resource": {"resourceType": "MedicationRequest", "id": "` + id + `", "status": "active", "intent": "order",
			"medicationCodeableConcept": {"coding": [{"system": "http://www.nlm.nih.gov/research/umls/rxnorm", "code": "` + code + `"}]},
			"subject": {"reference": "Patient/p1"}}}`
	}
	bundle := `{"resourceType": "Bundle", "type": "batch", "entry": [` + request("m1", "314076") + `, ` + request("m2", "314076") + `, ` + request("m3", "197361") + `]}`
	if status, out := w.importR4(t, "doc", fmt.Sprint(w.aliceSrc.ID), "", bundle); status != 200 || strings.Count(fxCompact(out), "201 Created") != 3 {
		t.Fatalf("import: %d %v", status, out)
	}
	source := "_source=" + fxSourceURI(w.aliceSrc)
	status, body := w.search(t, w.tok["doc"], "/MedicationRequest?"+source+"&code=314076")
	if status != 200 || len(fxMatches(t, body)) != 2 || len(fxOutcomes(t, body)) != 0 {
		t.Errorf("code=314076: %d %v", status, fxCompact(body))
	}
	status, body = w.search(t, w.tok["doc"], "/MedicationRequest?"+source+"&code=http://www.nlm.nih.gov/research/umls/rxnorm|197361&_summary=count")
	if status != 200 || body["total"] != 1.0 || len(fxOutcomes(t, body)) != 0 {
		t.Errorf("code=rxnorm|197361, count: %d %v", status, fxCompact(body))
	}
}
