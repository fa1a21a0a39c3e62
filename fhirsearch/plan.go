package fhirsearch

import (
	"cmp"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
)

// matchNothing is a condition no document meets.
var matchNothing = bson.M{"_id": bson.M{"$in": bson.A{}}}

// hidden are the fields a collection's documents hold that the FHIR form
// never shows: never fetched. An observation's index keys (its search
// tokens and sort keys) are a third of what a page would read otherwise.
var hidden = map[string][]string{
	"observations":     {"omh", "codeTokens", "identifierTokens", "sortAsc", "sortDesc", SpanClassField, "valueNumber", "valueUnit", "lastUpdated"},
	"users":            {"passwordHash"},
	importedCollection: {"resource"}, // the parsed form kept for analysts; the JSON is served
}

// Plan translates the query, narrowed to scope, into one pipeline:
//
//	$match  the index prefix first (the longest run of the collection's
//	        leading equality fields the query has, or for a study search
//	        a $or of one branch per patient), everything else under $and,
//	        with the keyset cursor of the page last
//	$sort   the sort key, then _id, in the same direction
//	$limit  the page size plus one, to know whether a next page exists
//	$project  without what the FHIR form never shows
//
// It fetches no entries for _summary=count or _count=0, and gives the
// condition to count by for _summary=count and _total=accurate. A search of
// the imported store runs on its collection, whatever the type.
func (q *Query) Plan(scope domain.Scope) (*domain.SearchPlan, error) {
	r := q.resource
	b := &matchBuilder{simple: map[string]any{}}
	kb := q.keyBound()
	var bounded *Param // the date parameter kb bounds the sort key by
	if kb != nil {
		bounded, _ = q.datedSort()
	}
	var dated bson.A // the conditions of bounded's clauses
	addClause := func(c Clause, field string, cond any, simple bool) {
		if c.Param == bounded && !simple {
			dated = append(dated, cond)
			return
		}
		b.add(field, cond, simple)
	}
	collection, prefix := r.Collection, r.IndexPrefix
	switch {
	case q.store.Kind == domain.StoreImported:
		collection, prefix = importedCollection, importedIndexPrefix
		b.addSimple("resourceType", r.Type)
		if scope.SourceIDs != nil {
			b.addSimple("sourceId", bson.M{"$in": int64s(scope.SourceIDs)})
		}
		if scope.PatientIDs != nil {
			b.and = append(b.and, importedPatientCondition(scope.PatientIDs, q.patientRefs...))
		}
		for _, c := range q.clauses {
			field, cond, simple := importedCondition(c, q.t.now())
			addClause(c, field, cond, simple)
		}
		if len(q.alternatives) > 0 {
			b.and = append(b.and, q.alternativesCondition(importedCondition))
		}
	case q.store.Kind == domain.StoreNone || !r.Native():
		// _source named no store, or the type has no native store.
		if collection == "" {
			collection = importedCollection
		}
		b.and = append(b.and, matchNothing)
	default:
		for k, v := range r.BaseFilter {
			b.and = append(b.and, bson.M{k: v})
		}
		switch {
		case scope.Codes != nil:
			// A study search's per-patient branches are a top-level $or, so
			// that each branch is planned on its own index (patientId,
			// codeTokens).
			if b.or = consentBranches(scope); len(b.or) == 0 {
				b.and = append(b.and, matchNothing)
			}
		case scope.PatientIDs != nil:
			b.addSimple(cmp.Or(r.PatientField, "patientId"), bson.M{"$in": int64s(scope.PatientIDs)})
		}
		if scope.IDs != nil {
			b.and = append(b.and, bson.M{"_id": bson.M{"$in": int64s(scope.IDs)}})
		}
		for _, c := range q.clauses {
			field, cond, simple := clauseCondition(c, q.t.now())
			addClause(c, field, cond, simple)
		}
		if len(q.alternatives) > 0 {
			b.and = append(b.and, q.alternativesCondition(clauseCondition))
		}
	}
	if scope.Reach != nil {
		b.and = append(b.and, q.reachCondition(scope.Reach))
	}
	top, and := b.finish(prefix)
	filter := bounds(top, and, dated, kb, nil)

	if q.stream {
		// An export's part: every match, in the order the database finds
		// them (a sort would hold them all in FerretDB's memory).
		plan := &domain.SearchPlan{Collection: collection, Pipeline: []any{bson.D{{Key: "$match", Value: filter}}}}
		if proj := q.projection(); len(proj) > 0 {
			plan.Pipeline = append(plan.Pipeline, bson.D{{Key: "$project", Value: proj}})
		}
		return plan, nil
	}
	plan := &domain.SearchPlan{Collection: collection, PageSize: q.count}
	if q.summaryCount || q.total {
		plan.Filter = filter
	}
	if q.summaryCount || q.count == 0 {
		return plan, nil
	}
	match := filter
	if q.after != nil {
		from, rest := q.cursorBound(), slices.Clone(and)
		if q.sort != nil { // ties of the sort key: the exact condition
			rest = append(rest, q.continuation())
		}
		match = bounds(top, rest, dated, kb, &from)
	}
	plan.Pipeline = []any{
		bson.D{{Key: "$match", Value: match}},
		bson.D{{Key: "$sort", Value: q.sortSpec()}},
		bson.D{{Key: "$limit", Value: int64(q.count + 1)}},
	}
	if proj := q.projection(); len(proj) > 0 {
		plan.Pipeline = append(plan.Pipeline, bson.D{{Key: "$project", Value: proj}})
	}
	return plan, nil
}

// alternativesCondition is an export's type filters: a $or of one $and
// per filter, of its clauses' conditions (cond translates a clause in the
// query's store).
func (q *Query) alternativesCondition(cond func(Clause, time.Time) (string, any, bool)) any {
	alts := bson.A{}
	for _, clauses := range q.alternatives {
		all := bson.A{}
		for _, c := range clauses {
			field, c, simple := cond(c, q.t.now())
			if simple {
				c = bson.M{field: c}
			}
			all = append(all, c)
		}
		if len(all) == 0 {
			return bson.M{} // a filter without parameters matches everything
		}
		alts = append(alts, bson.M{"$and": all})
	}
	return orOf(alts)
}

// matchBuilder gathers the conditions of a $match: simple ones (one field,
// an equality or $in) that the index prefix may take, the rest for $and,
// and top-level $or branches.
type matchBuilder struct {
	simple map[string]any
	and    bson.A
	or     bson.A
}

func (b *matchBuilder) addSimple(field string, cond any) {
	if _, taken := b.simple[field]; taken {
		b.and = append(b.and, bson.M{field: cond})
		return
	}
	b.simple[field] = cond
}

func (b *matchBuilder) add(field string, cond any, simple bool) {
	if simple {
		b.addSimple(field, cond)
	} else {
		b.and = append(b.and, cond)
	}
}

// finish places the index prefix at the top: the leading equality fields
// present, in index order; every other condition goes under $and.
func (b *matchBuilder) finish(prefix []string) (bson.D, bson.A) {
	top := bson.D{}
	if len(b.or) > 0 {
		top = append(top, bson.E{Key: "$or", Value: b.or})
	}
	for _, f := range prefix {
		cond, ok := b.simple[f]
		if !ok {
			break
		}
		top = append(top, bson.E{Key: f, Value: cond})
		delete(b.simple, f)
	}
	and := b.and
	for _, f := range sortedKeys(b.simple) {
		and = append(and, bson.M{f: b.simple[f]})
	}
	return top, and
}

// reachCondition is what a token's scopes let the search return: one
// of the alternatives, each its patients' records (or ids) that match its
// search constraints. None: nothing matches.
func (q *Query) reachCondition(reach []domain.Reach) any {
	alts := bson.A{}
	for _, r := range reach {
		var conds bson.A
		if r.PatientIDs != nil {
			if q.store.Kind == domain.StoreImported {
				conds = append(conds, importedPatientCondition(r.PatientIDs))
			} else {
				conds = append(conds, bson.M{cmp.Or(q.resource.PatientField, "patientId"): bson.M{"$in": int64s(r.PatientIDs)}})
			}
		}
		if r.IDs != nil {
			conds = append(conds, bson.M{"_id": bson.M{"$in": int64s(r.IDs)}})
		}
		for _, c := range r.Constraints {
			conds = append(conds, q.constraintCondition(c))
		}
		switch len(conds) {
		case 0:
			alts = append(alts, bson.M{}) // matches everything the rest of the query allows
		case 1:
			alts = append(alts, conds[0])
		default:
			alts = append(alts, bson.M{"$and": conds})
		}
	}
	switch len(alts) {
	case 0:
		return matchNothing
	case 1:
		return alts[0]
	}
	return bson.M{"$or": alts}
}

// constraintCondition translates a scope's search constraint as the same
// token search parameter of the type would be: a constraint on a parameter
// the type or store lacks (category of a native Observation, which carries
// none) matches nothing.
func (q *Query) constraintCondition(c domain.ScopeConstraint) any {
	p, ok := q.resource.param(c.Param)
	if !ok || p.Type != TypeToken || p.Join != "" || !p.appliesTo(q.store.Kind) {
		return matchNothing
	}
	clause := Clause{Param: p}
	for _, v := range c.Values {
		tok, err := parseToken(p.Name, v)
		if err != nil { // domain.ParseScope admits tokens only
			return matchNothing
		}
		clause.Tokens = append(clause.Tokens, tok)
	}
	field, cond, simple := clauseCondition(clause, q.t.now())
	if q.store.Kind == domain.StoreImported {
		field, cond, simple = importedCondition(clause, q.t.now())
	}
	if simple {
		return bson.M{field: cond}
	}
	return cond
}

// importedCondition translates one clause onto the search index of the
// imported store (see Catalog.Index).
func importedCondition(c Clause, now time.Time) (field string, cond any, simple bool) {
	p := c.Param
	keys := func(values []string) bson.A {
		a := bson.A{}
		for _, v := range values {
			a = append(a, p.Name+"|"+v)
		}
		return a
	}
	switch {
	case p.Name == "_id":
		ids := bson.A{}
		for _, id := range c.UUIDs {
			ids = append(ids, id)
		}
		return "_id", bson.M{"$in": ids}, true
	case p.Type == TypeToken:
		var ks []string
		for _, t := range c.Tokens {
			ks = append(ks, t.Key())
		}
		return "search", bson.M{"$in": keys(ks)}, true
	case p.Type == TypeReference:
		// As the imported store holds the reference, or as its source
		// wrote it (UpstreamMark).
		ks := keys(c.References)
		for _, ref := range c.References {
			ks = append(ks, p.Name+"|"+UpstreamMark+ref)
		}
		return "search", bson.M{"$in": ks}, true
	case p.Type == TypeURI:
		return "search", bson.M{"$in": keys(c.URIs)}, true
	case p.Type == TypeString:
		var alts bson.A
		for _, s := range c.Strings {
			alts = append(alts, bson.M{"search": bson.M{"$regex": "^" + regexp.QuoteMeta(p.Name+"|"+s)}})
		}
		return "", orOf(alts), false
	case p.Type == TypeNumber, p.Type == TypeQuantity:
		low, high := "numbers."+p.Name+".low", "numbers."+p.Name+".high"
		var alts bson.A
		for _, n := range c.Numbers {
			cond := numberCondition(low, high, n)
			if n.Unit != "" {
				cond = bson.M{"$and": bson.A{cond, bson.M{"search": p.Name + "|" + n.Unit}}}
			}
			alts = append(alts, cond)
		}
		return "", orOf(alts), false
	case p.Type == TypeDate:
		start, end := "dates."+p.Name+".start", "dates."+p.Name+".end"
		if p.common {
			start, end = p.Field, p.EndField
		}
		var alts bson.A
		for _, d := range c.Dates {
			alts = append(alts, dateCondition(start, end, d, now))
		}
		return "", orOf(alts), false
	}
	return "", matchNothing, false
}

// importedPatientCondition selects the resources of the patients' FHIR
// sources, and those that refer to the patients; and those that refer to
// a patient named by a reference of the imported store (refs: a value
// that names none of the exchange's patients, such as an imported
// Patient's id), or by its source's own id for it (the upstream form,
// UpstreamMark).
func importedPatientCondition(ids []int64, refs ...string) bson.M {
	keys := bson.A{}
	for _, id := range ids {
		keys = append(keys, fmt.Sprintf("patient|Patient/%d", id))
	}
	for _, ref := range refs {
		_, id, typed := strings.Cut(ref, "/")
		if !typed {
			id = ref
		}
		if _, native := domain.ParseID(id); !native {
			keys = append(keys, "patient|"+ref)
		}
		keys = append(keys, "patient|"+UpstreamMark+ref)
	}
	return bson.M{"$or": bson.A{
		bson.M{"sourcePatientId": bson.M{"$in": int64s(ids)}},
		bson.M{"search": bson.M{"$in": keys}},
	}}
}

// bounds is the $match of a page: the index prefix at the top, then the
// sort key's range (kb) and the cursor's bound on it (from), everything
// else under $and. Where the match has branches (a study search's patients,
// the span classes of kb), each branch gets the prefix, the range and the
// bound, so that each is one bounded scan of an index whatever the planner
// does with conditions beside a $or. The conditions of the date clauses kb
// was made from (dated) stay, but in kb's exact branch, where the range is
// what they say.
func bounds(top bson.D, and, dated bson.A, kb *keyBound, from *bson.E) bson.D {
	var or bson.A
	prefix := bson.D{}
	for _, e := range top {
		if e.Key == "$or" {
			or = e.Value.(bson.A)
		} else {
			prefix = append(prefix, e)
		}
	}
	keyBranches, exact := []bson.D{nil}, -1
	if kb != nil {
		keyBranches, exact = kb.branches, kb.exact
	}
	if len(or) == 0 && len(keyBranches) == 1 {
		out := withBound(append(slices.Clone(prefix), keyBranches[0]...), from)
		if exact != 0 {
			and = append(slices.Clone(and), dated...)
		}
		return withAnd(out, and)
	}
	bases := []bson.D{nil}
	if len(or) > 0 {
		bases = bases[:0]
		for _, b := range or {
			bases = append(bases, b.(bson.D))
		}
	}
	branches := bson.A{}
	for _, base := range bases {
		for i, k := range keyBranches {
			branch := slices.Concat(base, prefix, k)
			branch = withBound(branch, from)
			if i != exact && len(dated) > 0 {
				branch = append(branch, bson.E{Key: "$and", Value: slices.Clone(dated)})
			}
			branches = append(branches, branch)
		}
	}
	return withAnd(bson.D{{Key: "$or", Value: branches}}, and)
}

// withBound adds the cursor's bound to a match's conditions, in the range
// of the same field when it has one: the tighter bound of each operator.
func withBound(d bson.D, from *bson.E) bson.D {
	if from == nil {
		return d
	}
	i := slices.IndexFunc(d, func(e bson.E) bool { return e.Key == from.Key })
	if i < 0 {
		return append(d, bson.E{Key: from.Key, Value: from.Value})
	}
	cond, ok := d[i].Value.(bson.M)
	if !ok {
		return append(d, bson.E{Key: "$and", Value: bson.A{bson.M{from.Key: from.Value}}})
	}
	merged := bson.M{}
	for op, v := range cond {
		merged[op] = v
	}
	for op, v := range from.Value.(bson.M) {
		old, had := merged[op].(time.Time)
		at, isTime := v.(time.Time)
		switch {
		case !had || !isTime:
			merged[op] = v
		case (op == "$gte" || op == "$gt") && at.After(old), (op == "$lte" || op == "$lt") && at.Before(old):
			merged[op] = v
		}
	}
	d[i].Value = merged
	return d
}

func withAnd(top bson.D, and bson.A) bson.D {
	out := slices.Clone(top)
	if len(and) > 0 {
		out = append(out, bson.E{Key: "$and", Value: and})
	}
	return out
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func int64s(ids []int64) bson.A {
	a := make(bson.A, len(ids))
	for i, id := range ids {
		a[i] = id
	}
	return a
}

// consentBranches limit each patient of a study search to the native
// codes they consented to share with the study: one branch per patient,
// each starting with the index prefix (patientId, codeTokens), and one for
// the patients without a limit. None: nothing matches.
func consentBranches(scope domain.Scope) bson.A {
	branches := bson.A{}
	var unlimited []int64
	for _, id := range scope.PatientIDs {
		codes, limited := scope.Codes[id]
		if !limited {
			unlimited = append(unlimited, id)
			continue
		}
		if len(codes) == 0 {
			continue
		}
		keys := bson.A{}
		for _, c := range codes {
			keys = append(keys, c)
		}
		branches = append(branches, bson.D{{Key: "patientId", Value: id}, {Key: "codeTokens", Value: bson.M{"$in": keys}}})
	}
	if len(unlimited) > 0 {
		branches = append(branches, bson.D{{Key: "patientId", Value: bson.M{"$in": int64s(unlimited)}}})
	}
	return branches
}

// clauseCondition translates one clause. A simple condition is on one
// field, an equality or $in the index prefix can take.
func clauseCondition(c Clause, now time.Time) (field string, cond any, simple bool) {
	p := c.Param
	switch {
	case p.Name == "_id":
		return "_id", bson.M{"$in": int64s(c.IDs)}, true
	case p.Type == TypeToken:
		keys := bson.A{}
		for _, t := range c.Tokens {
			if key, ok := tokenKey(p, t); ok {
				keys = append(keys, key)
			}
		}
		return p.Field, bson.M{"$in": keys}, true
	case p.Type == TypeReference:
		refs := bson.A{}
		for _, r := range c.References {
			refs = append(refs, r)
		}
		return p.Field, bson.M{"$in": refs}, true
	case p.Type == TypeString:
		var alts bson.A
		for _, s := range c.Strings {
			alts = append(alts, bson.M{p.Field: bson.M{"$regex": "^" + regexp.QuoteMeta(s)}})
		}
		return "", orOf(alts), false
	case p.Type == TypeDate:
		var alts bson.A
		for _, d := range c.Dates {
			alts = append(alts, dateCondition(p.Field, p.EndField, d, now))
		}
		return "", orOf(alts), false
	}
	return "", matchNothing, false
}

func orOf(alts bson.A) any {
	if len(alts) == 1 {
		return alts[0]
	}
	return bson.M{"$or": alts}
}

// tokenKey is the stored key a token value matches. A parameter whose field
// holds plain codes of one system matches only that system or none.
func tokenKey(p *Param, t Token) (string, bool) {
	if p.CodeSystem == "" {
		return t.Key(), true
	}
	if !t.HasSystem || t.System == p.CodeSystem {
		return t.Code, t.Code != ""
	}
	return "", false
}

// dateCondition is FHIR's range semantics: the resource spans [start, end]
// (its fields), the search value [Low, High).
func dateCondition(start, end string, d DateRange, now time.Time) bson.M {
	lo, hi := d.Low, d.High
	if d.Prefix == "ap" { // overlaps the value widened by a tenth of its distance from now
		gap := time.Duration(0.1 * math.Max(math.Abs(float64(now.Sub(lo))), math.Abs(float64(now.Sub(hi)))))
		return both(start, bson.M{"$lt": hi.Add(gap)}, end, bson.M{"$gte": lo.Add(-gap)})
	}
	return rangeCondition(start, end, d.Prefix, lo, hi)
}

// numberCondition is FHIR's number semantics on the [low, high] the
// resource's values span (their fields): eq and ne within the precision of
// the value's digits, the other comparators against the exact value (the
// range from it to the next double), ap within 10% of it.
func numberCondition(low, high string, n NumberValue) bson.M {
	switch n.Prefix {
	case "eq", "ne":
		return rangeCondition(low, high, n.Prefix, n.Low, n.High)
	case "ap":
		d := math.Max(0.1*math.Abs(n.Value), n.High-n.Value)
		return bson.M{low: bson.M{"$lte": n.Value + d}, high: bson.M{"$gte": n.Value - d}}
	}
	return rangeCondition(low, high, n.Prefix, n.Value, math.Nextafter(n.Value, math.Inf(1)))
}

// rangeCondition compares a resource's range [start, end] (its fields)
// with a search value's [lo, hi), for every comparator but ap.
func rangeCondition(start, end, prefix string, lo, hi any) bson.M {
	switch prefix {
	case "ne":
		return bson.M{"$or": bson.A{bson.M{start: bson.M{"$lt": lo}}, bson.M{end: bson.M{"$gte": hi}}}}
	case "gt":
		return bson.M{end: bson.M{"$gte": hi}}
	case "lt":
		return bson.M{start: bson.M{"$lt": lo}}
	case "ge":
		return bson.M{end: bson.M{"$gte": lo}}
	case "le":
		return bson.M{start: bson.M{"$lt": hi}}
	case "sa":
		return bson.M{start: bson.M{"$gte": hi}}
	case "eb":
		return bson.M{end: bson.M{"$lt": lo}}
	}
	return both(start, bson.M{"$gte": lo}, end, bson.M{"$lt": hi}) // eq
}

// both is the condition on a range's start and on its end. When one field
// holds both (an instant such as lastUpdated), the operators go under that
// one field: as two keys of one map, the second would replace the first.
func both(start string, onStart bson.M, end string, onEnd bson.M) bson.M {
	if start != end {
		return bson.M{start: onStart, end: onEnd}
	}
	merged := bson.M{}
	for op, v := range onStart {
		merged[op] = v
	}
	for op, v := range onEnd {
		merged[op] = v
	}
	return bson.M{start: merged}
}

// sortSpec is the $sort of the query: its key, then _id, one direction.
func (q *Query) sortSpec() bson.D {
	switch {
	case q.sort == nil:
		return bson.D{{Key: "_id", Value: 1}}
	case q.desc:
		return bson.D{{Key: q.sort.Desc, Value: -1}, {Key: "_id", Value: -1}}
	default:
		return bson.D{{Key: q.sort.Asc, Value: 1}, {Key: "_id", Value: 1}}
	}
}

// cursorBound is the keyset cursor as a bound of the sort key, which the
// index scan starts from: the first key of the next page is at or past the
// cursor's value (continuation is exact on ties).
func (q *Query) cursorBound() bson.E {
	c := q.after
	if q.sort == nil {
		var id any = c.ID
		if c.UUID != "" {
			id = c.UUID
		}
		return bson.E{Key: "_id", Value: bson.M{"$gt": id}}
	}
	if q.desc {
		return bson.E{Key: q.sort.Desc, Value: bson.M{"$lte": c.Value.UTC()}}
	}
	return bson.E{Key: q.sort.Asc, Value: bson.M{"$gte": c.Value.UTC()}}
}

// continuation is the keyset condition of the page after the cursor.
func (q *Query) continuation() bson.M {
	c := q.after
	var id any = c.ID
	if c.UUID != "" {
		id = c.UUID
	}
	if q.sort == nil {
		return bson.M{"_id": bson.M{"$gt": id}}
	}
	field, op := q.sort.Asc, "$gt"
	if q.desc {
		field, op = q.sort.Desc, "$lt"
	}
	v := c.Value.UTC()
	return bson.M{"$or": bson.A{
		bson.M{field: bson.M{op: v}},
		bson.D{{Key: field, Value: v}, {Key: "_id", Value: bson.M{op: id}}},
	}}
}

// projection leaves out what the FHIR form never shows, and the payload of
// an Observation when _elements does not ask for its value.
func (q *Query) projection() bson.D {
	collection := q.resource.Collection
	if q.store.Kind != domain.StoreNative {
		collection = importedCollection
	}
	var proj bson.D
	for _, f := range hidden[collection] {
		proj = append(proj, bson.E{Key: f, Value: 0})
	}
	if collection == "observations" && len(q.elements) > 0 &&
		!slices.Contains(q.elements, "valueAttachment") && !slices.Contains(q.elements, "value[x]") {
		proj = append(proj, bson.E{Key: "payload", Value: 0})
	}
	return proj
}
