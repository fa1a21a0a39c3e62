package handlers

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// plainObservationSeeds are Observation bodies around the edges of the
// plain subset: what the fast reader takes, and what it must leave to the
// reference path.
var plainObservationSeeds = []string{
	string(BenchObservation("plain", 1, 1, 1)),
	` { "resourceType" : "Observation" , "status":"final", "identifier" : [ ] , "code":{"coding":[]} } `,
	`{"resourceType":"Observation","id":"x","meta":{"versionId":"1","lastUpdated":"2024-01-01T00:00:00Z"},"status":"final"}`,
	`{"subject":{"reference":"Patient/é"},"device":{"reference":"Device/1"},"effectivePeriod":{"start":"a","end":"b"}}`,
	`{"effectiveDateTime":"2024","effectiveInstant":"2024-01-01T00:00:00Z","valueAttachment":{}}`,
	`{"code":{"coding":[{"system":"https://w3id.org/openmhealth","code":"omh:heart-rate:2.0","display":"Heart rate"},{}]}}`,
	`{"status":"fin\u0061l"}`, `{"status":"a\/b"}`, `{"status":"\xff"}`, `{"status":null}`, `{"status":1}`,
	`{"status":"final","status":"final"}`, `{"Status":"final"}`, `{"other":"x"}`, `{"subject":{"reference":"a","display":"b"}}`,
	`{"code":{"coding":[{"system":"a","system":"b"}]}}`, `{"code":{"coding":null}}`, `{"code":{"Coding":[]}}`,
	`{"identifier":[{"system":"a"},null]}`, `{"identifier":{}}`, `{"meta":{"versionId":"1","versionId":"2"}}`,
	`{"status":"final"} x`, `{"status":"final"`, `{"status":"final",}`, `[]`, `null`, ``, `{}`, `{"status":"tab	in"}`,
	`{"status":"\u0000"}`, "{\"status\":\"nul\x00in\"}", `{"status":"\ud800"}`, `{"status":"\udc00\ud800"}`, `{"status":"\ud834\udd1e"}`,
	"{\"status\":\"\u2028\u2029 <&>\"}", `{"status":1e400}`, `{"status":-0}`, `{"status":1E2}`, `{"id":"a","ID":"b"}`,
}

// plainObservationsLarge are bodies too large to seed the fuzzer with:
// deep nesting, and a string of a mebibyte, which takes the fast path.
func plainObservationsLarge() (deep []string, huge string) {
	return []string{
		`{"meta":` + strings.Repeat(`{"versionId":`, 10000) + `"1"` + strings.Repeat("}", 10000) + `}`,
		`{"status":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`,
	}, `{"identifier":[{"system":"urn:x","value":"` + strings.Repeat("é\u2028<", 1<<17) + `"}]}`
}

// TestPlainReadersAgree: whatever the fast readers accept, they read
// exactly as the reference path does (encoding/json, and for an
// Observation no unknown element); the benchmark's bodies, as clients
// send them, take the fast path.
func TestPlainReadersAgree(t *testing.T) {
	for _, seed := range plainObservationSeeds {
		checkPlainObservation(t, []byte(seed))
	}
	if _, ok := readPlainObservation(BenchObservation("plain", 1, 1, 1)); !ok {
		t.Error("a client's Observation does not take the fast path")
	}
	deep, huge := plainObservationsLarge()
	for _, body := range append(deep, huge) {
		checkPlainObservation(t, []byte(body))
	}
	if _, ok := readPlainObservation([]byte(huge)); !ok {
		t.Error("an Observation with a string of a mebibyte does not take the fast path")
	}
	for _, seed := range plainBundleSeeds() {
		checkPlainBundle(t, []byte(seed))
	}
	if in, ok := readPlainBundle(BenchBatch("plain", 0, 3, 1, 1), true); !ok || in.Entry[2].observation == nil {
		t.Error("a client's batch Bundle, or its Observations, do not take the fast path")
	}
	if _, ok := readPlainBundle(r4ExampleBundle(t, "Observation"), false); !ok {
		t.Error("an R4 import Bundle of the official examples (narratives hold escapes) does not take the fast path")
	}
}

func plainBundleSeeds() []string {
	obs := string(BenchObservation("plain", 1, 1, 1))
	return []string{
		string(BenchBatch("plain", 0, 3, 1, 1)),
		`{"resourceType":"Bundle","type":"batch","id":"b","meta":{"tag":[1,2.5e3,-0,true,false,null]},"entry":[]}`,
		`{"resourceType":"Bundle","type":"batch","entry":[{"fullUrl":"urn:x","resource":` + obs + `,"request":{"method":"POST","url":"Observation","ifNoneExist":"x"}}]}`,
		`{"resourceType":"Bundle","entry":[{"resource":null}]}`, `{"resourceType":"Bundle","entry":[{"resource":[]}]}`,
		`{"resourceType":"Bundle","entry":[{}, {"request":{}}]}`, `{"resourceType":"Bundle","entry":null}`,
		`{"resourceType":"Bundle","Entry":[]}`, `{"resourceType":"Bundle","entry":[{"Resource":{}}]}`,
		`{"resourceType":"Bundle","entry":[{"request":{"URL":"x"}}]}`, `{"resourceType":"Bundle","type":"batch","type":"x"}`,
		`{"resourceType":"Bundle","entry":[{"resource":{"a":"\u0000"}}]}`, `{"resourceType":"Bundle","x":01}`, `{"resourceType":"Bundle","x":1.}`,
		`{"resourceType":"Bundle","x":truex}`, `{"resourceType":"Bundle","x":[1 2]}`, `{"resourceType":"Bundle","entry":[1]}`,
		`{"resourceType":"Bundle"}}`, `{"resourceType":"Bundle","x":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`,
		`{"resourceType":"Bundle","entry":[{"resource":{"div":"<div xmlns=\"x\">a\\b\/c\b\f\n\r\t\u00e9\uD834\udd1e</div>"}}]}`,
		`{"resourceType":"Bundle","entry":[{"resource":{"a":"\x"}}]}`, `{"resourceType":"Bundle","entry":[{"resource":{"a":"\u12g4"}}]}`,
		`{"resourceType":"Bundle","entry":[{"resource":{"a":"\u123"}}]}`, `{"resourceType":"Bundle","entry":[{"resource":{"a":"\`,
		`{"resourceType":"Bundle","entry":[{"resource":{"a":"\"}}]}`, `{"resourceType":"Bundle","entry":[{"resource":{"a\"b":1}}]}`,
		`{"resourceType":"Bundle","x":"\"","entry":[{"resource":{"a":"\u0041\xff"}}]}`,
		`{"resourceType":"Bundle","type":"batch","entry":[{"resource":{"resourceType":"Observation","status":"fin\u0061l"},"request":{"method":"POST","url":"Observation"}},{"resource":` + obs + `}]}`,
		`{"resourceType":"Bundle","entry":[{"resource":{"resourceType":"Patient","text":{"div":"<div xmlns=\"x\"/>"}}},{"request":{"url":"x"},"resource":{"status":"final"}}]}`,
		`{"resourceType":"Bundle","entry":[{"resource":{"status":"final","status":"final"}},{"resource":{"code":{"coding":[{"code":"a"}]},"x":[{"y":"\n"}]}}]}`,
		`{"resourceType":"Bundle","entry":[{"resource":{"status":"final"} , "resource":{}}]}`, `{"resourceType":"Bundle","entry":[{"resource":{"status":"final"}`,
	}
}

// checkPlainObservation compares the fast Observation reader with the
// reference path on raw: encoding/json, then the check that refuses what
// the native store would not keep (checkObservationJSON).
func checkPlainObservation(t *testing.T, raw []byte) {
	t.Helper()
	checkPlain(t, raw, func(raw []byte) (observationIn, bool) {
		in, ok := readPlainObservation(raw)
		return *in, ok
	}, func(raw []byte) (in observationIn, err error) {
		return in, checkObservationJSON(raw, json.Unmarshal(raw, &in))
	})
}

// checkPlainBundle compares the fast Bundle reader with encoding/json on
// raw, and the Observations it reads in its own pass with
// readPlainObservation of each entry's resource alone: a batch takes
// either for the other (entryRequest.observation).
func checkPlainBundle(t *testing.T, raw []byte) {
	t.Helper()
	checkPlain(t, raw, func(raw []byte) (batchIn, bool) {
		in, ok := readPlainBundle(raw, true)
		without, okWithout := readPlainBundle(raw, false)
		if ok != okWithout {
			t.Fatalf("%q: read fast %v reading its Observations, %v not", raw, ok, okWithout)
		}
		if !ok {
			return in, false
		}
		for i := range in.Entry {
			e := &in.Entry[i]
			alone, plain := readPlainObservation(e.Resource)
			if plain != (e.observation != nil) || plain && !reflect.DeepEqual(*e.observation, *alone) {
				t.Fatalf("%q: entry %d's resource reads in the Bundle's pass as %+v (%v), alone as %+v (%v)",
					raw, i, e.observation, e.observation != nil, alone, plain)
			}
			e.observation = nil // encoding/json knows nothing of it
		}
		if !reflect.DeepEqual(in, without) {
			t.Fatalf("%q: read fast as %+v reading its Observations, %+v not", raw, in, without)
		}
		return in, true
	}, func(raw []byte) (in batchIn, err error) {
		return in, json.Unmarshal(raw, &in)
	})
}

// checkPlain: whatever the fast reader read accepts, the reference path
// accepts too, with the same value.
func checkPlain[T any](t *testing.T, raw []byte, read func([]byte) (T, bool), reference func([]byte) (T, error)) {
	t.Helper()
	got, ok := read(raw)
	if !ok {
		return
	}
	want, err := reference(raw)
	if err != nil {
		t.Fatalf("%q: read fast, but the reference path refuses it: %v", raw, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: read fast as %+v, encoding/json reads %+v", raw, got, want)
	}
}

// FuzzPlainObservation: the fast Observation reader agrees with the
// reference path on whatever it accepts.
func FuzzPlainObservation(f *testing.F) {
	for _, seed := range plainObservationSeeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkPlainObservation(t, raw) })
}

// FuzzPlainBundle: the fast Bundle reader agrees with encoding/json on
// whatever it accepts.
func FuzzPlainBundle(f *testing.F) {
	for _, seed := range plainBundleSeeds() {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkPlainBundle(t, raw) })
}

// TestBundleEntriesBounded: a Bundle of a million empty entries keeps no
// more than maxBundleEntries+1 of them, read fast or by encoding/json
// (a key with an escape sends it there), and is refused as too long.
func TestBundleEntriesBounded(t *testing.T) {
	entries := strings.Repeat(`{},`, 1_000_000) + `{"request":{"method":"POST"}}]}`
	for name, body := range map[string]string{
		"plain":   `{"resourceType":"Bundle","type":"batch","entry":[` + entries,
		"escaped": `{"resourceType":"Bundle","type":"batch","entr\u0079":[` + entries,
	} {
		raw := []byte(body)
		in, plain := readPlainBundle(raw, true)
		if plain != (name == "plain") {
			t.Fatalf("%s: read fast %v", name, plain)
		}
		if !plain {
			if err := json.Unmarshal(raw, &in); err != nil {
				t.Fatal(err)
			}
		}
		if len(in.Entry) != maxBundleEntries+1 {
			t.Errorf("%s: %d entries kept, want %d", name, len(in.Entry), maxBundleEntries+1)
		}
	}
}

// TestEntryListReadsAsASlice: below the bound, entryList reads what a
// []entryRequest reads, and refuses what it refuses in the same words.
func TestEntryListReadsAsASlice(t *testing.T) {
	for _, entry := range []string{
		`[]`, `null`, `5`, `"x"`, `{}`, `[1]`, `[null]`, `[{}, {}]`,
		`[{"request": 5}]`, `[{"request": {"method": 5}}]`, `[{}, {"resource": [1]}]`,
		`[{"resource": {"resourceType": "Patient"}, "request": {"method": "POST", "url": "Patient"}}]`,
		`[{"Resource": {"a": "\u00e9"}, "REQUEST": {"Method": "post"}}]`,
		`[{"request": null, "resource": null}]`,
	} {
		body := []byte(`{"resourceType": "Bundle", "entry": ` + entry + `}`)
		var got batchIn
		gotErr := json.Unmarshal(body, &got)
		var want struct {
			ResourceType string         `json:"resourceType"`
			Entry        []entryRequest `json:"entry"`
		}
		wantErr := json.Unmarshal(body, &want)
		if (gotErr == nil) != (wantErr == nil) {
			t.Errorf("%s: error %v, as a slice %v", entry, gotErr, wantErr)
			continue
		}
		if gotErr != nil {
			if g, w := fhirJSONError("Bundle", gotErr).Error(), fhirJSONError("Bundle", wantErr).Error(); g != w {
				t.Errorf("%s: refused as %q, as a slice %q", entry, g, w)
			}
			continue
		}
		if !reflect.DeepEqual([]entryRequest(got.Entry), want.Entry) {
			t.Errorf("%s: read as %+v, as a slice %+v", entry, got.Entry, want.Entry)
		}
	}
}
