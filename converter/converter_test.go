package converter_test

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
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
	"exchange/fhirdefs"
)

func standards(parts ...string) string {
	return filepath.Join(append([]string{"..", "standards"}, parts...)...)
}

func packageDir(name string) string {
	if d := os.Getenv("FHIR_PACKAGES_DIR"); d != "" {
		return filepath.Join(d, name, "package")
	}
	return standards("fhir-packages", name, "package")
}

func mapsDir() string {
	if d := os.Getenv("FHIR_XVER_PACKAGE_DIR"); d != "" {
		return d
	}
	return standards("fhir", "xver-r4-r5", "maps")
}

// compile compiles the official maps with the FML patches of patchesDir
// ("" for none).
func compile(patchesDir string) (*converter.Engine, error) {
	r4, err := fhirdefs.OpenPackage(packageDir("hl7.fhir.r4b.core"))
	if err != nil {
		return nil, err
	}
	r5, err := fhirdefs.OpenPackage(packageDir("hl7.fhir.r5.core"))
	if err != nil {
		return nil, err
	}
	return converter.Compile(converter.Options{MapsDir: mapsDir(), PatchesDir: patchesDir, R4: r4, R5: r5})
}

var compiled = sync.OnceValues(func() (*converter.Engine, error) { return compile("") })

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
	m, err := converter.DecodeJSON([]byte(r4))
	if err != nil {
		t.Fatal(err)
	}
	res, err := engine(t).Convert(m)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestR4Examples converts every official R4 example of a type the
// engine converts (hl7.fhir.r4.examples 4.0.1) and validates the output
// against R5. It prints the table of valid outputs per type and the most
// common reasons for invalid ones; it fails on a conversion error and if
// fewer than 95% come out valid.
func TestR4Examples(t *testing.T) {
	e := engine(t)
	_, v, err := fhirdefs.OpenR5(filepath.Dir(filepath.Dir(packageDir("hl7.fhir.r5.core"))))
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(packageDir("hl7.fhir.r4.examples"), "*.json"))
	if len(files) < 700 {
		t.Fatalf("%d R4 examples (run scripts/setup first)", len(files))
	}
	type outcome struct {
		resourceType string
		issues       []fhirdefs.Issue
		err          error
		file         string
	}
	outcomes := make([]outcome, len(files))
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := range next {
				data, err := os.ReadFile(files[i])
				if err != nil {
					outcomes[i].err = err
					continue
				}
				m, err := converter.DecodeJSON(data)
				if err != nil {
					continue // not a resource
				}
				rt, _ := m["resourceType"].(string)
				if e.Supports(rt) != nil {
					continue
				}
				o := outcome{resourceType: rt, file: filepath.Base(files[i])}
				res, err := e.Convert(m)
				if err == nil {
					o.issues, err = v.Validate(res.Resource)
				}
				o.err = err
				outcomes[i] = o
			}
		})
	}
	for i := range files {
		next <- i
	}
	close(next)
	wg.Wait()

	type row struct{ converted, valid int }
	rows := map[string]*row{}
	reasons := map[string]int{}
	total, valid := 0, 0
	for _, o := range outcomes {
		if o.err != nil {
			t.Errorf("%s: %v", o.file, o.err)
			continue
		}
		if o.resourceType == "" {
			continue
		}
		r := rows[o.resourceType]
		if r == nil {
			r = &row{}
			rows[o.resourceType] = r
		}
		r.converted++
		total++
		if len(o.issues) == 0 {
			r.valid++
			valid++
		}
		for _, i := range o.issues {
			reasons[o.resourceType+": "+indexes.ReplaceAllString(i.String(), "")]++
		}
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%-36s %9s %6s\n", "R4 type", "converted", "valid")
	for _, rt := range slices.Sorted(maps.Keys(rows)) {
		fmt.Fprintf(&table, "%-36s %9d %6d\n", rt, rows[rt].converted, rows[rt].valid)
	}
	fmt.Fprintf(&table, "%-36s %9d %6d (%.1f%%)\n", "all", total, valid, 100*float64(valid)/float64(total))
	top := slices.SortedFunc(maps.Keys(reasons), func(a, b string) int { return cmp.Or(reasons[b]-reasons[a], strings.Compare(a, b)) })
	table.WriteString("most common reasons for invalid output:\n")
	for _, r := range top[:min(15, len(top))] {
		fmt.Fprintf(&table, "%5d  %s\n", reasons[r], r)
	}
	t.Log("\n" + table.String())
	if total < 700 || float64(valid) < 0.95*float64(total) {
		t.Errorf("%d of %d converted examples are valid R5", valid, total)
	}
}

var indexes = regexp.MustCompile(`\[\d+\]`)

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
	_, v, err := fhirdefs.OpenR5(filepath.Dir(filepath.Dir(packageDir("hl7.fhir.r5.core"))))
	if err != nil {
		t.Fatal(err)
	}
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
			if c.Name == "Coverage.payor" {
				return // R5 requires Coverage.kind, which R4 did not have
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
	m, _ := converter.DecodeJSON([]byte(`{"resourceType":"Condition","id":"c1","recordedDate":"2024-02-03","subject":{"reference":"Patient/p"}}`))
	res, err := e.Convert(m)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"resourceType":"Condition","id":"c1","subject":{"reference":"Patient/p"},"recordedDate":"2000-01-01","note":[{"text":"c1"}]}`
	if string(res.Resource) != want {
		t.Errorf("got  %s\nwant %s", res.Resource, want)
	}
	if !slices.Equal(res.Dropped, []string{"Condition.recordedDate"}) {
		t.Errorf("dropped %v", res.Dropped)
	}
}

func TestNotConverted(t *testing.T) {
	e := engine(t)
	for _, rt := range []string{"Evidence", "MedicinalProduct", "SubstanceSpecification", "Subscription", "Nonsense", "", "Element"} {
		m := map[string]any{"resourceType": rt}
		if _, err := e.Convert(m); !errors.Is(err, converter.ErrNotSupported) {
			t.Errorf("%q: %v, want ErrNotSupported", rt, err)
		}
	}
	if n := len(e.ResourceTypes()); n < 115 || slices.Contains(e.ResourceTypes(), "Subscription") {
		t.Errorf("%d resource types converted: %v", n, e.ResourceTypes())
	}
	// Nor inside another resource: a contained Subscription is dropped and
	// reported, the Patient around it converted.
	m, _ := converter.DecodeJSON([]byte(`{"resourceType":"Patient","gender":"female",
		"contained":[{"resourceType":"Subscription","id":"s1","status":"active","reason":"x","criteria":"Observation?code=1","channel":{"type":"rest-hook"}}]}`))
	res, err := e.Convert(m)
	if err != nil || strings.Contains(string(res.Resource), "Subscription") || !slices.Contains(res.Dropped, "Patient.contained") {
		t.Errorf("contained Subscription: %v %v", res, err)
	}
}

func TestDroppedCollapses(t *testing.T) {
	// Coverage.payor and Device.patient have no R5 home; a renamed value
	// (deviceName.name -> name.value) is not reported; primitive extensions
	// (_status) are not carried.
	res := convert(t, `{"resourceType":"Device","status":"active","patient":{"reference":"Patient/p9","display":"Pat"},
		"deviceName":[{"name":"Cuff","type":"model-name"}],"_status":{"extension":[{"url":"http://x","valueString":"note"}]}}`)
	if want := []string{"Device._status", "Device.patient"}; !slices.Equal(res.Dropped, want) {
		t.Errorf("dropped %v, want %v", res.Dropped, want)
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
			for i := 0; b.Loop(); i++ {
				m, err := converter.DecodeJSON(inputs[i%len(inputs)])
				if err != nil {
					b.Fatal(err)
				}
				if _, err := e.Convert(m); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "resources/s")
		})
	}
}

// A rule of a nested block that cannot run is skipped like any other,
// and the conversion goes on.
func TestNestedRuleErrorIsSkipped(t *testing.T) {
	e := patched(t, "nested.fml", "group Condition(source src, target tgt) {\n"+
		"  src.code as c then { c.noSuchElement -> tgt.code; c.text as x -> tgt.note as n, n.text = x; } \"nested\";\n"+
		"}\n")
	m, _ := converter.DecodeJSON([]byte(`{"resourceType":"Condition","code":{"text":"flu"},"subject":{"reference":"Patient/p"}}`))
	res, err := e.Convert(m)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"resourceType":"Condition","code":{"text":"flu"},"subject":{"reference":"Patient/p"},"note":[{"text":"flu"}]}`; string(res.Resource) != want {
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
	m, err := converter.DecodeJSON([]byte(`{"resourceType": "Patient", "extension": [` + ext + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := engine(t).Convert(m); err == nil || !strings.Contains(err.Error(), "nests deeper") {
		t.Errorf("150 nested extensions: %v", err)
	}
	shallow, _ := converter.DecodeJSON([]byte(`{"resourceType": "Patient", "extension": [{"url": "http://example.org/a", "extension": [{"url": "http://example.org/b", "valueString": "x"}]}]}`))
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
