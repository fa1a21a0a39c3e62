package handlers_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
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
