package domain

import (
	"strings"
	"unicode"

	"golang.org/x/text/runes"
	"golang.org/x/text/transform"
	"golang.org/x/text/unicode/norm"
)

// SearchKey folds a string for case- and accent-insensitive prefix search,
// as FHIR string search asks: "Zoë Ødegård" becomes "zoe odegard". Stored
// names carry their keys, so a prefix match is an anchored, case-sensitive
// regular expression that MongoDB answers from an index.
func SearchKey(s string) string {
	t := transform.Chain(norm.NFD, runes.Remove(runes.In(unicode.Mn)), norm.NFC)
	folded, _, err := transform.String(t, s)
	if err != nil {
		folded = s
	}
	folded = strings.NewReplacer("ø", "o", "Ø", "o", "æ", "ae", "Æ", "ae", "ß", "ss", "ł", "l", "Ł", "l", "đ", "d", "Đ", "d").Replace(folded)
	return strings.Join(strings.Fields(strings.ToLower(folded)), " ")
}
