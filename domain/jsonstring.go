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
func AppendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
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
