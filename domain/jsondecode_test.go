package domain

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

// DecodeJSON keeps numbers as written and refuses what a map would
// settle silently: a member named twice, invalid UTF-8, anything after
// the object.
func TestDecodeJSON(t *testing.T) {
	m, err := DecodeJSON([]byte(` {"a": [1.50, true, null, "x\u00e9"], "b": {"c": {}}, "d": []} `))
	want := map[string]any{"a": []any{json.Number("1.50"), true, nil, "xé"}, "b": map[string]any{"c": map[string]any{}}, "d": []any{}}
	if err != nil || !reflect.DeepEqual(m, want) {
		t.Errorf("got %#v, %v", m, err)
	}
	if m, err := DecodeJSON([]byte("null")); m != nil || err != nil {
		t.Errorf("null: %v %v", m, err)
	}
	var dup *DuplicateMemberError
	if _, err := DecodeJSON([]byte(`{"a": [{"b": 1, "b": 2}]}`)); !errors.As(err, &dup) || dup.Key != "b" {
		t.Errorf("nested duplicate: %v", err)
	}
	for _, bad := range []string{
		`{"gender": "female", "gender": "male"}`,
		`{"a": {"b": 1, "b": 2}}`,
		"{\"name\": \"\xff\"}",
		`{"a": 1} {"b": 2}`,
		`{"a": 1}]`,
		`[{"a": 1}]`,
		`"text"`,
		`{"a": 1`,
		`{"a": 01}`,
		``,
	} {
		if m, err := DecodeJSON([]byte(bad)); err == nil {
			t.Errorf("%q: decoded %v", bad, m)
		}
	}
}

// FuzzDecodeJSON: DecodeJSON never panics, refuses what encoding/json
// refuses, and what it accepts decodes to what encoding/json makes of it.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{`{"resourceType":"Patient","name":[{"family":"Doe"}]}`, `{"a":[1.50,true,null,{}]}`,
		`{"a":1,"a":2}`, `null`, `{"a":"\u00e9\ud800"}`, `{"a":1}]`, `[]`,
		`{"div":"<div xmlns=\"x\">\u00e9\ud834\udd1e\/\b\f\n\r\t</div>","k\u0065y":[1.50e+2,-0]}`, `{"a":"\ud834"}`, `{"a":"\udd1e\ud834"}`,
		`{"a":{"b":1,"b":2}}`, `{"a\u0062":1,"ab":2}`, "{\"a\":\"\xff\"}", "{\"a\":\"\\u00e9\xff\"}",
		`{"a":` + strings.Repeat("[", 9998) + strings.Repeat("]", 9998) + `}`, `{"a":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`,
		`{"a":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want map[string]any
		wantErr := json.Unmarshal(data, new(any)) // whole text, as Valid
		if wantErr == nil {
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.UseNumber()
			wantErr = dec.Decode(&want)
		}
		if plain, ok := decodePlain(data); ok {
			ref, err := decodeJSON(jsontext.NewDecoder(bytes.NewBuffer(data)))
			if err != nil || !reflect.DeepEqual(plain, ref) {
				t.Fatalf("%q: decodePlain %#v, jsontext %#v %v", data, plain, ref, err)
			}
		}
		m, err := DecodeJSON(data)
		if err != nil {
			return
		}
		if wantErr != nil || !reflect.DeepEqual(m, want) {
			t.Fatalf("%q: %#v, encoding/json %#v %v", data, m, want, wantErr)
		}
	})
}
