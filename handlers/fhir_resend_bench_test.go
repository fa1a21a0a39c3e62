package handlers_test

// Resend benchmarks over a real database: a client that timed out sends
// the same request again, and every entry is stored already. Each
// benchmark runs the first write of a request ("first") beside its
// resend ("resend") over a store that holds a study's worth of earlier
// writes, and reports the process's CPU per entry (the server, the
// embedded database and the client all run in it, and the building of
// each request is left out): a resend should cost no more than the first
// write did. Under `go test` the database is the embedded FerretDB: see
// docs/benchmarks.md. Run with -benchtime=3x (one op is one request) and
// -count for benchstat.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"exchange/domain"
	"exchange/fhirdefs/fhirdefstest"
	"exchange/handlers"
	"exchange/handlers/handlerstest"
)

const (
	resendBatch = 1_000  // entries of a resent batch
	resendHeld  = 10_000 // observations stored before the benchmark's requests
)

// BenchmarkBatchResend posts batch Bundles of 1,000 heart-rate
// observations over a store of 10,000: new ones (first: every entry 201)
// or one of the stored batches again (resend: every entry 409 naming the
// stored observation in its location).
func BenchmarkBatchResend(b *testing.B) {
	for _, mode := range []string{"first", "resend"} {
		b.Run(mode, func(b *testing.B) {
			w := newBenchWorld(b, handlerstest.Options{})
			for from := 0; from < resendHeld; from += resendBatch {
				w.post(b, handlers.BenchBatch("held", from, resendBatch, w.patient.ID, w.device), resendBatch)
			}
			var cpu, all int64
			for i := 0; b.Loop(); i++ {
				run, from := "new", i*resendBatch
				if mode == "resend" {
					run, from = "held", i*resendBatch%resendHeld
				}
				body := handlers.BenchBatch(run, from, resendBatch, w.patient.ID, w.device)
				start := cpuTime()
				out := w.send(b, body)
				cpu += int64(cpuTime() - start)
				all += resendBatch
				checkResend(b, mode, out, resendBatch)
			}
			b.ReportMetric(float64(cpu)/float64(all), "cpu-ns/entry")
		})
	}
}

// send posts one batch Bundle and returns the batch-response.
func (w *benchWorld) send(b testing.TB, body []byte) []byte {
	req, err := http.NewRequest(http.MethodPost, w.env.URL+"/FHIR/R5/", bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/fhir+json")
	req.Header.Set("Authorization", "Bearer "+w.token)
	return readOK(b, req)
}

func readOK(b testing.TB, req *http.Request) []byte {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("%s %s: %d %.500s", req.Method, req.URL.Path, resp.StatusCode, out)
	}
	return out
}

// resendLocation is a resent entry's answer: 409, naming the stored
// resource.
var resendLocation = regexp.MustCompile(`"status":"409 Conflict","location":"[A-Za-z]+/[^"/]+"`)

// checkResend checks that every one of the n entries of a batch-response
// was created (first) or refused as stored, naming the stored resource
// (resend).
func checkResend(b testing.TB, mode string, out []byte, n int) {
	b.Helper()
	got := bytes.Count(out, []byte(`"status":"201 Created"`))
	if mode == "resend" {
		got = len(resendLocation.FindAll(out, -1))
	}
	if got != n {
		b.Fatalf("%s: %d of %d entries as expected: %.800s", mode, got, n, out)
	}
}

// BenchmarkImportR4Resend posts an R4 Bundle to /fhir-import/R4 (up to ten
// official R4 examples each of seven types), into a FHIR source that
// holds 5,000 imported resources: with ids not seen before (first: every
// entry converted and created) or the stored Bundle again (resend: every
// entry converted and refused as stored, naming the stored resource).
func BenchmarkImportR4Resend(b *testing.B) {
	examples := resendExamples(b)
	for _, mode := range []string{"first", "resend"} {
		b.Run(mode, func(b *testing.B) {
			w := newImportedBenchWorld(b)
			w.create(b, "Condition", 0, 5_000)
			stored := w.importR4(b, r4Bundle(b, examples, "held"))
			n := bytes.Count(stored, []byte(`"status":"201 Created"`))
			if n < len(examples)/2 {
				b.Fatalf("%d of %d examples imported: %.800s", n, len(examples), stored)
			}
			var cpu, all int64
			for i := 0; b.Loop(); i++ {
				run := "held"
				if mode == "first" {
					run = fmt.Sprint("new-", i)
				}
				body := r4Bundle(b, examples, run)
				start := cpuTime()
				out := w.importR4(b, body)
				cpu += int64(cpuTime() - start)
				all += int64(n)
				checkResend(b, mode, out, n)
			}
			b.ReportMetric(float64(cpu)/float64(all), "cpu-ns/entry")
		})
	}
}

// importR4 posts an R4 Bundle to the R4 import, into w's source.
func (w *importedBenchWorld) importR4(b testing.TB, body []byte) []byte {
	req, err := http.NewRequest(http.MethodPost, w.env.URL+"/fhir-import/R4", bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/fhir+json")
	req.Header.Set("Authorization", "Bearer "+w.token)
	req.Header.Set(domain.SourceHeader, fmt.Sprint(w.source.ID))
	return readOK(b, req)
}

// resendExamples are up to ten official R4 examples of each of a few
// types a hospital record holds, decoded.
func resendExamples(b testing.TB) []map[string]any {
	var out []map[string]any
	for _, rt := range []string{"Observation", "Condition", "Encounter", "Procedure", "MedicationRequest", "AllergyIntolerance", "Immunization"} {
		files, _ := filepath.Glob(filepath.Join(fhirdefstest.PackageDir("hl7.fhir.r4.examples"), rt+"-*.json"))
		taken := 0
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				b.Fatal(err)
			}
			var r map[string]any
			if json.Unmarshal(data, &r) != nil || r["resourceType"] != rt || taken == 10 {
				continue
			}
			out = append(out, r)
			taken++
		}
	}
	if len(out) == 0 {
		b.Skip("no R4 examples (run scripts/setup first)")
	}
	return out
}

// r4Bundle is a batch Bundle of the examples, each id prefixed by run.
func r4Bundle(b testing.TB, examples []map[string]any, run string) []byte {
	var entries []map[string]any
	for _, e := range examples {
		r := make(map[string]any, len(e))
		for k, v := range e {
			r[k] = v
		}
		r["id"] = run + "-" + strings.TrimSpace(fmt.Sprint(e["id"]))
		entries = append(entries, map[string]any{"resource": r, "request": map[string]any{"method": "POST", "url": e["resourceType"]}})
	}
	body, err := json.Marshal(map[string]any{"resourceType": "Bundle", "type": "batch", "entry": entries})
	if err != nil {
		b.Fatal(err)
	}
	return body
}
