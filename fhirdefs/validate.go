package fhirdefs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Issue is one problem of a resource: the FHIRPath of the element at
// fault and what is wrong with it.
type Issue struct {
	Expression string
	Message    string
}

func (i Issue) String() string { return i.Expression + ": " + i.Message }

// Validator checks resources against a package's definitions and, for
// required bindings, a terminology.
type Validator struct {
	defs  *Package
	terms *Terminology
	// r4 is the R4 import's check (NewR4Validator).
	r4 bool
}

// NewValidator returns a validator over the definitions; terms may be nil
// (bindings are then not checked).
func NewValidator(defs *Package, terms *Terminology) *Validator {
	return &Validator{defs: defs, terms: terms}
}

// NewR4Validator returns a validator of R4 resources over R4's
// definitions (OpenR4): the R4 import's check of its input, before the
// conversion. Beyond what NewValidator checks, it refuses a literal
// reference to a resource type its element does not name
// (Observation.performer refers to a Practitioner, not an Encounter), as
// Google's R4 parser did before it. The R5 gate does not: it refuses
// what the official R5 JSON Schema refuses, which does not check them
// (and five official R5 examples point to other types). R4's JSON
// differs from R5's in one place the validator meets: a canonical that
// names its target types may have its primitive extension sibling
// (StructureDefinition._baseDefinition). Bindings are not checked (no R4
// expansions package is installed); the R5 validation of the converted
// resource checks R5's.
func NewR4Validator(defs *Package) *Validator {
	return &Validator{defs: defs, r4: true}
}

// extensionSibling reports whether an element of type typ may have its
// primitive extension sibling _name (Package.ExtensionSibling, with R4
// JSON's rule for targeted canonicals).
func (v *Validator) extensionSibling(el *Element, typ string) bool {
	if v.r4 && typ == "canonical" && el.TargetedCanonical {
		return true
	}
	return v.defs.ExtensionSibling(el, typ)
}

// maxDepth bounds the nesting of a resource, so that a hostile one cannot
// exhaust the stack.
const maxDepth = 48

// maxIssues stops a hopeless resource early.
const maxIssues = 100

// walk carries one validation.
type walk struct {
	v      *Validator
	issues []Issue
}

func (w *walk) add(path, format string, args ...any) {
	if len(w.issues) < maxIssues {
		w.issues = append(w.issues, Issue{Expression: path, Message: fmt.Sprintf(format, args...)})
	}
}

// ElementMax returns the maximum cardinality of a resource type's
// top-level element (-1: unbounded), and false when the type has none.
func (v *Validator) ElementMax(resourceType, element string) (int, bool) {
	return v.defs.ElementMax(resourceType, element)
}

// Validate checks the JSON of one resource. It returns no issues for a
// valid resource; an error only for a fault of the definitions themselves.
func (v *Validator) Validate(data []byte) ([]Issue, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var value any
	if err := dec.Decode(&value); err != nil {
		return []Issue{{Expression: "", Message: "the resource is not valid JSON: " + err.Error()}}, nil
	}
	if dec.More() {
		return []Issue{{Expression: "", Message: "data follows the resource's JSON"}}, nil
	}
	obj, ok := value.(map[string]any)
	if !ok {
		return []Issue{{Expression: "", Message: "a resource is a JSON object"}}, nil
	}
	return v.ValidateObject(obj)
}

// ValidateObject checks a resource decoded with json.Decoder.UseNumber.
func (v *Validator) ValidateObject(obj map[string]any) ([]Issue, error) {
	w := &walk{v: v}
	if err := w.resource("", obj, 0); err != nil {
		return nil, err
	}
	return w.issues, nil
}

// resource validates a resource at path (empty for the root: its type).
func (w *walk) resource(path string, obj map[string]any, depth int) error {
	rt, _ := obj["resourceType"].(string)
	if path == "" {
		path = rt
	}
	if rt == "" {
		w.add(path, "resourceType is missing")
		return nil
	}
	sd, err := w.v.defs.Type(rt)
	if errors.Is(err, ErrUnknownType) || (err == nil && (sd.Kind != "resource" || sd.Abstract)) {
		w.add(path, "%q is not a resource type", rt)
		return nil
	}
	if err != nil {
		return err
	}
	return w.object(path, sd, rt, obj, depth+1, true)
}

// object validates the elements of an object against the children of a
// definition path.
func (w *walk) object(path string, sd *StructureDefinition, defPath string, obj map[string]any, depth int, isResource bool) error {
	if depth > maxDepth {
		w.add(path, "nested too deeply")
		return nil
	}
	children := sd.Children(defPath)
	if len(children) == 0 {
		w.add(path, "the definition of %s has no elements", defPath)
		return nil
	}
	seen := map[string]bool{}
	if isResource {
		seen["resourceType"] = true
	}
	for _, el := range children {
		keys := w.keysOf(el, obj)
		if len(keys) > 1 {
			names := make([]string, len(keys))
			for i, k := range keys {
				names[i] = k.name
			}
			w.add(path+"."+el.Name, "only one of %s may be given", strings.Join(names, ", "))
		}
		for _, key := range keys {
			seen[key.name], seen["_"+key.name] = true, true
			ext, hasExt := obj["_"+key.name]
			if hasExt && !w.v.extensionSibling(el, key.typ) {
				w.add(path+"."+key.name, "%q is not allowed: %s has no primitive extension sibling in R5 JSON", "_"+key.name, key.name)
				ext = nil
			}
			if err := w.element(path+"."+key.name, sd, el, key.typ, obj[key.name], ext, depth); err != nil {
				return err
			}
		}
	}
	for key := range obj {
		if !seen[key] {
			w.add(path+"."+strings.TrimPrefix(key, "_"), "%q is not an element of %s", key, defPath)
		}
	}
	for _, el := range children {
		if el.Min > 0 && len(w.keysOf(el, obj)) == 0 {
			w.add(path+"."+el.Name, "is required (min %d)", el.Min)
		}
	}
	return nil
}

// elementKey is a key of the JSON object that an element covers, with the
// type it carries (for a choice, the one its suffix names).
type elementKey struct {
	name, typ string
}

// keysOf returns the keys of obj an element covers: its name (or the name
// of its extension sibling _name), or for a choice value[x] each valueType.
func (w *walk) keysOf(el *Element, obj map[string]any) []elementKey {
	if !el.Choice() {
		_, v := obj[el.Name]
		_, ext := obj["_"+el.Name]
		if !v && !ext {
			return nil
		}
		typ := ""
		if len(el.Types) == 1 {
			typ = el.Types[0]
		}
		return []elementKey{{el.Name, typ}}
	}
	base := strings.TrimSuffix(el.Name, "[x]")
	var keys []elementKey
	for _, t := range el.Types {
		name := base + upperFirst(t)
		_, v := obj[name]
		_, ext := obj["_"+name]
		if v || ext {
			keys = append(keys, elementKey{name, t})
		}
	}
	return keys
}

func upperFirst(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[n:]
}

// element validates one element's value (and its primitive extension
// sibling): cardinality, then each item by type.
func (w *walk) element(path string, sd *StructureDefinition, el *Element, typ string, value, ext any, depth int) error {
	items, isArray := value.([]any)
	if value != nil {
		switch {
		case el.Max == 1 && isArray:
			w.add(path, "is a single value, not an array")
			return nil
		case el.Max != 1 && !isArray:
			w.add(path, "is an array (max %s)", maxString(el.Max))
			return nil
		}
	}
	if !isArray {
		items = []any{value}
	}
	if isArray {
		if len(items) == 0 {
			w.add(path, "an empty array is not allowed")
		}
		if el.Max > 1 && len(items) > el.Max {
			w.add(path, "has %d items; at most %d are allowed", len(items), el.Max)
		}
	}
	if len(w.issues) >= maxIssues {
		return nil
	}
	for i, item := range items {
		p := path
		if isArray {
			p = fmt.Sprintf("%s[%d]", path, i)
		}
		if item == nil {
			if value != nil {
				w.add(p, "null is not a value")
			}
			continue
		}
		if err := w.value(p, sd, el, typ, item, depth); err != nil {
			return err
		}
	}
	if ext != nil {
		w.primitiveExtensions(path, ext, value != nil, isArray, len(items))
	}
	return nil
}

func maxString(n int) string {
	if n < 0 {
		return "*"
	}
	return strconv.Itoa(n)
}

// primitiveExtensions checks the _element sibling of a primitive: an
// object (or an array of objects or nulls, parallel to the values) with
// only id and extension.
func (w *walk) primitiveExtensions(path string, ext any, hasValue, isArray bool, n int) {
	check := func(p string, v any) {
		if v == nil {
			return
		}
		m, ok := v.(map[string]any)
		if !ok {
			w.add(p, "a primitive's extension sibling is an object")
			return
		}
		for k := range m {
			if k != "id" && k != "extension" {
				w.add(p, "%q is not allowed beside a primitive value (id, extension)", k)
			}
		}
	}
	if arr, ok := ext.([]any); ok {
		// Extensions may stand without values; beside values they line up.
		if hasValue && (!isArray || len(arr) != n) {
			w.add(path, "the extension sibling does not line up with the values")
			return
		}
		for i, v := range arr {
			check(fmt.Sprintf("%s[%d]", path, i), v)
		}
		return
	}
	check(path, ext)
}

// value validates one value of an element by its type.
func (w *walk) value(path string, sd *StructureDefinition, el *Element, typ string, value any, depth int) error {
	switch {
	case el.ContentRef != "":
		obj, ok := value.(map[string]any)
		if !ok {
			w.add(path, "is an object")
			return nil
		}
		return w.object(path, sd, el.ContentRef, obj, depth+1, false)
	case typ == "" && len(el.Types) > 1:
		w.add(path, "the type of this element cannot be told")
		return nil
	case strings.HasPrefix(typ, "http://hl7.org/fhirpath/System."):
		return w.systemValue(path, typ, value)
	case typ == "BackboneElement" || typ == "Element" && len(sd.Children(el.Path)) > 0:
		obj, ok := value.(map[string]any)
		if !ok {
			w.add(path, "is an object")
			return nil
		}
		return w.object(path, sd, el.Path, obj, depth+1, false)
	case typ == "Resource":
		obj, ok := value.(map[string]any)
		if !ok {
			w.add(path, "is a resource (an object with resourceType)")
			return nil
		}
		return w.resource(path, obj, depth+1)
	}
	tsd, err := w.v.defs.Type(typ)
	if errors.Is(err, ErrUnknownType) {
		w.add(path, "has the unknown type %s", typ)
		return nil
	}
	if err != nil {
		return err
	}
	if tsd.Kind == "primitive-type" {
		w.primitive(path, tsd, value)
	} else {
		obj, ok := value.(map[string]any)
		if !ok {
			w.add(path, "is a %s (an object)", typ)
			return nil
		}
		if err := w.object(path, tsd, tsd.Type, obj, depth+1, false); err != nil {
			return err
		}
		if w.v.r4 && typ == "Reference" && len(el.Targets) > 0 {
			w.referenceTarget(path, el.Targets, obj)
		}
	}
	if el.Binding != nil && el.Binding.Strength == "required" {
		w.binding(path, el.Binding.ValueSet, typ, value)
	}
	return nil
}

// referenceTarget checks that a literal reference (Patient/123, an
// absolute URL ending in Patient/123, either with /_history/<version>)
// names a resource type among the element's targets. References to
// contained resources (#p1), URNs (urn:uuid:...) and type segments that
// name no resource type are left alone: what they point to is not told
// by their text.
func (w *walk) referenceTarget(path string, targets []string, obj map[string]any) {
	ref, _ := obj["reference"].(string)
	if ref == "" || strings.HasPrefix(ref, "#") || strings.HasPrefix(ref, "urn:") {
		return
	}
	if i := strings.Index(ref, "/_history/"); i >= 0 {
		ref = ref[:i]
	}
	i := strings.LastIndexByte(ref, '/')
	if i <= 0 {
		return
	}
	rt := ref[strings.LastIndexByte(ref[:i], '/')+1 : i]
	if slices.Contains(targets, rt) {
		return
	}
	if sd, err := w.v.defs.Type(rt); err != nil || sd.Kind != "resource" {
		return
	}
	w.add(path+".reference", "refers to a %s; this element refers to %s", rt, strings.Join(targets, ", "))
}

// systemValue checks the FHIRPath System types that definitions use for
// ids and extension URLs: strings.
func (w *walk) systemValue(path, typ string, value any) error {
	switch strings.TrimPrefix(typ, "http://hl7.org/fhirpath/System.") {
	case "String":
		s, ok := value.(string)
		if !ok || s == "" {
			w.add(path, "is a non-empty string")
		}
	case "Boolean":
		if _, ok := value.(bool); !ok {
			w.add(path, "is true or false")
		}
	default:
		if _, ok := value.(string); !ok {
			w.add(path, "is a string")
		}
	}
	return nil
}

// jsonNumberTypes are the primitives written as JSON numbers.
var jsonNumberTypes = map[string]bool{"integer": true, "positiveInt": true, "unsignedInt": true, "decimal": true}

// primitive checks a primitive value's JSON kind and format.
func (w *walk) primitive(path string, sd *StructureDefinition, value any) {
	t := sd.Type
	switch {
	case t == "boolean":
		if _, ok := value.(bool); !ok {
			w.add(path, "is true or false, not %s", describe(value))
		}
		return
	case jsonNumberTypes[t]:
		n, ok := value.(json.Number)
		if !ok {
			w.add(path, "is a number (%s), not %s", t, describe(value))
			return
		}
		text := n.String()
		if sd.Regex != nil && !sd.Regex.MatchString(text) {
			w.add(path, "%s is not a valid %s", text, t)
			return
		}
		if t != "decimal" {
			i, err := strconv.ParseInt(text, 10, 64)
			switch {
			case err != nil || i > math.MaxInt32 || i < math.MinInt32:
				w.add(path, "%s is out of the range of a 32-bit %s", text, t)
			case t == "positiveInt" && i < 1:
				w.add(path, "%s is not positive", text)
			case t == "unsignedInt" && i < 0:
				w.add(path, "%s is negative", text)
			}
		}
		return
	}
	s, ok := value.(string)
	if !ok {
		w.add(path, "is a string (%s), not %s", t, describe(value))
		return
	}
	if strings.TrimSpace(s) == "" {
		w.add(path, "an empty %s is not allowed", t)
		return
	}
	if len(s) > 1<<20 && t != "base64Binary" {
		w.add(path, "is longer than 1 MiB")
		return
	}
	if sd.Regex != nil && t != "string" && t != "markdown" && !sd.Regex.MatchString(s) {
		w.add(path, "%q is not a valid %s", truncate(s), t)
		return
	}
	if (t == "date" || t == "dateTime" || t == "instant") && !realDate(s) {
		w.add(path, "%q is not a calendar date", truncate(s))
	}
	if t == "dateTime" && len(s) > 10 && !hasOffset(s) {
		w.add(path, "%q has a time but no time zone (Z or +hh:mm)", truncate(s))
	}
	if t == "xhtml" && !strings.HasPrefix(strings.TrimSpace(s), "<div") {
		w.add(path, "narrative xhtml is a <div> element")
	}
}

// realDate checks the day of a date that the format admits (2023-02-30).
func realDate(s string) bool {
	if len(s) < 10 {
		return true
	}
	_, err := time.Parse(time.DateOnly, s[:10])
	return err == nil
}

// hasOffset reports whether a dateTime with a time ends with Z or an offset.
func hasOffset(s string) bool {
	if strings.HasSuffix(s, "Z") {
		return true
	}
	return len(s) >= 6 && (s[len(s)-6] == '+' || s[len(s)-6] == '-') && s[len(s)-3] == ':'
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

func describe(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return "null"
}

// binding checks a value of a required binding against its value set,
// when the terminology enumerates it.
func (w *walk) binding(path, valueSet, typ string, value any) {
	check := func(_, system, code string) (bool, bool) {
		return w.v.terms.Contains(valueSet, system, code)
	}
	switch typ {
	case "code":
		if s, ok := value.(string); ok {
			if in, known := check(path, "", s); known && !in {
				w.add(path, "%q is not in the required value set %s", s, valueSet)
			}
		}
	case "Coding":
		if m, ok := value.(map[string]any); ok {
			system, _ := m["system"].(string)
			code, _ := m["code"].(string)
			if code != "" {
				if in, known := check(path, system, code); known && !in {
					w.add(path, "%s|%s is not in the required value set %s", system, code, valueSet)
				}
			}
		}
	case "CodeableConcept":
		m, ok := value.(map[string]any)
		if !ok {
			return
		}
		codings, _ := m["coding"].([]any)
		if len(codings) == 0 {
			return
		}
		for _, c := range codings {
			cm, _ := c.(map[string]any)
			system, _ := cm["system"].(string)
			code, _ := cm["code"].(string)
			in, known := check(path, system, code)
			if !known || in {
				return
			}
		}
		w.add(path, "no coding is in the required value set %s", valueSet)
	}
}

// OpenR4 opens the definitions of FHIR R4 (4.0.1) where scripts/setup
// put the FHIR packages: the R4 core StructureDefinitions, with their
// snapshots, that hl7.fhir.r4.examples carries (the npm registry has no
// hl7.fhir.r4.core). R4 input is typed by R4 itself, not by R4B: R4B
// revised Evidence, EvidenceVariable and Subscription and replaced the
// MedicinalProduct family and SubstanceSpecification.
func OpenR4(packagesDir string) (*Package, error) {
	return OpenPackage(filepath.Join(packagesDir, "hl7.fhir.r4.examples", "package"))
}

// OpenR5 opens the R5 definitions and expansions where scripts/setup put
// the FHIR packages (FHIR_PACKAGES_DIR) and returns the R5 package and a
// validator over both.
func OpenR5(packagesDir string) (*Package, *Validator, error) {
	defs, err := OpenPackage(filepath.Join(packagesDir, "hl7.fhir.r5.core", "package"))
	if err != nil {
		return nil, nil, err
	}
	terms, err := OpenTerminology(filepath.Join(packagesDir, "hl7.fhir.r5.expansions", "package"))
	if err != nil {
		return nil, nil, fmt.Errorf("FHIR expansions package: %w (run scripts/setup)", err)
	}
	return defs, NewValidator(defs, terms), nil
}
