package fhirsearch

import (
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"exchange/domain"
)

// Page sizes.
const (
	DefaultCount = 50
	MaxCount     = 1000
)

// CursorParam is the query parameter that carries the keyset cursor of a
// next page.
const CursorParam = "_cursor"

// Translator parses searches and signs the cursors of their pages.
type Translator struct {
	key []byte
	now func() time.Time
}

// NewTranslator returns a Translator that signs cursors with key. now is the
// clock of the "ap" (approximately) comparator; nil means time.Now.
func NewTranslator(key []byte, now func() time.Time) *Translator {
	if now == nil {
		now = time.Now
	}
	return &Translator{key: key, now: now}
}

// Clause is one search parameter of a query with its values, which are
// OR'ed; the clauses of a query are AND'ed.
type Clause struct {
	Param  *Param
	Tokens []Token
	Dates  []DateRange
	// Strings are folded values (domain.SearchKey) of a string parameter.
	Strings []string
	// IDs of _id; an _id that cannot be native leaves the list short, and
	// an empty list matches nothing.
	IDs []int64
}

// Source is the _source parameter, which selects a store.
type Source struct {
	Value string
	Below bool // _source:below
}

// Query is a parsed search on one resource type.
type Query struct {
	t        *Translator
	resource *Resource
	clauses  []Clause
	joins    []domain.Join
	sort     *SortKey
	desc     bool
	count    int
	// summaryCount: _summary=count, the total only.
	summaryCount bool
	total        bool
	elements     []string
	source       *Source
	after        *cursor
	unknown      []string
	// canonical is the query without paging parameters, which a cursor is
	// bound to.
	canonical string
}

// ignoredParams are parameters of the request, not of the search.
var ignoredParams = []string{"_format", "_pretty", CursorParam}

var elementName = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9]*(\[x\])?$`)

// Parse reads a search of resourceType from its query parameters. Unknown
// parameters are listed by Unknown, or refused (400) when strict. A
// malformed value is a domain.CodeInvalid error naming its parameter.
func (t *Translator) Parse(resourceType string, query url.Values, strict bool) (*Query, error) {
	r, ok := Lookup(resourceType)
	if !ok {
		return nil, domain.Errorf(domain.CodeNotSupported, "%s is not a resource type the native store serves", resourceType)
	}
	q := &Query{t: t, resource: r, count: DefaultCount}
	keys := make([]string, 0, len(query))
	for k := range query {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		if slices.Contains(ignoredParams, key) {
			continue
		}
		name, modifier, _ := strings.Cut(key, ":")
		if strings.HasPrefix(key, "_has:") || strings.HasPrefix(key, "patient._has:") {
			name, modifier = key, ""
		}
		p, ok := r.param(name)
		if !ok {
			if strict {
				return nil, domain.Errorf(domain.CodeInvalid, "%s: %s does not support this search parameter", key, r.Type)
			}
			q.unknown = append(q.unknown, key)
			continue
		}
		if modifier != "" && !(name == "_source" && modifier == "below") {
			return nil, domain.Errorf(domain.CodeInvalid, "%s: the modifier :%s is not supported", key, modifier)
		}
		for _, v := range query[key] {
			if err := q.add(p, modifier, v); err != nil {
				return nil, err
			}
		}
	}
	canonical := url.Values{"_type": {r.Type}}
	for k, v := range query {
		if k != CursorParam && k != "_format" && k != "_pretty" {
			canonical[k] = v
		}
	}
	q.canonical = canonical.Encode()
	if c := query.Get(CursorParam); c != "" {
		cur, err := t.openCursor(c, q)
		if err != nil {
			return nil, err
		}
		q.after = cur
	}
	return q, nil
}

// add adds one occurrence of a parameter (its values OR'ed).
func (q *Query) add(p *Param, modifier, v string) error {
	if p.control {
		return q.control(p.Name, v)
	}
	if p.Name == "_source" {
		q.source = &Source{Value: v, Below: modifier == "below"}
		return nil
	}
	values := splitOR(v)
	if p.Join != "" {
		return q.addJoin(p, values)
	}
	c := Clause{Param: p}
	for _, value := range values {
		switch {
		case p.Name == "_id":
			if id, ok := parseID(unescapePipes(value), ""); ok {
				c.IDs = append(c.IDs, id)
			}
		case p.Type == TypeToken:
			tok, err := parseToken(p.Name, value)
			if err != nil {
				return err
			}
			c.Tokens = append(c.Tokens, tok)
		case p.Type == TypeDate:
			d, err := parseDate(p.Name, value)
			if err != nil {
				return err
			}
			c.Dates = append(c.Dates, d)
		case p.Type == TypeString:
			key := domain.SearchKey(unescapePipes(value))
			if key == "" {
				return domain.Errorf(domain.CodeInvalid, "%s: an empty value", p.Name)
			}
			c.Strings = append(c.Strings, key)
		}
	}
	if p.Name == "_id" && c.IDs == nil {
		c.IDs = []int64{}
	}
	q.clauses = append(q.clauses, c)
	return nil
}

func (q *Query) addJoin(p *Param, values []string) error {
	j := domain.Join{Kind: p.Join}
	target := map[domain.JoinKind]string{domain.JoinPatient: "Patient", domain.JoinPatientOrganization: "Organization",
		domain.JoinStudy: "Group", domain.JoinPatientStudy: "Group"}[p.Join]
	for _, v := range values {
		v = unescapePipes(v)
		if p.Join == domain.JoinPatientIdentifier {
			tok, err := parseToken(p.Name, v)
			if err != nil {
				return err
			}
			if !tok.HasSystem || tok.System == "" || tok.Code == "" {
				return domain.Errorf(domain.CodeInvalid, "%s: %q is not system|value", p.Name, v)
			}
			j.Identifiers = append(j.Identifiers, domain.Identifier{System: tok.System, Value: tok.Code})
			continue
		}
		if v == "" {
			return domain.Errorf(domain.CodeInvalid, "%s: an empty value", p.Name)
		}
		if id, ok := parseID(v, target); ok {
			j.IDs = append(j.IDs, id)
		}
	}
	q.joins = append(q.joins, j)
	return nil
}

// control reads the parameters that shape the result.
func (q *Query) control(name, v string) error {
	switch name {
	case "_count":
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > MaxCount {
			return domain.Errorf(domain.CodeInvalid, "_count: %q is not a page size (0 to %d)", v, MaxCount)
		}
		q.count = n
	case "_summary":
		switch v {
		case "count":
			q.summaryCount = true
		case "false":
		default:
			return domain.Errorf(domain.CodeInvalid, "_summary: only count (and false) are supported, not %q", v)
		}
	case "_total":
		switch v {
		case "accurate":
			q.total = true
		case "none", "estimate":
		default:
			return domain.Errorf(domain.CodeInvalid, "_total: %q is not none, estimate or accurate", v)
		}
	case "_elements":
		for _, e := range strings.Split(v, ",") {
			if e = strings.TrimSpace(e); !elementName.MatchString(e) {
				return domain.Errorf(domain.CodeInvalid, "_elements: %q is not an element name", e)
			}
			q.elements = append(q.elements, e)
		}
	case "_sort":
		if strings.Contains(v, ",") {
			return domain.Errorf(domain.CodeInvalid, "_sort: one sort key is supported (ties are broken by id)")
		}
		key, desc := strings.CutPrefix(v, "-")
		s, ok := q.resource.sortKey(key)
		if !ok {
			return domain.Errorf(domain.CodeInvalid, "_sort: %s cannot be sorted by %q", q.resource.Type, key)
		}
		q.sort, q.desc = s, desc
	}
	return nil
}

// ResourceType returns the searched type.
func (q *Query) ResourceType() string { return q.resource.Type }

// Joins returns the parameters the domain resolves.
func (q *Query) Joins() []domain.Join { return q.joins }

// Unknown returns the parameters the search ignored.
func (q *Query) Unknown() []string { return q.unknown }

// SummaryCount reports whether only the total is wanted (_summary=count).
func (q *Query) SummaryCount() bool { return q.summaryCount }

// Elements returns the elements asked for with _elements (none: all).
func (q *Query) Elements() []string { return q.elements }

// Source returns the _source parameter, if given.
func (q *Query) Source() *Source { return q.source }

// Count returns the page size.
func (q *Query) Count() int { return q.count }
