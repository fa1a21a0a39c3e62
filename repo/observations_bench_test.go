package repo

// CPU benchmarks of the observation documents without a database, in
// package repo because the document types are unexported: building and
// marshalling what CreateObservations inserts, and decoding a search page
// as runSearch does. See docs/benchmarks.md.

import (
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
	"exchange/fhirsearch"
	"exchange/internal/benchcpu"
	"exchange/omh"
)

// benchObservation is a heart-rate observation as the domain hands it to
// CreateObservations (the same data point as the handlers benchmarks).
func benchObservation(b *testing.B, i int) *domain.Observation {
	t := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Minute)
	payload := fmt.Appendf(nil, `{"header":{"id":"cpu-%d","creation_date_time":"%s",`+
		`"schema_id":{"namespace":"omh","name":"heart-rate","version":"2.0"},`+
		`"acquisition_provenance":{"source_name":"Bench Watch","modality":"sensed"}},`+
		`"body":{"heart_rate":{"value":%d,"unit":"beats/min"},"effective_time_frame":{"date_time":"%s"}}}`,
		i, t.Add(30*time.Second).Format(time.RFC3339), 55+i%60, t.Format(time.RFC3339))
	dp, err := omh.Parse(payload)
	if err != nil {
		b.Fatal(err)
	}
	tf, _ := omh.EffectiveTimeFrame(dp.Body)
	return &domain.Observation{ID: int64(i + 1), PatientID: 1, DataSourceID: 1, Status: "final",
		Codings:     []domain.Coding{{System: domain.SystemOpenMHealth, Code: "omh:heart-rate:2.0", Display: "Heart rate"}},
		Code:        "omh:heart-rate:2.0",
		Identifiers: []domain.Identifier{{System: "urn:example:bench:observation", Value: fmt.Sprintf("cpu-%d", i)}},
		ContentType: "application/json", Payload: payload, DataPoint: dp.Document, Effective: tf,
		LastUpdated: time.Date(2024, 2, 1, 12, 0, 0, 123456000, time.UTC)}
}

// BenchmarkObservationDocument is the CPU per observation of building its
// stored document (observationBSON) and marshalling its identifier claim,
// as CreateObservations and the driver do inside InsertMany.
func BenchmarkObservationDocument(b *testing.B) {
	o := benchObservation(b, 7)
	b.ReportAllocs()
	defer benchcpu.Per(b, 1, "op")()
	for b.Loop() {
		data, err := observationBSON(o)
		if err != nil {
			b.Fatal(err)
		}
		claim, err := bson.Marshal(observationClaims(o)[0])
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(data) + len(claim)))
	}
}

// BenchmarkObservationPageDecode is the CPU of reading one search page of
// 50 observations back as SearchObservations does (ObservationPage): each
// document as the pipeline returns it (without the members its $project
// leaves out) read off the cursor, copying what it keeps.
func BenchmarkObservationPageDecode(b *testing.B) {
	catalog, err := fhirsearch.NewCatalog(nil)
	if err != nil {
		b.Fatal(err)
	}
	q, err := fhirsearch.NewTranslator(catalog, []byte("k"), "https://exchange.example.org/fhir-source", nil).
		Parse("Observation", url.Values{"code": {"omh:heart-rate:2.0"}, "_count": {"50"}}, true)
	if err != nil {
		b.Fatal(err)
	}
	plan, err := q.Plan(domain.Scope{PatientIDs: []int64{1}})
	if err != nil {
		b.Fatal(err)
	}
	left := plan.Pipeline[len(plan.Pipeline)-1].(bson.D)[0].Value.(bson.D) // $project
	var raws []bson.Raw
	for i := range 50 {
		doc := toObservationDoc(benchObservation(b, i))
		var d bson.D
		data, err := bson.Marshal(doc)
		if err == nil {
			err = bson.Unmarshal(data, &d)
		}
		if err != nil {
			b.Fatal(err)
		}
		d = slices.DeleteFunc(d, func(e bson.E) bool { return slices.ContainsFunc(left, func(p bson.E) bool { return p.Key == e.Key }) })
		if data, err = bson.Marshal(d); err != nil {
			b.Fatal(err)
		}
		raws = append(raws, data)
	}
	b.ReportAllocs()
	defer benchcpu.Per(b, 1, "op")()
	for b.Loop() {
		page, err := ObservationPage(raws)
		if err != nil {
			b.Fatal(err)
		}
		if len(page) != 50 || page[49].Effective == nil {
			b.Fatal("not read")
		}
	}
}
