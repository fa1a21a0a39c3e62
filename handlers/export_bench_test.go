package handlers

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
	"exchange/fhirsearch"
	"exchange/repo"
)

// BenchmarkExportCPU is the service's CPU per exported observation without
// the database: an export job of observations run by the real runner
// (planning, the owner's plan of a search of observations, the records
// decoded from the documents the database streams, each rendered as FHIR
// NDJSON, gzip-compressed and written to a file of the data directory),
// over a store that hands over prepared documents. "render" and
// "render+gzip" split the cost. The target is 10 µs an observation.
func BenchmarkExportCPU(b *testing.B) {
	const n = 10_000
	store := &exportBenchStore{benchStore: newBenchStore()}
	updated := time.Date(2024, 2, 1, 12, 0, 0, 123456000, time.UTC)
	var records []domain.Observation
	for i := range n {
		o := BenchStored("export", i, int64(i+1), 1, 1, updated)
		doc, _, err := repo.ObservationDocuments(o)
		if err != nil {
			b.Fatal(err)
		}
		store.docs = append(store.docs, doc)
		o.DataPoint = nil
		records = append(records, *o)
	}
	enc := ExportEncoder{}

	b.Run("render", func(b *testing.B) {
		var line []byte
		perObservation(b, n, func() {
			for b.Loop() {
				for i := range records {
					line, _ = enc.AppendRecord(line[:0], domain.ExportFHIR, nil, &records[i])
				}
			}
		})
	})
	b.Run("render+gzip", func(b *testing.B) {
		var line []byte
		zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
		perObservation(b, n, func() {
			for b.Loop() {
				zw.Reset(io.Discard)
				for i := range records {
					line, _ = enc.AppendRecord(line[:0], domain.ExportFHIR, nil, &records[i])
					_, _ = zw.Write(line)
				}
				_ = zw.Close()
			}
		})
	})
	b.Run("job", func(b *testing.B) {
		files, err := repo.NewDirExportFiles(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		svc := domain.NewService(domain.Config{Store: store, ExportFiles: files, ExportSearches: benchTranslator(b)})
		runner := &domain.ExportRunner{Service: svc, Encoder: enc, Limits: domain.DefaultExportLimits}
		ctx := context.Background()
		perObservation(b, n, func() {
			for b.Loop() {
				j := &domain.ExportJob{ID: "bench", State: domain.ExportRunning, Owner: domain.ExportOwner{UserID: store.manager.ID},
					TransactionTime: time.Now(), Request: domain.ExportRequest{Level: domain.ExportPatient, Types: []string{"Observation"},
						TypesAsked: true, Format: domain.ExportFHIR}}
				runner.RunJob(ctx, j)
				if j.State != domain.ExportCompleted || len(j.Outputs) != 1 || j.Outputs[0].Count != n {
					b.Fatalf("the job ended %s (%s) with %+v", j.State, j.Failure, j.Outputs)
				}
			}
		})
	})
}

// exportBenchStore is the benchStore with what an export job reads and
// writes: its record (kept nowhere) and the documents of its stream.
type exportBenchStore struct {
	*benchStore
	docs []bson.Raw
}

func (s *exportBenchStore) UpdateExportJob(_ context.Context, j *domain.ExportJob) error {
	j.Version++
	return nil
}

// StreamObservations hands over the documents in the batches the
// database's stream does, decoded as repo decodes them.
func (s *exportBenchStore) StreamObservations(_ context.Context, _ *domain.SearchPlan, each func([]domain.Observation) error) error {
	for i := 0; i < len(s.docs); i += 256 {
		batch, err := repo.ObservationPage(s.docs[i:min(i+256, len(s.docs))])
		if err != nil {
			return err
		}
		if err := each(batch); err != nil {
			return err
		}
	}
	return nil
}

// benchTranslator parses the searches of the configured (native) types.
func benchTranslator(b *testing.B) *fhirsearch.Translator {
	catalog, err := fhirsearch.NewCatalog(nil)
	if err != nil {
		b.Fatal(err)
	}
	return fhirsearch.NewTranslator(catalog, []byte("bench cursor key"), "https://exchange.example.org/fhir-source", nil)
}
