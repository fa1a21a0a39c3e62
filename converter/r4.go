package converter

import (
	"fmt"
	"strings"

	"exchange/domain"
	"exchange/fhirdefs"
)

// Importer is the engine as the domain uses it: every R4 resource is
// first validated against R4's definitions (fhirdefs.NewR4Validator over
// the package the engine types R4 by), then converted.
//
// That check replaced Google's R4 parser (github.com/google/fhir/go
// jsonformat), which cost about three conversions per resource: over the
// official R4 examples it refuses every example the parser refused
// (TestR4CheckRefusals), on the tree the conversion reads, with each
// problem's R4 path.
type Importer struct {
	engine *Engine
	r4     *fhirdefs.Validator
}

var _ domain.R4Converter = (*Importer)(nil)

// NewImporter wraps a compiled engine.
func NewImporter(e *Engine) *Importer {
	return &Importer{engine: e, r4: fhirdefs.NewR4Validator(e.r4)}
}

// MapSet implements domain.R4Converter.
func (im *Importer) MapSet() string { return MapSetVersion }

// ConvertR4 implements domain.R4Converter: the R4 check and the engine
// read the same decoded tree. An R4 resource with problems is refused
// with all of them (domain.InvalidResource), each at its R4 path.
func (im *Importer) ConvertR4(resource map[string]any, refs domain.ReferenceRewriter) (*domain.R4Conversion, error) {
	rt, _ := resource["resourceType"].(string)
	if err := im.engine.Supports(rt); err != nil {
		return nil, domain.Errorf(domain.CodeNotSupported, "%s", strings.TrimPrefix(err.Error(), ErrNotSupported.Error()+": "))
	}
	issues, err := im.r4.ValidateObject(resource)
	if err != nil {
		return nil, err
	}
	if len(issues) > 0 {
		return nil, domain.InvalidResource(rt, "R4", issues)
	}
	res, err := im.engine.convert(rt, resource, refs)
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
