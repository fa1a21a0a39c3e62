package handlers_test

// Ingest benchmarks over a real database: 10,000 heart-rate observations in
// batches of 1,000, through HTTP (BenchmarkBatchIngest) and with the raw
// driver (BenchmarkRawDriverInsert), so that the ratio of the two can be
// reported. Under `go test` the database is the embedded FerretDB (SQLite),
// which is much slower than MongoDB: see docs/benchmarks.md. Run with
// -benchtime=1x (or 3x): one op is 10,000 observations.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"exchange/domain"
	"exchange/handlers"
	"exchange/handlers/handlerstest"
	"exchange/internal/benchcpu"
	"exchange/repo"
	"exchange/repo/repotest"
)

// benchPerOp is how many observations one benchmark op stores.
const benchPerOp = 10_000

// benchBatchSizes are the observations per batch Bundle / InsertMany that
// the batch path has targets for (HTTP over raw: 1.15x at 100, 1.1x at 1,000).
var benchBatchSizes = []int{100, 1_000}

// benchWorld is an organization with a manager and a patient, enrolled in
// a study that requests heart rate (omh:heart-rate:2.0) from a device, who
// consented to it.
type benchWorld struct {
	env     *handlerstest.Env
	patient *domain.Patient
	device  int64
	token   string // the manager's
	mongo   *mongo.Database
}

func newBenchWorld(b testing.TB, o handlerstest.Options) *benchWorld {
	b.Helper()
	env := handlerstest.StartWith(b, o)
	ctx, svc, system := context.Background(), env.Service, domain.SystemActor()
	check := func(err error) {
		b.Helper()
		if err != nil {
			b.Fatalf("fixture: %v", err)
		}
	}
	org, err := svc.CreateOrganization(ctx, system, domain.NewOrganization{Name: "Bench Clinic", Type: "prov"})
	check(err)
	manager, err := svc.CreateUser(ctx, domain.NewUser{Email: "bench-manager@example.org", Type: domain.UserPractitioner, FirstName: "Bench"})
	check(err)
	check(svc.AddMember(ctx, system, org.ID, manager.ID, domain.RoleManager))
	patient, err := svc.CreatePatient(ctx, system, domain.NewPatient{Email: "bench-patient@example.org",
		FamilyName: "Doe", GivenNames: []string{"Jo"}, OrganizationIDs: []int64{org.ID}})
	check(err)
	hr, err := svc.EnsureScopeCode(ctx, domain.SystemOpenMHealth, "omh:heart-rate:2.0", "Heart rate")
	check(err)
	device, err := svc.CreateDataSource(ctx, system, domain.NewDataSource{Name: "Bench Watch", Type: domain.DataSourcePersonalDevice})
	check(err)
	study, err := svc.CreateStudy(ctx, system, domain.NewStudy{OrganizationID: org.ID, Name: "Bench Study"})
	check(err)
	check(svc.RequestScope(ctx, system, study, hr.ID))
	_, err = svc.AddStudyDataSource(ctx, system, study.ID, device.ID)
	check(err)
	check(svc.EnrollPatients(ctx, system, study.ID, []int64{patient.ID}))
	yes := true
	check(svc.AnswerConsents(ctx, system, patient.ID, []domain.StudyScopeConsents{{StudyID: study.ID,
		Scopes: []domain.ScopeConsent{{System: hr.System, Code: hr.Code, Consented: &yes}}}}))

	client, err := mongo.Connect(options.Client().ApplyURI(repotest.URI()))
	check(err)
	b.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	return &benchWorld{env: env, patient: patient, device: device.ID, token: env.Token(b, manager.ID),
		mongo: client.Database(env.DB.Name())}
}

// post sends one batch Bundle and checks that every entry was created.
func (w *benchWorld) post(b testing.TB, body []byte, entries int) {
	req, err := http.NewRequest(http.MethodPost, w.env.URL+"/FHIR/R5/", bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/fhir+json")
	req.Header.Set("Authorization", "Bearer "+w.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		b.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("batch: %d %.500s", resp.StatusCode, out)
	}
	if n := bytes.Count(out, []byte(`"status":"201 Created"`)); n != entries {
		b.Fatalf("batch: %d of %d entries created: %.500s", n, entries, out)
	}
}

func (w *benchWorld) count(b *testing.B, collection string) int64 {
	n, err := w.mongo.Collection(collection).CountDocuments(context.Background(), bson.D{})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// cpuTime is the CPU time (user and system) of the whole test process so
// far: the HTTP client, the server and the embedded database all run in it.
var cpuTime = benchcpu.Process

// reportRate reports observations per second and wall time per
// observation, and the process's CPU time per observation (cpu, measured
// over the timed work): less disturbed than wall time on a machine shared
// with other work.
func reportRate(b *testing.B, cpu time.Duration) {
	total := float64(b.N * benchPerOp)
	b.ReportMetric(total/b.Elapsed().Seconds(), "obs/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/total, "ns/obs")
	b.ReportMetric(float64(cpu.Nanoseconds())/total, "cpu-ns/obs")
}

// BenchmarkBatchIngest posts 10,000 heart-rate observations per op as
// batch Bundles of each size (POST /FHIR/R5/), one after the other, each
// observation with its own identifier; every entry must come back 201.
// The Bundles are built before the timer starts (plain bytes, which the
// garbage collector does not scan).
func BenchmarkBatchIngest(b *testing.B) {
	for _, size := range benchBatchSizes {
		b.Run(fmt.Sprintf("http-batch-%d", size), func(b *testing.B) { benchBatchIngest(b, size) })
	}
}

func benchBatchIngest(b *testing.B, benchBatch int) {
	w := newBenchWorld(b, handlerstest.Options{})
	bodies := make([][]byte, 0, b.N*benchPerOp/benchBatch)
	for i := 0; i < b.N*benchPerOp; i += benchBatch {
		bodies = append(bodies, handlers.BenchBatch("http", i, benchBatch, w.patient.ID, w.device))
	}
	b.ResetTimer()
	cpu := cpuTime()
	for _, body := range bodies {
		w.post(b, body, benchBatch)
	}
	b.StopTimer()
	reportRate(b, cpuTime()-cpu)
	if got := w.count(b, "observations"); got != int64(b.N*benchPerOp) {
		b.Fatalf("%d observations stored, want %d", got, b.N*benchPerOp)
	}
}

// BenchmarkRawDriverInsert inserts what BenchmarkBatchIngest stores, with
// the driver alone: per batch of each size, one unordered InsertMany of
// the identifier claims, then one of the observation documents, as
// repo.CreateObservations does (without the few writes per batch that
// make it safe to repeat: its id block claim and its write intent). Each
// batch's documents are built with the
// timer stopped (all of them built up front would be a large live heap
// that every garbage collection of the embedded database scans), and are
// checked to be byte for byte what the service stores.
func BenchmarkRawDriverInsert(b *testing.B) {
	for _, size := range benchBatchSizes {
		b.Run(fmt.Sprintf("raw-batch-%d", size), func(b *testing.B) { benchRawDriverInsert(b, size) })
	}
}

func benchRawDriverInsert(b *testing.B, benchBatch int) {
	w := newBenchWorld(b, handlerstest.Options{})
	ctx := context.Background()
	w.checkDocuments(b)
	const firstID = 1_000_000 // above what checkDocuments stored
	now := time.Now().UTC().Truncate(time.Microsecond)
	claims, observations := w.mongo.Collection("observation_identifiers"), w.mongo.Collection("observations")
	unordered := options.InsertMany().SetOrdered(false)
	before := w.count(b, "observations")
	var cpu time.Duration
	b.ResetTimer()
	for i := 0; i < b.N*benchPerOp; i += benchBatch {
		b.StopTimer()
		var claimDocs, docs []any
		for k := i; k < i+benchBatch; k++ {
			o := handlers.BenchStored("raw", k, firstID+int64(k), w.patient.ID, w.device, now)
			doc, cs, err := repo.ObservationDocuments(o)
			if err != nil {
				b.Fatal(err)
			}
			claimDocs = append(claimDocs, cs...)
			docs = append(docs, doc)
		}
		b.StartTimer()
		start := cpuTime()
		if _, err := claims.InsertMany(ctx, claimDocs, unordered); err != nil {
			b.Fatal(err)
		}
		if _, err := observations.InsertMany(ctx, docs, unordered); err != nil {
			b.Fatal(err)
		}
		cpu += cpuTime() - start
	}
	b.StopTimer()
	reportRate(b, cpu)
	if got := w.count(b, "observations") - before; got != int64(b.N*benchPerOp) {
		b.Fatalf("%d observations inserted, want %d", got, b.N*benchPerOp)
	}
}

// checkDocuments creates one observation through HTTP and checks that
// repo.ObservationDocuments of the benchmark's observation are exactly the
// documents the service stored for it, so that the raw inserts are
// equivalent.
func (w *benchWorld) checkDocuments(b *testing.B) {
	ctx := context.Background()
	w.post(b, handlers.BenchBatch("shape", 0, 1, w.patient.ID, w.device), 1)
	var stored bson.Raw
	if err := w.mongo.Collection("observations").FindOne(ctx, bson.D{}).Decode(&stored); err != nil {
		b.Fatal(err)
	}
	// The claim as stored: its _id is the key it claims, so it is part of
	// the comparison.
	var claim bson.Raw
	if err := w.mongo.Collection("observation_identifiers").FindOne(ctx, bson.D{}).Decode(&claim); err != nil {
		b.Fatal(err)
	}
	id := stored.Lookup("_id").Int64()
	micros := stored.Lookup("lastUpdatedMicros").Int64()
	o := handlers.BenchStored("shape", 0, id, w.patient.ID, w.device, time.UnixMicro(micros).UTC())
	doc, claims, err := repo.ObservationDocuments(o)
	if err != nil {
		b.Fatal(err)
	}
	for name, pair := range map[string][2]any{"observation": {doc, stored}, "claim": {claims[0], bson.Raw(claim)}} {
		want, err := bson.Marshal(pair[0])
		if err != nil {
			b.Fatal(err)
		}
		if got := pair[1].(bson.Raw); !bytes.Equal(want, got) {
			b.Fatalf("the benchmark's %s document differs from the stored one:\nbuilt  %s\nstored %s", name, bson.Raw(want), got)
		}
	}
	b.Logf("raw documents match the stored ones (%d-byte observation, %d-byte claim)", len(stored), len(claim))
}
