package fhirsearch

import (
	"math"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
)

// A page must cost MongoDB about its own size in index keys, whatever the
// history behind it. That holds when the index it scans is bounded on every
// key: the equality prefix (patient, code; type, source), then the key the
// page is sorted by, bounded by the date clauses and by the keyset cursor.
// The date clauses are on a record's span [start, end], the sort key is its
// start: this file turns the clauses into bounds of the start.
//
// An upper bound of the start follows from any clause (start <= end). A
// lower bound follows from a bound of the end (ge, gt, ap) only if the span
// is known not to be longer than some duration. Native observations are
// therefore stored with their span class (SpanClass): a search bounded below
// by an end scans one range of the start per class, [low - longest of the
// class, high), as one $or branch each, which MongoDB merges in sort order.
// Instants, most of what wearables send, are class 0, where the bound is
// the condition itself.

// SpanClassField is the field of a native observation that holds its span
// class.
const SpanClassField = "spanClass"

// spanClasses are the longest spans of the classes; the last class holds
// every longer span and records without a date.
var spanClasses = []time.Duration{
	0,                   // instants: heart rate, glucose, blood pressure
	time.Hour,           // workouts, short episodes
	26 * time.Hour,      // a night's sleep, a day's steps (a local day is up to 25 h)
	32 * 24 * time.Hour, // weekly and monthly summaries
	367 * 24 * time.Hour,
	time.Duration(math.MaxInt64), // longer, and no date
}

// SpanClass is the span class of a record spanning [start, end]; nil
// start: a record without a date.
func SpanClass(start, end *time.Time) int32 {
	if start == nil || end == nil {
		return int32(len(spanClasses) - 1)
	}
	span := end.Sub(*start)
	for i, longest := range spanClasses {
		if span <= longest {
			return int32(i)
		}
	}
	return int32(len(spanClasses) - 1)
}

// startRange is what a query's clauses on the sort key's date parameter
// let the start of a record's span be: at least low[class] (zero: no lower
// bound) and before high (zero: no upper bound). exact says that for an
// instant the bounds are the clauses themselves.
type startRange struct {
	low   []time.Time // by span class; one entry when the class does not matter
	high  time.Time
	exact bool
	// instant: the parameter's values are instants (lastUpdated).
	instant bool
}

// keyBound is how a query's pages are bounded on the index: the field the
// page is sorted by, and the ranges of it each branch of the $match scans.
type keyBound struct {
	field    string
	branches []bson.D // the conditions of each branch on the sort key
	// exact is the branch whose range is what the date clauses say (the
	// instants'), -1 when none.
	exact int
}

// datedSort is the sort key of a date parameter: the date parameter's
// clauses bound the key, and records without a date never match them.
// Native observations sort by the start in both directions then (sortAsc:
// the records without a date, whose descending key differs, are out).
func (q *Query) datedSort() (param *Param, classes bool) {
	if q.sort == nil {
		return nil, false
	}
	p, ok := q.resource.param(q.sort.Name)
	if !ok || p.Type != TypeDate {
		return nil, false
	}
	native := q.store.Kind == domain.StoreNative && q.resource.Native()
	return p, native && q.resource.Type == "Observation" && p.Field != p.EndField
}

// defaultSort sorts a search without _sort by the first of its date clauses
// the type sorts by, ascending, so that its range and its order are on one
// key. Without such a clause it stays in id order.
func (q *Query) defaultSort() {
	if q.sort != nil {
		return
	}
	for _, c := range q.clauses {
		if c.Param.Type != TypeDate || len(c.Dates) == 0 {
			continue
		}
		if s, ok := q.resource.sortKey(c.Param.Name, q.store.Kind); ok {
			q.sort = s
			return
		}
	}
}

// boundedSort is the sort key with the records without a date left out:
// the ascending field serves both directions (SortKey.Desc of a native
// observation differs only for records without a date).
func (q *Query) boundedSort() {
	if q.sort == nil || q.sort.Asc == q.sort.Desc {
		return
	}
	if p, _ := q.datedSort(); p == nil || !slices.ContainsFunc(q.clauses, func(c Clause) bool { return c.Param == p && len(c.Dates) > 0 }) {
		return
	}
	q.sort = &SortKey{Name: q.sort.Name, Asc: q.sort.Asc, Desc: q.sort.Asc}
}

// startRange reads the clauses on the sort key's date parameter; nil when
// none bounds it.
func (q *Query) startRange() *startRange {
	p, classes := q.datedSort()
	if p == nil {
		return nil
	}
	n := 1
	if classes {
		n = len(spanClasses)
	}
	// An instant: lastUpdated, an AuditEvent's date. The imported store's
	// date parameters are spans, whatever their fields.
	instant := p.Field != "" && p.Field == p.EndField && (p.common || q.store.Kind != domain.StoreImported)
	r := &startRange{low: make([]time.Time, n), exact: true, instant: instant}
	found := false
	for _, c := range q.clauses {
		if c.Param != p || len(c.Dates) == 0 {
			continue
		}
		found = true
		if len(c.Dates) > 1 {
			r.exact = false
		}
		var clauseLow []time.Time
		var clauseHigh time.Time
		for i, d := range c.Dates {
			startLow, endLow, high := d.startBounds(q.t.now())
			if d.Prefix == "ne" {
				r.exact = false
			}
			lows := make([]time.Time, n)
			for k := range lows {
				lows[k] = startLow
				if !endLow.IsZero() {
					longest := time.Duration(0)
					switch {
					case classes:
						longest = spanClasses[k]
					case !instant:
						longest = time.Duration(math.MaxInt64) // a span of any length
					}
					if longest != time.Duration(math.MaxInt64) {
						lows[k] = later(startLow, endLow.Add(-longest))
					}
				}
			}
			if i == 0 {
				clauseLow, clauseHigh = lows, high
				continue
			}
			for k := range clauseLow { // the values are OR'ed: the hull
				clauseLow[k] = earlier(clauseLow[k], lows[k])
			}
			if high.IsZero() || clauseHigh.IsZero() {
				clauseHigh = time.Time{}
			} else if high.After(clauseHigh) {
				clauseHigh = high
			}
		}
		for k := range r.low { // the clauses are AND'ed: the intersection
			r.low[k] = later(r.low[k], clauseLow[k])
		}
		if !clauseHigh.IsZero() && (r.high.IsZero() || clauseHigh.Before(r.high)) {
			r.high = clauseHigh
		}
	}
	if !found {
		return nil
	}
	return r
}

// startBounds are the bounds of a span's start that a date value implies:
// the start at least startLow, the end at least endLow, the start before
// high (zero: none).
func (d DateRange) startBounds(now time.Time) (startLow, endLow, high time.Time) {
	lo, hi := d.Low, d.High
	switch d.Prefix {
	case "eq", "":
		return lo, time.Time{}, hi
	case "gt":
		return time.Time{}, hi, time.Time{}
	case "ge":
		return time.Time{}, lo, time.Time{}
	case "lt", "eb":
		return time.Time{}, time.Time{}, lo
	case "le":
		return time.Time{}, time.Time{}, hi
	case "sa":
		return hi, time.Time{}, time.Time{}
	case "ap":
		gap := time.Duration(0.1 * math.Max(math.Abs(float64(now.Sub(lo))), math.Abs(float64(now.Sub(hi)))))
		return time.Time{}, lo.Add(-gap), hi.Add(gap)
	}
	return time.Time{}, time.Time{}, time.Time{} // ne
}

// later is the later of two lower bounds; zero is no bound.
func later(a, b time.Time) time.Time {
	if a.IsZero() || b.After(a) {
		return b
	}
	return a
}

// earlier is the earlier of two lower bounds of alternatives; zero (no
// bound) wins.
func earlier(a, b time.Time) time.Time {
	if a.IsZero() || b.IsZero() {
		return time.Time{}
	}
	if b.Before(a) {
		return b
	}
	return a
}

// keyBound is how the query's pages are bounded on the sort key: nil when
// the query is not sorted by a date it has clauses on. The records without
// a date sort at domain.SortLastAscending: a bounded search stops before.
func (q *Query) keyBound() *keyBound {
	r := q.startRange()
	if r == nil {
		return nil
	}
	field := q.sort.Asc
	rangeOf := func(low time.Time) bson.M {
		cond := bson.M{}
		if !low.IsZero() {
			cond["$gte"] = low.UTC()
		}
		high := domain.SortLastAscending
		if !r.high.IsZero() && r.high.Before(high) {
			high = r.high.UTC()
		}
		cond["$lt"] = high
		return cond
	}
	b := &keyBound{field: field, exact: -1}
	if len(r.low) == 1 || allEqual(r.low) {
		b.branches = []bson.D{{{Key: field, Value: rangeOf(r.low[0])}}}
		if r.exact && r.instant {
			b.exact = 0
		}
		return b
	}
	for k, low := range r.low {
		b.branches = append(b.branches, bson.D{{Key: SpanClassField, Value: int32(k)}, {Key: field, Value: rangeOf(low)}})
	}
	// Records stored before span classes: no class, no bound below.
	b.branches = append(b.branches, bson.D{{Key: SpanClassField, Value: nil}, {Key: field, Value: rangeOf(r.low[len(r.low)-1])}})
	if r.exact {
		b.exact = 0
	}
	return b
}

func allEqual(ts []time.Time) bool {
	for _, t := range ts[1:] {
		if !t.Equal(ts[0]) {
			return false
		}
	}
	return true
}
