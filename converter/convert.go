package converter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
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
	// resource could not give (Coverage.kind), sorted: each is sent with
	// FHIR's data-absent-reason extension (`unsupported`) and no value.
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
	return e.convert(rt, resource)
}

// convert converts a resource of a type Supports accepted.
func (e *Engine) convert(rt string, resource map[string]any) (*Result, error) {
	g := e.typePlus[rt]
	src, err := e.sourceNode(resource, rt)
	if err != nil {
		return nil, err
	}
	sd, err := e.r5.Type(g.targetType)
	if err != nil {
		return nil, fmt.Errorf("R5 type %s: %w", g.targetType, err)
	}
	tgt := &tval{typ: g.targetType, sd: sd, path: g.targetType}
	tgt.set("resourceType", &tval{scalar: g.targetType})
	if err := e.runGroup(g, []any{src, tgt}, 0); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	w := &writer{e: e, buf: &buf, carried: map[leaf]bool{}}
	w.object(tgt)
	slices.Sort(w.absent)
	res := &Result{Type: g.targetType, Resource: buf.Bytes(), Absent: slices.Compact(w.absent)}
	r := report{carried: w.carried, translated: w.translated}
	addr := mapAddr(resource)
	for _, k := range memberNames(resource) { // the resource itself is never collapsed
		_, _, paths := r.walk(resource[k], rt+"."+k, leaf{addr, k, -1})
		res.Dropped = append(res.Dropped, paths...)
	}
	slices.Sort(res.Dropped)
	res.Dropped = slices.Compact(res.Dropped)
	res.Translated = r.done
	return res, nil
}

// report walks the R4 resource against what the output carried.
type report struct {
	carried    map[leaf]bool
	translated map[leaf]*translation
	done       []Translation
}

// walk visits a value at path (at: where it sits) and returns whether
// all of its scalars were dropped, whether it has any, and the dropped
// paths below it, a subtree whose every scalar is dropped collapsed into
// its own path. It records the translations of the scalars it meets.
func (r *report) walk(v any, path string, at leaf) (all, has bool, paths []string) {
	var children []any
	var childPaths []string
	var childLeaves []leaf
	switch v := v.(type) {
	case map[string]any:
		addr := mapAddr(v)
		for _, k := range memberNames(v) {
			children, childPaths = append(children, v[k]), append(childPaths, path+"."+k)
			childLeaves = append(childLeaves, leaf{addr, k, -1})
		}
	case []any: // array items share their element's path
		for i, item := range v {
			children, childPaths = append(children, item), append(childPaths, path)
			childLeaves = append(childLeaves, leaf{obj: at.obj, key: at.key, index: i})
		}
	case nil:
		return false, false, nil
	default:
		if t := r.translated[at]; t != nil {
			r.done = append(r.done, Translation{Path: path, From: t.from, To: t.to, ConceptMap: t.conceptMap})
		}
		if r.carried[at] {
			return false, true, nil
		}
		return true, true, []string{path}
	}
	all = true
	for i, c := range children {
		a, h, p := r.walk(c, childPaths[i], childLeaves[i])
		if h {
			has, all = true, all && a
			paths = append(paths, p...)
		}
	}
	if has && all {
		return true, true, []string{path}
	}
	return false, has, paths
}

// memberNames are an object's member names but resourceType (a resource's
// type may change name from R4 to R5), sorted.
func memberNames(m map[string]any) []string {
	return slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if k != "resourceType" && !yield(k) {
				return
			}
		}
	})
}

// DecodeJSON decodes an R4 resource with numbers kept as written.
func DecodeJSON(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("data follows the JSON object")
	}
	return m, nil
}
