package handlers

import (
	"time"

	"exchange/domain"
)

// The admin API's JSON shapes. Field names are camelCase; times are UTC
// ISO 8601; a missing reference is null.

type userJSON struct {
	ID          int64  `json:"id"`
	Email       string `json:"email"`
	FirstName   string `json:"firstName"`
	LastName    string `json:"lastName"`
	UserType    string `json:"userType"`
	IsSuperuser bool   `json:"isSuperuser"`
}

func toUserJSON(u domain.User) userJSON {
	return userJSON{ID: u.ID, Email: u.Email, FirstName: u.FirstName, LastName: u.LastName, UserType: string(u.Type), IsSuperuser: u.IsSuperuser}
}

// organizationJSON is an organization: ROOT (the organization above the
// top-level ones, not stored) has partOf and lastUpdated null, a
// top-level organization partOf 0, as JupyterHealth Exchange answers.
type organizationJSON struct {
	ID          int64      `json:"id"`
	Name        string     `json:"name"`
	Type        string     `json:"type"`
	PartOf      *int64     `json:"partOf"`
	LastUpdated *time.Time `json:"lastUpdated"`
}

func toOrganizationJSON(o domain.Organization) organizationJSON {
	out := organizationJSON{ID: o.ID, Name: o.Name, Type: string(o.Type)}
	if o.ID != domain.RootOrganizationID {
		partOf, lastUpdated := o.PartOf, o.LastUpdated
		out.PartOf, out.LastUpdated = &partOf, &lastUpdated
	}
	return out
}

// organizationEntryJSON is an organization of the directory: with the
// caller's role in it (null: none, or no membership) and the
// organizations below it.
type organizationEntryJSON struct {
	organizationJSON
	CurrentUserRole *string                 `json:"currentUserRole"`
	Children        []organizationEntryJSON `json:"children"`
}

func toOrganizationEntryJSON(a *domain.Actor, n domain.OrganizationNode) organizationEntryJSON {
	out := organizationEntryJSON{organizationJSON: toOrganizationJSON(n.Organization), Children: []organizationEntryJSON{}}
	if role, member := a.RoleIn(n.ID); member {
		out.CurrentUserRole = roleJSON(role)
	}
	for _, c := range n.Children {
		out.Children = append(out.Children, toOrganizationEntryJSON(a, c))
	}
	return out
}

type memberJSON struct {
	userJSON
	Role *string `json:"role"`
}

func roleJSON(r domain.Role) *string {
	if r == domain.RoleNone {
		return nil
	}
	s := string(r)
	return &s
}

func toMemberJSON(m domain.Member) memberJSON {
	return memberJSON{userJSON: toUserJSON(m.User), Role: roleJSON(m.Role)}
}

type practitionerJSON struct {
	userJSON
	Organizations []practitionerOrganizationJSON `json:"organizations"`
	LastUpdated   time.Time                      `json:"lastUpdated"`
	// Identifier is the practitioner's id at the EHR (token exchange).
	Identifier *string `json:"identifier"`
}

type practitionerOrganizationJSON struct {
	ID   int64   `json:"id"`
	Name string  `json:"name"`
	Role *string `json:"role"`
}

func toPractitionerJSON(p domain.Practitioner) practitionerJSON {
	out := practitionerJSON{userJSON: toUserJSON(p.User), Organizations: []practitionerOrganizationJSON{}, LastUpdated: p.User.LastUpdated}
	if p.User.Identifier != "" {
		out.Identifier = &p.User.Identifier
	}
	for _, m := range p.Memberships {
		out.Organizations = append(out.Organizations, practitionerOrganizationJSON{ID: m.Organization.ID, Name: m.Organization.Name, Role: roleJSON(m.Role)})
	}
	return out
}

// patientJSON is a patient in the admin API: the exchange's own fields
// and JupyterHealth Exchange's flat ones, which hold the first of a kind
// (identifier, telecomPhone, telecomEmail, organizationId) or all of it
// as one string (nameGiven: the given names joined by a space).
type patientJSON struct {
	ID              int64              `json:"id"`
	UserID          int64              `json:"userId"`
	JHEUserID       *int64             `json:"jheUserId"`
	NameFamily      string             `json:"nameFamily"`
	NameGiven       string             `json:"nameGiven"`
	GivenNames      []string           `json:"givenNames"`
	BirthDate       *string            `json:"birthDate"`
	TelecomPhone    *string            `json:"telecomPhone"`
	TelecomEmail    *string            `json:"telecomEmail"`
	Telecom         []codedValueJSON   `json:"telecom"`
	Identifier      *string            `json:"identifier"`
	Identifiers     []codedValueJSON   `json:"identifiers"`
	OrganizationID  *int64             `json:"organizationId"`
	OrganizationIDs []int64            `json:"organizationIds"`
	Organizations   []organizationJSON `json:"organizations"`
	LastUpdated     time.Time          `json:"lastUpdated"`
}

// codedValueJSON is an identifier or a contact point.
type codedValueJSON struct {
	System string `json:"system"`
	Value  string `json:"value"`
}

// toPatientJSON renders a patient; orgs holds (at least) the
// organizations the patient belongs to.
func toPatientJSON(p domain.Patient, orgs map[int64]domain.Organization) patientJSON {
	out := patientJSON{ID: p.ID, UserID: p.UserID, JHEUserID: optionalID(p.UserID), NameFamily: p.FamilyName, NameGiven: p.GivenName(),
		GivenNames: p.GivenNames, TelecomPhone: optionalString(p.Contact("phone")), TelecomEmail: optionalString(p.Contact("email")),
		Telecom: []codedValueJSON{}, Identifiers: []codedValueJSON{}, OrganizationIDs: p.OrganizationIDs,
		Organizations: []organizationJSON{}, LastUpdated: p.LastUpdated}
	if out.GivenNames == nil {
		out.GivenNames = []string{}
	}
	if out.OrganizationIDs == nil {
		out.OrganizationIDs = []int64{}
	}
	if p.BirthDate != "" {
		out.BirthDate = &p.BirthDate
	}
	for _, t := range p.Telecom {
		out.Telecom = append(out.Telecom, codedValueJSON{t.System, t.Value})
	}
	for _, i := range p.Identifiers {
		out.Identifiers = append(out.Identifiers, codedValueJSON{i.System, i.Value})
	}
	if len(p.Identifiers) > 0 {
		out.Identifier = &p.Identifiers[0].Value
	}
	if len(p.OrganizationIDs) > 0 {
		out.OrganizationID = &p.OrganizationIDs[0]
	}
	for _, id := range p.OrganizationIDs {
		if o, ok := orgs[id]; ok {
			out.Organizations = append(out.Organizations, toOrganizationJSON(o))
		}
	}
	return out
}

type studyJSON struct {
	ID           int64            `json:"id"`
	Name         string           `json:"name"`
	Description  string           `json:"description"`
	IconURL      *string          `json:"iconUrl"`
	Organization organizationJSON `json:"organization"`
	LastUpdated  time.Time        `json:"lastUpdated"`
}

func toStudyJSON(s domain.StudyView) studyJSON {
	out := studyJSON{ID: s.ID, Name: s.Name, Description: s.Description, Organization: toOrganizationJSON(s.Organization), LastUpdated: s.LastUpdated}
	if s.IconURL != "" {
		out.IconURL = &s.IconURL
	}
	return out
}

// scopeCodeJSON is a scope code: {id, codingSystem, codingCode, text}.
type scopeCodeJSON struct {
	ID           int64  `json:"id"`
	CodingSystem string `json:"codingSystem"`
	CodingCode   string `json:"codingCode"`
	Text         string `json:"text"`
}

func toScopeCodeJSON(c domain.ScopeCode) scopeCodeJSON {
	return scopeCodeJSON{ID: c.ID, CodingSystem: c.System, CodingCode: c.Code, Text: c.Text}
}

type dataSourceJSON struct {
	ID              int64           `json:"id"`
	Name            string          `json:"name"`
	Type            string          `json:"type"`
	SupportedScopes []scopeCodeJSON `json:"supportedScopes"`
	LastUpdated     time.Time       `json:"lastUpdated"`
}

func toDataSourceJSON(d domain.DataSourceView) dataSourceJSON {
	out := dataSourceJSON{ID: d.ID, Name: d.Name, Type: string(d.Type), SupportedScopes: []scopeCodeJSON{}, LastUpdated: d.LastUpdated}
	for _, c := range d.SupportedScopes {
		out.SupportedScopes = append(out.SupportedScopes, toScopeCodeJSON(c))
	}
	return out
}

// dataSourceSummaryJSON is a data source named inside another resource.
type dataSourceSummaryJSON struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
	Type string `json:"type"`
}

func toDataSourceSummaryJSON(d domain.DataSource) dataSourceSummaryJSON {
	return dataSourceSummaryJSON{ID: d.ID, Name: d.Name, Type: string(d.Type)}
}

type fhirSourceJSON struct {
	ID         int64  `json:"id"`
	Patient    int64  `json:"patient"`
	DataSource *int64 `json:"dataSource"`
	Label      string `json:"label"`
	// URI is the source's canonical URI: the meta.source of the resources
	// it holds, and the _source that searches them.
	URI         string    `json:"uri"`
	LastUpdated time.Time `json:"lastUpdated"`
}

// fhirSourceJSONWith converts FHIR sources whose canonical URIs start
// with base.
func fhirSourceJSONWith(base string) func(domain.FHIRSource) fhirSourceJSON {
	return func(s domain.FHIRSource) fhirSourceJSON {
		return fhirSourceJSON{ID: s.ID, Patient: s.PatientID, DataSource: optionalID(s.DataSourceID), Label: s.Label,
			URI: domain.SourceURI(base, s.ID), LastUpdated: s.LastUpdated.UTC()}
	}
}

func optionalString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func optionalID(id int64) *int64 {
	if id == 0 {
		return nil
	}
	return &id
}

// mapSlice converts every item.
func mapSlice[T, J any](items []T, f func(T) J) []J {
	out := make([]J, len(items))
	for i, item := range items {
		out[i] = f(item)
	}
	return out
}

// deref returns the value a pointer of an input body points to, or the
// zero value for a missing field.
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
