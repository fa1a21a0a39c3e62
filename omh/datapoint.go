package omh

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"exchange/internal/plainjson"
)

// Namespaces of native codes: Open mHealth and IEEE 1752.
const (
	NamespaceOMH  = "omh"
	NamespaceIEEE = "ieee"
)

// SchemaID identifies the schema of a data point's body.
type SchemaID struct {
	Namespace string
	Name      string
	Version   string
}

// ParseCode reads a native code of the form namespace:name:version, such as
// omh:heart-rate:2.0 or ieee:sleep-stage-summary:1.0: the text of
// ^(omh|ieee):([a-z0-9]+(?:-[a-z0-9]+)*):([0-9]+\.[0-9]+)$, whose groups are
// the parts. The code is cut at its colons, which no part holds, and each
// part checked by hand: every upload's code is parsed, and the regular
// expression's match was a twentieth of a batch upload's CPU
// (FuzzParseCode compares both). The parts are substrings of code, so
// Code() of the result equals code.
func ParseCode(code string) (SchemaID, error) {
	namespace, rest, _ := strings.Cut(code, ":")
	name, version, _ := strings.Cut(rest, ":")
	if namespace != NamespaceOMH && namespace != NamespaceIEEE || !isSchemaName(name) || !isSchemaVersion(version) {
		return SchemaID{}, fmt.Errorf("%q is not a native code (omh:<schema>:<version> or ieee:<schema>:<version>)", code)
	}
	return SchemaID{Namespace: namespace, Name: name, Version: version}, nil
}

// isSchemaName reports whether s is words of a-z and 0-9 joined by single
// hyphens: [a-z0-9]+(?:-[a-z0-9]+)*.
func isSchemaName(s string) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' || strings.Contains(s, "--") {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// isSchemaVersion reports whether s is two runs of digits around a dot:
// [0-9]+\.[0-9]+.
func isSchemaVersion(s string) bool {
	major, minor, ok := strings.Cut(s, ".")
	return ok && isDigits(major) && isDigits(minor)
}

// isDigits reports whether s is one or more of 0-9.
func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// Code returns the native code of the schema id.
func (s SchemaID) Code() string { return s.Namespace + ":" + s.Name + ":" + s.Version }

// DataPoint is a parsed data point, with an Open mHealth or an IEEE 1752
// header.
type DataPoint struct {
	Schema SchemaID
	// Body is the body as decoded JSON (numbers as json.Number).
	Body map[string]any
	// Document is the whole data point as decoded JSON.
	Document map[string]any
	// ieeeHeader is set when the header is an IEEE 1752 header.
	ieeeHeader bool
}

// The members of each kind of header that tell them apart (both have a
// schema_id): Open mHealth's header-1.x and IEEE 1752's metadata/header-1.0.
var (
	omhHeaderMembers  = []string{"id", "creation_date_time"}
	ieeeHeaderMembers = []string{"uuid", "source_creation_date_time"}
)

// Parse reads a data point: a JSON object with a header carrying a
// schema_id {namespace, name, version}, and a body object. The header is
// an IEEE 1752 header when it has uuid and source_creation_date_time, else
// an Open mHealth header when it has id and creation_date_time; one that is
// neither is refused, naming what each kind lacks. The error says what is
// wrong in terms of the JSON.
//
// A plain data point (no escapes, valid UTF-8, keys and numbers a document
// database stores), as devices send them, is decoded in one pass
// (parsePlain); any other is decoded by encoding/json, which then says
// what is wrong with it.
func Parse(data []byte) (*DataPoint, error) {
	doc, plain := parsePlain(data)
	if !plain {
		var err error
		if doc, err = parseReference(data); err != nil {
			return nil, err
		}
	}
	header, ok := doc["header"].(map[string]any)
	if !ok {
		return nil, errors.New("the data point has no header object")
	}
	sid, ok := header["schema_id"].(map[string]any)
	if !ok {
		return nil, errors.New("the data point's header has no schema_id object")
	}
	var id SchemaID
	for _, m := range [...]struct {
		key  string
		dest *string
	}{{"namespace", &id.Namespace}, {"name", &id.Name}, {"version", &id.Version}} {
		if *m.dest, ok = sid[m.key].(string); !ok || *m.dest == "" {
			return nil, fmt.Errorf("header.schema_id.%s must be a non-empty string", m.key)
		}
	}
	ieee, err := headerKind(header)
	if err != nil {
		return nil, err
	}
	body, ok := doc["body"].(map[string]any)
	if !ok {
		return nil, errors.New("the data point has no body object")
	}
	if !plain {
		if err := checkKeys("", doc); err != nil {
			return nil, err
		}
	}
	return &DataPoint{Schema: id, Body: body, Document: doc, ieeeHeader: ieee}, nil
}

// Decode reads a stored data point as it is: its JSON object, numbers as
// json.Number, without the header, schema and key rules of Parse, which a
// data point passes once, when it is uploaded. A data point stored under
// older rules reads as it was stored.
func Decode(data []byte) (map[string]any, error) {
	if doc, plain := parsePlain(data); plain {
		return doc, nil
	}
	return parseReference(data)
}

// parseReference decodes a data point with encoding/json, as the
// validator's own decoder does (objects, arrays, json.Number), saying what
// is wrong with one that does not decode as an object.
func parseReference(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("the data point is not a JSON object: %v", err)
	}
	// Not dec.More(), which is false before a '}' or ']': a data point is
	// kept as sent, and one with a bracket after its object is not JSON.
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("the data point has data after its JSON object")
	}
	return doc, nil
}

// parsePlain decodes a plain data point as parseReference does, its keys
// and numbers checked as checkKeys checks them, all in one pass, every
// string cut from one copy of data; ok is false for a data point that is
// not a plain JSON object, or that checkKeys would refuse
// (TestParsePlainAgrees, FuzzParse).
func parsePlain(data []byte) (doc map[string]any, ok bool) {
	r := plainjson.NewReader(data, string(data))
	r.KeyOK = storableKey
	r.NumberOK = func(n json.Number) bool {
		_, err := n.Float64()
		return err == nil
	}
	v, ok := r.Value()
	doc, isObject := v.(map[string]any)
	return doc, ok && isObject && r.End()
}

// storableKey reports whether MongoDB can store a key, as checkKeys
// judges it.
func storableKey(k string) bool {
	return k != "" && !strings.Contains(k, ".") && !strings.HasPrefix(k, "$") && !strings.ContainsRune(k, 0)
}

// headerKind reports whether a header is an IEEE 1752 header (true) or an
// Open mHealth one (false), by the members it has; the schema of its kind
// then checks their values.
func headerKind(header map[string]any) (ieee bool, err error) {
	// Every upload has one kind: tell it without building the lists of
	// what is missing, which only the error names.
	has := func(members []string) bool {
		for _, m := range members {
			if _, ok := header[m]; !ok {
				return false
			}
		}
		return true
	}
	switch {
	case has(ieeeHeaderMembers):
		return true, nil
	case has(omhHeaderMembers):
		return false, nil
	}
	missing := func(members []string) []string {
		var out []string
		for _, m := range members {
			if _, ok := header[m]; !ok {
				out = append(out, m)
			}
		}
		return out
	}
	return false, fmt.Errorf("the header is neither an Open mHealth header (id, creation_date_time, schema_id; it has no %s) nor an IEEE 1752 header (uuid, source_creation_date_time, schema_id; it has no %s)",
		strings.Join(missing(omhHeaderMembers), ", "), strings.Join(missing(ieeeHeaderMembers), ", "))
}

// ErrUnstorable marks what a document database cannot store: a key with a
// '.', starting with '$' or holding NUL, or a number beyond a double.
var ErrUnstorable = errors.New("a value MongoDB cannot store")

// ErrUnstorableKey is ErrUnstorable for a key.
var ErrUnstorableKey = fmt.Errorf("%w: a key", ErrUnstorable)

// checkKeys refuses what MongoDB (and FerretDB) cannot store in a
// document: keys containing '.', starting with '$' or holding NUL, and
// numbers too large for a double.
func checkKeys(path string, v any) error {
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			p := k
			if path != "" {
				p = path + "." + k
			}
			if !storableKey(k) {
				return fmt.Errorf("%w: %q (in %s)", ErrUnstorableKey, k, orRoot(path))
			}
			if err := checkKeys(p, child); err != nil {
				return err
			}
		}
	case []any:
		for i, child := range v {
			if err := checkKeys(fmt.Sprintf("%s[%d]", path, i), child); err != nil {
				return err
			}
		}
	case json.Number:
		if _, err := v.Float64(); err != nil {
			return fmt.Errorf("%w: the number %s (in %s) is out of range", ErrUnstorable, v, orRoot(path))
		}
	}
	return nil
}

func orRoot(path string) string {
	if path == "" {
		return "the top level"
	}
	return path
}
