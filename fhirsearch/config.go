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
	TypeSpecial   ParamType = "special"
)

// Param is one search parameter of a resource type.
type Param struct {
	Name string
	Type ParamType
	Doc  string
	// Join is set for parameters the domain resolves into ids.
	Join domain.JoinKind
	// ImportedOnly marks parameters that apply only when the search selects
	// the imported store (_source).
	ImportedOnly bool
	// Field is the document field a token, string or reference parameter
	// matches; for a date, the field of the start of the range.
	Field string
	// EndField is the field of the end of a date range.
	EndField string
	// CodeSystem is the one system of a token parameter whose field holds
	// plain codes (status); a token naming another system matches nothing.
	CodeSystem string
	// control parameters shape the result rather than filter it.
	control bool
}

// SortKey is a value _sort accepts for a type.
type SortKey struct {
	Name string // date, _lastUpdated, lastUpdated
	// Asc and Desc are the fields sorted on in each direction. They differ
	// where resources without a value must come last both ways: those get
	// the largest value in Asc and the smallest in Desc.
	Asc, Desc string
}

// Resource is one resource type the service serves.
type Resource struct {
	Type string
	// Collection holds the native records (projections read the admin
	// collections); empty for a type with no native store.
	Collection string
	// BaseFilter selects the collection's records of the type.
	BaseFilter map[string]any
	// Interactions are the FHIR interactions on the type.
	Interactions []string
	Params       []Param
	Sorts        []SortKey
	// IndexPrefix lists, in index order, the equality fields the
	// collection's compound indexes start with: the planner puts the longest
	// run of them it has at the top of the $match.
	IndexPrefix []string
	// Doc is shown in the CapabilityStatement.
	Doc string
}

// The common parameters every type has. _id and _lastUpdated get their
// fields per collection (all use _id and lastUpdated).
var commonParams = []Param{
	{Name: "_id", Type: TypeToken, Doc: "Logical id: an integer for native records", Field: "_id"},
	{Name: "_lastUpdated", Type: TypeDate, Doc: "When the record last changed; prefixes eq, ne, lt, le, gt, ge, sa, eb, ap", Field: "lastUpdated", EndField: "lastUpdated"},
	{Name: "_source", Type: TypeURI, Doc: "Selects the store: omitted, the native store"},
	{Name: "_sort", Type: TypeString, Doc: "One sort key, descending with a leading '-'; ties broken by id", control: true},
	{Name: "_count", Type: TypeNumber, Doc: "Page size: default 50, at most 1000", control: true},
	{Name: "_summary", Type: TypeToken, Doc: "count: the total only", control: true},
	{Name: "_total", Type: TypeToken, Doc: "accurate: count the whole result", control: true},
	{Name: "_elements", Type: TypeString, Doc: "Comma-separated top-level elements to return", control: true},
}

// The joins every native type answers, with the meaning per type told in
// each Resource's Doc.
func joins(patientDoc string) []Param {
	return []Param{
		{Name: "_has:Group:member:_id", Type: TypeSpecial, Join: domain.JoinStudy, Doc: "Related to the study (Group) with this id"},
		{Name: "patient", Type: TypeReference, Join: domain.JoinPatient, Doc: patientDoc},
		{Name: "patient.organization", Type: TypeReference, Join: domain.JoinPatientOrganization, Doc: "Related to the patients of this organization"},
		{Name: "patient._has:Group:member:_id", Type: TypeSpecial, Join: domain.JoinPatientStudy, Doc: "Related to the patients enrolled in this study"},
		{Name: "patient.identifier", Type: TypeToken, Join: domain.JoinPatientIdentifier, Doc: "Related to the patient with this identifier (system|value)"},
	}
}

// lastUpdatedSort is the _lastUpdated sort of every type.
var lastUpdatedSort = SortKey{Name: "_lastUpdated", Asc: "lastUpdated", Desc: "lastUpdated"}

var readSearch = []string{"read", "search-type"}

// Resources is the configuration table of the FHIR interface.
var Resources = []Resource{
	{
		Type: "Observation", Collection: "observations", Interactions: []string{"read", "search-type", "create"},
		Doc: "Native store: Open mHealth (https://w3id.org/openmhealth) and IEEE 1752 (https://w3id.org/ieee1752) observations, created one at a time or in a batch Bundle.",
		Params: []Param{
			{Name: "patient", Type: TypeReference, Join: domain.JoinPatient, Doc: "The subject: Patient/<id> or <id>"},
			{Name: "patient.organization", Type: TypeReference, Join: domain.JoinPatientOrganization, Doc: "Observations of the patients of this organization"},
			{Name: "patient.identifier", Type: TypeToken, Join: domain.JoinPatientIdentifier, Doc: "Observations of the patient with this identifier (system|value)"},
			{Name: "patient._has:Group:member:_id", Type: TypeSpecial, Join: domain.JoinPatientStudy,
				Doc: "Observations of the patients enrolled in this study, limited per patient to the scopes consented to for it"},
			{Name: "code", Type: TypeToken, Field: "codeTokens", Doc: "system|code, |code or code; Open mHealth and IEEE 1752 systems are interchangeable"},
			{Name: "date", Type: TypeDate, Field: "effectiveStart", EndField: "effectiveEnd", Doc: "effective[x], with FHIR range semantics"},
			{Name: "identifier", Type: TypeToken, Field: "identifierTokens", Doc: "system|value"},
			{Name: "status", Type: TypeToken, Field: "status", CodeSystem: "http://hl7.org/fhir/observation-status", Doc: "The status given by the uploader"},
		},
		Sorts:       []SortKey{{Name: "date", Asc: "sortAsc", Desc: "sortDesc"}, lastUpdatedSort},
		IndexPrefix: []string{"patientId", "codeTokens"},
	},
	{
		Type: "Patient", Collection: "patients", Interactions: readSearch,
		Doc: "Read-only projection of the exchange's patients.",
		Params: append([]Param{
			{Name: "identifier", Type: TypeToken, Field: "identifierTokens", Doc: "system|value, |value or value"},
			{Name: "family", Type: TypeString, Field: "familyKey", Doc: "Starts with, ignoring case and accents"},
			{Name: "given", Type: TypeString, Field: "givenKeys", Doc: "Starts with, ignoring case and accents"},
			{Name: "name", Type: TypeString, Field: "nameKeys", Doc: "A family or given name starts with, ignoring case and accents"},
			{Name: "birthdate", Type: TypeDate, Field: "birthDateStart", EndField: "birthDateEnd", Doc: "Prefixes eq, ne, lt, le, gt, ge, sa, eb, ap"},
		}, joins("This patient")...),
		Sorts: []SortKey{lastUpdatedSort},
	},
	{
		Type: "Practitioner", Collection: "users", BaseFilter: map[string]any{"userType": "practitioner"}, Interactions: readSearch,
		Doc:    "Read-only projection of practitioners: those of the study's organization, of the patient's organizations, of the organization.",
		Params: joins("Practitioners of the patient's organizations"), Sorts: []SortKey{lastUpdatedSort},
	},
	{
		Type: "Organization", Collection: "organizations", Interactions: readSearch,
		Doc:    "Read-only projection of organizations: the study's organization, the patient's organizations, the organization itself.",
		Params: joins("The patient's organizations"), Sorts: []SortKey{lastUpdatedSort},
	},
	{
		Type: "Group", Collection: "studies", Interactions: readSearch,
		Doc:    "Read-only projection of studies: the study, the patient's studies, the organization's studies.",
		Params: joins("The patient's studies"), Sorts: []SortKey{lastUpdatedSort},
	},
	{
		Type: "Device", Collection: "data_sources", Interactions: readSearch,
		Doc:    "Read-only projection of data sources: the study's, those of the patient's studies, those of the organization's studies.",
		Params: joins("Data sources of the patient's studies"), Sorts: []SortKey{lastUpdatedSort},
	},
}

// Lookup returns the configuration of a resource type.
func Lookup(resourceType string) (*Resource, bool) {
	i := slices.IndexFunc(Resources, func(r Resource) bool { return r.Type == resourceType })
	if i < 0 {
		return nil, false
	}
	return &Resources[i], true
}

// AllParams returns the type's parameters followed by the common ones:
// every parameter the type honours, as the CapabilityStatement lists them.
func (r *Resource) AllParams() []Param {
	return append(slices.Clone(r.Params), commonParams...)
}

// paramIndex maps each type to its parameters by name, built once: the
// parser looks parameters up for every key of every query.
var paramIndex = func() map[string]map[string]*Param {
	index := map[string]map[string]*Param{}
	for i := range Resources {
		r := &Resources[i]
		byName := map[string]*Param{}
		for _, p := range r.AllParams() {
			byName[p.Name] = &p
		}
		index[r.Type] = byName
	}
	return index
}()

func (r *Resource) param(name string) (*Param, bool) {
	p, ok := paramIndex[r.Type][name]
	return p, ok
}

func (r *Resource) sortKey(name string) (*SortKey, bool) {
	if name == "lastUpdated" { // the spelling without underscore, as in _sort=lastUpdated
		name = "_lastUpdated"
	}
	i := slices.IndexFunc(r.Sorts, func(s SortKey) bool { return s.Name == name })
	if i < 0 {
		return nil, false
	}
	return &r.Sorts[i], true
}
