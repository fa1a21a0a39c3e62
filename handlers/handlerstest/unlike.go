package handlerstest

import (
	"fmt"
	"regexp"
	"strings"
)

// pieces splits an answer into the parts Unlike compares: lines, and the
// members of JSON on one line.
var pieces = regexp.MustCompile(`[\n,]`)

// Unlike reports what tells two answers apart once the value each request
// was sent with is left out (an id that exists and one that does not):
// "" when nothing does. The answers are compared piece by piece (lines,
// JSON members): equal pieces are equal whatever they hold, so that a
// short id needs no care elsewhere; pieces that differ must agree once
// each one's value is replaced by a placeholder.
func Unlike(a, b, aValue, bValue string) string {
	pa, pb := pieces.Split(a, -1), pieces.Split(b, -1)
	if len(pa) != len(pb) {
		return fmt.Sprintf("%d pieces and %d:\n%s\n%s", len(pa), len(pb), a, b)
	}
	// A value stands alone: not inside a word, a number or an address
	// (127.0.0.1 holds no id 1).
	alone := func(v string) *regexp.Regexp {
		return regexp.MustCompile(`(^|[^\w.])` + regexp.QuoteMeta(v) + `($|[^\w.])`)
	}
	ra, rb := alone(aValue), alone(bValue)
	for i := range pa {
		if pa[i] == pb[i] {
			continue
		}
		if x, y := ra.ReplaceAllString(pa[i], "${1}{v}${2}"), rb.ReplaceAllString(pb[i], "${1}{v}${2}"); x != y {
			return fmt.Sprintf("%q and %q", strings.TrimSpace(x), strings.TrimSpace(y))
		}
	}
	return ""
}
