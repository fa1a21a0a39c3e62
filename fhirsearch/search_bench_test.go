package fhirsearch_test

import (
	"net/url"
	"strconv"
	"testing"

	"exchange/domain"
	"exchange/internal/benchcpu"
)

// benchQuery is one patient's heart rate in January 2024, a page of 50: the
// search of the search-page benchmarks (docs/benchmarks.md).
const benchQuery = "patient=1&code=omh:heart-rate:2.0&date=ge2024-01-01&date=lt2024-02-01&_count=50"

// BenchmarkSearchParsePlan is the CPU of turning the query string into a
// pipeline: parsing the query string and the search (Parse), then planning
// it (Plan) with the scope the domain resolves for a practitioner who may
// read patient 1 (the patient join narrowed to that patient).
func BenchmarkSearchParsePlan(b *testing.B) {
	tr := translator()
	scope := domain.Scope{PatientIDs: []int64{1}}
	b.Run("parse", func(b *testing.B) {
		b.ReportAllocs()
		defer benchcpu.Per(b, 1, "op")()
		for b.Loop() {
			v, err := url.ParseQuery(benchQuery)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tr.Parse("Observation", v, false); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("plan", func(b *testing.B) {
		v, _ := url.ParseQuery(benchQuery)
		q, err := tr.Parse("Observation", v, false)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		defer benchcpu.Per(b, 1, "op")()
		for b.Loop() {
			if _, err := q.Plan(scope); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parse+plan", func(b *testing.B) {
		b.ReportAllocs()
		defer benchcpu.Per(b, 1, "op")()
		for b.Loop() {
			v, err := url.ParseQuery(benchQuery)
			if err != nil {
				b.Fatal(err)
			}
			q, err := tr.Parse("Observation", v, false)
			if err != nil {
				b.Fatal(err)
			}
			plan, err := q.Plan(scope)
			if err != nil || len(plan.Pipeline) == 0 {
				b.Fatal(plan, err)
			}
		}
	})
}

// BenchmarkIndexManyCodings is the index of an Observation whose code
// carries n distinct codings (two keys each): its time per coding must
// stay flat as n grows (keys are deduped by a set; a search of the keys
// written made a 20,000-coding upload cost seconds of CPU).
func BenchmarkIndexManyCodings(b *testing.B) {
	c := catalog(b)
	for _, n := range []int{100, 10_000} {
		codings := make([]any, n)
		for i := range codings {
			codings[i] = map[string]any{"system": "http://example.org/codes", "code": strconv.Itoa(i)}
		}
		m := map[string]any{"resourceType": "Observation", "status": "final", "code": map[string]any{"coding": codings}}
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			defer benchcpu.Per(b, n, "coding")()
			for b.Loop() {
				if keys := len(c.Index("Observation", m).Keys); keys < 2*n {
					b.Fatalf("%d keys, want at least %d", keys, 2*n)
				}
			}
		})
	}
}
