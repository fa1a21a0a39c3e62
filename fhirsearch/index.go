package fhirsearch

import (
	"fmt"
	"slices"
	"time"

	"exchange/domain"
	"exchange/fhirdefs"
)

// The search index of an imported resource is extracted once, when it is
// written, from the FHIRPath expressions of the R5 SearchParameter
// definitions, and stored beside the resource:
//
//	search  one multikey array of "param|key" strings: token keys
//	        (system|code, code, system|), folded string values, and
//	        references (Type/id and id)
//	dates   per date parameter, the [start, end] its values span (their
//	        union when there are several): two scalars a range query and
//	        an index can use, where an array of ranges would need
//	        $elemMatch
//
// The planner translates imported-store searches onto these fields.

// Indexer extracts search indexes, with every configured parameter's
// expression compiled once.
type Indexer struct {
	params     map[string][]indexedParam // by resource type
	sortParams map[string]string         // the date parameter each type sorts by
}

type indexedParam struct {
	name string
	typ  ParamType
	path fhirPath
}

// NewIndexer compiles the expressions of every imported-store parameter of
// the configuration table: the definition's expression from the R5
// package, or the table's own where R5 defines none. A missing or
// unsupported expression is an error, at start-up rather than at write.
func NewIndexer(defs *fhirdefs.Package) (*Indexer, error) {
	ix := &Indexer{params: map[string][]indexedParam{}, sortParams: map[string]string{}}
	for _, r := range Resources {
		if !r.Imported {
			continue
		}
		ix.params[r.Type] = []indexedParam{}
		ix.sortParams[r.Type] = r.sortParam()
		for _, p := range r.Params {
			if !p.Imported {
				continue
			}
			expr := p.Expression
			if expr == "" {
				sp, err := defs.SearchParameter(r.Type, p.Name)
				if err != nil && p.Join == domain.JoinPatient {
					continue // no reference to the patient in the type: its source's patient answers
				}
				if err != nil {
					return nil, fmt.Errorf("search parameter %s of %s: %w", p.Name, r.Type, err)
				}
				expr = sp.Expression
			}
			path, err := compileFHIRPath(expr)
			if err != nil {
				return nil, fmt.Errorf("search parameter %s of %s: %w", p.Name, r.Type, err)
			}
			ix.params[r.Type] = append(ix.params[r.Type], indexedParam{name: p.Name, typ: p.Type, path: path})
		}
	}
	return ix, nil
}

// Keeps reports whether the imported store keeps a type: one of the
// configuration table.
func (ix *Indexer) Keeps(resourceType string) bool {
	_, ok := ix.params[resourceType]
	return ok
}

// Index extracts the search index of a resource of a configured type.
func (ix *Indexer) Index(resourceType string, resource map[string]any) domain.ResourceIndex {
	idx := domain.ResourceIndex{Keys: []string{}, Dates: map[string]domain.Span{}}
	add := func(param string, keys ...string) {
		for _, k := range keys {
			if k = param + "|" + k; !slices.Contains(idx.Keys, k) {
				idx.Keys = append(idx.Keys, k)
			}
		}
	}
	for _, p := range ix.params[resourceType] {
		for _, n := range p.path.eval(resourceType, resource) {
			switch p.typ {
			case TypeToken:
				add(p.name, tokenValues(n.value)...)
			case TypeString:
				for _, s := range stringValues(n.value) {
					if key := domain.SearchKey(s); key != "" {
						add(p.name, key)
					}
				}
			case TypeReference:
				add(p.name, referenceValues(n.value)...)
			case TypeDate:
				if span, ok := dateSpan(n.value); ok {
					if prev, seen := idx.Dates[p.name]; seen {
						span = domain.Span{Start: minTime(prev.Start, span.Start), End: maxTime(prev.End, span.End)}
					}
					idx.Dates[p.name] = span
				}
			}
		}
	}
	if span, ok := idx.Dates[ix.sortParams[resourceType]]; ok {
		start := span.Start
		idx.SortDate = &start
	}
	return idx
}

// tokenValues are the token keys of a Coding, CodeableConcept,
// CodeableReference, Identifier, code or boolean.
func tokenValues(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case bool:
		return []string{fmt.Sprint(v)}
	case map[string]any:
		var keys []string
		if codings, ok := v["coding"].([]any); ok {
			for _, c := range codings {
				keys = append(keys, tokenValues(c)...)
			}
			return keys
		}
		if concept, ok := v["concept"].(map[string]any); ok { // CodeableReference
			return tokenValues(concept)
		}
		system, _ := v["system"].(string)
		if code, ok := v["code"].(string); ok { // Coding
			return TokenKeys(system, code)
		}
		if value, ok := v["value"].(string); ok { // Identifier
			return TokenKeys(system, value)
		}
	}
	return nil
}

// stringValues are the searchable strings of a string, HumanName or Address.
func stringValues(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case map[string]any:
		var out []string
		for _, k := range []string{"family", "given", "text", "prefix", "suffix", "line", "city", "district", "state", "postalCode", "country"} {
			switch x := v[k].(type) {
			case string:
				out = append(out, x)
			case []any:
				for _, s := range x {
					if str, ok := s.(string); ok {
						out = append(out, str)
					}
				}
			}
		}
		return out
	}
	return nil
}

// referenceValues are the keys of a Reference (Type/id and id) or a
// canonical (as written, and Type/id when it ends so).
func referenceValues(v any) []string {
	var ref string
	switch v := v.(type) {
	case string:
		ref = v
	case map[string]any:
		ref, _ = v["reference"].(string)
	}
	if ref == "" {
		return nil
	}
	keys := []string{}
	if typ, id, ok := typeAndID(ref); ok {
		keys = append(keys, typ+"/"+id, id)
	}
	if !slices.Contains(keys, ref) {
		keys = append(keys, ref)
	}
	return keys
}

// dateSpan is the span of a date, dateTime, instant, Period or Timing.
func dateSpan(v any) (domain.Span, bool) {
	switch v := v.(type) {
	case string:
		r, err := parseDate("", v)
		if err != nil {
			return domain.Span{}, false
		}
		// The span ends a millisecond before the next value of the same
		// precision; a value finer than a millisecond spans only itself.
		return domain.Span{Start: r.Low, End: maxTime(r.Low, r.High.Add(-time.Millisecond))}, true
	case map[string]any:
		if events, ok := v["event"].([]any); ok { // Timing
			var span domain.Span
			found := false
			for _, e := range events {
				if s, ok := dateSpan(e); ok {
					if !found {
						span, found = s, true
					} else {
						span = domain.Span{Start: minTime(span.Start, s.Start), End: maxTime(span.End, s.End)}
					}
				}
			}
			return span, found
		}
		start, hasStart := dateSpan(v["start"])
		end, hasEnd := dateSpan(v["end"])
		switch { // Period: an open end reaches as far as dates go
		case hasStart && hasEnd && end.End.Before(start.Start):
			return domain.Span{}, false // backwards (invariant per-1, not validated): matches no date
		case hasStart && hasEnd:
			return domain.Span{Start: start.Start, End: end.End}, true
		case hasStart:
			return domain.Span{Start: start.Start, End: domain.SortLastAscending}, true
		case hasEnd:
			return domain.Span{Start: domain.SortLastDescending, End: end.End}, true
		}
	}
	return domain.Span{}, false
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
