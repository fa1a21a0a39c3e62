package bulkimport

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// readAllOf reads one file and returns "where: body" or "where: error"
// per record, and the bytes the records stand for.
func readAllOf(t *testing.T, name, content string) ([]string, int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	var out []string
	var size int64
	err := readFile(context.Background(), inputFile{Path: path, Size: int64(len(content))}, func(r *record) error {
		where := strings.TrimPrefix(r.where(), path)
		size += r.size
		if r.err != nil {
			out = append(out, fmt.Sprintf("%s: error %v", where, r.err))
		} else {
			out = append(out, fmt.Sprintf("%s: %s%s", where, r.body, strings.TrimPrefix(" "+r.fullURL, " ")))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out, size
}

func TestReadInputs(t *testing.T) {
	for _, tc := range []struct {
		name, file, content string
		want                []string
	}{
		{"ndjson with blank lines and CRLF", "a.ndjson", "{\"resourceType\":\"Patient\"}\r\n\r\n  \n{\"resourceType\":\"Observation\"}",
			[]string{` line 1: {"resourceType":"Patient"}`, ` line 4: {"resourceType":"Observation"}`}},
		{"ndjson line that is not an object", "a.jsonl", "[1,2]\n{\"resourceType\":\"Patient\"}\n",
			[]string{` line 1: error the line is not a JSON object`, ` line 2: {"resourceType":"Patient"}`}},
		{"Bundle streamed entry by entry", "b.json",
			`{"resourceType":"Bundle","type":"transaction","entry":[{"fullUrl":"urn:uuid:1","resource":{"resourceType":"Patient","id":"1"},"request":{"method":"PUT","url":"Patient/1"}},{"request":{"method":"DELETE","url":"Patient/2"}},{"resource":{"resourceType":"Observation"}}]}`,
			[]string{` entry 1: {"resourceType":"Patient","id":"1"}urn:uuid:1`, ` entry 2: error the entry has no resource`, ` entry 3: {"resourceType":"Observation"}`}},
		{"Bundle whose entries come before its type", "b.json",
			`{"entry":[{"resource":{"resourceType":"Patient"}}],"resourceType":"Bundle"}`,
			[]string{` entry 1: {"resourceType":"Patient"}`}},
		{"a single resource", "p.json", `{"id":"x", "resourceType":"Patient"}`,
			[]string{`: {"id":"x","resourceType":"Patient"}`}},
		{"a List, whose entries are not resources", "l.json", `{"resourceType":"List","entry":[{"item":{"reference":"Patient/1"}}]}`,
			[]string{`: {"resourceType":"List","entry":[{"item":{"reference":"Patient/1"}}]}`}},
		{"a Bundle that breaks off", "b.json", `{"resourceType":"Bundle","entry":[{"resource":{"resourceType":"Patient"}},{"resource":{"resourceType":`,
			[]string{` entry 1: {"resourceType":"Patient"}`, ` entry 2: error the Bundle breaks off: unexpected EOF`}},
		{"an entry that is not an object", "b.json", `{"resourceType":"Bundle","entry":["x",{"resource":{"resourceType":"Patient"}}]}`,
			[]string{` entry 1: error the entry is not a Bundle entry: json: cannot unmarshal string into Go value of type struct { FullURL string "json:\"fullUrl\""; Resource json.RawMessage "json:\"resource\"" }`, ` entry 2: {"resourceType":"Patient"}`}},
		{"not JSON", "x.json", `hello`, []string{`: error the file is not a JSON object: invalid character 'h' looking for beginning of value`}},
		{"NDJSON saved as .json", "x.json", "{\"resourceType\":\"Patient\"}\n{\"resourceType\":\"Observation\"}\n",
			[]string{`: {"resourceType":"Patient"}`, `: error the file is not a JSON object: more follows the first JSON value (one resource per line belongs in a .ndjson file)`}},
		{"a Bundle that breaks off after a comma", "b.json", `{"resourceType":"Bundle","entry":[{"resource":{"resourceType":"Patient"}},`,
			[]string{` entry 1: {"resourceType":"Patient"}`, ` entry 2: error the Bundle breaks off: EOF`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, size := readAllOf(t, tc.file, tc.content)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if size <= 0 || size > int64(len(tc.content)) {
				t.Errorf("records stand for %d of %d bytes", size, len(tc.content))
			}
		})
	}
}

func TestListInputs(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"b/2.ndjson", "b/1.json", "a.jsonl", "notes.txt", "c/README.md", "b/report.ndjson"} {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A Bulk Data export's log beside its data is skipped (by its name and
	// its events); a log.ndjson of resources is read, and so is one named.
	for name, content := range map[string]string{
		"log.ndjson":   "\n{\"exportId\": \"export-10\", \"eventId\": \"kickoff\"}\n",
		"b/LOG.ndjson": `{"eventId": "status_complete"}`,
		"d/log.ndjson": `{"resourceType": "Patient", "id": "p1"}`,
	} {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, skipped, err := listInputs([]string{filepath.Join(dir, "notes.txt"), filepath.Join(dir, "log.ndjson"), dir}, filepath.Join(dir, "b", "report.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range files {
		got = append(got, strings.TrimPrefix(f.Path, dir+"/"))
	}
	if want := []string{"notes.txt", "log.ndjson", "a.jsonl", "b/1.json", "b/2.ndjson", "d/log.ndjson"}; !reflect.DeepEqual(got, want) {
		t.Errorf("files %v, want %v", got, want)
	}
	if want := []string{filepath.Join(dir, "b/LOG.ndjson"), filepath.Join(dir, "log.ndjson")}; !reflect.DeepEqual(skipped, want) {
		t.Errorf("skipped %v, want %v", skipped, want)
	}
	for _, bad := range [][]string{nil, {filepath.Join(dir, "missing")}, {filepath.Join(dir, "c")}} {
		if _, _, err := listInputs(bad, ""); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

func TestRoute(t *testing.T) {
	rt := &router{byPatient: map[string]int64{"Patient/p1": 1, "urn:uuid:u2": 2, "Patient/u3": 3}}
	for _, tc := range []struct {
		body, fullURL string
		fallback      int64
		want          int64
		err           string
	}{
		{body: `{"resourceType":"Observation","subject":{"reference":"Patient/p1"}}`, want: 1},
		{body: `{"resourceType":"Observation","subject":{"reference":"https://ehr.example.org/fhir/Patient/p1/_history/3"}}`, want: 1},
		{body: `{"resourceType":"Condition","subject":{"reference":"urn:uuid:u2"}}`, want: 2},
		{body: `{"resourceType":"Immunization","patient":{"reference":"urn:uuid:u3"}}`, want: 3},
		{body: `{"resourceType":"Coverage","beneficiary":{"reference":"Patient/p1"}}`, want: 1},
		{body: `{"resourceType":"Patient","id":"p1"}`, want: 1},
		{body: `{"resourceType":"Patient","id":"zz"}`, fullURL: "urn:uuid:u2", want: 2},
		{body: `{"resourceType":"Observation","subject":{"reference":"Patient/p9"}}`, err: "no FHIR source for patient Patient/p9"},
		{body: `{"resourceType":"Observation","subject":{"reference":"Patient/p9"}}`, fallback: 7, want: 7},
		{body: `{"resourceType":"Organization","id":"o1"}`, err: "names no patient"},
		{body: `{"resourceType":"Organization","id":"o1"}`, fallback: 7, want: 7},
		{body: `{"resourceType":"Observation","subject":"Patient/p1"}`, err: "names no patient"},
		{body: `{"id":"x"}`, err: "no resourceType"},
		{body: `{"resourceType":"Observation",}`, err: "not valid JSON"},
	} {
		rt.fallback = tc.fallback
		r := &record{body: []byte(tc.body), fullURL: tc.fullURL}
		err := rt.route(r)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.body, err, tc.err)
			}
			continue
		}
		if err != nil || r.source != tc.want {
			t.Errorf("%s: source %d, %v; want %d", tc.body, r.source, err, tc.want)
		}
	}
}

func TestReadSources(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	want := map[string]int64{"Patient/p1": 3, "urn:uuid:u2": 4}
	for _, content := range []string{
		`{"Patient/p1": 3, "urn:uuid:u2": 4}`,
		"reference,source\n# upstream ids\nPatient/p1, 3\nurn:uuid:u2,4\n",
		"Patient/p1,3\nurn:uuid:u2,4",
	} {
		got, _, err := readSources(write("s", content))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %v %v", content, got, err)
		}
	}
	for _, content := range []string{"", `{"Patient/p1": "three"}`, `{"Patient/p1": 0}`, "Patient/p1,3\nPatient/p2,x\n", "Patient/p1,3,4\n"} {
		if got, _, err := readSources(write("s", content)); err == nil {
			t.Errorf("%q: accepted as %v", content, got)
		}
	}
}

// However many sources the input spreads over, no more than pendingCap
// records wait in open batches; a batch's first record is its earliest,
// which the checkpoint's mark relies on.
func TestBatcherBoundsWhatWaits(t *testing.T) {
	bt := &batcher{size: 10, bytes: 1 << 20, pendingCap: 40, pendingBytesCap: 1 << 20, open: map[int64]*batch{}}
	var out []*batch
	for seq := range int64(1000) {
		bt.add(&record{seq: seq, source: seq % 97, body: []byte("{}")})
		if bt.pending > bt.pendingCap {
			t.Fatalf("%d records wait", bt.pending)
		}
		out = append(out, bt.ready()...)
	}
	out = append(out, bt.drain()...)
	n := 0
	for _, b := range out {
		n += len(b.records)
		if len(b.records) > 10 {
			t.Errorf("a batch of %d", len(b.records))
		}
		for _, r := range b.records {
			if r.source != b.source || r.seq < b.first {
				t.Fatalf("record %d of source %d in a batch of source %d starting at %d", r.seq, r.source, b.source, b.first)
			}
		}
	}
	if n != 1000 || bt.pending != 0 || bt.pendingBytes != 0 {
		t.Errorf("%d records batched, %d records (%d bytes) still counted as waiting", n, bt.pending, bt.pendingBytes)
	}
	// A record larger than the byte cap goes alone.
	bt = &batcher{size: 10, bytes: 100, pendingCap: 40, pendingBytesCap: 1000, open: map[int64]*batch{}}
	bt.add(&record{seq: 0, body: make([]byte, 60)})
	bt.add(&record{seq: 1, body: make([]byte, 60)})
	if ready := bt.ready(); len(ready) != 1 || len(ready[0].records) != 1 {
		t.Errorf("byte cap: %v", ready)
	}
	// Large resources of many sources: the bytes waiting stay bounded
	// though few records wait.
	bt = &batcher{size: 10, bytes: 1000, pendingCap: 40, pendingBytesCap: 2500, open: map[int64]*batch{}}
	for seq := range int64(100) {
		bt.add(&record{seq: seq, source: seq % 7, body: make([]byte, 400)})
		if bt.pendingBytes > bt.pendingBytesCap {
			t.Fatalf("%d bytes wait", bt.pendingBytes)
		}
	}
}

// Any file, read as a Bundle or as NDJSON, gives records that are either
// a JSON object to send or an error, standing for no more bytes than the
// file has; routing any record gives a source or an error.
func FuzzReadInput(f *testing.F) {
	f.Add(`{"resourceType":"Bundle","entry":[{"resource":{"resourceType":"Patient","id":"1"}}]}`)
	f.Add(`{"entry":[{"fullUrl":"urn:uuid:1","resource":{"resourceType":"Patient"}}],"resourceType":"Bundle"}`)
	f.Add("{\"resourceType\":\"Observation\",\"subject\":{\"reference\":\"Patient/p1\"}}\n\n[1]\n")
	f.Add(`{"resourceType":"Bundle","entry":[{"resource":`)
	f.Add(`{"resourceType":"Bundle","entry":[{"resource":{"resourceType":"Patient"}}],"type":`)
	dir := f.TempDir()
	rt := &router{byPatient: map[string]int64{"Patient/p1": 1}}
	f.Fuzz(func(t *testing.T, content string) {
		for _, name := range []string{"in.json", "in.ndjson"} {
			path := filepath.Join(dir, name)
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			var size int64
			err := readFile(context.Background(), inputFile{Path: path, Size: int64(len(content))}, func(r *record) error {
				size += r.size
				if r.err == nil && (len(r.body) == 0 || r.body[0] != '{') {
					t.Fatalf("%s: a record without error is not an object: %q", name, r.body)
				}
				if r.err == nil {
					if err := rt.route(r); err == nil && r.source != 1 {
						t.Fatalf("routed to %d", r.source)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if size > int64(len(content)) {
				t.Fatalf("%s: records stand for %d of %d bytes", name, size, len(content))
			}
		}
	})
}
