package handlers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"exchange/domain"
	"exchange/fhirdefs/fhirdefstest"
	"exchange/handlers/handlerstest"
	"exchange/internal/benchcpu"
	"exchange/smartclient/ehrtest"
)

// BenchmarkPatientAccessPull connects each of the Synthea sample's 13
// patients to an exchange patient and pulls their record, one after the
// other, from the in-process test EHR: the sample's patient resources
// (about 7,000) read, converted, validated, indexed and stored in the
// embedded database. It reports resources per second of wall time and the
// process's CPU time per resource, which counts the exchange, the embedded
// FerretDB and the test EHR's serving of the pages (a small share: it
// encodes JSON). Run it once: a second iteration would only find
// duplicates.
//
//	go test ./handlers -run '^$' -bench PatientAccessPull -benchtime 1x
func BenchmarkPatientAccessPull(b *testing.B) {
	ehr := ehrtest.Start(b, fhirdefstest.SyntheaDir())
	env := handlerstest.StartWith(b, handlerstest.Options{EHR: handlerstest.FastEHRClient()})
	brand := env.RegisterEHR(b, ehr, "Bench Health")
	ehrPatients := ehr.Patients()
	patients := make([]*domain.Patient, len(ehrPatients))
	for i := range ehrPatients {
		patients[i] = env.Patient(b, fmt.Sprintf("bench-%d@example.org", i))
	}
	ctx := context.Background()
	stored := 0
	start, cpu := time.Now(), benchcpu.Process()
	for b.Loop() {
		for i, p := range patients {
			env.ConnectEHR(b, ehr, brand, p, ehrPatients[i])
			runs, err := env.Service.PullRunsOfPatient(ctx, domain.SystemActor(), p.ID, domain.Page{Number: 1, Size: 1})
			if err != nil || len(runs.Items) != 1 || runs.Items[0].Outcome != domain.PullCompleted {
				b.Fatalf("patient %s: %+v %v", ehrPatients[i], runs, err)
			}
			stored += runs.Items[0].Totals().Stored
		}
	}
	elapsed, cpu := time.Since(start), benchcpu.Process()-cpu
	b.ReportMetric(float64(stored)/elapsed.Seconds(), "resources/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(stored), "cpu-µs/resource")
	b.ReportMetric(float64(stored)/float64(b.N), "resources/op")
}
