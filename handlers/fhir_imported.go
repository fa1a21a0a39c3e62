package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"mime"
	"net/http"
	"strconv"

	"github.com/gofiber/fiber/v2"

	"exchange/domain"
	"exchange/fhirsearch"
)

// The imported store over FHIR: creates of anything but a native
// Observation, reads, updates, patches and deletes of records with UUID
// ids. The stored JSON is sent as it is kept, byte for byte.

// writeResource answers an imported resource with its version headers.
func writeResource(c *fiber.Ctx, status int, r *domain.Resource) error {
	c.Set(fiber.HeaderETag, etag(r.VersionID))
	c.Set(fiber.HeaderLastModified, r.LastUpdated.UTC().Format(http.TimeFormat))
	if status == fiber.StatusCreated || status == fiber.StatusOK && c.Method() == fiber.MethodPut {
		c.Set(fiber.HeaderLocation, fhirBase(c)+"/"+r.Type+"/"+r.ID+"/_history/"+strconv.FormatInt(r.VersionID, 10))
	}
	if c.Method() != fiber.MethodGet && prefers(c, "return=minimal") {
		return c.SendStatus(status)
	}
	c.Set(fiber.HeaderContentType, fhirContentType(c))
	return c.Status(status).Send(r.JSON)
}

// storedJSON is an imported resource's JSON as the create path wrote it
// (domain.Resource.JSON: compact and valid), put in a Bundle entry as it
// is, as writeResource sends it: a json.RawMessage would be checked and
// compacted again, byte by byte, which cost a tenth of an R4 import.
type storedJSON []byte

func (j storedJSON) appendJSON(b []byte) []byte { return append(b, j...) }

// MarshalJSON is for encoding/json, which would write bytes as Base64.
func (j storedJSON) MarshalJSON() ([]byte, error) { return j, nil }

// fhirCreate answers POST [base]/<type>. An Observation coded to Open
// mHealth or IEEE 1752 takes the native path; everything else is imported,
// under the FHIR source the request names.
func (s *server) fhirCreate(c *fiber.Ctx) error {
	resourceType := c.Params("type")
	t, err := s.catalog.Require(resourceType)
	if err != nil {
		return err
	}
	if !t.Allows("create") {
		return readOnlyType(c, t)
	}
	n, native, err := s.routeCreate(resourceType, c.Body(), nil)
	if err != nil {
		s.metrics.observation(err)
		return err
	}
	if native {
		return s.createNativeObservation(c, n)
	}
	r, err := s.service.CreateResource(c.UserContext(), actor(c), domain.ResourceWrite{
		Type: resourceType, Body: c.Body(), Source: c.Get(domain.SourceHeader)})
	if err != nil {
		return err
	}
	return writeResource(c, fiber.StatusCreated, r)
}

// recordID tells what an id addresses: an imported resource (a UUID), a
// native record or projection (an integer), or nothing.
func (s *server) recordID(c *fiber.Ctx) (imported bool, err error) {
	resourceType, id := c.Params("type"), c.Params("id")
	if _, err := s.catalog.Require(resourceType); err != nil {
		return false, err
	}
	if domain.IsResourceID(id) {
		return true, nil
	}
	if _, ok := domain.ParseID(id); ok {
		return false, nil
	}
	return false, domain.Errorf(domain.CodeNotFound, "%s/%s does not exist", resourceType, id)
}

// importedOnly runs a write on an imported resource; on a native record
// or projection it is 405.
func (s *server) importedOnly(write func(*fiber.Ctx) error) fiber.Handler {
	return func(c *fiber.Ctx) error {
		imported, err := s.recordID(c)
		if err != nil {
			return err
		}
		if r, _ := s.catalog.Lookup(c.Params("type")); !r.Allows("update") {
			return readOnlyType(c, r)
		}
		if !imported {
			c.Set(fiber.HeaderAllow, "GET")
			return fiber.NewError(fiber.StatusMethodNotAllowed, c.Method()+" is not allowed on "+c.Params("type")+"/"+c.Params("id")+
				": native records and projections are read-only over FHIR")
		}
		return write(c)
	}
}

// readOnlyType refuses a write to a type that takes none (AuditEvent):
// 405, whatever the id.
func readOnlyType(c *fiber.Ctx, r *fhirsearch.Resource) error {
	c.Set(fiber.HeaderAllow, "GET")
	return fiber.NewError(fiber.StatusMethodNotAllowed, c.Method()+" is not allowed on "+r.Type+": it is read-only")
}

// fhirUpdate answers PUT [base]/<type>/<uuid>.
func (s *server) fhirUpdate(c *fiber.Ctx) error {
	version, err := ifMatch(c)
	if err != nil {
		return err
	}
	r, err := s.service.UpdateResource(c.UserContext(), actor(c), c.Params("id"), domain.ResourceWrite{
		Type: c.Params("type"), Body: c.Body(), Source: c.Get(domain.SourceHeader), IfMatch: version})
	if err != nil {
		return err
	}
	return writeResource(c, fiber.StatusOK, r)
}

// patchFormats are the media types of PATCH bodies.
var patchFormats = map[string]domain.PatchFormat{
	"application/json-patch+json":  domain.JSONPatch,
	"application/merge-patch+json": domain.MergePatch,
}

// fhirPatch answers PATCH [base]/<type>/<uuid> with a JSON Patch or a
// JSON merge patch.
func (s *server) fhirPatch(c *fiber.Ctx) error {
	mt, _, _ := mime.ParseMediaType(c.Get(fiber.HeaderContentType))
	format, ok := patchFormats[mt]
	if !ok {
		return fiber.NewError(fiber.StatusUnsupportedMediaType,
			"PATCH takes application/json-patch+json (JSON Patch) or application/merge-patch+json (JSON merge patch)")
	}
	version, err := ifMatch(c)
	if err != nil {
		return err
	}
	r, err := s.service.PatchResource(c.UserContext(), actor(c), c.Params("type"), c.Params("id"), format, c.Body(), version)
	if err != nil {
		return err
	}
	return writeResource(c, fiber.StatusOK, r)
}

// fhirDelete answers DELETE [base]/<type>/<uuid>.
func (s *server) fhirDelete(c *fiber.Ctx) error {
	version, err := ifMatch(c)
	if err != nil {
		return err
	}
	if err := s.service.DeleteResource(c.UserContext(), actor(c), c.Params("type"), c.Params("id"), version); err != nil {
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}

// fhirReadImported answers GET [base]/<type>/<uuid>, and its vread: only
// the current version is kept.
func (s *server) fhirReadImported(c *fiber.Ctx) error {
	r, err := s.service.ResourceByID(c.UserContext(), actor(c), c.Params("type"), c.Params("id"))
	if err != nil {
		return err
	}
	if vid := c.Params("vid"); vid != "" && vid != strconv.FormatInt(r.VersionID, 10) {
		return domain.Errorf(domain.CodeNotFound, "%s/%s has no version %s: only the current version, %d, is kept", r.Type, r.ID, vid, r.VersionID)
	}
	return writeResource(c, fiber.StatusOK, r)
}

// searchImported runs a search of the imported store; the resources go
// into the Bundle as stored.
func (s *server) searchImported(ctx context.Context, a *domain.Actor, q *fhirsearch.Query) ([]searchHit, bool, *int64, error) {
	return searchWith(s.service.SearchResources, func(r *domain.Resource) (any, fhirsearch.Position) {
		return json.RawMessage(r.JSON), fhirsearch.Position{UUID: r.ID, Date: r.Index.SortDate, LastUpdated: r.LastUpdated}
	})(ctx, a, q)
}

// decodeExact decodes JSON keeping numbers as written (json.Number), so
// that re-encoding it does not round decimals.
func decodeExact(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return dec.Decode(v)
}
