package converter_test

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"exchange/converter"
	"exchange/domain"
	"exchange/fhirdefs"
	"exchange/fhirdefs/fhirdefstest"
	"exchange/fhirsearch"
	"exchange/internal/pinned"
)

// nonInstance are the R4 resource types of the Conformance and
// Terminology modules: the definitions of FHIR itself, which most of the
// R4 examples package is (StructureDefinitions, SearchParameters, ...).
var nonInstance = map[string]bool{
	"CapabilityStatement": true, "StructureDefinition": true, "ImplementationGuide": true, "SearchParameter": true,
	"MessageDefinition": true, "OperationDefinition": true, "CompartmentDefinition": true, "StructureMap": true,
	"GraphDefinition": true, "ExampleScenario": true, "CodeSystem": true, "ValueSet": true, "ConceptMap": true,
	"NamingSystem": true, "TerminologyCapabilities": true,
}

// exampleOutcome is what importing one R4 example gives.
type exampleOutcome struct {
	file, resourceType string
	instance           bool // not a Conformance or Terminology resource
	mapped             bool // a 4to5 map converts its type
	refused            error
	r5Type             string
	issues             []fhirdefs.Issue // our validator's
	schema             []string         // the official R5 JSON Schema's
}

func (o exampleOutcome) valid() bool {
	return o.refused == nil && len(o.issues) == 0 && len(o.schema) == 0
}

// reason groups a refusal or an invalid output: its message without
// array indexes.
func (o exampleOutcome) reason() string {
	switch {
	case o.refused != nil:
		return o.resourceType + ": refused: " + indexes.ReplaceAllString(o.refused.Error(), "")
	case len(o.issues) > 0:
		return o.resourceType + ": invalid R5: " + indexes.ReplaceAllString(o.issues[0].String(), "")
	case len(o.schema) > 0:
		return o.resourceType + ": fails the R5 JSON Schema: " + o.schema[0]
	}
	return ""
}

var indexes = regexp.MustCompile(`\[\d+\]`)

// TestR4Examples imports every official R4 example (hl7.fhir.r4.examples
// 4.0.1, 5,306 resources) as /fhir-import/R4 does up to its store: the id
// moved out, the R4 check, the maps, then the R5 gates: our
// validator (fhirdefs) and the official R5 JSON Schema. Its population is
// the 719 instance examples (every example but the Conformance and
// Terminology resources that define FHIR itself); 699 of them are of a
// type with a 4to5 map. It logs a table per type and every refusal with
// its reason, and fails on an output our validator passes but the JSON
// Schema refuses, on a conversion error, and when fewer than 95% of the
// examples with a map (instance ones, and all) import valid.
func TestR4Examples(t *testing.T) {
	if testing.Short() {
		t.Skip("the whole corpus and its rates: not in the short tier (TestR4ExampleOutputs converts a sample)")
	}
	im := converter.NewImporter(engine(t))
	v := validator(t)
	store, err := fhirsearch.NewCatalog(r5Package(t))
	if err != nil {
		t.Fatal(err)
	}
	schema, err := fhirdefstest.OpenR5Schema()
	if err != nil {
		t.Fatalf("%v (run scripts/setup first)", err)
	}
	files, _ := filepath.Glob(filepath.Join(packageDir("hl7.fhir.r4.examples"), "*.json"))
	outcomes := make([]exampleOutcome, len(files))
	inParallel(len(files), func(i int) { outcomes[i] = importExample(t, files[i], im, v, schema) })

	type row struct{ examples, converted, valid, storeRefuses int }
	rows := map[string]*row{}
	var instance, all row
	reasons := map[string][]string{} // reason -> files
	for _, o := range outcomes {
		if o.resourceType == "" {
			continue // package.json
		}
		if o.schema != nil && len(o.issues) == 0 {
			t.Errorf("%s: passes our R5 validator but not the official R5 JSON Schema: %v", o.file, o.schema)
		}
		if domain.ErrorCode(o.refused) == domain.CodeInvalid && strings.Contains(o.refused.Error(), "could not be converted") {
			t.Errorf("%s: %v", o.file, o.refused)
		}
		counts := []*row{&all}
		if o.instance {
			r := rows[o.resourceType]
			if r == nil {
				r = &row{}
				rows[o.resourceType] = r
			}
			counts = append(counts, &instance, r)
			if !o.valid() {
				reasons[o.reason()] = append(reasons[o.reason()], o.file)
			}
		}
		for _, r := range counts {
			if !o.mapped {
				continue
			}
			r.examples++
			if o.refused == nil {
				r.converted++
			}
			if o.valid() {
				r.valid++
				if !store.Keeps(o.r5Type) {
					r.storeRefuses++
				}
			}
		}
	}
	var b strings.Builder
	line := func(name string, r *row) {
		fmt.Fprintf(&b, "%-34s %8d %9d %6d %13d\n", name, r.examples, r.converted, r.valid, r.storeRefuses)
	}
	fmt.Fprintf(&b, "%-34s %8s %9s %6s %13s\n", "R4 type (instance examples)", "with map", "converted", "valid", "store refuses")
	for _, rt := range slices.Sorted(maps.Keys(rows)) {
		line(rt, rows[rt])
	}
	line("instance examples", &instance)
	line("all examples", &all)
	b.WriteString("instance examples not imported valid, by reason:\n")
	for _, r := range slices.SortedFunc(maps.Keys(reasons), func(a, b string) int {
		return cmp.Or(len(reasons[b])-len(reasons[a]), strings.Compare(a, b))
	}) {
		fmt.Fprintf(&b, "%4d  %s (%s)\n", len(reasons[r]), r, strings.Join(reasons[r], ", "))
	}
	t.Log("\n" + b.String())
	for _, c := range []struct {
		name string
		r    *row
		min  int
	}{{"instance examples", &instance, 690}, {"examples", &all, 5200}} {
		if c.r.examples < c.min || float64(c.r.valid) < 0.95*float64(c.r.examples) {
			t.Errorf("%s with a map: %d of %d import valid R5, want 95%%", c.name, c.r.valid, c.r.examples)
		}
	}
}

// inParallel calls f with each index below n, on GOMAXPROCS goroutines.
func inParallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := range next {
				f(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// importExample imports one example file as the R4 import does: the
// upstream id moved out, converted, then validated.
func importExample(t *testing.T, file string, im *converter.Importer, v *fhirdefs.Validator, schema *fhirdefstest.Schema) exampleOutcome {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Error(err)
		return exampleOutcome{}
	}
	m, err := domain.DecodeJSON(data)
	if err != nil {
		t.Errorf("%s: %v", file, err)
		return exampleOutcome{}
	}
	o := exampleOutcome{file: filepath.Base(file)}
	o.resourceType, _ = m["resourceType"].(string)
	o.instance = !nonInstance[o.resourceType]
	o.mapped = !strings.Contains(fmt.Sprint(engine(t).Supports(o.resourceType)), "no R4 -> R5 map")
	if o.resourceType == "" {
		return exampleOutcome{} // package.json
	}
	delete(m, "id")
	if !o.instance {
		// FHIR's own definitions: the maps and our validator only (the
		// JSON Schema takes minutes over 4,587 of them; TestR4CheckRefusals
		// runs the R4 check over every example).
		res, err := engine(t).Convert(m)
		if o.refused = err; err == nil {
			checkCompact(t, file, res.Resource)
			o.r5Type = res.Type
			if o.issues, err = v.Validate(res.Resource); err != nil {
				t.Errorf("%s: %v", file, err)
			}
		}
		return o
	}
	conv, err := im.ConvertR4(m, nil)
	if o.refused = err; err != nil {
		return o
	}
	checkCompact(t, file, conv.Body)
	o.r5Type = conv.Type
	if o.issues, err = v.Validate(conv.Body); err != nil {
		t.Errorf("%s: %v", file, err)
	}
	if o.schema, err = schema.Problems(conv.Body); err != nil {
		t.Errorf("%s: %v", file, err)
	}
	return o
}

// checkCompact holds what the import's create path takes from the
// converter's JSON without reading it again (domain.R4Conversion.Write):
// it is compact and names no member twice.
func checkCompact(t *testing.T, file string, out []byte) {
	var compact bytes.Buffer
	if err := json.Compact(&compact, out); err != nil || !bytes.Equal(compact.Bytes(), out) {
		t.Errorf("%s: the converter's JSON is not compact: %v", file, err)
	}
	if _, err := domain.DecodeJSON(out); err != nil {
		t.Errorf("%s: the converter's JSON: %v", file, err)
	}
}

// refusedByGoogleParser are the official R4 examples that Google's R4
// parser (github.com/google/fhir/go v0.7.4 jsonformat, the import's check
// before fhirdefs.NewR4Validator) refused, their ids moved out as the
// import does: computed with it once and pinned here, since the module
// is gone. Four point to a resource type their element does not name;
// the others lack a required element.
var refusedByGoogleParser = []string{
	"DeviceMetric-example.json",                                    // parent: a DeviceDefinition, not a Device
	"DeviceUseStatement-example.json",                              // reasonReference: a Procedure
	"ImplementationGuide-fhir.json",                                // no name, no status
	"MedicationRequest-medrx0301.json",                             // dispenseRequest.performer: a Practitioner
	"Observation-clinical-gender.json",                             // performer: an Encounter
	"Questionnaire-qs1.json",                                       // item.item without linkId
	"SearchParameter-codesystem-extensions-CodeSystem-author.json", // no base
	"SearchParameter-codesystem-extensions-CodeSystem-effective.json",
	"SearchParameter-codesystem-extensions-CodeSystem-end.json",
	"SearchParameter-codesystem-extensions-CodeSystem-keyword.json",
	"SearchParameter-codesystem-extensions-CodeSystem-workflow.json",
	"SearchParameter-valueset-extensions-ValueSet-author.json",
	"SearchParameter-valueset-extensions-ValueSet-effective.json",
	"SearchParameter-valueset-extensions-ValueSet-end.json",
	"SearchParameter-valueset-extensions-ValueSet-keyword.json",
	"SearchParameter-valueset-extensions-ValueSet-workflow.json",
	"ig-r4.json", // no name, no status
}

// refusedByR4CheckOnly are the official R4 examples that the R4 check
// refuses and Google's parser took.
var refusedByR4CheckOnly = []string{
	"Bundle-v2-valuesets.json",        // an empty code (a FHIR string has a non-whitespace character)
	"CodeSystem-v2-0550.json",         // the same empty code
	"CodeSystem-dicom-dcim.json",      // a narrative over 1 MiB
	"ValueSet-c80-doc-typecodes.json", // a narrative over 1 MiB
}

// TestR4CheckRefusals runs the import's R4 check over every official R4
// example (5,306), its id moved out as the import does: it refuses
// exactly the examples Google's R4 parser refused and the few it let
// through, and the import refuses each of them, at an R4 path.
func TestR4CheckRefusals(t *testing.T) {
	if testing.Short() {
		t.Skip("the R4 check over the whole corpus: not in the short tier")
	}
	im := converter.NewImporter(engine(t))
	check := fhirdefs.NewR4Validator(r4Package(t))
	files, _ := filepath.Glob(filepath.Join(packageDir("hl7.fhir.r4.examples"), "*.json"))
	refused := make([]bool, len(files))
	inParallel(len(files), func(i int) {
		m := readExample(t, filepath.Base(files[i]))
		if _, ok := m["resourceType"]; !ok {
			return // package.json
		}
		delete(m, "id")
		issues, err := check.ValidateObject(m)
		if err != nil {
			t.Errorf("%s: %v", files[i], err)
		}
		refused[i] = len(issues) > 0
	})
	var got []string
	for i, f := range files {
		if refused[i] {
			got = append(got, filepath.Base(f))
		}
	}
	for _, name := range refusedByGoogleParser {
		if !slices.Contains(got, name) {
			t.Errorf("%s: Google's R4 parser refused it; the R4 check accepts it", name)
		}
	}
	want := slices.Sorted(slices.Values(append(slices.Clone(refusedByGoogleParser), refusedByR4CheckOnly...)))
	if !slices.Equal(got, want) {
		t.Errorf("the R4 check refuses %d examples:\n%s\nwant %d:\n%s", len(got), strings.Join(got, "\n"), len(want), strings.Join(want, "\n"))
	}
	for _, name := range want {
		m := readExample(t, name)
		delete(m, "id")
		_, err := im.ConvertR4(m, nil)
		var de *domain.Error
		if !errors.As(err, &de) || de.Code != domain.CodeInvalid || !strings.Contains(de.Message, "is not valid FHIR R4: "+de.Field) || len(de.Details) == 0 {
			t.Errorf("%s: imported, or refused otherwise than as invalid R4 at a path: %v", name, err)
		}
	}
}

// readExample reads an official R4 example, decoded.
func readExample(t *testing.T, name string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(packageDir("hl7.fhir.r4.examples"), name))
	if err != nil {
		t.Fatalf("%v (run scripts/setup first)", err)
	}
	m, err := domain.DecodeJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestR4ExampleFidelity imports official R4 examples as the import does
// and checks what they carry: Encounter f001's `finished` arrives as
// `completed` with its translation reported, Patient example's
// birth-time extension (`_birthDate`) arrives, and Organization 1, made
// to have its name as its phone, reports the telecom it loses; the
// Coverage inside Claims 100152 and MED-00050 is marked and reported as
// absent where it is.
func TestR4ExampleFidelity(t *testing.T) {
	im := converter.NewImporter(engine(t))
	schema, err := fhirdefstest.OpenR5Schema()
	if err != nil {
		t.Fatal(err)
	}
	imported := func(t *testing.T, m map[string]any) *domain.R4Conversion {
		t.Helper()
		conv, err := im.ConvertR4(m, nil)
		if err != nil {
			t.Fatal(err)
		}
		issues, err := validator(t).Validate(conv.Body)
		problems, schemaErr := schema.Problems(conv.Body)
		if len(issues) > 0 || len(problems) > 0 || err != nil || schemaErr != nil {
			t.Errorf("not valid R5: %v %v %v %v", issues, problems, err, schemaErr)
		}
		return conv
	}
	t.Run("Encounter finished", func(t *testing.T) {
		conv := imported(t, readExample(t, "Encounter-f001.json"))
		want := []domain.CodeTranslation{{Path: "Encounter.status", From: "finished", To: "completed",
			ConceptMap: "http://hl7.org/fhir/uv/xver/ConceptMap/enc.status-4to5"}}
		if !strings.Contains(string(conv.Body), `"status":"completed"`) || !slices.Equal(conv.Translated, want) || slices.Contains(conv.Dropped, "Encounter.status") {
			t.Errorf("translated %v, dropped %v: %s", conv.Translated, conv.Dropped, conv.Body)
		}
	})
	t.Run("Patient _birthDate", func(t *testing.T) {
		conv := imported(t, readExample(t, "Patient-example.json"))
		birthTime := `"birthDate":"1974-12-25","_birthDate":{"extension":[{"url":"http://hl7.org/fhir/StructureDefinition/patient-birthTime","valueDateTime":"1974-12-25T14:35:45-05:00"}]}`
		ownPrefix := `"_family":{"extension":[{"url":"http://hl7.org/fhir/StructureDefinition/humanname-own-prefix","valueString":"VV"}]}`
		if !strings.Contains(string(conv.Body), birthTime) || !strings.Contains(string(conv.Body), ownPrefix) || len(conv.Dropped) != 0 {
			t.Errorf("dropped %v: %s", conv.Dropped, conv.Body)
		}
	})
	// A repeating primitive's null holds the place of a value that only
	// its extension has: valid R4, so the R4 check takes it; R5 JSON as
	// the official schema reads it has no null among values, so the
	// value-less item is left out and its extension reported dropped
	// (TestPrimitiveArrayItemWithoutValue), never lost unsaid.
	t.Run("Patient given null with an extension", func(t *testing.T) {
		m, err := domain.DecodeJSON([]byte(`{"resourceType": "Patient", "name": [{"given": [null, "Ann"],
			"_given": [{"extension": [{"url": "http://x", "valueString": "y"}]}, null]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		conv := imported(t, m)
		if want := `{"resourceType":"Patient","name":[{"given":["Ann"]}]}`; string(conv.Body) != want || !slices.Equal(conv.Dropped, []string{"Patient.name._given"}) {
			t.Errorf("dropped %v: %s, want %s with Patient.name._given dropped", conv.Dropped, conv.Body, want)
		}
	})
	// A contained resource is converted as one imported alone (its Coverage
	// lacks R5's required kind), and what is reported of it is at its
	// place in the resource imported: Claim.contained.kind, not a
	// Coverage.kind that names no element of a Claim.
	for _, file := range []string{"Claim-100152.json", "Claim-MED-00050.json"} {
		t.Run(file+" contained Coverage", func(t *testing.T) {
			conv := imported(t, readExample(t, file))
			kind := `"_kind":{"extension":[{"url":"http://hl7.org/fhir/StructureDefinition/data-absent-reason","valueCode":"unsupported"}]}`
			if !slices.Equal(conv.Absent, []string{"Claim.contained.kind"}) || !strings.Contains(string(conv.Body), kind) ||
				!slices.Equal(conv.Dropped, []string{"Claim.contained.payor"}) {
				t.Errorf("absent %v, dropped %v: %s", conv.Absent, conv.Dropped, conv.Body)
			}
		})
	}
	t.Run("Organization phone equals name", func(t *testing.T) {
		m := readExample(t, "Organization-1.json")
		phone := m["telecom"].([]any)[0].(map[string]any)
		m["name"] = phone["value"]
		m["telecom"] = []any{phone}
		m["contact"] = []any{map[string]any{"telecom": []any{map[string]any{"system": "phone", "value": "+1 555 234 3599", "use": "work"}}}}
		conv := imported(t, m)
		if !slices.Equal(conv.Dropped, []string{"Organization.telecom"}) {
			t.Errorf("dropped %v: %s", conv.Dropped, conv.Body)
		}
	})
}

// TestR4ExampleOutputs converts every official R4 example (5,306) with
// the engine and compares each outcome to its pinned digest in
// testdata/r4examples-outputs.txt: the R5 JSON byte for byte, its type,
// the dropped paths, the translations and the absent elements, or the
// error. The digests were made by the engine of main before the
// converter's speed work: a change to the engine that changes
// any output, or any loss report, fails here. -update rewrites them, for
// a change of output that is meant.
func TestR4ExampleOutputs(t *testing.T) {
	path := filepath.Join("testdata", "r4examples-outputs.txt")
	files, _ := filepath.Glob(filepath.Join(packageDir("hl7.fhir.r4.examples"), "*.json"))
	if len(files) < 5306 {
		t.Fatalf("%d R4 examples, want 5,306 (run scripts/setup first)", len(files))
	}
	files = pinned.Sample(files) // under -short: a sample of them
	e := engine(t)
	got := make([]string, len(files))
	inParallel(len(files), func(i int) {
		m := readExample(t, filepath.Base(files[i]))
		if _, ok := m["resourceType"]; !ok {
			return // package.json
		}
		got[i] = filepath.Base(files[i]) + " " + outcomeDigest(e.Convert(m))
	})
	got = slices.DeleteFunc(got, func(s string) bool { return s == "" })
	pinned.Lines(t, path, got, *update)
}

// outcomeDigest is the SHA-256 (its first 16 bytes, in hex) of all that a
// conversion returns.
func outcomeDigest(res *converter.Result, err error) string {
	h := sha256.New()
	if err != nil {
		fmt.Fprintf(h, "error\x00%s", err)
	} else {
		fmt.Fprintf(h, "%s\x00%s\x00%q\x00%q\x00", res.Type, res.Resource, res.Dropped, res.Absent)
		for _, tr := range res.Translated {
			fmt.Fprintf(h, "%q\x00", tr)
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// groupsRun is an engine that runs every group, without valueCopy's
// shortcut: what the shortcut must equal.
var groupsRun = sync.OnceValues(func() (*converter.Engine, error) {
	e, err := compile("")
	if err == nil {
		converter.WithoutValueCopies(e)
	}
	return e, err
})

// sameConversion fails unless e and the engine that runs every group
// convert m alike: output, loss report and error.
func sameConversion(t *testing.T, name string, data []byte) {
	slow, err := groupsRun()
	if err != nil {
		t.Fatal(err)
	}
	m1, err1 := domain.DecodeJSON(data)
	m2, _ := domain.DecodeJSON(data)
	if err1 != nil {
		return
	}
	fast, want := outcomeDigest(engine(t).Convert(m1)), outcomeDigest(slow.Convert(m2))
	if fast != want {
		res, err := engine(t).Convert(m1)
		t.Errorf("%s: the value-copy shortcut converts otherwise than the groups run: %v %v", name, res, err)
	}
}

// TestValueCopies compares the engine with one that runs every group
// (valueCopy's shortcut off) over every official R4 example.
func TestValueCopies(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(packageDir("hl7.fhir.r4.examples"), "*.json"))
	files = pinned.Sample(files) // under -short: a sample of them
	inParallel(len(files), func(i int) {
		data, err := os.ReadFile(files[i])
		if err != nil {
			t.Error(err)
			return
		}
		sameConversion(t, filepath.Base(files[i]), data)
	})
}

// FuzzValueCopies compares the engine with one that runs every group on
// mutations of R4 resources (go test ./converter -run '^$' -fuzz
// FuzzValueCopies): primitives with and without ids and extensions,
// nested, in arrays, of every type.
func FuzzValueCopies(f *testing.F) {
	for _, name := range []string{"Observation-example.json", "Patient-example.json", "Encounter-f001.json", "Condition-example.json",
		"QuestionnaireResponse-3141.json", "MedicationRequest-medrx0302.json", "Claim-100152.json"} {
		data, err := os.ReadFile(filepath.Join(packageDir("hl7.fhir.r4.examples"), name))
		if err != nil {
			f.Fatalf("%v (run scripts/setup first)", err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"resourceType":"Observation","status":"final","_status":{"id":"s"},"code":{"text":"x"},"valueInteger":5,"_valueInteger":{"extension":[{"url":"u","valueString":"v"}]}}`))
	f.Add([]byte(`{"resourceType":"Patient","name":[{"given":["a",null,"c"],"_given":[null,{"id":"g"},null]}],"birthDate":"2000-01-01"}`))
	f.Fuzz(func(t *testing.T, data []byte) { sameConversion(t, "fuzzed", data) })
}
