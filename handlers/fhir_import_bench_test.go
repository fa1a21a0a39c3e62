package handlers

import (
	"context"
	"encoding/json"
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
// the service's CPU, not the database's.
type importBenchStore struct {
	*benchStore
	created int
}

func (s *importBenchStore) FHIRSourceByID(_ context.Context, id int64) (*domain.FHIRSource, error) {
	return &domain.FHIRSource{ID: id, PatientID: s.patient.ID, Label: "Hospital EHR"}, nil
}

func (s *importBenchStore) CreateResources(_ context.Context, rs []*domain.Resource) []error {
	s.created += len(rs)
	return make([]error, len(rs))
}

// benchStandards is where scripts/setup puts the standards' data.
const benchStandards = "../standards"

// benchImporter compiles the official maps as the service does, with the
// R5 validator and catalog of the imported store.
func benchImporter(b *testing.B) (*converter.Importer, *fhirdefs.Validator, *fhirsearch.Catalog) {
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
	importer := converter.NewImporter(engine)
	return importer, validator, catalog
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
	importer, validator, catalog := benchImporter(b)
	store := &importBenchStore{benchStore: newBenchStore()}
	svc := domain.NewService(domain.Config{Store: store, Schemas: omhtest.Registry(b), Validator: validator, Indexer: catalog, Converter: importer})
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
	handler := app.Handler()
	for _, rt := range []string{"Observation", "Condition", "Encounter"} {
		examples, body := r4Examples(b, rt), r4ExampleBundle(b, rt)
		runs := 0
		b.Run(rt, func(b *testing.B) {
			b.ReportAllocs()
			var ctx fasthttp.RequestCtx
			defer benchcpu.Per(b, len(examples), "res")()
			for ; b.Loop(); runs++ {
				ctx.Request.Reset()
				ctx.Response.Reset()
				ctx.Request.Header.SetMethod("POST")
				ctx.Request.SetRequestURI("/fhir-import/R4")
				ctx.Request.Header.SetContentType("application/fhir+json")
				ctx.Request.Header.Set(domain.SourceHeader, "1")
				ctx.Request.SetBody(body)
				handler(&ctx)
				if code := ctx.Response.StatusCode(); code != 200 {
					b.Fatalf("%d %s", code, ctx.Response.Body())
				}
			}
		})
		if store.created != runs*len(examples) {
			b.Fatalf("%s: %d of %d examples created", rt, store.created, runs*len(examples))
		}
		store.created = 0
	}
}
