package handlers

import (
	"encoding/base64"
	"strconv"

	"exchange/domain"
)

// The audit trail as R5 AuditEvents. Codes follow FHIR's own sets where
// they have one: the RESTful interaction as the code (read, search-type,
// create, ...), the DICOM Login event for sign-ins; the exchange's own
// (domain.AuditSystem) for imports and token issues.

// Code systems of AuditEvent.
const (
	auditEventTypeSystem = "http://terminology.hl7.org/CodeSystem/audit-event-type"
	restfulSystem        = "http://hl7.org/fhir/restful-interaction"
	dicomSystem          = "http://dicom.nema.org/resources/ontology/DCM"
	severitySystem       = "http://hl7.org/fhir/issue-severity"
	issueTypeSystem      = "http://hl7.org/fhir/issue-type"
	objectRoleSystem     = "http://terminology.hl7.org/CodeSystem/object-role"
	// securityLabelSystem holds REDACTED, the label of a resource shown
	// with parts left out (a patient's own view of an event).
	securityLabelSystem = "http://terminology.hl7.org/CodeSystem/v3-ObservationValue"
	// clientIDSystem names the OAuth client ids of the exchange, in the
	// agent that is the client application.
	clientIDSystem = "https://w3id.org/exchange/oauth-client"
	// identityProviderSystem names who vouched for a user signed in
	// without a password here: an identity provider's id, or the issuer of
	// an EHR's ID token.
	identityProviderSystem = "https://w3id.org/exchange/identity-provider"
)

type auditEventResource struct {
	ResourceType string                `json:"resourceType"`
	ID           string                `json:"id"`
	Meta         *fhirMeta             `json:"meta"`
	Category     []fhirCodeableConcept `json:"category"`
	Code         fhirCodeableConcept   `json:"code"`
	Action       string                `json:"action"`
	Recorded     string                `json:"recorded"`
	Outcome      auditOutcome          `json:"outcome"`
	Patient      *fhirReference        `json:"patient,omitempty"`
	Agent        []auditAgent          `json:"agent"`
	Source       auditSource           `json:"source"`
	Entity       []auditEntity         `json:"entity,omitempty"`
}

type auditOutcome struct {
	Code   fhirCoding            `json:"code"`
	Detail []fhirCodeableConcept `json:"detail,omitempty"`
}

type auditAgent struct {
	Type          *fhirCodeableConcept `json:"type,omitempty"`
	Who           fhirReference        `json:"who"`
	Requestor     bool                 `json:"requestor"`
	NetworkString string               `json:"networkString,omitempty"`
}

type auditSource struct {
	Observer fhirReference `json:"observer"`
}

type auditEntity struct {
	What  *fhirReference       `json:"what,omitempty"`
	Role  *fhirCodeableConcept `json:"role,omitempty"`
	Query string               `json:"query,omitempty"`
}

// auditKinds codes each kind of event: its category, and its code.
var auditKinds = map[domain.AuditKind]struct{ category, code fhirCoding }{
	domain.AuditKindRead:   {restCategory, fhirCoding{System: restfulSystem, Code: "read"}},
	domain.AuditKindSearch: {restCategory, fhirCoding{System: restfulSystem, Code: "search-type"}},
	domain.AuditKindCreate: {restCategory, fhirCoding{System: restfulSystem, Code: "create"}},
	domain.AuditKindUpdate: {restCategory, fhirCoding{System: restfulSystem, Code: "update"}},
	domain.AuditKindDelete: {restCategory, fhirCoding{System: restfulSystem, Code: "delete"}},
	domain.AuditKindImport: {restCategory, fhirCoding{System: domain.AuditSystem, Code: "import", Display: "R4 import"}},
	domain.AuditKindSignIn: {authCategory, fhirCoding{System: dicomSystem, Code: "110122", Display: "Login"}},
	domain.AuditKindToken:  {authCategory, fhirCoding{System: domain.AuditSystem, Code: "token-issued", Display: "OAuth token issued"}},
	domain.AuditKindExport: {restCategory, fhirCoding{System: domain.AuditSystem, Code: "bulk-export", Display: "Bulk Data export"}},
	domain.AuditKindExportComplete: {restCategory, fhirCoding{System: domain.AuditSystem, Code: "bulk-export-completed",
		Display: "Bulk Data export completed"}},
	domain.AuditKindExportDownload: {restCategory, fhirCoding{System: domain.AuditSystem, Code: "bulk-export-download",
		Display: "Bulk Data export file downloaded"}},
	domain.AuditKindConnect:    {restCategory, fhirCoding{System: domain.AuditSystem, Code: "ehr-connection", Display: "EHR connection made or ended"}},
	domain.AuditKindPull:       {restCategory, fhirCoding{System: domain.AuditSystem, Code: "ehr-pull", Display: "Record pulled from an EHR"}},
	domain.AuditKindInvitation: {authCategory, fhirCoding{System: domain.AuditSystem, Code: "invitation", Display: "Patient invitation issued"}},
	domain.AuditKindLoginReplaced: {authCategory, fhirCoding{System: domain.AuditSystem, Code: "login-replaced",
		Display: "Patient login replaced"}},
}

var (
	restCategory = fhirCoding{System: auditEventTypeSystem, Code: "rest", Display: "RESTful Operation"}
	authCategory = fhirCoding{System: dicomSystem, Code: "110114", Display: "User Authentication"}
)

// auditEventFHIR renders an event of the audit trail. The user is the
// requesting agent (who: their Practitioner or Patient), from the
// client's network address; the OAuth client, when there is one, a
// second agent; each patient concerned an entity with the role Patient
// (and the patient, when there is one only); a search its query. An
// event redacted for its reader (a patient's own view, decided by the
// domain) carries the security label REDACTED.
func auditEventFHIR(e *domain.AuditEvent) auditEventResource {
	kind := auditKinds[e.Kind]
	r := auditEventResource{ResourceType: "AuditEvent", ID: strconv.FormatInt(e.ID, 10), Meta: metaOf(e.Recorded),
		Category: []fhirCodeableConcept{{Coding: []fhirCoding{kind.category}}}, Code: fhirCodeableConcept{Coding: []fhirCoding{kind.code}},
		Action: string(e.Action), Recorded: instant(e.Recorded),
		Outcome: auditOutcome{Code: fhirCoding{System: severitySystem, Code: "success"}},
		Source:  auditSource{Observer: fhirReference{Display: "Clinical data exchange"}}}
	if e.Redacted {
		r.Meta.Security = []fhirCoding{{System: securityLabelSystem, Code: "REDACTED", Display: "redacted"}}
	}
	if e.Outcome != "" {
		r.Outcome = auditOutcome{Code: fhirCoding{System: severitySystem, Code: "error"},
			Detail: []fhirCodeableConcept{{Coding: []fhirCoding{{System: issueTypeSystem, Code: issueType(e.Outcome)}}}}}
	}
	user := auditAgent{Who: fhirReference{Reference: e.Agent}, Requestor: true, NetworkString: e.Address}
	if e.Agent == "" {
		user.Who = fhirReference{Display: "unknown account"}
	}
	r.Agent = []auditAgent{user}
	if e.ClientID != "" {
		r.Agent = append(r.Agent, auditAgent{
			Type: &fhirCodeableConcept{Coding: []fhirCoding{{System: dicomSystem, Code: "110150", Display: "Application"}}},
			Who:  fhirReference{Identifier: &fhirIdentifier{System: clientIDSystem, Value: e.ClientID}}})
	}
	if e.IdentityProvider != "" {
		r.Agent = append(r.Agent, auditAgent{
			Type: &fhirCodeableConcept{Coding: []fhirCoding{{System: dicomSystem, Code: "110153", Display: "Source Role ID"}}, Text: "Identity provider"},
			Who:  fhirReference{Identifier: &fhirIdentifier{System: identityProviderSystem, Value: e.IdentityProvider}}})
	}
	for _, ref := range e.Entities {
		r.Entity = append(r.Entity, auditEntity{What: &fhirReference{Reference: ref}})
	}
	patientRole := &fhirCodeableConcept{Coding: []fhirCoding{{System: objectRoleSystem, Code: "1", Display: "Patient"}}}
	for _, id := range e.PatientIDs {
		ref := "Patient/" + strconv.FormatInt(id, 10)
		r.Entity = append(r.Entity, auditEntity{What: &fhirReference{Reference: ref}, Role: patientRole})
	}
	if len(e.PatientIDs) == 1 {
		r.Patient = &fhirReference{Reference: "Patient/" + strconv.FormatInt(e.PatientIDs[0], 10)}
	}
	if e.Query != "" {
		r.Entity = append(r.Entity, auditEntity{Query: base64.StdEncoding.EncodeToString([]byte(e.Query)),
			Role: &fhirCodeableConcept{Coding: []fhirCoding{{System: objectRoleSystem, Code: "24", Display: "Query"}}}})
	}
	return r
}
