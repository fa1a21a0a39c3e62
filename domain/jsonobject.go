package domain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// jsonObject is a JSON object whose members keep the order they came in and
// their values' exact text. The imported store rewrites a few top-level
// members of a resource (id, meta, identifier) and must leave everything
// else as the source sent it: decoding into a map would reorder the members
// and round decimals (1.50 would become 1.5).
type jsonObject []jsonMember

type jsonMember struct {
	key   string
	value json.RawMessage // compact
}

// parseJSONObject reads one JSON object. Its members' values are compacted
// (insignificant whitespace dropped); a member named twice is an error, as
// FHIR JSON forbids it and a map would silently keep one of them.
func parseJSONObject(data []byte) (jsonObject, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	var o jsonObject
	seen := map[string]bool{} // not o.get: a body of many members would take quadratic time
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("not valid JSON: %w", err)
		}
		key := tok.(string) // the decoder only yields strings as object keys
		if seen[key] {
			return nil, fmt.Errorf("the member %q appears twice", key)
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("not valid JSON: %w", err)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, raw); err != nil {
			return nil, fmt.Errorf("not valid JSON: %w", err)
		}
		o = append(o, jsonMember{key: key, value: compact.Bytes()})
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	if len(bytes.Trim(data[dec.InputOffset():], " \t\r\n")) > 0 {
		return nil, errors.New("data follows the JSON object")
	}
	return o, nil
}

func (o jsonObject) get(key string) (json.RawMessage, bool) {
	i := slices.IndexFunc(o, func(m jsonMember) bool { return m.key == key })
	if i < 0 {
		return nil, false
	}
	return o[i].value, true
}

// set replaces a member's value where it stands, or appends the member.
func (o *jsonObject) set(key string, value json.RawMessage) {
	if i := slices.IndexFunc(*o, func(m jsonMember) bool { return m.key == key }); i >= 0 {
		(*o)[i].value = value
		return
	}
	*o = append(*o, jsonMember{key: key, value: value})
}

func (o *jsonObject) remove(key string) {
	*o = slices.DeleteFunc(*o, func(m jsonMember) bool { return m.key == key })
}

// marshal writes the object with the named members first, in that order,
// then the others as they stand.
func (o jsonObject) marshal(first ...string) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	write := func(m jsonMember) {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		key, _ := json.Marshal(m.key)
		b.Write(key)
		b.WriteByte(':')
		b.Write(m.value)
	}
	for _, k := range first {
		if v, ok := o.get(k); ok {
			write(jsonMember{key: k, value: v})
		}
	}
	for _, m := range o {
		if !slices.Contains(first, m.key) {
			write(m)
		}
	}
	b.WriteByte('}')
	return b.Bytes()
}

// mustJSON encodes a value the code builds itself (strings, maps of
// strings), which cannot fail to encode.
func mustJSON(v any) json.RawMessage {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return data
}
