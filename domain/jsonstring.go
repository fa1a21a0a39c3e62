package domain

import "unicode/utf8"

const hexDigits = "0123456789abcdef"

// AppendJSONString appends s as a JSON string, escaped as encoding/json
// escapes it without HTML escaping: the two-character escapes for \b, \f,
// \n, \r, \t, " and \, \u00XX for other control characters, \u2028 and
// \u2029 (which JavaScript reads as line ends), and \ufffd for each byte
// that is not UTF-8.
//
// It is the one JSON-string escaper of the hand-written JSON writers (the
// FHIR handlers' Bundles, the converter's R5 output), so that their text
// is what encoding/json would write; handlers' TestAppendJSONString and
// FuzzAppendJSONString compare the two.
func AppendJSONString(b []byte, s string) []byte { return appendJSONString(b, s, false) }

// AppendHTMLEscapedJSONString is AppendJSONString with <, > and & escaped
// as \u003c, \u003e and \u0026, as json.Marshal writes them: for text
// that must hash as json.Marshal's output does (the store's content keys).
func AppendHTMLEscapedJSONString(b []byte, s string) []byte { return appendJSONString(b, s, true) }

func appendJSONString(b []byte, s string, html bool) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if !html && i+8 <= len(s) && plainEight(s[i:i+8]) {
			i += 8
			continue
		}
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf && !(html && (c == '<' || c == '>' || c == '&')) {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// plainEight reports whether the eight bytes of w are all printable ASCII
// other than " and \, which AppendJSONString copies as they are. Testing a
// word at a time rather than a byte at a time halves the time of the text
// of a search page (URLs, codes, date-times), nearly all of it plain.
//
// With ones the word of 0x01 bytes and x the word of w, a byte is flagged
// in the top bit of bad when it has its own top bit set (not ASCII), or
// when it is below 0x20, equal to " (0x22) or equal to \ (0x5c): then the
// subtraction of 0x20 from it, or of 1 from it XOR the character, borrows
// into its top bit while its own top bit is clear. A borrow also reaches
// the bytes above one so flagged, but never flags a word in which no byte
// is: below the lowest flagged byte, no subtraction borrows. So bad is
// zero exactly when every byte is plain (TestAppendJSONString puts every
// byte value at every place of a word).
func plainEight(w string) bool {
	_ = w[7]
	x := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
		uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
	const ones, tops = 0x0101010101010101, 0x8080808080808080
	below := x - 0x20*ones
	quote := (x ^ '"'*ones) - ones
	backslash := (x ^ '\\'*ones) - ones
	bad := x | (below|quote|backslash)&^x
	return bad&tops == 0
}
