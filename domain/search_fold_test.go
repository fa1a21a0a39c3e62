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
