package handlers

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"exchange/domain"
	"exchange/handlers/httpstatus"
)

// observationIn is what the native store reads of a FHIR Observation: the
// elements it keeps (identifier, status, code, subject, device,
// valueAttachment), those it derives from the data point and checks
// (effective[x]), and those FHIR's create tells a server to ignore (id,
// meta.versionId, meta.lastUpdated). Any other element would be lost, so
// it is refused.
type observationIn struct {
	ResourceType      string                 `json:"resourceType"`
	ID                string                 `json:"id"`
	Meta              *observationMeta       `json:"meta"`
	Identifier        []fhirIdentifier       `json:"identifier"`
	Status            string                 `json:"status"`
	Subject           *observationReference  `json:"subject"`
	Device            *observationReference  `json:"device"`
	Code              *observationCode       `json:"code"`
	EffectiveDateTime *string                `json:"effectiveDateTime"`
	EffectiveInstant  *string                `json:"effectiveInstant"`
	EffectivePeriod   *fhirPeriod            `json:"effectivePeriod"`
	ValueAttachment   *observationAttachment `json:"valueAttachment"`
}

// The elements of an observationIn, named so that readPlainObservation
// can keep them in one allocation (observationParts).
type (
	observationMeta struct {
		VersionID   string `json:"versionId"`
		LastUpdated string `json:"lastUpdated"`
	}
	observationReference struct {
		Reference string `json:"reference"`
	}
	observationCode struct {
		Coding []observationCoding `json:"coding"`
	}
	observationAttachment struct {
		ContentType string `json:"contentType"`
		Data        string `json:"data"`
	}
)

type observationCoding struct {
	System  string `json:"system"`
	Code    string `json:"code"`
	Display string `json:"display"`
}

// elements names the members of a FHIR JSON object a reader knows, each
// with the members of its own value when that is an object (or an array
// of objects); nil for a primitive.
type elements map[string]elements

// elementsOf lists the elements a decoding struct reads, by its json tags.
func elementsOf(t reflect.Type) elements {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	out := elements{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		out[name] = elementsOf(f.Type)
	}
	return out
}

// nativeElements are the elements of an Observation the native store
// reads: those of observationIn.
var nativeElements = elementsOf(reflect.TypeFor[observationIn]())

// unknownElements returns the FHIR paths (under at) of the members of the
// JSON object raw that known does not name, at any depth, sorted; raw is
// valid JSON (json.Valid). It reads the object as the imported store does
// (domain.EachValidJSONMember), so a member named twice is refused by its path,
// where encoding/json would keep the last value; and names match exactly,
// so "Status" is an unknown element, where encoding/json would read it as
// status. Values of the wrong JSON type are left to the typed decoding to
// report.
func unknownElements(at string, raw []byte, known elements) ([]string, error) {
	w := unknownWalk{path: []byte(at)}
	if err := w.object(raw, known); err != nil {
		return nil, err
	}
	slices.Sort(w.out)
	return w.out, nil
}

// unknownWalk gathers unknown elements; path is the FHIR path of the
// value walked, a buffer grown and cut back as the walk descends, so that
// only the paths reported are made into strings.
type unknownWalk struct {
	path []byte
	out  []string
}

// object walks a JSON object, or does nothing for any other value.
func (w *unknownWalk) object(raw []byte, known elements) error {
	at := len(w.path)
	err := domain.EachValidJSONMember(raw, func(name, value []byte) error {
		w.path = append(append(w.path[:at], '.'), name...)
		inner, ok := known[string(name)]
		switch {
		case !ok:
			w.out = append(w.out, string(w.path))
		case inner == nil:
		case value[0] == '[':
			member := len(w.path)
			i := 0
			return domain.EachValidJSONItem(value, func(item []byte) error {
				w.path = append(strconv.AppendInt(append(w.path[:member], '['), int64(i), 10), ']')
				i++
				return w.object(item, inner)
			})
		case value[0] == '{':
			return w.object(value, inner)
		}
		return nil
	})
	var deeper *domain.Error
	var dup *domain.DuplicateMemberError
	switch {
	case errors.As(err, &deeper):
		return err // a member named twice deeper down, by its path
	case errors.As(err, &dup):
		return domain.FieldErrorf(string(w.path[:at])+"."+dup.Key, "is given twice: a JSON object names each member once")
	}
	return nil // nil, or not a JSON object: the typed decoding says why
}

// nativeObservation reads an Observation's JSON for the native store when
// it belongs there, as domain.IsNativeObservation decides: native reports
// whether it does, and n and err are then its decoding. An Observation
// that decodes is read once, and its decoded codings say where it goes,
// exactly as that probe would (an upload's Base64 is the bulk of its JSON:
// reading it twice cost a tenth of an upload); only a body that does not
// decode is probed.
//
// A plain body of native elements only, as clients send, is read in one
// pass (readPlainObservation); any other body is decoded and walked as
// the reference path does, which then says what is wrong with it.
//
// in is raw already read so (a batch's entry.observation), or nil.
func (s *server) nativeObservation(raw []byte, in *observationIn) (n domain.NewObservation, native bool, err error) {
	plain := in != nil
	if !plain {
		in, plain = readPlainObservation(raw)
	}
	var decodeErr error
	if !plain {
		in = new(observationIn)
		decodeErr = json.Unmarshal(raw, in)
	}
	if decodeErr == nil {
		native = in.Code != nil && slices.ContainsFunc(in.Code.Coding, func(c observationCoding) bool { return domain.IsNativeSystem(c.System) })
	} else {
		native = domain.IsNativeObservation(raw)
	}
	if !native {
		return domain.NewObservation{}, false, nil
	}
	if !plain {
		if err := checkObservationJSON(raw, decodeErr); err != nil {
			return domain.NewObservation{}, true, err
		}
	}
	n, err = s.newObservation(in)
	return n, true, err
}

// checkObservationJSON refuses a native Observation's JSON that did not
// decode (decodeErr), naming the element at fault, or that has elements
// the native store does not keep, by name.
func checkObservationJSON(raw []byte, decodeErr error) error {
	if decodeErr == nil || json.Valid(raw) { // else the decoding says why
		unknown, err := unknownElements("Observation", raw, nativeElements)
		if err != nil {
			return err
		}
		if len(unknown) > 0 {
			return unknownElementsError(unknown)
		}
	}
	if decodeErr != nil {
		return fhirJSONError("Observation", decodeErr)
	}
	return nil
}

// newObservation turns a decoded Observation into the input of the native
// create. A data point over the service's bound is refused before its
// Base64 is decoded.
func (s *server) newObservation(in *observationIn) (domain.NewObservation, error) {
	if in.ResourceType != "Observation" {
		return domain.NewObservation{}, domain.FieldErrorf("resourceType", "must be Observation, not %q", in.ResourceType)
	}
	n := domain.NewObservation{Status: in.Status} // a value: a pointer cost every upload an allocation
	if in.Subject != nil {
		n.Subject = in.Subject.Reference
	}
	if in.Device != nil {
		n.Device = in.Device.Reference
	}
	for _, id := range in.Identifier {
		n.Identifiers = append(n.Identifiers, domain.Identifier{System: id.System, Value: id.Value})
	}
	if in.Code != nil {
		for _, c := range in.Code.Coding {
			n.Codings = append(n.Codings, domain.Coding{System: c.System, Code: c.Code, Display: c.Display})
		}
	}
	var given []string
	if in.EffectiveDateTime != nil {
		given = append(given, "effectiveDateTime")
		n.Effective = &domain.EffectiveClaim{Element: "effectiveDateTime", DateTime: *in.EffectiveDateTime}
	}
	if in.EffectiveInstant != nil {
		given = append(given, "effectiveInstant")
		n.Effective = &domain.EffectiveClaim{Element: "effectiveInstant", DateTime: *in.EffectiveInstant}
	}
	if p := in.EffectivePeriod; p != nil {
		given = append(given, "effectivePeriod")
		n.Effective = &domain.EffectiveClaim{Element: "effectivePeriod", Start: p.Start, End: p.End}
	}
	if len(given) > 1 {
		return domain.NewObservation{}, domain.FieldErrorf("Observation.effective[x]", "has one form, not %s", strings.Join(given, " and "))
	}
	if v := in.ValueAttachment; v != nil {
		n.ContentType = v.ContentType
		size, spaced := base64BinaryLen(v.Data)
		if err := s.service.CheckDataPointSize(size); err != nil {
			return domain.NewObservation{}, err
		}
		data, err := decodeBase64Binary(v.Data, spaced)
		if err != nil {
			return domain.NewObservation{}, domain.FieldErrorf("Observation.valueAttachment.data", "is not Base64")
		}
		n.Data = data
	}
	return n, nil
}

// unknownElementsError refuses the elements of a native Observation that
// its store would not keep, each by its path.
func unknownElementsError(paths []string) error {
	const kept = "the native store keeps identifier (system, value), status, code.coding (system, code, display), subject.reference, " +
		"device.reference and valueAttachment (contentType, data); effective[x] comes from the data point"
	details := make([]domain.Detail, len(paths))
	for i, p := range paths {
		details[i] = domain.Detail{Field: p, Message: p + ": is not an element of a native Observation (" + kept + ")"}
	}
	return &domain.Error{Code: domain.CodeInvalid, Field: paths[0], Details: details,
		Message: "unknown elements of a native Observation: " + strings.Join(paths, ", ") + " (" + kept + ")"}
}

// decodeBase64Binary reads a FHIR base64Binary, which may hold whitespace
// (line breaks of MIME-style Base64 among it) between its characters;
// spaced says whether it does (base64BinaryLen).
func decodeBase64Binary(s string, spaced bool) ([]byte, error) {
	if spaced {
		s = strings.Map(func(r rune) rune {
			if r == ' ' || r == '\t' || r == '\r' || r == '\n' {
				return -1
			}
			return r
		}, s)
	}
	return base64.StdEncoding.DecodeString(s)
}

// base64BinaryLen is the number of bytes a base64Binary holds, counted
// without decoding it: whitespace aside, every four characters hold three
// bytes, less the padding; spaced reports whether it holds whitespace.
// Malformed Base64 is left to decoding to refuse. Each byte value is
// counted with strings.Count, a vectorised pass: the Base64 is the bulk of
// an upload, and a loop over its bytes, then a search for whitespace, cost
// half a microsecond an upload.
func base64BinaryLen(s string) (size int, spaced bool) {
	spaces := strings.Count(s, " ") + strings.Count(s, "\t") + strings.Count(s, "\r") + strings.Count(s, "\n")
	return (len(s)-spaces)/4*3 - strings.Count(s, "="), spaces > 0
}

// statusLine is the status of a batch entry, as FHIR writes it.
func statusLine(code int) string { return strconv.Itoa(code) + " " + http.StatusText(code) }

// createNativeObservation creates an Observation coded to Open mHealth or
// IEEE 1752 in the native store, as a batch entry would.
func (s *server) createNativeObservation(c *fiber.Ctx, n domain.NewObservation) error {
	res := s.service.CreateObservations(c.UserContext(), actor(c), []domain.NewObservation{n})[0]
	s.metrics.observation(res.Err)
	if res.Err != nil {
		return res.Err
	}
	o := res.Observation
	c.Set(fiber.HeaderLocation, fhirBase(c)+"/Observation/"+strconv.FormatInt(o.ID, 10)+"/_history/1")
	c.Set(fiber.HeaderETag, `W/"1"`)
	c.Set(fiber.HeaderLastModified, o.LastUpdated.UTC().Format(http.TimeFormat))
	return writeFHIR(c, fiber.StatusCreated, observationFHIR(o))
}

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

// addCreate routes entry i to p: a native-coded Observation to the native
// store, anything else to the imported store under source; read is body
// read as a plain Observation, or nil (nativeObservation).
func (s *server) addCreate(p *creates, i int, resourceType string, body []byte, read *observationIn, source string) error {
	var n domain.NewObservation
	native := false
	if resourceType == "Observation" {
		var err error
		if n, native, err = s.nativeObservation(body, read); err != nil {
			return err
		}
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
