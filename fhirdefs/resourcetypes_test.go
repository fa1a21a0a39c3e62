package fhirdefs_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"exchange/fhirdefs"
	"exchange/fhirdefs/fhirdefstest"
)

func r5Package(t *testing.T) *fhirdefs.Package {
	t.Helper()
	defs, err := fhirdefs.OpenPackage(fhirdefstest.PackageDir("hl7.fhir.r5.core"))
	if err != nil {
		t.Fatalf("%v: run scripts/setup first", err)
	}
	return defs
}

// TestResourceTypesAreTheResourceDefinitions: the value set ResourceTypes
// reads lists exactly the types of the package's StructureDefinitions of
// kind resource that are not abstract (their specializations, not
// profiles), which is what the imported store serves from.
func TestResourceTypesAreTheResourceDefinitions(t *testing.T) {
	defs := r5Package(t)
	got, err := defs.ResourceTypes()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(fhirdefstest.PackageDir("hl7.fhir.r5.core"), "StructureDefinition-*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var sd struct {
			Kind, Type, Derivation string
			Abstract               bool
		}
		if err := json.Unmarshal(data, &sd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if sd.Kind == "resource" && !sd.Abstract && sd.Derivation == "specialization" {
			want = append(want, sd.Type)
		}
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("ResourceTypes %d types %v,\nStructureDefinitions %d %v", len(got), got, len(want), want)
	}
	if len(got) != 158 {
		t.Errorf("R5 5.0.0 defines 158 concrete resource types, not %d", len(got))
	}
}

func TestPatientCompartment(t *testing.T) {
	compartment, err := r5Package(t).PatientCompartment()
	if err != nil {
		t.Fatal(err)
	}
	for typ, want := range map[string][]string{
		"Claim":                    {"patient", "payee"},
		"MedicationAdministration": {"patient", "subject"},
		"Basic":                    {"patient", "author"},
	} {
		if got := compartment[typ]; !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", typ, got, want)
		}
	}
	// Types the compartment lists without parameters are not in it.
	for _, typ := range []string{"Medication", "Questionnaire"} {
		if got, ok := compartment[typ]; ok {
			t.Errorf("%s is in the compartment by %v", typ, got)
		}
	}
}

func TestSearchParameters(t *testing.T) {
	defs := r5Package(t)
	claim, err := defs.SearchParameters("Claim")
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, sp := range claim {
		codes = append(codes, sp.Code)
	}
	if !slices.IsSorted(codes) || !slices.Contains(codes, "patient") || !slices.Contains(codes, "created") {
		t.Errorf("Claim's parameters %v", codes)
	}
	// A shared definition keeps the type's own part of its expression, and
	// its URL; one with no part for the type is listed without one.
	date, err := defs.SearchParameter("Encounter", "date")
	if err != nil || date.Expression != "Encounter.actualPeriod" || date.URL != "http://hl7.org/fhir/SearchParameter/clinical-date" {
		t.Errorf("Encounter date: %+v %v", date, err)
	}
	appointment, _ := defs.SearchParameters("Appointment")
	i := slices.IndexFunc(appointment, func(sp *fhirdefs.SearchParam) bool { return sp.Code == "date" })
	if i < 0 || appointment[i].Expression != "" {
		t.Errorf("Appointment date: %v", i)
	}
	if _, err := defs.SearchParameter("Appointment", "date"); err == nil {
		t.Error("SearchParameter gave a definition without an expression")
	}
	// The package's own examples of SearchParameter are not parameters.
	if _, err := defs.SearchParameter("Patient", "part-agree"); err == nil {
		t.Error("the example-extension SearchParameter was read as Patient's")
	}
}
