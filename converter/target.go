package converter

import (
	"encoding/json"
	"fmt"
	"slices"

	"exchange/fhirdefs"
)

// tval is a typed value of the R5 target under construction: an object
// whose members keep the order the rules wrote them, or a primitive
// whose scalar a rule sets. Empty ones are pruned when written out.
type tval struct {
	typ string
	def *tdef // nil for a literal (resourceType)
	// el is the element the value fills in its parent (nil for the
	// resource converted and literals), which says whether a primitive
	// may carry a `_name` sibling.
	el *fhirdefs.Element
	// members in the order the rules wrote them; a primitive's are its id
	// and extension. An object has a few: a list beats a map.
	members []member
	scalar  any // a primitive's value, once set
	// from is the R4 scalar the value was carried from (zero for a
	// literal), and translated says how translate() changed it.
	from       leaf
	translated *translation
}

// translation is a code translate() changed.
type translation struct {
	from, to, conceptMap string
}

// member is a member of a target object: its JSON key and its value,
// one (an element that does not repeat) or the list of an element that
// repeats, never empty. Two fields, not an interface, so that adding an
// item boxes no slice.
type member struct {
	key  string
	one  *tval
	list []*tval
}

func (t *tval) primitive() bool { return t.def != nil && t.def.primitive }

// member returns member key, nil when there is none.
func (t *tval) member(key string) *member {
	for i := range t.members {
		if t.members[i].key == key {
			return &t.members[i]
		}
	}
	return nil
}

// newTval returns a new target value v. A full block is left to the
// values already in it (which change after they are made, so they are
// never moved) and a new one begun.
func (st *stacks) newTval(v tval) *tval {
	if len(st.tvals) == cap(st.tvals) {
		st.tvals = make([]tval, 0, blockSize)
	}
	st.tvals = append(st.tvals, v)
	return &st.tvals[len(st.tvals)-1]
}

// blockSize is how many values (members, items) a block holds: a small
// resource wastes little of its last block, a large one takes a few.
const blockSize = 32

// firstMembers and firstList are empty slices with room for a few
// members or items, cut from a block with their capacity capped so that
// an append beyond it moves them out rather than into their neighbours.
func (st *stacks) firstMembers() []member {
	const room = 4
	if cap(st.members)-len(st.members) < room {
		st.members = make([]member, 0, room*blockSize/2)
	}
	n := len(st.members)
	st.members = st.members[:n+room]
	return st.members[n : n : n+room]
}

func (st *stacks) firstList() []*tval {
	const room = 2
	if cap(st.lists)-len(st.lists) < room {
		st.lists = make([]*tval, 0, room*blockSize/2)
	}
	n := len(st.lists)
	st.lists = st.lists[:n+room]
	return st.lists[n : n : n+room]
}

func (e *Engine) newTarget(parent *tval, info *elemInfo, typ string, st *stacks) (*tval, error) {
	d, err := e.childDef(parent.def, info, typ)
	if err != nil {
		return nil, err
	}
	t := st.newTval(tval{typ: typ, def: d, el: info.el})
	if d.resource {
		st.set(t, "resourceType", st.newTval(tval{scalar: typ}))
	}
	return t, nil
}

// set sets member key of t to v, in the place it first had.
func (st *stacks) set(t *tval, key string, v *tval) {
	if m := t.member(key); m != nil {
		m.one = v
		return
	}
	if t.members == nil {
		t.members = st.firstMembers()
	}
	t.members = append(t.members, member{key: key, one: v})
}

// add appends v to the list of member key of t.
func (st *stacks) add(t *tval, key string, v *tval) {
	if m := t.member(key); m != nil {
		m.list = append(m.list, v)
		return
	}
	if t.members == nil {
		t.members = st.firstMembers()
	}
	t.members = append(t.members, member{key: key, list: append(st.firstList(), v)})
}

// makeChild creates the value of element name under parent, of type typ
// (required for a choice; else the element's own type unless it is a
// Resource). reuse returns the existing value of a single element. A
// primitive's children are its id and extension; its value is assigned.
func (e *Engine) makeChild(parent *tval, ref *elemRef, typ string, reuse bool, st *stacks) (*tval, error) {
	name := ref.name
	if parent.def == nil || (parent.primitive() && name == "value") {
		return nil, fmt.Errorf("%s is a primitive: no element %s", parent.typ, name)
	}
	info, ok := ref.in(parent.def)
	if !ok {
		return nil, fmt.Errorf("%s has no element %s", parent.def.path, name)
	}
	el, key := info.el, name
	switch {
	case el.Choice():
		if key = info.typeKey[typ]; key == "" {
			return nil, fmt.Errorf("%s: type %q is not one of %v", el.Path, typ, el.Types)
		}
	case el.ContentRef != "":
		typ = "BackboneElement"
	case typ == "" || elemType(el) != "Resource":
		typ = elemType(el)
	}
	if el.Max == 1 && reuse {
		if m := parent.member(key); m != nil && m.one != nil {
			return m.one, nil
		}
	}
	child, err := e.newTarget(parent, info, typ, st)
	if err != nil {
		return nil, err
	}
	if el.Max == 1 {
		if el.Choice() { // one of the choice's types only
			parent.members = slices.DeleteFunc(parent.members, func(m member) bool {
				_, other := info.keyType[m.key]
				return other && m.key != key
			})
		}
		st.set(parent, key, child)
	} else {
		st.add(parent, key, child)
	}
	return child, nil
}

// assign sets element name of parent to a scalar (or a primitive's own
// value, for `tgt.value = v`).
func (e *Engine) assign(parent *tval, ref *elemRef, v any, hint string, st *stacks) (*tval, error) {
	name := ref.name
	if parent.primitive() && name == "value" {
		parent.scalar = scalarFor(parent.typ, v)
		return parent, nil
	}
	if parent.def == nil || parent.primitive() {
		return nil, fmt.Errorf("%s is a primitive: no element %s", parent.typ, name)
	}
	info, ok := ref.in(parent.def)
	if !ok {
		return nil, fmt.Errorf("%s has no element %s", parent.def.path, name)
	}
	el, typ := info.el, ""
	if el.Choice() {
		switch {
		case slices.Contains(el.Types, hint):
			typ = hint
		case isBool(v) && slices.Contains(el.Types, "boolean"):
			typ = "boolean"
		case slices.Contains(el.Types, "string"):
			typ = "string"
		default:
			return nil, fmt.Errorf("%s: no type of %v takes the value %v", el.Path, el.Types, v)
		}
	}
	child, err := e.makeChild(parent, ref, typ, false, st)
	if err != nil {
		return nil, err
	}
	if !child.primitive() {
		return nil, fmt.Errorf("%s is a %s, not a primitive: it cannot take a value", el.Path, child.typ)
	}
	child.scalar = scalarFor(child.typ, v)
	return child, nil
}

// assignFrom sets element name of parent to v, the value of (or the code
// translated from) the source primitive src, and carries src's id and
// extensions (its `_x` sibling) through the maps' Element group, as a
// group of the primitive's type would.
func (e *Engine) assignFrom(parent *tval, ref *elemRef, src *snode, v any, st *stacks, depth int) (*tval, error) {
	child, err := e.assign(parent, ref, v, src.typ, st)
	if err != nil {
		return nil, err
	}
	child.from = src.at
	if src.at.obj != 0 {
		st.carried++
	}
	if src.ext != nil && e.element != nil {
		if err := e.runGroup(e.element, []any{src, child}, st, depth+1); err != nil {
			return child, err
		}
	}
	return child, nil
}

func isBool(v any) bool { _, ok := v.(bool); return ok }

// scalarFor writes a value in the JSON form of an R5 primitive type:
// integer64 is a JSON string, and base64Binary has no whitespace (R4's
// format allowed it, R5's does not: the bytes are the same; an R5 create
// follows the same rule, fhirdefs.ValidateSpacedBase64).
func scalarFor(typ string, v any) any {
	switch typ {
	case "integer64":
		if n, ok := v.(json.Number); ok {
			return string(n)
		}
	case "base64Binary":
		if s, ok := v.(string); ok {
			return fhirdefs.CompactBase64(s)
		}
	}
	return v
}
