package repo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
	"exchange/fhirsearch"
	"exchange/omh"
	"exchange/omh/omhtest"
)

// codeTokens lists the token keys of an observation's codings, as
// appendCodeTokens writes them: the reference it is compared with. A native
// code answers under both native systems: they are interchangeable.
func codeTokens(codings []domain.Coding) []string {
	var keys []string
	add := func(ks ...string) {
		for _, k := range ks {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	for _, c := range codings {
		if domain.IsNativeSystem(c.System) {
			add(fhirsearch.TokenKeys(domain.SystemOpenMHealth, c.Code)...)
			add(fhirsearch.TokenKeys(domain.SystemIEEE1752, c.Code)...)
		} else {
			add(fhirsearch.TokenKeys(c.System, c.Code)...)
		}
	}
	return keys
}

// toObservationDoc is the stored document as the reflective encoder
// writes it: the reference observationBSON is compared with.
func toObservationDoc(o *domain.Observation) observationDoc {
	x := observationDoc{ID: o.ID, PatientID: o.PatientID, DataSourceID: o.DataSourceID, Status: o.Status, Code: o.Code,
		CodeTokens: codeTokens(o.Codings), Identifiers: []codedValueDoc{}, IDTokens: identifierTokens(o.Identifiers),
		ContentType: o.ContentType, Payload: o.Payload, OMH: bsonDocument(o.DataPoint),
		SortAsc: domain.SortLastAscending, SortDesc: domain.SortLastDescending, SpanClass: fhirsearch.SpanClass(nil, nil),
		LastUpdated: o.LastUpdated.Truncate(time.Millisecond), LastUpdateUS: o.LastUpdated.UnixMicro()}
	for _, c := range o.Codings {
		x.Codings = append(x.Codings, codingDoc{c.System, c.Code, c.Display})
	}
	for _, id := range o.Identifiers {
		x.Identifiers = append(x.Identifiers, codedValueDoc{id.System, id.Value})
	}
	if v, unit, ok := omh.SingleQuantity(o.DataPoint); ok {
		x.ValueNumber, x.ValueUnit = &v, unit
	}
	if tf := o.Effective; tf != nil {
		start, end := tf.Start.UTC(), tf.End.UTC()
		x.Start, x.End, x.SortAsc, x.SortDesc = &start, &end, start, start
		x.SpanClass = fhirsearch.SpanClass(&start, &end)
		x.Effective = &effectiveDoc{DateTime: tf.DateTime, Start: tf.PeriodStart, End: tf.PeriodEnd}
	}
	return x
}

// TestObservationBSONIsTheReflectiveDocument: the hand-built document of
// an observation is byte for byte bson.Marshal(toObservationDoc(o)), over
// every data point of the schemas' own test data and observations of
// every shape (no codings, no time frame, an instant, a period, more than
// ten identifiers, dates before 1970, numbers of every JSON form).
func TestObservationBSONIsTheReflectiveDocument(t *testing.T) {
	updated := time.Date(2024, 2, 1, 12, 0, 0, 123456789, time.UTC)
	base := domain.Observation{ID: 1, PatientID: 2, DataSourceID: 3, Status: "final", Code: "omh:heart-rate:2.0",
		Codings:     []domain.Coding{{System: domain.SystemOpenMHealth, Code: "omh:heart-rate:2.0", Display: "Heart rate"}, {System: "http://loinc.org", Code: "8867-4"}},
		Identifiers: []domain.Identifier{{System: "urn:x", Value: "a"}}, ContentType: "application/json", Payload: []byte(`{"a":1}`),
		Effective: &omh.TimeFrame{Start: updated, End: updated, DateTime: "2024-02-01T13:00:00.123456789+01:00"}, LastUpdated: updated}
	decode := func(s string) map[string]any {
		d := json.NewDecoder(strings.NewReader(s))
		d.UseNumber()
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	cases := map[string]domain.Observation{}
	add := func(name string, edit func(o *domain.Observation)) {
		o := base
		edit(&o)
		cases[name] = o
	}
	add("as uploaded", func(o *domain.Observation) {})
	add("no codings, no identifiers, no payload", func(o *domain.Observation) { o.Codings, o.Identifiers, o.Payload = nil, nil, nil })
	add("empty payload and data point", func(o *domain.Observation) { o.Payload, o.DataPoint = []byte{}, map[string]any{} })
	add("no time frame, before 1970", func(o *domain.Observation) {
		o.Effective, o.LastUpdated = nil, time.Date(1969, 12, 31, 23, 59, 59, 999999000, time.UTC)
	})
	add("a period in an offset", func(o *domain.Observation) {
		o.Effective = &omh.TimeFrame{Start: updated.Add(-time.Hour).In(time.FixedZone("x", 3600)), End: updated,
			PeriodStart: "2024-02-01T12:00:00+01:00", PeriodEnd: "2024-02-01T12:00:00Z"}
	})
	add("twelve identifiers, odd strings", func(o *domain.Observation) {
		o.Identifiers = nil
		for i := range 12 {
			o.Identifiers = append(o.Identifiers, domain.Identifier{System: "urn:x", Value: fmt.Sprintf("é <&> \"%d\" \u2028 \xff", i)})
		}
		o.Status = "\x00nul"
	})
	add("codings whose token keys repeat", func(o *domain.Observation) {
		o.Codings = []domain.Coding{{System: domain.SystemIEEE1752, Code: "omh:heart-rate:2.0"}, {System: domain.SystemOpenMHealth, Code: "omh:heart-rate:2.0"},
			{System: "a|b", Code: "c"}, {System: "a", Code: "b|c"}, {System: "a", Code: ""}, {System: "", Code: "c"}, {System: "", Code: "|c"},
			{System: "x", Code: "omh:heart-rate:2.0"}, {System: "http://loinc.org", Code: "8867-4"}, {System: "http://loinc.org", Code: "8867-4"}}
		o.Identifiers = []domain.Identifier{{System: "a|b", Value: "c"}, {System: "a", Value: "b|c"}, {System: "", Value: "v"}, {System: "urn:x", Value: "a"}}
	})
	add("numbers, nesting and keys", func(o *domain.Observation) {
		o.DataPoint = decode(`{"z":1,"a":-0,"ä":1.0,"A":1e400,"b":-1e-400,"c":12345678901234567890,"d":-9223372036854775808,` +
			`"e":[1,"x",true,false,null,[],{},[{"k":[0.5]}],{"y":{"x":{}}}],"f":"\u0000","g":{"b":1,"a":2},"":0,` +
			`"h":[0,1,2,3,4,5,6,7,8,9,10,11]}`)
	})
	for _, c := range omhtest.TestData(t) {
		name := "test data " + c.Name
		add(name, func(o *domain.Observation) {
			o.Payload = c.JSON
			o.DataPoint = map[string]any{"body": c.Value, "header": map[string]any{"id": c.Name}}
			if m, ok := c.Value.(map[string]any); ok {
				o.DataPoint = m
			}
		})
	}
	for name, o := range cases {
		want, err := bson.Marshal(toObservationDoc(&o))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := observationBSON(&o)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the built document differs:\nbuilt     %s\nreflected %s", name, got, bson.Raw(want))
		}
	}

	o := base
	o.DataPoint = map[string]any{"body": map[string]any{"a\x00b": 1}}
	if _, err := bson.Marshal(toObservationDoc(&o)); err == nil {
		t.Error("the reflective encoder took a key with NUL")
	}
	if _, err := observationBSON(&o); err == nil {
		t.Error("a key with NUL was built into the document")
	}
}
