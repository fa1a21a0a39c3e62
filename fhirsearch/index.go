package fhirsearch

import (
	"encoding/json"
	"fmt"
	"slices"
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
	idx := domain.ResourceIndex{Keys: []string{}, Dates: map[string]domain.Span{}, Numbers: map[string]domain.NumberSpan{}}
	r, ok := c.byType[resourceType]
	if !ok {
		return idx
	}
	// seen dedupes the keys: a set, not a search of idx.Keys, since a
	// resource may carry tens of thousands of codings or identifiers and
	// a linear search per key made its write quadratic (20,000 codings
	// took seconds of CPU).
	seen := map[string]bool{}
	add := func(param string, keys ...string) {
		for _, k := range keys {
			if k = param + "|" + k; !seen[k] {
				seen[k] = true
				idx.Keys = append(idx.Keys, k)
			}
		}
	}
	for _, p := range r.indexed {
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
			case TypeURI:
				add(p.name, uriValues(n.value)...)
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
					add(p.name, units...)
				}
			}
		}
	}
	if span, ok := idx.Dates[r.sortParam()]; ok {
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

// uriValues are the keys of a uri, url or canonical: as written, and a
// canonical's url without its |version.
func uriValues(v any) []string {
	s, ok := v.(string)
	if !ok || s == "" {
		return nil
	}
	if url, _, versioned := strings.Cut(s, "|"); versioned && url != "" {
		return []string{s, url}
	}
	return []string{s}
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
