package repo

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
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

// TestClaimBSONIsTheReflectiveDocument: the hand-built claim is byte for
// byte what the driver writes for observationClaimDoc, for odd strings,
// ids and times (before 1970, sub-millisecond).
func TestClaimBSONIsTheReflectiveDocument(t *testing.T) {
	for _, c := range []observationClaimDoc{
		{claimKey("urn:x", "a"), "urn:x", "a", 1, time.Date(2024, 2, 1, 12, 0, 0, 123456789, time.UTC), strings.Repeat("c", 64)},
		{"", "", "", 0, time.Time{}, ""},
		{"k", "é <&> \"x\" \u2028 \xff", "\x00nul", -9223372036854775808, time.Date(1969, 12, 31, 23, 59, 59, 999999000, time.FixedZone("x", 3600)), "\x00"},
		{strings.Repeat("k", 300), contentClaimSystem, strings.Repeat("v", 1000), 1 << 40, time.Unix(1<<33, 1), strings.Repeat("v", 1000)},
	} {
		want, err := bson.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if got := claimBSON(c); !bytes.Equal(got, want) {
			t.Errorf("built %s\nreflected %s", got, bson.Raw(want))
		}
	}
}
