package fhirdefs

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"exchange/fhirdefs/fhirdefstest"
)

// Type names come from requests (resourceType, contained resources): the
// ones the package has no file for are refused without growing the cache.
func TestUnknownTypesAreNotCached(t *testing.T) {
	p, err := OpenPackage(fhirdefstest.PackageDir("hl7.fhir.r5.core"))
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

// TestExtensionSiblingsFollowTheR5Schema compares, element by element,
// where the validator takes (and the converter writes) a primitive extension sibling (_name) with
// where the official R5 JSON Schema has one: every element of every
// resource and data type, their backbone elements too.
func TestExtensionSiblingsFollowTheR5Schema(t *testing.T) {
	p, err := OpenPackage(fhirdefstest.PackageDir("hl7.fhir.r5.core"))
	if err != nil {
		t.Fatalf("%v (run scripts/setup first)", err)
	}
	data, err := os.ReadFile(fhirdefstest.R5SchemaFile())
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Definitions map[string]struct {
			Properties map[string]json.RawMessage
		}
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	// keys are the JSON names of the children of a definition path, with
	// the type each carries.
	keys := func(sd *StructureDefinition, path string) map[string]*elementKeyOf {
		out := map[string]*elementKeyOf{}
		for _, el := range sd.Children(path) {
			if !el.Choice() {
				typ := ""
				if len(el.Types) == 1 {
					typ = el.Types[0]
				}
				out[el.Name] = &elementKeyOf{el, typ}
				continue
			}
			for _, typ := range el.Types {
				out[strings.TrimSuffix(el.Name, "[x]")+upperFirst(typ)] = &elementKeyOf{el, typ}
			}
		}
		return out
	}
	// definitionOf finds the schema's definition of a path: the type's own
	// name for its root, else Type_Name (Type_Name1, ...) with the same
	// elements, as Claim.item.detail is Claim_Detail.
	definitionOf := func(sd *StructureDefinition, path string, k map[string]*elementKeyOf) string {
		if path == sd.Type {
			return sd.Type
		}
		prefix := sd.Type + "_" + upperFirst(path[strings.LastIndexByte(path, '.')+1:])
	candidates:
		for name, def := range schema.Definitions {
			if name != prefix && !(strings.HasPrefix(name, prefix) && strings.Trim(name[len(prefix):], "0123456789") == "") {
				continue
			}
			n := 0
			for prop := range def.Properties {
				switch {
				case k[prop] != nil:
					n++
				case prop[0] != '_' && prop != "modifierExtension": // the schema gives every backbone one
					continue candidates
				}
			}
			if n == len(k) {
				return name
			}
		}
		return ""
	}
	compared, siblings := 0, 0
	for name := range schema.Definitions {
		sd, err := p.Type(name)
		if errors.Is(err, ErrUnknownType) || err == nil && sd.Kind != "resource" && sd.Kind != "complex-type" {
			continue // a backbone element (Patient_Contact), compared with its type; or a primitive
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, el := range append([]*Element{{Path: sd.Type}}, sd.Elements...) {
			if el.Path != sd.Type && len(sd.Children(el.Path)) == 0 || el.ContentRef != "" {
				continue
			}
			k := keys(sd, el.Path)
			def := definitionOf(sd, el.Path, k)
			if def == "" {
				t.Errorf("%s: no definition in the schema", el.Path)
				continue
			}
			props := schema.Definitions[def].Properties
			for key, of := range k {
				_, inSchema := props["_"+key]
				if got := p.ExtensionSibling(of.el, of.typ); got != inSchema {
					t.Errorf("%s (%s) %s: the validator takes _%s: %v, the schema: %v", of.el.Path, def, key, key, got, inSchema)
				}
				compared++
				if inSchema {
					siblings++
				}
			}
		}
	}
	if compared < 10000 || siblings < 4000 {
		t.Errorf("compared %d elements, %d with a sibling: the schema or the package is not the R5 one", compared, siblings)
	}
	t.Logf("%d elements compared, %d with an extension sibling", compared, siblings)
}

type elementKeyOf struct {
	el  *Element
	typ string
}

// FuzzFastFormats: each format checked by hand matches what its regular
// expression matches.
func FuzzFastFormats(f *testing.F) {
	for _, s := range []string{"", "a", "a b", "a  b", " a", "a ", "a\tb", "a\nb", "http://x/y", "x y", "\u00a0", "\xff",
		"abc-DEF.09", strings.Repeat("a", 64), strings.Repeat("a", 65), "a_b", "a\t\tb", "\ta"} {
		f.Add(s)
	}
	res := map[string]*regexp.Regexp{}
	for expr := range fastFormats {
		res[expr] = regexp.MustCompile(`^(?:` + expr + `)$`)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for expr, match := range fastFormats {
			if got, want := match(s), res[expr].MatchString(s); got != want {
				t.Errorf("%s on %q: %v, the expression %v", expr, s, got, want)
			}
		}
	})
}

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
