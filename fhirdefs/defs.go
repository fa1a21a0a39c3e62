package fhirdefs

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// Element is one element of a StructureDefinition's snapshot.
type Element struct {
	Path string // Observation.value[x]
	Name string // value[x]
	Min  int
	Max  int // -1: unbounded
	// Types are the type codes; System types (FHIRPath System.String) keep
	// their URL.
	Types []string
	// ContentRef is the path whose definition a recursive element reuses
	// (Questionnaire.item.item refers to #Questionnaire.item).
	ContentRef string
	Binding    *Binding
	// TargetedCanonical is set for a canonical that names the types it
	// may point to (canonical(PlanDefinition)).
	TargetedCanonical bool
	// Targets are the resource types a Reference element may point to,
	// from its targetProfile (Reference(Patient|Group): Patient, Group);
	// nil when it may point to any (Reference(Resource), or none named).
	Targets []string
}

// Choice reports whether the element is a choice of types (value[x]).
func (e *Element) Choice() bool { return strings.HasSuffix(e.Name, "[x]") }

// Binding is an element's terminology binding.
type Binding struct {
	Strength string // required, extensible, preferred, example
	ValueSet string // canonical, without a |version
}

// StructureDefinition is a type's definition: its snapshot elements,
// indexed by path and by parent.
type StructureDefinition struct {
	Type     string
	Kind     string // resource, complex-type, primitive-type, logical
	Abstract bool
	// Regex is the format of a primitive type's value (anchored).
	Regex *regexp.Regexp
	// match checks the commonest formats by hand (fastFormats), nil for
	// the others.
	match    func(string) bool
	Elements []*Element
	byPath   map[string]*Element
	children map[string][]*Element
}

// Element returns the element at a path of the definition.
func (sd *StructureDefinition) Element(path string) (*Element, bool) {
	e, ok := sd.byPath[path]
	return e, ok
}

// Children returns the elements directly below a path.
func (sd *StructureDefinition) Children(path string) []*Element { return sd.children[path] }

// Package is a FHIR npm package's definitions, read on demand.
type Package struct {
	dir string

	// files are the types the package has a StructureDefinition file of,
	// listed once: a name from a request that is not among them is
	// refused without a file read, and never cached.
	files map[string]bool

	mu           sync.RWMutex                    // reads of loaded definitions share it
	defs         map[string]*StructureDefinition // by type; nil entries: a file that defines no base type
	searchParams map[string]*SearchParam         // by Type.code; nil until first use
	// searchParamsByType lists each type's, sorted by code.
	searchParamsByType map[string][]*SearchParam
}

// OpenPackage opens a package directory (the one holding package.json and
// the StructureDefinition files, such as .../hl7.fhir.r5.core/package).
func OpenPackage(dir string) (*Package, error) {
	if _, err := os.Stat(filepath.Join(dir, "package.json")); err != nil {
		return nil, fmt.Errorf("FHIR package at %s: %w (run scripts/setup)", dir, err)
	}
	names, err := filepath.Glob(filepath.Join(dir, "StructureDefinition-*.json"))
	if err != nil {
		return nil, err
	}
	files := make(map[string]bool, len(names))
	for _, n := range names {
		files[strings.TrimSuffix(strings.TrimPrefix(filepath.Base(n), "StructureDefinition-"), ".json")] = true
	}
	return &Package{dir: dir, files: files, defs: map[string]*StructureDefinition{}}, nil
}

// ElementMax returns the maximum cardinality of a type's element (a
// direct child, such as identifier; -1: unbounded), and false when the
// type has no such element.
func (p *Package) ElementMax(resourceType, element string) (int, bool) {
	sd, err := p.Type(resourceType)
	if err != nil {
		return 0, false
	}
	e, ok := sd.Element(resourceType + "." + element)
	if !ok {
		return 0, false
	}
	return e.Max, true
}

// ErrUnknownType is returned for a type the package does not define.
var ErrUnknownType = errors.New("unknown type")

// Type returns the base definition of a type (its specialization, not a
// profile). Definitions are read on first use and kept.
func (p *Package) Type(name string) (*StructureDefinition, error) {
	if !p.files[name] {
		return nil, fmt.Errorf("%w %q", ErrUnknownType, name)
	}
	p.mu.RLock()
	sd, loaded := p.defs[name]
	p.mu.RUnlock()
	if !loaded {
		p.mu.Lock()
		defer p.mu.Unlock()
		sd, loaded = p.defs[name]
	}
	if loaded {
		if sd == nil {
			return nil, fmt.Errorf("%w %q", ErrUnknownType, name)
		}
		return sd, nil
	}
	sd, err := p.load(name)
	if errors.Is(err, ErrUnknownType) {
		p.defs[name] = nil
	}
	if err != nil {
		return nil, err
	}
	p.defs[name] = sd
	return sd, nil
}

var typeName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*$`)

// sdFile is the JSON of a StructureDefinition, as much as is read.
type sdFile struct {
	ResourceType string `json:"resourceType"`
	Type         string `json:"type"`
	Kind         string `json:"kind"`
	Abstract     bool   `json:"abstract"`
	Derivation   string `json:"derivation"`
	Snapshot     struct {
		Element []struct {
			Path             string `json:"path"`
			Min              int    `json:"min"`
			Max              string `json:"max"`
			ContentReference string `json:"contentReference"`
			Type             []struct {
				Code          string   `json:"code"`
				TargetProfile []string `json:"targetProfile"`
				Extension     []struct {
					URL         string `json:"url"`
					ValueString string `json:"valueString"`
					ValueURL    string `json:"valueUrl"`
				} `json:"extension"`
			} `json:"type"`
			Binding *struct {
				Strength string `json:"strength"`
				ValueSet string `json:"valueSet"`
			} `json:"binding"`
		} `json:"element"`
	} `json:"snapshot"`
}

func (p *Package) load(name string) (*StructureDefinition, error) {
	if !typeName.MatchString(name) {
		return nil, fmt.Errorf("%w %q", ErrUnknownType, name)
	}
	data, err := os.ReadFile(filepath.Join(p.dir, "StructureDefinition-"+name+".json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w %q", ErrUnknownType, name)
	}
	if err != nil {
		return nil, err
	}
	var f sdFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("StructureDefinition-%s.json: %w", name, err)
	}
	if f.ResourceType != "StructureDefinition" || f.Type != name || f.Derivation == "constraint" {
		return nil, fmt.Errorf("%w %q", ErrUnknownType, name)
	}
	sd := &StructureDefinition{Type: f.Type, Kind: f.Kind, Abstract: f.Abstract,
		byPath: map[string]*Element{}, children: map[string][]*Element{}}
	for _, raw := range f.Snapshot.Element {
		e := &Element{Path: raw.Path, Min: raw.Min, Max: -1, ContentRef: strings.TrimPrefix(raw.ContentReference, "#")}
		if i := strings.LastIndexByte(raw.Path, '.'); i >= 0 {
			e.Name = raw.Path[i+1:]
			sd.children[raw.Path[:i]] = append(sd.children[raw.Path[:i]], e)
		} else {
			e.Name = raw.Path
		}
		if raw.Max != "*" {
			if n, err := strconv.Atoi(raw.Max); err == nil {
				e.Max = n
			}
		}
		for _, t := range raw.Type {
			code := t.Code
			for _, ext := range t.Extension {
				// Resource.id, Element.id and Extension.url are typed by
				// FHIRPath System types with their FHIR type beside.
				if strings.HasSuffix(ext.URL, "/structuredefinition-fhir-type") && ext.ValueURL != "" {
					code = ext.ValueURL
				}
			}
			if e.Name == "id" && code == "id" && !(f.Kind == "resource" && strings.Count(raw.Path, ".") == 1) {
				// Element.id only identifies an element within its resource
				// (ElementDefinition ids hold "value[x]" and ":"): a string,
				// as R4 typed it; only a resource's own id is an id.
				code = "string"
			}
			e.Types = append(e.Types, code)
			e.TargetedCanonical = e.TargetedCanonical || code == "canonical" && len(t.TargetProfile) > 0
			if code == "Reference" {
				e.Targets = referenceTargets(t.TargetProfile)
			}
			if f.Kind == "primitive-type" && raw.Path == name+".value" {
				for _, ext := range t.Extension {
					if strings.HasSuffix(ext.URL, "/regex") {
						sd.Regex = primitiveRegex(name, ext.ValueString)
						sd.match = fastFormats[ext.ValueString]
					}
				}
			}
		}
		if raw.Binding != nil && raw.Binding.ValueSet != "" {
			vs, _, _ := strings.Cut(raw.Binding.ValueSet, "|")
			e.Binding = &Binding{Strength: raw.Binding.Strength, ValueSet: vs}
		}
		sd.Elements = append(sd.Elements, e)
		sd.byPath[raw.Path] = e
	}
	return sd, nil
}

// referenceTargets are the resource types that a Reference's target
// profiles name (http://hl7.org/fhir/StructureDefinition/Patient:
// Patient); nil when one of them is Resource, which any type matches.
func referenceTargets(profiles []string) []string {
	var types []string
	for _, p := range profiles {
		t := p[strings.LastIndexByte(p, '/')+1:]
		if t == "Resource" {
			return nil
		}
		types = append(types, t)
	}
	return types
}

// Matches reports whether a primitive value has the type's format (true
// for a type without one).
func (sd *StructureDefinition) Matches(s string) bool {
	if sd.match != nil {
		return sd.match(s)
	}
	return sd.Regex == nil || sd.Regex.MatchString(s)
}

// fastFormats are the primitive formats, as the packages write them,
// that are checked by hand: uri, url and canonical, R4's and R5's code,
// and id, most of the values of a resource. Each matches what its
// regular expression matches (FuzzFastFormats), several times faster.
// \s is Go's (and Perl's) [\t\n\f\r ]: bytes that never occur inside a
// multi-byte UTF-8 sequence, so bytes are compared, not runes.
var fastFormats = map[string]func(string) bool{
	`\S*`:                   func(s string) bool { return !strings.ContainsAny(s, spaces) },
	`[^\s]+( [^\s]+)*`:      func(s string) bool { return words(s, " ") },
	`[^\s]+(\s[^\s]+)*`:     func(s string) bool { return words(s, spaces) },
	`[A-Za-z0-9\-\.]{1,64}`: isID,
}

// spaces are the characters of \s.
const spaces = "\t\n\f\r "

// words reports whether s is words of non-space characters, each two
// separated by one character of sep (a subset of spaces).
func words(s, sep string) bool {
	if s == "" {
		return false
	}
	prevSep := true // at the start, as after a separator
	for i := 0; i < len(s); i++ {
		c := s[i]
		if strings.IndexByte(spaces, c) < 0 {
			prevSep = false
			continue
		}
		if prevSep || strings.IndexByte(sep, c) < 0 {
			return false
		}
		prevSep = true
	}
	return !prevSep
}

// isID reports whether s is a FHIR id: 1 to 64 of A-Z, a-z, 0-9, - and .
func isID(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// primitiveRegex compiles a primitive type's format, anchored. A decimal
// is any JSON number, with as many digits as it is sent with: R4's
// expression bounds none, and the R5 package's (at most 18 integer and 17
// fraction digits, with a stray brace in its exponent) is one the official
// R5 JSON Schema does not apply to numbers. EHRs send more (Synthea's
// 0.0006122107609236168), and a resource is kept with its decimals' text
// as sent; the validator still refuses what a 64-bit float cannot hold
// (1e999999), which search could not index.
func primitiveRegex(name, expr string) *regexp.Regexp {
	if name == "decimal" {
		expr = `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
	}
	expr = strings.TrimSuffix(strings.TrimPrefix(expr, "^"), "$")
	re, err := regexp.Compile(`^(?:` + expr + `)$`)
	if err != nil {
		return nil
	}
	return re
}

// ExtensionSibling reports whether an element of type typ may have the
// sibling _name that carries a primitive's id and extensions, as the
// official R5 JSON Schema (fhir.schema.json) allows it: only beside a
// primitive type, and never beside a resource's or an element's id, nor
// beside Narrative.div (xhtml) or a canonical that names its target
// types (canonical(PlanDefinition)) and is not a choice: the schema's
// generator writes those as it writes References, without the sibling
// (an untargeted canonical, and valueCanonical of a choice, keep theirs).
// The validator refuses a sibling elsewhere, and the converter writes none
// elsewhere, so that a stored resource never holds what other R5 tools
// reject.
func (p *Package) ExtensionSibling(el *Element, typ string) bool {
	if el.Name == "id" || !el.Choice() && (typ == "xhtml" || typ == "canonical" && el.TargetedCanonical) {
		return false
	}
	sd, err := p.Type(typ)
	return err == nil && sd.Kind == "primitive-type"
}
