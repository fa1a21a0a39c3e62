package handlers

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"exchange/domain"
)

// The FHIR R5 JSON the service emits. Each native entity has one function
// that renders it; the JSON is built from small structs so that element
// order reads as in the specification.

type fhirMeta struct {
	VersionID   string       `json:"versionId,omitempty"`
	LastUpdated string       `json:"lastUpdated,omitempty"`
	Source      string       `json:"source,omitempty"`
	Security    []fhirCoding `json:"security,omitempty"`
	Tag         []fhirCoding `json:"tag,omitempty"`
}

type fhirCoding struct {
	System  string `json:"system,omitempty"`
	Code    string `json:"code,omitempty"`
	Display string `json:"display,omitempty"`
}

type fhirCodeableConcept struct {
	Coding []fhirCoding `json:"coding,omitempty"`
	Text   string       `json:"text,omitempty"`
}

type fhirIdentifier struct {
	System string `json:"system,omitempty"`
	Value  string `json:"value,omitempty"`
}

type fhirReference struct {
	Reference  string          `json:"reference,omitempty"`
	Identifier *fhirIdentifier `json:"identifier,omitempty"`
	Display    string          `json:"display,omitempty"`
}

type fhirHumanName struct {
	Family string   `json:"family,omitempty"`
	Given  []string `json:"given,omitempty"`
}

type fhirContactPoint struct {
	System string `json:"system"`
	Value  string `json:"value"`
}

type fhirPeriod struct {
	Start string `json:"start,omitempty"`
	End   string `json:"end,omitempty"`
}

type fhirAttachment struct {
	ContentType string `json:"contentType,omitempty"`
	Data        []byte `json:"data,omitempty"` // encoding/json writes it in Base64
}

// instant renders a time as a FHIR instant in UTC, keeping its fraction
// (microseconds for observations, milliseconds elsewhere).
func instant(t time.Time) string {
	var buf [40]byte // longer than any instant of the years 0 to 9999
	return string(appendInstant(buf[:0], t))
}

// appendInstant appends t as t.UTC().AppendFormat(b, instantLayout)
// would, digit by digit for the years 0 to 9999: through the layout
// interpreter, the lastUpdated of 50 entries cost a tenth of a search
// page's rendering. A test compares the two.
func appendInstant(b []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.AppendFormat(b, instantLayout)
	}
	hour, minute, second := t.Clock()
	b = appendDigits(b, year, 4)
	b = appendDigits(append(b, '-'), int(month), 2)
	b = appendDigits(append(b, '-'), day, 2)
	b = appendDigits(append(b, 'T'), hour, 2)
	b = appendDigits(append(b, ':'), minute, 2)
	b = appendDigits(append(b, ':'), second, 2)
	if us := t.Nanosecond() / 1000; us != 0 { // .999999: microseconds, trailing zeros left out
		digits := 6
		for us%10 == 0 {
			us, digits = us/10, digits-1
		}
		b = appendDigits(append(b, '.'), us, digits)
	}
	return append(b, 'Z')
}

// appendDigits appends the n last decimal digits of v ≥ 0, zero-padded.
func appendDigits(b []byte, v, n int) []byte {
	b = append(b, make([]byte, n)...)
	for i := len(b) - 1; i >= len(b)-n; i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return b
}

// instantLayout is the layout of instant; its text needs no JSON escaping.
const instantLayout = "2006-01-02T15:04:05.999999Z07:00"

func metaOf(t time.Time) *fhirMeta { return &fhirMeta{VersionID: "1", LastUpdated: instant(t)} }

func identifiers(ids []domain.Identifier) []fhirIdentifier {
	out := make([]fhirIdentifier, len(ids))
	for i, id := range ids {
		out[i] = fhirIdentifier{System: id.System, Value: id.Value}
	}
	return out
}

// observationFHIR renders a native observation: effective[x] from the data
// point's own times, the payload Base64 as it was uploaded.
func observationFHIR(o *domain.Observation) nativeObservation { return nativeObservation{o} }

// ObservationResource renders a native observation as the FHIR API
// serves it (the web console's NDJSON download).
func ObservationResource(o *domain.Observation) any { return observationFHIR(o) }

// nativeObservation is the FHIR Observation of a native observation,
// written straight from the domain value: a search page renders 50, and a
// struct of the FHIR shape in between cost seven allocations each. A
// pointer in an interface costs none. The test compares its bytes with
// what encoding/json writes from that FHIR shape.
type nativeObservation struct{ o *domain.Observation }

func (r nativeObservation) appendJSON(b []byte) []byte {
	o := r.o
	b = appendQuotedInt(append(b, `{"resourceType":"Observation","id":`...), "", o.ID)
	b = append(b, `,"meta":{"versionId":"1","lastUpdated":"`...) // as fhirMeta{VersionID: "1", LastUpdated: instant(o.LastUpdated)}
	b = append(appendInstant(b, o.LastUpdated), `"}`...)
	if len(o.Identifiers) > 0 {
		b = appendArray(append(b, `,"identifier":`...), len(o.Identifiers), func(b []byte, i int) []byte {
			return fhirIdentifier{System: o.Identifiers[i].System, Value: o.Identifiers[i].Value}.appendJSON(b)
		})
	}
	b = domain.AppendJSONString(append(b, `,"status":`...), o.Status)
	b = append(b, `,"code":{`...)
	if len(o.Codings) > 0 {
		b = appendArray(append(b, `"coding":`...), len(o.Codings), func(b []byte, i int) []byte {
			c := o.Codings[i]
			return fhirCoding{System: c.System, Code: c.Code, Display: c.Display}.appendJSON(b)
		})
	}
	b = appendReference(append(b, `},"subject":`...), "Patient/", o.PatientID)
	if tf := o.Effective; tf != nil {
		if !tf.IsInstant() {
			b = fhirPeriod{Start: tf.PeriodStart, End: tf.PeriodEnd}.appendJSON(append(b, `,"effectivePeriod":`...))
		} else if tf.DateTime != "" { // omitempty
			b = domain.AppendJSONString(append(b, `,"effectiveDateTime":`...), tf.DateTime)
		}
	}
	if o.DataSourceID != 0 {
		b = appendReference(append(b, `,"device":`...), "Device/", o.DataSourceID)
	}
	if o.Payload != nil {
		b = fhirAttachment{ContentType: o.ContentType, Data: o.Payload}.appendJSON(append(b, `,"valueAttachment":`...))
	}
	return append(b, '}')
}

// MarshalJSON writes the same bytes for encoding/json (the console's
// download, the _elements projection).
func (r nativeObservation) MarshalJSON() ([]byte, error) { return r.appendJSON(nil), nil }

// appendReference writes fhirReference{Reference: typeSlash + id}.
func appendReference(b []byte, typeSlash string, id int64) []byte {
	return append(appendQuotedInt(append(b, `{"reference":`...), typeSlash, id), '}')
}

// appendQuotedInt writes the JSON string prefix + id; prefix needs no
// escaping.
func appendQuotedInt(b []byte, prefix string, id int64) []byte {
	b = append(append(b, '"'), prefix...)
	return append(strconv.AppendInt(b, id, 10), '"')
}

type patientResource struct {
	ResourceType string             `json:"resourceType"`
	ID           string             `json:"id"`
	Meta         *fhirMeta          `json:"meta"`
	Identifier   []fhirIdentifier   `json:"identifier,omitempty"`
	Name         []fhirHumanName    `json:"name,omitempty"`
	Telecom      []fhirContactPoint `json:"telecom,omitempty"`
	BirthDate    string             `json:"birthDate,omitempty"`
}

func patientFHIR(p *domain.Patient) patientResource {
	r := patientResource{ResourceType: "Patient", ID: strconv.FormatInt(p.ID, 10), Meta: metaOf(p.LastUpdated),
		Identifier: identifiers(p.Identifiers), BirthDate: p.BirthDate}
	if p.FamilyName != "" || len(p.GivenNames) > 0 {
		r.Name = []fhirHumanName{{Family: p.FamilyName, Given: p.GivenNames}}
	}
	for _, t := range p.Telecom {
		r.Telecom = append(r.Telecom, fhirContactPoint{System: t.System, Value: t.Value})
	}
	return r
}

type practitionerResource struct {
	ResourceType string             `json:"resourceType"`
	ID           string             `json:"id"`
	Meta         *fhirMeta          `json:"meta"`
	Identifier   []fhirIdentifier   `json:"identifier,omitempty"`
	Name         []fhirHumanName    `json:"name,omitempty"`
	Telecom      []fhirContactPoint `json:"telecom,omitempty"`
}

// practitionerFHIR renders a practitioner user; the login email is both
// its identifier (a mailto URI) and its telecom.
func practitionerFHIR(u *domain.User) practitionerResource {
	r := practitionerResource{ResourceType: "Practitioner", ID: strconv.FormatInt(u.ID, 10), Meta: metaOf(u.LastUpdated),
		Identifier: []fhirIdentifier{{System: "urn:ietf:rfc:3986", Value: "mailto:" + u.Email}},
		Telecom:    []fhirContactPoint{{System: "email", Value: u.Email}}}
	if u.FirstName != "" || u.LastName != "" {
		name := fhirHumanName{Family: u.LastName}
		if u.FirstName != "" {
			name.Given = []string{u.FirstName}
		}
		r.Name = []fhirHumanName{name}
	}
	return r
}

type organizationResource struct {
	ResourceType string                `json:"resourceType"`
	ID           string                `json:"id"`
	Meta         *fhirMeta             `json:"meta"`
	Type         []fhirCodeableConcept `json:"type,omitempty"`
	Name         string                `json:"name,omitempty"`
	PartOf       *fhirReference        `json:"partOf,omitempty"`
}

func organizationFHIR(o *domain.Organization) organizationResource {
	r := organizationResource{ResourceType: "Organization", ID: strconv.FormatInt(o.ID, 10), Meta: metaOf(o.LastUpdated), Name: o.Name,
		Type: []fhirCodeableConcept{{Coding: []fhirCoding{{System: "http://terminology.hl7.org/CodeSystem/organization-type", Code: string(o.Type)}}}}}
	if o.PartOf != 0 {
		r.PartOf = &fhirReference{Reference: "Organization/" + strconv.FormatInt(o.PartOf, 10)}
	}
	return r
}

type groupResource struct {
	ResourceType   string         `json:"resourceType"`
	ID             string         `json:"id"`
	Meta           *fhirMeta      `json:"meta"`
	Type           string         `json:"type"`
	Membership     string         `json:"membership"`
	Name           string         `json:"name,omitempty"`
	Description    string         `json:"description,omitempty"`
	Quantity       int            `json:"quantity"`
	ManagingEntity *fhirReference `json:"managingEntity,omitempty"`
}

// groupFHIR renders a study as an enumerated Group of persons.
func groupFHIR(g *domain.GroupView) groupResource {
	return groupResource{ResourceType: "Group", ID: strconv.FormatInt(g.ID, 10), Meta: metaOf(g.LastUpdated), Type: "person",
		Membership: "enumerated", Name: g.Name, Description: g.Description, Quantity: g.Members,
		ManagingEntity: &fhirReference{Reference: "Organization/" + strconv.FormatInt(g.OrganizationID, 10), Display: g.Organization.Name}}
}

// DataSourceTypeSystem is the code system of data source types in the
// Device projection.
const DataSourceTypeSystem = "https://w3id.org/openmhealth/exchange/CodeSystem/data-source-type"

var dataSourceTypeDisplay = map[domain.DataSourceType]string{
	domain.DataSourcePersonalDevice: "Personal device", domain.DataSourceMedicalDevice: "Medical device", domain.DataSourcePatientApp: "Patient app",
}

type deviceResource struct {
	ResourceType string                `json:"resourceType"`
	ID           string                `json:"id"`
	Meta         *fhirMeta             `json:"meta"`
	DisplayName  string                `json:"displayName,omitempty"`
	Type         []fhirCodeableConcept `json:"type,omitempty"`
}

func deviceFHIR(d *domain.DataSource) deviceResource {
	return deviceResource{ResourceType: "Device", ID: strconv.FormatInt(d.ID, 10), Meta: metaOf(d.LastUpdated), DisplayName: d.Name,
		Type: []fhirCodeableConcept{{Coding: []fhirCoding{{System: DataSourceTypeSystem, Code: string(d.Type), Display: dataSourceTypeDisplay[d.Type]}}}}}
}

// mandatory are the elements _elements never drops, besides id and meta.
var mandatory = map[string][]string{
	"Observation": {"status", "code"},
	"Group":       {"type", "membership"},
}

// subsetted is the tag of a resource cut down by _elements.
var subsetted = fhirCoding{System: "http://terminology.hl7.org/CodeSystem/v3-ObservationValue", Code: "SUBSETTED", Display: "subsetted"}

// withElements keeps the top-level elements asked for with _elements (and
// the mandatory ones), tagging the result SUBSETTED. value[x] and
// effective[x] name every choice of the element.
func withElements(resource any, elements []string) any {
	if len(elements) == 0 {
		return resource
	}
	data, _ := json.Marshal(resource)
	var m map[string]any
	_ = decodeExact(data, &m) // imported resources keep their decimals
	rt, _ := m["resourceType"].(string)
	keep := append([]string{"resourceType", "id", "meta"}, mandatory[rt]...)
	out := map[string]any{}
	for k, v := range m {
		wanted := slices.Contains(keep, k) || slices.Contains(elements, k) ||
			slices.ContainsFunc(elements, func(e string) bool {
				base, choice := strings.CutSuffix(e, "[x]")
				return choice && strings.HasPrefix(k, base)
			})
		if wanted {
			out[k] = v
		}
	}
	meta, _ := out["meta"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	tags, _ := meta["tag"].([]any)
	meta["tag"] = append(tags, map[string]any{"system": subsetted.System, "code": subsetted.Code, "display": subsetted.Display})
	out["meta"] = meta
	return out
}
