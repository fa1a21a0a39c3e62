package domain

import (
	"net/url"
	"reflect"
	"testing"
)

// TestOwnQuery: a patient's own view of a recorded query keeps the values
// that name them and those of the parameters that name no one (codes,
// dates, the page's shape and size); every other value, and a query that
// does not parse, is redacted.
func TestOwnQuery(t *testing.T) {
	for _, tc := range []struct{ query, want string }{
		{"", ""},
		{"patient=2,7", "patient=2,(redacted)"},
		{"subject=Patient/7,https://example.org/fhir/Patient/2,Patient/12", "subject=(redacted),https://example.org/fhir/Patient/2,(redacted)"},
		{"code=8867-4&date=ge2024-01-01&_count=20&_sort=-date&_elements=id,code", "code=8867-4&date=ge2024-01-01&_count=20&_sort=-date&_elements=id,code"},
		{"code:text=heart&name=Smith&patient.identifier=mrn|A-1", "code:text=(redacted)&name=(redacted)&patient.identifier=(redacted)"},
		{"patient=2%3B7&x=%zz", "(redacted)"},
	} {
		got := ownQuery(tc.query, 2)
		if tc.want == "(redacted)" || tc.want == "" {
			if got != tc.want {
				t.Errorf("ownQuery(%q) = %q, want %q", tc.query, got, tc.want)
			}
			continue
		}
		gotValues, _ := url.ParseQuery(got)
		wantValues, _ := url.ParseQuery(tc.want)
		if !reflect.DeepEqual(gotValues, wantValues) {
			t.Errorf("ownQuery(%q) = %q, want %q", tc.query, got, tc.want)
		}
	}
}
