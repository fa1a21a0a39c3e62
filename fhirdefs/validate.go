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
	"sync"
	"sync/atomic"
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
	// tables holds an *objectDef per defKey: how each definition path's
	// objects are read, resolved on first use (nil: no elements there).
	tables sync.Map
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

// walk carries one validation. path is the FHIRPath of the value being
// checked, built in place (appended to and cut back as the walk goes
// down and up), made a string only for an issue.
type walk struct {
	v      *Validator
	issues []Issue
	path   []byte
	// spaced, when not nil, takes the paths of base64Binary values with
	// whitespace among their characters, which are then not issues
	// (ValidateSpacedBase64).
	spaced *[]string
}

// add records an issue at the current path.
func (w *walk) add(format string, args ...any) {
	if len(w.issues) < maxIssues {
		w.issues = append(w.issues, Issue{Expression: string(w.path), Message: fmt.Sprintf(format, args...)})
	}
}

// member moves the path down to a member and returns where to cut it back.
func (w *walk) member(name string) int {
	n := len(w.path)
	w.path = append(append(w.path, '.'), name...)
	return n
}

// item moves the path down to an array item and returns where to cut it
// back.
func (w *walk) item(i int) int {
	n := len(w.path)
	w.path = append(strconv.AppendInt(append(w.path, '['), int64(i), 10), ']')
	return n
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
	issues, _, err := v.validate(obj, false)
	return issues, err
}

// ValidateSpacedBase64 is ValidateObject for a resource the caller stores
// with its Base64 compacted: a base64Binary value with whitespace among
// its characters (R4's format allowed it, as MIME-style line breaks) is
// not an issue when, without it (CompactBase64), it is valid R5. spaced
// are the paths of those values (as issues name elements:
// DocumentReference.content[0].attachment.data), for the caller to
// replace with their compact form. The R4 import and an R5 create so
// follow one rule: whitespace in Base64 is taken, and stored without.
func (v *Validator) ValidateSpacedBase64(obj map[string]any) (issues []Issue, spaced []string, err error) {
	return v.validate(obj, true)
}

func (v *Validator) validate(obj map[string]any, takeSpaced bool) ([]Issue, []string, error) {
	w := &walk{v: v, path: make([]byte, 0, 128)}
	var spaced []string
	if takeSpaced {
		w.spaced = &spaced
	}
	if err := w.resource(obj, 0); err != nil {
		return nil, nil, err
	}
	return w.issues, spaced, nil
}

// Base64Whitespace are the characters FHIR's base64Binary may hold
// between its Base64 characters, before R5 (R4's format: \s), which
// CompactBase64 removes.
const Base64Whitespace = " \t\r\n"

// CompactBase64 is a base64Binary's value without whitespace: the same
// bytes, in the form R5's format requires.
func CompactBase64(s string) string {
	if !strings.ContainsAny(s, Base64Whitespace) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if strings.ContainsRune(Base64Whitespace, r) {
			return -1
		}
		return r
	}, s)
}

// resource validates a resource at the current path (empty for the root:
// it becomes the resource's type).
func (w *walk) resource(obj map[string]any, depth int) error {
	rt, _ := obj["resourceType"].(string)
	if len(w.path) == 0 {
		w.path = append(w.path, rt...)
	}
	if rt == "" {
		w.add("resourceType is missing")
		return nil
	}
	sd, err := w.v.defs.Type(rt)
	if errors.Is(err, ErrUnknownType) || (err == nil && (sd.Kind != "resource" || sd.Abstract)) {
		w.add("%q is not a resource type", rt)
		return nil
	}
	if err != nil {
		return err
	}
	return w.object(nil, sd, rt, obj, depth+1, true)
}

// objectDef is how the objects at one path of a definition are read:
// its elements in the definition's order, each with the JSON keys it
// covers, and every such key, resolved once per validator (objectDef).
type objectDef struct {
	elems    []elemDef
	keys     map[string]keyRef // a value's name and its extension sibling's
	required []int             // the elements of min > 0
}

// elemDef is one element and the keys it covers: its name, or for a
// choice value[x] one per type (valueQuantity, ...), in the definition's
// order.
type elemDef struct {
	el   *Element
	keys []keyDef
}

// keyDef is a JSON key of an element and the type it carries.
type keyDef struct {
	name, ext string // valueQuantity, _valueQuantity
	typ       string // "" when the element's type cannot be told
	// sibling is whether ext is allowed (Validator.extensionSibling).
	sibling bool
	// def is typ's definition, or why there is none (a System type, a
	// type the package does not define).
	def    *StructureDefinition
	defErr error
	// objects is the table of the objects this key's values are read
	// by (walk.value: a complex type's, a backbone element's or a
	// contentReference's), once objectDef has kept it: the walk then
	// skips the lookup in Validator.tables, a hash of the definition
	// path per object, a tenth of a validation. Set at most once, to what
	// objectDef returns for the key every time, so the walk sees the same
	// table either way.
	objects *atomic.Pointer[objectDef]
}

// keyRef places a JSON key: its element and key in objectDef.elems, and
// whether it is the extension sibling.
type keyRef struct {
	elem, key int
	ext       bool
}

// defKey names the objects of a definition path.
type defKey struct {
	sd   *StructureDefinition
	path string
}

// objectDef returns the table of a definition path (nil when the
// definition has no elements there), built on first use, and whether it
// is kept for good (false: a definition could not be read, and it is
// built again next time).
func (v *Validator) objectDef(sd *StructureDefinition, path string) (*objectDef, bool) {
	if od, ok := v.tables.Load(defKey{sd, path}); ok {
		return od.(*objectDef), true
	}
	children := sd.Children(path)
	var od *objectDef
	kept := true // false when a definition could not be read: try again next time
	if len(children) > 0 {
		od = &objectDef{keys: map[string]keyRef{}}
		for i, el := range children {
			e := elemDef{el: el}
			if !el.Choice() {
				typ := ""
				if len(el.Types) == 1 {
					typ = el.Types[0]
				}
				if el.Name == "id" && sd.Kind == "resource" && path == sd.Type {
					// R4's snapshots type Resource.id as a string; its
					// format is an id's ([A-Za-z0-9\-.]{1,64}) in R4 as
					// in R5 (where the snapshots say so).
					typ = "id"
				}
				e.keys = []keyDef{v.keyDef(el, el.Name, typ)}
			} else {
				base := strings.TrimSuffix(el.Name, "[x]")
				for _, t := range el.Types {
					e.keys = append(e.keys, v.keyDef(el, base+upperFirst(t), t))
				}
			}
			for k, kd := range e.keys {
				kept = kept && (kd.defErr == nil || errors.Is(kd.defErr, ErrUnknownType))
				od.keys[kd.name] = keyRef{elem: i, key: k}
				od.keys[kd.ext] = keyRef{elem: i, key: k, ext: true}
			}
			if el.Min > 0 {
				od.required = append(od.required, i)
			}
			od.elems = append(od.elems, e)
		}
	}
	if !kept {
		return od, false
	}
	actual, _ := v.tables.LoadOrStore(defKey{sd, path}, od)
	return actual.(*objectDef), true
}

func (v *Validator) keyDef(el *Element, name, typ string) keyDef {
	kd := keyDef{name: name, ext: "_" + name, typ: typ, sibling: v.extensionSibling(el, typ), objects: new(atomic.Pointer[objectDef])}
	kd.def, kd.defErr = v.defs.Type(typ)
	return kd
}

func upperFirst(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[n:]
}

// member is a key of an object being validated, placed.
type present struct {
	keyRef
	value any
}

// object validates the elements of an object against the children of a
// definition path: in the definition's order, then the keys no element
// covers (by name), then the required elements missing.
// kd is the key whose value obj is (nil for a resource): its table is
// kept in it once found.
func (w *walk) object(kd *keyDef, sd *StructureDefinition, defPath string, obj map[string]any, depth int, isResource bool) error {
	if depth > maxDepth {
		w.add("nested too deeply")
		return nil
	}
	var od *objectDef
	if kd != nil {
		od = kd.objects.Load()
	}
	if od == nil {
		var kept bool
		od, kept = w.v.objectDef(sd, defPath)
		if kd != nil && kept && od != nil {
			kd.objects.Store(od)
		}
	}
	if od == nil {
		w.add("the definition of %s has no elements", defPath)
		return nil
	}
	if kd != nil && !w.v.r4 && len(obj) == 0 {
		// The value of a complex element (kd is set): FHIR's invariant
		// ele-1 ("All FHIR elements must have a @value or children")
		// refuses it; stored, "name": [{}] would be a name that says
		// nothing. (ele-1 does not count an id as a child, but an
		// official R5 example, Medication-med0301, has an identifier of
		// only an id: an id alone stands.)
		w.add("an empty object is not allowed (ele-1: an element has a value or children)")
		return nil
	}
	var buf [32]present
	found := buf[:0]
	var unknown []string
	for k, v := range obj {
		if ref, ok := od.keys[k]; ok {
			found = append(found, present{ref, v})
		} else if k != "resourceType" || !isResource {
			unknown = append(unknown, k)
		}
	}
	slices.SortFunc(found, func(a, b present) int {
		if a.elem != b.elem {
			return a.elem - b.elem
		}
		if a.key != b.key {
			return a.key - b.key
		}
		if a.ext == b.ext {
			return 0
		} else if b.ext {
			return -1
		}
		return 1
	})
	for i := 0; i < len(found); {
		e := &od.elems[found[i].elem]
		j := i + 1
		for j < len(found) && found[j].elem == found[i].elem {
			j++
		}
		if found[j-1].key != found[i].key { // two keys of one choice
			var names []string
			for _, f := range found[i:j] {
				if name := e.keys[f.key].name; !slices.Contains(names, name) {
					names = append(names, name)
				}
			}
			n := w.member(e.el.Name)
			w.add("only one of %s may be given", strings.Join(names, ", "))
			w.path = w.path[:n]
		}
		for i < j {
			kd := &e.keys[found[i].key]
			var value, ext any
			hasValue, hasExt := false, false
			for k := i; k < j && found[k].key == found[i].key; k++ {
				if found[k].ext {
					ext, hasExt = found[k].value, true
				} else {
					value, hasValue = found[k].value, true
				}
				i = k + 1
			}
			n := w.member(kd.name)
			if (hasValue && value == nil) || (hasExt && ext == nil) {
				// FHIR JSON has no null members: an element without a
				// value is left out. Null stands only in an array, for a
				// value or extension that its aligned partner lacks.
				w.add("null is not a value: leave the element out")
			}
			if hasExt && !kd.sibling {
				w.add("%q is not allowed: %s has no primitive extension sibling in R5 JSON", kd.ext, kd.name)
				ext = nil
			}
			err := w.element(sd, e.el, kd, value, ext, depth)
			w.path = w.path[:n]
			if err != nil {
				return err
			}
		}
	}
	slices.Sort(unknown)
	for _, k := range unknown {
		n := w.member(strings.TrimPrefix(k, "_"))
		w.add("%q is not an element of %s", k, defPath)
		w.path = w.path[:n]
	}
	for _, r := range od.required {
		if !slices.ContainsFunc(found, func(f present) bool { return f.elem == r }) {
			el := od.elems[r].el
			n := w.member(el.Name)
			w.add("is required (min %d)", el.Min)
			w.path = w.path[:n]
		}
	}
	return nil
}

// element validates one element's value (and its primitive extension
// sibling): cardinality, then each item by type.
func (w *walk) element(sd *StructureDefinition, el *Element, kd *keyDef, value, ext any, depth int) error {
	items, isArray := value.([]any)
	if value != nil {
		switch {
		case el.Max == 1 && isArray:
			w.add("is a single value, not an array")
			return nil
		case el.Max != 1 && !isArray:
			w.add("is an array (max %s)", maxString(el.Max))
			return nil
		}
	}
	if isArray {
		if len(items) == 0 {
			w.add("an empty array is not allowed")
		}
		if el.Max > 1 && len(items) > el.Max {
			w.add("has %d items; at most %d are allowed", len(items), el.Max)
		}
	}
	if len(w.issues) >= maxIssues {
		return nil
	}
	switch {
	case !isArray && value != nil:
		if err := w.value(sd, el, kd, value, depth); err != nil {
			return err
		}
	case isArray:
		exts, _ := ext.([]any)
		for i, item := range items {
			n := w.item(i)
			var err error
			switch {
			case item != nil:
				err = w.value(sd, el, kd, item, depth)
			case !w.v.r4 || i >= len(exts) || exts[i] == nil:
				// R4 JSON lets a null hold the place of a value where
				// the aligned item of the extension sibling has
				// something (json.html, repeating primitives): the
				// import takes it, and the converter reports that
				// extension dropped (converter/write.go, primitives).
				// R5 keeps refusing it, as the official R5 JSON Schema
				// does.
				w.add("null is not a value")
			}
			w.path = w.path[:n]
			if err != nil {
				return err
			}
		}
	}
	if ext != nil {
		return w.primitiveExtensions(el, ext, value != nil, len(items), depth)
	}
	return nil
}

func maxString(n int) string {
	if n < 0 {
		return "*"
	}
	return strconv.Itoa(n)
}

// primitiveExtensions checks the _element sibling of a primitive: for
// an element that repeats, an array of objects or nulls (parallel to the
// values when there are any), else one object; each object an Element
// (id and extension, validated as any other Element's, not empty in R5).
func (w *walk) primitiveExtensions(el *Element, ext any, hasValue bool, n, depth int) error {
	check := func(v any) error {
		if v == nil {
			return nil
		}
		m, ok := v.(map[string]any)
		if !ok {
			w.add("a primitive's extension sibling is an object")
			return nil
		}
		if !w.v.r4 && len(m) == 0 {
			// An Element too: ele-1 refuses it as it refuses any empty
			// complex value (object); null is how a repeating element's
			// value without extensions stands in line.
			w.add("an empty object is not allowed (ele-1: an element has a value or children)")
			return nil
		}
		for k := range m {
			if k != "id" && k != "extension" {
				w.add("%q is not allowed beside a primitive value (id, extension)", k)
				return nil
			}
		}
		sd, err := w.v.defs.Type("Element")
		if err != nil {
			return err
		}
		return w.object(nil, sd, "Element", m, depth+1, false)
	}
	arr, isArray := ext.([]any)
	switch {
	case isArray != (el.Max != 1):
		if isArray {
			w.add("the extension sibling of a single value is an object, not an array")
		} else {
			w.add("the extension sibling of a repeating element is an array")
		}
		return nil
	case !isArray:
		return check(ext)
	case len(arr) == 0:
		w.add("an empty array is not allowed")
		return nil
	case hasValue && len(arr) != n:
		// Extensions may stand without values; beside values they line up.
		w.add("the extension sibling does not line up with the values")
		return nil
	}
	for i, v := range arr {
		at := w.item(i)
		err := check(v)
		w.path = w.path[:at]
		if err != nil {
			return err
		}
	}
	return nil
}

// value validates one value of an element by its type.
func (w *walk) value(sd *StructureDefinition, el *Element, kd *keyDef, value any, depth int) error {
	typ := kd.typ
	switch {
	case el.ContentRef != "":
		obj, ok := value.(map[string]any)
		if !ok {
			w.add("is an object")
			return nil
		}
		return w.object(kd, sd, el.ContentRef, obj, depth+1, false)
	case typ == "" && len(el.Types) > 1:
		w.add("the type of this element cannot be told")
		return nil
	case strings.HasPrefix(typ, "http://hl7.org/fhirpath/System."):
		return w.systemValue(typ, value)
	case typ == "BackboneElement" || typ == "Element" && len(sd.Children(el.Path)) > 0:
		obj, ok := value.(map[string]any)
		if !ok {
			w.add("is an object")
			return nil
		}
		return w.object(kd, sd, el.Path, obj, depth+1, false)
	case typ == "Resource":
		obj, ok := value.(map[string]any)
		if !ok {
			w.add("is a resource (an object with resourceType)")
			return nil
		}
		return w.resource(obj, depth+1)
	}
	tsd, err := kd.def, kd.defErr
	if errors.Is(err, ErrUnknownType) {
		w.add("has the unknown type %s", typ)
		return nil
	}
	if err != nil {
		return err
	}
	if tsd.Kind == "primitive-type" {
		w.primitive(tsd, value)
	} else {
		obj, ok := value.(map[string]any)
		if !ok {
			w.add("is a %s (an object)", typ)
			return nil
		}
		if err := w.object(kd, tsd, tsd.Type, obj, depth+1, false); err != nil {
			return err
		}
		if w.v.r4 && typ == "Reference" && len(el.Targets) > 0 {
			w.referenceTarget(el.Targets, obj)
		}
	}
	if el.Binding != nil && el.Binding.Strength == "required" {
		w.binding(el.Binding.ValueSet, typ, value)
	}
	return nil
}

// referenceTarget checks that a literal reference (Patient/123, an
// absolute URL ending in Patient/123, either with /_history/<version>)
// names a resource type among the element's targets. References to
// contained resources (#p1), URNs (urn:uuid:...) and type segments that
// name no resource type are left alone: what they point to is not told
// by their text.
func (w *walk) referenceTarget(targets []string, obj map[string]any) {
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
	n := w.member("reference")
	w.add("refers to a %s; this element refers to %s", rt, strings.Join(targets, ", "))
	w.path = w.path[:n]
}

// systemValue checks the FHIRPath System types that definitions use for
// ids and extension URLs: strings.
func (w *walk) systemValue(typ string, value any) error {
	switch strings.TrimPrefix(typ, "http://hl7.org/fhirpath/System.") {
	case "String":
		s, ok := value.(string)
		if !ok || s == "" {
			w.add("is a non-empty string")
		}
	case "Boolean":
		if _, ok := value.(bool); !ok {
			w.add("is true or false")
		}
	default:
		if _, ok := value.(string); !ok {
			w.add("is a string")
		}
	}
	return nil
}

// jsonNumberType reports whether a primitive is written as a JSON
// number (a switch, not a map: it is asked of every primitive value).
func jsonNumberType(t string) bool {
	switch t {
	case "integer", "positiveInt", "unsignedInt", "decimal":
		return true
	}
	return false
}

// primitive checks a primitive value's JSON kind and format.
func (w *walk) primitive(sd *StructureDefinition, value any) {
	t := sd.Type
	switch {
	case t == "boolean":
		if _, ok := value.(bool); !ok {
			w.add("is true or false, not %s", describe(value))
		}
		return
	case jsonNumberType(t):
		n, ok := value.(json.Number)
		if !ok {
			w.add("is a number (%s), not %s", t, describe(value))
			return
		}
		text := n.String()
		if !sd.Matches(text) {
			w.add("%s is not a valid %s", text, t)
			return
		}
		if t == "decimal" {
			if _, err := strconv.ParseFloat(text, 64); err != nil {
				w.add("%s is beyond the range of a decimal", truncate(text))
			}
		} else {
			i, err := strconv.ParseInt(text, 10, 64)
			switch {
			case err != nil || i > math.MaxInt32 || i < math.MinInt32:
				w.add("%s is out of the range of a 32-bit %s", text, t)
			case t == "positiveInt" && i < 1:
				w.add("%s is not positive", text)
			case t == "unsignedInt" && i < 0:
				w.add("%s is negative", text)
			}
		}
		return
	}
	s, ok := value.(string)
	if !ok {
		w.add("is a string (%s), not %s", t, describe(value))
		return
	}
	if strings.TrimSpace(s) == "" {
		w.add("an empty %s is not allowed", t)
		return
	}
	if len(s) > 1<<20 && t != "base64Binary" {
		w.add("is longer than 1 MiB")
		return
	}
	if t == "base64Binary" && w.spaced != nil && strings.ContainsAny(s, Base64Whitespace) {
		if compact := CompactBase64(s); compact != "" && sd.Matches(compact) {
			*w.spaced = append(*w.spaced, string(w.path))
			return
		}
	}
	if t != "string" && t != "markdown" && !sd.Matches(s) {
		w.add("%q is not a valid %s", truncate(s), t)
		return
	}
	if (t == "date" || t == "dateTime" || t == "instant") && !realDate(s) {
		w.add("%q is not a calendar date", truncate(s))
	}
	if t == "dateTime" && len(s) > 10 && !hasOffset(s) {
		w.add("%q has a time but no time zone (Z or +hh:mm)", truncate(s))
	}
	if t == "xhtml" && !strings.HasPrefix(strings.TrimSpace(s), "<div") {
		w.add("narrative xhtml is a <div> element")
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
func (w *walk) binding(valueSet, typ string, value any) {
	check := func(system, code string) (bool, bool) {
		return w.v.terms.Contains(valueSet, system, code)
	}
	switch typ {
	case "code":
		if s, ok := value.(string); ok {
			if in, known := check("", s); known && !in {
				w.add("%q is not in the required value set %s", s, valueSet)
			}
		}
	case "Coding":
		if m, ok := value.(map[string]any); ok {
			system, _ := m["system"].(string)
			code, _ := m["code"].(string)
			if code != "" {
				if in, known := check(system, code); known && !in {
					w.add("%s|%s is not in the required value set %s", system, code, valueSet)
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
			in, known := check(system, code)
			if !known || in {
				return
			}
		}
		w.add("no coding is in the required value set %s", valueSet)
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
