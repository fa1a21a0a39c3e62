package converter

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// maxDepth bounds group calls within one conversion: deeper input is
// refused (errTooDeep fails the conversion) rather than risking the stack.
const maxDepth = 200

var errTooDeep = fmt.Errorf("the resource nests deeper than %d levels", maxDepth)

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
	var encoded *snode // the R4 value the rule's literals stand for
	if r.encodes && item != nil && item.primitive() && item.at.obj != 0 {
		encoded = item
	}
	for _, t := range r.targets {
		if err := e.runTarget(t, sc, item, encoded, depth); err != nil {
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

// runTarget runs one target of a rule; a literal it writes carries
// encoded, when set (crule.encodes).
func (e *Engine) runTarget(t ctarget, sc scope, item, encoded *snode, depth int) error {
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
			if child != nil && encoded != nil {
				child.from = encoded.at
				sc.st.carried++
			}
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
