package converter

import (
	"strings"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"exchange/fhirdefs"
)

// tdef is where the children of a typed value are defined: a
// StructureDefinition and the path of the element whose children they
// are (Observation, Observation.component, Quantity). An engine makes
// each one once, with its child elements tabled by name and the
// definitions of their types resolved on first use, so that typing a
// member of the source or the target while a conversion runs is a map
// read and a pointer load, not a search of the definitions.
type tdef struct {
	pkg  *fhirdefs.Package
	sd   *fhirdefs.StructureDefinition
	path string
	// primitive: a primitive type, whose value is a JSON scalar and whose
	// other elements (id, extension) sit in its `_x` sibling.
	primitive bool
	// resource: a resource type's root, whose JSON object names its type.
	resource bool
	elems    map[string]*elemInfo // by name; a choice by its name without [x]
	required []*fhirdefs.Element  // the children R5 requires (min 1 or more)
}

// elemInfo is an element as the engine uses it: the element, for a
// choice the JSON key of each of its types (valueQuantity: Quantity), and
// where the children of a value of each type it takes are defined.
type elemInfo struct {
	el    *fhirdefs.Element
	owner *tdef // the definition whose element it is
	// name is the element's name, a choice's without [x]; sibling is the
	// key of a primitive's `_x` sibling: "_" + the name.
	name, sibling string
	// types are the types a value of the element may have: a choice's,
	// else its one type (elemType).
	types   []string
	keyType map[string]choiceKey // choice only: by JSON key
	typeKey map[string]string
	choices []choiceKey // choice only: in the order of its types
	// defs holds one slot per type the element names (and
	// BackboneElement, how a recursive element is typed), filled on first
	// use. A Resource element's types are the resources: not tabled.
	// ownType is the element's own type (elemType) and own its slot: the
	// type nearly every value of a non-choice element has, found without
	// a lookup by name.
	defs    map[string]*atomic.Pointer[tdef]
	ownType string
	own     *atomic.Pointer[tdef]
}

// choiceKey is a JSON key of a choice (valueQuantity), its type and its
// `_x` sibling's key.
type choiceKey struct {
	key, typ, sibling string
}

// elemRef is an element as a rule names it (src.status, tgt.code), with
// the element it found last. A rule meets values of one definition
// nearly always (a group's rules run on values of the group's types), so
// the element found last turns the lookup by name into a pointer
// comparison; a rule that meets another definition looks the name up,
// as every lookup did before. The element remembered is d.elems[name]
// of its owner d, which never changes: the shortcut finds what the
// lookup would.
type elemRef struct {
	name string
	last atomic.Pointer[elemInfo]
}

func newElemRef(name string) *elemRef { return &elemRef{name: name} }

// in finds the element below d: itself or, as a choice, `name[x]`.
func (r *elemRef) in(d *tdef) (*elemInfo, bool) {
	if info := r.last.Load(); info != nil && info.owner == d {
		return info, true
	}
	info, ok := d.elems[r.name]
	if ok {
		r.last.Store(info)
	}
	return info, ok
}

type defKey struct {
	sd   *fhirdefs.StructureDefinition
	path string
}

// def returns the tdef of (sd, path), made once per engine.
func (e *Engine) def(pkg *fhirdefs.Package, sd *fhirdefs.StructureDefinition, path string) *tdef {
	k := defKey{sd, path}
	if d, ok := e.defs.Load(k); ok {
		return d.(*tdef)
	}
	d := &tdef{pkg: pkg, sd: sd, path: path, primitive: sd.Kind == "primitive-type",
		resource: sd.Kind == "resource" && path == sd.Type, elems: map[string]*elemInfo{}}
	for _, el := range sd.Children(path) {
		info := &elemInfo{el: el, owner: d, types: []string{elemType(el)}, defs: map[string]*atomic.Pointer[tdef]{}}
		name := el.Name
		if el.Choice() {
			info.types = el.Types
			name = strings.TrimSuffix(name, "[x]")
			info.keyType, info.typeKey = map[string]choiceKey{}, map[string]string{}
			for _, t := range el.Types {
				key := name + upperFirst(t)
				info.keyType[key] = choiceKey{key: key, typ: t, sibling: "_" + key}
				info.choices = append(info.choices, info.keyType[key])
				info.typeKey[t] = key
			}
		}
		for _, t := range append(el.Types[:len(el.Types):len(el.Types)], elemType(el), "BackboneElement") {
			if t != "Resource" && t != "" {
				info.defs[t] = &atomic.Pointer[tdef]{}
			}
		}
		info.ownType = elemType(el)
		info.own = info.defs[info.ownType]
		info.name, info.sibling = name, "_"+name
		d.elems[name] = info
		if el.Min > 0 {
			d.required = append(d.required, el)
		}
	}
	actual, _ := e.defs.LoadOrStore(k, d)
	return actual.(*tdef)
}

// typeDef returns the tdef of a type's own definition in pkg.
func (e *Engine) typeDef(pkg *fhirdefs.Package, typ string) (*tdef, error) {
	sd, err := pkg.Type(typ)
	if err != nil {
		return nil, err
	}
	return e.def(pkg, sd, typ), nil
}

// elem finds the element `name` below d: itself or, as a choice,
// `name[x]`.
func (d *tdef) elem(name string) (*elemInfo, bool) {
	info, ok := d.elems[name]
	return info, ok
}

// childDef returns where the children of a value of type typ, found at
// element info of parent, are defined: a backbone element's own path, a
// recursive element's referenced path, or the type's definition.
func (e *Engine) childDef(parent *tdef, info *elemInfo, typ string) (*tdef, error) {
	slot := info.own
	if typ != info.ownType {
		slot = info.defs[typ]
	}
	if slot != nil {
		if d := slot.Load(); d != nil {
			return d, nil
		}
	}
	sd, path, err := typed(parent.pkg, parent.sd, info.el, typ)
	if err != nil {
		return nil, err
	}
	d := e.def(parent.pkg, sd, path)
	if slot != nil {
		slot.Store(d)
	}
	return d, nil
}

// elemType is the type of a non-choice element, with the FHIRPath system
// types of Element.id, Resource.id and Extension.url as plain strings.
func elemType(e *fhirdefs.Element) string {
	if len(e.Types) == 0 {
		return ""
	}
	t := e.Types[0]
	if strings.HasPrefix(t, "http://hl7.org/fhirpath/System.") || (e.Name == "id" && strings.Count(e.Path, ".") == 1) || e.Path == "Extension.url" {
		return "string"
	}
	return t
}

func upperFirst(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[n:]
}

// typed returns where the children of a value of type typ, found at
// element e of sd, are defined: a backbone element's own path, a
// recursive element's referenced path, or the type's definition.
func typed(pkg *fhirdefs.Package, sd *fhirdefs.StructureDefinition, e *fhirdefs.Element, typ string) (*fhirdefs.StructureDefinition, string, error) {
	if e != nil && e.ContentRef != "" {
		return sd, e.ContentRef, nil
	}
	if e != nil && (typ == "BackboneElement" || typ == "Element") && len(sd.Children(e.Path)) > 0 {
		return sd, e.Path, nil
	}
	def, err := pkg.Type(typ)
	if err != nil {
		return nil, "", err
	}
	return def, typ, nil
}
