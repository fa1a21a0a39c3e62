package converter

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"exchange/domain"
)

// Result is one converted resource.
type Result struct {
	// Type is the R5 resource type (R4 DeviceUseStatement is DeviceUsage).
	Type string
	// Resource is the R5 JSON, members in the order the maps wrote them.
	Resource []byte
	// Dropped are the paths of the R4 values that no executed rule carried
	// into the R5 output (Coverage.payor), a fully dropped subtree as its
	// highest path; sorted. A value renamed but kept is not reported; a
	// value dropped is, even when the same text survives elsewhere.
	Dropped []string
	// Translated are the R4 codes translate() changed, in R4 path order.
	Translated []Translation
	// Absent are the R5 paths of the elements R5 requires that the R4
	// resource could not give (Coverage.kind; Claim.contained.kind for a
	// contained Coverage), from the resource converted and without
	// indexes, sorted: each is sent with FHIR's data-absent-reason
	// extension (`unsupported`) and no value.
	Absent []string
}

// Translation is an R4 code that a ConceptMap translated into another R5
// code.
type Translation struct {
	Path       string // the R4 path: Encounter.status
	From, To   string // finished, completed
	ConceptMap string // the ConceptMap's canonical URL
}

// Supports reports whether the engine converts an R4 resource type: one
// that an official map converts and whose map reads only elements that
// the R4 definitions define (verified once per type). R4B revised
// Evidence, EvidenceVariable and Subscription and replaced the
// MedicinalProduct family and SubstanceSpecification; typed by R4's own
// definitions, as every R4 type is, their maps pass that check.
func (e *Engine) Supports(resourceType string) error {
	g := e.typePlus[resourceType]
	if g == nil {
		return fmt.Errorf("%w: no R4 -> R5 map converts %q", ErrNotSupported, resourceType)
	}
	if v, ok := e.supported.Load(resourceType); ok { // bounded: only types with a map
		err, _ := v.(error)
		return err
	}
	var err error
	if sd, typeErr := e.r4.Type(resourceType); typeErr != nil || sd.Kind != "resource" || sd.Abstract {
		err = fmt.Errorf("%w: %q is not an R4 resource type", ErrNotSupported, resourceType)
	} else if undefined := e.undefinedReads(resourceType); len(undefined) > 0 {
		err = fmt.Errorf("%w: R4 %s is not imported: its map reads %s, which the R4 definitions do not define", ErrNotSupported, resourceType, strings.Join(undefined, ", "))
	}
	e.supported.Store(resourceType, err)
	return err
}

// Convert converts one R4 resource, decoded with json.Decoder.UseNumber
// so that decimals keep their digits. Rules that cannot run are skipped;
// the error is for input that cannot be converted at all.
func (e *Engine) Convert(resource map[string]any) (*Result, error) {
	rt, _ := resource["resourceType"].(string)
	if err := e.Supports(rt); err != nil {
		return nil, err
	}
	return e.convert(rt, resource, nil)
}

// convert converts a resource of a type Supports accepted; refs, when
// set, rewrites its references (references.go).
func (e *Engine) convert(rt string, resource map[string]any, refs domain.ReferenceRewriter) (*Result, error) {
	g := e.typePlus[rt]
	src, err := e.sourceNode(resource, rt)
	if err != nil {
		return nil, err
	}
	d, err := e.typeDef(e.r5, g.targetType)
	if err != nil {
		return nil, fmt.Errorf("R5 type %s: %w", g.targetType, err)
	}
	st := &stacks{}
	tgt := st.newTval(tval{typ: g.targetType, def: d})
	st.set(tgt, "resourceType", st.newTval(tval{scalar: g.targetType}))
	if err := e.runGroup(g, []any{src, tgt}, st, 0); err != nil {
		return nil, err
	}
	if refs != nil {
		e.rewriteReferences(tgt, st, refs)
	}
	var buf bytes.Buffer
	w := &writer{e: e, buf: &buf, carried: make(map[leaf]bool, st.carried), at: []string{g.targetType}}
	w.object(tgt)
	slices.Sort(w.absent)
	res := &Result{Type: g.targetType, Resource: buf.Bytes(), Absent: slices.Compact(w.absent)}
	r := report{carried: w.carried, translated: w.translated, path: []byte(rt)}
	addr := mapAddr(resource)
	for k, v := range resource { // the resource itself is never collapsed
		if k != "resourceType" {
			r.path = append(append(r.path[:len(rt)], '.'), k...)
			r.pos = append(append(r.pos[:0], k...), 0)
			r.walk(v, leaf{addr, k, -1})
		}
	}
	slices.Sort(r.dropped)
	res.Dropped = slices.Compact(r.dropped)
	// Map order is random: the translations are put in the order of a
	// walk of the members by name, array items by index.
	slices.SortFunc(r.done, func(a, b placed) int { return strings.Compare(a.pos, b.pos) })
	for _, t := range r.done {
		res.Translated = append(res.Translated, t.Translation)
	}
	return res, nil
}

// placed is a translation and its place in the R4 resource: the names
// of the members and the indexes of the items that lead to it, each name
// ended by a zero byte and each index in four bytes, big-endian, so
// that places compare as strings in the order of a walk of the members
// by name and of the items by index.
type placed struct {
	Translation
	pos string
}

// report walks the R4 resource against what the output carried.
type report struct {
	carried    map[leaf]bool
	translated map[leaf]*translation
	done       []placed
	dropped    []string
	// path is the R4 path of the value walked (array items share their
	// element's path) and pos its place (see placed): built in place,
	// made strings only for a value reported.
	path, pos []byte
}

// walk visits a value at r.path (at: where it sits) and returns whether
// all of its scalars were dropped and whether it has any. It adds the
// dropped paths below it to r.dropped, a subtree whose every scalar is
// dropped collapsed into its own path, and records the translations of
// the scalars it meets. A resource's type is not walked: it may change
// name from R4 to R5.
func (r *report) walk(v any, at leaf) (all, has bool) {
	mark := len(r.dropped)
	all = true
	visit := func(child any, at leaf) {
		if a, h := r.walk(child, at); h {
			has, all = true, all && a
		}
	}
	switch v := v.(type) {
	case map[string]any:
		addr, n, p := mapAddr(v), len(r.path), len(r.pos)
		for k, child := range v {
			if k != "resourceType" {
				r.path = append(append(r.path[:n], '.'), k...)
				r.pos = append(append(r.pos[:p], k...), 0)
				visit(child, leaf{addr, k, -1})
			}
		}
		r.path, r.pos = r.path[:n], r.pos[:p]
	case []any:
		p := len(r.pos)
		for i, item := range v {
			r.pos = binary.BigEndian.AppendUint32(r.pos[:p], uint32(i))
			visit(item, leaf{obj: at.obj, key: at.key, index: i})
		}
		r.pos = r.pos[:p]
	case nil:
		return false, false
	default:
		if t := r.translated[at]; t != nil {
			r.done = append(r.done, placed{Translation{Path: string(r.path), From: t.from, To: t.to, ConceptMap: t.conceptMap}, string(r.pos)})
		}
		if r.carried[at] {
			return false, true
		}
		r.dropped = append(r.dropped, string(r.path))
		return true, true
	}
	if has && all {
		r.dropped = append(r.dropped[:mark], string(r.path))
		return true, true
	}
	return false, has
}
