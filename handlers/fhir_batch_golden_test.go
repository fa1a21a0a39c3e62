package handlers

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/batch_golden.txt")

// recordingAuditor writes the audit events of a batch.
type recordingAuditor struct{ out *bytes.Buffer }

func (a recordingAuditor) Record(_ context.Context, e domain.AuditEvent) error {
	data, _ := json.Marshal(e)
	fmt.Fprintf(a.out, "audit %s\n", data)
	return nil
}

// TestBatchGolden pins an upload's whole output, byte for byte: the
// batch-response Bundle, the documents and claims the store is handed
// (as repo marshals them) and the audit events, for a batch of created
// and refused entries of every kind the native path reads. The speed work
// on this path keeps them as they were: the golden file was
// written by the code before it.
func TestBatchGolden(t *testing.T) {
	var out bytes.Buffer
	store := newBenchStore()
	store.at = time.Date(2024, 3, 1, 12, 0, 0, 123456000, time.UTC)
	store.keep = func(doc bson.Raw, claims []any) {
		fmt.Fprintf(&out, "doc %s\n", doc)
		for _, c := range claims {
			fmt.Fprintf(&out, "claim %s\n", c)
		}
	}
	handle, _ := storeApp(t, domain.Config{Store: store, Auditor: recordingAuditor{&out},
		Now: func() time.Time { return time.Date(2024, 3, 1, 12, 0, 1, 0, time.UTC) }}, store.manager.ID)
	var ctx fasthttp.RequestCtx
	postBatch(handle, &ctx, goldenBatch())
	fmt.Fprintf(&out, "status %d\nresponse %s\n", ctx.Response.StatusCode(), ctx.Response.Body())
	const golden = "testdata/batch_golden.txt"
	if *updateGolden {
		if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.Bytes(); !bytes.Equal(got, want) {
		gotLines, wantLines := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := range max(len(gotLines), len(wantLines)) {
			g, w := at(gotLines, i), at(wantLines, i)
			if g != w {
				t.Fatalf("line %d differs:\n got %s\nwant %s", i+1, g, w)
			}
		}
	}
}

func at(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "<none>"
}

// goldenBatch is a batch of native uploads, created and refused: the
// benchmark's observations and variations of them.
func goldenBatch() []byte {
	var entries []string
	post := func(resource string) {
		entries = append(entries, `{"resource":`+resource+`,"request":{"method":"POST","url":"Observation"}}`)
	}
	for i := range 3 {
		post(string(BenchObservation("golden", i, 1, 1)))
	}
	obs := func(i int, edit func(m map[string]any)) string {
		var m map[string]any
		if err := json.Unmarshal(BenchObservation("golden", 100+i, 1, 1), &m); err != nil {
			panic(err)
		}
		edit(m)
		data, _ := json.Marshal(m)
		return string(data)
	}
	dataOf := func(s string) map[string]any {
		return map[string]any{"contentType": "application/json", "data": base64.StdEncoding.EncodeToString([]byte(s))}
	}
	edits := []func(m map[string]any){
		func(m map[string]any) { delete(m, "identifier") }, // a content claim
		func(m map[string]any) {
			m["identifier"] = []any{map[string]any{"system": "urn:a", "value": "1"}, map[string]any{"system": "https://example.org/ids", "value": "x y"}}
		},
		func(m map[string]any) {
			m["identifier"] = []any{map[string]any{"system": "urn:a", "value": "2"}, map[string]any{"system": "urn:a", "value": "2"}}
		},
		func(m map[string]any) {
			m["identifier"] = []any{map[string]any{"system": "not absolute", "value": "3"}}
		},
		func(m map[string]any) { m["identifier"] = []any{map[string]any{"system": "urn:a", "value": " 4"}} },
		func(m map[string]any) { m["status"] = "done" },
		func(m map[string]any) { m["status"] = "amended" },
		func(m map[string]any) { m["subject"] = map[string]any{"reference": "Patient/2"} },
		func(m map[string]any) { m["subject"] = map[string]any{"reference": "Group/1"} },
		func(m map[string]any) { m["device"] = map[string]any{"reference": "Device/x"} },
		func(m map[string]any) { delete(m, "device") },
		func(m map[string]any) { m["note"] = []any{map[string]any{"text": "x"}} },
		func(m map[string]any) { m["effectiveDateTime"] = "2024-01-01T00:00:00Z" },
		func(m map[string]any) { m["effectiveDateTime"] = "2024-01-01T01:00:00Z" },
		func(m map[string]any) { m["effectivePeriod"] = map[string]any{"start": "2024-01-01T00:00:00Z"} },
		func(m map[string]any) {
			m["code"] = map[string]any{"coding": []any{
				map[string]any{"system": "http://loinc.org", "code": "8867-4", "display": "Heart rate"},
				map[string]any{"system": domain.SystemIEEE1752, "code": "omh:heart-rate:2.0"}}}
		},
		func(m map[string]any) {
			m["code"] = map[string]any{"coding": []any{map[string]any{"system": domain.SystemOpenMHealth, "code": "omh:heart-rate:1.0"}}}
		},
		func(m map[string]any) {
			m["code"] = map[string]any{"coding": []any{map[string]any{"system": domain.SystemOpenMHealth, "code": "omh:body-weight:2.0"}}}
		},
		func(m map[string]any) {
			m["code"] = map[string]any{"coding": []any{map[string]any{"system": domain.SystemOpenMHealth, "code": "bad code"}}}
		},
		func(m map[string]any) {
			m["code"] = map[string]any{"coding": []any{map[string]any{"system": domain.SystemOpenMHealth, "code": "omh:heart-rate:2.0"},
				map[string]any{"system": domain.SystemIEEE1752, "code": "omh:heart-rate:2.0"}}}
		},
		func(m map[string]any) {
			m["valueAttachment"].(map[string]any)["contentType"] = "application/json; charset=utf-8"
		},
		func(m map[string]any) { m["valueAttachment"].(map[string]any)["contentType"] = "Application/JSON" },
		func(m map[string]any) { m["valueAttachment"].(map[string]any)["contentType"] = "text/plain" },
		func(m map[string]any) { m["valueAttachment"].(map[string]any)["data"] = "!!" },
		func(m map[string]any) { m["valueAttachment"].(map[string]any)["data"] = "" },
		func(m map[string]any) { m["valueAttachment"] = dataOf(`{"header":{}}`) },
		func(m map[string]any) {
			m["valueAttachment"] = dataOf(`{"header":{"id":"é\u00e9","creation_date_time":"2024-01-01T00:00:30Z",` +
				`"schema_id":{"namespace":"omh","name":"heart-rate","version":"2.0"}},` +
				`"body":{"heart_rate":{"value":61.5,"unit":"beats/min"},"temporal_relationship_to_physical_activity":"at rest",` +
				`"effective_time_frame":{"time_interval":{"start_date_time":"2024-01-01T00:00:00+02:00","end_date_time":"2024-01-01T00:10:00+02:00"}}}}`)
		},
		func(m map[string]any) { m["resourceType"] = "Condition" },
	}
	for i, edit := range edits {
		post(obs(i, edit))
	}
	// A body with an escape (the reference path) and an entry the batch
	// refuses before reading it.
	post(strings.Replace(string(BenchObservation("golden", 200, 1, 1)), `"final"`, `"fin\u0061l"`, 1))
	entries = append(entries, `{"resource":{"resourceType":"Observation"},"request":{"method":"PUT","url":"Observation/1"}}`,
		`{"request":{"method":"POST","url":"Observation"}}`, `{"resource":{"resourceType":"Patient"},"request":{"method":"POST","url":"Patient"}}`)
	post(string(BenchObservation("golden", 0, 1, 1))) // a repeat of the first entry, as this store sees it: stored again
	return []byte(`{"resourceType":"Bundle","type":"batch","entry":[` + strings.Join(entries, ",") + `]}`)
}
