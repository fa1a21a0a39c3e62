package fhirdefs

import (
	"os"
	"path/filepath"
	"testing"

	"exchange/fhirdefs/fhirdefstest"
)

// TestKeptTablesAreTheValidatorsTables: the table a key keeps for its
// values' objects (keyDef.objects, which spares the walk the lookup in
// Validator.tables) is the one objectDef gives for the definition path
// walk.value reads them by, after a walk over a quarter of the official R5 examples:
// the walk reads the same tables with the shortcut as without it.
func TestKeptTablesAreTheValidatorsTables(t *testing.T) {
	defs, err := OpenPackage(fhirdefstest.PackageDir("hl7.fhir.r5.core"))
	if err != nil {
		t.Fatalf("%v (run scripts/setup first)", err)
	}
	v := NewValidator(defs, nil)
	files, err := filepath.Glob(filepath.Join(fhirdefstest.PackageDir("hl7.fhir.r5.examples"), "*.json"))
	if err != nil || len(files) < 1000 {
		t.Fatalf("%d examples, %v (run scripts/setup)", len(files), err)
	}
	for i, f := range files {
		if i%4 != 0 { // a quarter of them meets every table many times
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Validate(data); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	kept := 0
	v.tables.Range(func(k, table any) bool {
		key := k.(defKey)
		od := table.(*objectDef)
		if od == nil {
			return true
		}
		for _, e := range od.elems {
			for i := range e.keys {
				kd := &e.keys[i]
				got := kd.objects.Load()
				if got == nil {
					continue
				}
				kept++
				sd, path := key.sd, e.el.Path // a backbone element's
				switch {
				case e.el.ContentRef != "":
					path = e.el.ContentRef
				case kd.typ == "BackboneElement" || kd.typ == "Element" && len(sd.Children(e.el.Path)) > 0:
				default:
					sd, path = kd.def, kd.def.Type
				}
				if want, _ := v.objectDef(sd, path); got != want {
					t.Errorf("%s %s keeps the table of another path than %s", key.path, kd.name, path)
				}
			}
		}
		return true
	})
	if kept < 100 {
		t.Errorf("only %d keys keep a table", kept)
	}
}
