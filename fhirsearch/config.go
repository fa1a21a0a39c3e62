package fhirsearch

import (
	"slices"

	"exchange/domain"
)

// ParamType is the FHIR type of a search parameter, as the
// CapabilityStatement states it.
type ParamType string

// The parameter types the service uses.
const (
	TypeToken     ParamType = "token"
	TypeDate      ParamType = "date"
	TypeString    ParamType = "string"
	TypeReference ParamType = "reference"
	TypeNumber    ParamType = "number"
	TypeURI       ParamType = "uri"
	TypeQuantity  ParamType = "quantity"
	TypeSpecial   ParamType = "special"
)

// Param is one search parameter of a resource type. A parameter applies to
// the native store when it has a Field or a Join, to the imported store
// when Imported is set; the common parameters apply to both.
type Param struct {
	Name string
	Type ParamType
	Doc  string
	// Join is set for parameters the domain resolves into ids.
	Join domain.JoinKind
	// Field is the native document field a token, string or reference
	// parameter matches; for a date, the field of the start of the range.
	Field string
	// EndField is the native field of the end of a date range.
	EndField string
	// CodeSystem is the one system of a token parameter whose native field
	// holds plain codes (status); a token naming another system matches
	// nothing.
	CodeSystem string
	// Imported marks a parameter of the imported store, indexed from the
	// R5 SearchParameter definition of the same name, or from Expression
	// where R5 defines none (the US Core parameters R5 lacks).
	Imported   bool
	Expression string
	// Definition is the canonical URL of the R5 SearchParameter the index
	// follows; empty for an expression of our own.
	Definition string
	// common parameters apply to every type and both stores; control
	// ones shape the result rather than filter it.
	common, control bool
}

// Native reports whether the parameter applies to the native store.
func (p *Param) Native() bool { return p.common || p.Field != "" || p.Join != "" }

// ImportedOnly reports whether the parameter applies only when _source
// selects the imported store.
func (p *Param) ImportedOnly() bool { return p.Imported && !p.Native() }

func (p *Param) appliesTo(store domain.StoreKind) bool {
	if store == domain.StoreImported {
		return p.common || p.Imported
	}
	return p.Native()
}

// SortKey is a value _sort accepts for a type.
type SortKey struct {
	Name string // date, _lastUpdated
	// Asc and Desc are the fields sorted on in each direction. They differ
	// where resources without a value must come last both ways: those get
	// the largest value in Asc and the smallest in Desc.
	Asc, Desc string
}

// Resource is one resource type the service serves.
type Resource struct {
	Type string
	// Collection holds the native records (projections read the admin
	// collections); empty for a type only the imported store keeps.
	Collection string
	// BaseFilter selects the native collection's records of the type.
	BaseFilter map[string]any
	// Interactions are the FHIR interactions on the type.
	Interactions []string
	Params       []Param
	// Sorts are the native sort keys; the imported store sorts by the
	// type's SortParam and _lastUpdated.
	Sorts []SortKey
	// IndexPrefix lists, in index order, the equality fields the native
	// collection's compound indexes start with: the planner puts the
	// longest run of them it has at the top of the $match.
	IndexPrefix []string
	// PatientField is the native field the patients a search may return
	// are matched on (domain.Scope.PatientIDs); empty: patientId.
	PatientField string
	// Imported says the imported store keeps resources of the type.
	Imported bool
	// SortParam is the date parameter imported resources of the type sort
	// by (_sort=<it>); empty: date, when the type has it.
	SortParam string
	// Doc is shown in the CapabilityStatement.
	Doc string

	// Set by the Catalog: the parameters by name, the common ones
	// included, and the compiled extraction of the imported-store ones.
	params  map[string]*Param
	indexed []indexedParam
}

// The imported store's collection and its planning.
const importedCollection = "resources"

var importedIndexPrefix = []string{"resourceType", "sourceId"}

// sortParam is the date parameter the imported resources of the type sort
// by: its start is stored as their sort date. Empty: they sort by
// _lastUpdated only.
func (r *Resource) sortParam() string {
	if r.SortParam != "" {
		return r.SortParam
	}
	if p, ok := r.param("date"); ok && p.Imported {
		return "date"
	}
	return ""
}

// importedSorts are the sort keys of the imported store for the type.
func (r *Resource) importedSorts() []SortKey {
	if name := r.sortParam(); name != "" {
		return []SortKey{{Name: name, Asc: "sortAsc", Desc: "sortDesc"}, lastUpdatedSort}
	}
	return []SortKey{lastUpdatedSort}
}

// The common parameters of every type. _id and _lastUpdated use the same
// fields in every collection.
var commonParams = []Param{
	{Name: "_id", Type: TypeToken, Doc: "Logical id: an integer for native records, a UUID for imported ones", Field: "_id", common: true},
	{Name: "_lastUpdated", Type: TypeDate, Doc: "When the record last changed; prefixes eq, ne, lt, le, gt, ge, sa, eb, ap", Field: "lastUpdated", EndField: "lastUpdated", common: true},
	{Name: "_source", Type: TypeURI, Doc: "Selects the store: omitted, the native store; {FHIR_SOURCE_BASE}/<id>, that FHIR source; :below={FHIR_SOURCE_BASE}/, every FHIR source the caller may read", common: true},
	{Name: "_sort", Type: TypeString, Doc: "One sort key, descending with a leading '-': _lastUpdated, date for native Observations, the type's main date parameter in the imported store (date, onset-date, birthdate, ...); ties broken by id", common: true, control: true},
	{Name: "_count", Type: TypeNumber, Doc: "Page size: default 50, at most 1000", common: true, control: true},
	{Name: "_summary", Type: TypeToken, Doc: "count: the total only", common: true, control: true},
	{Name: "_total", Type: TypeToken, Doc: "accurate: count the whole result", common: true, control: true},
	{Name: "_elements", Type: TypeString, Doc: "Comma-separated top-level elements to return", common: true, control: true},
}

// joins are the parameters every native projection answers; patientDoc
// says what patient means for the type, importedPatient whether the
// imported store answers it too.
func joins(patientDoc string, importedPatient bool) []Param {
	return []Param{
		{Name: "_has:Group:member:_id", Type: TypeSpecial, Join: domain.JoinStudy, Doc: "Related to the study (Group) with this id"},
		{Name: "patient", Type: TypeReference, Join: domain.JoinPatient, Imported: importedPatient, Doc: patientDoc},
		{Name: "patient.organization", Type: TypeReference, Join: domain.JoinPatientOrganization, Doc: "Related to the patients of this organization"},
		{Name: "patient._has:Group:member:_id", Type: TypeSpecial, Join: domain.JoinPatientStudy, Doc: "Related to the patients enrolled in this study"},
		{Name: "patient.identifier", Type: TypeToken, Join: domain.JoinPatientIdentifier, Doc: "Related to the patient with this identifier (system|value)"},
	}
}

// Constructors of imported-store parameters, indexed from R5.
func token(name string) Param     { return Param{Name: name, Type: TypeToken, Imported: true} }
func date(name string) Param      { return Param{Name: name, Type: TypeDate, Imported: true} }
func str(name string) Param       { return Param{Name: name, Type: TypeString, Imported: true} }
func reference(name string) Param { return Param{Name: name, Type: TypeReference, Imported: true} }

// withExpression gives a parameter R5 does not define its expression.
func withExpression(p Param, expr string) Param { p.Expression = expr; return p }

// patient is the imported store's patient parameter: resources of the
// patient's FHIR sources, or referring to the patient.
var patient = Param{Name: "patient", Type: TypeReference, Join: domain.JoinPatient, Imported: true,
	Doc: "The patient: resources of the patient's FHIR sources or referring to Patient/<id>"}

// lastUpdatedSort is the _lastUpdated sort of every type.
var lastUpdatedSort = SortKey{Name: "_lastUpdated", Asc: "lastUpdated", Desc: "lastUpdated"}

// importedRW are the interactions of every type: the imported store's;
// native records and projections take the reads only.
var importedRW = []string{"read", "vread", "search-type", "create", "update", "patch", "delete"}

// imported is a type only the imported store keeps.
func imported(resourceType string, params ...Param) Resource {
	return Resource{Type: resourceType, Imported: true, Interactions: importedRW, Params: params,
		Doc: "Imported store: resources sent by FHIR sources, kept as sent; searched with _source."}
}

// sortedBy names the date parameter imported resources of a type sort by.
func sortedBy(param string, r Resource) Resource { r.SortParam = param; return r }

// configured is the configuration table of the FHIR interface: the native
// types (Observation and the read-only projections) and the 28 types of
// the imported store with their US Core search parameters. The Catalog
// adds the other R5 types, with the parameters R5 defines for them.
var configured = []Resource{
	{
		Type: "Observation", Collection: "observations", Imported: true, Interactions: importedRW,
		Doc: "Native store: Open mHealth (https://w3id.org/openmhealth) and IEEE 1752 (https://w3id.org/ieee1752) observations, created one at a time or in a batch Bundle. Other Observations are imported, with a FHIR source.",
		Params: []Param{
			{Name: "patient", Type: TypeReference, Join: domain.JoinPatient, Imported: true, Doc: "The subject: Patient/<id> or <id>"},
			{Name: "patient.organization", Type: TypeReference, Join: domain.JoinPatientOrganization, Doc: "Observations of the patients of this organization"},
			{Name: "patient.identifier", Type: TypeToken, Join: domain.JoinPatientIdentifier, Doc: "Observations of the patient with this identifier (system|value)"},
			{Name: "patient._has:Group:member:_id", Type: TypeSpecial, Join: domain.JoinPatientStudy,
				Doc: "Observations of the patients enrolled in this study, limited per patient to the scopes consented to for it"},
			{Name: "code", Type: TypeToken, Field: "codeTokens", Imported: true, Doc: "system|code, |code or code; Open mHealth and IEEE 1752 systems are interchangeable"},
			{Name: "date", Type: TypeDate, Field: "effectiveStart", EndField: "effectiveEnd", Imported: true, Doc: "effective[x], with FHIR range semantics"},
			{Name: "identifier", Type: TypeToken, Field: "identifierTokens", Doc: "system|value"},
			{Name: "status", Type: TypeToken, Field: "status", CodeSystem: "http://hl7.org/fhir/observation-status", Imported: true, Doc: "The status given by the uploader"},
			{Name: "category", Type: TypeToken, Imported: true, Doc: "The category"},
		},
		Sorts:       []SortKey{{Name: "date", Asc: "sortAsc", Desc: "sortDesc"}, lastUpdatedSort},
		IndexPrefix: []string{"patientId", "codeTokens"},
	},
	{
		Type: "Patient", Collection: "patients", Imported: true, Interactions: importedRW,
		Doc: "Native: read-only projection of the exchange's patients. Imported: patients sent by FHIR sources.",
		Params: append([]Param{
			{Name: "identifier", Type: TypeToken, Field: "identifierTokens", Imported: true, Doc: "system|value, |value or value"},
			{Name: "family", Type: TypeString, Field: "familyKey", Imported: true, Doc: "Starts with, ignoring case and accents"},
			{Name: "given", Type: TypeString, Field: "givenKeys", Imported: true, Doc: "Starts with, ignoring case and accents"},
			{Name: "name", Type: TypeString, Field: "nameKeys", Imported: true, Doc: "A family or given name starts with, ignoring case and accents"},
			{Name: "birthdate", Type: TypeDate, Field: "birthDateStart", EndField: "birthDateEnd", Imported: true, Doc: "Prefixes eq, ne, lt, le, gt, ge, sa, eb, ap"},
			{Name: "death-date", Type: TypeDate, Imported: true, Doc: "deceasedDateTime"},
			{Name: "gender", Type: TypeToken, Imported: true, Doc: "male | female | other | unknown"},
		}, joins("This patient", false)...),
		Sorts: []SortKey{lastUpdatedSort}, SortParam: "birthdate",
	},
	{
		Type: "Practitioner", Collection: "users", BaseFilter: map[string]any{"userType": "practitioner"}, Imported: true, Interactions: importedRW,
		Doc:    "Native: read-only projection of practitioners: those of the study's organization, of the patient's organizations, of the organization. Imported: practitioners sent by FHIR sources.",
		Params: append([]Param{token("identifier"), str("name")}, joins("Practitioners of the patient's organizations", false)...), Sorts: []SortKey{lastUpdatedSort},
	},
	{
		Type: "Organization", Collection: "organizations", Imported: true, Interactions: importedRW,
		Doc:    "Native: read-only projection of organizations: the study's organization, the patient's organizations, the organization itself. Imported: organizations sent by FHIR sources.",
		Params: append([]Param{str("address"), str("name")}, joins("The patient's organizations", false)...), Sorts: []SortKey{lastUpdatedSort},
	},
	{
		Type: "Group", Collection: "studies", Imported: true, Interactions: importedRW,
		Doc:    "Native: read-only projection of studies: the study, the patient's studies, the organization's studies. Imported: groups sent by FHIR sources.",
		Params: joins("The patient's studies", false), Sorts: []SortKey{lastUpdatedSort},
	},
	{
		Type: "Device", Collection: "data_sources", Imported: true, Interactions: importedRW,
		Doc: "Native: read-only projection of data sources: the study's, those of the patient's studies, those of the organization's studies. Imported: devices sent by FHIR sources.",
		Params: append([]Param{token("status"), token("type")},
			joins("Data sources of the patient's studies; imported: devices of the patient's FHIR sources", true)...),
		Sorts: []SortKey{lastUpdatedSort},
	},
	{
		// Native and read-only: the audit trail the exchange records, never
		// an imported store type (AuditEvents sent by FHIR sources would
		// mix with it).
		Type: "AuditEvent", Collection: "audit_events", Interactions: []string{"read", "vread", "search-type"},
		Doc: "Native, read-only: the exchange's audit trail (reads, searches, writes and imports of patient data, consent changes, sign-ins, token issues). Superusers see every event; a patient the events about themselves, without the other patients they touched.",
		Params: []Param{
			{Name: "patient", Type: TypeReference, Join: domain.JoinPatient, Doc: "Events about the patient's data: Patient/<id> or <id>"},
			{Name: "date", Type: TypeDate, Field: "lastUpdated", EndField: "lastUpdated", Doc: "When the event was recorded"},
			{Name: "agent", Type: TypeReference, Field: "agent", Doc: "Who acted: Practitioner/<user id> or Patient/<id>"},
			{Name: "entity-type", Type: TypeToken, Field: "entityTypes", CodeSystem: "http://hl7.org/fhir/fhir-types", Doc: "The type of what was acted on (Observation, Patient, Consent, ...)"},
			{Name: "action", Type: TypeToken, Field: "action", CodeSystem: "http://hl7.org/fhir/audit-event-action", Doc: "C, R, U, D or E (searches, sign-ins, token issues)"},
		},
		Sorts:       []SortKey{{Name: "date", Asc: "lastUpdated", Desc: "lastUpdated"}, lastUpdatedSort},
		IndexPrefix: []string{"patientIds"}, PatientField: "patientIds",
	},
	imported("AllergyIntolerance", token("clinical-status"), patient),
	imported("CarePlan", token("category"), date("date"), token("status"), patient),
	imported("CareTeam", withExpression(token("role"), "CareTeam.participant.role"), token("status"), patient),
	sortedBy("onset-date", imported("Condition", date("abatement-date"),
		withExpression(date("asserted-date"), "Condition.extension.where(url = 'http://hl7.org/fhir/StructureDefinition/condition-assertedDate').value"),
		token("category"), token("clinical-status"), token("code"), reference("encounter"), date("onset-date"), date("recorded-date"), patient)),
	imported("Coverage"),
	imported("DiagnosticReport", token("category"), token("code"), date("date"), token("status"), patient),
	imported("DocumentReference", token("category"), date("date"), date("period"), token("status"), token("type"), patient),
	imported("Encounter", token("class"), date("date"), withExpression(token("discharge-disposition"), "Encounter.admission.dischargeDisposition"),
		token("identifier"), reference("location"), token("status"), token("type"), patient),
	imported("FamilyMemberHistory", token("code"), patient),
	sortedBy("target-date", imported("Goal", token("description"), token("lifecycle-status"), date("target-date"), patient)),
	imported("Immunization", date("date"), token("status"), patient),
	imported("Location", str("address"), str("address-city"), str("address-postalcode"), str("address-state"), str("name")),
	imported("Medication"),
	imported("MedicationDispense", token("status"), token("type"), patient),
	sortedBy("authoredon", imported("MedicationRequest", date("authoredon"), reference("encounter"), token("intent"), token("status"), patient)),
	imported("PractitionerRole", reference("practitioner"), token("specialty")),
	imported("Procedure", token("code"), date("date"), token("status"), patient),
	imported("Provenance"),
	sortedBy("authored", imported("QuestionnaireResponse", date("authored"), reference("questionnaire"), token("status"), patient)),
	imported("RelatedPerson", str("name"), patient),
	sortedBy("authored", imported("ServiceRequest", date("authored"), token("category"), withExpression(token("code"), "ServiceRequest.code.concept"), token("status"), patient)),
	imported("Specimen"),
}

// Native reports whether the type has a native store.
func (r *Resource) Native() bool { return r.Collection != "" }

// Allows reports whether the type takes a FHIR interaction (create,
// update, ...).
func (r *Resource) Allows(interaction string) bool {
	return slices.Contains(r.Interactions, interaction)
}

// AllParams returns the type's parameters followed by the common ones:
// every parameter the type honours, as the CapabilityStatement lists them.
func (r *Resource) AllParams() []Param {
	return append(slices.Clone(r.Params), commonParams...)
}

func (r *Resource) param(name string) (*Param, bool) {
	p, ok := r.params[name]
	return p, ok
}

func (r *Resource) sortKey(name string, store domain.StoreKind) (*SortKey, bool) {
	if name == "lastUpdated" { // the spelling without underscore, as in _sort=lastUpdated
		name = "_lastUpdated"
	}
	sorts := r.Sorts
	if store == domain.StoreImported || !r.Native() {
		sorts = r.importedSorts()
	}
	i := slices.IndexFunc(sorts, func(s SortKey) bool { return s.Name == name })
	if i < 0 {
		return nil, false
	}
	return &sorts[i], true
}
