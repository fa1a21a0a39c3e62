package repo

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
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

// reflectiveContent is observationContent as it was first written, with
// encoding/json: what the claims stored since hash.
func reflectiveContent(o *domain.Observation) string {
	nonEmpty := func(v any, n int) any {
		if n == 0 {
			return nil
		}
		return v
	}
	h := sha256.New()
	_ = json.NewEncoder(h).Encode([]any{o.PatientID, o.DataSourceID, o.Status, nonEmpty(o.Codings, len(o.Codings)),
		nonEmpty(o.Identifiers, len(o.Identifiers)), o.ContentType, o.Payload})
	return hex.EncodeToString(h.Sum(nil))
}

// TestObservationContentIsTheReflectiveHash: the hand-written line hashes
// as encoding/json's did, for strings of every kind of character, empty
// and missing lists, and missing, empty and binary payloads.
func TestObservationContentIsTheReflectiveHash(t *testing.T) {
	odd := "é <&> \"x\" \\ \b\f\n\r\t\x00\x1f\x7f \u2028\u2029 \xff\xfe 🙂 \U0010ffff"
	for _, o := range []*domain.Observation{
		{},
		{PatientID: 1, DataSourceID: 2, Status: "final", ContentType: "application/json", Payload: []byte(`{"a":1}`),
			Codings:     []domain.Coding{{System: domain.SystemOpenMHealth, Code: "omh:heart-rate:2.0", Display: "Heart rate"}},
			Identifiers: []domain.Identifier{{System: "urn:x", Value: "a"}, {System: "urn:y", Value: "b"}}},
		{PatientID: -9223372036854775808, DataSourceID: 9223372036854775807, Status: odd, ContentType: odd, Payload: []byte{},
			Codings: []domain.Coding{{System: odd, Code: odd, Display: odd}, {}}, Identifiers: []domain.Identifier{}},
		{Payload: []byte{0, 1, 2, 0xff, 0xfe}, Codings: []domain.Coding{}, Identifiers: []domain.Identifier{{System: odd, Value: odd}}},
	} {
		if got, want := observationContent(o), reflectiveContent(o); got != want {
			t.Errorf("%+v: %s, want %s (the line %q)", o, got, want, appendContent(nil, o))
		}
	}
}

// FuzzObservationContent compares the hand-written line's hash with the
// reflective one for any strings, ids and payload.
func FuzzObservationContent(f *testing.F) {
	f.Add(int64(1), "final", "urn:x", "a", "Heart rate", []byte(`{}`))
	f.Add(int64(-1), "\u2028<&>\xff", "\x00", "\"\\", "\b\f", []byte(nil))
	f.Fuzz(func(t *testing.T, id int64, status, system, value, display string, payload []byte) {
		o := &domain.Observation{PatientID: id, DataSourceID: id / 3, Status: status, ContentType: display, Payload: payload,
			Codings: []domain.Coding{{System: system, Code: value, Display: display}}, Identifiers: []domain.Identifier{{System: system, Value: value}}}
		if value == "" {
			o.Identifiers = nil
		}
		if got, want := observationContent(o), reflectiveContent(o); got != want {
			t.Fatalf("%+v: %s, want %s", o, got, want)
		}
	})
}
