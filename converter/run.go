package converter

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"exchange/fhirdefs"
)

// maxDepth bounds group calls within one conversion: deeper input is
// refused (errTooDeep fails the conversion) rather than risking the stack.
const maxDepth = 200

var errTooDeep = fmt.Errorf("the resource nests deeper than %d levels", maxDepth)

// snode is a typed value of the R4 source: a JSON value with its R4
// type, and where its children are defined (the element path in sd).
// A primitive's `value` is an snode with no sd.
type snode struct {
	v any // a primitive's scalar: nil when it has only its `_x` sibling
	// ext is a primitive's `_x` sibling (its id and extensions): the
	// members of the primitive's other elements than value.
	ext map[string]any
	typ string
	def *tdef // nil for a primitive's value
	at  leaf  // where a primitive's scalar sits in the R4 JSON
}

func (n *snode) primitive() bool { return n.def == nil || n.def.primitive }

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

// scope is the variables a rule sees: those of its group call and of
// the rules it is nested in, and its own. Scopes nest strictly, so the
// variables of one conversion live on one stack: a group call's from
// base, a scope's own from start, the innermost on top. A scope is two
// indexes, not an allocation, and is left by cutting the stack back to
// its start.
type scope struct {
	st          *stacks
	base, start int
}

// stacks are the working memory of one conversion: the variables of its
// scopes (b) and the source items its rules visit (nodes), each cut
// back when the rule that pushed them is done. An item is never changed
// once pushed, so a pointer to it stays good when the stack grows into
// a new array.
//
// The target values the conversion builds are allocated from it too, in
// blocks (tvals, members, lists) rather than one by one: they are small
// and many (about a hundred for an Observation), all live until the
// result is written, and one conversion's blocks are never another's.
type stacks struct {
	b     []binding
	nodes []snode

	tvals   []tval
	members []member
	lists   []*tval
	// carried counts the values carried from an R4 scalar: the size of
	// the writer's record of them.
	carried int
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

type binding struct {
	name string
	val  any
}

// enter opens a scope inside s, on top of the stack.
func (s scope) enter() scope { return scope{st: s.st, base: s.base, start: len(s.st.b)} }

// leave drops the variables of scope s and of any scope inside it.
// The variables dropped stay in the stack's array until overwritten: the
// stack lives as long as its conversion, which holds what they point to
// anyway.
func (s scope) leave() { s.st.b = s.st.b[:s.start] }

// get looks a variable up from the innermost scope out, down to the
// group call's.
func (s scope) get(name string) (any, bool) {
	b := s.st.b
	for i := len(b) - 1; i >= s.base; i-- {
		if b[i].name == name {
			return b[i].val, true
		}
	}
	return nil, false
}

// bind sets a variable of scope s, the innermost.
func (s scope) bind(name string, v any) {
	b := s.st.b
	for i := s.start; i < len(b); i++ {
		if b[i].name == name {
			b[i].val = v
			return
		}
	}
	s.st.b = append(b, binding{name, v})
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

func (e *Engine) sourceNode(v any, typ string) (*snode, error) {
	d, err := e.typeDef(e.r4, typ)
	if err != nil {
		return nil, err
	}
	return &snode{v: v, typ: typ, def: d}, nil
}

// sourceChildren returns the items of element name of a source node,
// typed. A primitive's items pair its values with their `_x` siblings by
// index (either may be missing); a primitive's own id and extension are
// read from its `_x` sibling.
//
// The items are pushed on the conversion's stack of items (st.nodes): the
// caller cuts it back when it is done with them.
func (e *Engine) sourceChildren(n *snode, ref *elemRef, st *stacks) ([]snode, error) {
	name := ref.name
	var obj map[string]any
	switch {
	case n.primitive() && name == "value":
		if n.def != nil && n.v != nil {
			st.nodes = append(st.nodes, snode{v: n.v, at: n.at})
			return st.nodes[len(st.nodes)-1:], nil
		}
		return nil, nil
	case n.primitive():
		if n.def == nil || n.ext == nil {
			return nil, nil
		}
		obj = n.ext
	default:
		var ok bool
		if obj, ok = n.v.(map[string]any); !ok {
			return nil, nil
		}
	}
	info, ok := ref.in(n.def)
	if !ok {
		return nil, fmt.Errorf("%s has no element %s", n.def.path, name)
	}
	el := info.el
	if !el.Choice() && obj[name] == nil && obj[info.sibling] == nil {
		return nil, nil // most elements a rule reads are absent
	}
	start, out := len(st.nodes), st.nodes
	defer func() { st.nodes = out }()
	addr := mapAddr(obj)
	add := func(key, sibling, typ string) error {
		if typ == "Resource" {
			for _, item := range asList(obj[key]) {
				m, _ := item.(map[string]any)
				rt, _ := m["resourceType"].(string)
				d, err := e.typeDef(e.r4, rt)
				if err != nil {
					return err
				}
				out = append(out, snode{v: item, typ: rt, def: d})
			}
			return nil
		}
		d, err := e.childDef(n.def, info, typ)
		if err != nil {
			return err
		}
		if typ == "BackboneElement" || typ == "Element" || el.ContentRef != "" {
			typ = "BackboneElement"
		}
		if d.primitive {
			out = appendPrimitives(out, obj, addr, key, sibling, typ, d)
			return nil
		}
		switch items := obj[key].(type) {
		case nil:
		case []any:
			out = slices.Grow(out, len(items))
			for _, item := range items {
				out = append(out, snode{v: item, typ: typ, def: d})
			}
		default:
			out = append(out, snode{v: items, typ: typ, def: d})
		}
		return nil
	}
	if el.Choice() {
		if 2*len(info.types) <= len(obj) {
			// Fewer keys to look up than the object has (effective[x] in
			// an Observation): each key of the choice, and its sibling.
			for _, c := range info.choices {
				if obj[c.key] != nil || obj[c.sibling] != nil {
					if err := add(c.key, c.sibling, c.typ); err != nil {
						return nil, err
					}
				}
			}
			return out[start:], nil
		}
		for key := range obj { // a few keys, where a choice may have fifty types
			k, sibling := strings.CutPrefix(key, "_")
			if !strings.HasPrefix(k, info.name) { // every key of the choice starts with its name
				continue
			}
			if c, ok := info.keyType[k]; ok && !(sibling && obj[k] != nil) {
				if err := add(k, c.sibling, c.typ); err != nil {
					return nil, err
				}
			}
		}
		return out[start:], nil
	}
	typ := elemType(el)
	if el.ContentRef != "" {
		typ = "BackboneElement"
	}
	err := add(name, info.sibling, typ)
	return out[start:], err
}

// appendPrimitives appends the items of a primitive element key of obj:
// each value with the item of the same index of its `_key` sibling.
func appendPrimitives(out []snode, obj map[string]any, addr uintptr, key, sibling, typ string, d *tdef) []snode {
	values, exts := obj[key], obj[sibling]
	if values == nil && exts == nil {
		return out
	}
	list, isList := values.([]any)
	extList, extIsList := exts.([]any)
	if !isList && !extIsList {
		ext, _ := exts.(map[string]any)
		return append(out, snode{v: values, ext: ext, typ: typ, def: d, at: leaf{addr, key, -1}})
	}
	out = slices.Grow(out, max(len(list), len(extList)))
	for i := range max(len(list), len(extList)) {
		var v any
		var ext map[string]any
		if i < len(list) {
			v = list[i]
		}
		if i < len(extList) {
			ext, _ = extList[i].(map[string]any)
		}
		if v != nil || ext != nil {
			out = append(out, snode{v: v, ext: ext, typ: typ, def: d, at: leaf{addr, key, i}})
		}
	}
	return out
}

func asList(v any) []any {
	switch v := v.(type) {
	case nil:
		return nil
	case []any:
		return v
	}
	return []any{v}
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

// dispatch picks the R5 type a source item becomes at element el and
// the group that converts it: the <<type+>> group of its type when the
// element takes that type, else a <<types>> group of the pair.
func (e *Engine) dispatch(src *snode, info *elemInfo) (string, *cgroup, error) {
	if src.def != nil && src.def.sd.Kind == "resource" {
		// A resource inside another (contained, Bundle.entry, Parameters)
		// passes the same gate as one imported alone.
		if err := e.Supports(src.typ); err != nil {
			return "", nil, err
		}
		return e.typePlus[src.typ].targetType, e.typePlus[src.typ], nil
	}
	if g := e.typePlus[src.typ]; g != nil && slices.Contains(info.types, g.targetType) {
		return g.targetType, g, nil
	}
	for _, t := range info.types {
		if g := e.pairs[typePair{src.typ, t}]; g != nil {
			return t, g, nil
		}
	}
	return "", nil, fmt.Errorf("%w: %s to %s (%v)", errNoGroup, src.typ, info.el.Path, info.types)
}

// copyInto converts a source item into a new value of element name
// under parent, through the group its pair of types dispatches to.
func (e *Engine) copyInto(src *snode, parent *tval, ref *elemRef, st *stacks, depth int) (*tval, error) {
	name := ref.name
	if parent.primitive() && name == "value" && src.primitive() {
		return e.assignFrom(parent, ref, src, src.v, st, depth)
	}
	if parent.def == nil || (parent.primitive() && name == "value") {
		return nil, fmt.Errorf("%s is a primitive: no element %s", parent.typ, name)
	}
	info, ok := ref.in(parent.def)
	if !ok {
		return nil, fmt.Errorf("%s has no element %s", parent.def.path, name)
	}
	typ, g, err := e.dispatch(src, info)
	if err != nil {
		return nil, err
	}
	child, err := e.makeChild(parent, ref, typ, false, st)
	if err != nil {
		return nil, err
	}
	if g.copiesValue && !e.noValueCopies && depth+2 <= maxDepth && src.def != nil && src.def.primitive && src.ext == nil && child.primitive() {
		valueCopy(child, src, st)
		return child, nil
	}
	return child, e.runGroup(g, []any{src, child}, st, depth+1)
}

// valueCopy does what a group that copiesValue does, run on a primitive
// src without its `_x` sibling into a primitive child, within maxDepth:
// its Element group finds no id or extension to carry (src has none),
// and its one rule, `src.value as v -> tgt.value = v`, finds src's value
// when it has one and assigns it as assignFrom would (a primitive's
// value: assign's first case; no ConceptMap). About half the groups a
// conversion runs are these: the shortcut saves two group calls, three
// rules and their scopes per primitive copied. TestValueCopies compares
// it with the groups run, over the official examples and by fuzzing.
func valueCopy(child *tval, src *snode, st *stacks) {
	if src.v == nil {
		return
	}
	child.scalar = scalarFor(child.typ, src.v)
	child.from = src.at
	if src.at.obj != 0 {
		st.carried++
	}
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
// format allowed it, R5's does not: the bytes are the same).
func scalarFor(typ string, v any) any {
	switch typ {
	case "integer64":
		if n, ok := v.(json.Number); ok {
			return string(n)
		}
	case "base64Binary":
		if s, ok := v.(string); ok && strings.ContainsAny(s, " \t\r\n") {
			return strings.Map(func(r rune) rune {
				if r == ' ' || r == '\t' || r == '\r' || r == '\n' {
					return -1
				}
				return r
			}, s)
		}
	}
	return v
}

func (e *Engine) runGroup(g *cgroup, args []any, st *stacks, depth int) error {
	if depth > maxDepth {
		return errTooDeep
	}
	if g.extends != nil {
		if err := e.runGroup(g.extends, args[:min(len(args), len(g.extends.params))], st, depth+1); err != nil {
			return err
		}
	}
	sc := scope{st: st, base: len(st.b), start: len(st.b)}
	defer sc.leave()
	for i, prm := range g.params {
		if i < len(args) && args[i] != nil {
			sc.bind(prm.Name, args[i])
		}
	}
	return e.runRules(g, g.rules, sc, depth)
}

// runRules runs rules one after the other; a rule that fails is skipped,
// except for input too deep to convert, which ends the conversion.
func (e *Engine) runRules(g *cgroup, rules []*crule, sc scope, depth int) error {
	for _, r := range rules {
		err := e.runRule(g, r, sc, depth)
		if errors.Is(err, errTooDeep) {
			return err
		}
		if err != nil {
			e.log.Debug("FML rule skipped", "group", g.name, "rule", r.name, "line", r.line, "error", err)
		}
	}
	return nil
}

// runRule runs a rule for every combination of its source items that
// passes its conditions. An error skips what remains of the rule.
func (e *Engine) runRule(g *cgroup, r *crule, sc scope, depth int) error {
	if r.skip != "" {
		return nil
	}
	return e.runSources(g, r, 0, sc, nil, depth)
}

// runSources runs rule r from its source i on: for each item of that
// source in scope sc, and on to the next source, then the rule's body.
func (e *Engine) runSources(g *cgroup, r *crule, i int, sc scope, item *snode, depth int) error {
	if i == len(r.sources) {
		return e.runBody(g, r, sc, item, depth)
	}
	s := &r.sources[i]
	ctx, ok := sc.get(s.Context)
	if !ok {
		return fmt.Errorf("unknown variable %s", s.Context)
	}
	node, ok := ctx.(*snode)
	if !ok {
		return fmt.Errorf("%s is not a source", s.Context)
	}
	if s.Element == "" {
		return e.runItem(g, r, i, sc, node, depth)
	}
	defer func(mark int) { sc.st.nodes = sc.st.nodes[:mark] }(len(sc.st.nodes))
	items, err := e.sourceChildren(node, s.elem, sc.st)
	if err != nil {
		return err
	}
	for k := range items {
		if err := e.runItem(g, r, i, sc, &items[k], depth); err != nil {
			return err
		}
	}
	return nil
}

// runItem runs rule r for one item of its source i that passes the
// source's type and condition, bound to the source's variable.
func (e *Engine) runItem(g *cgroup, r *crule, i int, sc scope, it *snode, depth int) error {
	s := &r.sources[i]
	if s.Type != "" && it.typ != s.Type {
		return nil
	}
	inner := sc.enter()
	defer inner.leave()
	if s.Var != "" {
		inner.bind(s.Var, it)
	}
	if s.where != nil && !e.holds(s.where, inner) {
		return nil
	}
	return e.runSources(g, r, i+1, inner, it, depth)
}

func (e *Engine) runBody(g *cgroup, r *crule, sc scope, item *snode, depth int) error {
	if r.simple {
		t := r.targets[0]
		parent, ok := sc.get(t.Context)
		tv, isTarget := parent.(*tval)
		if !ok || !isTarget {
			return fmt.Errorf("%s is not a target", t.Context)
		}
		_, err := e.copyInto(item, tv, t.elem, sc.st, depth)
		return err
	}
	for _, t := range r.targets {
		if err := e.runTarget(t, sc, item, depth); err != nil {
			return err
		}
	}
	if err := e.runRules(g, r.then, sc, depth); err != nil {
		return err
	}
	for _, c := range r.calls {
		args := make([]any, len(c.args))
		for i, a := range c.args {
			args[i] = resolve(a, sc)
		}
		if err := e.runGroup(c.group, args, sc.st, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func resolve(a argument, sc scope) any {
	if a.Var == "" {
		return a.Literal
	}
	v, _ := sc.get(a.Var)
	return v
}

func (e *Engine) runTarget(t ctarget, sc scope, item *snode, depth int) error {
	ctxv, ok := sc.get(t.Context)
	ctx, isTarget := ctxv.(*tval)
	if !ok || !isTarget {
		return fmt.Errorf("%s is not a target", t.Context)
	}
	bind := func(v *tval) {
		if t.Var != "" && v != nil {
			sc.bind(t.Var, v)
		}
	}
	if t.Element == "" {
		if t.Transform != nil {
			return fmt.Errorf("a value for %s itself", t.Context)
		}
		bind(ctx)
		return nil
	}
	if t.Transform == nil {
		hint := ""
		if item != nil {
			hint = item.typ
		}
		child, err := e.makeChild(ctx, t.elem, hint, true, sc.st)
		bind(child)
		return err
	}
	switch t.Transform.Kind {
	case "create":
		typ, _ := firstLiteral(t.Transform).(string)
		child, err := e.makeChild(ctx, t.elem, typ, false, sc.st)
		bind(child)
		return err
	case "value", "translate", "copy":
		// translate() without a ConceptMap passes codes through unchanged.
		if len(t.Transform.Args) == 0 {
			return fmt.Errorf("%s() without an argument", t.Transform.Kind)
		}
		switch v := resolve(t.Transform.Args[0], sc).(type) {
		case nil:
			return nil // an unbound variable: nothing to write
		case *snode:
			if v.primitive() {
				value, tr := t.conceptMap.translate(v.v)
				child, err := e.assignFrom(ctx, t.elem, v, value, sc.st, depth)
				if child != nil && tr != nil {
					child.translated = tr
				}
				bind(child)
				return err
			}
			child, err := e.copyInto(v, ctx, t.elem, sc.st, depth)
			bind(child)
			return err
		case *tval:
			return fmt.Errorf("assigning target %s to %s is not supported", t.Transform.Args[0].Var, t.Element)
		default:
			child, err := e.assign(ctx, t.elem, v, "", sc.st)
			bind(child)
			return err
		}
	}
	return fmt.Errorf("transform %s() is not supported", t.Transform.Kind)
}

func firstLiteral(t *transform) any {
	if len(t.Args) == 0 {
		return nil
	}
	return t.Args[0].Literal
}

// holds evaluates an equality or inequality. Empty on either side is
// false, as FHIRPath's empty result is.
func (e *Engine) holds(c *condition, sc scope) bool {
	left, right := e.values(c.left, sc), e.values(c.right, sc)
	if len(left) != 1 || len(right) != 1 {
		return false
	}
	equal := scalarText(left[0]) == scalarText(right[0])
	return equal != c.not
}

func (e *Engine) values(o operand, sc scope) []any {
	if o.path == nil {
		return []any{o.literal}
	}
	v, ok := sc.get(o.path[0])
	if !ok {
		return nil
	}
	node, isNode := v.(*snode)
	if !isNode {
		return []any{v}
	}
	defer func(mark int) { sc.st.nodes = sc.st.nodes[:mark] }(len(sc.st.nodes))
	nodes := []*snode{node}
	for _, ref := range o.elems {
		var next []*snode
		for _, n := range nodes {
			children, err := e.sourceChildren(n, ref, sc.st)
			if err != nil {
				return nil
			}
			for k := range children {
				next = append(next, &children[k])
			}
		}
		nodes = next
	}
	var out []any
	for _, n := range nodes {
		if n.primitive() && n.v != nil {
			out = append(out, n.v)
		}
	}
	return out
}

// scalarText is a scalar's text, for comparisons and the loss report:
// 5 and "5" are the same value (unsignedInt became integer64, a string).
func scalarText(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case json.Number:
		return string(v)
	case bool:
		if v {
			return "true"
		}
		return "false"
	}
	return fmt.Sprint(v)
}

// ErrNotSupported is returned for an R4 resource type the engine does
// not convert.
var ErrNotSupported = errors.New("not supported")
