package handlers_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"exchange/handlers"
	"exchange/handlers/handlerstest"
)

var updateResendGolden = flag.Bool("update-resend-golden", false, "rewrite testdata/resend_golden.txt")

// TestResendAnswersStayTheSame pins what resends are answered, entry by
// entry (status, location and the issues of the outcome), on the real
// store: a batch of native observations sent again as it was, then with
// entries that claim the same identifiers or content for other
// observations, repeat one another or are new; and an R4 import sent
// again. The golden file was written by the code before resends were
// made cheap, which must answer them exactly so.
func TestResendAnswersStayTheSame(t *testing.T) {
	var out bytes.Buffer
	w := newBenchWorld(t, handlerstest.Options{})
	obs := func(run string, i int, edit func(m map[string]any)) json.RawMessage {
		raw := handlers.BenchObservation(run, i, w.patient.ID, w.device)
		if edit == nil {
			return raw
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		data, _ := json.Marshal(m)
		return data
	}
	noID := func(m map[string]any) { delete(m, "identifier") }
	twoIDs := func(m map[string]any) {
		m["identifier"] = []any{map[string]any{"system": "urn:a", "value": "c"}, map[string]any{"system": "urn:a", "value": "d"}}
	}
	first := [][]byte{obs("r", 0, nil), obs("r", 1, nil), obs("r", 2, noID), obs("r", 3, twoIDs)}
	send := func(name string, entries [][]byte) {
		out.WriteString(name + "\n")
		writeEntries(t, &out, w.send(t, batchOf(entries)))
	}
	send("first", first)
	send("the same batch again", first)
	send("others claiming its keys, repeats, a new one", [][]byte{
		obs("r", 0, func(m map[string]any) { m["status"] = "amended" }), // identifier r-0, other content
		obs("r", 2, noID),   // the same content
		obs("r", 2, noID),   // again, in the same batch
		obs("r", 1, nil),    // stored
		obs("r", 1, nil),    // and repeated
		obs("r", 4, twoIDs), // c and d, other content
		obs("r", 5, nil),    // new
		obs("r", 5, nil),    // new, repeated
	})

	imp := fxNewImported(t)
	bundle := `{"resourceType":"Bundle","type":"batch","entry":[` +
		`{"resource":{"resourceType":"Patient","id":"p1","gender":"female"},"request":{"method":"POST","url":"Patient"}},` +
		`{"resource":{"resourceType":"Condition","id":"c1","subject":{"reference":"Patient/p1"},"code":{"text":"asthma"}},"request":{"method":"POST","url":"Condition"}},` +
		`{"resource":{"resourceType":"Condition","subject":{"reference":"Patient/p1"},"code":{"text":"no id"}},"request":{"method":"POST","url":"Condition"}}]}`
	changed := strings.Replace(bundle, `"asthma"`, `"asthma, changed"`, 1)
	src := fmt.Sprint(imp.aliceSrc.ID)
	for _, c := range []struct{ name, bundle string }{
		{"an R4 import", bundle}, {"the same import again", bundle}, {"one resource changed under its id", changed},
	} {
		name := c.name
		status, answer := imp.importR4(t, "doc", src, "", c.bundle)
		if status != 200 {
			t.Fatalf("%s: %d %v", name, status, answer)
		}
		data, _ := json.Marshal(answer)
		out.WriteString(name + "\n")
		writeEntries(t, &out, data)
	}

	const golden = "testdata/resend_golden.txt"
	if *updateResendGolden {
		if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != string(want) {
		gotLines, wantLines := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range max(len(gotLines), len(wantLines)) {
			if g, w := lineAt(gotLines, i), lineAt(wantLines, i); g != w {
				t.Fatalf("line %d differs:\n got %s\nwant %s", i+1, g, w)
			}
		}
	}
}

func lineAt(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "<none>"
}

// batchOf is a batch Bundle creating the resources.
func batchOf(resources [][]byte) []byte {
	var entries []string
	for _, r := range resources {
		entries = append(entries, `{"resource":`+string(r)+`,"request":{"method":"POST","url":"Observation"}}`)
	}
	return []byte(`{"resourceType":"Bundle","type":"batch","entry":[` + strings.Join(entries, ",") + `]}`)
}

// writeEntries writes, one line each, the status, location and outcome
// issues of the entries of a batch-response: what a client reads of a
// resend (a 201's times and resource are left out).
func writeEntries(t *testing.T, out *bytes.Buffer, response []byte) {
	t.Helper()
	for i, e := range fxArr(fxDecode(t, response)["entry"]) {
		r := fxObj(fxObj(e)["response"])
		issues, _ := json.Marshal(fxObj(r["outcome"])["issue"])
		fmt.Fprintf(out, "  %d %v %v %s\n", i, r["status"], r["location"], issues)
	}
}
