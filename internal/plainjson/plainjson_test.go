package plainjson

import (
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
