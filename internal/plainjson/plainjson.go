// Package plainjson reads plain JSON in one pass, for the fast paths of
// the native upload, the R4 import's Bundle and domain.DecodeJSON: JSON
// whose strings hold no escape sequence and are valid UTF-8, which is
// what clients send (values it skips may hold escapes: Skip; a reader
// with Unquote set takes them everywhere). It reads and validates at
// once, with no reflection and no copy of the text: every string it
// returns is cut from one string the caller gives (usually string(data),
// one allocation for the whole text).
//
// It never judges what it does not read: every method reports ok=false for
// anything outside the plain subset (an escape, invalid UTF-8, malformed
// JSON), and the caller then reads the whole text again with
// encoding/json (or jsontext), whose result and errors stay the
// reference. For a text it accepts, its values are exactly the
// reference's (tests compare them), so the two paths can only differ in
// speed.
package plainjson

import (
	"encoding/binary"
	"encoding/json"
	"unicode/utf8"
)

// Reader reads one JSON text. data and text hold the same bytes; strings
// are cut from text.
type Reader struct {
	data  []byte
	text  string
	pos   int
	depth int
	// KeyOK and NumberOK, when set, are further conditions on the keys
	// of the objects and on the numbers Value reads: one that fails them
	// fails the read, as anything outside the plain subset does.
	KeyOK    func(key string) bool
	NumberOK func(n json.Number) bool
	// Unquote, when set, reads a string that holds escape sequences
	// (quoted: its JSON text, quotes included), which String otherwise
	// refuses; false refuses it.
	Unquote func(quoted []byte) (string, bool)
	// Unique makes Value refuse an object that names a member twice,
	// where encoding/json keeps the last value.
	Unique bool
}

// maxDepth bounds the nesting of objects and arrays, as encoding/json's
// does: the reader recurses, and a body of a million brackets must not
// exhaust the stack.
const maxDepth = 10000

// NewReader reads data, whose strings are cut from text, a string of the
// same bytes.
func NewReader(data []byte, text string) *Reader {
	return &Reader{data: data, text: text}
}

// Pos is the offset of the next byte to read.
func (r *Reader) Pos() int { return r.pos }

// space skips JSON whitespace.
func (r *Reader) space() {
	for r.pos < len(r.data) {
		switch r.data[r.pos] {
		case ' ', '\t', '\r', '\n':
			r.pos++
		default:
			return
		}
	}
}

// peek returns the next byte after whitespace, or 0 at the end.
func (r *Reader) peek() byte {
	r.space()
	if r.pos == len(r.data) {
		return 0
	}
	return r.data[r.pos]
}

// End reports whether only whitespace is left.
func (r *Reader) End() bool { return r.peek() == 0 && r.pos == len(r.data) }

// Start returns the offset at which the next value begins (after
// whitespace).
func (r *Reader) Start() int {
	r.space()
	return r.pos
}

// Rewind moves the reader back to pos, an offset Start returned before a
// value, so that a value one reading gave up on is read again another way
// (a batch reads each resource as a plain Observation first, and skips it
// when it is not one). The nesting depth needs no rewinding: every
// container restores it on its way out, failed or not.
func (r *Reader) Rewind(pos int) { r.pos = pos }

// String reads a plain string; with Unquote set, any string.
func (r *Reader) String() (string, bool) {
	from := r.Start()
	escaped, ok := r.scanString()
	switch {
	case !ok:
		return "", false
	case !escaped:
		return r.text[from+1 : r.pos-1], true
	case r.Unquote != nil:
		return r.Unquote(r.data[from:r.pos])
	}
	r.pos = from
	return "", false
}

// Eight bytes at once (SWAR): the bulk of an upload is the Base64 of its
// data point, one string, read twice (the Bundle skips it, the
// Observation reads it); testing each byte three ways was a tenth of an
// upload's reading.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plainRun returns the length of the leading run of data, a multiple of
// eight, whose bytes scanString passes over as they are: ASCII from the
// space up, but the quote and the backslash. It reads on from there byte by byte
// (TestPlainRun, FuzzString compare it with the byte loop alone).
func plainRun(data []byte) int {
	i := 0
	for ; i+8 <= len(data); i += 8 {
		x := binary.LittleEndian.Uint64(data[i:])
		quote, backslash := x^(ones*'"'), x^(ones*'\\')
		// A byte of quote or backslash is zero, a byte of x is under 0x20
		// (each exact as a whole: nonzero iff such a byte exists), or a
		// byte of x has its high bit: then the eight are not plain.
		if ((quote-ones)&^quote|(backslash-ones)&^backslash|(x-ones*0x20)&^x|x)&highs != 0 {
			break
		}
	}
	return i
}

// Object reads an object, calling member with each key; member reads the
// value (with the Reader's methods) and reports whether it could. A key
// named twice is the caller's to notice.
func (r *Reader) Object(member func(key string) bool) bool {
	return r.container('{', '}', func() bool {
		key, ok := r.String()
		if !ok || r.peek() != ':' {
			return false
		}
		r.pos++
		return member(key)
	})
}

// Array reads an array, calling item for each item; item reads it.
func (r *Reader) Array(item func() bool) bool { return r.container('[', ']', item) }

// container reads an object or an array (opening .. closing), one nesting
// level deeper, calling item for each of its members or items.
func (r *Reader) container(opening, closing byte, item func() bool) bool {
	if r.peek() != opening || r.depth >= maxDepth {
		return false
	}
	r.pos++
	r.depth++
	defer func() { r.depth-- }()
	if r.peek() == closing {
		r.pos++
		return true
	}
	for {
		if !item() {
			return false
		}
		switch r.peek() {
		case ',':
			r.pos++
		case closing:
			r.pos++
			return true
		default:
			return false
		}
	}
}

// Skip reads any value and drops it; its strings may hold escapes
// (scanString).
func (r *Reader) Skip() bool {
	switch r.peek() {
	case '{':
		return r.Object(func(string) bool { return r.Skip() })
	case '[':
		return r.Array(r.Skip)
	case '"':
		_, ok := r.scanString()
		return ok
	}
	_, ok := r.literal()
	return ok
}

// scanString reads past a string (valid UTF-8), reporting whether it
// holds an escape sequence; String cuts out the string, Skip drops it. It
// takes escape sequences, checked against JSON's grammar but not decoded
// (String leaves that to Unquote): a skipped value is never returned, so
// there is nothing to decode, and FHIR resources nearly always hold some
// (the quotes of a narrative's xmlns attribute), which would otherwise
// send every one of them to the slow path. It takes exactly the escapes
// encoding/json's scanner takes.
func (r *Reader) scanString() (escaped, ok bool) {
	if r.peek() != '"' {
		return false, false
	}
	start := r.pos + 1
	ascii := true
	for i := start + plainRun(r.data[start:]); i < len(r.data); i++ {
		switch c := r.data[i]; {
		case c == '"':
			if !ascii && !utf8.Valid(r.data[start:i]) {
				return false, false
			}
			r.pos = i + 1
			return escaped, true
		case c == '\\':
			escaped = true
			if i++; i == len(r.data) {
				return false, false
			}
			switch r.data[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(r.data) || !isHex(r.data[i+1]) || !isHex(r.data[i+2]) || !isHex(r.data[i+3]) || !isHex(r.data[i+4]) {
					return false, false
				}
				i += 4
			default:
				return false, false
			}
		case c < 0x20:
			return false, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return false, false
}

// isHex reports whether c is a hexadecimal digit.
func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// Value reads any value as encoding/json decodes it into an any with
// UseNumber: map[string]any, []any, string, json.Number, bool or nil. A
// key named twice keeps its last value, as there.
func (r *Reader) Value() (any, bool) {
	switch r.peek() {
	case '{':
		m := map[string]any{}
		ok := r.Object(func(key string) bool {
			if r.KeyOK != nil && !r.KeyOK(key) {
				return false
			}
			if _, named := m[key]; named && r.Unique {
				return false
			}
			v, ok := r.Value()
			m[key] = v
			return ok
		})
		return m, ok
	case '[':
		a := []any{}
		ok := r.Array(func() bool {
			v, ok := r.Value()
			a = append(a, v)
			return ok
		})
		return a, ok
	case '"':
		return r.String()
	}
	v, ok := r.literal()
	if n, isNumber := v.(json.Number); isNumber && r.NumberOK != nil && !r.NumberOK(n) {
		return nil, false
	}
	return v, ok
}

// literal reads true, false, null or a number.
func (r *Reader) literal() (any, bool) {
	rest := r.data[r.pos:]
	for _, lit := range [...]struct {
		text  string
		value any
	}{{"true", true}, {"false", false}, {"null", nil}} {
		if len(rest) >= len(lit.text) && string(rest[:len(lit.text)]) == lit.text {
			r.pos += len(lit.text)
			return lit.value, !r.glued()
		}
	}
	start := r.pos
	if !r.number() || r.glued() {
		return nil, false
	}
	return json.Number(r.text[start:r.pos]), true
}

// glued reports whether a value runs on into a byte that cannot follow it
// (as in 12x or truex), which JSON refuses.
func (r *Reader) glued() bool {
	if r.pos == len(r.data) {
		return false
	}
	switch r.data[r.pos] {
	case ' ', '\t', '\r', '\n', ',', '}', ']':
		return false
	}
	return true
}

// number reads a number as JSON's grammar has it:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (r *Reader) number() bool {
	d := r.data
	if r.pos < len(d) && d[r.pos] == '-' {
		r.pos++
	}
	switch {
	case r.pos < len(d) && d[r.pos] == '0':
		r.pos++
	case r.digits() == 0:
		return false
	}
	if r.pos < len(d) && d[r.pos] == '.' {
		r.pos++
		if r.digits() == 0 {
			return false
		}
	}
	if r.pos < len(d) && (d[r.pos] == 'e' || d[r.pos] == 'E') {
		r.pos++
		if r.pos < len(d) && (d[r.pos] == '+' || d[r.pos] == '-') {
			r.pos++
		}
		if r.digits() == 0 {
			return false
		}
	}
	return true
}

// digits reads decimal digits and returns how many.
func (r *Reader) digits() int {
	start := r.pos
	for r.pos < len(r.data) && r.data[r.pos] >= '0' && r.data[r.pos] <= '9' {
		r.pos++
	}
	return r.pos - start
}
