package handlers

import (
	"encoding/json"
	"fmt"

	"github.com/gofiber/fiber/v2"

	"exchange/domain"
)

// registerImport mounts the R4 import: POST /fhir-import/R4 (an R4
// Bundle) and POST /fhir-import/R4/<Type> (one R4 resource); other
// methods are 405.
func (s *server) registerImport(app *fiber.App) {
	g := app.Group("/fhir-import/R4", s.negotiate, s.authenticate)
	g.Post("/", s.importR4)
	g.Post("/:type", s.importR4)
	g.All("/", methodNotAllowed("POST"))
	g.All("/:type", methodNotAllowed("POST"))
	g.All("/:type/*", methodNotAllowed("POST"))
}

// importR4 converts each R4 resource and creates it through the normal
// create path, under the FHIR source the request names. The answer is
// always a batch-response Bundle, one entry per input, each with an
// OperationOutcome: what the conversion lost, or why the entry failed.
func (s *server) importR4(c *fiber.Ctx) error {
	ctx, a := c.UserContext(), actor(c)
	src, err := s.service.ImportSource(ctx, a, c.Get(domain.SourceHeader))
	if err != nil {
		return err
	}
	resourceType := c.Params("type")
	entries := []entryRequest{{Resource: c.Body()}}
	if resourceType == "" {
		in, err := decodeBundle(c, ": POST one resource to /fhir-import/R4/<type>", false)
		if err != nil {
			return err
		}
		entries = in.Entry
	}
	out := bundle{ResourceType: "Bundle", Type: "batch-response", Entry: batchResponseEntries(len(entries))}
	convs := make([]*domain.R4Conversion, len(entries))
	types := make([]string, len(entries)) // of each entry, for the metrics
	refused := make([]bool, len(entries))
	failed := func(i int, err error) {
		if domain.ErrorCode(err) == domain.CodeInternal {
			s.log.Error("R4 import entry failed", "request_id", requestID(c), "entry", i, "error", err)
		}
		out.Entry[i] = errorEntry(err)
		s.metrics.imports.WithLabelValues(s.metrics.typeLabel(types[i]), outcomeLabel(err)).Inc()
		refused[i] = true
	}
	pending := creates{entries: len(entries)}
	for i, e := range entries {
		types[i] = resourceType
		body, err := importBody(i, e, resourceType)
		if err != nil {
			failed(i, err)
			continue
		}
		conv, err := s.service.ConvertR4(src, body, resourceType)
		if err != nil {
			failed(i, err)
			continue
		}
		convs[i], types[i] = conv, conv.Type
		s.metrics.dropped.WithLabelValues(s.metrics.typeLabel(conv.Type)).Add(float64(len(conv.Dropped)))
		if !conv.Native { // known from the conversion: no second decoding
			pending.addImported(i, conv.Write(fmt.Sprint(src.ID)))
		} else if err := s.addCreate(&pending, i, conv.Type, conv.Body, nil, fmt.Sprint(src.ID)); err != nil {
			failed(i, err)
		}
	}
	if losses := domain.CountLosses(convs); losses.Values > 0 {
		s.log.Info("R4 import dropped values the R5 maps have no place for", "request_id", requestID(c), "source", src.ID,
			"maps", s.service.MapSet(), "resources", losses.Resources, "values", losses.Values, "paths", losses.String())
	}
	s.createAll(ctx, c, a, &pending, out.Entry, failed)
	for i := range out.Entry {
		if !refused[i] {
			s.metrics.imports.WithLabelValues(s.metrics.typeLabel(types[i]), outcomeLabel(nil)).Inc()
		}
		if out.Entry[i].Response == nil {
			continue
		}
		out.Entry[i].Response.Outcome = importOutcome(out.Entry[i].Response.Outcome, convs[i], s.service.MapSet())
	}
	return writeFHIR(c, fiber.StatusOK, out)
}

// importOutcome is an entry's OperationOutcome: its error issue (when it
// failed), one warning per dropped path, an information issue saying no
// loss was detected when nothing failed or was dropped, then one
// information issue per translated code and per required element marked
// absent in its conversion (nil when it failed before one).
func importOutcome(failure any, conv *domain.R4Conversion, mapSet string) fiber.Map {
	var issues []fiber.Map
	if oo, ok := failure.(fiber.Map); ok {
		issues, _ = oo["issue"].([]fiber.Map)
	}
	if conv == nil {
		conv = &domain.R4Conversion{}
	}
	for _, path := range conv.Dropped {
		issues = append(issues, fhirIssue("warning", "informational",
			"the R4 value at "+path+" has no place in the R5 resource and was dropped ("+mapSet+")", path))
	}
	if len(issues) == 0 {
		issues = append(issues, fhirIssue("information", "informational", "converted from R4 with no detected field loss ("+mapSet+")", ""))
	}
	for _, t := range conv.Translated {
		issues = append(issues, fhirIssue("information", "informational",
			"R4 code "+t.From+" translated to R5 code "+t.To+" by ConceptMap "+t.ConceptMap, t.Path))
	}
	for _, path := range conv.Absent {
		issues = append(issues, fhirIssue("information", "informational",
			"R5 requires "+path+", which the R4 resource does not give: it is sent without a value, marked by the data-absent-reason extension (unsupported)", path))
	}
	return outcomeOf(issues...)
}

// importBody is the R4 resource of entry i: the request body when the URL
// names a type, else a Bundle entry's resource. Every entry of a Bundle
// is imported on its own, a transaction's too; only creates are.
func importBody(i int, e entryRequest, resourceType string) (json.RawMessage, error) {
	if resourceType != "" {
		if len(e.Resource) == 0 || string(e.Resource) == "null" {
			return nil, domain.FieldErrorf(resourceType, "the request body is required: one R4 %s resource", resourceType)
		}
		return e.Resource, nil
	}
	if !e.create(true) {
		return nil, domain.FieldErrorf(fmt.Sprintf("Bundle.entry[%d].request.method", i), "only creates (POST) are imported")
	}
	return e.resource(i)
}
