package bulkimport_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"exchange/bulkimport"
	"exchange/domain"
	"exchange/fhirdefs/fhirdefstest"
	"exchange/handlers/handlerstest"
)

// TestSyntheaExportImports: a Bulk Data export as an EHR delivers it (the
// Synthea sample of 10 patients, one NDJSON file a type, and the export's
// own log.ndjson) imports whole: the log is skipped, not refused, every
// resource is stored, and the run ends without a failure (the command's
// exit status 0). Its record can be walked: each patient's encounters are
// found by patient= in the form the export wrote (Patient/<its id>), and
// the count is exact.
func TestSyntheaExportImports(t *testing.T) {
	if testing.Short() {
		t.Skip("imports 7,160 resources")
	}
	f := newFixture(t)
	o := f.options(fhirdefstest.SyntheaDir())
	o.Workers, o.BatchSize = 2, 100
	sum, err := bulkimport.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Read != 7160 || sum.Failed != 0 || sum.Converted+sum.WithLoss != 7160 || f.stored(t, f.srcA) != 7160 {
		t.Errorf("read %d, stored %d (%d with loss), failed %d; %d in the store", sum.Read, sum.Converted+sum.WithLoss, sum.WithLoss, sum.Failed, f.stored(t, f.srcA))
	}
	for _, l := range readReport(t, o.Report) {
		if l.Result == "failed" {
			t.Errorf("%s:%d failed: %v", l.File, l.Line, l.Issue)
		}
	}
	t.Logf("imported in %v", sum.Elapsed)
	encounters := map[string]int{} // by the export's subject reference
	eachLine(t, filepath.Join(fhirdefstest.SyntheaDir(), "Encounter.000.ndjson"), func(r map[string]any) {
		subject, _ := r["subject"].(map[string]any)
		ref, _ := subject["reference"].(string)
		encounters[ref]++
	})
	// Two searches, each a pass over the store on the embedded database:
	// every patient's encounters at once (all found, so every reference
	// resolved), and those of the patient with the most.
	source := url.QueryEscape(domain.SourceURI(handlerstest.SourceBase, f.srcA.ID))
	count := func(patients string) any {
		_, body := handlerstest.SendTo(t, "GET", f.env.URL+"/FHIR/R5/Encounter?_summary=count&_source="+source+"&patient="+url.QueryEscape(patients), f.token, nil, nil)
		return body["total"]
	}
	var all []string
	most, total := "", 0
	for ref, n := range encounters {
		all = append(all, ref)
		total += n
		if n > encounters[most] {
			most = ref
		}
	}
	if total != 1215 || len(all) < 10 {
		t.Fatalf("%d encounters of %d patients in the sample", total, len(all))
	}
	if got := count(strings.Join(all, ",")); got != float64(total) {
		t.Errorf("Encounter?patient=<every patient>: %v, want %d", got, total)
	}
	if got := count(most); got != float64(encounters[most]) {
		t.Errorf("Encounter?patient=%s: %v, want %d", most, got, encounters[most])
	}
}

// eachLine calls f with each resource of an NDJSON file.
func eachLine(t *testing.T, path string, f func(map[string]any)) {
	t.Helper()
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		f(r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}
