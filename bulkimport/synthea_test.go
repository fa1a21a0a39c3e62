package bulkimport_test

import (
	"context"
	"testing"

	"exchange/bulkimport"
	"exchange/fhirdefs/fhirdefstest"
)

// TestSyntheaExportImports: a Bulk Data export as an EHR delivers it (the
// Synthea sample of 10 patients, one NDJSON file a type, and the export's
// own log.ndjson) imports whole: the log is skipped, not refused, every
// resource is stored, and the run ends without a failure (the command's
// exit status 0).
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
}
