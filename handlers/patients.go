package handlers

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"exchange/domain"
	"exchange/oauth"
)

// patientInJSON is the body that creates or changes a patient. The login
// email and password apply only on creation. JupyterHealth Exchange's
// names are read too: telecomEmail for email, telecomPhone for phone, and
// nameGiven as one string (domain.PatientPatch.GivenName) beside the list
// of given names.
type patientInJSON struct {
	Email           string            `json:"email"`
	TelecomEmail    string            `json:"telecomEmail"`
	Password        string            `json:"password"`
	NameFamily      *string           `json:"nameFamily"`
	NameGiven       *givenNamesJSON   `json:"nameGiven"`
	GivenNames      *[]string         `json:"givenNames"`
	BirthDate       *string           `json:"birthDate"`
	Phone           *string           `json:"phone"`
	TelecomPhone    *string           `json:"telecomPhone"`
	Identifiers     *[]codedValueJSON `json:"identifiers"`
	OrganizationIDs *[]int64          `json:"organizationIds"`
}

// givenNamesJSON is nameGiven as sent: a list of names, or one string.
type givenNamesJSON struct {
	names  *[]string
	joined *string
}

func (g *givenNamesJSON) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '"' {
		return json.Unmarshal(data, &g.joined)
	}
	return json.Unmarshal(data, &g.names)
}

// email is the login email, under either name.
func (in patientInJSON) email() (string, error) {
	if in.Email != "" && in.TelecomEmail != "" && in.Email != in.TelecomEmail {
		return "", domain.FieldErrorf("telecomEmail", "differs from email; send one of the two")
	}
	return cmp.Or(in.Email, in.TelecomEmail), nil
}

// phone is the phone number, under either name.
func (in patientInJSON) phone() (*string, error) {
	if in.Phone != nil && in.TelecomPhone != nil && *in.Phone != *in.TelecomPhone {
		return nil, domain.FieldErrorf("telecomPhone", "differs from phone; send one of the two")
	}
	return cmp.Or(in.Phone, in.TelecomPhone), nil
}

// givenNames returns the given names as a list, or as the one string
// nameGiven holds.
func (in patientInJSON) givenNames() (names *[]string, joined *string, err error) {
	if in.NameGiven != nil && in.GivenNames != nil {
		return nil, nil, domain.FieldErrorf("givenNames", "send the given names once: as givenNames or as nameGiven")
	}
	if in.GivenNames != nil {
		return in.GivenNames, nil, nil
	}
	if in.NameGiven != nil {
		return in.NameGiven.names, in.NameGiven.joined, nil
	}
	return nil, nil, nil
}

// patch is the body's fields of the record (the login aside), under
// either name.
func (in patientInJSON) patch() (domain.PatientPatch, error) {
	phone, err := in.phone()
	if err != nil {
		return domain.PatientPatch{}, err
	}
	names, joined, err := in.givenNames()
	if err != nil {
		return domain.PatientPatch{}, err
	}
	return domain.PatientPatch{FamilyName: in.NameFamily, GivenNames: names, GivenName: joined, BirthDate: in.BirthDate, Phone: phone,
		Identifiers: in.identifiers(), OrganizationIDs: in.OrganizationIDs}, nil
}

func (in patientInJSON) identifiers() *[]domain.Identifier {
	if in.Identifiers == nil {
		return nil
	}
	out := mapSlice(*in.Identifiers, func(v codedValueJSON) domain.Identifier { return domain.Identifier{System: v.System, Value: v.Value} })
	return &out
}

// patientFilters are the filters of GET /patients: the exchange's, and
// JupyterHealth Exchange's (organization_id, study_id and patient_id are
// aliases, see params.go; patient_identifier_value is an identifier's
// value in any system).
var patientFilters = []string{"organizationId", "studyId", "patientId", "identifier", "patient_identifier_value", "name"}

func (s *server) listPatients(c *fiber.Ctx) error {
	p, err := pageOf(c)
	if err != nil {
		return err
	}
	var f domain.PatientFilter
	if f.ID, err = queryID(c, "patientId"); err != nil {
		return err
	}
	if f.OrganizationID, err = queryID(c, "organizationId"); err != nil {
		return err
	}
	if f.StudyID, err = queryID(c, "studyId"); err != nil {
		return err
	}
	if f.Identifier, err = identifierFilter(c); err != nil {
		return err
	}
	f.Name = c.Query("name")
	l, err := s.service.ListPatients(c.UserContext(), actor(c), f, p)
	if err != nil {
		return err
	}
	return s.writePatients(c, p, l)
}

// identifierFilter reads identifier=system|value, identifier=value (in any
// system) or patient_identifier_value=value.
func identifierFilter(c *fiber.Ctx) (*domain.Identifier, error) {
	v, value := c.Query("identifier"), c.Query("patient_identifier_value")
	switch {
	case v != "" && value != "":
		return nil, domain.FieldErrorf("identifier", "send identifier or patient_identifier_value, not both")
	case value != "":
		return &domain.Identifier{Value: value}, nil
	case v == "":
		return nil, nil
	}
	system, value, pair := strings.Cut(v, "|")
	if !pair {
		return &domain.Identifier{Value: v}, nil
	}
	if system == "" || value == "" {
		return nil, domain.FieldErrorf("identifier", "%q is not system|value (or a value alone)", v)
	}
	return &domain.Identifier{System: system, Value: value}, nil
}

// writePatients answers a page of patients.
func (s *server) writePatients(c *fiber.Ctx, p domain.Page, l domain.List[domain.Patient]) error {
	items, err := s.patientsJSON(c.UserContext(), l.Items)
	if err != nil {
		return err
	}
	return writeList(c, p, domain.List[patientJSON]{Items: items, Total: l.Total}, func(j patientJSON) patientJSON { return j })
}

// lookupPatients answers JupyterHealth Exchange's global lookup: the
// patients whose login has the email, as a list of one or none; a patient
// the caller may not see is not found (domain.PatientsByEmail).
func (s *server) lookupPatients(c *fiber.Ctx) error {
	found, err := s.service.PatientsByEmail(c.UserContext(), actor(c), c.Query("email"))
	if err != nil {
		return err
	}
	out, err := s.patientsJSON(c.UserContext(), found)
	if err != nil {
		return err
	}
	return c.JSON(out)
}

// patientsJSON renders patients with the organizations they belong to,
// read at once.
func (s *server) patientsJSON(ctx context.Context, ps []domain.Patient) ([]patientJSON, error) {
	var ids []int64
	for _, p := range ps {
		ids = append(ids, p.OrganizationIDs...)
	}
	slices.Sort(ids)
	orgs, err := s.service.OrganizationsByIDs(ctx, slices.Compact(ids))
	if err != nil {
		return nil, err
	}
	byID := make(map[int64]domain.Organization, len(orgs))
	for _, o := range orgs {
		byID[o.ID] = o
	}
	return mapSlice(ps, func(p domain.Patient) patientJSON { return toPatientJSON(p, byID) }), nil
}

func (s *server) createPatient(c *fiber.Ctx) error {
	var in patientInJSON
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	email, err := in.email()
	if err != nil {
		return err
	}
	record, err := in.patch()
	if err != nil {
		return err
	}
	given := deref(record.GivenNames)
	if record.GivenName != nil {
		given = domain.GivenNamesOf(*record.GivenName)
	}
	p, err := s.service.CreatePatient(c.UserContext(), actor(c), domain.NewPatient{
		Email: email, Password: in.Password, FamilyName: deref(record.FamilyName), GivenNames: given, BirthDate: deref(record.BirthDate),
		Phone: deref(record.Phone), Identifiers: deref(record.Identifiers), OrganizationIDs: deref(record.OrganizationIDs),
	})
	if err != nil {
		return err
	}
	return s.writePatient(c.Status(fiber.StatusCreated), *p)
}

// updatePatient applies a PATCH; with If-Match, only to the version it
// names (versions.go), where without it concurrent PATCHes of different
// fields each keep theirs.
func (s *server) updatePatient(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	version, err := ifMatchVersion(c)
	if err != nil {
		return err
	}
	var in patientInJSON
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	if in.Email != "" || in.TelecomEmail != "" || in.Password != "" {
		return domain.FieldErrorf("email", "the login of a patient cannot be changed here")
	}
	patch, err := in.patch()
	if err != nil {
		return err
	}
	patch.Unchanged = version
	p, err := s.service.UpdatePatient(c.UserContext(), actor(c), id, patch)
	if err != nil {
		return err
	}
	return s.writePatient(c, *p)
}

func (s *server) deletePatient(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	if err := s.service.DeletePatient(c.UserContext(), actor(c), id); err != nil {
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}

// invitePatient issues an invitation of the patient for a client app (or
// the web console), as the caller may (oauth.Provider.Invite): by email to
// the patient when the service has a delivery channel, else its link back
// to the caller.
func (s *server) invitePatient(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	var in struct {
		ClientID     string `json:"clientId"`
		ReplaceLogin bool   `json:"replaceLogin"`
	}
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	if in.ClientID == "" {
		return domain.FieldErrorf("clientId", "is required: the app that will redeem the invitation")
	}
	sent, err := s.oauth.Invite(c.UserContext(), actor(c), oauth.InvitationRequest{PatientID: id, ClientID: in.ClientID,
		ReplaceLogin: in.ReplaceLogin, Origin: origin(c)})
	if err != nil {
		return err
	}
	return invitationCreated(c, sent)
}

// invitationCreated answers a new invitation: its link when the caller is
// to hand it over, else the (masked) address it was emailed to.
func invitationCreated(c *fiber.Ctx, sent *oauth.SentInvitation) error {
	out := fiber.Map{"patientId": sent.PatientID, "clientId": sent.ClientID, "expiresAt": sent.ExpiresAt,
		"loginReplaced": sent.LoginReplaced}
	if sent.SentTo != "" {
		out["delivery"], out["sentTo"] = "email", sent.SentTo
	} else {
		out["delivery"], out["invitationLink"] = "link", sent.Link
	}
	return c.Status(fiber.StatusCreated).JSON(out)
}

// invitationJSON is an invitation as listed: the code itself is never
// kept, so the link appears only when issued.
func invitationJSON(i oauth.Invitation, now time.Time) fiber.Map {
	state := "pending"
	switch {
	case i.Redeemed:
		state = "redeemed"
	case !i.Pending(now):
		state = "expired"
	}
	return fiber.Map{"id": i.ID, "clientId": i.ClientID, "issuedAt": i.IssuedAt, "expiresAt": i.ExpiresAt, "state": state}
}

// listInvitations lists a patient's unexpired invitations, to whoever may
// read the patient.
func (s *server) listInvitations(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	p, err := s.service.PatientByID(c.UserContext(), actor(c), id)
	if err != nil {
		return err
	}
	list, err := s.oauth.Invitations(c.UserContext(), []int64{p.UserID})
	if err != nil {
		return err
	}
	out := []fiber.Map{}
	for _, i := range list {
		out = append(out, invitationJSON(i, s.service.Now()))
	}
	return c.JSON(fiber.Map{"results": out})
}

// cancelInvitation withdraws an invitation: its link stops working.
func (s *server) cancelInvitation(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	if err := s.oauth.CancelPatientInvitation(c.UserContext(), actor(c), id, c.Params("invitationId")); err != nil {
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}

// reissueInvitation replaces an invitation with a new one for the same
// client, delivered as a new one is; the old link stops working.
func (s *server) reissueInvitation(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	sent, err := s.oauth.Reinvite(c.UserContext(), actor(c), id, c.Params("invitationId"), origin(c))
	if err != nil {
		return err
	}
	return invitationCreated(c, sent)
}
