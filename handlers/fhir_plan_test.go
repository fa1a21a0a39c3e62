package handlers_test

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
	"exchange/fhirsearch"
	"exchange/handlers/handlerstest"
	"exchange/repo/repotest"
)

// TestFHIRObservationPlansUseIndexes plans representative Observation
// searches with the scopes the domain hands the store (a practitioner's
// patients, a patient, a study search with per-patient consent) and checks
// that each pipeline, first page and next page, starts with a $match whose
// top-level fields (each branch's, under a top-level $or) are a prefix of
// an index the repository created on observations, led by patientId when
// the search is limited to patients, and that no pipeline skips. Each
// branch must also be one bounded scan of an index (fxCheckBounded): the
// sort key right after the equality prefix, ranged by the date clauses on
// it and by the keyset cursor.
func TestFHIRObservationPlansUseIndexes(t *testing.T) {
	t.Parallel()
	env := handlerstest.Start(t)
	indexes := repotest.IndexKeys(t, env.DB, "observations")
	if len(indexes) < 2 {
		t.Fatalf("indexes of observations: %v", indexes)
	}
	_, catalog := handlerstest.R5(t)
	tr := fhirsearch.NewTranslator(catalog, []byte("plan test key"), "https://exchange.example.org/fhir-source", time.Now)
	hr, bp := "omh:heart-rate:2.0", "omh:blood-pressure:4.0"
	scopes := map[string]domain.Scope{
		"practitioner": {PatientIDs: []int64{3, 5, 9}},
		"patient":      {PatientIDs: []int64{5}},
		// patient.organization, patient.identifier: the same shape.
		"one patient of several": {PatientIDs: []int64{9}},
		// patient._has:Group:member:_id: each enrolled patient with the
		// codes they consented to share with the study; 9 consented to
		// nothing.
		"study":              {PatientIDs: []int64{3, 5, 9}, Codes: map[int64][]string{3: {hr, bp}, 5: {hr}, 9: {}}},
		"study, one patient": {PatientIDs: []int64{5}, Codes: map[int64][]string{5: {hr}}},
	}
	queries := []string{
		"",
		"code=" + url.QueryEscape(domain.SystemOpenMHealth+"|"+hr),
		"code=" + hr + "," + bp,
		"date=ge2024-01-01&date=lt2024-02-01",
		"code=" + hr + "&date=ge2024-01-01&date=lt2024-02-01",
		"code=" + hr + "&date=2024-01&_sort=date",
		"_sort=date",
		"_sort=-date",
		"_sort=-date&code=" + hr,
		"_sort=_lastUpdated",
		"_sort=-lastUpdated",
		"_lastUpdated=gt2024-01-01T00:00:00Z",
		"_lastUpdated=ge2024-01-01&_sort=-_lastUpdated",
		"identifier=https://device.example.org/ids|reading-1",
		"status=final",
		"status=final,amended&code=" + hr,
		"_id=12,13",
		"_count=10&_elements=status",
	}
	positions := []fhirsearch.Position{
		{ID: 41, Date: fxPtr(time.Date(2024, 1, 5, 10, 0, 0, 0, time.UTC)), LastUpdated: time.Date(2024, 2, 1, 0, 0, 0, 0, time.UTC)},
		{ID: 42, LastUpdated: time.Date(2024, 2, 1, 0, 0, 0, 0, time.UTC)}, // no effective date
	}
	plans := 0
	for scopeName, scope := range scopes {
		for _, query := range queries {
			values, err := url.ParseQuery(query)
			if err != nil {
				t.Fatal(err)
			}
			q, err := tr.Parse("Observation", values, true)
			if err != nil {
				t.Fatalf("%s: %v", query, err)
			}
			check := func(what string, q *fhirsearch.Query) {
				t.Helper()
				plans++
				plan, err := q.Plan(scope)
				if err != nil {
					t.Fatalf("%s %s?%s: %v", scopeName, what, query, err)
				}
				if plan.Collection != "observations" || len(plan.Pipeline) == 0 {
					t.Fatalf("%s %s?%s: plan %+v", scopeName, what, query, plan)
				}
				for _, stage := range plan.Pipeline {
					if d, ok := stage.(bson.D); !ok || len(d) != 1 || d[0].Key == "$skip" {
						t.Errorf("%s %s?%s: stage %v", scopeName, what, query, stage)
					}
				}
				first := plan.Pipeline[0].(bson.D)[0]
				if first.Key != "$match" {
					t.Fatalf("%s %s?%s: the first stage is %s", scopeName, what, query, first.Key)
				}
				for _, fields := range fxMatchPrefixes(t, first.Value) {
					if !fxIsIndexPrefix(fields, indexes) {
						t.Errorf("%s %s?%s: $match fields %v are a prefix of no index of %v\n$match %s", scopeName, what, query, fields, indexes, fxExtJSON(first.Value))
					}
					if !slices.Contains(fields, "patientId") {
						t.Errorf("%s %s?%s: the $match does not start with patientId: %v\n$match %s", scopeName, what, query, fields, fxExtJSON(first.Value))
					}
				}
				ranged := ""
				if strings.Contains(query, "date=") && !strings.Contains(query, "_sort=_lastUpdated") && !strings.Contains(query, "_sort=-_lastUpdated") && !strings.Contains(query, "_sort=-lastUpdated") {
					ranged = "sortAsc"
				} else if strings.Contains(query, "_lastUpdated=") && !strings.Contains(query, "date=") {
					ranged = "lastUpdated"
				}
				if err := fxCheckBounded(plan.Pipeline, indexes, strings.HasPrefix(what, "page after"), ranged); err != nil {
					t.Errorf("%s %s?%s: %v\n$match %s", scopeName, what, query, err, fxExtJSON(first.Value))
				}
			}
			check("first page", q)
			// The pages after a keyset cursor, from a dated and an undated
			// record.
			for _, pos := range positions {
				next := url.Values{}
				for k, v := range values {
					next[k] = v
				}
				next.Set(fhirsearch.CursorParam, q.Next(pos))
				nq, err := tr.Parse("Observation", next, true)
				if err != nil {
					t.Fatalf("%s next page: %v", query, err)
				}
				check(fmt.Sprintf("page after %d", pos.ID), nq)
			}
		}
	}
	t.Logf("%d plans checked against %d indexes", plans, len(indexes))
}

func fxPtr[T any](v T) *T { return &v }

// fxCheckBounded checks that every branch of a page's $match is one scan
// of an index that MongoDB bounds on all its keys, so that a page reads
// about its size in index keys whatever the history behind it: an index
// starts with the branch's equality fields (in any order), continues with
// the $sort's first key and then _id; a range is only on that sort key;
// ranged names the sort key the query's date clauses must range (both
// ends), and a next page's branch bounds the sort key by its cursor.
func fxCheckBounded(pipeline []any, indexes [][]string, next bool, ranged string) error {
	match := pipeline[0].(bson.D)[0].Value
	sort := pipeline[1].(bson.D)[0].Value.(bson.D)
	key := sort[0].Key
	for _, branch := range fxBranches(match) {
		var eq []string
		conds := map[string]bson.M{}
		for field, v := range branch {
			if m, ok := v.(bson.M); ok && fxIsRange(m) {
				conds[field] = m
				continue
			}
			eq = append(eq, field)
		}
		for field := range conds {
			if field != key {
				return fmt.Errorf("a range on %s, which is not the sort key %s", field, key)
			}
		}
		want := slices.Sorted(slices.Values(eq))
		found := slices.ContainsFunc(indexes, func(ix []string) bool {
			if len(ix) < len(want)+1 || !slices.Equal(slices.Sorted(slices.Values(ix[:len(want)])), want) || ix[len(want)] != key {
				return false
			}
			return key == "_id" || (len(ix) > len(want)+1 && ix[len(want)+1] == "_id")
		})
		if !found {
			return fmt.Errorf("no index has the equality fields %v, then the sort key %s, then _id", eq, key)
		}
		c := conds[key]
		if ranged != "" && (key != ranged || c["$lt"] == nil) {
			return fmt.Errorf("the date clauses do not range the sort key %s (%v) in the branch %v", ranged, key, branch)
		}
		if next && c["$gte"] == nil && c["$lte"] == nil && c["$gt"] == nil {
			return fmt.Errorf("the cursor does not bound the sort key %s in the branch %v", key, branch)
		}
	}
	return nil
}

func fxIsRangeValue(v any) bool {
	m, ok := v.(bson.M)
	return ok && fxIsRange(m)
}

// fxIsRange reports whether a condition is a range: comparisons only.
func fxIsRange(m bson.M) bool {
	for op := range m {
		if !slices.Contains([]string{"$gt", "$gte", "$lt", "$lte"}, op) {
			return false
		}
	}
	return len(m) > 0
}

// fxBranches returns the top-level conditions of each branch of a $match:
// the fields beside a top-level $or with each of its branches' ($and,
// which holds what the index does not bound, left out).
func fxBranches(match any) []map[string]any {
	fields := func(v any) (map[string]any, bson.A) {
		out, or := map[string]any{}, bson.A(nil)
		add := func(k string, v any) {
			switch {
			case k == "$or":
				or = v.(bson.A)
			case !strings.HasPrefix(k, "$"):
				out[k] = v
			}
		}
		switch d := v.(type) {
		case bson.D:
			for _, e := range d {
				add(e.Key, e.Value)
			}
		case bson.M:
			for k, v := range d {
				add(k, v)
			}
		}
		return out, or
	}
	top, or := fields(match)
	if or == nil {
		return []map[string]any{top}
	}
	var out []map[string]any
	for _, b := range or {
		f, _ := fields(b)
		for k, v := range top {
			f[k] = v
		}
		out = append(out, f)
	}
	return out
}

// fxMatchPrefixes returns the field names the top level of a $match
// constrains by equality, ignoring $and and ranges (fxCheckBounded checks
// those): one list, or one per branch of a top-level $or (each with the
// top-level fields beside the $or).
func fxMatchPrefixes(t *testing.T, match any) [][]string {
	t.Helper()
	keys := func(v any) (fields []string, or []any) {
		switch d := v.(type) {
		case bson.D:
			for _, e := range d {
				switch {
				case e.Key == "$or":
					or = e.Value.(bson.A)
				case !strings.HasPrefix(e.Key, "$") && !fxIsRangeValue(e.Value):
					fields = append(fields, e.Key)
				}
			}
		case bson.M:
			for k, v := range d {
				switch {
				case k == "$or":
					or = v.(bson.A)
				case !strings.HasPrefix(k, "$") && !fxIsRangeValue(v):
					fields = append(fields, k)
				}
			}
		default:
			t.Fatalf("a $match of %T", v)
		}
		return fields, or
	}
	top, or := keys(match)
	if or == nil {
		return [][]string{top}
	}
	var out [][]string
	for _, branch := range or {
		fields, nested := keys(branch)
		if nested != nil {
			t.Fatalf("a nested $or at the top of %v", match)
		}
		out = append(out, append(slices.Clone(top), fields...))
	}
	return out
}

// fxIsIndexPrefix reports whether the fields, in any order, are the first
// fields of one of the indexes.
func fxIsIndexPrefix(fields []string, indexes [][]string) bool {
	want := slices.Sorted(slices.Values(fields))
	for _, ix := range indexes {
		if len(ix) < len(want) {
			continue
		}
		if slices.Equal(slices.Sorted(slices.Values(ix[:len(want)])), want) {
			return true
		}
	}
	return false
}

func fxExtJSON(v any) string {
	data, err := bson.MarshalExtJSON(bson.D{{Key: "$match", Value: v}}, false, false)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(data)
}

// TestFHIRImportedPlansUseIndexes plans a search by every parameter of
// every type the imported store serves (the 28 configured and those from
// R5), alone and sorted, with the scopes the domain hands the store (a
// practitioner's readable sources, a superuser's none, a patient join), and
// checks that each pipeline starts with a $match whose top-level fields
// are a prefix of an index the repository created on resources, and that
// no pipeline skips. Token, reference, uri and string parameters filter on
// the multikey search index within them, dates and numbers on their spans.
func TestFHIRImportedPlansUseIndexes(t *testing.T) {
	t.Parallel()
	env := handlerstest.Start(t)
	indexes := repotest.IndexKeys(t, env.DB, "resources")
	_, catalog := handlerstest.R5(t)
	tr := fhirsearch.NewTranslator(catalog, []byte("plan test key"), handlerstest.SourceBase, time.Now)
	values := map[fhirsearch.ParamType]string{
		fhirsearch.TypeToken: "http://loinc.org|8867-4", fhirsearch.TypeReference: "Patient/p1", fhirsearch.TypeURI: "http://example.org/q|1.0",
		fhirsearch.TypeString: "smi", fhirsearch.TypeDate: "ge2024-01", fhirsearch.TypeNumber: "gt0.5",
		fhirsearch.TypeQuantity: "le5.4|http://unitsofmeasure.org|mg",
	}
	scopes := map[string]domain.Scope{
		"practitioner": {SourceIDs: []int64{1, 2}},
		"superuser":    {},
		"patient join": {SourceIDs: []int64{1, 2}, PatientIDs: []int64{5}},
	}
	below := "_source:below=" + url.QueryEscape(handlerstest.SourceBase+"/")
	plans := 0
	for _, r := range catalog.Resources() {
		queries := []string{"", "_sort=-_lastUpdated", "_lastUpdated=ge2024-01-01"}
		for _, p := range r.Params {
			if !p.Imported || p.Join != "" {
				continue
			}
			q := p.Name + "=" + url.QueryEscape(values[p.Type])
			queries = append(queries, q, q+"&_sort=_lastUpdated")
			if p.Type == fhirsearch.TypeDate {
				queries = append(queries, q+"&_sort=-"+p.Name) // rejected below when the type does not sort by it
			}
		}
		for _, query := range queries {
			v, err := url.ParseQuery(below + "&" + query)
			if err != nil {
				t.Fatal(err)
			}
			q, err := tr.Parse(r.Type, v, true)
			if err != nil {
				if strings.Contains(query, "_sort=-") && strings.Contains(err.Error(), "cannot be sorted") {
					continue
				}
				t.Fatalf("%s?%s: %v", r.Type, query, err)
			}
			for name, scope := range scopes {
				plans++
				plan, err := q.Plan(scope)
				if err != nil {
					t.Fatalf("%s %s?%s: %v", name, r.Type, query, err)
				}
				if plan.Collection != "resources" || len(plan.Pipeline) == 0 {
					t.Fatalf("%s %s?%s: plan %+v", name, r.Type, query, plan)
				}
				for _, stage := range plan.Pipeline {
					if d, ok := stage.(bson.D); !ok || len(d) != 1 || d[0].Key == "$skip" {
						t.Errorf("%s %s?%s: stage %v", name, r.Type, query, stage)
					}
				}
				first := plan.Pipeline[0].(bson.D)[0]
				if first.Key != "$match" {
					t.Fatalf("%s %s?%s: the first stage is %s", name, r.Type, query, first.Key)
				}
				for _, fields := range fxMatchPrefixes(t, first.Value) {
					if !fxIsIndexPrefix(fields, indexes) || !slices.Contains(fields, "resourceType") {
						t.Errorf("%s %s?%s: $match fields %v are a prefix of no index of %v\n$match %s", name, r.Type, query, fields, indexes, fxExtJSON(first.Value))
					}
				}
				// A practitioner's search names the sources: the sort key
				// follows them on an index, bounded by the sort date's
				// clauses. (A superuser's has no source to lead with.)
				if name == "practitioner" {
					if err := fxCheckBounded(plan.Pipeline, indexes, false, ""); err != nil {
						t.Errorf("%s %s?%s: %v\n$match %s", name, r.Type, query, err, fxExtJSON(first.Value))
					}
				}
			}
		}
	}
	t.Logf("%d plans of %d types checked against %d indexes", plans, len(catalog.Resources()), len(indexes))
}
