// Package omhtest gives tests the official schemas and the schemas' own
// test data: the registry opened once per test binary from where
// scripts/setup put the schemas, and the shouldPass/shouldFail files of the
// shared standards folder beside the repository.
package omhtest

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"exchange/omh"
)

// repoRoot is the repository's root, found from this file's place in it.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// SchemaDirs returns where the tests read the schemas: OMH_SCHEMA_DIR and
// OMH_IEEE_SCHEMA_DIR, else standards/omh of the repository (scripts/setup
// prepares it).
func SchemaDirs() (omhDir, ieeeDir string) {
	omhDir = os.Getenv("OMH_SCHEMA_DIR")
	if omhDir == "" {
		omhDir = filepath.Join(repoRoot(), "standards", "omh", "schemas")
	}
	ieeeDir = os.Getenv("OMH_IEEE_SCHEMA_DIR")
	if ieeeDir == "" {
		ieeeDir = omh.IEEEDirBeside(omhDir)
	}
	return omhDir, ieeeDir
}

var registry = sync.OnceValues(func() (*omh.Registry, error) { return omh.OpenRegistry(SchemaDirs()) })

// Registry returns the official Open mHealth and IEEE 1752 schemas of
// SchemaDirs, opened once per test binary. It stops the test when they do
// not open.
func Registry(t testing.TB) *omh.Registry {
	t.Helper()
	r, err := registry()
	if err != nil {
		t.Fatalf("%v: run scripts/setup first", err)
	}
	return r
}

// Case is one file of the schemas' test data: an instance of one schema
// (a body, or a component such as a unit value) that must pass or fail it.
type Case struct {
	Schema     omh.SchemaID
	ShouldPass bool
	// Name is the file's path under the test data folder.
	Name string
	// JSON is the file as it is; Value is its JSON as the schema
	// validator decodes it (numbers as json.Number).
	JSON  []byte
	Value any
}

// Namespaces are the test data namespaces the service has schemas for
// (the test data also has granola, HealthKit shapes with no schemas of
// their own).
var Namespaces = []string{omh.NamespaceOMH, omh.NamespaceIEEE}

// TestData returns the schemas' test data of the namespaces, in file
// order, from ../shared/omh/test-data beside the repository
// (<namespace>/<schema>/<version>/shouldPass|shouldFail/*.json). It skips
// the test when that folder is absent; it is never copied into the
// repository.
func TestData(t testing.TB) []Case {
	t.Helper()
	root := filepath.Join(repoRoot(), "..", "shared", "omh", "test-data")
	if _, err := os.Stat(root); err != nil {
		t.Skipf("the schemas' test data is not at %s (the shared standards folder beside the repository): %v", root, err)
	}
	var cases []Case
	for _, ns := range Namespaces {
		files, err := filepath.Glob(filepath.Join(root, ns, "*", "*", "*", "*.json"))
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(files)
		for _, f := range files {
			rel, _ := filepath.Rel(root, f)
			parts := strings.Split(filepath.ToSlash(rel), "/") // ns, schema, version, label, file
			if parts[3] != "shouldPass" && parts[3] != "shouldFail" {
				t.Fatalf("%s: neither shouldPass nor shouldFail", rel)
			}
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("%s: %v", rel, err)
			}
			cases = append(cases, Case{Schema: omh.SchemaID{Namespace: ns, Name: parts[1], Version: parts[2]},
				ShouldPass: parts[3] == "shouldPass", Name: rel, JSON: data, Value: v})
		}
	}
	return cases
}
