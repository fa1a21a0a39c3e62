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
	ext  map[string]any
	typ  string
	sd   *fhirdefs.StructureDefinition
	path string
	at   leaf // where a primitive's scalar sits in the R4 JSON
}

func (n *snode) primitive() bool { return n.sd == nil || n.sd.Kind == "primitive-type" }

// tval is a typed value of the R5 target under construction: an object
// whose members keep the order the rules wrote them, or a primitive
// whose scalar a rule sets. Empty ones are pruned when written out.
type tval struct {
	typ    string
	sd     *fhirdefs.StructureDefinition
	path   string
	keys   []string
	vals   map[string]any // *tval or []*tval; a primitive's are its id and extension
	scalar any            // a primitive's value, once set
	// from is the R4 scalar the value was carried from (zero for a
	// literal), and translated says how translate() changed it.
	from       leaf
	translated *translation
}

// translation is a code translate() changed.
type translation struct {
	from, to, conceptMap string
}

func (t *tval) primitive() bool { return t.sd != nil && t.sd.Kind == "primitive-type" }

// scope holds the variables of a group call and of the rules within it.
type scope struct {
	vars   map[string]any
	parent *scope
}

func (s *scope) get(name string) (any, bool) {
	for ; s != nil; s = s.parent {
		if v, ok := s.vars[name]; ok {
			return v, true
		}
	}
	return nil, false
}

func (s *scope) child() *scope { return &scope{vars: map[string]any{}, parent: s} }

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

// elemInfo is an element as the engine uses it, computed once per
// (definition, path, name): the element, and for a choice the JSON key
// of each of its types (valueQuantity: Quantity).
type elemInfo struct {
	el      *fhirdefs.Element
	keyType map[string]string // choice only
	typeKey map[string]string
}

type elemKey struct {
	sd         *fhirdefs.StructureDefinition
	path, name string
}

// lookup finds the element `name` under a node's path: itself or, as a
// choice, `name[x]`. Found or not, the answer is cached.
func (e *Engine) lookup(sd *fhirdefs.StructureDefinition, path, name string) (*elemInfo, bool) {
	k := elemKey{sd, path, name}
	if v, ok := e.elems.Load(k); ok {
		info := v.(*elemInfo)
		return info, info.el != nil
	}
	info := &elemInfo{}
	if el, ok := sd.Element(path + "." + name); ok {
		info.el = el
	} else if el, ok := sd.Element(path + "." + name + "[x]"); ok {
		info.el = el
		info.keyType, info.typeKey = map[string]string{}, map[string]string{}
		for _, t := range el.Types {
			info.keyType[name+upperFirst(t)] = t
			info.typeKey[t] = name + upperFirst(t)
		}
	}
	e.elems.Store(k, info)
	return info, info.el != nil
}

// required returns the elements R5 requires (min 1 or more) directly
// below path in sd, computed once per (definition, path); nil for none.
func (e *Engine) required(sd *fhirdefs.StructureDefinition, path string) []*fhirdefs.Element {
	if sd == nil {
		return nil
	}
	k := elemKey{sd, path, ""}
	if v, ok := e.requiredElems.Load(k); ok {
		return v.([]*fhirdefs.Element)
	}
	var out []*fhirdefs.Element
	for _, el := range sd.Children(path) {
		if el.Min > 0 {
			out = append(out, el)
		}
	}
	e.requiredElems.Store(k, out)
	return out
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
	sd, err := e.r4.Type(typ)
	if err != nil {
		return nil, err
	}
	return &snode{v: v, typ: typ, sd: sd, path: typ}, nil
}

// sourceChildren returns the items of element name of a source node,
// typed. A primitive's items pair its values with their `_x` siblings by
// index (either may be missing); a primitive's own id and extension are
// read from its `_x` sibling.
func (e *Engine) sourceChildren(n *snode, name string) ([]*snode, error) {
	var obj map[string]any
	switch {
	case n.primitive() && name == "value":
		if n.sd != nil && n.v != nil {
			return []*snode{{v: n.v, at: n.at}}, nil
		}
		return nil, nil
	case n.primitive():
		if n.sd == nil || n.ext == nil {
			return nil, nil
		}
		obj = n.ext
	default:
		var ok bool
		if obj, ok = n.v.(map[string]any); !ok {
			return nil, nil
		}
	}
	info, ok := e.lookup(n.sd, n.path, name)
	if !ok {
		return nil, fmt.Errorf("%s has no element %s", n.path, name)
	}
	el := info.el
	var out []*snode
	addr := mapAddr(obj)
	add := func(key, typ string) error {
		if typ == "Resource" {
			for _, item := range asList(obj[key]) {
				m, _ := item.(map[string]any)
				rt, _ := m["resourceType"].(string)
				child, err := e.sourceNode(item, rt)
				if err != nil {
					return err
				}
				out = append(out, child)
			}
			return nil
		}
		sd, path, err := typed(e.r4, n.sd, el, typ)
		if err != nil {
			return err
		}
		if typ == "BackboneElement" || typ == "Element" || el.ContentRef != "" {
			typ = "BackboneElement"
		}
		if sd.Kind == "primitive-type" {
			out = appendPrimitives(out, obj, addr, key, typ, sd)
			return nil
		}
		for _, item := range asList(obj[key]) {
			out = append(out, &snode{v: item, typ: typ, sd: sd, path: path})
		}
		return nil
	}
	if el.Choice() {
		for key := range obj { // a few keys, where a choice may have fifty types
			k, sibling := strings.CutPrefix(key, "_")
			if t, ok := info.keyType[k]; ok && !(sibling && obj[k] != nil) {
				if err := add(k, t); err != nil {
					return nil, err
				}
			}
		}
		return out, nil
	}
	if el.ContentRef != "" {
		return out, add(name, "BackboneElement")
	}
	return out, add(name, elemType(el))
}

// appendPrimitives appends the items of a primitive element key of obj:
// each value with the `_key` item of the same index.
func appendPrimitives(out []*snode, obj map[string]any, addr uintptr, key, typ string, sd *fhirdefs.StructureDefinition) []*snode {
	values, exts := obj[key], obj["_"+key]
	if values == nil && exts == nil {
		return out
	}
	list, isList := values.([]any)
	extList, extIsList := exts.([]any)
	if !isList && !extIsList {
		ext, _ := exts.(map[string]any)
		return append(out, &snode{v: values, ext: ext, typ: typ, sd: sd, path: typ, at: leaf{addr, key, -1}})
	}
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
			out = append(out, &snode{v: v, ext: ext, typ: typ, sd: sd, path: typ, at: leaf{addr, key, i}})
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

func (e *Engine) newTarget(parent *tval, el *fhirdefs.Element, typ string) (*tval, error) {
	sd, path, err := typed(e.r5, parent.sd, el, typ)
	if err != nil {
		return nil, err
	}
	t := &tval{typ: typ, sd: sd, path: path}
	if sd.Kind == "resource" && path == sd.Type {
		t.set("resourceType", &tval{scalar: typ})
	}
	return t, nil
}

func (t *tval) set(key string, v any) {
	if t.vals == nil {
		t.vals = map[string]any{}
	}
	if _, ok := t.vals[key]; !ok {
		t.keys = append(t.keys, key)
	}
	t.vals[key] = v
}

// makeChild creates the value of element name under parent, of type typ
// (required for a choice; else the element's own type unless it is a
// Resource). reuse returns the existing value of a single element. A
// primitive's children are its id and extension; its value is assigned.
func (e *Engine) makeChild(parent *tval, name, typ string, reuse bool) (*tval, error) {
	if parent.sd == nil || (parent.primitive() && name == "value") {
		return nil, fmt.Errorf("%s is a primitive: no element %s", parent.typ, name)
	}
	info, ok := e.lookup(parent.sd, parent.path, name)
	if !ok {
		return nil, fmt.Errorf("%s has no element %s", parent.path, name)
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
		if existing, ok := parent.vals[key].(*tval); ok {
			return existing, nil
		}
	}
	child, err := e.newTarget(parent, el, typ)
	if err != nil {
		return nil, err
	}
	if el.Max == 1 {
		if el.Choice() { // one of the choice's types only
			parent.keys = slices.DeleteFunc(parent.keys, func(k string) bool {
				_, other := info.keyType[k]
				if other && k != key {
					delete(parent.vals, k)
				}
				return other && k != key
			})
		}
		parent.set(key, child)
	} else {
		list, _ := parent.vals[key].([]*tval)
		parent.set(key, append(list, child))
	}
	return child, nil
}

// dispatch picks the R5 type a source item becomes at element el and
// the group that converts it: the <<type+>> group of its type when the
// element takes that type, else a <<types>> group of the pair.
func (e *Engine) dispatch(src *snode, el *fhirdefs.Element) (string, *cgroup, error) {
	if src.sd != nil && src.sd.Kind == "resource" {
		// A resource inside another (contained, Bundle.entry, Parameters)
		// passes the same gate as one imported alone.
		if err := e.Supports(src.typ); err != nil {
			return "", nil, err
		}
		return e.typePlus[src.typ].targetType, e.typePlus[src.typ], nil
	}
	candidates := el.Types
	if !el.Choice() {
		candidates = []string{elemType(el)}
	}
	for _, t := range candidates {
		if g := e.typePlus[src.typ]; g != nil && g.targetType == t {
			return t, g, nil
		}
	}
	for _, t := range candidates {
		if g := e.pairs[typePair{src.typ, t}]; g != nil {
			return t, g, nil
		}
	}
	return "", nil, fmt.Errorf("%w: %s to %s (%v)", errNoGroup, src.typ, el.Path, candidates)
}

// copyInto converts a source item into a new value of element name
// under parent, through the group its pair of types dispatches to.
func (e *Engine) copyInto(src *snode, parent *tval, name string, depth int) (*tval, error) {
	if parent.primitive() && name == "value" && src.primitive() {
		return e.assignFrom(parent, name, src, src.v, depth)
	}
	if parent.sd == nil || (parent.primitive() && name == "value") {
		return nil, fmt.Errorf("%s is a primitive: no element %s", parent.typ, name)
	}
	info, ok := e.lookup(parent.sd, parent.path, name)
	if !ok {
		return nil, fmt.Errorf("%s has no element %s", parent.path, name)
	}
	typ, g, err := e.dispatch(src, info.el)
	if err != nil {
		return nil, err
	}
	child, err := e.makeChild(parent, name, typ, false)
	if err != nil {
		return nil, err
	}
	return child, e.runGroup(g, []any{src, child}, depth+1)
}

// assign sets element name of parent to a scalar (or a primitive's own
// value, for `tgt.value = v`).
func (e *Engine) assign(parent *tval, name string, v any, hint string) (*tval, error) {
	if parent.primitive() && name == "value" {
		parent.scalar = scalarFor(parent.typ, v)
		return parent, nil
	}
	if parent.sd == nil || parent.primitive() {
		return nil, fmt.Errorf("%s is a primitive: no element %s", parent.typ, name)
	}
	info, ok := e.lookup(parent.sd, parent.path, name)
	if !ok {
		return nil, fmt.Errorf("%s has no element %s", parent.path, name)
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
	child, err := e.makeChild(parent, name, typ, false)
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
func (e *Engine) assignFrom(parent *tval, name string, src *snode, v any, depth int) (*tval, error) {
	child, err := e.assign(parent, name, v, src.typ)
	if err != nil {
		return nil, err
	}
	child.from = src.at
	if src.ext != nil && e.element != nil {
		if err := e.runGroup(e.element, []any{src, child}, depth+1); err != nil {
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

func (e *Engine) runGroup(g *cgroup, args []any, depth int) error {
	if depth > maxDepth {
		return errTooDeep
	}
	if g.extends != nil {
		if err := e.runGroup(g.extends, args[:min(len(args), len(g.extends.params))], depth+1); err != nil {
			return err
		}
	}
	sc := &scope{vars: map[string]any{}}
	for i, prm := range g.params {
		if i < len(args) && args[i] != nil {
			sc.vars[prm.Name] = args[i]
		}
	}
	return e.runRules(g, g.rules, sc, depth)
}

// runRules runs rules one after the other; a rule that fails is skipped,
// except for input too deep to convert, which ends the conversion.
func (e *Engine) runRules(g *cgroup, rules []*crule, sc *scope, depth int) error {
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
func (e *Engine) runRule(g *cgroup, r *crule, sc *scope, depth int) error {
	if r.skip != "" {
		return nil
	}
	var each func(i int, sc *scope, item *snode) error
	each = func(i int, sc *scope, item *snode) error {
		if i == len(r.sources) {
			return e.runBody(g, r, sc, item, depth)
		}
		s := r.sources[i]
		ctx, ok := sc.get(s.Context)
		if !ok {
			return fmt.Errorf("unknown variable %s", s.Context)
		}
		node, ok := ctx.(*snode)
		if !ok {
			return fmt.Errorf("%s is not a source", s.Context)
		}
		items := []*snode{node}
		if s.Element != "" {
			var err error
			if items, err = e.sourceChildren(node, s.Element); err != nil {
				return err
			}
		}
		for _, it := range items {
			if s.Type != "" && it.typ != s.Type {
				continue
			}
			inner := sc.child()
			if s.Var != "" {
				inner.vars[s.Var] = it
			}
			if s.where != nil && !e.holds(s.where, inner) {
				continue
			}
			if err := each(i+1, inner, it); err != nil {
				return err
			}
		}
		return nil
	}
	return each(0, sc, nil)
}

func (e *Engine) runBody(g *cgroup, r *crule, sc *scope, item *snode, depth int) error {
	if r.simple {
		t := r.targets[0]
		parent, ok := sc.get(t.Context)
		tv, isTarget := parent.(*tval)
		if !ok || !isTarget {
			return fmt.Errorf("%s is not a target", t.Context)
		}
		_, err := e.copyInto(item, tv, t.Element, depth)
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
		if err := e.runGroup(c.group, args, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func resolve(a argument, sc *scope) any {
	if a.Var == "" {
		return a.Literal
	}
	v, _ := sc.get(a.Var)
	return v
}

func (e *Engine) runTarget(t ctarget, sc *scope, item *snode, depth int) error {
	ctxv, ok := sc.get(t.Context)
	ctx, isTarget := ctxv.(*tval)
	if !ok || !isTarget {
		return fmt.Errorf("%s is not a target", t.Context)
	}
	bind := func(v *tval) {
		if t.Var != "" && v != nil {
			sc.vars[t.Var] = v
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
		child, err := e.makeChild(ctx, t.Element, hint, true)
		bind(child)
		return err
	}
	switch t.Transform.Kind {
	case "create":
		typ, _ := firstLiteral(t.Transform).(string)
		child, err := e.makeChild(ctx, t.Element, typ, false)
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
				child, err := e.assignFrom(ctx, t.Element, v, value, depth)
				if child != nil && tr != nil {
					child.translated = tr
				}
				bind(child)
				return err
			}
			child, err := e.copyInto(v, ctx, t.Element, depth)
			bind(child)
			return err
		case *tval:
			return fmt.Errorf("assigning target %s to %s is not supported", t.Transform.Args[0].Var, t.Element)
		default:
			child, err := e.assign(ctx, t.Element, v, "")
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
func (e *Engine) holds(c *condition, sc *scope) bool {
	left, right := e.values(c.left, sc), e.values(c.right, sc)
	if len(left) != 1 || len(right) != 1 {
		return false
	}
	equal := scalarText(left[0]) == scalarText(right[0])
	return equal != c.not
}

func (e *Engine) values(o operand, sc *scope) []any {
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
	nodes := []*snode{node}
	for _, name := range o.path[1:] {
		var next []*snode
		for _, n := range nodes {
			children, err := e.sourceChildren(n, name)
			if err != nil {
				return nil
			}
			next = append(next, children...)
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
