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
	// Dropped are the paths of R4 values that appear nowhere in the R5
	// output (Coverage.payor), a fully dropped subtree as its highest
	// path; sorted. A value renamed but kept is not reported, and neither
	// is a dropped value equal to one that survives elsewhere.
	Dropped []string
}

// revised are the R4 types that R4B revised or dropped: typed by R4B,
// their R4 content would be misread, so they are not imported until
// their maps are re-verified.
var revised = map[string]bool{
	"Evidence": true, "EvidenceVariable": true, "Citation": true, "Subscription": true,
	"SubstanceSpecification": true,
}

// Supports reports whether the engine converts an R4 resource type.
func (e *Engine) Supports(resourceType string) error {
	if revised[resourceType] || strings.HasPrefix(resourceType, "MedicinalProduct") {
		return fmt.Errorf("%w: R4 %s is not imported until its map is re-verified (R4B revised the type)", ErrNotSupported, resourceType)
	}
	g := e.typePlus[resourceType]
	if g == nil {
		return fmt.Errorf("%w: no R4 -> R5 map converts %q", ErrNotSupported, resourceType)
	}
	if sd, err := e.r4.Type(resourceType); err != nil || sd.Kind != "resource" || sd.Abstract {
		return fmt.Errorf("%w: %q is not an R4 resource type", ErrNotSupported, resourceType)
	}
	return nil
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
	seen := map[string]bool{}
	writeJSON(&buf, tgt, seen)
	return &Result{Type: g.targetType, Resource: buf.Bytes(), Dropped: dropped(rt, resource, seen)}, nil
}

// dropped lists the paths of the R4 scalars whose values the output does
// not hold, collapsing a subtree whose every value is dropped into its
// own path. The resource itself is never collapsed.
func dropped(resourceType string, resource map[string]any, seen map[string]bool) []string {
	var out []string
	for _, k := range memberNames(resource) {
		_, _, paths := droppedIn(resource[k], resourceType+"."+k, seen)
		out = append(out, paths...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// droppedIn walks a value at path: whether all of its scalars were
// dropped, whether it has any, and the dropped paths below it.
func droppedIn(v any, path string, seen map[string]bool) (all, has bool, paths []string) {
	var children []any
	var childPaths []string
	switch v := v.(type) {
	case map[string]any:
		for _, k := range memberNames(v) {
			children, childPaths = append(children, v[k]), append(childPaths, path+"."+k)
		}
	case []any: // array items share their element's path
		for _, item := range v {
			children, childPaths = append(children, item), append(childPaths, path)
		}
	case nil:
		return false, false, nil
	default:
		if seen[scalarText(v)] {
			return false, true, nil
		}
		return true, true, []string{path}
	}
	all = true
	for i, c := range children {
		a, h, p := droppedIn(c, childPaths[i], seen)
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
