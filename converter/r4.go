package converter

import (
	"fmt"
	"strings"

	"github.com/google/fhir/go/fhirversion"
	"github.com/google/fhir/go/jsonformat"

	"exchange/domain"
)

// Importer is the engine as the domain uses it: every R4 resource is
// first checked by Google's FHIR R4 parser (github.com/google/fhir/go
// jsonformat), then converted.
type Importer struct {
	engine *Engine
	parser *jsonformat.Unmarshaller
}

var _ domain.R4Converter = (*Importer)(nil)

// NewImporter wraps a compiled engine.
func NewImporter(e *Engine) (*Importer, error) {
	u, err := jsonformat.NewUnmarshaller("UTC", fhirversion.R4)
	if err != nil {
		return nil, err
	}
	return &Importer{engine: e, parser: u}, nil
}

// MapSet implements domain.R4Converter.
func (im *Importer) MapSet() string { return MapSetVersion }

// ConvertR4 implements domain.R4Converter: the parser and the engine
// read the same bytes.
func (im *Importer) ConvertR4(data []byte) (*domain.R4Conversion, error) {
	resource, err := DecodeJSON(data)
	if err != nil {
		return nil, domain.Errorf(domain.CodeInvalid, "the R4 resource is not valid JSON: %v", err)
	}
	rt, _ := resource["resourceType"].(string)
	if err := im.engine.Supports(rt); err != nil {
		return nil, domain.Errorf(domain.CodeNotSupported, "%s", strings.TrimPrefix(err.Error(), ErrNotSupported.Error()+": "))
	}
	if _, err := im.parser.Unmarshal(data); err != nil {
		return nil, domain.FieldErrorf(rt, "not valid R4: %v", err)
	}
	res, err := im.engine.convert(rt, resource)
	if err != nil {
		return nil, domain.Errorf(domain.CodeInvalid, "%s could not be converted to R5: %v", rt, err)
	}
	conv := &domain.R4Conversion{Type: res.Type, Body: res.Resource, Dropped: res.Dropped, Absent: res.Absent}
	for _, t := range res.Translated {
		conv.Translated = append(conv.Translated, domain.CodeTranslation{Path: t.Path, From: t.From, To: t.To, ConceptMap: t.ConceptMap})
	}
	return conv, nil
}

// Describe is one line on the compiled maps, for the start-up log.
func (e *Engine) Describe() string {
	s := e.stats
	codes := "codes pass through translate() unchanged"
	if s.ConceptMaps > 0 {
		codes = fmt.Sprintf("translate() applies %d ConceptMaps", s.ConceptMaps)
	}
	return fmt.Sprintf("%s: %d maps, %d groups, %d rules (%d never run: unsupported conditions or FHIRPath), %d patched, %s, compiled in %v",
		MapSetVersion, s.Files, s.Groups, s.Rules, s.Unsupported, s.Patched, codes, s.Took.Round(1e6))
}
