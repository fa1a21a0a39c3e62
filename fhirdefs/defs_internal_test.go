package fhirdefs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Type names come from requests (resourceType, contained resources): the
// ones the package has no file for are refused without growing the cache.
func TestUnknownTypesAreNotCached(t *testing.T) {
	dir := os.Getenv("FHIR_PACKAGES_DIR")
	if dir == "" {
		dir = filepath.Join("..", "standards", "fhir-packages")
	}
	p, err := OpenPackage(filepath.Join(dir, "hl7.fhir.r5.core", "package"))
	if err != nil {
		t.Fatalf("%v (run scripts/setup first)", err)
	}
	for i := range 1000 {
		if _, err := p.Type(fmt.Sprintf("Bogus%d", i)); !errors.Is(err, ErrUnknownType) {
			t.Fatalf("Bogus%d: %v", i, err)
		}
	}
	if _, err := p.Type("../package"); !errors.Is(err, ErrUnknownType) {
		t.Errorf("a path as a type: %v", err)
	}
	if _, err := p.Type("Patient"); err != nil {
		t.Fatal(err)
	}
	if len(p.defs) != 1 {
		t.Errorf("%d cached definitions after 1,001 unknown names and Patient", len(p.defs))
	}
}
