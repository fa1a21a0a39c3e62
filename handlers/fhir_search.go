package handlers

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"exchange/domain"
	"exchange/fhirsearch"
)

type bundleLink struct {
	Relation string `json:"relation"`
	URL      string `json:"url"`
}

type bundleEntry struct {
	FullURL  string          `json:"fullUrl,omitempty"`
	Resource any             `json:"resource,omitempty"`
	Search   *bundleSearch   `json:"search,omitempty"`
	Response *bundleResponse `json:"response,omitempty"`
}

type bundleSearch struct {
	Mode string `json:"mode"`
}

type bundleResponse struct {
	Status       string `json:"status"`
	Location     string `json:"location,omitempty"`
	Etag         string `json:"etag,omitempty"`
	LastModified string `json:"lastModified,omitempty"`
	Outcome      any    `json:"outcome,omitempty"`
}

// bundle is a Bundle. Its entry is left out when nil (FHIR JSON has no
// empty arrays) but written when empty: a searchset always carries it, an
// empty array when nothing matched, because JupyterHealth Exchange answers
// so and its Python client reads bundle["entry"] unguarded.
type bundle struct {
	ResourceType string        `json:"resourceType"`
	Type         string        `json:"type"`
	Timestamp    string        `json:"timestamp,omitempty"`
	Total        *int64        `json:"total,omitempty"`
	Link         []bundleLink  `json:"link,omitempty"`
	Entry        []bundleEntry `json:"entry,omitzero"`
}

// batchResponseEntries are the entries of a batch-response to n
// requests: nil for an empty batch, whose response has no entry.
func batchResponseEntries(n int) []bundleEntry {
	if n == 0 {
		return nil
	}
	return make([]bundleEntry, n)
}

// fhirBase is the absolute URL of the FHIR interface the client used.
func fhirBase(c *fiber.Ctx) string {
	prefix := fhirCanonical
	if strings.HasPrefix(c.Path(), fhirAlias) {
		prefix = fhirAlias
	}
	return origin(c) + prefix
}

// searchFunc runs a parsed search and renders one page: the resources, a
// position to continue after, whether more follow, and the total.
type searchFunc func(ctx context.Context, a *domain.Actor, q *fhirsearch.Query) (page []searchHit, more bool, total *int64, err error)

// searchHit is one resource of a page and where the next page continues.
type searchHit struct {
	resource any
	position fhirsearch.Position
}

// hits renders a page of domain values.
func hits[T any](items []T, render func(*T) (any, fhirsearch.Position)) []searchHit {
	out := make([]searchHit, len(items))
	for i := range items {
		r, pos := render(&items[i])
		out[i] = searchHit{resource: r, position: pos}
	}
	return out
}

func searchWith[T any](run func(context.Context, *domain.Actor, domain.Search) (domain.SearchResult[T], error), render func(*T) (any, fhirsearch.Position)) searchFunc {
	return func(ctx context.Context, a *domain.Actor, q *fhirsearch.Query) ([]searchHit, bool, *int64, error) {
		res, err := run(ctx, a, q)
		if err != nil {
			return nil, false, nil, err
		}
		return hits(res.Items, render), res.More, res.Total, nil
	}
}

// nativeType is how the native store searches and reads one type.
type nativeType struct {
	search searchFunc
	read   func(context.Context, *domain.Actor, int64) (resource any, lastUpdated time.Time, err error)
}

// nativeOf serves one native type from its domain search and read (under
// the token's scopes: domain.ReadFHIR); hit renders a record and says
// where a next page continues (its lastUpdated is also the read's
// Last-Modified).
func nativeOf[T any](svc *domain.Service, resourceType string, search func(context.Context, *domain.Actor, domain.Search) (domain.SearchResult[T], error),
	read func(context.Context, *domain.Actor, int64) (*T, error), hit func(*T) (any, fhirsearch.Position)) nativeType {
	return nativeType{
		search: searchWith(search, hit),
		read: func(ctx context.Context, a *domain.Actor, id int64) (any, time.Time, error) {
			r, err := domain.ReadFHIR(ctx, svc, a, resourceType, id, read)
			if err != nil {
				return nil, time.Time{}, err
			}
			resource, pos := hit(r)
			return resource, pos.LastUpdated, nil
		},
	}
}

// nativeTypes are the native store's types, built once.
func (s *server) nativeTypes() map[string]nativeType {
	at := func(t time.Time, id int64) fhirsearch.Position { return fhirsearch.Position{ID: id, LastUpdated: t} }
	return map[string]nativeType{
		"Observation": nativeOf(s.service, "Observation", s.service.SearchObservations, s.service.ObservationByID, observationHit),
		"Patient": nativeOf(s.service, "Patient", s.service.SearchPatients, s.service.PatientByID, func(p *domain.Patient) (any, fhirsearch.Position) {
			return patientFHIR(p), at(p.LastUpdated, p.ID)
		}),
		"Practitioner": nativeOf(s.service, "Practitioner", s.service.SearchPractitioners, s.service.PractitionerProjection, func(u *domain.User) (any, fhirsearch.Position) {
			return practitionerFHIR(u), at(u.LastUpdated, u.ID)
		}),
		"Organization": nativeOf(s.service, "Organization", s.service.SearchOrganizations, s.service.Organization, func(o *domain.Organization) (any, fhirsearch.Position) {
			return organizationFHIR(o), at(o.LastUpdated, o.ID)
		}),
		"Group": nativeOf(s.service, "Group", s.service.SearchGroups, s.service.GroupByID, func(g *domain.GroupView) (any, fhirsearch.Position) {
			return groupFHIR(g), at(g.LastUpdated, g.ID)
		}),
		"Device": nativeOf(s.service, "Device", s.service.SearchDevices, s.service.DeviceByID, func(d *domain.DataSource) (any, fhirsearch.Position) {
			return deviceFHIR(d), at(d.LastUpdated, d.ID)
		}),
		"AuditEvent": nativeOf(s.service, "AuditEvent", s.service.SearchAuditEvents, s.service.AuditEventByID, func(e *domain.AuditEvent) (any, fhirsearch.Position) {
			pos := at(e.Recorded, e.ID)
			pos.Date = &e.Recorded
			return auditEventFHIR(e), pos
		}),
	}
}

// observationHit renders a native observation of a page.
func observationHit(o *domain.Observation) (any, fhirsearch.Position) {
	pos := fhirsearch.Position{ID: o.ID, LastUpdated: o.LastUpdated}
	if o.Effective != nil {
		pos.Date = &o.Effective.Start // the page's own, read only: no copy for each hit
	}
	return observationFHIR(o), pos
}

// prefers reports whether the request's Prefer header (RFC 7240) holds a
// preference, such as handling=strict or return=minimal.
func prefers(c *fiber.Ctx, preference string) bool {
	for _, p := range strings.Split(c.Get("Prefer"), ",") {
		if strings.EqualFold(strings.ReplaceAll(strings.TrimSpace(p), " ", ""), preference) {
			return true
		}
	}
	return false
}

// queryValues returns the request's query parameters, as sent.
func queryValues(c *fiber.Ctx) (url.Values, error) {
	v, err := url.ParseQuery(string(c.Request().URI().QueryString()))
	if err != nil {
		return nil, domain.Errorf(domain.CodeInvalid, "the query string is malformed: %v", err)
	}
	return v, nil
}

// fhirSearch answers GET [base]/<type>?params with a searchset Bundle.
func (s *server) fhirSearch(c *fiber.Ctx) error {
	resourceType := c.Params("type")
	values, err := queryValues(c)
	if err != nil {
		return err
	}
	q, err := s.search.Parse(resourceType, values, prefers(c, "handling=strict"))
	if err != nil {
		return err
	}
	run := s.searchImported // which answers nothing when _source names no store
	if q.Store().Kind == domain.StoreNative {
		native, ok := s.native[resourceType]
		if !ok {
			return domain.Errorf(domain.CodeNotSupported, "%s has no native store here", resourceType)
		}
		run = native.search
	}
	start := time.Now()
	page, more, total, err := run(c.UserContext(), actor(c), q)
	s.metrics.searches.WithLabelValues(q.ResourceType(), storeLabel(q.Store().Kind)).Observe(time.Since(start).Seconds())
	if err != nil {
		return err
	}
	query := string(c.Request().URI().QueryString())
	return writeFHIR(c, fiber.StatusOK, searchset(fhirBase(c), resourceType, query, values, q, page, more, total))
}

// searchset is the searchset Bundle of a page of hits of q (the search of
// type resourceType whose query string is query, parsed as values): self
// and next links, the entries (their resources as q's _elements keep them;
// an empty list when there are none), and a warning entry naming the
// parameters it ignored. Its total is the one the search counted
// (_summary=count, _total=accurate), or else, when the first page holds
// the whole result, that page's size: counting costs a pass over the
// whole result, which a search that pages does not make unless asked.
func searchset(base, resourceType, query string, values url.Values, q *fhirsearch.Query, page []searchHit, more bool, total *int64) bundle {
	self := base + "/" + resourceType
	if query != "" {
		self += "?" + query
	}
	if total == nil && !more && q.WholeResultFetched() {
		n := int64(len(page))
		total = &n
	}
	b := bundle{ResourceType: "Bundle", Type: "searchset", Timestamp: instant(time.Now()), Total: total,
		Link: []bundleLink{{Relation: "self", URL: self}}, Entry: []bundleEntry{}}
	if q.SummaryCount() {
		// The count is of a search without the parameters ignored: it
		// says so as the pages do.
		return withIgnored(b, q)
	}
	if len(page) > 0 {
		// Once a page, not once an entry: the entries share their search
		// mode (never modified), and their URLs are cut from one string.
		b.Entry = make([]bundleEntry, len(page), len(page)+1)
		match := &bundleSearch{Mode: "match"}
		urls := fullURLs(base+"/"+resourceType+"/", page)
		for i, h := range page {
			b.Entry[i] = bundleEntry{FullURL: urls[i], Resource: withElements(h.resource, q.Elements()), Search: match}
		}
	}
	if more && len(page) > 0 {
		next := url.Values{}
		for k, v := range values {
			next[k] = v
		}
		next.Set(fhirsearch.CursorParam, q.Next(page[len(page)-1].position))
		b.Link = append(b.Link, bundleLink{Relation: "next", URL: base + "/" + resourceType + "?" + next.Encode()})
	}
	return withIgnored(b, q)
}

// withIgnored adds to a searchset Bundle the warning entry that names the
// parameters its search ignored, if it ignored any (with Prefer:
// handling=strict, they are refused instead).
func withIgnored(b bundle, q *fhirsearch.Query) bundle {
	if unknown := q.Unknown(); len(unknown) > 0 {
		b.Entry = append(b.Entry, bundleEntry{Resource: outcomeOf(fhirIssue("warning", "not-supported",
			"These search parameters are not supported and were ignored: "+strings.Join(unknown, ", "), "")), Search: &bundleSearch{Mode: "outcome"}})
	}
	return b
}

// fullURLs are prefix + the logical id of each hit, cut from one
// strings.Builder (which only appends, so what String returned is never
// written over): two allocations a page, where each URL took two.
func fullURLs(prefix string, page []searchHit) []string {
	var all strings.Builder
	all.Grow(len(page) * (len(prefix) + 20))
	urls := make([]string, len(page))
	for i, h := range page {
		start := all.Len()
		all.WriteString(prefix)
		if h.position.UUID != "" {
			all.WriteString(h.position.UUID)
		} else {
			var digits [20]byte
			all.Write(strconv.AppendInt(digits[:0], h.position.ID, 10))
		}
		urls[i] = all.String()[start:]
	}
	return urls
}

// fhirRead answers GET [base]/<type>/<id> with the resource, and its
// vread, GET [base]/<type>/<id>/_history/<version>: native records and
// projections have one version.
func (s *server) fhirRead(c *fiber.Ctx) error {
	imported, err := s.recordID(c)
	if err != nil {
		return err
	}
	if imported {
		return s.fhirReadImported(c)
	}
	resourceType, rawID := c.Params("type"), c.Params("id")
	native, ok := s.native[resourceType]
	if !ok {
		return domain.Errorf(domain.CodeNotFound, "%s/%s does not exist", resourceType, rawID)
	}
	if vid := c.Params("vid"); vid != "" && vid != "1" {
		return domain.Errorf(domain.CodeNotFound, "%s/%s has no version %s", resourceType, rawID, vid)
	}
	id, _ := domain.ParseID(rawID) // recordID checked it
	resource, lastUpdated, err := native.read(c.UserContext(), actor(c), id)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderETag, `W/"1"`)
	c.Set(fiber.HeaderLastModified, lastUpdated.UTC().Format(http.TimeFormat))
	return writeFHIR(c, fiber.StatusOK, resource)
}
