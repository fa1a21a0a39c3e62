package handlers

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"

	"exchange/domain"
)

// FuzzPathOfRequestLine: whatever a connection's first bytes are, the path
// read from them is empty or absolute, and has no query.
func FuzzPathOfRequestLine(f *testing.F) {
	for _, seed := range []string{"GET /FHIR/R5/Observation?x=1 HTTP/1.1\r\n", "GET http://x/fhir/r5/Patient HTTP/1.1\r\n", "GET /FHIR/R5/Obs",
		"POST /fhir-import/R4", "GET", "GET  /x", "GET * HTTP/1.1", "\r\n", "GET http://[::1 HTTP/1.1"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		p := pathOfRequestLine(line)
		if p != "" && (!strings.HasPrefix(p, "/") || strings.ContainsAny(p, "?#")) {
			t.Fatalf("%q: path %q", line, p)
		}
	})
}

// TestParseIfMatch: If-Match is absent, "*", or one version tag spelled
// as ETag writes it, weak or strong; anything else is CodeInvalid.
func TestParseIfMatch(t *testing.T) {
	for h, want := range map[string]int64{
		"": 0, "*": 0, " * ": 0, `W/"1"`: 1, `"1"`: 1, ` W/"1717171717123" `: 1717171717123,
		"1": -1, `W/1`: -1, `"1`: -1, `1"`: -1, `W/""`: -1, `""`: -1, `W/"01"`: -1, `W/"-1"`: -1, `W/"0"`: -1,
		`w/"1"`: -1, `W/ "1"`: -1, `W/"1", W/"2"`: -1, `*, W/"1"`: -1, "**": -1, `W/"1.0"`: -1, `W/"99999999999999999999"`: -1,
	} {
		got, err := parseIfMatch(h)
		if want < 0 {
			if !domain.IsCode(err, domain.CodeInvalid) {
				t.Errorf("%q: %d, %v; want CodeInvalid", h, got, err)
			}
			continue
		}
		if got != want || err != nil {
			t.Errorf("%q: %d, %v; want %d", h, got, err, want)
		}
	}
}

// TestIfMatchFieldsAreOneList: two If-Match fields are one list of tags
// (RFC 9110 5.3), refused like a list in one field, not cut to the first
// (which would apply a change to the version the first names whatever the
// second says).
func TestIfMatchFieldsAreOneList(t *testing.T) {
	app := fiber.New()
	app.Patch("/", func(c *fiber.Ctx) error {
		v, err := ifMatch(c)
		if err != nil {
			return c.Status(http.StatusBadRequest).SendString(err.Error())
		}
		return c.SendString(strconv.FormatInt(v, 10))
	})
	for _, tc := range []struct {
		fields []string
		status int
	}{
		{nil, http.StatusOK},
		{[]string{`W/"1"`}, http.StatusOK},
		{[]string{`W/"1"`, `W/"2"`}, http.StatusBadRequest},
		{[]string{`W/"1"`, `W/"1"`}, http.StatusBadRequest},
		{[]string{"*", `W/"1"`}, http.StatusBadRequest},
	} {
		req := httptest.NewRequest(http.MethodPatch, "/", nil)
		for _, f := range tc.fields {
			req.Header.Add("If-Match", f)
		}
		resp, err := app.Test(req)
		if err != nil {
			t.Fatal(err)
		}
		if body, _ := io.ReadAll(resp.Body); resp.StatusCode != tc.status {
			t.Errorf("If-Match fields %q: %d %s, want %d", tc.fields, resp.StatusCode, body, tc.status)
		}
	}
}

// FuzzParseIfMatch: whatever If-Match holds, parseIfMatch refuses it as
// invalid or reads a version from a tag that ETag would write (weak or
// strong), or none from "*" or nothing.
func FuzzParseIfMatch(f *testing.F) {
	for _, seed := range []string{"", "*", `W/"1"`, `"42"`, `W/"01"`, `W/"1", W/"2"`, `"1`, "\t*\n", `W/"9223372036854775808"`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, h string) {
		n, err := parseIfMatch(h)
		switch tag := strings.TrimSpace(h); {
		case err != nil:
			if !domain.IsCode(err, domain.CodeInvalid) {
				t.Fatalf("%q: %v, want CodeInvalid", h, err)
			}
		case n == 0:
			if tag != "" && tag != "*" {
				t.Fatalf("%q: read as no version", h)
			}
		case tag != etag(n) && "W/"+tag != etag(n):
			t.Fatalf("%q: read as version %d, which ETag writes %s", h, n, etag(n))
		}
	})
}

// FuzzBase64BinaryLen: the size counted without decoding is the decoded
// size of every base64Binary that decodes, and the count of a byte loop
// for any text; spaced is whether it holds whitespace.
func FuzzBase64BinaryLen(f *testing.F) {
	for _, seed := range []string{"", "eyJ9", "eyJhIjoxfQ==", "eyJh\r\nIjoxfQ=", " e y J 9 ", "====", "\teyJ9\n"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		size, spaced := base64BinaryLen(s)
		chars, padding := 0, 0
		for i := 0; i < len(s); i++ {
			switch s[i] {
			case ' ', '\t', '\r', '\n':
			case '=':
				chars++
				padding++
			default:
				chars++
			}
		}
		if want := chars/4*3 - padding; size != want || spaced != strings.ContainsAny(s, " \t\r\n") {
			t.Fatalf("%q: counted %d, %v; a byte loop counts %d", s, size, spaced, want)
		}
		data, err := decodeBase64Binary(s, spaced)
		if err == nil && size != len(data) {
			t.Fatalf("%q: counted %d, decoded %d", s, size, len(data))
		}
	})
}

// FuzzDecodeObservation: the native reader routes any Observation body as
// domain.CreatesNative does over domain.CodingSystems, and refuses or reads it without a
// fault; what it reads has no member named twice and no name that is not
// exactly an element it knows.
func FuzzDecodeObservation(f *testing.F) {
	s := &server{service: domain.NewService(domain.Config{MaxDataPointBytes: 64})}
	for _, seed := range []string{
		`{"resourceType":"Observation","status":"final","code":{"coding":[{"system":"https://w3id.org/openmhealth","code":"omh:heart-rate:2.0"}]},` +
			`"subject":{"reference":"Patient/1"},"valueAttachment":{"contentType":"application/json","data":"` + base64.StdEncoding.EncodeToString([]byte(`{}`)) + `"}}`,
		`{"resourceType":"Observation","status":"final","status":"x"}`, `{"Status":"final"}`, `{"code":{"coding":[{"System":"x"}]}}`,
		`{"identifier":[{"value":"a","value":"b"}]}`, `{"valueAttachment":{"data":"` + strings.Repeat("A", 200) + `"}}`, `[]`, `null`, `{"meta":{"versionId":"1"}}`,
		`{"code":{"coding":[{"system":"https://w3id.org/ieee1752"},"x"]}}`, `{"code":{"coding":[null,{"system":"https://w3id.org/openmhealth"}]},"status":1}`,
		`{"code":{"coding":[{"system":"https://w3id.org/openmhealth"}]},"CODE":{"coding":[]}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if _, native, _ := s.routeCreate("Observation", raw, nil); native != domain.CreatesNative("Observation", domain.CodingSystems(raw)) {
			t.Fatalf("%q: routed native=%v, domain.CreatesNative says %v", raw, native, !native)
		}
		var in observationIn
		err := checkObservationJSON(raw, json.Unmarshal(raw, &in))
		if err == nil {
			_, err = s.newObservation(&in)
		}
		if err != nil {
			if domain.ErrorCode(err) == domain.CodeInternal {
				t.Fatalf("%q: a fault: %v", raw, err)
			}
			return
		}
		checkExact(t, raw, "Observation", nativeElements)
	})
}

// checkExact fails when the JSON object raw names a member twice, or one
// known does not name exactly, at any depth the reader descends.
func checkExact(t *testing.T, raw []byte, at string, known elements) {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return // a value of another kind, left to the typed decoding
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, _ := dec.Token()
		key := tok.(string)
		inner, ok := known[key]
		if seen[key] || !ok {
			t.Fatalf("%s.%s read: twice or unknown", at, key)
		}
		seen[key] = true
		var value json.RawMessage
		_ = dec.Decode(&value)
		var items []json.RawMessage
		if json.Unmarshal(value, &items) == nil {
			for _, item := range items {
				checkExact(t, item, at+"."+key, inner)
			}
		} else if inner != nil {
			checkExact(t, value, at+"."+key, inner)
		}
	}
}

// TestNativeElementsArePinned: the elements a native Observation may hold
// are exactly those the native store keeps. observationIn shares its
// identifier and period types with the FHIR output (fhirIdentifier,
// fhirPeriod): a field added there for another resource would otherwise
// be taken in an upload, unknownElements finding it known, and dropped.
func TestNativeElementsArePinned(t *testing.T) {
	pair := func(a, b string) elements { return elements{a: nil, b: nil} }
	want := elements{
		"resourceType": nil, "id": nil, "status": nil,
		"meta":              pair("versionId", "lastUpdated"),
		"identifier":        pair("system", "value"),
		"subject":           {"reference": nil},
		"device":            {"reference": nil},
		"code":              {"coding": {"system": nil, "code": nil, "display": nil}},
		"effectiveDateTime": nil, "effectiveInstant": nil,
		"effectivePeriod": pair("start", "end"),
		"valueAttachment": pair("contentType", "data"),
	}
	if !reflect.DeepEqual(nativeElements, want) {
		t.Errorf("the native Observation's elements are\n%v\nwant\n%v", nativeElements, want)
	}
}
