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
	catalog    *Catalog
	key        []byte
	sourceBase string
	now        func() time.Time
}

// NewTranslator returns a Translator of searches on the catalog's types
// that signs cursors with key and reads _source values under sourceBase
// (FHIR_SOURCE_BASE: a FHIR source is {sourceBase}/<id>). now is the clock
// of the "ap" (approximately) comparator; nil means time.Now.
func NewTranslator(catalog *Catalog, key []byte, sourceBase string, now func() time.Time) *Translator {
	if now == nil {
		now = time.Now
	}
	return &Translator{catalog: catalog, key: key, sourceBase: strings.TrimRight(sourceBase, "/"), now: now}
}

// Catalog returns the types the translator searches.
func (t *Translator) Catalog() *Catalog { return t.catalog }

// Clause is one search parameter of a query with its values, which are
// OR'ed; the clauses of a query are AND'ed.
type Clause struct {
	Param  *Param
	Tokens []Token
	Dates  []DateRange
	// Strings are folded values (domain.SearchKey) of a string parameter.
	Strings []string
	// IDs of _id in the native store; an _id that cannot be native leaves
	// the list short, and an empty list matches nothing.
	IDs []int64
	// References of a reference parameter, as Type/id or id.
	References []string
	// URIs of a uri parameter, as written.
	URIs []string
	// Numbers of a number or quantity parameter.
	Numbers []NumberValue
	// UUIDs are the _id values of an imported-store search.
	UUIDs []string
}

// Query is a parsed search on one resource type.
type Query struct {
	t        *Translator
	resource *Resource
	clauses  []Clause
	joins    []domain.Join
	// patientRefs are the values of patient= on the imported store, as
	// references (Patient/<id> or <id>): besides the exchange's patients
	// they name, a resource that refers to one matches, in the form the
	// store holds or the form its source wrote (importedPatientCondition).
	patientRefs []string
	sort        *SortKey
	desc        bool
	count       int
	// summaryCount: _summary=count, the total only.
	summaryCount bool
	total        bool
	elements     []string
	store        domain.StoreSelection
	after        *cursor
	unknown      []string
	// asked is the query without ignoredParams (the page cursor, _format,
	// _pretty; _count stays); canonical adds the type, and is what a
	// cursor is bound to.
	asked, canonical string
	// read marks the search for one id that answers a read (ByID).
	read bool
	// stream marks the search of an export's part (ExportSearch): its
	// plan reads the whole result, in no order.
	stream bool
	// alternatives are an export's type filters: a record must match the
	// clauses of one of them (none: no filter).
	alternatives [][]Clause
}

// ignoredParams are parameters of the request, not of the search.
var ignoredParams = []string{"_format", "_pretty", CursorParam}

var elementName = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9]*(\[x\])?$`)

// Parse reads a search of resourceType from its query parameters. Unknown
// parameters are listed by Unknown, or refused (400) when strict. A
// malformed value is a domain.CodeInvalid error naming its parameter.
func (t *Translator) Parse(resourceType string, query url.Values, strict bool) (*Query, error) {
	r, err := t.catalog.Require(resourceType)
	if err != nil {
		return nil, err
	}
	q := &Query{t: t, resource: r, count: DefaultCount, store: t.selectStore(query)}
	if q.store.Kind == domain.StoreNative && !r.Native() {
		// Nothing to find, but the parameters are checked as the
		// imported store's: _source is what the caller forgot.
		q.store.Kind = domain.StoreNone
	}
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
		if name == "_source" {
			continue // read by selectStore
		}
		if !p.appliesTo(q.store.Kind) && q.store.Kind != domain.StoreNone {
			if strict {
				return nil, domain.Errorf(domain.CodeInvalid, "%s: this parameter does not apply to the %s store", key, storeName(q.store.Kind))
			}
			q.unknown = append(q.unknown, key)
			continue
		}
		for _, v := range query[key] {
			if err := q.add(p, modifier, v); err != nil {
				return nil, err
			}
		}
	}
	asked := url.Values{}
	for k, v := range query {
		if !slices.Contains(ignoredParams, k) {
			asked[k] = v
		}
	}
	q.asked = asked.Encode()
	q.defaultSort()
	q.boundedSort()
	asked.Set("_type", r.Type)
	q.canonical = asked.Encode()
	if c := query.Get(CursorParam); c != "" {
		cur, err := t.openCursor(c, q)
		if err != nil {
			return nil, err
		}
		q.after = cur
	}
	return q, nil
}

// selectStore reads _source: omitted, the native store; exactly
// {base}/<id>, that FHIR source; :below {base}/, every FHIR source the
// caller may read; anything else names no store.
func (t *Translator) selectStore(query url.Values) domain.StoreSelection {
	exact, below := query["_source"], query["_source:below"]
	if len(exact) == 0 && len(below) == 0 {
		return domain.StoreSelection{Kind: domain.StoreNative}
	}
	if len(exact)+len(below) == 1 {
		if len(exact) == 1 {
			if id, ok := domain.ParseSourceURI(t.sourceBase, exact[0]); ok {
				return domain.StoreSelection{Kind: domain.StoreImported, SourceID: id}
			}
		} else if below[0] == t.sourceBase || below[0] == t.sourceBase+"/" {
			return domain.StoreSelection{Kind: domain.StoreImported}
		}
	}
	return domain.StoreSelection{Kind: domain.StoreNone}
}

func storeName(k domain.StoreKind) string {
	if k == domain.StoreImported {
		return "imported"
	}
	return "native"
}

// add adds one occurrence of a parameter (its values OR'ed).
// MaxValues bounds the comma-separated values of one parameter.
const MaxValues = 100

func (q *Query) add(p *Param, modifier, v string) error {
	if p.control {
		return q.control(p.Name, v)
	}
	values := splitOR(v)
	if len(values) > MaxValues {
		return domain.Errorf(domain.CodeInvalid, "%s: %d values; at most %d are taken (each one of patient, study or organization is a lookup)", p.Name, len(values), MaxValues)
	}
	if p.Join != "" && !(q.store.Kind == domain.StoreImported && p.Join != domain.JoinPatient) {
		return q.addJoin(p, values)
	}
	c := Clause{Param: p}
	for _, value := range values {
		switch {
		case p.Name == "_id" && q.store.Kind == domain.StoreImported:
			c.UUIDs = append(c.UUIDs, unescapePipes(value))
		case p.Name == "_id":
			if id, ok := parseID(unescapePipes(value), ""); ok {
				c.IDs = append(c.IDs, id)
			}
		case p.Type == TypeReference:
			ref := unescapePipes(value)
			if ref == "" {
				return domain.Errorf(domain.CodeInvalid, "%s: an empty value", p.Name)
			}
			if typ, id, ok := typeAndID(ref); ok {
				ref = typ + "/" + id
			}
			c.References = append(c.References, ref)
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
		case p.Type == TypeURI:
			uri := unescapePipes(value)
			if uri == "" {
				return domain.Errorf(domain.CodeInvalid, "%s: an empty value", p.Name)
			}
			c.URIs = append(c.URIs, uri)
		case p.Type == TypeNumber, p.Type == TypeQuantity:
			n, err := parseNumber(p.Name, value, p.Type == TypeQuantity)
			if err != nil {
				return err
			}
			c.Numbers = append(c.Numbers, n)
		}
	}
	if p.Name == "_id" && c.IDs == nil && c.UUIDs == nil {
		c.IDs, c.UUIDs = []int64{}, []string{}
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
		if p.Join == domain.JoinPatient && q.store.Kind == domain.StoreImported {
			ref := v
			if typ, id, ok := typeAndID(v); ok {
				ref = typ + "/" + id
			}
			q.patientRefs = append(q.patientRefs, ref)
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
		s, ok := q.resource.sortKey(key, q.store.Kind)
		if !ok {
			return domain.Errorf(domain.CodeInvalid, "_sort: %s cannot be sorted by %q", q.resource.Type, key)
		}
		q.sort, q.desc = s, desc
	}
	return nil
}

// ByID returns the read of resourceType/id as a search for that id:
// the imported store's for an imported id (a UUID), else the native
// store's. It implements domain.IDSearches: the domain runs it to decide
// whether a token whose scopes narrow reads reaches the record.
func (t *Translator) ByID(resourceType, id string) (domain.Search, error) {
	query := url.Values{"_id": {id}, "_count": {"1"}}
	if domain.IsResourceID(id) {
		query.Set("_source:below", t.sourceBase+"/")
	}
	q, err := t.Parse(resourceType, query, true)
	if err != nil {
		return nil, err
	}
	q.read = true
	return q, nil
}

// ExportSearch parses the search of a part of a bulk export: the type's
// query, and the export's type filters for it, of which a record must
// match one (each is parsed in the query's store, strictly: an unknown
// parameter is an error; a filter may not join other records). Its plan
// streams the whole result, without sort or page. It implements
// domain.ExportSearches.
func (t *Translator) ExportSearch(resourceType string, query url.Values, filters []url.Values) (domain.Search, error) {
	q, err := t.Parse(resourceType, query, true)
	if err != nil {
		return nil, err
	}
	for _, f := range filters {
		in := url.Values{}
		for k, v := range f {
			in[k] = v
		}
		for _, k := range []string{"_source", "_source:below"} {
			if v, ok := query[k]; ok {
				in[k] = v
			}
		}
		fq, err := t.Parse(resourceType, in, true)
		if err != nil {
			return nil, err
		}
		if len(fq.joins) > 0 {
			return nil, domain.Errorf(domain.CodeInvalid, "a type filter may not name patients, organizations or studies")
		}
		q.alternatives = append(q.alternatives, fq.clauses)
	}
	q.stream = true
	return q, nil
}

// ImportedType reports whether the imported store keeps the type, and
// whether it has a patient parameter there: whether it is in the Patient
// compartment. It implements domain.ExportSearches.
func (t *Translator) ImportedType(resourceType string) (ok, patient bool) {
	if !t.catalog.Keeps(resourceType) {
		return false, false
	}
	r, _ := t.catalog.Lookup(resourceType)
	p, has := r.param("patient")
	return true, has && p.appliesTo(domain.StoreImported)
}

// ResourceType returns the searched type.
func (q *Query) ResourceType() string { return q.resource.Type }

// Interaction is what the search does, as scopes name it: a search, or a
// read when it stands for one (ByID).
func (q *Query) Interaction() domain.Interactions {
	if q.read {
		return domain.InteractionRead
	}
	return domain.InteractionSearch
}

// Joins returns the parameters the domain resolves.
func (q *Query) Joins() []domain.Join { return q.joins }

// Unknown returns the parameters the search ignored.
func (q *Query) Unknown() []string { return q.unknown }

// SummaryCount reports whether only the total is wanted (_summary=count).
func (q *Query) SummaryCount() bool { return q.summaryCount }

// WholeResultFetched reports whether a page of the search that says no
// page follows holds the whole result: the first page of a search that
// fetches entries.
func (q *Query) WholeResultFetched() bool { return q.after == nil && q.count > 0 && !q.summaryCount }

// Elements returns the elements asked for with _elements (none: all).
func (q *Query) Elements() []string { return q.elements }

// Store returns the store the search reads.
func (q *Query) Store() domain.StoreSelection { return q.store }

// String is the query as asked, without the page cursor, _format and
// _pretty (sorted by name): what the audit trail records of a search.
func (q *Query) String() string { return q.asked }
