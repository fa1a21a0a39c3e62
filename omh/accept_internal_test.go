package omh

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// TestAcceptCheckEdges: the accept check on small schemas at the edges of
// what it knows: the library's integer and enum semantics, oneOf counted
// exactly, and unsure for what it does not know (a keyword outside its
// set, a later draft, a tuple, a reference cycle, a value Parse does not
// produce). Where it decides, the library agrees.
func TestAcceptCheckEdges(t *testing.T) {
	const draft4, draft7 = `"$schema": "http://json-schema.org/draft-04/schema#", `, `"$schema": "http://json-schema.org/draft-07/schema#", `
	for _, tc := range []struct {
		schema, instance string
		value            any // instead of instance
		want             verdict
	}{
		{draft4 + `"type": "integer"`, `1.0`, nil, accepted},
		{draft4 + `"type": "integer"`, `1.5`, nil, rejected},
		{draft7 + `"type": "integer"`, `2.50E+1`, nil, accepted},
		{draft7 + `"type": "integer"`, `-0`, nil, accepted},
		{draft7 + `"type": ["integer", "string"]`, `null`, nil, rejected},
		{draft4 + `"type": "integer", "exclusiveMinimum": true, "minimum": 0`, `1`, nil, unsure},
		{draft7 + `"minimum": 0`, `5`, nil, unsure},
		{`"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "string"`, `"a"`, nil, unsure},
		{draft7 + `"oneOf": [{"type": "number"}, {"type": "integer"}]`, `1`, nil, rejected},
		{draft7 + `"oneOf": [{"type": "number"}, {"type": "integer"}]`, `1.5`, nil, accepted},
		{draft7 + `"oneOf": [{"type": "number"}, {"type": "integer"}]`, `"1"`, nil, rejected},
		{draft7 + `"oneOf": [{"type": "number"}, {"minimum": 0}]`, `1.5`, nil, unsure},
		{draft7 + `"oneOf": [{"type": "string"}, {"type": "string"}, {"minimum": 0}]`, `"a"`, nil, rejected},
		{draft7 + `"anyOf": [{"minimum": 0}, {"type": "string"}]`, `"a"`, nil, accepted},
		{draft7 + `"anyOf": [{"minimum": 0}, {"type": "string"}]`, `1`, nil, unsure},
		{draft7 + `"allOf": [{"minimum": 0}, {"type": "string"}]`, `1`, nil, rejected},
		{draft7 + `"$ref": "#"`, `1`, nil, unsure},
		{draft7 + `"properties": {"a": false}`, `{"a": 1}`, nil, rejected},
		{draft7 + `"properties": {"a": false}`, `{"b": 1}`, nil, accepted},
		{draft7 + `"properties": {"a": {}}, "additionalProperties": false`, `{"a": 1, "b": 2}`, nil, rejected},
		{draft7 + `"additionalProperties": {"type": "string"}`, `{"a": "x", "b": 2}`, nil, rejected},
		{draft7 + `"properties": {"a": {}, "b": {}, "c": {}, "d": {}, "e": {"type": "string"}}`, `{"e": 1}`, nil, rejected},
		{draft7 + `"properties": {"a": {}, "b": {}, "c": {}, "d": {}, "e": {"type": "string"}}, "additionalProperties": false`, `{"e": "x", "f": 1}`, nil, rejected},
		{draft7 + `"properties": {"a": {}, "b": {}, "c": {}, "d": {}, "e": {"type": "string"}}, "additionalProperties": false`, `{"e": "x"}`, nil, accepted},
		{draft7 + `"properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "number"}`, `{"a": "x", "b": 1, "c": 2}`, nil, accepted},
		{draft7 + `"properties": {"a": {"type": "string"}}, "additionalProperties": {"minimum": 0}`, `{"a": "x", "b": 1}`, nil, unsure},
		{draft7 + `"properties": {"a": {"minimum": 0}, "b": {"type": "string"}}`, `{"a": 1, "b": 2}`, nil, rejected},
		{draft7 + `"properties": {"a": {}}`, `{"a": 1, "b": 2}`, nil, accepted},
		{draft7 + `"required": ["a"]`, `{"b": 1}`, nil, rejected},
		{draft7 + `"required": ["a"], "properties": {"a": {}}`, `{"b": 1}`, nil, rejected},
		{draft7 + `"required": ["a"], "properties": {"a": {}, "b": {"minimum": 0}}`, `{"b": 1}`, nil, rejected},
		{draft7 + `"required": ["a", "c"], "properties": {"a": {}}`, `{"a": 1}`, nil, rejected},
		{draft7 + `"required": ["a", "c"], "properties": {"a": {}}`, `{"a": 1, "c": 1}`, nil, accepted},
		{draft7 + `"enum": ["a", 1]`, `"a"`, nil, accepted},
		{draft7 + `"enum": ["a", 1]`, `"b"`, nil, rejected},
		{draft7 + `"enum": ["a", 1]`, `true`, nil, rejected},
		{draft7 + `"enum": ["a", 1]`, `1.0`, nil, unsure},
		{draft7 + `"format": "date-time"`, `"2024-05-01T09:00:00+02:00"`, nil, accepted},
		{draft7 + `"format": "date-time"`, `"2024-02-30T09:00:00Z"`, nil, rejected},
		{draft7 + `"format": "date-time"`, `5`, nil, accepted},
		{draft7 + `"format": "uuid"`, `"2f1c1d8e-8a6b-4c1e-9d1a-5f0e6b7c8d9"`, nil, rejected},
		{draft7 + `"pattern": "^a"`, `"ab"`, nil, accepted},
		{draft7 + `"pattern": "^a"`, `"ba"`, nil, rejected},
		{draft7 + `"items": {"type": "string"}, "minItems": 1`, `["a"]`, nil, accepted},
		{draft7 + `"items": {"type": "string"}, "minItems": 1`, `[]`, nil, rejected},
		{draft7 + `"items": {"type": "string"}`, `["a", 1]`, nil, rejected},
		{draft7 + `"items": [{"type": "string"}]`, `["a"]`, nil, unsure},
		{draft7 + `"type": "number"`, ``, float64(1), unsure},
		{draft7 + `"not": {"type": "string"}`, `1`, nil, unsure},
	} {
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader("{" + tc.schema + "}"))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.AddResource("mem:///s.json", doc); err != nil {
			t.Fatal(err)
		}
		sch := c.MustCompile("mem:///s.json")
		v := tc.value
		if tc.instance != "" {
			dec := json.NewDecoder(strings.NewReader(tc.instance))
			dec.UseNumber()
			if err := dec.Decode(&v); err != nil {
				t.Fatal(err)
			}
		}
		got := acceptBuilder{}.node(sch).check(v, maxAcceptDepth)
		libErr := sch.Validate(v)
		if got != tc.want {
			t.Errorf("{%s} on %s: got verdict %d, want %d (the library: %v)", tc.schema, tc.instance, got, tc.want, libErr)
		}
		if got == accepted && libErr != nil || got == rejected && libErr == nil {
			t.Errorf("{%s} on %s: verdict %d, but the library says %v", tc.schema, tc.instance, got, libErr)
		}
	}
}
