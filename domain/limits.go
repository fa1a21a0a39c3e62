package domain

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// The bounds of what the service stores from its admin API and OAuth client
// registrations: every string field has a kind, and each kind one maximum
// length, in characters (Unicode code points); every list one maximum
// number of items. Beyond them a write is CodeInvalid naming the field.
// Without them a string or list as large as a request body (64 MiB) would
// reach the database, whose documents stop at 16 MiB (a 17 MiB family name
// was a 500), and lists would cost time quadratic in their length.
// docs/api.md documents this table; keep the two in step.
var (
	// LimitName: names of people (first, last, family, each given name),
	// organizations, studies, data sources and OAuth clients; FHIR source
	// labels; scope code texts.
	LimitName = TextLimit{Kind: "a name", Max: 200}
	// LimitEmail: email addresses (RFC 5321: 64 for the local part, @, 255
	// for the domain).
	LimitEmail = TextLimit{Kind: "an email address", Max: 320}
	// LimitIdentifier: identifier systems and values, coding systems and
	// codes, phone numbers, OAuth client ids and the scopes a client may
	// request.
	LimitIdentifier = TextLimit{Kind: "an identifier", Max: 1_000}
	// LimitSecret: passwords and OAuth client secrets.
	LimitSecret = TextLimit{Kind: "a password or secret", Max: 1_000}
	// LimitURL: URLs (a study's icon, redirect URIs, allowed origins).
	LimitURL = TextLimit{Kind: "a URL", Max: 2_000}
	// LimitDescription: free text (a study's description).
	LimitDescription = TextLimit{Kind: "a description", Max: 10_000}
)

// MaxListItems bounds every list of an input: given names, identifiers,
// organization ids, patient ids, scope code ids, consents, redirect URIs,
// client scopes.
const MaxListItems = 1_000

// TextLimit is the maximum length of a kind of string field.
type TextLimit struct {
	Kind string // what the error calls it, with its article: "a name"
	Max  int    // characters
}

// Check returns a CodeInvalid error naming field when s is longer than
// the limit, or holds a NUL character: no name, identifier or other text
// of ours has one, and one cut short where a C string ends (a log line, a
// spreadsheet, a driver) would read as another value.
func (l TextLimit) Check(field, s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return FieldErrorf(field, "contains a NUL character (U+0000), which %s may not hold", l.Kind)
	}
	if len(s) <= l.Max { // bytes bound characters: the common case costs no count
		return nil
	}
	if n := utf8.RuneCountInString(s); n > l.Max {
		return FieldErrorf(field, "is %d characters long; %s has at most %d", n, l.Kind, l.Max)
	}
	return nil
}

// CheckAll checks each string of a list (field[i]) and the list's length.
func (l TextLimit) CheckAll(field string, ss []string) error {
	if err := CheckItems(field, len(ss)); err != nil {
		return err
	}
	for i, s := range ss {
		if err := l.Check(fmt.Sprintf("%s[%d]", field, i), s); err != nil {
			return err
		}
	}
	return nil
}

// CheckItems returns a CodeInvalid error naming field when a list has more
// than MaxListItems items.
func CheckItems(field string, n int) error {
	if n > MaxListItems {
		return FieldErrorf(field, "has %d items; a list holds at most %d", n, MaxListItems)
	}
	return nil
}

// checkTexts checks fields of one kind: pairs of field name and value.
func (l TextLimit) checkTexts(fieldValues ...string) error {
	for i := 0; i+1 < len(fieldValues); i += 2 {
		if err := l.Check(fieldValues[i], fieldValues[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// StoreCapacity says that the store holds more observations than it
// serves comfortably (the embedded database past its size): staff see it on
// the console's home page, and /ready names it.
type StoreCapacity struct {
	Observations, Comfortable int64
}
