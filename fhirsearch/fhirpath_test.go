package fhirsearch

import (
	"encoding/json"
	"fmt"
	"testing"
)

func TestFHIRPathSubset(t *testing.T) {
	resource := map[string]any{}
	if err := json.Unmarshal([]byte(`{"resourceType": "Observation",
		"subject": {"reference": "Patient/1"},
		"performer": [{"reference": "Practitioner/2"}, {"type": "Patient", "display": "self"}],
		"effectivePeriod": {"start": "2020"},
		"valueQuantity": {"value": 1.5},
		"component": [{"code": {"text": "a"}}, {"code": {"text": "b"}}],
		"extension": [{"url": "http://x/1", "valueString": "one"}, {"url": "http://x/2", "valueString": "two"}],
		"note": [{"text": "n1", "authorString": "a"}, {"text": "n2"}]}`), &resource); err != nil {
		t.Fatal(err)
	}
	for expr, want := range map[string]string{
		"Observation.subject.reference":                                                `["Patient/1"]`,
		"Observation.component.code.text":                                              `["a","b"]`,
		"Observation.performer.where(resolve() is Patient)":                            `[{"display":"self","type":"Patient"}]`,
		"Observation.subject | Observation.performer.where(resolve() is Practitioner)": `[{"reference":"Patient/1"},{"reference":"Practitioner/2"}]`,
		"(Observation.effective as Period).start":                                      `["2020"]`,
		"Observation.effective.ofType(dateTime)":                                       `null`,
		"Observation.value.ofType(Quantity).value":                                     `[1.5]`,
		"Observation.extension.where(url = 'http://x/2').value":                        `["two"]`,
		"Observation.extension('http://x/1').value":                                    `["one"]`,
		"Observation.note.where(text='n2')":                                            `[{"text":"n2"}]`,
		"Observation.note.where(text = 'nobody')":                                      `null`,
		"Condition.code | Observation.status":                                          `null`,
	} {
		fp, err := compileFHIRPath(expr)
		if err != nil {
			t.Errorf("%s: %v", expr, err)
			continue
		}
		var values []any
		for _, n := range fp.evalInto(nil, "Observation", resource, new([2][]node)) {
			values = append(values, n.value)
		}
		if got, _ := json.Marshal(values); string(got) != want {
			t.Errorf("%s = %s, want %s", expr, got, want)
		}
	}
	for _, expr := range []string{"Observation.code.exists()", "Observation.where(status != 'final')", "Observation.extension(url)",
		"Observation.note.where(text = 'it''s')", "Observation.item.where(extension('http://x').exists())", "(Observation.code", "Observation..code", "1 + 1"} {
		if _, err := compileFHIRPath(expr); err == nil {
			t.Errorf("%s compiled", expr)
		}
	}
}

func TestReferenceTypes(t *testing.T) {
	for ref, want := range map[string]string{
		"Patient/1": "Patient/1", "https://h/fhir/Patient/1/_history/2": "Patient/1", "urn:uuid:abc": "", "#contained": "", "patient/1": "",
	} {
		typ, id, ok := typeAndID(ref)
		if got := fmt.Sprintf("%s/%s", typ, id); ok != (want != "") || (ok && got != want) {
			t.Errorf("%s: %s %v, want %q", ref, got, ok, want)
		}
	}
}

func TestParseID(t *testing.T) {
	for _, c := range []struct {
		value, resourceType string
		id                  int64
		ok                  bool
	}{
		{"12", "Patient", 12, true},
		{"Patient/12", "Patient", 12, true},
		{"https://example.org/fhir/Patient/12", "Patient", 12, true},
		{"Patient/12/_history/3", "Patient", 12, true},
		{"Patient/12", "", 12, true},
		{"xPatient/12", "Patient", 0, false},
		{"Group/12", "Patient", 0, false},
		{"Patient/abc", "Patient", 0, false},
		{"Patient/0", "Patient", 0, false},
		{"/12", "", 0, false},
		{"+12", "", 0, false},
		{"Patient/012", "Patient", 0, false},
	} {
		if id, ok := parseID(c.value, c.resourceType); id != c.id || ok != c.ok {
			t.Errorf("parseID(%q, %q) = %d, %v; want %d, %v", c.value, c.resourceType, id, ok, c.id, c.ok)
		}
	}
}
