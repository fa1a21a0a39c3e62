package repo

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
	"exchange/omh"
)

// storedVariety returns stored observation documents of many shapes: what
// the service writes (instants, periods, no time frame, several codings
// and identifiers, none, text that JSON escapes) and what it does not
// (int32 ids, a string where a date belongs, duplicated members, a
// missing lastUpdatedMicros).
func storedVariety(t testing.TB) map[string]bson.Raw {
	t.Helper()
	marshal := func(v any) bson.Raw {
		data, err := bson.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	out := map[string]bson.Raw{}
	updated := time.Date(2024, 2, 1, 12, 0, 0, 123456000, time.UTC)
	payload := []byte(`{"header":{"id":"x","creation_date_time":"2024-01-01T00:00:00Z","schema_id":{"namespace":"omh","name":"step-count","version":"2.0"}},"body":{}}`)
	for i, o := range []domain.Observation{
		{ID: 1, PatientID: 2, DataSourceID: 3, Status: "final", Code: "omh:heart-rate:2.0",
			Codings:     []domain.Coding{{System: domain.SystemOpenMHealth, Code: "omh:heart-rate:2.0", Display: "Heart rate"}},
			Identifiers: []domain.Identifier{{System: "urn:x", Value: "a"}}, ContentType: "application/json", Payload: payload,
			Effective: &omh.TimeFrame{Start: updated, End: updated, DateTime: "2024-02-01T13:00:00.123456+01:00"}, LastUpdated: updated},
		{ID: 1 << 40, PatientID: 7, Status: "amended", Code: "ieee:sleep-episode:1.0",
			Codings:     []domain.Coding{{System: "http://loinc.org", Code: "8867-4"}, {System: domain.SystemIEEE1752, Code: "ieee:sleep-episode:1.0"}},
			Identifiers: []domain.Identifier{{System: "urn:x", Value: "é <&> \"quoted\" \u2028"}, {System: "urn:y", Value: "b"}},
			ContentType: "application/json; charset=utf-8", Payload: payload,
			Effective:   &omh.TimeFrame{Start: updated.Add(-time.Hour), End: updated, PeriodStart: "2024-02-01T11:00:00Z", PeriodEnd: "2024-02-01T12:00:00Z"},
			LastUpdated: updated.Add(time.Microsecond)},
		{ID: 3, PatientID: 1, DataSourceID: 1, Status: "final", Code: "omh:step-count:2.0", ContentType: "application/json", Payload: payload,
			LastUpdated: time.Date(1969, 12, 31, 23, 59, 59, 999999000, time.UTC)}, // no time frame, before 1970
		{ID: 4, Status: "final"},
	} {
		x := toObservationDoc(&o)
		x.OMH = nil // the planner projects it out
		out[fmt.Sprintf("written %d", i)] = marshal(x)
	}
	out["int32 ids"] = marshal(bson.D{{Key: "_id", Value: int32(5)}, {Key: "patientId", Value: int32(6)}, {Key: "status", Value: "final"}})
	out["a string date"] = marshal(bson.D{{Key: "_id", Value: int64(5)}, {Key: "effective", Value: bson.D{{Key: "dateTime", Value: "2024"}}},
		{Key: "effectiveStart", Value: "2024"}, {Key: "effectiveEnd", Value: "2024"}})
	out["members twice"] = marshal(bson.D{{Key: "_id", Value: int64(5)},
		{Key: "codings", Value: bson.A{bson.D{{Key: "system", Value: "a"}, {Key: "code", Value: "b"}}}},
		{Key: "codings", Value: bson.A{bson.D{{Key: "system", Value: "c"}, {Key: "code", Value: "d"}, {Key: "extra", Value: 1}}}},
		{Key: "status", Value: "final"}, {Key: "status", Value: "amended"}})
	out["no members"] = marshal(bson.D{})
	out["empty lists"] = marshal(bson.D{{Key: "codings", Value: bson.A{}}, {Key: "identifiers", Value: bson.A{}}, {Key: "payload", Value: []byte{}}})
	out["null lists"] = marshal(bson.D{{Key: "codings", Value: nil}, {Key: "identifiers", Value: nil}, {Key: "payload", Value: nil}})
	out["old binary"] = marshal(bson.D{{Key: "payload", Value: bson.Binary{Subtype: bson.TypeBinaryBinaryOld, Data: []byte("{}")}}})
	// The reflective decoder reads a key it does not know by its lower
	// case: each of these has another value than the reader would give.
	at := bson.NewDateTimeFromTime(updated)
	coding := func(key string) bson.D {
		return bson.D{{Key: "codings", Value: bson.A{bson.D{{Key: "system", Value: "a"}, {Key: key, Value: "b"}}}}}
	}
	for name, doc := range map[string]bson.D{
		"top level":  {{Key: "_id", Value: int64(5)}, {Key: "_ID", Value: int64(6)}, {Key: "Status", Value: "x"}, {Key: "CODE", Value: "c"}},
		"codings":    {{Key: "codings", Value: bson.A{}}, {Key: "Codings", Value: bson.A{bson.D{{Key: "code", Value: "c"}}}}},
		"system":     coding("System"),
		"code":       coding("Code"),
		"display":    coding("DISPLAY"),
		"identifier": {{Key: "identifiers", Value: bson.A{bson.D{{Key: "system", Value: "a"}, {Key: "Value", Value: "v"}}}}},
		"payload":    {{Key: "Payload", Value: []byte("{}")}},
		// U+0130 lowers to i, though it does not fold to it.
		"a dotted capital I": {{Key: "codings", Value: bson.A{}}, {Key: "cod\u0130ngs", Value: bson.A{bson.D{{Key: "code", Value: "c"}}}}},
		"identifiers": {{Key: "identifiers", Value: bson.A{}},
			{Key: "IDENTIFIERS", Value: bson.A{bson.D{{Key: "system", Value: "a"}, {Key: "value", Value: "v"}}}}},
		"effective": {{Key: "effective", Value: bson.D{{Key: "start", Value: "a"}, {Key: "END", Value: "b"}}},
			{Key: "effectiveStart", Value: at}, {Key: "effectiveEnd", Value: at}},
		"Effective": {{Key: "Effective", Value: bson.D{{Key: "dateTime", Value: "a"}}}, {Key: "effectiveStart", Value: at}, {Key: "effectiveEnd", Value: at}},
	} {
		out["a key in another case: "+name] = marshal(doc)
	}
	out["a time frame without its dates"] = marshal(bson.D{{Key: "effective", Value: bson.D{{Key: "dateTime", Value: "2024-01-01"}}}})
	return out
}

// sameAsReflective fails t unless observationPage reads raw as the
// reflective decoder does: the same value, or an error from both. With
// lenient set, the reader may also accept a document that the reflective
// decoder refuses for a member the domain value does not hold (such as a
// corrupted codeTokens), which it does not read.
func sameAsReflective(t *testing.T, raw bson.Raw, lenient bool) {
	t.Helper()
	var x observationDoc
	wantErr := bson.Unmarshal(raw, &x)
	got, err := newObservationPage(1).read(slices.Clone(raw))
	switch {
	case err != nil && wantErr == nil, err == nil && wantErr != nil && !lenient:
		t.Fatalf("%x: error %v, the reflective decoder's %v", []byte(raw), err, wantErr)
	case err == nil && wantErr == nil && !reflect.DeepEqual(got, x.observation()):
		t.Fatalf("%x: read\n%#v\nthe reflective decoder\n%#v", []byte(raw), got, x.observation())
	}
}

// TestObservationFromBSON shows that the reader of search pages gives
// what the reflective decoder gives, for every shape of stored document.
func TestObservationFromBSON(t *testing.T) {
	for name, raw := range storedVariety(t) {
		t.Run(name, func(t *testing.T) { sameAsReflective(t, raw, false) })
	}
}

// TestObservationFromBSONCorrupted shows that truncated and corrupted
// documents read as the reflective decoder reads them (mostly refused),
// or, when it refuses them for a member the reader skips, are read as
// they stand; never a panic.
func TestObservationFromBSONCorrupted(t *testing.T) {
	for name, raw := range storedVariety(t) {
		t.Run(name, func(t *testing.T) {
			for cut := range len(raw) {
				sameAsReflective(t, raw[:cut], true)
			}
			for i := range raw {
				bad := slices.Clone(raw)
				bad[i] ^= 0xff
				sameAsReflective(t, bad, true)
			}
		})
	}
}

// FuzzObservationFromBSON feeds the reader of search pages any bytes.
func FuzzObservationFromBSON(f *testing.F) {
	for _, raw := range storedVariety(f) {
		f.Add([]byte(raw))
	}
	f.Fuzz(func(t *testing.T, data []byte) { sameAsReflective(t, data, true) })
}

// TestObservationPageSharesNothingItShows reads every shape of document
// through one page, as a search reads its cursor: each document in the
// same buffer, written over after it is read. Each value is what the
// reflective decoder reads, after the whole page is read; and an append
// to one value's codings, identifiers or payload, or a write into its
// payload, leaves every other value as it was (each is cut from the
// page's shared buffers with its capacity limited).
func TestObservationPageSharesNothingItShows(t *testing.T) {
	variety := storedVariety(t)
	names := slices.Sorted(maps.Keys(variety))
	var docs []bson.Raw
	for range 30 { // past the page's first buffers (pageHint is 101)
		for _, name := range names {
			if bson.Unmarshal(variety[name], &observationDoc{}) == nil { // the shapes a page reads
				docs = append(docs, variety[name])
			}
		}
	}
	page := newObservationPage(len(docs))
	var cursor []byte // the cursor's buffer, reused for each document
	got := make([]domain.Observation, len(docs))
	want := make([]domain.Observation, len(docs))
	for i, raw := range docs {
		var x observationDoc
		if err := bson.Unmarshal(raw, &x); err != nil {
			t.Fatal(err)
		}
		want[i] = x.observation()
		cursor = append(cursor[:0], raw...)
		o, err := page.read(cursor)
		if err != nil {
			t.Fatal(err)
		}
		got[i] = o
		clear(cursor)
	}
	check := func(when string) {
		t.Helper()
		for i := range got {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("%s: document %d read\n%#v\nthe reflective decoder\n%#v", when, i, got[i], want[i])
			}
		}
	}
	check("the page read")
	for i := range got {
		o := &got[i]
		o.Codings = append(o.Codings, domain.Coding{System: "urn:x", Code: "appended"})
		o.Identifiers = append(o.Identifiers, domain.Identifier{System: "urn:x", Value: "appended"})
		o.Payload = append(o.Payload, "appended"...)
		w := &want[i]
		w.Codings = append(w.Codings, domain.Coding{System: "urn:x", Code: "appended"})
		w.Identifiers = append(w.Identifiers, domain.Identifier{System: "urn:x", Value: "appended"})
		w.Payload = append(slices.Clip(w.Payload), "appended"...)
	}
	check("each value appended to")
	for i := range got {
		for j := range got[i].Payload {
			got[i].Payload[j], want[i].Payload[j] = '#', '#'
		}
	}
	check("each payload written over")
}

// TestLowersTo: lowersTo is strings.ToLower then ==, for keys of every
// character of the BMP (some lower to ASCII without folding to it) and
// for keys longer, shorter and invalid.
func TestLowersTo(t *testing.T) {
	check := func(key, name string) {
		t.Helper()
		if got, want := lowersTo([]byte(key), name), strings.ToLower(key) == name; got != want {
			t.Fatalf("lowersTo(%q, %q) = %v, strings.ToLower says %v", key, name, got, want)
		}
	}
	for r := range rune(0x10000) {
		for _, name := range []string{"_", "i", "k", "s", "x"} {
			check(string(r), name)
		}
	}
	for _, key := range []string{"", "codings", "CODINGS", "cod\u0130ngs", "codingss", "coding", "cod\xffngs", "\u212Aey", "\u017Fystem", "_ID", "_\u0130d"} {
		for _, name := range []string{"", "codings", "system", "_id", "key", "coding"} {
			check(key, name)
		}
	}
}
