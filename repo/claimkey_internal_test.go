package repo

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
)

// TestClaimKeyFormula: claimKey hashes exactly the text it always hashed
// (stored claims are found by it), for short keys and for keys longer
// than its buffer on the stack.
func TestClaimKeyFormula(t *testing.T) {
	long := strings.Repeat("x|y", 200)
	for _, c := range [][2]string{{"", ""}, {"urn:a", "1"}, {"a|b", "c"}, {"a", "b|c"}, {"email", "é@example.org"}, {long, "v"}, {"s", long}, {long, long}} {
		sum := sha256.Sum256(fmt.Appendf(nil, "%d:%s|%s", len(c[0]), c[0], c[1]))
		if got, want := claimKey(c[0], c[1]), hex.EncodeToString(sum[:]); got != want {
			t.Errorf("claimKey(%.20q, %.20q) = %s, want %s", c[0], c[1], got, want)
		}
	}
}
