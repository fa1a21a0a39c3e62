package fhirsearch

import (
	"fmt"
	"slices"
	"strings"

	"exchange/domain"
	"exchange/fhirdefs"
)

// Catalog is the set of resource types the FHIR interface serves, each
// with its interactions and search parameters: the one place that says
// whether a type is served (Lookup), what the CapabilityStatement lists
// (Resources) and how an imported resource is indexed (Index).
//
// It holds the configuration table (the native types and the 28 types
// of the imported store with their US Core parameters) and, given the R5
// core package, every other concrete R5 resource type but those listed in
// notServed, each with the search parameters the package defines for it:
// those of kind token, reference, date, string, uri, number or quantity
// whose expression the evaluator of this package follows. Composite and
// special parameters, and expressions beyond the evaluator, are skipped
// (Skipped says why) and never advertised. patient= on those types follows
// the type's R5 patient parameter, or else the parameters that place it in
// the Patient compartment (CompartmentDefinition-patient), restricted to
// references to a Patient; every resource of a FHIR source also belongs
// to the source's patient, as on the configured types.
//
// A Catalog is built once, at start-up, and read-only afterwards: the
// package's SearchParameters (~1,200 small files) are read once, which
// the configured types' need anyway; no StructureDefinition is read.
type Catalog struct {
	resources []*Resource // sorted by type
	byType    map[string]*Resource
	skipped   []SkippedParam
}

// SkippedParam is an R5 search parameter of a served type that is not
// offered, with the reason.
type SkippedParam struct {
	Type, Code string
	Kind       string // the parameter's type: composite, special, token, ...
	Reason     string
}

// notServed are the R5 resource types the imported store does not keep,
// with the reason a client is given. They are not patient data a FHIR
// source sends, or a stored copy would claim behaviour this server does
// not have.
var notServed = map[string]string{
	// Containers and messages of the protocol itself.
	"Bundle": "a Bundle is a container: send its entries as a batch (POST [base]), each resource is then validated, " +
		"permitted and searchable on its own",
	"Parameters":       "Parameters carry the input and output of operations; FHIR defines no storage for them",
	"OperationOutcome": "an OperationOutcome is the outcome of one interaction; FHIR defines no storage for it",
	"Binary": "a Binary is read as raw content in its own media type, under its own security context; this store " +
		"keeps and serves FHIR JSON: carry the content in a DocumentReference attachment",
	// Server behaviour this server does not have.
	"Subscription":       "subscriptions (topic-based notifications) are not offered by this server",
	"SubscriptionStatus": "a SubscriptionStatus exists only inside subscription notifications, which this server does not send",
	"SubscriptionTopic":  "subscriptions (topic-based notifications) are not offered by this server",
	"CapabilityStatement": "this server's own CapabilityStatement is GET [base]/metadata; other systems' describe " +
		"no patient's data",
	"TerminologyCapabilities": "this server offers no terminology service",
	// Conformance and terminology: stored, they would read as definitions
	// this server applies (profiles, search parameters, value sets), which
	// it does not: validation uses hl7.fhir.r5.core only.
	"StructureDefinition":   conformance,
	"SearchParameter":       conformance,
	"OperationDefinition":   conformance,
	"CompartmentDefinition": conformance,
	"ImplementationGuide":   conformance,
	"StructureMap":          conformance,
	"GraphDefinition":       conformance,
	"MessageDefinition":     conformance,
	"ExampleScenario":       conformance,
	"ActorDefinition":       conformance,
	"Requirements":          conformance,
	"CodeSystem":            terminology,
	"ValueSet":              terminology,
	"ConceptMap":            terminology,
	"NamingSystem":          terminology,
	// Testing of FHIR systems.
	"TestScript": conformanceTests,
	"TestReport": conformanceTests,
	"TestPlan":   conformanceTests,
}

const (
	conformance = "conformance resources define how FHIR systems behave; stored here they would read as definitions " +
		"this server applies, and it applies only hl7.fhir.r5.core"
	terminology = "terminology resources belong on a terminology server; this server validates codes against " +
		"hl7.fhir.r5.core and its expansions only, and offers no $expand or $translate"
	conformanceTests = "conformance tests of FHIR systems are not patient data"
)

// NotServed returns why the imported store does not keep an R5 resource
// type, and false for any other name.
func NotServed(resourceType string) (string, bool) {
	reason, ok := notServed[resourceType]
	return reason, ok
}

// NotServedTypes returns the R5 resource types the imported store does
// not keep, sorted.
func NotServedTypes() []string {
	types := make([]string, 0, len(notServed))
	for t := range notServed {
		types = append(types, t)
	}
	slices.Sort(types)
	return types
}

// NewCatalog builds the catalog. Without a package (nil: the FHIR packages
// are not installed) it serves the configured types only, and indexes
// nothing: the imported store then takes no writes. With one, an
// expression of a configured parameter that is missing from the package
// or beyond the evaluator is an error, at start-up rather than at write.
func NewCatalog(defs *fhirdefs.Package) (*Catalog, error) {
	c := &Catalog{byType: map[string]*Resource{}}
	for i := range configured {
		r := configured[i]
		r.Params = slices.Clone(r.Params)
		if defs != nil && r.Imported {
			if err := r.compileConfigured(defs); err != nil {
				return nil, err
			}
			if err := c.addDefined(defs, &r); err != nil {
				return nil, err
			}
		}
		c.add(&r)
	}
	if defs != nil {
		if err := c.addR5Types(defs); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(c.resources, func(a, b *Resource) int { return strings.Compare(a.Type, b.Type) })
	return c, nil
}

func (c *Catalog) add(r *Resource) {
	r.params = map[string]*Param{}
	all := r.AllParams()
	for i := range all {
		r.params[all[i].Name] = &all[i]
	}
	c.resources = append(c.resources, r)
	c.byType[r.Type] = r
}

// compileConfigured compiles the imported-store parameters of a
// configured type: the table's own expression, or the R5 definition's.
func (r *Resource) compileConfigured(defs *fhirdefs.Package) error {
	r.indexed = []indexedParam{}
	for i := range r.Params {
		p := &r.Params[i]
		if !p.Imported {
			continue
		}
		expr := p.Expression
		if expr == "" {
			sp, err := defs.SearchParameter(r.Type, p.Name)
			if err != nil && p.Join == domain.JoinPatient {
				continue // no reference to the patient in the type: its source's patient answers
			}
			if err != nil {
				return fmt.Errorf("search parameter %s of %s: %w", p.Name, r.Type, err)
			}
			expr, p.Definition = sp.Expression, sp.URL
		}
		path, err := compileFHIRPath(expr)
		if err != nil {
			return fmt.Errorf("search parameter %s of %s: %w", p.Name, r.Type, err)
		}
		r.indexed = append(r.indexed, indexedParam{name: p.Name, typ: p.Type, path: path})
	}
	return nil
}

// addR5Types adds every R5 resource type the table does not configure and
// notServed does not exclude.
func (c *Catalog) addR5Types(defs *fhirdefs.Package) error {
	types, err := defs.ResourceTypes()
	if err != nil {
		return fmt.Errorf("the R5 resource types: %w", err)
	}
	compartment, err := defs.PatientCompartment()
	if err != nil {
		return fmt.Errorf("the R5 Patient compartment: %w", err)
	}
	for _, t := range types {
		if _, configured := c.byType[t]; configured || notServed[t] != "" {
			continue
		}
		r, err := c.r5Resource(defs, t, compartment[t])
		if err != nil {
			return err
		}
		c.add(r)
	}
	return nil
}

// searchable are the parameter types the imported store indexes.
var searchable = []ParamType{TypeToken, TypeReference, TypeDate, TypeString, TypeURI, TypeNumber, TypeQuantity}

// r5Resource is a type of the imported store with the search parameters
// R5 defines for it. compartmentParams are the parameters that place it
// in the Patient compartment.
func (c *Catalog) r5Resource(defs *fhirdefs.Package, resourceType string, compartmentParams []string) (*Resource, error) {
	r := imported(resourceType)
	r.indexed = []indexedParam{}
	if err := c.addDefined(defs, &r); err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(r.Params, func(p Param) bool { return p.Name == "patient" }) && len(compartmentParams) > 0 {
		if p, path, ok := compartmentPatient(defs, resourceType, compartmentParams); ok {
			r.Params = append(r.Params, p)
			r.indexed = append(r.indexed, indexedParam{name: p.Name, typ: p.Type, path: path})
		}
	}
	r.SortParam = mainDate(r.Params)
	return &r, nil
}

// missingExpressions are expressions for R5 search parameters whose
// definition gives none for a type, where the element searched is plain:
// ImagingStudy's reason is its CodeableReference reason, whose concept a
// token matches.
var missingExpressions = map[string]string{
	"ImagingStudy.reason": "ImagingStudy.reason.concept",
}

// addDefined adds to an imported-store type the search parameters R5
// defines for it that it does not have yet: to a configured type, after
// its own (MedicationRequest's US Core ones lack code, whose expression
// reaches a CodeableReference's concept; every R5 parameter is offered,
// as on the types from R5). Those of a kind or expression the store
// cannot index are recorded as skipped.
func (c *Catalog) addDefined(defs *fhirdefs.Package, r *Resource) error {
	resourceType := r.Type
	defined, err := defs.SearchParameters(resourceType)
	if err != nil {
		return fmt.Errorf("search parameters of %s: %w", resourceType, err)
	}
	skip := func(sp *fhirdefs.SearchParam, format string, args ...any) {
		c.skipped = append(c.skipped, SkippedParam{Type: resourceType, Code: sp.Code, Kind: sp.Type, Reason: fmt.Sprintf(format, args...)})
	}
	have := map[string]bool{}
	for _, p := range r.Params {
		have[p.Name] = true
	}
	for _, p := range commonParams {
		have[p.Name] = true
	}
	for _, sp := range defined {
		if have[sp.Code] {
			continue
		}
		if expr, ok := missingExpressions[resourceType+"."+sp.Code]; ok && sp.Expression == "" {
			fixed := *sp
			fixed.Expression = expr
			sp = &fixed
		}
		typ := ParamType(sp.Type)
		switch {
		case !slices.Contains(searchable, typ):
			skip(sp, "%s parameters are not implemented", sp.Type)
			continue
		case sp.Expression == "":
			skip(sp, "the definition has no expression for %s", resourceType)
			continue
		}
		path, err := compileFHIRPath(sp.Expression)
		if err != nil {
			skip(sp, "the expression is beyond the evaluator: %v", err)
			continue
		}
		p := Param{Name: sp.Code, Type: typ, Imported: true, Expression: sp.Expression, Definition: sp.URL, Doc: sp.Expression}
		if sp.Code == "patient" {
			p.Join, p.Doc = domain.JoinPatient, patientDoc(sp.Expression)
		}
		r.Params = append(r.Params, p)
		r.indexed = append(r.indexed, indexedParam{name: p.Name, typ: p.Type, path: path})
	}
	return nil
}

// compartmentPatient is the patient parameter of a type without an R5
// patient parameter: its Patient-compartment parameters' expressions,
// restricted to references to a Patient. False when none compiles.
func compartmentPatient(defs *fhirdefs.Package, resourceType string, params []string) (Param, fhirPath, bool) {
	var parts []string
	for _, code := range params {
		sp, err := defs.SearchParameter(resourceType, code)
		if err != nil {
			continue
		}
		if _, err := compileFHIRPath(sp.Expression); err == nil {
			parts = append(parts, sp.Expression)
		}
	}
	if len(parts) == 0 {
		return Param{}, nil, false
	}
	expr := "(" + strings.Join(parts, " | ") + ").where(resolve() is Patient)"
	path, err := compileFHIRPath(expr)
	if err != nil {
		return Param{}, nil, false
	}
	return Param{Name: "patient", Type: TypeReference, Join: domain.JoinPatient, Imported: true, Expression: expr,
		Doc: patientDoc(expr) + " (the Patient compartment's " + strings.Join(params, ", ") + ")"}, path, true
}

// mainDate is the date parameter a type's resources sort by: date, or
// else the type's only date parameter (created, for a Claim); "" when it
// has none or several.
func mainDate(params []Param) string {
	var dates []string
	for _, p := range params {
		if p.Type == TypeDate {
			dates = append(dates, p.Name)
		}
	}
	switch {
	case slices.Contains(dates, "date"):
		return "date"
	case len(dates) == 1:
		return dates[0]
	}
	return ""
}

func patientDoc(expr string) string {
	return "The patient: resources of the patient's FHIR sources, or referring to Patient/<id> by " + expr
}

// Lookup returns a served type.
func (c *Catalog) Lookup(resourceType string) (*Resource, bool) {
	r, ok := c.byType[resourceType]
	return r, ok
}

// Require returns a served type, or a domain.CodeNotSupported error that
// says why the name is not one: a type this server does not keep (with
// the reason), or no R5 resource type at all.
func (c *Catalog) Require(resourceType string) (*Resource, error) {
	if r, ok := c.byType[resourceType]; ok {
		return r, nil
	}
	if reason, ok := notServed[resourceType]; ok {
		return nil, domain.Errorf(domain.CodeNotSupported, "%s is not a resource type this server keeps: %s", resourceType, reason)
	}
	return nil, domain.Errorf(domain.CodeNotSupported, "%s is not a resource type this server serves", resourceType)
}

// Resources returns every served type, sorted by name.
func (c *Catalog) Resources() []*Resource { return c.resources }

// TypeNames returns the types the FHIR API serves, in table order: what a
// SMART resource scope may name.
func (c *Catalog) TypeNames() []string {
	out := make([]string, len(c.resources))
	for i, r := range c.resources {
		out[i] = r.Type
	}
	return out
}

// Skipped returns the R5 search parameters of the served types that are
// not offered, with the reasons, in type and code order.
func (c *Catalog) Skipped() []SkippedParam { return c.skipped }

// Keeps reports whether the imported store keeps a type: one it serves
// and can index (the catalog was built with the R5 package).
func (c *Catalog) Keeps(resourceType string) bool {
	r, ok := c.byType[resourceType]
	return ok && r.indexed != nil
}
