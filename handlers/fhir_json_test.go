package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
	"unicode/utf8"

	"exchange/domain"
	"exchange/omh"
)

// reflectJSON is what encoding/json writes for v, as marshalJSON wrote it
// before the hand-written writers: the reference they must match.
func reflectJSON(t testing.TB, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// jsonStrings are strings that every escaping rule of JSON meets.
func jsonStrings() []string {
	out := []string{"", "plain", `"quoted" \back\slash/`, "<html> & </html>", "tab\tnew\nline\rcr\bbs\fff", "\x00\x01\x1f\x7f",
		"é ü 中文 🙂", "\u2028 and \u2029", "\xff", "a\xc3", "\xed\xa0\x80 surrogate", "\xf4\x90\x80\x80 beyond", "\ufffd"}
	for c := range 256 {
		out = append(out, string([]byte{byte(c)}), "x"+string([]byte{byte(c)})+"y")
	}
	return out
}

func TestAppendJSONString(t *testing.T) {
	strs := jsonStrings()
	// Every byte value at every place of the words AppendJSONString tests
	// eight bytes at a time, in plain text and after another escape.
	for c := range 256 {
		for at := range 17 {
			s := []byte("abcdefghijklmnopqrstuvwxyz")
			s[at] = byte(c)
			strs = append(strs, string(s), "\t"+string(s))
		}
	}
	for _, s := range strs {
		checkJSONString(t, s)
	}
}

// checkJSONString compares both escapers with encoding/json: without HTML
// escaping (the FHIR writers) and with it (json.Marshal, the store's
// content keys).
func checkJSONString(t *testing.T, s string) {
	t.Helper()
	if got, want := domain.AppendJSONString(nil, s), reflectJSON(t, s); !bytes.Equal(got, want) {
		t.Errorf("%q: wrote %s, encoding/json %s", s, got, want)
	}
	want, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := domain.AppendHTMLEscapedJSONString(nil, s); !bytes.Equal(got, want) {
		t.Errorf("%q: wrote %s, json.Marshal %s", s, got, want)
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range jsonStrings() {
		f.Add(s)
	}
	f.Fuzz(checkJSONString)
}

// variedObservations are native observations of every shape a page
// renders: an instant, a period, no time frame; one coding or several,
// with and without display; identifiers or none, with text JSON escapes;
// a device or none; a payload, an empty one, none.
func variedObservations() []domain.Observation {
	at := time.Date(2024, 2, 1, 12, 0, 0, 123456000, time.UTC)
	var out []domain.Observation
	for i, s := range jsonStrings()[:14] {
		o := domain.Observation{ID: int64(i + 1), PatientID: int64(i%3 + 1), Status: "final", Code: "omh:heart-rate:2.0",
			Codings:     []domain.Coding{{System: domain.SystemOpenMHealth, Code: "omh:heart-rate:2.0", Display: s}},
			ContentType: "application/json", Payload: []byte(`{"header":{"id":"` + s + `"},"body":{}}`),
			LastUpdated: at.Add(time.Duration(i) * time.Microsecond)}
		switch i % 4 {
		case 0:
			o.Effective = &omh.TimeFrame{Start: at, End: at, DateTime: "2024-02-01T13:00:00+01:00"}
			o.DataSourceID = 9
		case 1:
			o.Effective = &omh.TimeFrame{Start: at, End: at.Add(time.Hour), PeriodStart: "2024-02-01T12:00:00Z", PeriodEnd: "2024-02-01T13:00:00Z"}
			o.Identifiers = []domain.Identifier{{System: "urn:x", Value: s}, {System: "urn:y" + s, Value: "v"}}
		case 2:
			o.Codings = append(o.Codings, domain.Coding{System: "http://loinc.org", Code: "8867-4"})
			o.Payload = []byte{}
		case 3:
			o.Payload, o.ContentType, o.Status = nil, "", ""
			o.LastUpdated = time.Time{}
		}
		out = append(out, o)
	}
	return out
}

// TestBundleJSON shows that searchset and batch-response Bundles, written
// by hand, are byte for byte what encoding/json writes: observations,
// observations cut by _elements, imported resources, outcomes, links,
// totals, and the empty Bundle of _summary=count.
func TestBundleJSON(t *testing.T) {
	total := int64(7)
	base := "http://localhost/FHIR/R5"
	var entries []bundleEntry
	for i, o := range variedObservations() {
		var resource any = observationFHIR(&o)
		if i%5 == 4 {
			resource = withElements(resource, []string{"status", "effective[x]"})
		}
		entries = append(entries, bundleEntry{FullURL: fmt.Sprintf("%s/Observation/%d", base, o.ID), Resource: resource, Search: &bundleSearch{Mode: "match"}})
		created := bundleEntry{FullURL: fmt.Sprintf("%s/Observation/%d", base, o.ID), Resource: resource,
			Response: &bundleResponse{Status: statusLine(201), Location: "Observation/1/_history/1", Etag: `W/"1"`, LastModified: instant(o.LastUpdated)}}
		entries = append(entries, created)
	}
	entries = append(entries,
		bundleEntry{FullURL: base + "/Condition/x", Resource: json.RawMessage(`{ "resourceType" : "Condition", "id":"x", "note":[{"text":"<b>1.50</b>"}] }`), Search: &bundleSearch{Mode: "include"}},
		errorEntry(domain.FieldErrorf("Observation.status", `"x" & "y" <are> not statuses`)),
		errorEntry(errors.New("boom")),
		bundleEntry{Resource: outcomeOf(fhirIssue("warning", "not-supported", "ignored: a, b", "")), Search: &bundleSearch{Mode: "outcome"}},
		bundleEntry{})
	links := []bundleLink{{Relation: "self", URL: base + "/Observation?code=a|b&date=ge2024-01-01<>"}, {Relation: "next", URL: base + "/Observation?_cursor=x%20y"}}
	for name, bd := range map[string]bundle{
		"searchset":      {ResourceType: "Bundle", Type: "searchset", Timestamp: instant(time.Now()), Total: &total, Link: links, Entry: entries},
		"batch-response": {ResourceType: "Bundle", Type: "batch-response", Entry: entries},
		"summary count":  {ResourceType: "Bundle", Type: "searchset", Timestamp: instant(time.Now()), Total: &total, Link: links[:1]},
		"empty":          {},
		"empty entries":  {ResourceType: "Bundle", Type: "searchset", Entry: []bundleEntry{}},
	} {
		got, err := marshalJSON(bd)
		if err != nil {
			t.Fatal(err)
		}
		if want := reflectJSON(t, bd); !bytes.Equal(got, want) {
			t.Errorf("%s: wrote\n%s\nencoding/json\n%s", name, got, want)
		}
		if !utf8.Valid(got) || !json.Valid(got) {
			t.Errorf("%s: not valid JSON: %s", name, got)
		}
	}
	for _, o := range variedObservations() {
		r := observationFHIR(&o)
		want := reflectJSON(t, observationShape(&o))
		if got := r.appendJSON(nil); !bytes.Equal(got, want) {
			t.Errorf("Observation/%d: wrote\n%s\nencoding/json\n%s", o.ID, got, want)
		}
		if got := reflectJSON(t, r); !bytes.Equal(got, want) { // through MarshalJSON
			t.Errorf("Observation/%d: encoding/json wrote\n%s\nnot\n%s", o.ID, got, want)
		}
	}
}

// FuzzObservationJSON: a native observation written by hand is what
// encoding/json writes from its FHIR shape, whichever of its strings are
// empty (members left out) or escaped, with any payload, time frame,
// identifiers and codings.
func FuzzObservationJSON(f *testing.F) {
	for i, s := range jsonStrings()[:14] {
		f.Add(s, "", "urn:x", s, int64(i), uint8(i), []byte(s))
		f.Add("", s, s, "", -int64(i), uint8(255-i), []byte(nil))
	}
	for n := range 100 { // payloads around the lengths a vector encoder takes in blocks
		f.Add("final", "c", "application/json", "", int64(n), uint8(2), []byte(BenchObservation("fuzz", n, 1, 1)[:n*7%330]))
	}
	f.Fuzz(func(t *testing.T, a, b, c, d string, id int64, shape uint8, payload []byte) {
		at := time.Unix(id%(1<<35), id%1e9).UTC()
		o := domain.Observation{ID: id, PatientID: id / 3, DataSourceID: int64(shape & 1), Status: a, Code: b, ContentType: c, LastUpdated: at}
		if shape&2 != 0 {
			o.Payload = payload
		}
		if shape&4 != 0 {
			o.Codings = []domain.Coding{{System: a, Code: b, Display: c}, {Code: d}, {}}
		}
		if shape&8 != 0 {
			o.Identifiers = []domain.Identifier{{System: d, Value: a}, {Value: b}, {}}
		}
		switch shape >> 4 & 3 {
		case 1:
			o.Effective = &omh.TimeFrame{Start: at, End: at, DateTime: d}
		case 2:
			o.Effective = &omh.TimeFrame{Start: at, End: at.Add(time.Second), PeriodStart: c, PeriodEnd: d}
		}
		if got, want := observationFHIR(&o).appendJSON(nil), reflectJSON(t, observationShape(&o)); !bytes.Equal(got, want) {
			t.Errorf("wrote\n%s\nencoding/json\n%s", got, want)
		}
	})
}

// observationResource is the FHIR shape of a native observation, as the
// handlers rendered it with encoding/json before nativeObservation wrote
// it directly: the reference its bytes are compared with.
type observationResource struct {
	ResourceType      string              `json:"resourceType"`
	ID                string              `json:"id"`
	Meta              *fhirMeta           `json:"meta"`
	Identifier        []fhirIdentifier    `json:"identifier,omitempty"`
	Status            string              `json:"status"`
	Code              fhirCodeableConcept `json:"code"`
	Subject           fhirReference       `json:"subject"`
	EffectiveDateTime string              `json:"effectiveDateTime,omitempty"`
	EffectivePeriod   *fhirPeriod         `json:"effectivePeriod,omitempty"`
	Device            *fhirReference      `json:"device,omitempty"`
	ValueAttachment   *fhirAttachment     `json:"valueAttachment,omitempty"`
}

func observationShape(o *domain.Observation) observationResource {
	r := observationResource{ResourceType: "Observation", ID: strconv.FormatInt(o.ID, 10), Meta: metaOf(o.LastUpdated),
		Identifier: identifiers(o.Identifiers), Status: o.Status, Subject: fhirReference{Reference: "Patient/" + strconv.FormatInt(o.PatientID, 10)}}
	for _, c := range o.Codings {
		r.Code.Coding = append(r.Code.Coding, fhirCoding{System: c.System, Code: c.Code, Display: c.Display})
	}
	if o.DataSourceID != 0 {
		r.Device = &fhirReference{Reference: "Device/" + strconv.FormatInt(o.DataSourceID, 10)}
	}
	if o.Payload != nil {
		r.ValueAttachment = &fhirAttachment{ContentType: o.ContentType, Data: o.Payload}
	}
	if tf := o.Effective; tf != nil {
		if tf.IsInstant() {
			r.EffectiveDateTime = tf.DateTime
		} else {
			r.EffectivePeriod = &fhirPeriod{Start: tf.PeriodStart, End: tf.PeriodEnd}
		}
	}
	return r
}

// TestAppendInstant shows that the instants written digit by digit are
// those of the layout, at the edges of its fields and of the years it
// writes itself, in any zone.
func TestAppendInstant(t *testing.T) {
	kolkata := time.FixedZone("IST", 5*3600+1800)
	times := []time.Time{{}, time.Unix(0, 0), time.Unix(-1, 999_999_999),
		time.Date(2024, 2, 29, 23, 59, 59, 999_999_999, time.UTC), time.Date(2024, 1, 1, 0, 0, 0, 1000, kolkata),
		time.Date(2024, 1, 1, 0, 0, 0, 100_000_000, time.UTC), time.Date(2024, 1, 1, 0, 0, 0, 999, time.UTC),
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 123_450_000, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 12, 31, 0, 0, 0, 0, time.UTC)}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10_000 {
		times = append(times, time.Unix(r.Int64N(400*365*86400)-200*365*86400, r.Int64N(1e9)).In(kolkata))
	}
	for _, tm := range times {
		if got, want := string(appendInstant([]byte("x"), tm)), "x"+tm.UTC().Format(instantLayout); got != want {
			t.Fatalf("%v: wrote %s, the layout %s", tm, got, want)
		}
	}
}
