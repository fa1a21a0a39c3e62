package converter_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"exchange/converter"
)

// DecodeJSON keeps numbers as written and refuses what a map would
// settle silently: a member named twice, invalid UTF-8, anything after
// the object.
func TestDecodeJSON(t *testing.T) {
	m, err := converter.DecodeJSON([]byte(` {"a": [1.50, true, null, "x\u00e9"], "b": {"c": {}}, "d": []} `))
	want := map[string]any{"a": []any{json.Number("1.50"), true, nil, "xé"}, "b": map[string]any{"c": map[string]any{}}, "d": []any{}}
	if err != nil || !reflect.DeepEqual(m, want) {
		t.Errorf("got %#v, %v", m, err)
	}
	if m, err := converter.DecodeJSON([]byte("null")); m != nil || err != nil {
		t.Errorf("null: %v %v", m, err)
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
		if m, err := converter.DecodeJSON([]byte(bad)); err == nil {
			t.Errorf("%q: decoded %v", bad, m)
		}
	}
}
