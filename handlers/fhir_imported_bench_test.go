package handlers_test

// Imported-store benchmarks over a real database: creates of Conditions
// and Encounters through HTTP (batch Bundles of 100) beside raw driver
// inserts of the same documents, and a search page through HTTP beside
// the raw driver running the same pipeline. One op is 1,000 resources
// (creates) or one page (searches). Under `go test` the database is the
// embedded FerretDB: see docs/benchmarks.md for what that means.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"exchange/domain"
	"exchange/fhirsearch"
	"exchange/handlers/handlerstest"
	"exchange/repo/repotest"
)

const (
	importedPerOp = 1_000
	importedBatch = 100
)

// importedBenchTypes generate the i-th resource of a type: Conditions of
// ten SNOMED codes with onsets a day apart, Encounters of three classes
// an hour long, all of one patient.
var importedBenchTypes = map[string]func(i int, patient int64) string{
	"Condition": func(i int, patient int64) string {
		return fmt.Sprintf(`{"resourceType":"Condition","id":"c-%d","clinicalStatus":{"coding":[{"system":"http://terminology.hl7.org/CodeSystem/condition-clinical","code":"active"}]},`+
			`"category":[{"coding":[{"system":"http://terminology.hl7.org/CodeSystem/condition-category","code":"problem-list-item"}]}],`+
			`"code":{"coding":[{"system":"http://snomed.info/sct","code":"4405400%d","display":"Condition %d"}]},`+
			`"subject":{"reference":"Patient/%d"},"onsetDateTime":"%s","recordedDate":"%s"}`,
			i, i%10, i%10, patient, benchDay(i), benchDay(i+1))
	},
	"Encounter": func(i int, patient int64) string {
		start := time.Date(2020, 1, 1, 8, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Hour)
		return fmt.Sprintf(`{"resourceType":"Encounter","id":"e-%d","status":"completed",`+
			`"class":[{"coding":[{"system":"http://terminology.hl7.org/CodeSystem/v3-ActCode","code":"%s"}]}],`+
			`"identifier":[{"system":"http://ehr.example.org/encounter","value":"enc-%d"}],"subject":{"reference":"Patient/%d"},`+
			`"actualPeriod":{"start":"%s","end":"%s"},"location":[{"location":{"reference":"Location/l-%d"}}]}`,
			i, []string{"AMB", "IMP", "EMER"}[i%3], i, patient, start.Format(time.RFC3339), start.Add(time.Hour).Format(time.RFC3339), i%5)
	},
}

func benchDay(i int) string {
	return time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, i).Format(time.DateOnly)
}

// importedBenchWorld is a patient with a FHIR source, and the practitioner
// who writes to it.
type importedBenchWorld struct {
	env     *handlerstest.Env
	source  *domain.FHIRSource
	patient int64
	token   string
	db      *mongo.Database
}

func newImportedBenchWorld(b *testing.B) *importedBenchWorld {
	b.Helper()
	env := handlerstest.Start(b)
	ctx, svc, system := context.Background(), env.Service, domain.SystemActor()
	org := fxMust(svc.CreateOrganization(ctx, system, domain.NewOrganization{Name: "Bench Clinic", Type: "prov"}))
	doc := fxMust(svc.CreateUser(ctx, domain.NewUser{Email: "bench-doc@example.org", Type: domain.UserPractitioner, FirstName: "Bench"}))
	if err := svc.AddMember(ctx, system, org.ID, doc.ID, domain.RoleMember); err != nil {
		b.Fatal(err)
	}
	patient := fxMust(svc.CreatePatient(ctx, system, domain.NewPatient{Email: "bench-patient@example.org", FamilyName: "Doe", GivenNames: []string{"Jo"}, OrganizationIDs: []int64{org.ID}}))
	source := fxMust(svc.CreateFHIRSource(ctx, system, patient.ID, 0, "Bench EHR"))
	client := fxMust(mongo.Connect(options.Client().ApplyURI(repotest.URI())))
	b.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	return &importedBenchWorld{env: env, source: source, patient: patient.ID, token: env.Token(b, doc.ID), db: client.Database(env.DB.Name())}
}

// batch is a batch Bundle creating resources from..from+n of a type.
func (w *importedBenchWorld) batch(resourceType string, run, from, n int) []byte {
	var buf bytes.Buffer
	buf.WriteString(`{"resourceType":"Bundle","type":"batch","entry":[`)
	for i := from; i < from+n; i++ {
		if i > from {
			buf.WriteByte(',')
		}
		fmt.Fprintf(&buf, `{"request":{"method":"POST","url":"%s"},"resource":%s}`, resourceType,
			importedBenchTypes[resourceType](run*1_000_000+i, w.patient))
	}
	buf.WriteString(`]}`)
	return buf.Bytes()
}

func (w *importedBenchWorld) send(b *testing.B, method, path string, body []byte) []byte {
	req, err := http.NewRequest(method, w.env.URL+fxBase+path, bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/fhir+json")
	req.Header.Set("Authorization", "Bearer "+w.token)
	req.Header.Set(domain.SourceHeader, fmt.Sprint(w.source.ID))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("%s %s: %d %.500s", method, path, resp.StatusCode, out)
	}
	return out
}

// create posts resources of a type in batches; every entry must be created.
func (w *importedBenchWorld) create(b *testing.B, resourceType string, run, n int) {
	for from := 0; from < n; from += importedBatch {
		out := w.send(b, "POST", "/", w.batch(resourceType, run, from, importedBatch))
		if got := bytes.Count(out, []byte(`"status":"201 Created"`)); got != importedBatch {
			b.Fatalf("%d of %d created: %.800s", got, importedBatch, out)
		}
	}
}

func reportResources(b *testing.B, n int, cpu time.Duration) {
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "res/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/res")
}

// BenchmarkImportedCreate creates 1,000 resources per op through HTTP, in
// batch Bundles of 100: validation, indexing and the insert of each.
func BenchmarkImportedCreate(b *testing.B) {
	for _, resourceType := range []string{"Condition", "Encounter"} {
		b.Run(resourceType, func(b *testing.B) {
			w := newImportedBenchWorld(b)
			run := 0
			cpu := cpuTime()
			for b.Loop() {
				w.create(b, resourceType, run, importedPerOp)
				run++
			}
			reportResources(b, run*importedPerOp, cpuTime()-cpu)
		})
	}
}

// BenchmarkImportedRawInsert inserts the documents the service stored for
// 1,000 resources per op again with the raw driver (new _id and unique
// key), in InsertMany calls of 100: the floor under BenchmarkImportedCreate.
func BenchmarkImportedRawInsert(b *testing.B) {
	for _, resourceType := range []string{"Condition", "Encounter"} {
		b.Run(resourceType, func(b *testing.B) {
			w := newImportedBenchWorld(b)
			w.create(b, resourceType, 0, importedPerOp)
			ctx := context.Background()
			col := w.db.Collection("resources")
			cur, err := col.Find(ctx, bson.D{})
			if err != nil {
				b.Fatal(err)
			}
			var stored []bson.D
			if err := cur.All(ctx, &stored); err != nil || len(stored) != importedPerOp {
				b.Fatalf("%d stored: %v", len(stored), err)
			}
			run, cpu := 0, time.Duration(0)
			for b.Loop() {
				run++
				for from := 0; from < importedPerOp; from += importedBatch {
					b.StopTimer()
					docs := make([]any, importedBatch)
					for k := range docs {
						doc := append(bson.D{}, stored[from+k]...)
						for e := range doc {
							switch doc[e].Key {
							case "_id", "uniqueKey":
								doc[e].Value = fmt.Sprintf("raw-%d-%d", run, from+k)
							}
						}
						docs[k] = doc
					}
					b.StartTimer()
					start := cpuTime()
					if _, err := col.InsertMany(ctx, docs); err != nil {
						b.Fatal(err)
					}
					cpu += cpuTime() - start
				}
			}
			reportResources(b, run*importedPerOp, cpu)
		})
	}
}

// importedSearches are the searches of BenchmarkImportedSearch, over
// 1,000 resources of each type: a token, a date range, sorted.
var importedSearches = map[string]string{
	"Condition": "code=http://snomed.info/sct|44054003&onset-date=ge2001-01-01&_sort=-onset-date&_count=50",
	"Encounter": "class=AMB&date=ge2020-01-10&_sort=date&_count=50",
}

// BenchmarkImportedSearch runs one page of a search per op through HTTP,
// as a practitioner (so the readable sources are resolved each time), and
// beside it the pipeline the service runs, with the raw driver.
func BenchmarkImportedSearch(b *testing.B) {
	w := newImportedBenchWorld(b)
	for resourceType := range importedBenchTypes {
		w.create(b, resourceType, 0, importedPerOp)
	}
	below := "_source:below=" + url.QueryEscape(handlerstest.SourceBase+"/")
	_, catalog := handlerstest.R5(b)
	for resourceType, query := range importedSearches {
		b.Run(resourceType+"/http", func(b *testing.B) {
			var entries int
			for b.Loop() {
				out := w.send(b, "GET", "/"+resourceType+"?"+below+"&"+query, nil)
				entries = bytes.Count(out, []byte(`"mode":"match"`))
			}
			if entries != 50 {
				b.Fatalf("%d entries, want a page of 50", entries)
			}
		})
		b.Run(resourceType+"/raw", func(b *testing.B) {
			values, _ := url.ParseQuery(below + "&" + query)
			q, err := fhirsearch.NewTranslator(catalog, []byte("bench"), handlerstest.SourceBase, nil).Parse(resourceType, values, true)
			if err != nil {
				b.Fatal(err)
			}
			plan, err := q.Plan(domain.Scope{SourceIDs: []int64{w.source.ID}})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var docs []bson.Raw
			for b.Loop() {
				cur, err := w.db.Collection(plan.Collection).Aggregate(ctx, plan.Pipeline)
				if err != nil {
					b.Fatal(err)
				}
				if err := cur.All(ctx, &docs); err != nil {
					b.Fatal(err)
				}
			}
			if len(docs) != 51 {
				b.Fatalf("%d documents, want 51", len(docs))
			}
			var first struct {
				JSON string `bson:"json"`
			}
			if err := bson.Unmarshal(docs[0], &first); err != nil || !json.Valid([]byte(first.JSON)) {
				b.Fatalf("first document: %v", err)
			}
		})
	}
}
