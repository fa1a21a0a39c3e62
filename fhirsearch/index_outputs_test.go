package fhirsearch_test

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"exchange/converter"
	"exchange/domain"
	"exchange/fhirdefs"
	"exchange/fhirdefs/fhirdefstest"
	"exchange/internal/benchcpu"
	"exchange/internal/pinned"
)

var update = flag.Bool("update", false, "rewrite testdata/index-outputs.txt")

// indexInput is a resource to index: an official R5 example, or an
// official R4 example converted to R5, decoded as the domain decodes what
// it stores (domain.DecodeJSON).
type indexInput struct {
	name     string
	resource map[string]any
}

// indexInputs are every official R5 example and every official R4 example
// the converter converts, in file order (under -short, a sample of each).
var indexInputs = sync.OnceValues(func() ([]indexInput, error) {
	var out []indexInput
	r5, _ := filepath.Glob(filepath.Join(fhirdefstest.PackageDir("hl7.fhir.r5.examples"), "*.json"))
	r5 = pinned.Sample(r5)
	for _, f := range r5 {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if m, err := domain.DecodeJSON(data); err == nil && m["resourceType"] != nil {
			out = append(out, indexInput{"r5/" + filepath.Base(f), m})
		}
	}
	r4defs, err := fhirdefs.OpenR4(fhirdefstest.PackagesDir())
	if err != nil {
		return nil, err
	}
	r5defs, _, err := fhirdefs.OpenR5(fhirdefstest.PackagesDir())
	if err != nil {
		return nil, err
	}
	xver := filepath.Join("..", "standards", "fhir", "xver-r4-r5")
	e, err := converter.Compile(converter.Options{MapsDir: filepath.Join(xver, "maps"), ConceptMapsDir: filepath.Join(xver, "conceptmaps"), R4: r4defs, R5: r5defs})
	if err != nil {
		return nil, err
	}
	r4, _ := filepath.Glob(filepath.Join(fhirdefstest.PackageDir("hl7.fhir.r4.examples"), "*.json"))
	r4 = pinned.Sample(r4)
	converted := make([]indexInput, len(r4))
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := range next {
				data, err := os.ReadFile(r4[i])
				if err != nil {
					continue
				}
				m, err := domain.DecodeJSON(data)
				if err != nil || m["resourceType"] == nil {
					continue
				}
				res, err := e.Convert(m)
				if err != nil {
					continue
				}
				if m, err := domain.DecodeJSON(res.Resource); err == nil {
					converted[i] = indexInput{"r4/" + filepath.Base(r4[i]), m}
				}
			}
		})
	}
	for i := range r4 {
		next <- i
	}
	close(next)
	wg.Wait()
	return append(out, slices.DeleteFunc(converted, func(in indexInput) bool { return in.resource == nil })...), nil
})

func inputs(t testing.TB) []indexInput {
	t.Helper()
	in, err := indexInputs()
	if err != nil {
		t.Fatalf("%v (run scripts/setup first)", err)
	}
	return in
}

// indexDigest is the SHA-256 (its first 16 bytes, in hex) of all of an
// index: the keys in order, the date and number spans by parameter, the
// sort date.
func indexDigest(ix domain.ResourceIndex) string {
	h := sha256.New()
	fmt.Fprintf(h, "%q\x00", ix.Keys)
	for _, name := range sortedKeys(ix.Dates) {
		s := ix.Dates[name]
		fmt.Fprintf(h, "date %s %s %s\x00", name, s.Start.Format("2006-01-02T15:04:05.999999999Z07:00"), s.End.Format("2006-01-02T15:04:05.999999999Z07:00"))
	}
	for _, name := range sortedKeys(ix.Numbers) {
		s := ix.Numbers[name]
		fmt.Fprintf(h, "number %s %v %v\x00", name, s.Low, s.High)
	}
	if ix.SortDate != nil {
		fmt.Fprintf(h, "sort %s\x00", ix.SortDate.Format("2006-01-02T15:04:05.999999999Z07:00"))
	}
	fmt.Fprintf(h, "nil %v %v %v", ix.Keys == nil, ix.Dates == nil, ix.Numbers == nil)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestIndexOutputs pins the index of every official R5 example and every
// converted official R4 example by digest (testdata/index-outputs.txt).
// The digests were made by Index before its speed work: a
// change to Index that changes any key, its order, or any span fails
// here. -update rewrites them, for a change of index that is meant.
func TestIndexOutputs(t *testing.T) {
	path := filepath.Join("testdata", "index-outputs.txt")
	c := catalog(t)
	in := inputs(t)
	if len(in) < 2*2500 && !testing.Short() {
		t.Fatalf("%d examples, want the R5 and the converted R4 ones (run scripts/setup first)", len(in))
	}
	got := make([]string, len(in))
	for i, r := range in {
		got[i] = r.name + " " + indexDigest(c.Index(r.resource["resourceType"].(string), r.resource))
	}
	pinned.Lines(t, path, got, *update)
}

// BenchmarkIndex is the CPU of indexing the official R5 examples of the
// types the imported store keeps (Keeps), per resource.
func BenchmarkIndex(b *testing.B) {
	c := catalog(b)
	var kept []indexInput
	for _, r := range inputs(b) {
		if typ := r.resource["resourceType"].(string); strings.HasPrefix(r.name, "r5/") && c.Keeps(typ) {
			kept = append(kept, r)
		}
	}
	b.ReportAllocs()
	defer benchcpu.Per(b, len(kept), "resource")()
	for b.Loop() {
		for _, r := range kept {
			c.Index(r.resource["resourceType"].(string), r.resource)
		}
	}
}
