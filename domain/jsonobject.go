package domain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
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

// DuplicateMemberError is the error of a JSON object that names a member
// twice: FHIR JSON forbids it, and a map or a struct would silently keep
// one of the two values.
type DuplicateMemberError struct {
	Key string
}

func (e *DuplicateMemberError) Error() string {
	return fmt.Sprintf("the member %q appears twice", e.Key)
}

// parseJSONObject reads one JSON object. Its members' values are compacted
// (insignificant whitespace dropped) and copied out of data; a member named
// twice is a *DuplicateMemberError. The JSON is checked whole first
// (json.Valid), so the members are then split by position, not decoded:
// every imported write goes through here, and a
// json.Decoder walk cost several times the typed decoding of the resource.
func parseJSONObject(data []byte) (jsonObject, error) {
	if !json.Valid(data) {
		var first json.RawMessage
		if err := json.NewDecoder(bytes.NewReader(data)).Decode(&first); err != nil {
			return nil, fmt.Errorf("not valid JSON: %w", err)
		}
		return nil, errors.New("data follows the JSON object")
	}
	data = bytes.Clone(data) // the members' values outlive a request's buffer
	i := skipJSONSpace(data, 0)
	if data[i] != '{' {
		return nil, errors.New("not a JSON object")
	}
	var o jsonObject
	seen := map[string]bool{} // not o.get: a body of many members would take quadratic time
	for i = skipJSONSpace(data, i+1); data[i] != '}'; i = skipJSONSpace(data, i+1) {
		end := jsonValueEnd(data, i)
		key, err := jsonKey(data[i:end])
		if err != nil {
			return nil, err
		}
		if seen[key] {
			return nil, &DuplicateMemberError{Key: key}
		}
		seen[key] = true
		i = skipJSONSpace(data, skipJSONSpace(data, end)+1) // past the colon
		end = jsonValueEnd(data, i)
		value := json.RawMessage(data[i:end])
		if bytes.ContainsAny(value, " \t\r\n") { // else compact already, as most bodies are
			var compact bytes.Buffer
			if err := json.Compact(&compact, value); err != nil {
				return nil, fmt.Errorf("not valid JSON: %w", err)
			}
			value = compact.Bytes()
		}
		o = append(o, jsonMember{key: key, value: value})
		i = skipJSONSpace(data, end) // at the comma or the closing brace
		if data[i] == '}' {
			break
		}
	}
	return o, nil
}

// validJSONObject reads an object the service wrote itself, compact and
// valid JSON with no member named twice (the converter's output), without
// parseJSONObject's checks and copies: the members alias data.
func validJSONObject(data []byte) jsonObject {
	var o jsonObject
	_ = EachValidJSONMember(data, func(key, value []byte) error {
		o = append(o, jsonMember{key: string(key), value: value})
		return nil
	})
	return o
}

// EachValidJSONMember reads a JSON object as the imported store reads
// resources (parseJSONObject), for a text already known to be valid JSON
// (json.Valid: a caller that decoded it has), without that function's
// copies, which cost more than the typed decoding of a native upload:
// values alias data as they came (not compacted), and a key is given as
// its bytes, escapes resolved and invalid UTF-8 replaced as encoding/json
// reads it. A member named twice is a *DuplicateMemberError, returned
// before f sees any member; data that is not an object is an error.
func EachValidJSONMember(data []byte, f func(key, value []byte) error) error {
	type member struct{ key, value []byte }
	var small [16]member // an Observation's objects fit: no allocation
	members := small[:0]
	i := skipJSONSpace(data, 0)
	if i == len(data) || data[i] != '{' {
		return errors.New("not a JSON object")
	}
	for i = skipJSONSpace(data, i+1); data[i] != '}'; i = skipJSONSpace(data, i+1) {
		end := jsonValueEnd(data, i)
		key, err := jsonKeyBytes(data[i:end])
		if err != nil {
			return err
		}
		i = skipJSONSpace(data, skipJSONSpace(data, end)+1) // past the colon
		end = jsonValueEnd(data, i)
		members = append(members, member{key, data[i:end]})
		i = skipJSONSpace(data, end) // at the comma or the closing brace
		if data[i] == '}' {
			break
		}
	}
	if len(members) <= len(small) {
		for k, m := range members {
			for _, other := range members[:k] {
				if bytes.Equal(m.key, other.key) {
					return &DuplicateMemberError{Key: string(m.key)}
				}
			}
		}
	} else {
		seen := make(map[string]bool, len(members))
		for _, m := range members {
			if seen[string(m.key)] {
				return &DuplicateMemberError{Key: string(m.key)}
			}
			seen[string(m.key)] = true
		}
	}
	for _, m := range members {
		if err := f(m.key, m.value); err != nil {
			return err
		}
	}
	return nil
}

// EachValidJSONItem calls f with each item of the JSON array data, which
// is valid JSON (as for EachValidJSONMember), in order; the items alias
// data. data that is not an array is an error.
func EachValidJSONItem(data []byte, f func(item []byte) error) error {
	i := skipJSONSpace(data, 0)
	if i == len(data) || data[i] != '[' {
		return errors.New("not a JSON array")
	}
	for i = skipJSONSpace(data, i+1); data[i] != ']'; i = skipJSONSpace(data, i+1) {
		end := jsonValueEnd(data, i)
		if err := f(data[i:end]); err != nil {
			return err
		}
		i = skipJSONSpace(data, end) // at the comma or the closing bracket
		if data[i] == ']' {
			break
		}
	}
	return nil
}

// The helpers below read JSON that json.Valid accepted: they never see a
// malformed text, so they need not check it.

// skipJSONSpace returns the index of the first byte from i that is not
// JSON whitespace.
func skipJSONSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\r' || data[i] == '\n') {
		i++
	}
	return i
}

// jsonValueEnd returns the index just past the JSON value starting at i.
func jsonValueEnd(data []byte, i int) int {
	switch data[i] {
	case '"':
		return jsonStringEnd(data, i)
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch data[i] {
			case '"':
				i = jsonStringEnd(data, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	default: // a number, true, false or null
		for ; i < len(data); i++ {
			switch data[i] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return i
			}
		}
		return i
	}
}

// jsonStringEnd returns the index just past the string starting at i.
func jsonStringEnd(data []byte, i int) int {
	for i++; data[i] != '"'; i++ {
		if data[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// jsonKeyBytes is jsonKey without a copy of a plain key.
func jsonKeyBytes(quoted []byte) ([]byte, error) {
	if bytes.IndexByte(quoted, '\\') < 0 && utf8.Valid(quoted) {
		return quoted[1 : len(quoted)-1], nil
	}
	key, err := jsonKey(quoted)
	return []byte(key), err
}

// jsonKey reads an object key as encoding/json does: escapes resolved,
// invalid UTF-8 replaced.
func jsonKey(quoted []byte) (string, error) {
	if bytes.IndexByte(quoted, '\\') < 0 && utf8.Valid(quoted) {
		return string(quoted[1 : len(quoted)-1]), nil
	}
	var key string
	if err := json.Unmarshal(quoted, &key); err != nil {
		return "", fmt.Errorf("not valid JSON: %w", err)
	}
	return key, nil
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

// marshal writes the object with the named members first, in that order,
// then the others as they stand.
func (o jsonObject) marshal(first ...string) []byte { return o.ordered(first...).encode() }

// ordered is the object with the named members first, in that order, then
// the others as they stand: the members in the order marshal writes them.
func (o jsonObject) ordered(first ...string) jsonObject {
	out := make(jsonObject, 0, len(o))
	for _, k := range first {
		if v, ok := o.get(k); ok {
			out = append(out, jsonMember{key: k, value: v})
		}
	}
	for _, m := range o {
		if !slices.Contains(first, m.key) {
			out = append(out, m)
		}
	}
	return out
}

// encode writes the object's members in their order, each key as
// json.Marshal writes it.
func (o jsonObject) encode() []byte {
	size := 2
	for _, m := range o {
		size += len(m.key) + len(m.value) + 4
	}
	b := make([]byte, 0, size)
	b = append(b, '{')
	for i, m := range o {
		if i > 0 {
			b = append(b, ',')
		}
		if strings.ContainsAny(m.key, "<>&") { // json.Marshal escapes them for HTML
			key, _ := json.Marshal(m.key)
			b = append(b, key...)
		} else {
			b = AppendJSONString(b, m.key) // the rest as json.Marshal escapes it, with no allocation
		}
		b = append(append(b, ':'), m.value...)
	}
	return append(b, '}')
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

// jsonValueAt returns where, in the valid JSON data, the value at a path
// of the validator's form (Type.member[index].member, the root type
// first) begins and ends; false when the path reaches nothing.
func jsonValueAt(data []byte, path string) (start, end int, ok bool) {
	_, rest, _ := strings.Cut(path, ".") // the root: data itself
	start = skipJSONSpace(data, 0)
	for rest != "" {
		i := start
		var key string
		var index int
		isItem := false
		if key, rest, _ = strings.Cut(rest, "."); strings.HasSuffix(key, "]") {
			open := strings.IndexByte(key, '[')
			if open < 0 {
				return 0, 0, false
			}
			n, err := strconv.Atoi(key[open+1 : len(key)-1])
			if err != nil {
				return 0, 0, false
			}
			key, index, isItem = key[:open], n, true
		}
		if data[i] != '{' {
			return 0, 0, false
		}
		found := false
		for i = skipJSONSpace(data, i+1); data[i] != '}'; i = skipJSONSpace(data, i+1) {
			keyEnd := jsonValueEnd(data, i)
			k, err := jsonKey(data[i:keyEnd])
			if err != nil {
				return 0, 0, false
			}
			i = skipJSONSpace(data, skipJSONSpace(data, keyEnd)+1)
			if k == key {
				found = true
				break
			}
			i = skipJSONSpace(data, jsonValueEnd(data, i))
			if data[i] == '}' {
				break
			}
		}
		if !found {
			return 0, 0, false
		}
		start = i
		if isItem {
			if data[i] != '[' {
				return 0, 0, false
			}
			n := 0
			for i = skipJSONSpace(data, i+1); data[i] != ']'; i = skipJSONSpace(data, i+1) {
				if n == index {
					break
				}
				n++
				i = skipJSONSpace(data, jsonValueEnd(data, i))
				if data[i] == ']' {
					break
				}
			}
			if n != index || data[i] == ']' {
				return 0, 0, false
			}
			start = i
		}
	}
	return start, jsonValueEnd(data, start), true
}
