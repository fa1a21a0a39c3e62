package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"exchange/converter"
	"exchange/domain"
	"exchange/fhirdefs"
	"exchange/fhirdefs/fhirdefstest"
	"exchange/fhirsearch"
	"exchange/internal/benchcpu"
	"exchange/omh/omhtest"
)

// importBenchStore is a benchStore that holds a FHIR source of its patient
// and stores imported resources nowhere: the R4 import benchmark counts
// the service's CPU, not the database's. It keeps the resources of the
// last call to CreateResources, for the stages' benchmark.
type importBenchStore struct {
	*benchStore
	created int
	last    []*domain.Resource
}

func (s *importBenchStore) FHIRSourceByID(_ context.Context, id int64) (*domain.FHIRSource, error) {
	return &domain.FHIRSource{ID: id, PatientID: s.patient.ID, Label: "Hospital EHR"}, nil
}

func (s *importBenchStore) CreateResources(_ context.Context, rs []*domain.Resource) []error {
	s.created += len(rs)
	s.last = rs
	return make([]error, len(rs))
}

// benchStandards is where scripts/setup puts the standards' data.
const benchStandards = "../standards"

// importBench is the R4 import as the service runs it, the database left
// out: the official maps compiled, the R4 and R5 validators, the catalog
// of the imported store, and POST /fhir-import/R4 on a Fiber app.
type importBench struct {
	engine  *converter.Engine
	r4, r5  *fhirdefs.Validator
	catalog *fhirsearch.Catalog
	store   *importBenchStore
	handler fasthttp.RequestHandler
}

func newImportBench(b *testing.B) *importBench {
	packages := fhirdefstest.PackagesDir()
	r5, validator, err := fhirdefs.OpenR5(packages)
	if err != nil {
		b.Fatalf("%v (run scripts/setup first)", err)
	}
	catalog, err := fhirsearch.NewCatalog(r5)
	if err != nil {
		b.Fatal(err)
	}
	r4, err := fhirdefs.OpenR4(packages)
	if err != nil {
		b.Fatal(err)
	}
	xver := filepath.Join(benchStandards, "fhir", "xver-r4-r5")
	engine, err := converter.Compile(converter.Options{R4: r4, R5: r5, MapsDir: filepath.Join(xver, "maps"), ConceptMapsDir: filepath.Join(xver, "conceptmaps")})
	if err != nil {
		b.Fatal(err)
	}
	store := &importBenchStore{benchStore: newBenchStore()}
	svc := domain.NewService(domain.Config{Store: store, Schemas: omhtest.Registry(b), Validator: validator, Indexer: catalog, Converter: converter.NewImporter(engine)})
	s := &server{service: svc, catalog: catalog, log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: newMetrics(prometheus.NewRegistry(), catalog)}
	s.native = s.nativeTypes()
	a, err := svc.Actor(context.Background(), store.manager.ID)
	if err != nil {
		b.Fatal(err)
	}
	app := fiber.New(fiber.Config{ErrorHandler: s.handleError, BodyLimit: 64 << 20, JSONEncoder: marshalJSON, DisableStartupMessage: true})
	app.Post("/fhir-import/R4", func(c *fiber.Ctx) error {
		c.Locals(actorKey, a)
		return c.Next()
	}, s.importR4)
	return &importBench{engine: engine, r4: fhirdefs.NewR4Validator(r4), r5: validator, catalog: catalog, store: store, handler: app.Handler()}
}

// post sends body to POST /fhir-import/R4 in ctx, reused between calls.
func (ib *importBench) post(b *testing.B, ctx *fasthttp.RequestCtx, body []byte) {
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.SetRequestURI("/fhir-import/R4")
	ctx.Request.Header.SetContentType("application/fhir+json")
	ctx.Request.Header.Set(domain.SourceHeader, "1")
	ctx.Request.SetBody(body)
	ib.handler(ctx)
	if code := ctx.Response.StatusCode(); code != 200 {
		b.Fatalf("%d %s", code, ctx.Response.Body())
	}
}

// r4Examples are up to ten official R4 examples of a type (the inputs of
// converter.BenchmarkConvert).
func r4Examples(tb testing.TB, resourceType string) [][]byte {
	files, _ := filepath.Glob(filepath.Join(fhirdefstest.PackageDir("hl7.fhir.r4.examples"), resourceType+"-*.json"))
	var out [][]byte
	for _, f := range files {
		data, _ := os.ReadFile(f)
		var probe struct{ ResourceType string }
		if json.Unmarshal(data, &probe) == nil && probe.ResourceType == resourceType && len(out) < 10 {
			out = append(out, data)
		}
	}
	if len(out) == 0 {
		tb.Fatalf("no R4 examples of %s (run scripts/setup first)", resourceType)
	}
	return out
}

// r4ExampleBundle is a batch Bundle that creates r4Examples.
func r4ExampleBundle(tb testing.TB, resourceType string) []byte {
	var entries []map[string]any
	for _, e := range r4Examples(tb, resourceType) {
		entries = append(entries, map[string]any{"resource": json.RawMessage(e), "request": map[string]any{"method": "POST", "url": resourceType}})
	}
	body, err := json.Marshal(map[string]any{"resourceType": "Bundle", "type": "batch", "entry": entries})
	if err != nil {
		tb.Fatal(err)
	}
	return body
}

// BenchmarkImportR4CPU is the service's CPU per resource of POST
// /fhir-import/R4: a Bundle of the official R4 examples of a type (the
// inputs of converter.BenchmarkConvert), each checked, converted,
// validated as R5 and created, the database left out. Its cpu-ns/res over
// BenchmarkConvert's is the import's cost over the conversion's.
func BenchmarkImportR4CPU(b *testing.B) {
	ib := newImportBench(b)
	for _, rt := range []string{"Observation", "Condition", "Encounter"} {
		examples, body := r4Examples(b, rt), r4ExampleBundle(b, rt)
		runs := 0
		b.Run(rt, func(b *testing.B) {
			b.ReportAllocs()
			var ctx fasthttp.RequestCtx
			defer benchcpu.Per(b, len(examples), "res")()
			for ; b.Loop(); runs++ {
				ib.post(b, &ctx, body)
			}
		})
		if ib.store.created != runs*len(examples) {
			b.Fatalf("%s: %d of %d examples created", rt, ib.store.created, runs*len(examples))
		}
		ib.store.created = 0
	}
}

// BenchmarkImportR4Stages is the CPU per resource of each check the R4
// import makes beyond the conversion, each alone on the examples of
// BenchmarkImportR4CPU: the R4 check of the decoded input (r4-check), the
// strict decoding of the stored R5 resource (r5-decode), its R5
// validation (r5-check), its search index (index), and the four in a row
// (all). all's cpu-ns/res over BenchmarkConvert's is the share of the
// import's cost over the conversion's that no trimming of the service's
// plumbing removes.
func BenchmarkImportR4Stages(b *testing.B) {
	ib := newImportBench(b)
	for _, rt := range []string{"Observation", "Condition", "Encounter"} {
		examples := r4Examples(b, rt)
		var ctx fasthttp.RequestCtx
		ib.post(b, &ctx, r4ExampleBundle(b, rt))
		stored := ib.store.last
		if len(stored) != len(examples) {
			b.Fatalf("%s: %d of %d examples created", rt, len(stored), len(examples))
		}
		inputs := make([]map[string]any, len(examples)) // what the R4 check reads
		for i, e := range examples {
			in, err := domain.DecodeJSON(e)
			if err != nil {
				b.Fatal(err)
			}
			delete(in, "id") // as ConvertR4 does before the check
			inputs[i] = in
		}
		stage := func(name string, run func(i int) error) {
			b.Run(rt+"/"+name, func(b *testing.B) {
				b.ReportAllocs()
				defer benchcpu.Per(b, 1, "res")()
				for i := 0; b.Loop(); i++ {
					if err := run(i % len(examples)); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		r4Check := func(i int) error { return noIssues(ib.r4.ValidateObject(inputs[i])) }
		r5Decode := func(i int) error { _, err := domain.DecodeJSON(stored[i].JSON); return err }
		r5Check := func(i int) error { return noIssues(ib.r5.ValidateObject(stored[i].Object)) }
		index := func(i int) error {
			if ix := ib.catalog.Index(rt, stored[i].Object); len(ix.Keys) == 0 {
				return fmt.Errorf("%s: nothing indexed", stored[i].ID)
			}
			return nil
		}
		stage("r4-check", r4Check)
		stage("r5-decode", r5Decode)
		stage("r5-check", r5Check)
		stage("index", index)
		stage("all", func(i int) error { return errors.Join(r4Check(i), r5Decode(i), r5Check(i), index(i)) })
	}
}

// noIssues is a validation's error, or one naming its first issue.
func noIssues(issues []fhirdefs.Issue, err error) error {
	if err == nil && len(issues) > 0 {
		err = fmt.Errorf("%d issues, the first: %s", len(issues), issues[0])
	}
	return err
}
