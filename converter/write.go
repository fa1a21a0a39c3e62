package converter

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"exchange/domain"
	"exchange/fhirdefs"
)

// leaf names where a scalar sits in the R4 JSON: the object holding it
// (by address), its member name, and its index in that member's array
// (-1 when the member is not an array). The R4 resource does not change
// during a conversion, so an object's address names it: two equal texts
// at different places are different leaves, which is what makes the loss
// report exact.
type leaf struct {
	obj   uintptr
	key   string
	index int
}

// mapAddr is the address of a JSON object, the identity of its leaves.
func mapAddr(m map[string]any) uintptr { return reflect.ValueOf(m).Pointer() }

// writer writes a target value as FHIR JSON, pruning empty objects,
// arrays and unset primitives, and records the R4 leaves whose values
// (or translations) it wrote.
type writer struct {
	e          *Engine
	buf        *bytes.Buffer
	carried    map[leaf]bool
	translated map[leaf]*translation
	absent     []string // the R5 paths of the required elements marked absent
	// at is the path of the object being written, from the resource
	// converted, by element name (Claim, contained for a contained
	// resource's members), without indexes, as the loss report's paths.
	// Joined only for an absent element: a slice, so that writing costs no
	// string per member.
	at []string
}

// value writes a value; false (nothing written) when it is empty.
func (w *writer) value(v *tval) bool {
	if v.def == nil || v.primitive() {
		return w.scalar(v)
	}
	return w.object(v)
}

func (w *writer) scalar(v *tval) bool {
	if v.scalar == nil {
		return false
	}
	if !w.writeScalar(v.scalar) {
		return false
	}
	if v.from.obj != 0 {
		w.carried[v.from] = true
		if v.translated != nil {
			if w.translated == nil {
				w.translated = map[leaf]*translation{}
			}
			w.translated[v.from] = v.translated
		}
	}
	return true
}

// object writes the members of v as a JSON object. A primitive member
// is written as its value and, when it has any, its `_name` sibling with
// its id and extensions. An element R5 requires that the object lacks is
// marked absent, when the object has anything else.
func (w *writer) object(v *tval) bool {
	start := w.buf.Len()
	w.buf.WriteByte('{')
	members := 0
	required := v.def.required
	var written []string // the members written, when required elements are checked
	for i := range v.members {
		m := &v.members[i]
		n := w.member(members, m)
		if n > 0 && required != nil {
			written = append(written, m.key)
		}
		members += n
	}
	if members > 0 {
		for _, el := range required {
			if !hasMember(written, el) {
				members += w.absentMember(members, v.def, el, 0)
			}
		}
	}
	w.buf.WriteByte('}')
	if members == 0 {
		w.buf.Truncate(start)
		return false
	}
	return true
}

// member writes a member of an object (and its `_key` sibling): how
// many members it wrote.
func (w *writer) member(members int, m *member) int {
	w.at = append(w.at, m.key)
	n := w.memberAt(members, m)
	w.at = w.at[:len(w.at)-1]
	return n
}

// memberAt is member with w.at at the member.
func (w *writer) memberAt(members int, m *member) int {
	key := m.key
	if val := m.one; val != nil {
		if !val.primitive() {
			return w.keep(w.key(members, key), w.value(val))
		}
		n := w.keep(w.key(members, key), w.scalar(val))
		if len(val.members) > 0 && w.sibling(val) {
			n += w.keep(w.key(members+n, "_"+key), w.object(val))
		}
		return n
	}
	if m.list[0].primitive() {
		return w.primitives(members, key, m.list)
	}
	return w.keep(w.key(members, key), w.array(m.list))
}

// sibling reports whether a primitive value can have its `_key` sibling
// in R5 JSON (fhirdefs.Package.ExtensionSibling: not beside ids, nor
// beside canonicals that name their targets, as the official JSON Schema
// has it); where it cannot, its id and extensions are dropped, and
// reported.
func (w *writer) sibling(v *tval) bool { return v.el != nil && w.e.r5.ExtensionSibling(v.el, v.typ) }

// hasMember reports whether the members written hold element el (a
// choice by any of its types, a primitive by its value or `_` sibling).
func hasMember(written []string, el *fhirdefs.Element) bool {
	for _, key := range written {
		if el.Choice() {
			base := strings.TrimSuffix(el.Name, "[x]")
			if suffix, ok := strings.CutPrefix(key, base); ok && slices.ContainsFunc(el.Types, func(t string) bool { return upperFirst(t) == suffix }) {
				return true
			}
		} else if key == el.Name {
			return true
		}
	}
	return false
}

// absentReason marks an element R5 requires and the R4 resource could not
// give: FHIR's data-absent-reason extension, `unsupported` ("the source
// system wasn't capable of supporting this element").
const absentReason = `"extension":[{"url":"http://hl7.org/fhir/StructureDefinition/data-absent-reason","valueCode":"unsupported"}]`

// maxAbsentDepth bounds the required elements of required elements that
// are marked absent (a recursive definition must not loop).
const maxAbsentDepth = 8

// absentMember writes the member that marks element el of sd absent: a
// primitive's `_name` sibling, or an element holding only the
// extension and, for a backbone element, its own required elements
// marked absent. It returns 1 (the member count).
func (w *writer) absentMember(members int, parent *tdef, el *fhirdefs.Element, depth int) int {
	key, typ := el.Name, elemType(el)
	if el.Choice() {
		typ = el.Types[0]
		key = strings.TrimSuffix(el.Name, "[x]") + upperFirst(typ)
	}
	if def, err := w.e.r5.Type(typ); err == nil && def.Kind == "primitive-type" {
		if !w.e.r5.ExtensionSibling(el, typ) {
			return 0 // left missing: R5 validation refuses the resource
		}
		key = "_" + key
	}
	w.key(members, key)
	if el.Max != 1 {
		w.buf.WriteByte('[')
	}
	w.buf.WriteString("{" + absentReason)
	children := el.Path
	if el.ContentRef != "" {
		children = el.ContentRef
	}
	w.at = append(w.at, el.Name)
	path := strings.Join(w.at, ".")
	if (typ == "BackboneElement" || typ == "Element" || el.ContentRef != "") && depth < maxAbsentDepth {
		d := w.e.def(parent.pkg, parent.sd, children)
		for _, child := range d.required {
			w.absentMember(1, d, child, depth+1)
		}
	}
	w.at = w.at[:len(w.at)-1]
	w.buf.WriteByte('}')
	if el.Max != 1 {
		w.buf.WriteByte(']')
	}
	w.absent = append(w.absent, path)
	return 1
}

// key writes a member name (after a comma unless it is the first) and
// returns where it started. Member names are FHIR element names
// ([A-Za-z0-9], `_` for a primitive's sibling): nothing to escape.
func (w *writer) key(members int, key string) int {
	mark := w.buf.Len()
	if members > 0 {
		w.buf.WriteByte(',')
	}
	w.buf.WriteByte('"')
	w.buf.WriteString(key)
	w.buf.WriteString(`":`)
	return mark
}

// keep counts a member whose value was written, or takes its name back.
func (w *writer) keep(mark int, wrote bool) int {
	if wrote {
		return 1
	}
	w.buf.Truncate(mark)
	return 0
}

// array writes the non-empty items of an array of complex values.
func (w *writer) array(items []*tval) bool {
	w.buf.WriteByte('[')
	n := 0
	for _, item := range items {
		mark := w.buf.Len()
		if n > 0 {
			w.buf.WriteByte(',')
		}
		if w.value(item) {
			n++
		} else {
			w.buf.Truncate(mark)
		}
	}
	w.buf.WriteByte(']')
	return n > 0
}

// primitives writes an array of primitives as `key`, the values, and
// `_key`, their extensions aligned by index (null for a value without),
// when any has extensions. An item with extensions but no value is left
// out, and so reported dropped: R5 JSON has no null among values (the
// official JSON Schema and our validator refuse it). It returns how many
// members it wrote.
func (w *writer) primitives(members int, key string, items []*tval) int {
	var values []*tval
	for _, item := range items {
		if item.scalar != nil {
			values = append(values, item)
		}
	}
	if len(values) == 0 {
		return 0
	}
	w.key(members, key)
	w.buf.WriteByte('[')
	for i, item := range values {
		if i > 0 {
			w.buf.WriteByte(',')
		}
		w.scalar(item)
	}
	w.buf.WriteByte(']')
	if !w.sibling(values[0]) {
		return 1
	}
	var exts [][]byte // each value's `_key` object; nil when none has one
	for i, item := range values {
		if len(item.members) == 0 {
			continue
		}
		sub := writer{e: w.e, buf: &bytes.Buffer{}, carried: w.carried, translated: w.translated, absent: w.absent, at: w.at}
		if sub.object(item) {
			if exts == nil {
				exts = make([][]byte, len(values))
			}
			exts[i] = sub.buf.Bytes()
		}
		w.translated, w.absent = sub.translated, sub.absent
	}
	if exts == nil {
		return 1
	}
	w.key(1, "_"+key)
	w.buf.WriteByte('[')
	for i, ext := range exts {
		if i > 0 {
			w.buf.WriteByte(',')
		}
		if ext == nil {
			ext = []byte("null")
		}
		w.buf.Write(ext)
	}
	w.buf.WriteByte(']')
	return 2
}

// writeScalar writes a scalar as JSON: false (nothing written) for a
// value JSON cannot hold. A string is escaped by domain.AppendJSONString,
// as encoding/json would escape it; a number (json.Number) goes through
// encoding/json, which refuses a literal of the maps that is no JSON
// number.
func (w *writer) writeScalar(v any) bool {
	switch v := v.(type) {
	case string:
		w.buf.Write(domain.AppendJSONString(w.buf.AvailableBuffer(), v))
		return true
	case bool:
		w.buf.WriteString(strconv.FormatBool(v))
		return true
	}
	data, err := json.Marshal(v)
	if err != nil {
		return false
	}
	w.buf.Write(data)
	return true
}
