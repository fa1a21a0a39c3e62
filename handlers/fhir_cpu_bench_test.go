package handlers

// CPU benchmarks of the FHIR paths without a database, in package handlers
// because the decoding and rendering functions are unexported: a batch of
// observations and a search page go through the real handlers (fhirBatch,
// fhirSearch) and the real domain rules, over an in-memory store. The
// exported Bench* helpers are test-only (like export_test.go) and shared
// with the database benchmarks in fhir_bench_test.go. See docs/benchmarks.md.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
	"exchange/fhirsearch"
	"exchange/internal/benchcpu"
	"exchange/omh"
	"exchange/omh/omhtest"
	"exchange/repo"
)

// BenchIdentifierSystem is the identifier system of benchmark observations.
const BenchIdentifierSystem = "urn:example:bench:observation"

// benchEpoch is the effective time of the first benchmark data point.
var benchEpoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// BenchHeartRate returns the i-th Open mHealth heart-rate 2.0 data point of
// a run: one a minute from 2024-01-01, as a wearable uploads them.
func BenchHeartRate(run string, i int) []byte {
	t := benchEpoch.Add(time.Duration(i) * time.Minute)
	return fmt.Appendf(nil, `{"header":{"id":"%s-%d","creation_date_time":"%s",`+
		`"schema_id":{"namespace":"omh","name":"heart-rate","version":"2.0"},`+
		`"acquisition_provenance":{"source_name":"Bench Watch","modality":"sensed"}},`+
		`"body":{"heart_rate":{"value":%d,"unit":"beats/min"},"effective_time_frame":{"date_time":"%s"}}}`,
		run, i, t.Add(30*time.Second).Format(time.RFC3339), 55+i%60, t.Format(time.RFC3339))
}

// BenchObservation returns the FHIR Observation a client uploads for
// BenchHeartRate(run, i), with the unique identifier run-i.
func BenchObservation(run string, i int, patientID, deviceID int64) json.RawMessage {
	type ref struct {
		Reference string `json:"reference"`
	}
	type coding struct {
		System  string `json:"system"`
		Code    string `json:"code"`
		Display string `json:"display"`
	}
	data, _ := json.Marshal(struct {
		ResourceType string              `json:"resourceType"`
		Identifier   []domainIdentifier  `json:"identifier"`
		Status       string              `json:"status"`
		Code         map[string][]coding `json:"code"`
		Subject      ref                 `json:"subject"`
		Device       ref                 `json:"device"`
		Value        map[string]string   `json:"valueAttachment"`
	}{
		ResourceType: "Observation",
		Identifier:   []domainIdentifier{{BenchIdentifierSystem, run + "-" + strconv.Itoa(i)}},
		Status:       "final",
		Code:         map[string][]coding{"coding": {{domain.SystemOpenMHealth, "omh:heart-rate:2.0", "Heart rate"}}},
		Subject:      ref{"Patient/" + strconv.FormatInt(patientID, 10)},
		Device:       ref{"Device/" + strconv.FormatInt(deviceID, 10)},
		Value:        map[string]string{"contentType": "application/json", "data": base64.StdEncoding.EncodeToString(BenchHeartRate(run, i))},
	})
	return data
}

type domainIdentifier struct {
	System string `json:"system"`
	Value  string `json:"value"`
}

// BenchBatch returns a batch Bundle creating the observations from..from+n-1
// of a run.
func BenchBatch(run string, from, n int, patientID, deviceID int64) []byte {
	type request struct {
		Method string `json:"method"`
		URL    string `json:"url"`
	}
	type entry struct {
		Resource json.RawMessage `json:"resource"`
		Request  request         `json:"request"`
	}
	b := struct {
		ResourceType string  `json:"resourceType"`
		Type         string  `json:"type"`
		Entry        []entry `json:"entry"`
	}{ResourceType: "Bundle", Type: "batch"}
	for i := from; i < from+n; i++ {
		b.Entry = append(b.Entry, entry{BenchObservation(run, i, patientID, deviceID), request{"POST", "Observation"}})
	}
	data, _ := json.Marshal(b)
	return data
}

// BenchStored returns BenchHeartRate(run, i) as the domain hands it to the
// store on create (and as a search reads it back, without DataPoint).
func BenchStored(run string, i int, id, patientID, deviceID int64, lastUpdated time.Time) *domain.Observation {
	payload := BenchHeartRate(run, i)
	dp, err := omh.Parse(payload)
	if err != nil {
		panic(err)
	}
	tf, _ := omh.EffectiveTimeFrame(dp.Body)
	return &domain.Observation{ID: id, PatientID: patientID, DataSourceID: deviceID, Status: "final",
		Codings:     []domain.Coding{{System: domain.SystemOpenMHealth, Code: "omh:heart-rate:2.0", Display: "Heart rate"}},
		Code:        "omh:heart-rate:2.0",
		Identifiers: []domain.Identifier{{System: BenchIdentifierSystem, Value: run + "-" + strconv.Itoa(i)}},
		ContentType: "application/json", Payload: payload, DataPoint: dp.Document, Effective: tf, LastUpdated: lastUpdated}
}

// benchStore is the store of the CPU benchmarks: one organization with a
// manager and a patient who consented to heart rate, one device. Creates
// marshal the documents repo would insert and keep nothing; searches answer
// a prepared page. Any other method panics (nil embedded interface).
type benchStore struct {
	domain.Store
	manager domain.User
	patient domain.Patient
	org     domain.Organization
	hr      domain.ScopeCode
	device  domain.DataSource
	page    []domain.Observation
	docs    []bson.Raw // when set, the page as the database returns it, read as repo reads it
	nextID  int64
	bytes   int
	at      time.Time                        // when set, the LastUpdated of creates (else now)
	keep    func(doc bson.Raw, claims []any) // when set, is shown what each create would insert
}

func newBenchStore() *benchStore {
	return &benchStore{
		manager: domain.User{ID: 1, Email: "manager@example.org", Type: domain.UserPractitioner, IsActive: true},
		patient: domain.Patient{ID: 1, UserID: 2, FamilyName: "Doe", OrganizationIDs: []int64{1}},
		org:     domain.Organization{ID: 1, Name: "Clinic", Type: "prov"},
		hr:      domain.ScopeCode{ID: 1, System: domain.SystemOpenMHealth, Code: "omh:heart-rate:2.0"},
		device:  domain.DataSource{ID: 1, Name: "Watch", Type: domain.DataSourcePersonalDevice},
	}
}

func (s *benchStore) UserByID(_ context.Context, id int64) (*domain.User, error) {
	u := s.manager
	return &u, nil
}

func (s *benchStore) MembershipsOfUsers(context.Context, []int64) ([]domain.Membership, error) {
	return []domain.Membership{{OrganizationID: s.org.ID, UserID: s.manager.ID, Role: domain.RoleManager}}, nil
}

// OrganizationsPartOf: the one organization has none below it.
func (s *benchStore) OrganizationsPartOf(context.Context, []int64) ([]domain.Organization, error) {
	return nil, nil
}

func (s *benchStore) PatientIDs(context.Context, domain.PatientQuery) ([]int64, error) {
	return []int64{s.patient.ID}, nil
}

func (s *benchStore) PatientByID(_ context.Context, id int64) (*domain.Patient, error) {
	if id != s.patient.ID {
		return nil, domain.Errorf(domain.CodeNotFound, "Patient/%d does not exist", id)
	}
	p := s.patient
	return &p, nil
}

func (s *benchStore) Consents(context.Context, domain.ConsentQuery) ([]domain.Consent, error) {
	return []domain.Consent{{PatientID: s.patient.ID, StudyID: 1, ScopeCodeID: s.hr.ID, Consented: true}}, nil
}

func (s *benchStore) ScopeCodesByIDs(context.Context, []int64) ([]domain.ScopeCode, error) {
	return []domain.ScopeCode{s.hr}, nil
}

func (s *benchStore) DataSourceByID(_ context.Context, id int64) (*domain.DataSource, error) {
	d := s.device
	return &d, nil
}

func (s *benchStore) CreateObservations(_ context.Context, obs []*domain.Observation) []error {
	now := s.at
	if now.IsZero() {
		now = time.Now().UTC().Truncate(time.Microsecond)
	}
	for _, o := range obs {
		s.nextID++
		o.ID, o.LastUpdated = s.nextID, now
		doc, claims, err := repo.ObservationDocuments(o)
		if err != nil {
			panic(err)
		}
		for _, c := range claims {
			s.bytes += len(c.(bson.Raw))
		}
		s.bytes += len(doc) // InsertMany copies a bson.Raw as it is, claims and document alike
		if s.keep != nil {
			s.keep(doc, claims)
		}
	}
	return make([]error, len(obs))
}

func (s *benchStore) SearchObservations(context.Context, *domain.SearchPlan) (domain.SearchResult[domain.Observation], error) {
	if s.docs != nil {
		page, err := repo.ObservationPage(s.docs)
		return domain.SearchResult[domain.Observation]{Items: page, More: true}, err
	}
	return domain.SearchResult[domain.Observation]{Items: slices.Clone(s.page), More: true}, nil
}

// projected is a stored document as a pipeline returns it: without the
// members its last stage, an exclusion $project, leaves out.
func projected(b *testing.B, doc bson.Raw, pipeline []any) bson.Raw {
	stage := pipeline[len(pipeline)-1].(bson.D)[0]
	if stage.Key != "$project" {
		b.Fatalf("the pipeline ends with %s", stage.Key)
	}
	var d bson.D
	if err := bson.Unmarshal(doc, &d); err != nil {
		b.Fatal(err)
	}
	for _, e := range stage.Value.(bson.D) {
		if e.Value != 0 {
			b.Fatalf("$project %v is not an exclusion", stage.Value)
		}
		d = slices.DeleteFunc(d, func(m bson.E) bool { return m.Key == e.Key })
	}
	out, err := bson.Marshal(d)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// benchApp serves the FHIR batch and search handlers over a benchStore,
// with the actor set as authenticate would (the bearer token lookup and the
// actor's loading are database work, left out).
func benchApp(b *testing.B, store *benchStore) (fasthttp.RequestHandler, *server) {
	return storeApp(b, domain.Config{Store: store}, store.manager.ID)
}

// storeApp is benchApp over any store and configuration, acting as the
// user manager.
func storeApp(b testing.TB, c domain.Config, manager int64) (fasthttp.RequestHandler, *server) {
	c.Schemas = omhtest.Registry(b)
	svc := domain.NewService(c)
	catalog, err := fhirsearch.NewCatalog(nil) // the configured types: the native ones are benchmarked
	if err != nil {
		b.Fatal(err)
	}
	s := &server{service: svc, search: fhirsearch.NewTranslator(catalog, []byte("bench cursor key"), "https://exchange.example.org/fhir-source", nil),
		catalog: catalog, log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: newMetrics(prometheus.NewRegistry(), catalog)}
	s.native = s.nativeTypes() // as New builds it
	a, err := svc.Actor(context.Background(), manager)
	if err != nil {
		b.Fatal(err)
	}
	app := fiber.New(fiber.Config{ErrorHandler: s.handleError, BodyLimit: 64 << 20, JSONEncoder: marshalJSON, DisableStartupMessage: true})
	g := app.Group(fhirCanonical, s.fhirCORS, s.negotiate, func(c *fiber.Ctx) error {
		c.Locals(actorKey, a)
		return c.Next()
	})
	g.Post("/", s.fhirBatch)
	g.Get("/:type", s.fhirSearch)
	return app.Handler(), s
}

// perObservation reports ns/obs and allocs/obs of a benchmark whose every
// operation handles n observations.
func perObservation(b *testing.B, n int, loop func()) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	stop := benchcpu.Per(b, n, "obs")
	loop()
	stop()
	runtime.ReadMemStats(&after)
	total := float64(b.N * n)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/total, "ns/obs")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/total, "allocs/obs")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/total, "B/obs")
}

// BenchmarkObservationCPU is the server's CPU per uploaded observation
// without the database. Each stage is one observation per op; "batch" is a
// whole batch Bundle of 1,000 through fhirBatch (Bundle decoding, every
// entry's decoding and create rules, the documents built and BSON-marshalled,
// the batch-response Bundle encoded), reported per observation.
func BenchmarkObservationCPU(b *testing.B) {
	schemas := omhtest.Registry(b)
	raw := BenchObservation("cpu", 7, 1, 1)
	data := BenchHeartRate("cpu", 7)
	dp, err := omh.Parse(data)
	if err != nil {
		b.Fatal(err)
	}
	if err := schemas.Validate(dp); err != nil {
		b.Fatal(err)
	}

	s := &server{service: domain.NewService(domain.Config{})}
	b.Run("decode", func(b *testing.B) { // FHIR Observation JSON and the Base64 attachment, routed to the native store
		b.ReportAllocs()
		defer benchcpu.Per(b, 1, "op")()
		for b.Loop() {
			if _, native, err := s.routeCreate("Observation", raw, nil); err != nil || !native {
				b.Fatal(native, err)
			}
		}
	})
	b.Run("omh.Parse", func(b *testing.B) {
		b.ReportAllocs()
		defer benchcpu.Per(b, 1, "op")()
		for b.Loop() {
			if _, err := omh.Parse(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("validate", func(b *testing.B) { // the data-point header schema and heart-rate 2.0
		b.ReportAllocs()
		defer benchcpu.Per(b, 1, "op")()
		for b.Loop() {
			if err := schemas.Validate(dp); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("timeframe", func(b *testing.B) {
		b.ReportAllocs()
		defer benchcpu.Per(b, 1, "op")()
		for b.Loop() {
			if tf, err := omh.EffectiveTimeFrame(dp.Body); tf == nil || err != nil {
				b.Fatal("no time frame")
			}
		}
	})
	b.Run("batch", func(b *testing.B) {
		const n = 1000
		store := newBenchStore()
		handle, _ := benchApp(b, store)
		body := BenchBatch("cpu", 0, n, store.patient.ID, store.device.ID)
		var ctx fasthttp.RequestCtx
		b.ReportAllocs()
		perObservation(b, n, func() {
			for b.Loop() {
				postBatch(handle, &ctx, body)
				if ctx.Response.StatusCode() != fiber.StatusOK {
					b.Fatalf("batch: %d %.300s", ctx.Response.StatusCode(), ctx.Response.Body())
				}
			}
		})
		if got := benchCount(ctx.Response.Body(), `"status":"201 Created"`); got != n {
			b.Fatalf("batch: %d of %d entries created: %.300s", got, n, ctx.Response.Body())
		}
		b.ReportMetric(float64(len(body))/n, "reqB/obs")
		b.ReportMetric(float64(len(ctx.Response.Body()))/n, "respB/obs")
	})
}

// postBatch serves the batch Bundle body to handle in ctx, reused.
func postBatch(handle fasthttp.RequestHandler, ctx *fasthttp.RequestCtx, body []byte) {
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.Request.Header.SetMethod(fiber.MethodPost)
	ctx.Request.SetRequestURI(fhirCanonical + "/")
	ctx.Request.Header.SetHost("localhost")
	ctx.Request.Header.SetContentType(mediaFHIRJSON)
	ctx.Request.SetBodyRaw(body)
	handle(ctx)
}

func benchCount(data []byte, s string) int {
	n := 0
	for i := 0; i+len(s) <= len(data); i++ {
		if string(data[i:i+len(s)]) == s {
			n++
			i += len(s) - 1
		}
	}
	return n
}

// BenchSearchQuery is the search of the search benchmarks: one patient's
// heart rate in January 2024, a page of 50.
const BenchSearchQuery = "patient=1&code=omh:heart-rate:2.0&date=ge2024-01-01&date=lt2024-02-01&_count=50"

// BenchmarkSearchPageCPU is the server's CPU for one page of 50 heart-rate
// observations without the database. "page" is the whole page: the
// fhirSearch handler (query parsing, the patient join resolved against the
// in-memory store, planning, rendering, the next-page cursor, JSON
// encoding) over a store that reads the 50 documents the pipeline returns
// as SearchObservations reads them off the cursor (repo.ObservationPage);
// the driver's reading of the server's reply is the database's share.
// "handler" is the handler over a page already read; "render" only turns
// 50 read observations into the searchset Bundle's JSON, as fhirSearch
// does.
func BenchmarkSearchPageCPU(b *testing.B) {
	store := newBenchStore()
	updated := time.Date(2024, 2, 1, 12, 0, 0, 123456000, time.UTC)
	var stored []*domain.Observation
	for i := range 50 {
		stored = append(stored, BenchStored("page", i, int64(i+1), 1, 1, updated))
		store.page = append(store.page, *stored[i])
		store.page[i].DataPoint = nil // never read back
	}
	handle, s := benchApp(b, store)
	values, _ := url.ParseQuery(BenchSearchQuery)
	q, err := s.search.Parse("Observation", values, false)
	if err != nil {
		b.Fatal(err)
	}
	search := func(b *testing.B) {
		var ctx fasthttp.RequestCtx
		b.ReportAllocs()
		defer benchcpu.Per(b, 1, "op")()
		for b.Loop() {
			ctx.Request.Reset()
			ctx.Response.Reset()
			ctx.Request.Header.SetMethod(fiber.MethodGet)
			ctx.Request.SetRequestURI(fhirCanonical + "/Observation?" + BenchSearchQuery)
			ctx.Request.Header.SetHost("localhost")
			handle(&ctx)
			if ctx.Response.StatusCode() != fiber.StatusOK {
				b.Fatalf("search: %d %.300s", ctx.Response.StatusCode(), ctx.Response.Body())
			}
		}
		if got := benchCount(ctx.Response.Body(), `"mode":"match"`); got != 50 {
			b.Fatalf("search: %d entries", got)
		}
		b.ReportMetric(float64(len(ctx.Response.Body())), "respB")
	}

	b.Run("page", func(b *testing.B) {
		plan, err := q.Plan(domain.Scope{PatientIDs: []int64{store.patient.ID}})
		if err != nil {
			b.Fatal(err)
		}
		for _, o := range stored {
			doc, _, err := repo.ObservationDocuments(o)
			if err != nil {
				b.Fatal(err)
			}
			store.docs = append(store.docs, projected(b, doc, plan.Pipeline))
		}
		defer func() { store.docs = nil }()
		search(b)
	})
	b.Run("handler", search)
	b.Run("render", func(b *testing.B) {
		base := "http://localhost" + fhirCanonical
		b.ReportAllocs()
		defer benchcpu.Per(b, 1, "op")()
		for b.Loop() {
			page := hits(store.page, observationHit)
			bd := searchset(base, "Observation", BenchSearchQuery, values, q, page, true, nil)
			if _, err := marshalJSON(bd); err != nil {
				b.Fatal(err)
			}
		}
	})
}
