package fhirsearch_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"exchange/domain"
	"exchange/fhirdefs"
	"exchange/fhirdefs/fhirdefstest"
	"exchange/fhirsearch"
)

// r5Catalog is the catalog over the R5 package, built once per test binary.
var r5Catalog = sync.OnceValues(func() (*fhirsearch.Catalog, error) {
	defs, err := fhirdefs.OpenPackage(fhirdefstest.PackageDir("hl7.fhir.r5.core"))
	if err != nil {
		return nil, err
	}
	return fhirsearch.NewCatalog(defs)
})

func catalog(t testing.TB) *fhirsearch.Catalog {
	t.Helper()
	c, err := r5Catalog()
	if err != nil {
		t.Fatalf("%v (run scripts/setup first)", err)
	}
	return c
}

func index(t *testing.T, resource string) domain.ResourceIndex {
	t.Helper()
	ix := catalog(t)
	var m map[string]any
	if err := json.Unmarshal([]byte(resource), &m); err != nil {
		t.Fatal(err)
	}
	return ix.Index(m["resourceType"].(string), m)
}

func example(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fhirdefstest.PackageDir("hl7.fhir.r5.examples"), name))
	if err != nil {
		t.Fatalf("%v (run scripts/setup first)", err)
	}
	return string(data)
}

func day(s string) domain.Span {
	start, _ := time.Parse(time.DateOnly, s)
	return domain.Span{Start: start, End: start.Add(24*time.Hour - time.Millisecond)}
}

// TestIndexOfficialExamples indexes official R5 examples, of configured
// types and of types served from R5 (one or two per kind of parameter),
// with the values read off the examples.
func TestIndexOfficialExamples(t *testing.T) {
	for _, tc := range []struct {
		file    string
		keys    []string
		dates   map[string]domain.Span
		numbers map[string]domain.NumberSpan
	}{
		{"Condition-example.json", []string{
			"code|http://snomed.info/sct|39065001", "code|39065001", "code|http://snomed.info/sct|",
			"clinical-status|active", "category|encounter-diagnosis", "patient|Patient/example", "patient|example"},
			map[string]domain.Span{"onset-date": day("2012-05-24")}, nil},
		{"Patient-example.json", []string{
			"identifier|urn:oid:1.2.36.146.595.217.0.1|12345", "family|chalmers", "given|jim", "name|windsor", "gender|male"},
			map[string]domain.Span{"birthdate": day("1974-12-25")}, nil},
		{"Location-1.json", []string{"address|den burg", "address-city|den burg", "address-postalcode|9105 pz",
			"name|burgers university medical center, south wing, second floor"}, nil, nil},
		{"ServiceRequest-example.json", []string{"code|303653007", "category|103693007", "status|completed"}, nil, nil},
		{"Encounter-example.json", []string{"class|http://terminology.hl7.org/CodeSystem/v3-ActCode|IMP", "status|in-progress"}, nil, nil},
		{file: "Claim-100150.json", keys: []string{
			"use|claim", "status|active", "identifier|http://happyvalley.com/claim|12345", // token
			"provider|Organization/1", "insurer|Organization/2", "patient|Patient/1", // reference
		}, dates: map[string]domain.Span{"created": day("2014-08-16")}},
		{file: "ExplanationOfBenefit-EB3500.json", keys: []string{"disposition|claim settled as per contract."}}, // string
		{file: "Substance-f204.json", keys: []string{"quantity|http://unitsofmeasure.org|mL", "quantity||mL"}, // quantity, UCUM
			numbers: map[string]domain.NumberSpan{"quantity": {Low: 100, High: 100}}},
		{file: "Invoice-example.json", keys: []string{"totalnet|urn:iso:std:iso:4217|EUR", "totalnet||EUR"}, // quantity, Money
			numbers: map[string]domain.NumberSpan{"totalnet": {Low: 40, High: 40}, "totalgross": {Low: 48, High: 48}}},
		{file: "RiskAssessment-genetic.json", // number: the span of several
			numbers: map[string]domain.NumberSpan{"probability": {Low: 0.000168, High: 0.001663}}},
		{file: "ResearchStudy-example-ctgov-study-record.json",
			numbers: map[string]domain.NumberSpan{"recruitment-target": {Low: 62, High: 62}}},
		{file: "Questionnaire-3141.json", keys: []string{"url|http://hl7.org/fhir/Questionnaire/3141"}}, // uri
		{file: "Communication-example.json", keys: []string{"instantiates-uri|http://example.org/hyperkalemia"}},
		{file: "MedicationAdministration-medadmin0311.json", keys: []string{"status|completed", "patient|Patient/pat1"},
			dates: map[string]domain.Span{"date": {Start: time.Date(2015, 1, 15, 21, 3, 0, 0, time.UTC),
				End: time.Date(2015, 1, 16, 1, 3, 0, 999000000, time.UTC)}}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			idx := index(t, example(t, tc.file))
			for _, k := range tc.keys {
				if !slices.Contains(idx.Keys, k) {
					t.Errorf("no key %q in %q", k, idx.Keys)
				}
			}
			for param, want := range tc.dates {
				if got := idx.Dates[param]; !got.Start.Equal(want.Start) || !got.End.Equal(want.End) {
					t.Errorf("%s spans %v, want %v", param, got, want)
				}
			}
			for param, want := range tc.numbers {
				if got := idx.Numbers[param]; got != want {
					t.Errorf("%s spans %v, want %v", param, got, want)
				}
			}
		})
	}
}

func TestIndexSpansChoicesAndExtensions(t *testing.T) {
	idx := index(t, `{"resourceType": "Condition",
		"extension": [{"url": "http://hl7.org/fhir/StructureDefinition/condition-assertedDate", "valueDateTime": "2020-02"},
			{"url": "http://example.org/other", "valueDateTime": "1999"}],
		"subject": {"reference": "https://ehr.example.org/fhir/Patient/p1"},
		"encounter": {"reference": "Encounter/e1"},
		"onsetPeriod": {"start": "2019-01-01T10:00:00+02:00"},
		"abatementString": "in remission",
		"recordedDate": "2020-03-01"}`)
	month := time.Date(2020, 2, 1, 0, 0, 0, 0, time.UTC)
	for param, want := range map[string]domain.Span{
		// An extension's value, selected by its url.
		"asserted-date": {Start: month, End: month.AddDate(0, 1, 0).Add(-time.Millisecond)},
		// A period open at its end reaches as far as dates go.
		"onset-date":    {Start: time.Date(2019, 1, 1, 8, 0, 0, 0, time.UTC), End: domain.SortLastAscending},
		"recorded-date": day("2020-03-01"),
	} {
		if got := idx.Dates[param]; !got.Start.Equal(want.Start) || !got.End.Equal(want.End) {
			t.Errorf("%s spans %v, want %v", param, got, want)
		}
	}
	// abatement-date is dateTime or Period only: a string is not a date.
	if _, ok := idx.Dates["abatement-date"]; ok {
		t.Errorf("abatementString indexed as a date: %v", idx.Dates)
	}
	for _, k := range []string{"patient|Patient/p1", "patient|p1", "patient|https://ehr.example.org/fhir/Patient/p1", "encounter|Encounter/e1", "encounter|e1"} {
		if !slices.Contains(idx.Keys, k) {
			t.Errorf("no key %q in %q", k, idx.Keys)
		}
	}
}

func TestIndexUnionsSeveralDatesAndSortsByDate(t *testing.T) {
	idx := index(t, `{"resourceType": "Immunization", "status": "completed",
		"patient": {"reference": "Patient/p1"}, "occurrenceDateTime": "2021-05-03T09:00:00Z"}`)
	if idx.SortDate == nil || !idx.SortDate.Equal(time.Date(2021, 5, 3, 9, 0, 0, 0, time.UTC)) {
		t.Errorf("sort date %v", idx.SortDate)
	}
	idx = index(t, `{"resourceType": "CarePlan", "status": "active", "intent": "plan",
		"subject": {"reference": "Group/g1"}, "period": {"start": "2020-01-01", "end": "2020-06-30"}}`)
	if got := idx.Dates["date"]; !got.Start.Equal(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)) || !got.End.Equal(day("2020-06-30").End) {
		t.Errorf("CarePlan period %v", got)
	}
	// The subject is a Group: not the patient parameter.
	if slices.ContainsFunc(idx.Keys, func(k string) bool { return len(k) > 8 && k[:8] == "patient|" }) {
		t.Errorf("a Group subject indexed as patient: %q", idx.Keys)
	}
}

func TestIndexDateSpans(t *testing.T) {
	// A date parameter with two values spans both: a Goal's targets.
	idx := index(t, `{"resourceType": "Goal", "lifecycleStatus": "active", "description": {"text": "walk"},
		"subject": {"reference": "Patient/p1"}, "target": [{"dueDate": "2024-03-01"}, {"dueDate": "2024-01-15"}]}`)
	if got := idx.Dates["target-date"]; !got.Start.Equal(day("2024-01-15").Start) || !got.End.Equal(day("2024-03-01").End) {
		t.Errorf("two target dates: %v", got)
	}
	// A time finer than a millisecond spans the millisecond it falls in
	// (what the database keeps), not backwards.
	idx = index(t, `{"resourceType": "Condition", "subject": {"reference": "Patient/p1"},
		"recordedDate": "2021-05-03T09:00:00.1234Z"}`)
	at := time.Date(2021, 5, 3, 9, 0, 0, 123000000, time.UTC)
	if got := idx.Dates["recorded-date"]; !got.Start.Equal(at) || got.End.Before(got.Start) {
		t.Errorf("sub-millisecond recordedDate: %v", got)
	}
}

func TestCatalogKnowsEveryConfiguredParameter(t *testing.T) {
	catalog(t)
	// A package without the definitions stops start-up, not a write.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name": "empty"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	defs, err := fhirdefs.OpenPackage(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fhirsearch.NewCatalog(defs); err == nil {
		t.Error("an empty package gave a catalog")
	}
}

// FuzzIndex: the index of any JSON object, as any configured type, is
// extracted without a panic, its keys are "param|key" strings and its date
// spans run forwards. (Writes validate before they index; the indexer must
// still never fall over on a shape the validator lets through.)
func FuzzIndex(f *testing.F) {
	for _, name := range []string{"Condition-example.json", "Encounter-example.json", "Observation-example.json", "Patient-example.json"} {
		data, err := os.ReadFile(filepath.Join(fhirdefstest.PackageDir("hl7.fhir.r5.examples"), name))
		if err != nil {
			f.Fatalf("%v (run scripts/setup first)", err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"code":{"coding":[{"system":1,"code":[]}]},"onsetPeriod":{"start":"2024","end":"2023"},"subject":{"reference":7}}`))
	f.Add([]byte(`{"recordedDate":"2021-05-03T09:00:00.1234Z","authoredOn":"2021-05-03T09:00:00.999999Z"}`))
	ix := catalog(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var m map[string]any
		if json.Unmarshal(data, &m) != nil {
			return
		}
		for _, r := range ix.Resources() {
			if !ix.Keeps(r.Type) {
				continue
			}
			idx := ix.Index(r.Type, m)
			for _, k := range idx.Keys {
				param, _, found := strings.Cut(k, "|")
				if !found || !slices.ContainsFunc(r.AllParams(), func(p fhirsearch.Param) bool { return p.Name == param && p.Imported }) {
					t.Fatalf("%s: key %q has no parameter of the type", r.Type, k)
				}
			}
			for param, span := range idx.Dates {
				if span.End.Before(span.Start) {
					t.Fatalf("%s: %s spans %v backwards to %v", r.Type, param, span.Start, span.End)
				}
			}
		}
	})
}
