package fhirdefs_test

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"

	"exchange/fhirdefs"
	"exchange/fhirdefs/fhirdefstest"
)

// TestConcurrentFirstUse: definitions are read on first use, and a
// service's first requests come together. Validations of the same types
// started at once on a fresh package (every goroutine asks for each
// definition before any is loaded) find what one validation alone finds.
// Run it with -race.
func TestConcurrentFirstUse(t *testing.T) {
	types := []string{"MedicationRequest", "Observation", "Condition", "Patient", "CarePlan", "Encounter"}
	var files []string
	for _, typ := range types {
		files = append(files, examples(t, typ, 2)...)
	}
	bodies := make([][]byte, len(files))
	for i, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		bodies[i] = data
	}
	fresh := func() *fhirdefs.Validator {
		t.Helper()
		defs, err := fhirdefs.OpenPackage(fhirdefstest.PackageDir("hl7.fhir.r5.core"))
		if err != nil {
			t.Fatal(err)
		}
		return fhirdefs.NewValidator(defs, nil)
	}
	issuesOf := func(v *fhirdefs.Validator, body []byte) string {
		issues, err := v.Validate(body)
		if err != nil {
			return "error: " + err.Error()
		}
		out := make([]string, len(issues))
		for i, is := range issues {
			out[i] = is.String()
		}
		slices.Sort(out)
		return fmt.Sprint(out)
	}
	alone := fresh()
	want := make([]string, len(bodies))
	for i, body := range bodies {
		want[i] = issuesOf(alone, body)
	}
	for round := range 3 {
		v := fresh()
		const workers = 8
		got := make([][]string, workers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				<-start
				got[w] = make([]string, len(bodies))
				// Each worker in its own order, so that first uses collide.
				for k := range bodies {
					i := (k + w*len(bodies)/workers) % len(bodies)
					got[w][i] = issuesOf(v, bodies[i])
				}
			})
		}
		close(start)
		wg.Wait()
		for w := range workers {
			for i := range bodies {
				if got[w][i] != want[i] {
					t.Errorf("round %d, worker %d, %s: %s; alone: %s", round, w, files[i], got[w][i], want[i])
				}
			}
		}
	}
}
