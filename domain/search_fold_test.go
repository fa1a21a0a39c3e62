package domain

import (
	"strings"
	"testing"
)

// FuzzAccentFoldKeepsASCII: accentFold leaves every ASCII string as it
// is, which is why SearchKey skips it for ASCII; and SearchKey of any
// string equals the full fold's.
func FuzzAccentFoldKeepsASCII(f *testing.F) {
	for _, s := range []string{"", "Zoë Ødegård", "  Chalmers\tPeter ", "\x00\x7f~", "Straße", "A\u0301", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if isASCII(s) && accentFold(s) != s {
			t.Errorf("accentFold(%q) = %q, not itself", s, accentFold(s))
		}
		full := strings.Join(strings.Fields(strings.ToLower(accentFold(s))), " ")
		if got := SearchKey(s); got != full {
			t.Errorf("SearchKey(%q) = %q, the full fold %q", s, got, full)
		}
	})
}

// TestSearchKeyASCIIIsTheFullFold: every ASCII string of one or two
// bytes (control characters, upper case, spaces and all) has the key of
// the full fold, so that SearchKey's ASCII path stays right if unaccented
// ever spells an ASCII character or pair (which FuzzAccentFoldKeepsASCII
// only finds by chance outside its seeds).
func TestSearchKeyASCIIIsTheFullFold(t *testing.T) {
	full := func(s string) string { return strings.Join(strings.Fields(strings.ToLower(accentFold(s))), " ") }
	for a := range 128 {
		for b := range 129 {
			s := string(rune(a))
			if b < 128 {
				s += string(rune(b))
			}
			if got, want := SearchKey(s), full(s); got != want {
				t.Fatalf("SearchKey(%q) = %q, the full fold %q", s, got, want)
			}
		}
	}
}
