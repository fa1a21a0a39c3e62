package domain

import (
	"strconv"
	"strings"
	"testing"
)

// FuzzParseID: an id parses exactly when it is the canonical spelling of
// a positive integer, and to that integer.
func FuzzParseID(f *testing.F) {
	for _, seed := range []string{"1", "01", "+1", "-1", "1.0", " 1", "1 ", "0x1", "1_0", "9223372036854775807", "9223372036854775808", "0", "", "١"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, ok := ParseID(s)
		canonical := id > 0 && strconv.FormatInt(id, 10) == s
		if ok != canonical {
			t.Fatalf("ParseID(%q) = %d, %v", s, id, ok)
		}
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 && strconv.FormatInt(n, 10) == s && !ok {
			t.Fatalf("ParseID(%q) refused a canonical id", s)
		}
	})
}

// FuzzTextLimit: Check counts characters, never bytes, and refuses NUL.
func FuzzTextLimit(f *testing.F) {
	for _, seed := range []string{"", "abc", "ééé", "\xff\xfe", strings.Repeat("é", 201), "Jo\x00", "\x00"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		chars := len([]rune(s))
		if err := LimitName.Check("name", s); (err != nil) != (chars > LimitName.Max || strings.Contains(s, "\x00")) {
			t.Fatalf("%d characters: %v", chars, err)
		}
	})
}

// FuzzUpstreamID: an upstream id is taken exactly when it is 1 to 1,000
// characters without control characters or surrounding whitespace.
func FuzzUpstreamID(f *testing.F) {
	for _, seed := range []string{"a", "a\x00b", " a", "a\n", "urn:x/y_z", strings.Repeat("c", 1001), "\u2028"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := checkUpstreamID("Condition.id", id)
		ok := id != "" && len([]rune(id)) <= 1000 && id == strings.TrimSpace(id) &&
			!strings.ContainsFunc(id, func(r rune) bool { return r < 0x20 || (r >= 0x7f && r < 0xa0) })
		if (err == nil) != ok {
			t.Fatalf("%q: %v", id, err)
		}
	})
}
