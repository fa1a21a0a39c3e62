package domain

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"
)

func TestJSONObjectKeepsMembersAsSent(t *testing.T) {
	o, err := parseJSONObject([]byte(` { "b" : 1.50, "a": {"z": 1, "y": [ 1e2, "é\u00e9" ]} } `))
	if err != nil {
		t.Fatal(err)
	}
	o.set("a", json.RawMessage(`"replaced"`))
	o.set("d", json.RawMessage(`true`))
	if got := string(o.marshal("d")); got != `{"d":true,"b":1.50,"a":"replaced"}` {
		t.Errorf("marshal: %s", got)
	}
	// Keys are written as json.Marshal writes them, HTML escapes included.
	keys, err := parseJSONObject([]byte(`{"a<b&c>":1,"\u2028\t\"":2,"é":3}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(keys.marshal()), `{"a\u003cb\u0026c\u003e":1,"\u2028\t\"":2,"é":3}`; got != want {
		t.Errorf("marshal: %s, want %s", got, want)
	}
	for _, bad := range []string{``, `[]`, `"x"`, `{"a": 1, "a": 2}`, `{"a": }`, `{"a": 1} {}`, `{}A`, `{} ]`, "{}\u00a0", `{"a": 1`, `{1: 2}`} {
		if _, err := parseJSONObject([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// FuzzJSONObject: what parses marshals to valid JSON that parses to the
// same members, and decodes to the same values as the input.
func FuzzJSONObject(f *testing.F) {
	for _, seed := range []string{`{"resourceType":"Condition","id":"x","meta":{"source":"s"}}`, `{"a":1.50,"b":[{"c":null}],"d":"\u2028"}`, `{}`,
		`{"a<b&c>":1,"\u2028\t\"\u0000":2,"é\ud800":3}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		o, err := parseJSONObject(data)
		if err != nil {
			return
		}
		out := o.marshal("id")
		for _, m := range o { // keys as json.Marshal writes them
			key, _ := json.Marshal(m.key)
			if got, want := string(jsonObject{m}.encode()), "{"+string(key)+":"+string(m.value)+"}"; got != want {
				t.Fatalf("%q: encoded %s, want %s", m.key, got, want)
			}
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON %s from %s", out, data)
		}
		again, err := parseJSONObject(out)
		if err != nil || !bytes.Equal(again.marshal("id"), out) {
			t.Fatalf("not stable: %s: %v", out, err)
		}
		var a, b map[string]any
		if json.Unmarshal(data, &a) != nil || json.Unmarshal(out, &b) != nil || len(a) != len(b) {
			t.Fatalf("%s and %s decode differently", data, out)
		}
		// Numbers as written, so that 1.50 and 1.5 differ and big integers
		// keep their digits.
		if x, y := decodeNumbers(t, data), decodeNumbers(t, out); !reflect.DeepEqual(x, y) {
			t.Fatalf("%s and %s decode to different values: %#v and %#v", data, out, x, y)
		}
	})
}

func decodeNumbers(t *testing.T, data []byte) map[string]any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	return m
}

// FuzzJSONObjectAgreesWithTheDecoder: parseJSONObject splits members by
// position; encoding/json's token stream is the reference. Both accept and
// refuse the same texts, find the same duplicate, and read the same keys
// and (compacted) values.
func FuzzJSONObjectAgreesWithTheDecoder(f *testing.F) {
	for _, seed := range []string{`{"a":1,"a":2}`, `{"a\u0062":1,"ab":2}`, "{\"\xff\":1,\"\ufffd\":2}", ` {"a" : [ 1 , {"b":"}"} ] , "c":"\\""} `,
		`{"a":1} x`, `[1]`, `{"a":-0.5e+3,"b":true,"c":null,"d":"x\\u0000y"}`, `{}`, ` `} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := parseJSONObject(data)
		want, wantErr := referenceMembers(data)
		var dup, wantDup *DuplicateMemberError
		switch {
		case (err == nil) != (wantErr == nil):
			t.Fatalf("%q: error %v, the decoder's %v", data, err, wantErr)
		case errors.As(wantErr, &wantDup) && (!errors.As(err, &dup) || dup.Key != wantDup.Key):
			t.Fatalf("%q: error %v, want the duplicate %q", data, err, wantDup.Key)
		case err == nil && !reflect.DeepEqual(got, want):
			t.Fatalf("%q: members %q, the decoder's %q", data, got, want)
		}
	})
}

// FuzzValidJSONMembersAgreeWithTheDecoder: EachValidJSONMember and
// EachValidJSONItem read valid JSON by position; encoding/json is the
// reference: the same members (keys, compacted values) or the same first
// duplicate, and the same array items.
func FuzzValidJSONMembersAgreeWithTheDecoder(f *testing.F) {
	for _, seed := range []string{`{"a":1,"a":2}`, `{"a\u0062":1,"ab":2}`, "{\"\xff\":1,\"\ufffd\":2}", ` {"a" : [ 1 , {"b":"}"} ] , "c":"\\""} `,
		`[1, {"a":[]} ,"]"]`, `[]`, `{"a":-0.5e+3,"b":true,"c":null,"d":"x\\u0000y"}`, `{}`, ` `,
		`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"c":18}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return // the functions' contract
		}
		var got jsonObject
		err := EachValidJSONMember(data, func(key, value []byte) error {
			var compact bytes.Buffer
			_ = json.Compact(&compact, value)
			got = append(got, jsonMember{key: string(key), value: compact.Bytes()})
			return nil
		})
		want, wantErr := referenceMembers(data)
		var dup, wantDup *DuplicateMemberError
		switch {
		case (err == nil) != (wantErr == nil):
			t.Fatalf("%q: error %v, the decoder's %v", data, err, wantErr)
		case errors.As(wantErr, &wantDup) && (!errors.As(err, &dup) || dup.Key != wantDup.Key || got != nil):
			t.Fatalf("%q: error %v after %d members, want the duplicate %q first", data, err, len(got), wantDup.Key)
		case err == nil && !reflect.DeepEqual(got, want):
			t.Fatalf("%q: members %q, the decoder's %q", data, got, want)
		}

		var items, wantItems []string
		err = EachValidJSONItem(data, func(item []byte) error {
			var compact bytes.Buffer
			_ = json.Compact(&compact, item)
			items = append(items, compact.String())
			return nil
		})
		var raw []json.RawMessage
		wantErr = json.Unmarshal(data, &raw)
		if trimmed := bytes.TrimSpace(data); trimmed[0] != '[' {
			wantErr = errors.New("not an array") // json.Unmarshal takes null
		}
		for _, r := range raw {
			var compact bytes.Buffer
			_ = json.Compact(&compact, r)
			wantItems = append(wantItems, compact.String())
		}
		if (err == nil) != (wantErr == nil) || !reflect.DeepEqual(items, wantItems) {
			t.Fatalf("%q: items %q (%v), the decoder's %q (%v)", data, items, err, wantItems, wantErr)
		}
	})
}

// referenceMembers reads a JSON object's members with encoding/json's
// token stream, as parseJSONObject did before it split by position.
func referenceMembers(data []byte) (jsonObject, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		if _, err := dec.Token(); !errors.Is(err, io.EOF) || dec.More() {
			return nil, errors.New("not JSON, or not one value")
		}
		return nil, errors.New("not a JSON object")
	}
	var o jsonObject
	seen := map[string]bool{}
	var dup error
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key := tok.(string)
		if seen[key] && dup == nil {
			dup = &DuplicateMemberError{Key: key}
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		var compact bytes.Buffer
		_ = json.Compact(&compact, raw)
		o = append(o, jsonMember{key: key, value: compact.Bytes()})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data follows the object")
	}
	if dup != nil {
		return nil, dup // a duplicate in valid JSON, as parseJSONObject checks the whole text first
	}
	return o, nil
}

// echoConverter is an R4Converter whose output is its input written
// compact, standing for the converter's JSON (compact, no member named
// twice: TestR4Examples), so that the fuzzer varies it.
type echoConverter struct{ out []byte }

func (c echoConverter) ConvertR4(map[string]any, ReferenceRewriter) (*R4Conversion, error) {
	return &R4Conversion{Type: "Observation", Body: c.out}, nil
}

func (echoConverter) MapSet() string { return "echo" }

// FuzzConversionWrite: the members a conversion hands the create path
// (R4Conversion.Write) are those parseJSONObject reads from its Body, as
// the create path read them before.
func FuzzConversionWrite(f *testing.F) {
	for _, seed := range []string{
		`{"resourceType":"Observation","id":"a b","status":"final","code":{"text":"x y"}}`,
		`{"resourceType":"Observation","id": { "x" : [ 1 , 2 ] },"meta":{"source":"s"}}`,
		`{"resourceType":"Observation","code":{"coding":[{"system":"https://w3id.org/openmhealth","code":"omh:heart-rate:2.0"}]},"subject":{"reference":"Patient/9"}}`,
		`{"resourceType":"Observation","note":[{"text":"<div xmlns=\"x\">\u00e9\ud834\udd1e</div>"}],"valueQuantity":{"value":1.50e+2}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := DecodeJSON(data); err != nil {
			return // the converter reads only what DecodeJSON takes
		}
		var out bytes.Buffer
		if json.Compact(&out, data) != nil {
			t.Fatalf("%s: DecodeJSON takes it, json.Compact does not", data)
		}
		s := &Service{converter: echoConverter{out.Bytes()}}
		conv, err := s.ConvertR4(&FHIRSource{ID: 1, PatientID: 2, DataSourceID: 3}, data, "")
		if err != nil {
			return
		}
		read, err := parseJSONObject(conv.Body)
		if err != nil {
			t.Fatalf("%s: %v", conv.Body, err)
		}
		if w := conv.Write("1"); !reflect.DeepEqual(w.parsed, read) || string(w.Body) != string(conv.Body) {
			t.Fatalf("%s: handed %q, read %q", conv.Body, w.parsed, read)
		}
	})
}
