package fhirdefs_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"exchange/fhirdefs"
	"exchange/fhirdefs/fhirdefstest"
)

var (
	once      sync.Once
	validator *fhirdefs.Validator
	setupErr  error
)

func r5(t testing.TB) *fhirdefs.Validator {
	t.Helper()
	once.Do(func() {
		defs, err := fhirdefs.OpenPackage(fhirdefstest.PackageDir("hl7.fhir.r5.core"))
		if err != nil {
			setupErr = err
			return
		}
		terms, err := fhirdefs.OpenTerminology(fhirdefstest.PackageDir("hl7.fhir.r5.expansions"))
		if err != nil {
			setupErr = err
			return
		}
		validator = fhirdefs.NewValidator(defs, terms)
	})
	if setupErr != nil {
		t.Fatalf("%v: run scripts/setup first", setupErr)
	}
	return validator
}

// The 28 types of the imported store, each with official examples.
var configuredTypes = []string{"AllergyIntolerance", "CarePlan", "CareTeam", "Condition", "Coverage", "Device", "DiagnosticReport",
	"DocumentReference", "Encounter", "FamilyMemberHistory", "Goal", "Group", "Immunization", "Location", "Medication",
	"MedicationDispense", "MedicationRequest", "Observation", "Organization", "Patient", "Practitioner", "PractitionerRole",
	"Procedure", "Provenance", "QuestionnaireResponse", "RelatedPerson", "ServiceRequest", "Specimen"}

// examples returns up to n official R5 examples of a type.
func examples(t *testing.T, resourceType string, n int) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(fhirdefstest.PackageDir("hl7.fhir.r5.examples"), resourceType+"-*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples of %s: run scripts/setup", resourceType)
	}
	slices.Sort(files)
	if len(files) > n {
		files = files[:n]
	}
	return files
}

// TestOfficialExamplesAreValid: the R5 examples of every configured type
// (two each, 56 in all) pass.
func TestOfficialExamplesAreValid(t *testing.T) {
	v := r5(t)
	count := 0
	for _, rt := range configuredTypes {
		for _, f := range examples(t, rt, 2) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			issues, err := v.Validate(data)
			if err != nil {
				t.Fatal(err)
			}
			if len(issues) > 0 {
				t.Errorf("%s: %v", filepath.Base(f), issues)
			}
			count++
		}
	}
	if count < 40 {
		t.Fatalf("only %d examples", count)
	}
}

const observation = `{"resourceType": "Observation", "id": "a1", "status": "final",
	"code": {"coding": [{"system": "http://loinc.org", "code": "8867-4"}]},
	"subject": {"reference": "Patient/1"}, "effectiveDateTime": "2024-05-01T10:00:00Z",
	"valueQuantity": {"value": 72, "unit": "/min"}}`

// patch applies edits to a JSON document: key paths separated by '.',
// array items by index; a nil value deletes.
func patch(t *testing.T, doc string, edits map[string]any) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatal(err)
	}
	for path, v := range edits {
		keys := strings.Split(path, ".")
		var cur any = m
		for _, k := range keys[:len(keys)-1] {
			switch c := cur.(type) {
			case map[string]any:
				cur = c[k]
			case []any:
				var i int
				_ = json.Unmarshal([]byte(k), &i)
				cur = c[i]
			}
		}
		obj := cur.(map[string]any)
		if v == nil {
			delete(obj, keys[len(keys)-1])
		} else {
			obj[keys[len(keys)-1]] = v
		}
	}
	data, _ := json.Marshal(m)
	return data
}

// TestInvalidResourcesAreRefusedWithTheirPath: each mutation of a valid
// resource is caught, at the element it broke.
func TestInvalidResourcesAreRefusedWithTheirPath(t *testing.T) {
	v := r5(t)
	raw := func(s string) any { var x any; _ = json.Unmarshal([]byte(s), &x); return x }
	deep := `{"linkId": "x"}`
	for i := 0; i < 60; i++ {
		deep = `{"linkId": "x", "item": [` + deep + `]}`
	}
	cases := []struct {
		name string
		doc  []byte
		path string // expected in an issue's expression
	}{
		{"unknown resource type", []byte(`{"resourceType": "Foo"}`), "Foo"},
		{"no resource type", []byte(`{"status": "final"}`), ""},
		{"abstract type", []byte(`{"resourceType": "DomainResource"}`), "DomainResource"},
		{"a data type", []byte(`{"resourceType": "Coding"}`), "Coding"},
		{"not an object", []byte(`[1, 2]`), ""},
		{"not JSON", []byte(`{"resourceType": "Observation",`), ""},
		{"unknown element", patch(t, observation, map[string]any{"colour": "red"}), "Observation.colour"},
		{"unknown nested element", patch(t, observation, map[string]any{"code.colour": "red"}), "Observation.code.colour"},
		{"missing status", patch(t, observation, map[string]any{"status": nil}), "Observation.status"},
		{"missing code", patch(t, observation, map[string]any{"code": nil}), "Observation.code"},
		{"status outside its value set", patch(t, observation, map[string]any{"status": "done"}), "Observation.status"},
		{"status a number", patch(t, observation, map[string]any{"status": 1}), "Observation.status"},
		{"empty status", patch(t, observation, map[string]any{"status": ""}), "Observation.status"},
		{"identifier not an array", patch(t, observation, map[string]any{"identifier": raw(`{"value": "1"}`)}), "Observation.identifier"},
		{"subject an array", patch(t, observation, map[string]any{"subject": raw(`[{"reference": "Patient/1"}]`)}), "Observation.subject"},
		{"reference a string", patch(t, observation, map[string]any{"subject": "Patient/1"}), "Observation.subject"},
		{"codeable concept a string", patch(t, observation, map[string]any{"code": "8867-4"}), "Observation.code"},
		{"coding not an array", patch(t, observation, map[string]any{"code": raw(`{"coding": {"code": "x"}}`)}), "Observation.code.coding"},
		{"slashed dateTime", patch(t, observation, map[string]any{"effectiveDateTime": "2024/05/01"}), "Observation.effectiveDateTime"},
		{"no such day", patch(t, observation, map[string]any{"effectiveDateTime": "2023-02-30"}), "Observation.effectiveDateTime"},
		{"time without offset", patch(t, observation, map[string]any{"effectiveDateTime": "2024-05-01T10:00:00"}), "Observation.effectiveDateTime"},
		{"two choices", patch(t, observation, map[string]any{"valueString": "high"}), "Observation"},
		{"unknown choice type", patch(t, observation, map[string]any{"valueFoo": "x"}), "Observation.valueFoo"},
		{"decimal as a string", patch(t, observation, map[string]any{"valueQuantity.value": "72"}), "Observation.valueQuantity.value"},
		{"integer with a fraction", patch(t, observation, map[string]any{"valueQuantity": nil, "valueInteger": 1.5}), "Observation.valueInteger"},
		{"integer out of range", patch(t, observation, map[string]any{"valueQuantity": nil, "valueInteger": 3000000000}), "Observation.valueInteger"},
		{"boolean as a string", patch(t, observation, map[string]any{"valueQuantity": nil, "valueBoolean": "true"}), "Observation.valueBoolean"},
		{"instant without offset", patch(t, observation, map[string]any{"issued": "2024-05-01T10:00:00"}), "Observation.issued"},
		{"id with a space", patch(t, observation, map[string]any{"id": "a b"}), "Observation.id"},
		{"id too long", patch(t, observation, map[string]any{"id": strings.Repeat("a", 65)}), "Observation.id"},
		{"uri with spaces", patch(t, observation, map[string]any{"code.coding.0.system": "http://loinc .org"}), "Observation.code.coding[0].system"},
		{"null in an array", patch(t, observation, map[string]any{"identifier": raw(`[null]`)}), "Observation.identifier[0]"},
		{"a null value aligned with an extension", []byte(`{"resourceType": "Patient", "name": [{"given": [null, "Ann"], "_given": [{"extension": [{"url": "http://x", "valueString": "y"}]}, null]}]}`), "Patient.name[0].given[0]"},
		{"empty array", patch(t, observation, map[string]any{"identifier": raw(`[]`)}), "Observation.identifier"},
		{"extension without url", patch(t, observation, map[string]any{"extension": raw(`[{"valueString": "x"}]`)}), "Observation.extension[0].url"},
		{"extension value of an unknown type", patch(t, observation, map[string]any{"extension": raw(`[{"url": "http://x", "valueFoo": 1}]`)}), "Observation.extension[0].valueFoo"},
		{"bad primitive extension", patch(t, observation, map[string]any{"_status": raw(`{"colour": "red"}`)}), "Observation.status"},
		{"primitive extension without url", patch(t, observation, map[string]any{"_status": raw(`{"extension": [{"valueString": "x"}]}`)}), "Observation.status.extension[0].url"},
		{"primitive extension not an array", patch(t, observation, map[string]any{"_status": raw(`{"extension": "x"}`)}), "Observation.status.extension"},
		{"primitive extension id a number", patch(t, observation, map[string]any{"_status": raw(`{"id": 5}`)}), "Observation.status.id"},
		{"primitive extensions of a single value as an array", patch(t, observation, map[string]any{"status": nil, "_status": raw(`[{"id": "s"}]`)}), "Observation.status"},
		{"primitive extensions of a repeating element as an object", []byte(`{"resourceType": "Patient", "name": [{"_given": {"id": "g"}}]}`), "Patient.name[0].given"},
		{"primitive extensions an empty array", []byte(`{"resourceType": "Patient", "name": [{"_given": []}]}`), "Patient.name[0].given"},
		{"an empty primitive extension (ele-1)", patch(t, observation, map[string]any{"_status": raw(`{}`)}), "Observation.status"},
		{"an empty primitive extension of a repeating element", []byte(`{"resourceType": "Patient", "name": [{"given": ["Jo"], "_given": [{}]}]}`), "Patient.name[0].given[0]"},
		{"narrative without div", patch(t, observation, map[string]any{"text": raw(`{"status": "generated", "div": "hello"}`)}), "Observation.text.div"},
		{"narrative status outside its value set", patch(t, observation, map[string]any{"text": raw(`{"status": "made-up", "div": "<div xmlns=\"http://www.w3.org/1999/xhtml\">x</div>"}`)}), "Observation.text.status"},
		{"contained resource broken", patch(t, observation, map[string]any{"contained": raw(`[{"resourceType": "Patient", "colour": "red"}]`)}), "Observation.contained[0].colour"},
		{"patient gender", []byte(`{"resourceType": "Patient", "gender": "unknownish"}`), "Patient.gender"},
		{"patient birth date with a time", []byte(`{"resourceType": "Patient", "birthDate": "1990-01-01T10:00:00Z"}`), "Patient.birthDate"},
		{"patient active as a string", []byte(`{"resourceType": "Patient", "active": "yes"}`), "Patient.active"},
		{"given name not an array", []byte(`{"resourceType": "Patient", "name": [{"given": "Jo"}]}`), "Patient.name[0].given"},
		{"an empty name", []byte(`{"resourceType": "Patient", "name": [{"family": "Jo"}, {}]}`), "Patient.name[1]"},
		{"an empty codeable concept", patch(t, observation, map[string]any{"code": raw(`{}`)}), "Observation.code"},
		{"an empty backbone element", []byte(`{"resourceType": "Patient", "contact": [{"name": {"family": "Jo"}}, {}]}`), "Patient.contact[1]"},
		{"an empty datatype in a backbone element", []byte(`{"resourceType": "Patient", "contact": [{"name": {}}]}`), "Patient.contact[0].name"},
		{"condition clinical status", []byte(`{"resourceType": "Condition", "subject": {"reference": "Patient/1"},
			"clinicalStatus": {"coding": [{"system": "http://terminology.hl7.org/CodeSystem/condition-clinical", "code": "healed"}]}}`), "Condition.clinicalStatus"},
		{"condition without subject", []byte(`{"resourceType": "Condition"}`), "Condition.subject"},
		{"encounter status", []byte(`{"resourceType": "Encounter", "status": "finished"}`), "Encounter.status"},
		{"medication request intent", []byte(`{"resourceType": "MedicationRequest", "status": "active", "intent": "wish",
			"medication": {"concept": {"text": "x"}}, "subject": {"reference": "Patient/1"}}`), "MedicationRequest.intent"},
		{"allergy without patient", []byte(`{"resourceType": "AllergyIntolerance"}`), "AllergyIntolerance.patient"},
		{"bundle entry broken", []byte(`{"resourceType": "Bundle", "type": "collection", "entry": [{"resource": {"resourceType": "Observation"}}]}`), "Bundle.entry[0].resource.status"},
		{"nested too deeply", []byte(`{"resourceType": "QuestionnaireResponse", "status": "completed", "item": [` + deep + `]}`), "QuestionnaireResponse.item"},
	}
	for _, tc := range cases {
		issues, err := v.Validate(tc.doc)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(issues) == 0 {
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		if !slices.ContainsFunc(issues, func(i fhirdefs.Issue) bool { return strings.HasPrefix(i.Expression, tc.path) }) {
			t.Errorf("%s: no issue at %s: %v", tc.name, tc.path, issues)
		}
	}
	if len(cases) < 40 {
		t.Fatalf("only %d invalid cases", len(cases))
	}
}

// TestValidExtensionsAndEdges: things that look odd but are valid.
func TestValidExtensionsAndEdges(t *testing.T) {
	v := r5(t)
	for name, doc := range map[string][]byte{
		"extension only, no value": patch(t, observation, map[string]any{"_status": json.RawMessage(`{"extension": [{"url": "http://x", "valueString": "y"}]}`), "status": nil}),
		"decimal exponent":         patch(t, observation, map[string]any{"valueQuantity.value": json.Number("1.5e3")}),
		// More digits than the R5 package's expression allows, as EHRs send
		// them (a Synthea Patient's extension); R4 and the R5 JSON Schema
		// take them, and so does FHIR JSON.
		"decimal with 19 fraction digits":        patch(t, observation, map[string]any{"valueQuantity.value": json.Number("0.0006122107609236168")}),
		"decimal with 30 integer digits":         patch(t, observation, map[string]any{"valueQuantity.value": json.Number("123456789012345678901234567890.5")}),
		"recursive item":                         []byte(`{"resourceType": "QuestionnaireResponse", "questionnaire": "http://example.org/q", "status": "completed", "item": [{"linkId": "a", "item": [{"linkId": "b", "answer": [{"valueString": "x"}]}]}]}`),
		"code outside an unenumerated value set": patch(t, observation, map[string]any{"language": "x-klingon"}),
	} {
		issues, err := v.Validate(doc)
		if err != nil {
			t.Fatal(err)
		}
		if len(issues) > 0 {
			t.Errorf("%s: %v", name, issues)
		}
	}
}

// TestPrimitiveExtensionSiblingsAsTheSchema: the validator takes a
// primitive's extension sibling (_name) where the official R5 JSON Schema
// takes it, and refuses it where the schema does (a resource's or an
// element's id, Narrative.div, a targeted canonical, a complex element),
// so that an R5 create never stores what other R5 tools refuse. Each case
// is checked against both.
func TestPrimitiveExtensionSiblingsAsTheSchema(t *testing.T) {
	v := r5(t)
	schema, err := fhirdefstest.OpenR5Schema()
	if err != nil {
		t.Fatalf("%v (run scripts/setup first)", err)
	}
	const ext = `{"extension": [{"url": "http://example.org/x", "valueString": "y"}]}`
	patient := func(fields string) []byte { return []byte(`{"resourceType": "Patient", ` + fields + `}`) }
	cases := []struct {
		name   string
		doc    []byte
		refuse string // the expression of the issue; "" when valid
	}{
		{"beside a code", patient(`"gender": "female", "_gender": ` + ext), ""},
		{"beside a date, without its value", patient(`"_birthDate": ` + ext), ""},
		{"beside a repeating string, in line", patient(`"name": [{"given": ["Jo", "Ann"], "_given": [` + ext + `, ` + ext + `]}]`), ""},
		{"beside an extension's url", patient(`"extension": [{"url": "http://example.org/x", "_url": ` + ext + `, "valueString": "y"}]`), ""},
		{"beside a choice's canonical", patient(`"extension": [{"url": "http://example.org/x", "valueCanonical": "http://example.org/q", "_valueCanonical": ` + ext + `}]`), ""},
		{"beside an untargeted canonical", []byte(`{"resourceType": "RequestOrchestration", "status": "active", "intent": "order",
			"instantiatesCanonical": ["http://example.org/p"], "_instantiatesCanonical": [` + ext + `]}`), ""},
		{"beside a choice's targeted canonical", patch(t, observation, map[string]any{"instantiatesCanonical": "http://example.org/od", "_instantiatesCanonical": json.RawMessage(ext)}), ""},
		{"beside the resource's id", patient(`"id": "p1", "_id": ` + ext), "Patient.id"},
		{"beside an element's id", patient(`"name": [{"id": "n1", "_id": ` + ext + `, "family": "Doe"}]`), "Patient.name[0].id"},
		{"beside a contained resource's id", patch(t, observation, map[string]any{"contained": json.RawMessage(`[{"resourceType": "Patient", "id": "p", "_id": ` + ext + `}]`)}), "Observation.contained[0].id"},
		{"beside a targeted canonical", []byte(`{"resourceType": "CarePlan", "status": "active", "intent": "plan", "subject": {"reference": "Patient/1"},
			"instantiatesCanonical": ["http://example.org/p"], "_instantiatesCanonical": [` + ext + `]}`), "CarePlan.instantiatesCanonical"},
		{"beside a profile", patient(`"meta": {"profile": ["http://example.org/sd"], "_profile": [` + ext + `]}`), "Patient.meta.profile"},
		{"beside the narrative's div", patient(`"text": {"status": "generated", "div": "<div xmlns=\"http://www.w3.org/1999/xhtml\">x</div>", "_div": ` + ext + `}`), "Patient.text.div"},
		{"beside a complex element", patient(`"maritalStatus": {"text": "married"}, "_maritalStatus": ` + ext), "Patient.maritalStatus"},
	}
	for _, tc := range cases {
		issues, err := v.Validate(tc.doc)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		problems, err := schema.Problems(tc.doc)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		switch {
		case tc.refuse == "" && (len(issues) > 0 || len(problems) > 0):
			t.Errorf("%s: refused: validator %v, schema %v", tc.name, issues, problems)
		case tc.refuse != "" && len(problems) == 0:
			t.Errorf("%s: the schema accepts it: the case is wrong", tc.name)
		case tc.refuse != "" && !slices.ContainsFunc(issues, func(i fhirdefs.Issue) bool { return i.Expression == tc.refuse }):
			t.Errorf("%s: the validator has no issue at %s: %v", tc.name, tc.refuse, issues)
		}
	}
	// The one known difference, on purpose: FHIR's JSON format aligns a
	// repeating primitive's extensions with null where a value has none,
	// which the schema (items: Element) cannot express and refuses. The
	// converter writes it (TestPrimitiveExtensions), so it stays valid.
	aligned := patient(`"name": [{"given": ["Jo", "Ann"], "_given": [null, ` + ext + `]}]`)
	issues, _ := v.Validate(aligned)
	problems, _ := schema.Problems(aligned)
	if len(issues) > 0 || len(problems) == 0 {
		t.Errorf("null-aligned extensions: validator %v, schema %v; want valid, and refused by the schema", issues, problems)
	}
}

// BenchmarkValidate measures resources per second on warm definitions.
func BenchmarkValidate(b *testing.B) {
	v := r5(b)
	var docs [][]byte
	for _, rt := range []string{"Observation", "Condition", "Encounter", "Patient", "MedicationRequest", "QuestionnaireResponse"} {
		files, _ := filepath.Glob(filepath.Join(fhirdefstest.PackageDir("hl7.fhir.r5.examples"), rt+"-*.json"))
		for _, f := range files[:min(5, len(files))] {
			data, _ := os.ReadFile(f)
			docs = append(docs, data)
		}
	}
	for _, d := range docs { // warm the definitions
		_, _ = v.Validate(d)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := v.Validate(docs[i%len(docs)]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "resources/s")
}

func TestFHIRPathScanning(t *testing.T) {
	for expr, want := range map[string][]string{
		"Condition.code | Observation.code":     {"Condition.code ", " Observation.code"},
		"(A.b | A.c).where(x = 'a|b') | A.d":    {"(A.b | A.c).where(x = 'a|b') ", " A.d"},
		`A.b.where(x = 'it\'s | quoted') | A.c`: {`A.b.where(x = 'it\'s | quoted') `, " A.c"},
		"A.b":                                   {"A.b"},
	} {
		if got := fhirdefs.SplitUnion(expr); !slices.Equal(got, want) {
			t.Errorf("SplitUnion(%q) = %q, want %q", expr, got, want)
		}
	}
	for _, c := range []struct {
		expr       string
		open, want int
	}{
		{"where(a = ')')", 5, 13},
		{"f(g(x)).h", 1, 6},
		{"f(g(x)).h", 3, 5},
		{`f('\')', 1)`, 1, 10},
		{"f(unclosed", 1, -1},
	} {
		if got := fhirdefs.MatchingParen(c.expr, c.open); got != c.want {
			t.Errorf("MatchingParen(%q, %d) = %d, want %d", c.expr, c.open, got, c.want)
		}
	}
}

var openedR4 = sync.OnceValues(func() (*fhirdefs.Package, error) { return fhirdefs.OpenR4(fhirdefstest.PackagesDir()) })

func r4(t *testing.T) *fhirdefs.Validator {
	t.Helper()
	defs, err := openedR4()
	if err != nil {
		t.Fatalf("%v: run scripts/setup first", err)
	}
	return fhirdefs.NewR4Validator(defs)
}

// TestR4Check: the R4 import's check refuses a literal reference to a
// type its element does not name (relative, absolute, versioned) and a
// contained resource's malformed id, as Google's R4 parser did; it takes
// references it cannot type, R4 JSON's extension sibling of a targeted
// canonical, and what R5 leaves out. The R5 gate keeps to what R5's schema
// refuses: no reference targets.
func TestR4Check(t *testing.T) {
	v := r4(t)
	observation := func(performer string) []byte {
		return []byte(`{"resourceType": "Observation", "status": "final", "code": {"text": "x"}, "performer": [{"reference": "` + performer + `"}]}`)
	}
	for _, c := range []struct {
		name string
		doc  []byte
		path string // "": valid
	}{
		{"performer an Encounter", observation("Encounter/1"), "Observation.performer[0].reference"},
		{"absolute, versioned", observation("http://example.org/fhir/Encounter/1/_history/2"), "Observation.performer[0].reference"},
		{"a device parent a DeviceDefinition", []byte(`{"resourceType": "DeviceMetric", "type": {"text": "x"}, "category": "measurement", "parent": {"reference": "DeviceDefinition/d"}}`), "DeviceMetric.parent.reference"},
		{"contained id too long", []byte(`{"resourceType": "Observation", "status": "final", "code": {"text": "x"}, "contained": [{"resourceType": "Patient", "id": "` + strings.Repeat("p", 65) + `"}]}`), "Observation.contained[0].id"},
		{"contained id with a space", []byte(`{"resourceType": "Observation", "status": "final", "code": {"text": "x"}, "contained": [{"resourceType": "Patient", "id": "a b"}]}`), "Observation.contained[0].id"},
		{"a decimal beyond float64", []byte(`{"resourceType": "Observation", "status": "final", "code": {"text": "x"}, "valueQuantity": {"value": 1e999999}}`), "Observation.valueQuantity.value"},
		{"a negative decimal beyond float64", []byte(`{"resourceType": "Observation", "status": "final", "code": {"text": "x"}, "valueQuantity": {"value": -1E+400}}`), "Observation.valueQuantity.value"},
		{"a null element", []byte(`{"resourceType": "Patient", "name": null}`), "Patient.name"},
		{"a null primitive", []byte(`{"resourceType": "Observation", "status": null, "code": {"text": "x"}}`), "Observation.status"},
		{"a null inside a datatype", []byte(`{"resourceType": "Patient", "name": [{"family": null}]}`), "Patient.name[0].family"},
		{"a null extension sibling", []byte(`{"resourceType": "Patient", "birthDate": "1990-01-01", "_birthDate": null}`), "Patient.birthDate"},
		{"an empty name (the converter prunes it, nothing lost)", []byte(`{"resourceType": "Patient", "name": [{}], "contact": [{"name": {}}]}`), ""},
		{"a small decimal", []byte(`{"resourceType": "Observation", "status": "final", "code": {"text": "x"}, "valueQuantity": {"value": 1e-400}}`), ""},
		{"a decimal with 19 fraction digits", []byte(`{"resourceType": "Patient", "extension": [{"url": "http://synthetichealth.github.io/synthea/quality-adjusted-life-years", "valueDecimal": 0.0006122107609236168}]}`), ""},
		{"a null value aligned with an extension", []byte(`{"resourceType": "Patient", "name": [{"given": [null, "Ann"], "_given": [{"extension": [{"url": "http://x", "valueString": "y"}]}, null]}]}`), ""},
		{"a primitive's extension without url", []byte(`{"resourceType": "Patient", "birthDate": "1990-01-01", "_birthDate": {"extension": [{"valueString": "x"}]}}`), "Patient.birthDate.extension[0].url"},
		{"a primitive's extension id a number", []byte(`{"resourceType": "Patient", "birthDate": "1990-01-01", "_birthDate": {"id": 5}}`), "Patient.birthDate.id"},
		{"a null value aligned with a null", []byte(`{"resourceType": "Patient", "name": [{"given": [null, "Ann"], "_given": [null, {"id": "g"}]}]}`), "Patient.name[0].given[0]"},
		{"a null value without an extension sibling", []byte(`{"resourceType": "Patient", "name": [{"given": ["Jo", null]}]}`), "Patient.name[0].given[1]"},
		{"a null item of a datatype", []byte(`{"resourceType": "Patient", "name": [null]}`), "Patient.name[0]"},
		{"nulls aligned with extensions", []byte(`{"resourceType": "Patient", "name": [{"given": ["Jo", "Ann"], "_given": [null, {"extension": [{"url": "http://x", "valueString": "y"}]}]}]}`), ""},
		{"performer a Practitioner", observation("Practitioner/1"), ""},
		{"absolute Practitioner, versioned", observation("https://example.org/fhir/Practitioner/1/_history/3"), ""},
		{"contained", observation("#p1"), ""},
		{"a URN", observation("urn:uuid:9c2a6c4e-3f5b-4b1a-8a44-0e7f1e2d9a10"), ""},
		{"no type segment", observation("p1"), ""},
		{"not a resource type", observation("Foo/1"), ""},
		{"any resource", []byte(`{"resourceType": "Provenance", "target": [{"reference": "Encounter/1"}], "recorded": "2020-01-01T00:00:00Z", "agent": [{"who": {"reference": "Practitioner/1"}}]}`), ""},
		{"targeted canonical's sibling", []byte(`{"resourceType": "Questionnaire", "status": "draft", "derivedFrom": ["http://x/q"], "_derivedFrom": [{"extension": [{"url": "http://x", "valueString": "y"}]}]}`), ""},
	} {
		issues, err := v.Validate(c.doc)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case c.path == "" && len(issues) > 0:
			t.Errorf("%s: refused: %v", c.name, issues)
		case c.path != "" && !slices.ContainsFunc(issues, func(i fhirdefs.Issue) bool { return i.Expression == c.path }):
			t.Errorf("%s: no issue at %s: %v", c.name, c.path, issues)
		}
	}
	if issues, _ := r5(t).Validate([]byte(`{"resourceType": "Observation", "status": "final", "code": {"text": "x"}, "performer": [{"reference": "Encounter/1"}]}`)); len(issues) > 0 {
		t.Errorf("R5 checks reference targets: %v", issues)
	}
}

// FuzzValidate: whatever JSON a client sends, the R5 gate and the R4
// import's check answer with issues (a 4xx), never with an error (a
// 500: a fault of the definitions) or a panic.
func FuzzValidate(f *testing.F) {
	for _, s := range []string{
		`{"resourceType": "Patient", "name": [{"given": [null, "Ann"], "_given": [{"extension": [{"url": "http://x", "valueString": "y"}]}, null]}]}`,
		`{"resourceType": "Patient", "birthDate": "1990-01-01", "_birthDate": {"id": 5, "extension": [{"valueString": "x"}]}}`,
		`{"resourceType": "Patient", "name": [{"_given": []}], "contact": [{"name": {}}, {}]}`,
		`{"resourceType": "Observation", "status": "final", "_status": [{"id": "s"}], "code": {"text": "x"}, "valueQuantity": {"value": 1e999}}`,
		`{"resourceType": "Observation", "contained": [{"resourceType": "Patient", "_active": {"extension": [{"url": "u", "_valueString": {}}]}}]}`,
		`{"resourceType": "Questionnaire", "item": [{"linkId": "a", "item": [{"linkId": "b", "_text": {"id": "t"}}]}]}`,
	} {
		f.Add([]byte(s))
	}
	r5v := r5(f)
	r4defs, err := openedR4()
	if err != nil {
		f.Fatalf("%v: run scripts/setup first", err)
	}
	r4v := fhirdefs.NewR4Validator(r4defs)
	f.Fuzz(func(t *testing.T, data []byte) {
		for name, v := range map[string]*fhirdefs.Validator{"R5": r5v, "R4": r4v} {
			if _, err := v.Validate(data); err != nil {
				t.Errorf("%s: %s: %v", name, data, err)
			}
		}
	})
}
