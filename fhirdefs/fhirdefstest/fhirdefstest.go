// Package fhirdefstest gives tests the FHIR packages that scripts/setup
// installs and the official R5 JSON Schema of the core package: the
// second opinion, independent of our validator (package fhirdefs), on
// what is valid R5 JSON. e2e/r5.mjs runs the same schema with Ajv.
package fhirdefstest

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// PackagesDir is where the FHIR npm packages are: FHIR_PACKAGES_DIR, else
// standards/fhir-packages of the repository.
func PackagesDir() string {
	if d := os.Getenv("FHIR_PACKAGES_DIR"); d != "" {
		return d
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "standards", "fhir-packages")
}

// PackageDir is the folder of one package's files, such as
// PackageDir("hl7.fhir.r5.core").
func PackageDir(name string) string { return filepath.Join(PackagesDir(), name, "package") }

// SyntheaDir is the Synthea R4 sample of 10 patients (FHIR Bulk Data
// NDJSON, one type a file, and the export's log.ndjson) that
// scripts/setup links from ../shared: what an EHR holds, for tests that
// import it or serve it as a test EHR.
func SyntheaDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "standards", "fhir", "synthea-r4-10-patients")
}

// R5SchemaFile is the official R5 JSON Schema.
func R5SchemaFile() string {
	return filepath.Join(PackageDir("hl7.fhir.r5.core"), "openapi", "fhir.schema.json")
}

// Schema is the official R5 JSON Schema, compiled per resource type on
// first use. As e2e/r5.mjs does, a resource inside another (contained,
// Bundle.entry.resource, ...) is validated on its own against its type:
// the schema's ResourceList, a oneOf of every resource type, is left out,
// which also spares matching each one against 158 definitions. It is safe
// for concurrent use.
type Schema struct {
	mu       sync.Mutex
	compiler *jsonschema.Compiler
	byType   map[string]*jsonschema.Schema
}

const r5SchemaURL = "http://hl7.org/fhir/json-schema/5.0"

// OpenR5Schema returns the official R5 JSON Schema, read once per test
// binary.
var OpenR5Schema = sync.OnceValues(func() (*Schema, error) {
	f, err := os.Open(R5SchemaFile())
	if err != nil {
		return nil, err
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		return nil, err
	}
	doc.(map[string]any)["definitions"].(map[string]any)["ResourceList"] = map[string]any{"type": "object"}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft6)
	if err := c.AddResource(r5SchemaURL, doc); err != nil {
		return nil, err
	}
	return &Schema{compiler: c, byType: map[string]*jsonschema.Schema{}}, nil
})

// Problems validates a resource, and each resource inside it, against
// their types' definitions; nil when they are valid.
func (s *Schema) Problems(resource []byte) ([]string, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(resource))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range append([]map[string]any{v.(map[string]any)}, innerResources(v, false)...) {
		p, err := s.validate(r)
		if err != nil {
			return nil, err
		}
		out = append(out, p...)
	}
	return out, nil
}

// innerResources are the resources inside a JSON value, each without
// those inside it.
func innerResources(v any, inside bool) []map[string]any {
	var out []map[string]any
	switch v := v.(type) {
	case map[string]any:
		if _, ok := v["resourceType"].(string); ok && inside {
			return append(out, append([]map[string]any{v}, innerResources(v, false)...)...)
		}
		for _, m := range v {
			out = append(out, innerResources(m, true)...)
		}
	case []any:
		for _, m := range v {
			out = append(out, innerResources(m, true)...)
		}
	}
	return out
}

func (s *Schema) validate(v map[string]any) ([]string, error) {
	rt, _ := v["resourceType"].(string)
	var err error
	s.mu.Lock()
	sch, ok := s.byType[rt]
	if !ok {
		sch, err = s.compiler.Compile(r5SchemaURL + "#/definitions/" + rt)
		s.byType[rt] = sch
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if sch == nil {
		return []string{rt + " is not an R5 resource type"}, nil
	}
	if err := sch.Validate(v); err != nil {
		return strings.Split(err.Error(), "\n"), nil
	}
	return nil, nil
}
