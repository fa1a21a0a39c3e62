package bulkimport_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"exchange/bulkimport"
	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/repo/repotest"
)

func TestMain(m *testing.M) { repotest.Main(m) }

// fixture is a running exchange with a superuser's token and two FHIR
// sources, of two patients.
type fixture struct {
	env       *handlerstest.Env
	token     string
	srcA      *domain.FHIRSource
	srcB      *domain.FHIRSource
	resources *mongo.Collection
	dir       string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	env := handlerstest.Start(t)
	ctx := context.Background()
	doc := env.Practitioner(t, "importer@example.org", true)
	f := &fixture{env: env, token: env.Token(t, doc.ID), dir: t.TempDir()}
	var err error
	for _, p := range []struct {
		email string
		into  **domain.FHIRSource
	}{{"ann@example.org", &f.srcA}, {"ben@example.org", &f.srcB}} {
		patient := env.Patient(t, p.email)
		if *p.into, err = env.Service.CreateFHIRSource(ctx, domain.SystemActor(), patient.ID, 0, "EHR of "+p.email); err != nil {
			t.Fatal(err)
		}
	}
	f.resources = repotest.Collection(t, env.DB, "resources")
	return f
}

// stored counts the resources stored under a FHIR source.
func (f *fixture) stored(t *testing.T, src *domain.FHIRSource) int64 {
	t.Helper()
	n, err := f.resources.CountDocuments(context.Background(), bson.D{{Key: "sourceId", Value: src.ID}})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// options are a run's options into the fixture, report in its directory.
func (f *fixture) options(input ...string) bulkimport.Options {
	return bulkimport.Options{URL: f.env.URL, Token: f.token, Input: input, Source: f.srcA.ID,
		Workers: 2, BatchSize: 50, Report: filepath.Join(f.dir, "report.ndjson"),
		Backoff: func(int) time.Duration { return 10 * time.Millisecond }}
}

// sample is what a generated input should give.
type sample struct {
	stored, withLoss, failed int // resources
	lossLines, failedLines   map[int]bool
}

// writeSample writes n R4 resources as NDJSON, one per line, and says
// what importing them should give. Out of every 20: 13 that convert
// without loss (Observation, Condition, Procedure, Patient), 5 with loss
// (Encounter.diagnosis.rank, Procedure.complicationDetail,
// Coverage.payor), 2 that fail (a Media, which no map converts, and an
// Observation without its required code); every 250th line is not JSON.
// Subjects rotate over Patient/p0..p4.
func writeSample(t *testing.T, path string, n int) sample {
	t.Helper()
	s := sample{lossLines: map[int]bool{}, failedLines: map[int]bool{}}
	var b bytes.Buffer
	for i := range n {
		line := i + 1
		patient := fmt.Sprintf("Patient/p%d", i%5)
		var r string
		kind := "stored"
		switch i % 20 {
		case 0, 1, 2, 3, 4, 5, 6, 19:
			r = fmt.Sprintf(`{"resourceType":"Observation","id":"obs-%d","status":"final","category":[{"coding":[{"system":"http://terminology.hl7.org/CodeSystem/observation-category","code":"vital-signs"}]}],"code":{"coding":[{"system":"http://loinc.org","code":"8867-4","display":"Heart rate"}]},"subject":{"reference":%q},"effectiveDateTime":"2024-03-%02dT08:00:00Z","valueQuantity":{"value":%d,"unit":"beats/minute","system":"http://unitsofmeasure.org","code":"/min"}}`,
				i, patient, 1+i%28, 50+i%60)
		case 7, 8:
			r = fmt.Sprintf(`{"resourceType":"Condition","id":"cond-%d","clinicalStatus":{"coding":[{"system":"http://terminology.hl7.org/CodeSystem/condition-clinical","code":"active"}]},"code":{"coding":[{"system":"http://snomed.info/sct","code":"38341003","display":"Hypertension"}]},"subject":{"reference":%q},"onsetDateTime":"2019-05-%02d"}`,
				i, patient, 1+i%28)
		case 9:
			r = fmt.Sprintf(`{"resourceType":"Procedure","id":"proc-%d","status":"completed","code":{"text":"Appendectomy"},"subject":{"reference":%q},"performedDateTime":"2021-07-%02d","reasonCode":[{"text":"Appendicitis"}],"complicationDetail":[{"reference":"Condition/c%d"}]}`,
				i, patient, 1+i%28, i)
			kind = "loss"
		case 10:
			r = fmt.Sprintf(`{"resourceType":"Procedure","id":"proc-%d","status":"completed","code":{"text":"Appendectomy"},"subject":{"reference":%q},"performedDateTime":"2021-07-%02d","reasonCode":[{"text":"Appendicitis"}]}`,
				i, patient, 1+i%28)
		case 11, 12:
			r = fmt.Sprintf(`{"resourceType":"Patient","id":"pat-%d","name":[{"family":"Doe","given":["Sam"]}],"gender":"unknown","birthDate":"1970-01-%02d"}`, i, 1+i%28)
		case 13, 14, 15:
			r = fmt.Sprintf(`{"resourceType":"Encounter","id":"enc-%d","status":"in-progress","class":{"system":"http://terminology.hl7.org/CodeSystem/v3-ActCode","code":"AMB"},"subject":{"reference":%q},"diagnosis":[{"condition":{"reference":"Condition/cond-%d"},"rank":1}],"period":{"start":"2024-03-10T09:00:00Z"}}`,
				i, patient, i)
			kind = "loss"
		case 16:
			r = fmt.Sprintf(`{"resourceType":"Coverage","id":"cov-%d","status":"active","beneficiary":{"reference":%q},"payor":[{"reference":"Organization/ins1"}]}`, i, patient)
			kind = "loss"
		case 17:
			r = fmt.Sprintf(`{"resourceType":"Media","id":"media-%d","status":"completed","content":{"contentType":"image/png"}}`, i)
			kind = "failed"
		case 18:
			r = fmt.Sprintf(`{"resourceType":"Observation","id":"obs-%d","status":"final","subject":{"reference":%q}}`, i, patient)
			kind = "failed"
		}
		if line%250 == 0 {
			r, kind = `{"resourceType":"Observation", "id": broken`, "failed"
		}
		switch kind {
		case "stored":
			s.stored++
		case "loss":
			s.stored++
			s.withLoss++
			s.lossLines[line] = true
		case "failed":
			s.failed++
			s.failedLines[line] = true
		}
		b.WriteString(r + "\n")
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return s
}

// reportLine is a line of the report, as users read it.
type reportLine struct {
	File   string `json:"file"`
	Line   int    `json:"line"`
	Entry  int    `json:"entry"`
	Source int64  `json:"source"`
	Result string `json:"result"`
	Issue  []struct {
		Severity    string   `json:"severity"`
		Diagnostics string   `json:"diagnostics"`
		Expression  []string `json:"expression"`
	} `json:"issue"`
}

func readReport(t *testing.T, path string) []reportLine {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []reportLine
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var l reportLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("report line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

// linesOf returns the input lines the report gives the result for.
func linesOf(report []reportLine, result string) map[int]bool {
	out := map[int]bool{}
	for _, l := range report {
		if l.Result == result {
			out[l.Line] = true
		}
	}
	return out
}

// lossLines returns the input lines the report has a loss warning for:
// answered 201, or 409 for a resource stored by an abandoned request
// (the 409 repeats the conversion's warnings).
func lossLines(report []reportLine) map[int]bool {
	out := map[int]bool{}
	for _, l := range report {
		for _, i := range l.Issue {
			if l.Result != "failed" && i.Severity == "warning" && len(i.Expression) == 1 {
				out[l.Line] = true
			}
		}
	}
	return out
}

func sameSet(a, b map[int]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// The acceptance run: 2,000 generated resources through the real server,
// interrupted (as by Ctrl-C) once 500 are stored, then the same command
// again, which resumes; then once more with no checkpoint, where every
// stored resource comes back 409 and counts as done. The short tier runs
// the same with 400, interrupted at 100.
func TestInterruptedRunResumes(t *testing.T) {
	f := newFixture(t)
	input := filepath.Join(f.dir, "sample.ndjson")
	total, interruptAt := 2000, int64(500)
	if testing.Short() {
		total, interruptAt = 400, 100
	}
	want := writeSample(t, input, total)
	o := f.options(input)
	checkpoint := o.Report + ".checkpoint"

	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	// As a hard stop would: requests in flight are abandoned, though the
	// service may store them; the resumed run gets 409s for those. The
	// user's Ctrl-C comes as the answer that brings the stored resources
	// to interruptAt arrives, however fast the run (a clock could miss it).
	hard := o
	hard.Grace = time.Nanosecond
	hard.Client = &http.Client{Transport: afterAnswer{func() {
		n, err := f.resources.CountDocuments(context.Background(), bson.D{{Key: "sourceId", Value: f.srcA.ID}})
		if err == nil && n >= interruptAt {
			interrupt()
		}
	}}}
	first, err := bulkimport.Run(ctx, hard)
	if err != nil || !first.Interrupted || first.Answered() >= int64(total) || first.Converted+first.WithLoss < interruptAt {
		t.Fatalf("interrupted run: %+v, %v", first, err)
	}
	if _, err := os.Stat(checkpoint); err != nil {
		t.Fatalf("no checkpoint after the interrupted run: %v", err)
	}
	storedFirst := f.stored(t, f.srcA)
	firstReport := readReport(t, o.Report)
	done := checkpointDone(t, checkpoint)

	// Stopped again while still skipping what the first run answered: the
	// checkpoint keeps its mark and the report its lines.
	stopAtOnce, stop := context.WithCancel(context.Background())
	quick := o
	quick.Log = slog.New(onMessage{"Resuming an interrupted run: its first resources are answered.", stop})
	if sum, err := bulkimport.Run(stopAtOnce, quick); err != nil || !sum.Interrupted || sum.Answered() != 0 {
		t.Fatalf("run stopped while skipping: %+v, %v", sum, err)
	}
	if got := checkpointDone(t, checkpoint); got != done {
		t.Fatalf("a run stopped while skipping moved the checkpoint from %d to %d", done, got)
	}
	if got := readReport(t, o.Report); len(got) != len(firstReport) {
		t.Fatalf("a run stopped while skipping left %d report lines of %d", len(got), len(firstReport))
	}

	second, err := bulkimport.Run(context.Background(), o)
	if err != nil || second.Interrupted || second.Read != int64(total) || second.Skipped == 0 || second.Skipped+second.Answered() != int64(total) {
		t.Fatalf("resumed run: %+v, %v", second, err)
	}
	t.Logf("interrupted: %+v\nresumed: %+v", first, second)
	if got := f.stored(t, f.srcA); got != int64(want.stored) {
		t.Errorf("stored %d resources, want %d (%d after the first run)", got, want.stored, storedFirst)
	}
	// Each stored resource was answered 201 by one run, or abandoned by
	// the first and answered 409 by the second.
	firstStored, secondStored := first.Converted+first.WithLoss, second.Converted+second.WithLoss
	if firstStored+secondStored > int64(want.stored) || firstStored+secondStored+second.Duplicates < int64(want.stored) {
		t.Errorf("runs stored %d + %d with %d duplicates, want %d in all", firstStored, secondStored, second.Duplicates, want.stored)
	}
	if _, err := os.Stat(checkpoint); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the checkpoint outlived a finished run: %v", err)
	}
	// The resumed run appended to the report: together they name each
	// failure and each loss.
	report := readReport(t, o.Report)
	if len(report) < len(firstReport) {
		t.Errorf("the report shrank from %d to %d lines", len(firstReport), len(report))
	}
	if got := linesOf(report, "failed"); !sameSet(got, want.failedLines) {
		t.Errorf("failed lines: %d, want %d", len(got), len(want.failedLines))
	}
	if got := lossLines(report); !sameSet(got, want.lossLines) {
		t.Errorf("lines with loss: %d, want %d", len(got), len(want.lossLines))
	}
	for _, l := range report {
		if l.Result == "converted with loss" && (len(l.Issue) == 0 || l.Issue[0].Severity != "warning" || len(l.Issue[0].Expression) != 1) {
			t.Errorf("a loss line without its warning: %+v", l)
			break
		}
	}

	// No checkpoint now: everything is sent again and comes back 409.
	third, err := bulkimport.Run(context.Background(), o)
	if err != nil || third.Skipped != 0 || third.Duplicates != int64(want.stored) || third.Converted+third.WithLoss != 0 || third.Failed != int64(want.failed) {
		t.Fatalf("third run: %+v, %v (want %d duplicates, %d failed)", third, err, want.stored, want.failed)
	}
	if got := f.stored(t, f.srcA); got != int64(want.stored) {
		t.Errorf("after the third run: %d stored, want %d", got, want.stored)
	}
}

// checkpointDone reads how far a checkpoint says the input is answered.
func checkpointDone(t *testing.T, path string) int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	var cp struct {
		Done int64 `json:"done"`
	}
	if err != nil || json.Unmarshal(data, &cp) != nil || cp.Done <= 0 {
		t.Fatalf("checkpoint %s: %s %v", path, data, err)
	}
	return cp.Done
}

// onMessage is a log handler that calls do when a record has the message.
type onMessage struct {
	message string
	do      func()
}

func (h onMessage) Enabled(context.Context, slog.Level) bool { return true }
func (h onMessage) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.message {
		h.do()
	}
	return nil
}
func (h onMessage) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h onMessage) WithGroup(string) slog.Handler      { return h }

// flakyProxy stands between the script and the service: it fails the
// import requests fail picks, with a status (0: drops the connection;
// 400: answers as a service without the R4 maps; -1: passes them on).
// lostAnswer makes flakyProxy pass the request on and drop the
// connection once the service has answered: the service stored the
// batch, the importer never learns it, as after a timeout.
const lostAnswer = -2

func flakyProxy(t *testing.T, target string, fail func(n int64) int) (string, *atomic.Int64) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	var imports atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/fhir-import/") {
			switch status := fail(imports.Add(1)); status {
			case -1:
			case 0:
				hj, _ := w.(http.Hijacker)
				conn, _, _ := hj.Hijack()
				conn.Close()
				return
			case lostAnswer:
				proxy.ServeHTTP(httptest.NewRecorder(), r)
				hj, _ := w.(http.Hijacker)
				conn, _, _ := hj.Hijack()
				conn.Close()
				return
			case http.StatusBadRequest: // as a service without the maps answers
				w.Header().Set("Content-Type", "application/fhir+json")
				w.WriteHeader(status)
				fmt.Fprint(w, `{"resourceType":"OperationOutcome","issue":[{"severity":"error","code":"not-supported","diagnostics":"R4 import is not available"}]}`)
				return
			default:
				w.Header().Set("Retry-After", "0")
				http.Error(w, "try again", status)
				return
			}
		}
		proxy.ServeHTTP(w, r)
	})}
	ln := listen(t)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String(), &imports
}

// Transient failures (503, 429, a dropped connection) are sent again and
// the run ends complete; a service that stops answering ends the run with
// a checkpoint, and the same command resumes once it is back.
func TestTransientFailuresAreRetried(t *testing.T) {
	f := newFixture(t)
	input := filepath.Join(f.dir, "sample.ndjson")
	want := writeSample(t, input, 200)
	base, _ := flakyProxy(t, f.env.URL, func(n int64) int {
		switch n {
		case 1:
			return http.StatusServiceUnavailable
		case 2:
			return 0
		case 4:
			return http.StatusTooManyRequests
		}
		return -1
	})
	o := f.options(input)
	o.URL = base
	sum, err := bulkimport.Run(context.Background(), o)
	if err != nil || sum.Retries != 3 || sum.Converted+sum.WithLoss != int64(want.stored) || sum.Failed != int64(want.failed) {
		t.Fatalf("run through a flaky proxy: %+v, %v", sum, err)
	}

	// The service goes away after two batches: the run stops, keeps its
	// checkpoint, and the same command resumes once the service is back.
	down, _ := flakyProxy(t, f.env.URL, func(n int64) int {
		if n > 2 {
			return http.StatusBadGateway
		}
		return -1
	})
	o = f.options(input)
	o.URL, o.Source, o.Retries = down, f.srcB.ID, 1
	sum, err = bulkimport.Run(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "stopped answering") || !sum.Interrupted || sum.Answered() == 0 {
		t.Fatalf("a service that went away: %+v, %v", sum, err)
	}
	// A service that does not import at all stops the run at once.
	o.URL, _ = flakyProxy(t, f.env.URL, func(int64) int { return http.StatusBadRequest })
	if sum, err := bulkimport.Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "R4 import is not available") || sum.Answered() != 0 {
		t.Fatalf("no import: %+v, %v", sum, err)
	}
	o.URL = f.env.URL
	sum, err = bulkimport.Run(context.Background(), o)
	if err != nil || sum.Interrupted || sum.Skipped == 0 {
		t.Fatalf("resumed: %+v, %v", sum, err)
	}
	if got := f.stored(t, f.srcB); got != int64(want.stored) {
		t.Errorf("stored %d, want %d", got, want.stored)
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// With --sources, each resource goes to the FHIR source of its patient,
// found by subject, patient or beneficiary, or as the Patient itself;
// Bundles are read entry by entry, directories file by file.
func TestRoutesByPatient(t *testing.T) {
	f := newFixture(t)
	in := filepath.Join(f.dir, "in")
	if err := os.MkdirAll(in, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"a-bundle.json": `{"resourceType":"Bundle","type":"transaction","entry":[
			{"fullUrl":"urn:uuid:0b5d","resource":{"resourceType":"Patient","id":"0b5d","gender":"female"},"request":{"method":"PUT","url":"Patient/0b5d"}},
			{"fullUrl":"urn:uuid:9f1e","resource":{"resourceType":"Condition","id":"c1","clinicalStatus":{"coding":[{"system":"http://terminology.hl7.org/CodeSystem/condition-clinical","code":"active"}]},"code":{"text":"Asthma"},"subject":{"reference":"urn:uuid:0b5d"}},"request":{"method":"POST","url":"Condition"}},
			{"fullUrl":"urn:uuid:77aa","resource":{"resourceType":"Organization","id":"org1","name":"Clinic"},"request":{"method":"POST","url":"Organization"}}]}`,
		"b.ndjson": `{"resourceType":"Immunization","id":"imm1","status":"completed","vaccineCode":{"text":"Flu"},"patient":{"reference":"https://ehr.example.org/fhir/Patient/p1"},"occurrenceDateTime":"2024-10-01"}` + "\n" +
			`{"resourceType":"Observation","id":"o2","status":"final","code":{"text":"Weight"},"subject":{"reference":"Patient/p2"}}` + "\n",
		"notes.txt": "not read",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(in, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sources := filepath.Join(f.dir, "sources.csv")
	if err := os.WriteFile(sources, fmt.Appendf(nil, "reference,source\nPatient/0b5d,%d\nPatient/p1,%d\n", f.srcA.ID, f.srcB.ID), 0o644); err != nil {
		t.Fatal(err)
	}
	o := f.options(in)
	o.Source, o.SourcesFile = 0, sources
	sum, err := bulkimport.Run(context.Background(), o)
	if err != nil || sum.Read != 5 || sum.Converted != 3 || sum.Failed != 2 {
		d, _ := os.ReadFile(o.Report)
		t.Fatalf("routed run: %+v, %v\n%s", sum, err, d)
	}
	if a, b := f.stored(t, f.srcA), f.stored(t, f.srcB); a != 2 || b != 1 {
		t.Errorf("stored %d under A (want the Patient and its Condition) and %d under B (want the Immunization)", a, b)
	}
	report := readReport(t, o.Report)
	if len(report) != 2 || report[0].Entry != 3 || !strings.Contains(report[0].Issue[0].Diagnostics, "names no patient") ||
		report[1].Line != 2 || !strings.Contains(report[1].Issue[0].Diagnostics, "no FHIR source for patient Patient/p2") {
		t.Errorf("report: %+v", report)
	}

	// A user who may not see the sources' patients: each batch is refused
	// as a whole, as for sources that do not exist, and each of its
	// resources fails with the service's reason.
	outsider := f.env.Practitioner(t, "outsider@example.org", false)
	o.Token = f.env.Token(t, outsider.ID)
	sum, err = bulkimport.Run(context.Background(), o)
	if err != nil || sum.Failed != 5 || sum.Converted != 0 {
		t.Fatalf("outsider's run: %+v, %v", sum, err)
	}
	refused := 0
	for _, l := range readReport(t, o.Report) {
		if d := l.Issue[0].Diagnostics; strings.Contains(d, "400 Bad Request") && strings.Contains(d, "does not exist") {
			refused++
		}
	}
	if refused != 3 {
		t.Errorf("%d resources refused with 400 (an unknown source), want the 3 routed ones", refused)
	}
}

// What stops a run before it reads anything: a token the service
// refuses, a source that is not there, a service that is not there.
func TestRefusedBeforeReading(t *testing.T) {
	f := newFixture(t)
	input := filepath.Join(f.dir, "sample.ndjson")
	writeSample(t, input, 5)
	for name, change := range map[string]func(*bulkimport.Options) string{
		"bad token":      func(o *bulkimport.Options) string { o.Token = "nope"; return "401" },
		"unknown source": func(o *bulkimport.Options) string { o.Source = 9999; return "FHIR source 9999" },
		"no source":      func(o *bulkimport.Options) string { o.Source = 0; return "no FHIR source" },
		"no service":     func(o *bulkimport.Options) string { o.URL = "http://127.0.0.1:1"; return "cannot reach" },
		"no input":       func(o *bulkimport.Options) string { o.Input = nil; return "no input" },
		"missing sources": func(o *bulkimport.Options) string {
			o.SourcesFile = filepath.Join(f.dir, "nope.csv")
			return "nope.csv"
		},
	} {
		o := f.options(input)
		want := change(&o)
		sum, err := bulkimport.Run(context.Background(), o)
		if err == nil || !strings.Contains(err.Error(), want) || sum.Read != 0 {
			t.Errorf("%s: %+v, %v; want an error with %q", name, sum, err, want)
		}
		if _, err := os.Stat(o.Report); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: a report was written", name)
		}
	}
	if f.stored(t, f.srcA) != 0 {
		t.Error("something was stored")
	}
}

// A checkpoint is only followed for the same input and routing: after
// the input changed, the run starts over, and what the interrupted run
// stored comes back 409.
func TestChangedInputStartsOver(t *testing.T) {
	f := newFixture(t)
	input := filepath.Join(f.dir, "sample.ndjson")
	want := writeSample(t, input, 300)
	down, _ := flakyProxy(t, f.env.URL, func(n int64) int {
		if n > 1 {
			return http.StatusServiceUnavailable
		}
		return -1
	})
	o := f.options(input)
	o.URL, o.Retries = down, -1
	first, err := bulkimport.Run(context.Background(), o)
	if err == nil || !first.Interrupted || first.Answered() < 50 || first.Answered() >= 300 {
		t.Fatalf("first run: %+v, %v", first, err)
	}
	fh, err := os.OpenFile(input, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(fh, `{"resourceType":"Patient","id":"late"}`)
	fh.Close()
	o.URL = f.env.URL
	second, err := bulkimport.Run(context.Background(), o)
	stored := first.Converted + first.WithLoss
	if err != nil || second.Skipped != 0 || second.Read != 301 || second.Duplicates != stored || second.Converted+second.WithLoss != int64(want.stored)+1-stored {
		t.Fatalf("second run: %+v, %v (the first stored %d)", second, err, stored)
	}
	// Started over: each failure is in the report once, none from the
	// first run left above them.
	if countResult(readReport(t, o.Report), "failed") != len(want.failedLines) {
		t.Errorf("the report has %d failed lines for %d failures, want each once", countResult(readReport(t, o.Report), "failed"), len(want.failedLines))
	}
}

// countResult counts the report lines of a result.
func countResult(report []reportLine, result string) int {
	n := 0
	for _, l := range report {
		if l.Result == result {
			n++
		}
	}
	return n
}

// A resend counts as done only when the service names the stored resource
// and it reads back. A resource without an id is recognised by its
// content: sent again, it is named (by its content hash in the report)
// and not stored twice. A resource whose upstream id was stored and has
// changed since is a refusal, not "already stored".
func TestDuplicatesAreVerified(t *testing.T) {
	f := newFixture(t)
	path := filepath.Join(f.dir, "in.ndjson")
	input := `{"resourceType":"Condition","id":"c1","code":{"text":"Hypertension"},"subject":{"reference":"Patient/p1"}}
{"resourceType":"Observation","status":"final","code":{"coding":[{"system":"http://loinc.org","code":"8867-4"}]},"subject":{"reference":"Patient/p1"},"valueQuantity":{"value":61,"unit":"/min","system":"http://unitsofmeasure.org","code":"/min"}}
`
	if err := os.WriteFile(path, []byte(input), 0o644); err != nil {
		t.Fatal(err)
	}
	o := f.options(path)
	if sum, err := bulkimport.Run(context.Background(), o); err != nil || sum.Converted+sum.WithLoss != 2 {
		t.Fatalf("first run: %+v, %v", sum, err)
	}
	// The Condition changes on the service.
	var stored struct {
		ID   string `bson:"_id"`
		JSON string `bson:"json"`
	}
	if err := f.resources.FindOne(context.Background(), bson.M{"upstreamId": "c1"}).Decode(&stored); err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(stored.JSON, `"Hypertension"`, `"Essential hypertension"`, 1)
	req, _ := http.NewRequest("PUT", f.env.URL+"/FHIR/R5/Condition/"+stored.ID, strings.NewReader(changed))
	req.Header.Set("Authorization", "Bearer "+f.token)
	req.Header.Set("Content-Type", "application/fhir+json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("update: %v %v", resp, err)
	}

	o.Restart = true
	sum, err := bulkimport.Run(context.Background(), o)
	if err != nil || sum.Duplicates != 1 || sum.Failed != 1 || sum.Converted+sum.WithLoss != 0 {
		t.Fatalf("second run: %+v, %v; want the Observation a duplicate and the changed Condition failed", sum, err)
	}
	if n := f.stored(t, f.srcA); n != 2 {
		t.Errorf("%d resources stored, want 2", n)
	}
	type line struct {
		ResourceType string `json:"resourceType"`
		ContentHash  string `json:"contentHash"`
		Result       string `json:"result"`
		Stored       string `json:"stored"`
	}
	var lines []line
	data, err := os.ReadFile(o.Report)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var x line
		if err := json.Unmarshal([]byte(l), &x); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, x)
	}
	if len(lines) != 2 || lines[0].ResourceType != "Condition" || lines[0].Result != "failed" ||
		lines[1].Result != "duplicate" || !strings.HasPrefix(lines[1].ContentHash, "sha256:") || !strings.HasPrefix(lines[1].Stored, "Observation/") {
		t.Errorf("report of the second run: %+v", lines)
	}
}

// Resources without an id whose answer was lost are sent again, in the
// same run and in a later one, and stored once: the service knows them by
// their content, and the importer counts the 409 naming each as done.
func TestResentResourcesWithoutIDsAreStoredOnce(t *testing.T) {
	f := newFixture(t)
	path := filepath.Join(f.dir, "in.ndjson")
	var input strings.Builder
	const n = 30
	for i := range n {
		fmt.Fprintf(&input, `{"resourceType":"Observation","status":"final","code":{"coding":[{"system":"http://loinc.org","code":"8867-4"}]},"subject":{"reference":"Patient/p1"},"valueQuantity":{"value":%d,"unit":"/min","system":"http://unitsofmeasure.org","code":"/min"}}`+"\n", 60+i)
	}
	if err := os.WriteFile(path, []byte(input.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	base, _ := flakyProxy(t, f.env.URL, func(k int64) int {
		if k == 1 {
			return lostAnswer
		}
		return -1
	})
	o := f.options(path)
	o.URL, o.Workers = base, 1
	sum, err := bulkimport.Run(context.Background(), o)
	if err != nil || sum.Retries != 1 || sum.Converted+sum.WithLoss+sum.Duplicates != n || sum.Duplicates == 0 || sum.Failed != 0 {
		t.Fatalf("a run whose first answer was lost: %+v, %v", sum, err)
	}
	if got := f.stored(t, f.srcA); got != n {
		t.Errorf("%d resources stored, want %d", got, n)
	}
	o.URL, o.Restart = f.env.URL, true
	if sum, err = bulkimport.Run(context.Background(), o); err != nil || sum.Duplicates != n {
		t.Fatalf("the same input again: %+v, %v", sum, err)
	}
	if got := f.stored(t, f.srcA); got != n {
		t.Errorf("after the second run: %d resources stored, want %d", got, n)
	}
}

// A resend whose read-back the service cannot answer for the moment (503,
// a 500) is not a failed resource: the run stops, to be resumed, and the
// resumed run counts the resources as the duplicates they are.
func TestDuplicatesUnreadableForNowAreResumed(t *testing.T) {
	f := newFixture(t)
	path := filepath.Join(f.dir, "in.ndjson")
	input := `{"resourceType":"Condition","id":"c1","code":{"text":"Hypertension"},"subject":{"reference":"Patient/p1"}}
{"resourceType":"Condition","id":"c2","code":{"text":"Asthma"},"subject":{"reference":"Patient/p1"}}
`
	if err := os.WriteFile(path, []byte(input), 0o644); err != nil {
		t.Fatal(err)
	}
	o := f.options(path)
	if sum, err := bulkimport.Run(context.Background(), o); err != nil || sum.Converted+sum.WithLoss != 2 {
		t.Fatalf("first run: %+v, %v", sum, err)
	}
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusInternalServerError} {
		target, _ := url.Parse(f.env.URL)
		proxy := httputil.NewSingleHostReverseProxy(target)
		unreadable := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/FHIR/R5/") {
				http.Error(w, "try again", status)
				return
			}
			proxy.ServeHTTP(w, r)
		}))
		o.URL, o.Restart = unreadable.URL, true
		sum, err := bulkimport.Run(context.Background(), o)
		unreadable.Close()
		if err == nil || !strings.Contains(err.Error(), "stopped answering") || !sum.Interrupted || sum.Failed != 0 || sum.Duplicates != 0 {
			t.Fatalf("read-backs answered %d: %+v, %v; want the run stopped, nothing failed", status, sum, err)
		}
		o.URL, o.Restart = f.env.URL, false
		sum, err = bulkimport.Run(context.Background(), o)
		if err != nil || sum.Interrupted || sum.Duplicates != 2 || sum.Failed != 0 {
			t.Fatalf("resumed after read-backs answered %d: %+v, %v; want both duplicates", status, sum, err)
		}
	}
	if n := f.stored(t, f.srcA); n != 2 {
		t.Errorf("%d resources stored, want 2", n)
	}
}

// afterAnswer is a transport that calls its function after each answer
// arrives, before the client reads it.
type afterAnswer struct{ then func() }

func (a afterAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		a.then()
	}
	return resp, err
}
