package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"exchange/domain"
	"exchange/handlers/httpstatus"
)

// statusLine is the status of a batch entry, as FHIR writes it.
func statusLine(code int) string { return strconv.Itoa(code) + " " + http.StatusText(code) }

// batchIn is a request Bundle.
type batchIn struct {
	ResourceType string    `json:"resourceType"`
	Type         string    `json:"type"`
	Entry        entryList `json:"entry"`
}

// maxBundleEntries bounds the entries of one request Bundle: every entry
// costs its answer, and a 64 MiB body of empty entries would otherwise
// hold gigabytes. Larger uploads go in several requests.
const maxBundleEntries = 10_000

// entryList is a request Bundle's entries. Read, it keeps no more than
// maxBundleEntries+1 of them, enough for decodeBundle to refuse the
// Bundle: those past that are only checked to be JSON, so a body of a
// million empty entries costs what one at the bound costs, not the 56
// times its size that keeping them all took (a gigabyte or more live at
// the body limit). readPlainBundle keeps the same ones.
type entryList []entryRequest

// UnmarshalJSON reads the entries as json.Unmarshal reads a
// []entryRequest, up to the bound. The body is valid JSON by the time it
// is called (json.Unmarshal checks all of it first).
func (l *entryList) UnmarshalJSON(data []byte) error {
	if data[0] != '[' {
		// null, or not an array: as the slice takes it (nil, or the
		// error that names the member).
		return json.Unmarshal(data, (*[]entryRequest)(l))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil {
		return err
	}
	*l = entryList{}
	for len(*l) <= maxBundleEntries && dec.More() {
		var e entryRequest
		if err := dec.Decode(&e); err != nil {
			return err
		}
		*l = append(*l, e)
	}
	return nil
}

// decodeBundle reads a request Bundle (batch, or R4 import); hint says
// where a body that is not a Bundle belongs; observations, whether its
// plain Observations are read in the same pass (readPlainBundle).
func decodeBundle(c *fiber.Ctx, hint string, observations bool) (*batchIn, error) {
	in, plain := readPlainBundle(c.Body(), observations) // resources alias the body, as c.Body() itself is passed on
	if !plain {
		in = batchIn{}
		if err := json.Unmarshal(c.Body(), &in); err != nil {
			return nil, fhirJSONError("Bundle", err)
		}
	}
	if in.ResourceType != "Bundle" {
		return nil, domain.FieldErrorf("Bundle.resourceType", "must be Bundle, not %q%s", in.ResourceType, hint)
	}
	if len(in.Entry) > maxBundleEntries {
		return nil, domain.FieldErrorf("Bundle.entry", "has more than %d entries; at most %d are taken in one request", maxBundleEntries, maxBundleEntries)
	}
	return &in, nil
}

// entryRequest is one entry of a request Bundle, as much as is read.
type entryRequest struct {
	Resource json.RawMessage `json:"resource"`
	Request  *struct {
		Method string `json:"method"`
		URL    string `json:"url"`
	} `json:"request"`
	// observation is Resource read as a plain Observation by the Bundle's
	// own pass (readPlainEntry), exactly as readPlainObservation(Resource)
	// reads it; nil when it was not read so.
	observation *observationIn
}

// create reports whether the entry is a create (POST); an entry without
// a request is one when creates are implied.
func (e entryRequest) create(implied bool) bool {
	if e.Request == nil {
		return implied
	}
	return strings.EqualFold(e.Request.Method, "POST")
}

// resource returns the entry's resource; a missing or null one is an
// error at the entry's path.
func (e entryRequest) resource(i int) (json.RawMessage, error) {
	if len(e.Resource) == 0 || string(e.Resource) == "null" {
		return nil, domain.FieldErrorf(fmt.Sprintf("Bundle.entry[%d].resource", i), "is required")
	}
	return e.Resource, nil
}

// fhirBatch answers POST [base]/ with a batch Bundle of creates: a
// batch-response Bundle with one entry per request entry, in order, each
// created or refused on its own. Native Observations are created together;
// other resources go to the imported store under the FHIR source the
// request's header or each resource's meta.source names.
func (s *server) fhirBatch(c *fiber.Ctx) error {
	in, err := decodeBundle(c, "", true)
	if err != nil {
		return err
	}
	if in.Type != "batch" {
		return domain.FieldErrorf("Bundle.type", "must be batch, not %q (transactions are not supported)", in.Type)
	}
	ctx, a := c.UserContext(), actor(c)
	out := bundle{ResourceType: "Bundle", Type: "batch-response", Entry: batchResponseEntries(len(in.Entry))}
	failed := func(i int, err error) {
		if domain.ErrorCode(err) == domain.CodeInternal {
			s.log.Error("batch entry failed", "request_id", requestID(c), "entry", i, "error", err)
		}
		out.Entry[i] = errorEntry(err)
	}
	pending := creates{entries: len(in.Entry)}
	for i, e := range in.Entry {
		resourceType, err := s.batchEntry(i, e)
		if err != nil {
			failed(i, err)
			continue
		}
		if err := s.addCreate(&pending, i, resourceType, e.Resource, e.observation, c.Get(domain.SourceHeader)); err != nil {
			s.metrics.observation(err) // only a native Observation fails to be added
			failed(i, err)
		}
	}
	s.createAll(ctx, c, a, &pending, out.Entry, failed)
	return writeFHIR(c, fiber.StatusOK, out)
}

// creates are the resources a batch creates, by path: imported ones,
// and native Observations; at holds their entries' indexes.
type creates struct {
	entries    int // of the request Bundle
	imports    []domain.ResourceWrite
	importedAt []int
	natives    []domain.NewObservation
	nativeAt   []int
}

// addCreate routes entry i to p (routeCreate): a native-coded Observation
// to the native store, anything else to the imported store under source;
// read is body read as a plain Observation, or nil.
func (s *server) addCreate(p *creates, i int, resourceType string, body []byte, read *observationIn, source string) error {
	n, native, err := s.routeCreate(resourceType, body, read)
	if err != nil {
		return err
	}
	if !native {
		p.addImported(i, domain.ResourceWrite{Type: resourceType, Body: body, Source: source})
		return nil
	}
	if p.natives == nil {
		p.natives = make([]domain.NewObservation, 0, p.entries) // a batch is mostly native uploads: grown once
	}
	p.natives = append(p.natives, n)
	p.nativeAt = append(p.nativeAt, i)
	return nil
}

// addImported routes entry i, w, to the imported store.
func (p *creates) addImported(i int, w domain.ResourceWrite) {
	p.imports = append(p.imports, w)
	p.importedAt = append(p.importedAt, i)
}

// createAll creates what p holds, each store's entries together, and
// writes each one's batch-response entry, or calls failed.
func (s *server) createAll(ctx context.Context, c *fiber.Ctx, a *domain.Actor, p *creates, entries []bundleEntry, failed func(int, error)) {
	base := ""
	if len(p.imports)+len(p.natives) > 0 {
		base = fhirBase(c) // once: it reads the request's origin
	}
	for k, res := range s.service.CreateResources(ctx, a, p.imports) {
		i, r := p.importedAt[k], res.Resource
		if res.Err != nil {
			failed(i, res.Err)
			continue
		}
		entries[i] = bundleEntry{
			FullURL:  base + "/" + r.Type + "/" + r.ID,
			Resource: storedJSON(r.JSON),
			Response: &bundleResponse{Status: statusCreated, Location: r.Type + "/" + r.ID + "/_history/1",
				Etag: etag(r.VersionID), LastModified: instant(r.LastUpdated)},
		}
	}
	results := s.service.CreateObservations(ctx, a, p.natives)
	responses := make([]bundleResponse, len(results)) // one allocation for the batch, not one per entry
	var updated time.Time                             // the store gives a batch one time: written once
	var lastModified string
	for k, res := range results {
		i := p.nativeAt[k]
		s.metrics.observation(res.Err)
		if res.Err != nil {
			failed(i, res.Err)
			continue
		}
		o := res.Observation
		id := strconv.FormatInt(o.ID, 10)
		if lastModified == "" || !o.LastUpdated.Equal(updated) {
			updated, lastModified = o.LastUpdated, instant(o.LastUpdated)
		}
		responses[k] = bundleResponse{Status: statusCreated, Location: "Observation/" + id + "/_history/1", Etag: `W/"1"`, LastModified: lastModified}
		entries[i] = bundleEntry{FullURL: base + "/Observation/" + id, Resource: observationFHIR(o), Response: &responses[k]}
	}
}

// statusCreated is the status of a created batch entry.
var statusCreated = statusLine(fiber.StatusCreated)

// batchEntry checks one entry of a batch, a POST of a resource, and
// returns the type it creates.
func (s *server) batchEntry(i int, e entryRequest) (string, error) {
	at := func() string { return fmt.Sprintf("Bundle.entry[%d]", i) } // only an error names it
	if !e.create(false) {
		return "", domain.FieldErrorf(at()+".request", "each entry must be {method: POST, url: <type>}")
	}
	resourceType := strings.TrimSuffix(e.Request.URL, "/")
	r, err := s.catalog.Require(resourceType)
	if err != nil {
		return "", domain.FieldErrorf(at()+".request.url", "%s", domain.ErrorMessage(err))
	}
	if !r.Allows("create") {
		return "", domain.FieldErrorf(at()+".request.url", "%s is read-only", resourceType)
	}
	if _, err := e.resource(i); err != nil {
		return "", err
	}
	return resourceType, nil
}

// errorEntry is the batch-response entry of a refused request entry; a
// duplicate of what is stored already carries its location.
func errorEntry(err error) bundleEntry {
	return bundleEntry{Response: &bundleResponse{Status: statusLine(httpstatus.Of(err)), Location: domain.StoredAs(err), Outcome: outcome(err)}}
}
