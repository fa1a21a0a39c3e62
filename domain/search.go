package domain

import (
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/runes"
	"golang.org/x/text/transform"
	"golang.org/x/text/unicode/norm"
)

// unaccented spells the letters that NFD leaves whole (no combining mark
// to remove) in ASCII. A Replacer is safe for concurrent use.
var unaccented = strings.NewReplacer("ø", "o", "Ø", "o", "æ", "ae", "Æ", "ae", "ß", "ss", "ł", "l", "Ł", "l", "đ", "d", "Đ", "d")

// SearchKey folds a string for case- and accent-insensitive prefix search,
// as FHIR string search asks: "Zoë Ødegård" becomes "zoe odegard". Stored
// names carry their keys, so a prefix match is an anchored, case-sensitive
// regular expression that MongoDB answers from an index.
func SearchKey(s string) string {
	folded := s
	// ASCII is its own NFD and NFC and holds no combining mark and no
	// letter of unaccented: accentFold leaves it as it is
	// (FuzzAccentFoldKeepsASCII), so an ASCII string, as most are, skips
	// the transform chain, whose buffers made SearchKey most of the
	// bytes an import allocates to index.
	if !isASCII(s) {
		folded = accentFold(s)
	}
	return strings.Join(strings.Fields(strings.ToLower(folded)), " ")
}

// accentFold removes the accents of s: the combining marks NFD splits
// off, and the letters unaccented spells in ASCII.
func accentFold(s string) string {
	t := transform.Chain(norm.NFD, runes.Remove(runes.In(unicode.Mn)), norm.NFC)
	folded, _, err := transform.String(t, s)
	if err != nil {
		folded = s
	}
	return unaccented.Replace(folded)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// JoinKind names a search parameter whose values name other entities: the
// domain resolves it into the ids a search may return, because answering
// it needs joins the database does not do (enrollment, consent,
// membership) and the permission model.
type JoinKind string

// The joins of native searches.
const (
	JoinPatient             JoinKind = "patient"
	JoinPatientOrganization JoinKind = "patient.organization"
	JoinPatientIdentifier   JoinKind = "patient.identifier"
	JoinPatientStudy        JoinKind = "patient._has:Group:member:_id"
	JoinStudy               JoinKind = "_has:Group:member:_id"
)

// Join is one joined search parameter with its values, which are OR'ed;
// several joins are AND'ed. Values that cannot name a native entity (a
// UUID where an integer id belongs) are dropped by the parser: a join
// without values matches nothing.
type Join struct {
	Kind        JoinKind
	IDs         []int64
	Identifiers []Identifier
}

// Scope is what a search may return, as the domain resolved it from the
// caller and the joins.
type Scope struct {
	// PatientIDs limits observations to these patients; nil: any patient.
	PatientIDs []int64
	// Codes limits each listed patient's observations to these native codes
	// (what the patient consented to share with a searched study). nil: no
	// limit.
	Codes map[int64][]string
	// IDs limits a projection (Patient, Practitioner, ...) to these ids;
	// nil: any.
	IDs []int64
	// SourceIDs limits an imported-store search to these FHIR sources (what
	// the caller may read); PatientIDs then selects resources of those
	// patients' sources or referring to them.
	SourceIDs []int64
	// Reach is what the token's scopes let the search return: a record
	// must meet one of these alternatives. nil: no limit; empty: nothing.
	Reach []Reach
}

// Reach is what one scope of a token lets a search return: records of its
// patient context (PatientIDs, for observations and imported resources;
// IDs, for the projections related to the patient) that match its search
// constraints. nil fields do not limit.
type Reach struct {
	PatientIDs  []int64
	IDs         []int64
	Constraints []ScopeConstraint
}

// within narrows the scope to the token's reach. One alternative (the
// usual case) folds into the scope's own id lists, where the planner puts
// them on the index; several stay alternatives of the plan.
func (sc Scope) within(reach []Reach) Scope {
	if len(reach) != 1 {
		sc.Reach = reach
		return sc
	}
	r := reach[0]
	if r.PatientIDs != nil {
		sc.PatientIDs = intersect(sc.PatientIDs, r.PatientIDs)
	}
	if r.IDs != nil {
		sc.IDs = intersect(sc.IDs, r.IDs)
	}
	if len(r.Constraints) > 0 {
		sc.Reach = []Reach{{Constraints: r.Constraints}}
	}
	return sc
}

// Search is a parsed FHIR search over the native store; package fhirsearch
// makes them. The domain reads its joins, resolves them into a Scope, and
// hands the plan it gets back to the store without reading it.
type Search interface {
	// ResourceType is the searched type.
	ResourceType() string
	// Interaction is InteractionSearch, or InteractionRead for a read
	// answered as a search for one id (see IDSearches).
	Interaction() Interactions
	// String is the query string as asked, without paging parameters.
	String() string
	// Store says which store the search reads.
	Store() StoreSelection
	Joins() []Join
	// Plan translates the search, narrowed to scope, into what the store
	// runs.
	Plan(scope Scope) (*SearchPlan, error)
}

// IDSearches makes the search for one record that a read under a
// narrowing token runs, so that reads and searches reach the same records;
// *fhirsearch.Translator is one.
type IDSearches interface {
	// ByID returns the read of resourceType/id as a search: of the imported
	// store for an imported id, else of the native store.
	ByID(resourceType, id string) (Search, error)
}

// SearchPlan is a search ready to run: opaque to the domain.
type SearchPlan struct {
	Collection string
	// Pipeline fetches the page (one entry more than the page size, to know
	// whether another page follows); nil when no entries are wanted.
	Pipeline []any
	// Filter is the condition of the whole result, for counting; nil when
	// no count is wanted.
	Filter   any
	PageSize int
}

// SearchResult is one page of a search.
type SearchResult[T any] struct {
	Items []T
	// More says whether another page follows.
	More bool
	// Total is the size of the whole result, when it was asked for.
	Total *int64
}

// Records without a date sort last in both directions: their ascending
// sort key is the largest date and their descending one the smallest.
var (
	SortLastAscending  = time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC)
	SortLastDescending = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
)

// ResourceIndex is the search index of an imported resource, extracted
// when it is written (package fhirsearch knows how).
type ResourceIndex struct {
	// Keys are "param|key" strings: tokens, folded strings, references.
	Keys []string
	// Dates are the spans of the date parameters.
	Dates map[string]Span
	// Numbers are the spans of the number and quantity parameters.
	Numbers map[string]NumberSpan
	// SortDate is where the resource sorts by date; nil: no date.
	SortDate *time.Time
}

// Span is a closed range of time.
type Span struct {
	Start, End time.Time
}

// NumberSpan is a closed range of numbers: the smallest and the largest
// value of a parameter.
type NumberSpan struct {
	Low, High float64
}

// StoreKind says which store a search reads.
type StoreKind int

// The stores a search can select with _source.
const (
	StoreNative   StoreKind = iota // _source omitted
	StoreImported                  // a FHIR source, or all the caller may read
	StoreNone                      // a _source that names no store: an empty result
)

// StoreSelection is the store a search reads: for the imported store, one
// FHIR source (SourceID) or every source the caller may read (0).
type StoreSelection struct {
	Kind     StoreKind
	SourceID int64
}
