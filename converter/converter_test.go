package converter_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"exchange/converter"
	"exchange/domain"
	"exchange/fhirdefs"
	"exchange/fhirdefs/fhirdefstest"
	"exchange/internal/benchcpu"
)

func standards(parts ...string) string {
	return filepath.Join(append([]string{"..", "standards"}, parts...)...)
}

func packageDir(name string) string { return fhirdefstest.PackageDir(name) }

func mapsDir() string {
	if d := os.Getenv("FHIR_XVER_PACKAGE_DIR"); d != "" {
		return d
	}
	return standards("fhir", "xver-r4-r5", "maps")
}

func conceptMapsDir() string {
	if d := os.Getenv("FHIR_XVER_CONCEPTMAPS_DIR"); d != "" {
		return d
	}
	return standards("fhir", "xver-r4-r5", "conceptmaps")
}

// compile compiles the official maps with the FML patches of patchesDir
// ("" for none).
func compile(patchesDir string) (*converter.Engine, error) {
	r4, err := fhirdefs.OpenR4(fhirdefstest.PackagesDir())
	if err != nil {
		return nil, err
	}
	r5, _, err := openR5()
	if err != nil {
		return nil, err
	}
	return converter.Compile(converter.Options{MapsDir: mapsDir(), PatchesDir: patchesDir, ConceptMapsDir: conceptMapsDir(), R4: r4, R5: r5})
}

var compiled = sync.OnceValues(func() (*converter.Engine, error) { return compile("") })

func r4Package(t testing.TB) *fhirdefs.Package {
	p, err := fhirdefs.OpenR4(fhirdefstest.PackagesDir())
	if err != nil {
		t.Fatalf("%v (run scripts/setup first)", err)
	}
	return p
}

// r5 is the R5 package and the validation gate of imported resources.
type r5 struct {
	defs      *fhirdefs.Package
	validator *fhirdefs.Validator
}

var openedR5 = sync.OnceValues(func() (r5, error) {
	defs, v, err := fhirdefs.OpenR5(fhirdefstest.PackagesDir())
	return r5{defs, v}, err
})

func openR5() (*fhirdefs.Package, *fhirdefs.Validator, error) {
	r, err := openedR5()
	return r.defs, r.validator, err
}

func r5Package(t testing.TB) *fhirdefs.Package {
	p, _, err := openR5()
	if err != nil {
		t.Fatalf("%v (run scripts/setup first)", err)
	}
	return p
}

// validator is the R5 validation gate of imported resources.
func validator(t testing.TB) *fhirdefs.Validator {
	_, v, err := openR5()
	if err != nil {
		t.Fatalf("%v (run scripts/setup first)", err)
	}
	return v
}

// patched compiles the official maps with one patch file of FML.
func patched(t *testing.T, name, fml string) *converter.Engine {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(fml), 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := compile(dir)
	if err != nil {
		t.Fatalf("%v (run scripts/setup first)", err)
	}
	return e
}

func engine(t testing.TB) *converter.Engine {
	t.Helper()
	e, err := compiled()
	if err != nil {
		t.Fatalf("%v (run scripts/setup first)", err)
	}
	return e
}

func convert(t testing.TB, r4 string) *converter.Result {
	t.Helper()
	m, err := domain.DecodeJSON([]byte(r4))
	if err != nil {
		t.Fatal(err)
	}
	res, err := engine(t).Convert(m)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

var update = flag.Bool("update", false, "rewrite testdata/conversions.json with the engine's output")

// conversionCase is an R4 resource and its exact R5 conversion.
type conversionCase struct {
	Name    string          `json:"name"`
	R4      json.RawMessage `json:"r4"`
	R5      json.RawMessage `json:"r5"`
	Dropped []string        `json:"dropped"`
}

// TestConversions checks the conversions the import must get right, each
// against its exact R5 output and data-loss report (reviewed by hand;
// -update rewrites them for review). Each output must also be valid R5.
func TestConversions(t *testing.T) {
	path := filepath.Join("testdata", "conversions.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cases []conversionCase
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	v := validator(t)
	for i, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			res := convert(t, string(c.R4))
			if *update {
				cases[i].R5, cases[i].Dropped = res.Resource, res.Dropped
				return
			}
			var want bytes.Buffer
			if err := json.Compact(&want, c.R5); err != nil {
				t.Fatal(err)
			}
			if got := string(res.Resource); got != want.String() {
				t.Errorf("R5:\n got %s\nwant %s", got, want.String())
			}
			if !slices.Equal(res.Dropped, c.Dropped) {
				t.Errorf("dropped %q, want %q", res.Dropped, c.Dropped)
			}
			if issues, err := v.Validate(res.Resource); err != nil || len(issues) > 0 {
				t.Errorf("not valid R5: %v %v", issues, err)
			}
		})
	}
	if *update {
		var out bytes.Buffer
		enc := json.NewEncoder(&out)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(cases); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPatches(t *testing.T) {
	patch := "group Condition(source src, target tgt) {\n" +
		"  src.recordedDate as v -> tgt.recordedDate = '2000-01-01' \"recordedDate\";\n" +
		"  src.id as v -> tgt.note as n, n.text = v \"idAsNote\";\n" +
		"}\n" +
		"group Unused(source src, target tgt) { src.a -> tgt.b; }\n"
	e := patched(t, "Condition-fix.fml", patch)
	if s := e.Stats(); s.Patched != 3 || s.Groups != 633 {
		t.Errorf("stats %+v: want 3 patched rules and 633 groups", s)
	}
	m, _ := domain.DecodeJSON([]byte(`{"resourceType":"Condition","id":"c1","recordedDate":"2024-02-03","subject":{"reference":"Patient/p"},"clinicalStatus":{"text":"active"}}`))
	res, err := e.Convert(m)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"resourceType":"Condition","id":"c1","clinicalStatus":{"text":"active"},"subject":{"reference":"Patient/p"},"recordedDate":"2000-01-01","note":[{"text":"c1"}]}`
	if string(res.Resource) != want {
		t.Errorf("got  %s\nwant %s", res.Resource, want)
	}
	if !slices.Equal(res.Dropped, []string{"Condition.recordedDate"}) {
		t.Errorf("dropped %v", res.Dropped)
	}
}

func TestNotConverted(t *testing.T) {
	e := engine(t)
	// No map converts these: R4 types R5 dropped (Media, the MedicinalProduct
	// family but MedicinalProduct itself), a type R4 never had (Citation
	// came with R4B), and what is no resource type at all.
	for _, rt := range []string{"Media", "MedicinalProductIngredient", "Citation", "Nonsense", "", "Element"} {
		m := map[string]any{"resourceType": rt}
		if _, err := e.Convert(m); !errors.Is(err, converter.ErrNotSupported) {
			t.Errorf("%q: %v, want ErrNotSupported", rt, err)
		}
	}
	// Nor inside another resource: a contained Media is dropped and
	// reported, the Patient around it converted.
	m, _ := domain.DecodeJSON([]byte(`{"resourceType":"Patient","gender":"female",
		"contained":[{"resourceType":"Media","id":"m1","status":"completed","content":{"contentType":"image/png"}}]}`))
	res, err := e.Convert(m)
	if err != nil || strings.Contains(string(res.Resource), "Media") || !slices.Contains(res.Dropped, "Patient.contained") {
		t.Errorf("contained Media: %v %v", res, err)
	}
}

// The types R4B revised or replaced are typed by R4's own definitions, as
// every R4 type is: their maps read only elements R4 defines, and their
// official R4 examples convert (R4B typing misread them, so they were
// refused).
func TestRevisedTypesReadR4(t *testing.T) {
	e := engine(t)
	revised := []string{"Evidence", "EvidenceVariable", "Subscription", "MedicinalProduct", "SubstanceSpecification"}
	for _, rt := range revised {
		if err := e.Supports(rt); err != nil {
			t.Errorf("%s: %v", rt, err)
			continue
		}
		files, _ := filepath.Glob(filepath.Join(packageDir("hl7.fhir.r4.examples"), rt+"-*.json"))
		if len(files) == 0 {
			t.Fatalf("no R4 example of %s (run scripts/setup first)", rt)
		}
		data, err := os.ReadFile(files[0])
		if err != nil {
			t.Fatal(err)
		}
		res := convert(t, string(data))
		if !strings.Contains(string(res.Resource), `"status"`) && rt != "MedicinalProduct" && rt != "SubstanceSpecification" {
			t.Errorf("%s: no status converted: %s", rt, res.Resource)
		}
	}
	if n := len(e.ResourceTypes()); n != 129 || !slices.Contains(e.ResourceTypes(), "Subscription") {
		t.Errorf("%d resource types converted, want every type with a map (129): %v", n, e.ResourceTypes())
	}
	// A map that reads an element R4 does not define (Evidence's R4B
	// variableDefinition) is refused, with the element named, until it is
	// corrected.
	p := patched(t, "Evidence-r4b.fml", "group Evidence(source src, target tgt) {\n"+
		"  src.variableDefinition -> tgt.variableDefinition \"r4b\";\n}\n")
	err := p.Supports("Evidence")
	if !errors.Is(err, converter.ErrNotSupported) || !strings.Contains(err.Error(), "Evidence.variableDefinition, which the R4 definitions do not define") {
		t.Errorf("Evidence with an R4B rule: %v", err)
	}
	if err := p.Supports("EvidenceVariable"); err != nil {
		t.Errorf("EvidenceVariable: %v", err)
	}
}

func TestDroppedCollapses(t *testing.T) {
	// Device.patient has no R5 home; a renamed value (deviceName.name ->
	// name.value) is not reported; a primitive's extensions (_status)
	// travel with it.
	res := convert(t, `{"resourceType":"Device","status":"active","patient":{"reference":"Patient/p9","display":"Pat"},
		"deviceName":[{"name":"Cuff","type":"model-name"}],"_status":{"extension":[{"url":"http://x","valueString":"note"}]}}`)
	if want := []string{"Device.patient"}; !slices.Equal(res.Dropped, want) {
		t.Errorf("dropped %v, want %v", res.Dropped, want)
	}
	// A dropped primitive (Group.actual has no R5 home) takes its
	// extensions with it: both are reported.
	res = convert(t, `{"resourceType":"Group","type":"person","actual":true,"_actual":{"extension":[{"url":"http://x","valueString":"note"}]}}`)
	if want := []string{"Group._actual", "Group.actual"}; !slices.Equal(res.Dropped, want) {
		t.Errorf("dropped %v, want %v", res.Dropped, want)
	}
}

// Primitive extensions (the `_x` siblings) travel with their primitive
// through every rule that copies, renames or translates it, arrays
// aligned by index; and the output is valid R5.
func TestPrimitiveExtensions(t *testing.T) {
	ext := func(v string) string {
		return `{"extension":[{"url":"http://example.org/note","valueString":"` + v + `"}]}`
	}
	for _, c := range []struct{ name, r4, want string }{
		{"copied", `{"resourceType":"Patient","gender":"male","_gender":` + ext("g") + `,"birthDate":"1974-12-25","_birthDate":` + ext("b") + `}`,
			`{"resourceType":"Patient","gender":"male","_gender":` + ext("g") + `,"birthDate":"1974-12-25","_birthDate":` + ext("b") + `}`},
		{"with only an extension", `{"resourceType":"Patient","_birthDate":{"extension":[{"url":"http://hl7.org/fhir/StructureDefinition/data-absent-reason","valueCode":"unknown"}]}}`,
			`{"resourceType":"Patient","_birthDate":{"extension":[{"url":"http://hl7.org/fhir/StructureDefinition/data-absent-reason","valueCode":"unknown"}]}}`},
		{"in arrays, aligned by index", `{"resourceType":"Patient","name":[{"family":"Chalmers","_family":{"id":"f1"},"given":["Peter","James","Jim"],"_given":[null,` + ext("middle") + `,` + ext("j") + `]}]}`,
			`{"resourceType":"Patient","name":[{"family":"Chalmers","_family":{"id":"f1"},"given":["Peter","James","Jim"],"_given":[null,` + ext("middle") + `,` + ext("j") + `]}]}`},
		{"renamed (performed[x] -> occurrence[x])", `{"resourceType":"Procedure","status":"completed","subject":{"reference":"Patient/p"},"performedDateTime":"2024-01-02","_performedDateTime":` + ext("p") + `}`,
			`{"resourceType":"Procedure","status":"completed","subject":{"reference":"Patient/p"},"occurrenceDateTime":"2024-01-02","_occurrenceDateTime":` + ext("p") + `}`},
		{"translated", `{"resourceType":"Encounter","status":"finished","_status":` + ext("s") + `,"class":{"code":"AMB"}}`,
			`{"resourceType":"Encounter","status":"completed","_status":` + ext("s") + `,"class":[{"coding":[{"code":"AMB"}]}]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := convert(t, c.r4)
			if string(res.Resource) != c.want {
				t.Errorf("got  %s\nwant %s", res.Resource, c.want)
			}
			if len(res.Dropped) != 0 {
				t.Errorf("dropped %v", res.Dropped)
			}
			if issues, err := validator(t).Validate(res.Resource); err != nil || len(issues) > 0 {
				t.Errorf("not valid R5: %v %v", issues, err)
			}
		})
	}
}

// A primitive's extensions travel where R5 JSON, as the official JSON
// Schema reads it, has a `_x` for them, and only there: beside a choice's
// canonical (valueCanonical) they arrive; beside a canonical that names its
// targets (Meta.profile) they are dropped and reported, and the output
// passes both our validator and the schema.
func TestPrimitiveExtensionsWhereR5JSONHasThem(t *testing.T) {
	ext := `{"extension":[{"url":"http://example.org/note","valueString":"n"}]}`
	schema, err := fhirdefstest.OpenR5Schema()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, r4, want, dropped string }{
		{"beside a choice's canonical", `{"resourceType":"Patient","extension":[{"url":"http://example.org/x","valueCanonical":"http://example.org/q","_valueCanonical":` + ext + `}]}`,
			`{"resourceType":"Patient","extension":[{"url":"http://example.org/x","valueCanonical":"http://example.org/q","_valueCanonical":` + ext + `}]}`, ""},
		{"beside a targeted canonical", `{"resourceType":"Patient","meta":{"profile":["http://example.org/sd"],"_profile":[` + ext + `]}}`,
			`{"resourceType":"Patient","meta":{"profile":["http://example.org/sd"]}}`, "Patient.meta._profile"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := convert(t, c.r4)
			if string(res.Resource) != c.want {
				t.Errorf("got  %s\nwant %s", res.Resource, c.want)
			}
			if want := slices.DeleteFunc([]string{c.dropped}, func(s string) bool { return s == "" }); !slices.Equal(res.Dropped, want) {
				t.Errorf("dropped %v, want %v", res.Dropped, want)
			}
			issues, err := validator(t).Validate(res.Resource)
			problems, schemaErr := schema.Problems(res.Resource)
			if len(issues) > 0 || len(problems) > 0 || err != nil || schemaErr != nil {
				t.Errorf("not valid R5: %v %v %v %v", issues, problems, err, schemaErr)
			}
		})
	}
}

// An array item with extensions but no value (a null value) has no
// place in R5 JSON as the official JSON Schema reads it: it is left out
// and reported; the other items stay aligned.
func TestPrimitiveArrayItemWithoutValue(t *testing.T) {
	res := convert(t, `{"resourceType":"Patient","name":[{"given":["Peter",null,"Jim"],"_given":[null,{"id":"g2"},{"id":"g3"}]}]}`)
	if want := `{"resourceType":"Patient","name":[{"given":["Peter","Jim"],"_given":[null,{"id":"g3"}]}]}`; string(res.Resource) != want {
		t.Errorf("got  %s\nwant %s", res.Resource, want)
	}
	if want := []string{"Patient.name._given"}; !slices.Equal(res.Dropped, want) {
		t.Errorf("dropped %v, want %v", res.Dropped, want)
	}
}

// The loss report follows the values, not their texts: a dropped value is
// reported even when an equal one survives elsewhere.
func TestDroppedEvenWhenEqualTextSurvives(t *testing.T) {
	// R5 Organization has no telecom of its own; the phone equals the name,
	// and the system equals the contact's.
	res := convert(t, `{"resourceType":"Organization","name":"555-0100","telecom":[{"system":"phone","value":"555-0100"}],
		"contact":[{"telecom":[{"system":"phone","value":"555-0199"}]}]}`)
	if want := []string{"Organization.telecom"}; !slices.Equal(res.Dropped, want) {
		t.Errorf("dropped %v, want %v", res.Dropped, want)
	}
}

// translate() applies the official ConceptMaps; each translation is
// reported with its R4 path and map. A code a map has no translation for,
// or does not know, passes through, as every code does without the
// ConceptMaps.
func TestTranslateCodes(t *testing.T) {
	testScript := `{"resourceType":"TestScript","url":"http://example.org/ts","name":"t","status":"draft",
		"setup":{"action":[{"assert":{"response":"bad","warningOnly":false}}]}}`
	for _, c := range []struct {
		name, r4, want string
		translated     []converter.Translation
	}{
		{"Encounter finished", `{"resourceType":"Encounter","status":"finished","class":{"code":"AMB"}}`, `"status":"completed"`,
			[]converter.Translation{{Path: "Encounter.status", From: "finished", To: "completed", ConceptMap: "http://hl7.org/fhir/uv/xver/ConceptMap/enc.status-4to5"}}},
		{"TestScript bad", testScript, `"response":"badRequest"`,
			[]converter.Translation{{Path: "TestScript.setup.action.assert.response", From: "bad", To: "badRequest", ConceptMap: "http://hl7.org/fhir/uv/xver/ConceptMap/tst.se.ac.as.response-4to5"}}},
		{"equivalent: unchanged, not reported", `{"resourceType":"Encounter","status":"planned","class":{"code":"AMB"}}`, `"status":"planned"`, nil},
		{"no translation (noMap)", `{"resourceType":"Encounter","status":"arrived","class":{"code":"AMB"}}`, `"status":"arrived"`, nil},
		{"unknown to the map", `{"resourceType":"Encounter","status":"nonsense","class":{"code":"AMB"}}`, `"status":"nonsense"`, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := convert(t, c.r4)
			if !strings.Contains(string(res.Resource), c.want) || !slices.Equal(res.Translated, c.translated) || len(res.Dropped) != 0 {
				t.Errorf("%s\ntranslated %v, dropped %v", res.Resource, res.Translated, res.Dropped)
			}
		})
	}
	// Without the ConceptMaps (FHIR_XVER_TRANSLATE_CODES=false), codes pass through.
	r4, r5 := r4Package(t), r5Package(t)
	plain, err := converter.Compile(converter.Options{MapsDir: mapsDir(), R4: r4, R5: r5})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := domain.DecodeJSON([]byte(`{"resourceType":"Encounter","status":"finished","class":{"code":"AMB"}}`))
	res, err := plain.Convert(m)
	if err != nil || !strings.Contains(string(res.Resource), `"status":"finished"`) || len(res.Translated) != 0 {
		t.Errorf("pass-through: %s %v %v", res.Resource, res.Translated, err)
	}
	if s := plain.Stats(); s.ConceptMaps != 0 || engine(t).Stats().ConceptMaps < 250 {
		t.Errorf("ConceptMaps used: %d without, %d with", s.ConceptMaps, engine(t).Stats().ConceptMaps)
	}
	// A translate() naming a ConceptMap that is not there stops Compile,
	// naming it.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.fml"), []byte("group Encounter(source src, target tgt) {\n"+
		"  src.status as v -> tgt.status = translate(v, 'http://example.org/ConceptMap/missing', 'code') \"status\";\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = converter.Compile(converter.Options{MapsDir: mapsDir(), PatchesDir: dir, ConceptMapsDir: conceptMapsDir(), R4: r4, R5: r5})
	if err == nil || !strings.Contains(err.Error(), "http://example.org/ConceptMap/missing") {
		t.Errorf("missing ConceptMap: %v", err)
	}
}

// An element R5 requires that the R4 resource cannot give is sent with no
// value and FHIR's data-absent-reason extension, and reported; a backbone
// element's own required elements with it.
func TestRequiredElementsMarkedAbsent(t *testing.T) {
	res := convert(t, `{"resourceType":"Coverage","status":"active","beneficiary":{"reference":"Patient/p1"},"payor":[{"reference":"Organization/o1"}]}`)
	absent := `{"extension":[{"url":"http://hl7.org/fhir/StructureDefinition/data-absent-reason","valueCode":"unsupported"}]}`
	if want := `{"resourceType":"Coverage","status":"active","beneficiary":{"reference":"Patient/p1"},"_kind":` + absent + `}`; string(res.Resource) != want {
		t.Errorf("got  %s\nwant %s", res.Resource, want)
	}
	if !slices.Equal(res.Absent, []string{"Coverage.kind"}) || !slices.Equal(res.Dropped, []string{"Coverage.payor"}) {
		t.Errorf("absent %v, dropped %v", res.Absent, res.Dropped)
	}
	res = convert(t, `{"resourceType":"Evidence","status":"draft"}`)
	if !slices.Equal(res.Absent, []string{"Evidence.variableDefinition", "Evidence.variableDefinition.variableRole"}) ||
		!strings.Contains(string(res.Resource), `"variableDefinition":[{"extension":`) {
		t.Errorf("%s: absent %v", res.Resource, res.Absent)
	}
	for _, r := range []*converter.Result{res, convert(t, `{"resourceType":"Coverage","status":"active","beneficiary":{"reference":"Patient/p1"}}`)} {
		if issues, err := validator(t).Validate(r.Resource); err != nil || len(issues) > 0 {
			t.Errorf("%s: not valid R5: %v %v", r.Resource, issues, err)
		}
	}
	// The official R5 JSON Schema gives canonical elements no `_x`: a
	// required canonical stays missing, and R5 validation refuses it.
	res = convert(t, `{"resourceType":"QuestionnaireResponse","status":"completed"}`)
	if strings.Contains(string(res.Resource), "questionnaire") || len(res.Absent) != 0 {
		t.Errorf("%s: absent %v", res.Resource, res.Absent)
	}
}

// BenchmarkConvert measures the engine alone (decoded input to R5 JSON
// and its loss report) on the official R4 examples of six types, each
// op one resource, cycling through up to ten examples of the type.
func BenchmarkConvert(b *testing.B) {
	e := engine(b)
	for _, rt := range []string{"Observation", "Condition", "Encounter", "Patient", "MedicationRequest", "QuestionnaireResponse"} {
		files, _ := filepath.Glob(filepath.Join(packageDir("hl7.fhir.r4.examples"), rt+"-*.json"))
		var inputs [][]byte
		for _, f := range files {
			data, _ := os.ReadFile(f)
			var probe struct{ ResourceType string }
			if json.Unmarshal(data, &probe) == nil && probe.ResourceType == rt && len(inputs) < 10 {
				inputs = append(inputs, data)
			}
		}
		if len(inputs) == 0 {
			b.Fatalf("no R4 examples of %s (run scripts/setup first)", rt)
		}
		b.Run(rt, func(b *testing.B) {
			b.ReportAllocs()
			defer benchcpu.Per(b, 1, "res")()
			for i := 0; b.Loop(); i++ {
				m, err := domain.DecodeJSON(inputs[i%len(inputs)])
				if err != nil {
					b.Fatal(err)
				}
				if _, err := e.Convert(m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A rule of a nested block that cannot run is skipped like any other,
// and the conversion goes on.
func TestNestedRuleErrorIsSkipped(t *testing.T) {
	e := patched(t, "nested.fml", "group Condition(source src, target tgt) {\n"+
		"  src.code as c then { c.noSuchElement -> tgt.code; c.text as x -> tgt.note as n, n.text = x; } \"nested\";\n"+
		"}\n")
	m, _ := domain.DecodeJSON([]byte(`{"resourceType":"Condition","clinicalStatus":{"text":"active"},"code":{"text":"flu"},"subject":{"reference":"Patient/p"}}`))
	res, err := e.Convert(m)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"resourceType":"Condition","clinicalStatus":{"text":"active"},"code":{"text":"flu"},"subject":{"reference":"Patient/p"},"note":[{"text":"flu"}]}`; string(res.Resource) != want {
		t.Errorf("got  %s\nwant %s", res.Resource, want)
	}
}

// Input nested deeper than the engine goes is refused as a whole, not
// converted in part.
func TestTooDeepIsRefused(t *testing.T) {
	ext := `{"url": "http://example.org/leaf", "valueString": "x"}`
	for range 150 {
		ext = `{"url": "http://example.org/level", "extension": [` + ext + `]}`
	}
	m, err := domain.DecodeJSON([]byte(`{"resourceType": "Patient", "extension": [` + ext + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := engine(t).Convert(m); err == nil || !strings.Contains(err.Error(), "nests deeper") {
		t.Errorf("150 nested extensions: %v", err)
	}
	shallow, _ := domain.DecodeJSON([]byte(`{"resourceType": "Patient", "extension": [{"url": "http://example.org/a", "extension": [{"url": "http://example.org/b", "valueString": "x"}]}]}`))
	if _, err := engine(t).Convert(shallow); err != nil {
		t.Errorf("two levels: %v", err)
	}
}

// A patch may name FHIRPath's evaluate() without arguments: the rule is
// compiled as one that never runs, and Compile does not fall over.
func TestEvaluateWithoutArguments(t *testing.T) {
	base := engine(t).Stats().Unsupported
	e := patched(t, "p.fml", "group Extra(source src, target tgt) { src -> tgt.text = evaluate() \"e\"; }\n")
	if got := e.Stats().Unsupported; got != base+1 {
		t.Errorf("%d rules never run, want %d", got, base+1)
	}
}

// Strings are written escaped as encoding/json escapes them (without
// HTML escaping): quotes, backslashes, control characters, U+2028 and
// U+2029; other text as it is.
func TestStringsEscapedAsEncodingJSON(t *testing.T) {
	text := "a \"quote\" \\ <b>&</b> tab\t nl\n \x01 \u2028\u2029 é 中文 🙂"
	r4, _ := json.Marshal(map[string]any{"resourceType": "Patient", "name": []any{map[string]any{"text": text}}})
	res := convert(t, string(r4))
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(text); err != nil {
		t.Fatal(err)
	}
	want := `"text":` + strings.TrimSuffix(buf.String(), "\n")
	if !strings.Contains(string(res.Resource), want) {
		t.Errorf("wrote %s, want it to hold %s", res.Resource, want)
	}
}

// TestCodesMadeCodingsAreCarried: a rule that turns an R4 code into a
// Coding by a condition on its value (AllergyIntolerance.type `allergy`
// becomes the Coding allergy-intolerance-type|allergy) carries the code:
// it is not reported dropped. A value no such rule takes is.
func TestCodesMadeCodingsAreCarried(t *testing.T) {
	allergy := func(typ string) string {
		return `{"resourceType":"AllergyIntolerance","type":"` + typ + `","patient":{"reference":"Patient/p1"},
			"code":{"text":"Aspirin"}}`
	}
	res := convert(t, allergy("allergy"))
	if len(res.Dropped) > 0 || !strings.Contains(string(res.Resource), `"type":{"coding":[{"system":"http://hl7.org/fhir/allergy-intolerance-type","code":"allergy"`) {
		t.Errorf("allergy: dropped %v, R5 %s", res.Dropped, res.Resource)
	}
	res = convert(t, allergy("intolerance"))
	if len(res.Dropped) > 0 {
		t.Errorf("intolerance: dropped %v", res.Dropped)
	}
	// Not a code of R4's value set: no rule's condition holds, nothing
	// is written, and the loss is reported.
	res = convert(t, allergy("sensitivity"))
	if want := []string{"AllergyIntolerance.type"}; !slices.Equal(res.Dropped, want) || strings.Contains(string(res.Resource), `"type"`) {
		t.Errorf("sensitivity: dropped %v, R5 %s", res.Dropped, res.Resource)
	}
}

// TestReferencesRewritten: given a rewriter, every literal reference a
// conversion writes (a CodeableReference's, a contained resource's, an
// extension's, one with a version or under a base) is asked about, its
// type named as R5 names it, and rewritten with its upstream id as its
// identifier; the rewrite is no loss. A reference with an identifier of
// its own, contained, conditional or a URN is left as written.
func TestReferencesRewritten(t *testing.T) {
	m, err := domain.DecodeJSON([]byte(`{"resourceType": "Procedure", "status": "completed", "code": {"text": "x"},
		"subject": {"reference": "Patient/p1", "display": "P"},
		"reasonReference": [{"reference": "Condition/c1/_history/2"}, {"reference": "https://ehr.example.org/fhir/Condition/c2"},
			{"reference": "Condition/c3", "identifier": {"system": "http://x", "value": "3"}}],
		"partOf": [{"reference": "#inner"}, {"reference": "Procedure?identifier=http://x|1"}, {"reference": "urn:uuid:9c2a6c4e-3f5b-4b1a-8a44-0e7f1e2d9a10"}],
		"extension": [{"url": "http://example.org/by", "valueReference": {"reference": "Practitioner/dr1"}},
			{"url": "http://example.org/use", "valueReference": {"reference": "DeviceUseStatement/d1"}}],
		"contained": [{"resourceType": "Observation", "id": "inner", "status": "final", "code": {"text": "y"}, "subject": {"reference": "Patient/p1"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	refs := func(base, typ, id string) (string, string, bool) {
		asked = append(asked, base+"|"+typ+"|"+id)
		return typ + "/stored-" + id, "http://exchange.example.org/fhir-source/1/id", base == "" || base == "https://ehr.example.org/fhir"
	}
	res, err := converter.NewImporter(engine(t)).ConvertR4(m, refs)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(asked)
	want := []string{"https://ehr.example.org/fhir|Condition|c2", "|Condition|c1", "|DeviceUsage|d1", "|Patient|p1", "|Patient|p1", "|Practitioner|dr1"}
	if !slices.Equal(asked, want) {
		t.Errorf("asked %q, want %q", asked, want)
	}
	ident := func(id string) string {
		return `"identifier":{"system":"http://exchange.example.org/fhir-source/1/id","value":"` + id + `"}`
	}
	body := string(res.Body)
	for _, s := range []string{
		`"subject":{"reference":"Patient/stored-p1","display":"P",` + ident("p1") + `}`,
		`{"reference":{"reference":"Condition/stored-c1",` + ident("c1") + `}}`,
		`{"reference":{"reference":"Condition/stored-c2",` + ident("c2") + `}}`,
		`{"reference":{"reference":"Condition/c3","identifier":{"system":"http://x","value":"3"}}}`,
		`{"reference":"#inner"}`, `{"reference":"Procedure?identifier=http://x|1"}`, `{"reference":"urn:uuid:9c2a6c4e-3f5b-4b1a-8a44-0e7f1e2d9a10"}`,
		`"valueReference":{"reference":"Practitioner/stored-dr1",` + ident("dr1") + `}`,
		`"reference":"DeviceUsage/stored-d1"`,
	} {
		if !strings.Contains(body, s) {
			t.Errorf("no %s in %s", s, body)
		}
	}
	if strings.Count(body, ident("p1")) != 2 {
		t.Errorf("the contained Observation's subject is not rewritten: %s", body)
	}
	if slices.Contains(res.Dropped, "Procedure.subject") || slices.ContainsFunc(res.Dropped, func(p string) bool { return strings.Contains(p, "reference") }) {
		t.Errorf("dropped %v", res.Dropped)
	}
}

// TestDocumentedPatches applies the FML patches docs/r4-import-from-ehrs.md
// gives for what the official maps drop from typical EHR data: with them,
// Synthea's Encounter reasons and Organization contacts import with no
// loss, and the R5 output is valid.
func TestDocumentedPatches(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "r4-import-from-ehrs.md"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	blocks := strings.Split(string(doc), "```fml\n")[1:]
	if len(blocks) != 2 {
		t.Fatalf("%d FML blocks in the page, want 2", len(blocks))
	}
	for i, b := range blocks {
		fml, _, _ := strings.Cut(b, "```")
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("patch-%d.fml", i)), []byte(fml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e, err := compile(dir)
	if err != nil {
		t.Fatal(err)
	}
	v := validator(t)
	for _, r4 := range []string{
		`{"resourceType":"Encounter","status":"finished","class":{"system":"http://terminology.hl7.org/CodeSystem/v3-ActCode","code":"AMB"},
			"subject":{"reference":"Patient/p1"},"reasonCode":[{"coding":[{"system":"http://snomed.info/sct","code":"46177005","display":"End-stage renal disease (disorder)"}]}],
			"reasonReference":[{"reference":"Condition/c1"}]}`,
		`{"resourceType":"Organization","name":"PCP1234","telecom":[{"system":"phone","value":"617-555-0100"}],
			"address":[{"line":["1 Main St"],"city":"Boston","state":"MA","postalCode":"02110","country":"US"}]}`,
	} {
		m, err := domain.DecodeJSON([]byte(r4))
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.Convert(m)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Dropped) > 0 {
			t.Errorf("dropped %v: %s", res.Dropped, res.Resource)
		}
		if issues, err := v.Validate(res.Resource); err != nil || len(issues) > 0 {
			t.Errorf("not valid R5: %v %v: %s", issues, err, res.Resource)
		}
	}
}
