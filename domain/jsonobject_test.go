package domain

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

func TestJSONObjectKeepsMembersAsSent(t *testing.T) {
	o, err := parseJSONObject([]byte(` { "b" : 1.50, "a": {"z": 1, "y": [ 1e2, "é\u00e9" ]}, "c": null } `))
	if err != nil {
		t.Fatal(err)
	}
	o.set("a", json.RawMessage(`"replaced"`))
	o.set("d", json.RawMessage(`true`))
	o.remove("c")
	if got := string(o.marshal("d")); got != `{"d":true,"b":1.50,"a":"replaced"}` {
		t.Errorf("marshal: %s", got)
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
	for _, seed := range []string{`{"resourceType":"Condition","id":"x","meta":{"source":"s"}}`, `{"a":1.50,"b":[{"c":null}],"d":"\u2028"}`, `{}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		o, err := parseJSONObject(data)
		if err != nil {
			return
		}
		out := o.marshal("id")
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
