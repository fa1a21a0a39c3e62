package handlers_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// TestImportedReferencesResolve: the references between the resources of
// one source point to the ids the imported store gives them, in any
// import order (an Encounter before its Patient), keep the upstream id as
// their identifier, and are found by patient= and subject= in either
// form; the rewrite is no loss. What is no reference between the
// source's resources (conditional, contained, another server's) stays as
// written.
func TestImportedReferencesResolve(t *testing.T) {
	w := fxNewImported(t)
	src := fmt.Sprint(w.aliceSrc.ID)
	encounter := `{"resourceType": "Encounter", "id": "enc-1", "status": "finished",
		"class": {"system": "http://terminology.hl7.org/CodeSystem/v3-ActCode", "code": "AMB"},
		"subject": {"reference": "Patient/79a66c97-6131", "display": "Mrs. Upton"},
		"participant": [{"individual": {"reference": "Practitioner?identifier=http://hl7.org/fhir/sid/us-npi|9999974493"}}],
		"serviceProvider": {"reference": "https://elsewhere.example.org/fhir/Organization/o1"},
		"period": {"start": "2020-01-01T10:00:00Z"}}`
	status, out := w.importR4(t, "doc", src, "/Encounter", encounter)
	entries := fxImportEntries(t, out)
	if status != 200 || len(entries) != 1 || entries[0].status != "201 Created" {
		t.Fatalf("Encounter: %d %v", status, out)
	}
	for _, issue := range entries[0].issues {
		if issue["severity"] == "warning" {
			t.Errorf("the rewrite is reported as a loss: %v", issue)
		}
	}
	enc := entries[0].resource
	subject := fxObj(enc["subject"])
	patientRef, _ := subject["reference"].(string)
	ident := fxObj(subject["identifier"])
	if !strings.HasPrefix(patientRef, "Patient/") || !fxUUID.MatchString(strings.TrimPrefix(patientRef, "Patient/")) ||
		ident["system"] != fxSourceURI(w.aliceSrc)+"/id" || ident["value"] != "79a66c97-6131" || subject["display"] != "Mrs. Upton" {
		t.Errorf("subject %v", subject)
	}
	if got := fxCompact(enc["participant"]); !strings.Contains(got, `"Practitioner?identifier=http://hl7.org/fhir/sid/us-npi|9999974493"`) {
		t.Errorf("a conditional reference changed: %s", got)
	}
	if got := fxCompact(enc["serviceProvider"]); got != `{"reference":"https://elsewhere.example.org/fhir/Organization/o1"}` {
		t.Errorf("another server's reference changed: %s", got)
	}

	// The Patient, imported after: stored under the id the Encounter
	// already names.
	status, out = w.importR4(t, "doc", src, "/Patient", `{"resourceType": "Patient", "id": "79a66c97-6131", "gender": "female"}`)
	entries = fxImportEntries(t, out)
	if status != 200 || len(entries) != 1 || "Patient/"+fmt.Sprint(entries[0].resource["id"]) != patientRef {
		t.Fatalf("Patient: %d %v, the Encounter names %s", status, out, patientRef)
	}
	storedID := strings.TrimPrefix(patientRef, "Patient/")
	source := "_source=" + url.QueryEscape(fxSourceURI(w.aliceSrc))
	for _, q := range []string{
		"patient=Patient/79a66c97-6131", "patient=79a66c97-6131", "patient=" + patientRef, "patient=" + storedID,
		"subject=Patient/79a66c97-6131", "subject=" + patientRef, "subject=" + storedID,
	} {
		status, body := w.search(t, w.tok["doc"], "/Encounter?"+source+"&"+q)
		if ids := fxIDsOf(fxMatches(t, body)); status != 200 || len(ids) != 1 || ids[0] != enc["id"] {
			t.Errorf("%s: %d %v", q, status, fxCompact(body))
		}
	}
	for _, q := range []string{"patient=Patient/other", "subject=Patient/other", "subject=Practitioner/79a66c97-6131"} {
		if status, body := w.search(t, w.tok["doc"], "/Encounter?"+source+"&"+q); status != 200 || len(fxMatches(t, body)) != 0 {
			t.Errorf("%s: %d %v", q, status, fxCompact(body))
		}
	}
	// Another source of the same upstream id is another resource: carol's
	// EHR, read by a practitioner who sees both, is not mixed in.
	if _, out := w.importR4(t, "super", fmt.Sprint(w.carolSrc.ID), "/Encounter", strings.Replace(encounter, "enc-1", "enc-2", 1)); !strings.Contains(fxCompact(out), "201 Created") {
		t.Fatalf("carol's Encounter: %v", out)
	}
	if status, body := w.search(t, w.tok["super"], "/Encounter?"+source+"&patient=Patient/79a66c97-6131"); status != 200 || len(fxMatches(t, body)) != 1 {
		t.Errorf("one source: %d %v", status, fxCompact(body))
	}
}
