package domain

import (
	"mime"
	"testing"
)

// TestNativeSystemsAreAbsolute: nativeCode takes the native systems as
// absolute URIs without parsing them, which holds only while they are.
func TestNativeSystemsAreAbsolute(t *testing.T) {
	for _, s := range []string{SystemOpenMHealth, SystemIEEE1752} {
		if !IsAbsoluteURI(s) {
			t.Errorf("%s is not an absolute URI", s)
		}
	}
}

// TestIsJSONMediaType: the shortcut for the exact media type answers as
// parsing it does, for that type and the others.
func TestIsJSONMediaType(t *testing.T) {
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON", "application/json;",
		"application/jsonx", "text/plain", "", "application/json; x", " application/json", "application/fhir+json"} {
		mt, _, err := mime.ParseMediaType(ct)
		if want := err == nil && mt == "application/json"; isJSONMediaType(ct) != want {
			t.Errorf("%q: %v, parsing says %v", ct, !want, want)
		}
	}
}
