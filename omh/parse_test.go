package omh_test

import (
	"reflect"
	"strings"
	"testing"

	"exchange/omh"
	"exchange/omh/omhtest"
)

// parseSeeds are data points around the edges of the plain subset.
var parseSeeds = []string{
	`{"header":{"id":"a","creation_date_time":"2024-05-01T10:00:00Z","schema_id":{"namespace":"omh","name":"heart-rate","version":"2.0"}},` +
		`"body":{"heart_rate":{"value":60,"unit":"beats/min"},"effective_time_frame":{"date_time":"2024-05-01T09:00:00Z"}}}`,
	` {"a": [1, -0, 0.5, 1e3, -1.5E-7, true, false, null, "é", [], {}], "b": {"c": {"d": []}}} `,
	`{"a": 1, "a": 2}`, `{"a": 1e400}`, `{"a.b": 1}`, `{"$a": 1}`, `{"": 1}`, `{"a": "\u0041"}`, `{"a": "\xff"}`,
	`{"a": 01}`, `{"a": 1.}`, `{"a": .5}`, `{"a": -}`, `{"a": 1e}`, `{"a": tru}`, `{"a": nullx}`, `{"a": [1,]}`, `{"a": 1,}`,
	`{"a": 1} {}`, `{"a": 1}}`, `[]`, `null`, `"x"`, ``, `{`, "{\"a\": \"tab\tin\"}", `{"x": ` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`,
}

// checkParsePlain compares the one-pass decoding of a data point with
// encoding/json's and the key check, on whatever the former accepts.
func checkParsePlain(t *testing.T, data []byte) {
	t.Helper()
	got, ok := omh.ParsePlain(data)
	if !ok {
		return
	}
	want, err := omh.ParseReference(data)
	if err != nil {
		t.Fatalf("%q: decoded plain, but encoding/json refuses it: %v", data, err)
	}
	if err := omh.CheckKeys("", want); err != nil {
		t.Fatalf("%q: decoded plain, but the key check refuses it: %v", data, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: decoded plain as %v, encoding/json decodes %v", data, got, want)
	}
}

// TestParsePlainAgrees: the one-pass decoding of a data point gives
// exactly encoding/json's values, on the edges of the plain subset and on
// every file of the schemas' own test data; those files and a device's
// data point take the fast path.
func TestParsePlainAgrees(t *testing.T) {
	for _, seed := range parseSeeds {
		checkParsePlain(t, []byte(seed))
	}
	if _, ok := omh.ParsePlain([]byte(parseSeeds[0])); !ok {
		t.Error("a device's data point does not take the fast path")
	}
	plain := 0
	cases := omhtest.TestData(t)
	for _, c := range cases {
		wrapped := []byte(`{"value": ` + string(c.JSON) + `}`)
		checkParsePlain(t, wrapped)
		if _, ok := omh.ParsePlain(wrapped); ok {
			plain++
		}
	}
	t.Logf("%d of %d official test files decoded plain", plain, len(cases))
	if plain < len(cases)/2 {
		t.Errorf("only %d of %d official test files decoded plain", plain, len(cases))
	}
}

// FuzzParse: the one-pass decoding agrees with encoding/json on whatever
// it accepts, and Parse never faults.
func FuzzParse(f *testing.F) {
	for _, seed := range parseSeeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkParsePlain(t, data)
		_, _ = omh.Parse(data)
	})
}
