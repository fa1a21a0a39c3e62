package plainjson

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// referenceString is String as it read before plainRun: byte by byte.
func referenceString(data []byte) (string, int, bool) {
	if len(data) == 0 || data[0] != '"' {
		return "", 0, false
	}
	ascii := true
	for i := 1; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			if !ascii && !utf8.Valid(data[1:i]) {
				return "", 0, false
			}
			return string(data[1:i]), i + 1, true
		case c == '\\' || c < 0x20:
			return "", 0, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return "", 0, false
}

func checkString(t *testing.T, data []byte) {
	t.Helper()
	r := NewReader(data, string(data))
	got, ok := r.String()
	want, end, wantOK := referenceString(data)
	if got != want || ok != wantOK || (ok && r.Pos() != end) {
		t.Fatalf("%q: String = %q, %v at %d; byte by byte %q, %v at %d", data, got, ok, r.Pos(), want, wantOK, end)
	}
}

// TestPlainRun: every byte value, at every offset of a string of two
// eight-byte words and a tail, reads as the byte loop reads it.
func TestPlainRun(t *testing.T) {
	for c := range 256 {
		for at := range 20 {
			data := []byte(`"abcdefghijklmnopqrstuvw"`)
			data[1+at] = byte(c)
			checkString(t, data)
		}
	}
	for _, s := range []string{`""`, `"`, `"a`, `"abcdefgh"`, `"abcdefghabcdefgh"`, `"abcdefghabcdefg`, `"é"`, "\"abcdefg\xff\"", `"aaaaaaa\"bbbbbbbbb"`} {
		checkString(t, []byte(s))
	}
}

// FuzzString compares String with the byte loop over any text.
func FuzzString(f *testing.F) {
	f.Add([]byte(`"eyJoZWFkZXIiOnsiaWQiOiJjcHUtNyIsImNyZWF0aW9uX2RhdGVfdGltZSI6IjIwMjQt"`))
	f.Add([]byte("\"0123456\u00e9789\x1fabc\""))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkString(t, append([]byte{'"'}, data...))
	})
}

// checkEscapedString: with Unquote set, String reads data as
// encoding/json does (through Unquote only when the string holds an
// escape), Skip passes over what String reads, and without Unquote String
// refuses what Unquote reads.
func checkEscapedString(t *testing.T, data []byte) {
	t.Helper()
	unquoted := false
	r := NewReader(data, string(data))
	r.Unquote = func(quoted []byte) (string, bool) {
		unquoted = true
		var s string
		return s, json.Unmarshal(quoted, &s) == nil
	}
	got, ok := r.String()
	end := r.Pos()
	skipper := NewReader(data, string(data))
	if skipped := skipper.Skip(); skipped != ok || ok && skipper.Pos() != end {
		t.Fatalf("%q: String %v to %d, Skip %v to %d", data, ok, end, skipped, skipper.Pos())
	}
	if !ok {
		return
	}
	var want string
	if err := json.Unmarshal(data[:end], &want); err != nil || got != want {
		t.Fatalf("%q: String = %q, encoding/json %q, %v", data, got, want, err)
	}
	if escaped := bytes.IndexByte(data[:end], '\\') >= 0; unquoted != escaped {
		t.Fatalf("%q: unquoted %v, but escaped %v", data, unquoted, escaped)
	}
	plain := NewReader(data, string(data))
	if _, plainOK := plain.String(); plainOK == unquoted {
		t.Fatalf("%q: without Unquote String says %v", data, plainOK)
	}
}

// TestStringEscapes: every escape JSON has, and some it has not, at
// every offset of a string of two eight-byte words and a tail (within
// plainRun's words and after them); and escapes encoding/json reads
// leniently (a lone or reversed surrogate becomes U+FFFD, a NUL stays),
// and text that is not valid UTF-8 (a surrogate, an overlong form, a
// sequence cut short, a code point past U+10FFFF), alone and beside an
// escape: String reads the first as encoding/json does, and refuses the
// second, which encoding/json takes with U+FFFD in its place.
func TestStringEscapes(t *testing.T) {
	odd := []string{`\ud800`, `\udc00`, `\udc00\ud800`, `\ud800\u0041`, `\uDBFF\uDFFF`, `\u0000`, `\u2028`,
		"\xed\xa0\x80", "\xc0\x80", "\xe2\x82", "\xf4\x90\x80\x80", "\xff", "\x7f", "\u2028\u2029", "\xef\xbf\xbd",
		"\\n\xed\xa0\x80", "\xc0\x80\\t", `\ud800` + "\xff"}
	for _, esc := range append([]string{`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`, `\u00e9`, `\uD834\udd1e`, `\x`, `\u12g4`, `\u123`, `\`}, odd...) {
		for at := range 20 {
			data := []byte(`"abcdefghijklmnopqrstuvw"`)
			data = append(data[:1+at:1+at], append([]byte(esc), data[1+at:]...)...)
			checkEscapedString(t, data)
		}
	}
}

// FuzzStringUnquote runs checkEscapedString over any text.
func FuzzStringUnquote(f *testing.F) {
	f.Add([]byte(`"<div xmlns=\"http://www.w3.org/1999/xhtml\">a\u00e9b</div>"`))
	f.Add([]byte(`"0123456789\n"`))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkEscapedString(t, append([]byte{'"'}, data...))
	})
}
