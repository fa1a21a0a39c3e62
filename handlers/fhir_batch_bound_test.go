package handlers_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestBatchOverTheEntryBoundWritesNothing: a batch of 10,001 valid native
// Observations, read by the fast Bundle reader (which reads them as it
// goes) or by encoding/json (a key with an escape sends it there), is
// refused whole with a 400 OperationOutcome at Bundle.entry, and none of
// its entries is stored.
func TestBatchOverTheEntryBoundWritesNothing(t *testing.T) {
	w := fxNewWorld(t)
	doc := w.tok["doc"]
	entry := func(i int) string {
		r := fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, identifiers: []string{fmt.Sprint("bound-", i)},
			payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2024-03-05T10:00:00Z")))}.resource()
		e, err := json.Marshal(map[string]any{"resource": r, "request": map[string]any{"method": "POST", "url": "Observation"}})
		if err != nil {
			t.Fatal(err)
		}
		return string(e)
	}
	entries := make([]string, 10_001)
	for i := range entries {
		entries[i] = entry(i)
	}
	for name, key := range map[string]string{"plain": "entry", "escaped": `entr\u0079`} {
		body := `{"resourceType":"Bundle","type":"batch","` + key + `":[` + strings.Join(entries, ",") + `]}`
		resp, data := fxDo(t, w.env, "POST", fxBase+"/", map[string]string{"Authorization": "Bearer " + doc, "Content-Type": "application/fhir+json"}, body)
		out := fxDecode(t, data)
		if resp.StatusCode != http.StatusBadRequest || out["resourceType"] != "OperationOutcome" ||
			!strings.Contains(fxOutcomeText(out), "at most 10000") || !strings.Contains(fmt.Sprint(out), "Bundle.entry") {
			t.Errorf("%s: %d %v", name, resp.StatusCode, out)
		}
	}
	if status, out := w.search(t, doc, "/Observation?_summary=count"); status != http.StatusOK || fmt.Sprint(out["total"]) != "0" {
		t.Errorf("observations stored by refused batches: %d %v", status, out["total"])
	}
}
