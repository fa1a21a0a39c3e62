package handlers

import (
	"fmt"
	"mime"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// The FHIR interface lives at /FHIR/R5 (canonical, with permissive CORS)
// and /fhir/r5 (an alias without CORS headers): the same routes, registered
// twice, with CORS decided from the raw path.
const (
	fhirCanonical = "/FHIR/R5"
	fhirAlias     = "/fhir/r5"
)

// Media types of FHIR JSON.
const (
	mediaFHIRJSON = "application/fhir+json"
	mediaJSON     = "application/json"
	fhirTypeKey   = "fhirContentType"
)

// registerFHIR mounts the FHIR routes under a prefix.
func (s *server) registerFHIR(app *fiber.App, prefix string) {
	g := app.Group(prefix, s.fhirCORS, s.negotiate)
	discovery := func(path string, h fiber.Handler) {
		g.Get(path, h) // Fiber answers HEAD for GET routes
		g.All(path, methodNotAllowed("GET, HEAD"))
	}
	discovery("/metadata", s.capabilityStatement)
	discovery("/.well-known/smart-configuration", s.smartConfiguration)

	api := g.Group("", s.authenticate)
	s.registerExport(api)
	api.Post("/", s.fhirBatch)
	api.Get("/Observation/$stats", s.observationStats)
	api.Get("/:type", s.fhirSearch)
	api.Post("/:type", s.fhirCreate)
	api.Get("/:type/:id", s.fhirRead)
	api.Get("/:type/:id/_history/:vid", s.fhirRead)
	api.Put("/:type/:id", s.importedOnly(s.fhirUpdate))
	api.Patch("/:type/:id", s.importedOnly(s.fhirPatch))
	api.Delete("/:type/:id", s.importedOnly(s.fhirDelete))
	api.All("/:type/:id", methodNotAllowed("GET, HEAD, PUT, PATCH, DELETE"))
}

// methodNotAllowed answers 405 with the methods a route has.
func methodNotAllowed(allow string) fiber.Handler {
	return func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderAllow, allow)
		return fiber.NewError(fiber.StatusMethodNotAllowed, c.Method()+" is not allowed here; allowed: "+allow)
	}
}

// fhirCORS gives the canonical path permissive CORS and answers its
// preflight requests; the alias gets no CORS headers. The decision is made
// on the raw path, as received.
func (s *server) fhirCORS(c *fiber.Ctx) error {
	if !strings.HasPrefix(string(c.Request().URI().Path()), fhirCanonical) {
		return c.Next()
	}
	h := &c.Response().Header
	h.Set(fiber.HeaderAccessControlAllowOrigin, "*")
	h.Set(fiber.HeaderAccessControlAllowMethods, "GET, POST, PUT, PATCH, DELETE")
	h.Set(fiber.HeaderAccessControlAllowHeaders, "Authorization, Content-Type, Accept, Prefer, If-Match, X-SERVICE-FHIR-Source-ID")
	h.Set(fiber.HeaderAccessControlExposeHeaders, "Location, ETag, Last-Modified, Content-Location, X-Progress, Retry-After, Expires")
	if c.Method() == fiber.MethodOptions {
		h.Set(fiber.HeaderAccessControlMaxAge, "86400")
		return c.SendStatus(fiber.StatusNoContent)
	}
	return c.Next()
}

// negotiate picks the response media type from _format and Accept: FHIR
// JSON unless plain JSON is preferred; anything that is not JSON is 406.
func (s *server) negotiate(c *fiber.Ctx) error {
	chosen := mediaFHIRJSON
	if f := c.Query("_format"); f != "" {
		switch f {
		case "json", mediaFHIRJSON:
		case mediaJSON:
			chosen = mediaJSON
		default:
			return fiber.NewError(fiber.StatusNotAcceptable, fmt.Sprintf("_format: %q is not supported; the service speaks JSON (json, %s, %s)", f, mediaFHIRJSON, mediaJSON))
		}
	} else if accept := c.Get(fiber.HeaderAccept); accept != "" {
		best := ""
		bestQ := -1.0
		for _, part := range strings.Split(accept, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue
			}
			q := 1.0
			if v, ok := params["q"]; ok {
				if q, err = strconv.ParseFloat(v, 64); err != nil {
					q = 0
				}
			}
			switch mt {
			case mediaFHIRJSON, mediaJSON, "application/*", "*/*":
				if q > bestQ && q > 0 {
					best, bestQ = mt, q
				}
			}
		}
		switch best {
		case "":
			return fiber.NewError(fiber.StatusNotAcceptable, "Accept: the service answers "+mediaFHIRJSON+" or "+mediaJSON)
		case mediaJSON:
			chosen = mediaJSON
		}
	}
	c.Locals(fhirTypeKey, chosen)
	return c.Next()
}

// fhirContentType is the media type negotiated for the response.
func fhirContentType(c *fiber.Ctx) string {
	if t, ok := c.Locals(fhirTypeKey).(string); ok {
		return t
	}
	return mediaFHIRJSON
}

// writeFHIR answers a FHIR resource in the negotiated media type. A value
// that writes its own JSON writes it into the response's pooled body
// buffer: a search page is some 50 KB that would otherwise be allocated
// (and cleared) for each request.
func writeFHIR(c *fiber.Ctx, status int, v any) error {
	ct := fhirContentType(c)
	a, ok := v.(jsonAppender)
	if !ok {
		return c.Status(status).JSON(v, ct)
	}
	resp := c.Status(status).Response()
	resp.Header.SetContentType(ct)
	resp.SwapBody(a.appendJSON(resp.SwapBody(nil)[:0]))
	return nil
}
