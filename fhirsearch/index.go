package fhirsearch

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"exchange/domain"
)

// The search index of an imported resource is extracted once, when it is
// written, from the FHIRPath expressions of the R5 SearchParameter
// definitions, and stored beside the resource:
//
//	search   one multikey array of "param|key" strings: token keys
//	         (system|code, code, system|), folded string values,
//	         references (Type/id and id), uris as written, and the units
//	         of quantities (system|code, |code, |unit)
//	dates    per date parameter, the [start, end] its values span (their
//	         union when there are several): two scalars a range query and
//	         an index can use, where an array of ranges would need
//	         $elemMatch
//	numbers  per number or quantity parameter, the [low, high] its values
//	         span, likewise
//
// The planner translates imported-store searches onto these fields.

// indexedParam is a parameter of the imported store with its compiled
// expression.
type indexedParam struct {
	name string
	typ  ParamType
	path fhirPath
}

// Index extracts the search index of a resource of a type the store
// keeps (Keeps); of any other type it is empty.
func (c *Catalog) Index(resourceType string, resource map[string]any) domain.ResourceIndex {
	r, ok := c.byType[resourceType]
	if !ok {
		return domain.ResourceIndex{Keys: []string{}, Dates: map[string]domain.Span{}, Numbers: map[string]domain.NumberSpan{}}
	}
	x := indexer{idx: domain.ResourceIndex{Keys: make([]string, 0, linearKeys), Dates: map[string]domain.Span{}, Numbers: map[string]domain.NumberSpan{}}}
	idx := &x.idx
	for _, p := range r.indexed {
		x.nodes = p.path.evalInto(x.nodes[:0], resourceType, resource, &x.steps)
		for _, n := range x.nodes {
			switch p.typ {
			case TypeToken:
				x.addTokens(p.name, n.value)
			case TypeString:
				x.addStrings(p.name, n.value)
			case TypeReference:
				x.addReferences(p.name, n.value)
			case TypeURI:
				x.addURIs(p.name, n.value)
			case TypeDate:
				if span, ok := dateSpan(n.value); ok {
					if prev, seen := idx.Dates[p.name]; seen {
						span = domain.Span{Start: minTime(prev.Start, span.Start), End: maxTime(prev.End, span.End)}
					}
					idx.Dates[p.name] = span
				}
			case TypeNumber, TypeQuantity:
				values, units := quantityValues(n.value)
				for _, v := range values {
					span := domain.NumberSpan{Low: v, High: v}
					if prev, seen := idx.Numbers[p.name]; seen {
						span = domain.NumberSpan{Low: min(prev.Low, v), High: max(prev.High, v)}
					}
					idx.Numbers[p.name] = span
				}
				if p.typ == TypeQuantity && len(values) > 0 {
					for _, u := range units {
						x.add(p.name + "|" + u)
					}
				}
			}
		}
	}
	if span, ok := idx.Dates[r.sortParam()]; ok {
		start := span.Start
		idx.SortDate = &start
	}
	return x.idx
}

// indexer is the index of one resource as Index builds it. Each key is
// written once, "param|" and its parts in one concatenation, straight
// into the keys (Index is a tenth of the CPU of an import), and
// the buffers of the FHIRPath evaluation serve every parameter of the
// resource. Nothing in it outlives the call but the index returned.
type indexer struct {
	idx domain.ResourceIndex
	// seen dedupes the keys once they are more than linearKeys: a set,
	// since a resource may carry tens of thousands of codings or
	// identifiers and a linear search per key made its write quadratic
	// (20,000 codings took seconds of CPU). Below, a search of the few
	// keys written is cheaper than making and hashing into a set.
	seen  map[string]struct{}
	nodes []node
	steps [2][]node
}

// linearKeys is how many keys the indexer dedupes by searching them.
const linearKeys = 16

// add appends a key unless it is there already.
func (x *indexer) add(key string) {
	switch {
	case x.seen != nil:
		if _, dup := x.seen[key]; dup {
			return
		}
		x.seen[key] = struct{}{}
	case slices.Contains(x.idx.Keys, key):
		return
	case len(x.idx.Keys) == linearKeys:
		x.seen = make(map[string]struct{}, 4*linearKeys)
		for _, k := range x.idx.Keys {
			x.seen[k] = struct{}{}
		}
		x.seen[key] = struct{}{}
	}
	x.idx.Keys = append(x.idx.Keys, key)
}

// addTokens adds the token keys (TokenKeys) of a Coding,
// CodeableConcept, CodeableReference, Identifier, code or boolean.
func (x *indexer) addTokens(param string, v any) {
	switch v := v.(type) {
	case string:
		x.add(param + "|" + v)
	case bool:
		x.add(param + "|" + strconv.FormatBool(v))
	case map[string]any:
		if codings, ok := v["coding"].([]any); ok {
			for _, c := range codings {
				x.addTokens(param, c)
			}
			return
		}
		if concept, ok := v["concept"].(map[string]any); ok { // CodeableReference
			x.addTokens(param, concept)
			return
		}
		system, _ := v["system"].(string)
		code, ok := v["code"].(string) // Coding
		if !ok {
			code, ok = v["value"].(string) // Identifier
		}
		if ok {
			tokens, n := TokenKeyTokens(system, code)
			for _, t := range tokens[:n] {
				if t.HasSystem { // param|t.Key()
					x.add(param + "|" + t.System + "|" + t.Code)
				} else {
					x.add(param + "|" + t.Code)
				}
			}
		}
	}
}

// UpstreamMark begins the index key of a reference in the form its
// source wrote it (Patient/<upstream id>), beside the key of the form the
// imported store holds (Patient/<uuid>): "subject|^Patient/p1". A
// reference search of the imported store matches either.
const UpstreamMark = "^"

// AddUpstreamReferences implements domain.ResourceIndexer: beside each key
// of a reference parameter that holds a stored reference (its Type/id and
// id forms), the keys of the upstream one.
func (c *Catalog) AddUpstreamReferences(idx *domain.ResourceIndex, refs []domain.UpstreamReference) {
	x := indexer{idx: *idx}
	for _, key := range idx.Keys {
		param, value, ok := strings.Cut(key, "|")
		if !ok {
			continue
		}
		for _, r := range refs {
			_, storedID, _ := strings.Cut(r.Stored, "/")
			_, upstreamID, _ := strings.Cut(r.Upstream, "/")
			switch value {
			case r.Stored:
				x.add(param + "|" + UpstreamMark + r.Upstream)
			case storedID:
				x.add(param + "|" + UpstreamMark + upstreamID)
			}
		}
	}
	*idx = x.idx
}

// addStrings adds the folded searchable strings (domain.SearchKey) of a
// string, HumanName or Address.
func (x *indexer) addStrings(param string, v any) {
	add := func(s string) {
		if key := domain.SearchKey(s); key != "" {
			x.add(param + "|" + key)
		}
	}
	switch v := v.(type) {
	case string:
		add(v)
	case map[string]any:
		for _, k := range stringParts {
			switch s := v[k].(type) {
			case string:
				add(s)
			case []any:
				for _, s := range s {
					if str, ok := s.(string); ok {
						add(str)
					}
				}
			}
		}
	}
}

// stringParts are the searchable elements of a HumanName or Address, in
// the order their keys are written.
var stringParts = []string{"family", "given", "text", "prefix", "suffix", "line", "city", "district", "state", "postalCode", "country"}

// addReferences adds the keys of a Reference (Type/id and id) or a
// canonical (as written, and Type/id when it ends so).
func (x *indexer) addReferences(param string, v any) {
	var ref string
	switch v := v.(type) {
	case string:
		ref = v
	case map[string]any:
		ref, _ = v["reference"].(string)
	}
	if ref == "" {
		return
	}
	typ, id, ok := typeAndID(ref)
	if ok {
		x.add(param + "|" + typ + "/" + id)
		x.add(param + "|" + id)
		if len(ref) == len(typ)+len("/")+len(id) {
			return // typ and id are ref's last segments: ref is typ/id, written
		}
	}
	x.add(param + "|" + ref)
}

// addURIs adds the keys of a uri, url or canonical: as written, and a
// canonical's url without its |version.
func (x *indexer) addURIs(param string, v any) {
	s, ok := v.(string)
	if !ok || s == "" {
		return
	}
	x.add(param + "|" + s)
	if url, _, versioned := strings.Cut(s, "|"); versioned && url != "" {
		x.add(param + "|" + url)
	}
}

// quantityValues are the numbers of a number (integer, decimal), a
// Quantity (and its kinds Age, Duration, Count, Distance), Money or Range,
// and the unit keys a quantity search matches: system|code and |code of
// the coded unit, |unit of the human one, a currency as an ISO 4217 code.
func quantityValues(v any) (values []float64, units []string) {
	switch v := v.(type) {
	case json.Number:
		if f, err := v.Float64(); err == nil {
			return []float64{f}, nil
		}
	case float64:
		return []float64{v}, nil
	case map[string]any:
		for _, bound := range []string{"low", "high"} { // Range
			if q, ok := v[bound]; ok {
				vs, us := quantityValues(q)
				values, units = append(values, vs...), append(units, us...)
			}
		}
		if values != nil {
			return values, units
		}
		values, _ = quantityValues(v["value"])
		if values == nil {
			return nil, nil
		}
		system, _ := v["system"].(string)
		if code, _ := v["code"].(string); code != "" {
			units = append(units, "|"+code)
			if system != "" {
				units = append(units, system+"|"+code)
			}
		}
		if unit, _ := v["unit"].(string); unit != "" {
			units = append(units, "|"+unit)
		}
		if currency, _ := v["currency"].(string); currency != "" { // Money
			units = append(units, "|"+currency, currencySystem+"|"+currency)
		}
		return values, units
	}
	return nil, nil
}

// currencySystem is the code system of Money.currency.
const currencySystem = "urn:iso:std:iso:4217"

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
		case hasEnd && end.End.Before(domain.SortLastDescending):
			return domain.Span{}, false // ends in year 0, which FHIR has not: before all dates, matches none
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
