package handlers

import (
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"exchange/domain"
	"exchange/oauth"
)

// patientInJSON is the body that creates or changes a patient. The login
// email and password apply only on creation.
type patientInJSON struct {
	Email           string            `json:"email"`
	Password        string            `json:"password"`
	NameFamily      *string           `json:"nameFamily"`
	NameGiven       *[]string         `json:"nameGiven"`
	BirthDate       *string           `json:"birthDate"`
	Phone           *string           `json:"phone"`
	Identifiers     *[]codedValueJSON `json:"identifiers"`
	OrganizationIDs *[]int64          `json:"organizationIds"`
}

func (in patientInJSON) identifiers() *[]domain.Identifier {
	if in.Identifiers == nil {
		return nil
	}
	out := mapSlice(*in.Identifiers, func(v codedValueJSON) domain.Identifier { return domain.Identifier{System: v.System, Value: v.Value} })
	return &out
}

func (s *server) listPatients(c *fiber.Ctx) error {
	p, err := pageOf(c)
	if err != nil {
		return err
	}
	var f domain.PatientFilter
	if f.OrganizationID, err = queryID(c, "organizationId"); err != nil {
		return err
	}
	if f.StudyID, err = queryID(c, "studyId"); err != nil {
		return err
	}
	if v := c.Query("identifier"); v != "" {
		system, value, ok := strings.Cut(v, "|")
		if !ok || system == "" || value == "" {
			return domain.FieldErrorf("identifier", "%q is not system|value", v)
		}
		f.Identifier = &domain.Identifier{System: system, Value: value}
	}
	f.Name = c.Query("name")
	l, err := s.service.ListPatients(c.UserContext(), actor(c), f, p)
	if err != nil {
		return err
	}
	return writeList(c, p, l, toPatientJSON)
}

func (s *server) createPatient(c *fiber.Ctx) error {
	var in patientInJSON
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	p, err := s.service.CreatePatient(c.UserContext(), actor(c), domain.NewPatient{
		Email: in.Email, Password: in.Password, FamilyName: deref(in.NameFamily), GivenNames: deref(in.NameGiven),
		BirthDate: deref(in.BirthDate), Phone: deref(in.Phone), Identifiers: deref(in.identifiers()), OrganizationIDs: deref(in.OrganizationIDs),
	})
	if err != nil {
		return err
	}
	return writePatient(c.Status(fiber.StatusCreated), *p)
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
	if in.Email != "" || in.Password != "" {
		return domain.FieldErrorf("email", "the login of a patient cannot be changed here")
	}
	p, err := s.service.UpdatePatient(c.UserContext(), actor(c), id, domain.PatientPatch{
		FamilyName: in.NameFamily, GivenNames: in.NameGiven, BirthDate: in.BirthDate, Phone: in.Phone,
		Identifiers: in.identifiers(), OrganizationIDs: in.OrganizationIDs, Unchanged: version,
	})
	if err != nil {
		return err
	}
	return writePatient(c, *p)
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

// invitePatient issues the patient's secret authorization link for a
// client app: a single-use authorization code the app redeems with the
// patient PKCE verifier.
func (s *server) invitePatient(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	var in struct {
		ClientID string `json:"clientId"`
	}
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	if in.ClientID == "" {
		return domain.FieldErrorf("clientId", "is required: the app that will redeem the invitation")
	}
	p, err := s.service.PatientForInvitation(c.UserContext(), actor(c), id)
	if err != nil {
		return err
	}
	code, err := s.oauth.IssuePatientCode(c.UserContext(), p.UserID, in.ClientID)
	if err != nil {
		return domain.AsFieldError(err, "clientId")
	}
	return s.invitationCreated(c, p, code)
}

// invitationCreated answers a new invitation link: absolute on the
// origin the client used (a console invitation's link is a local path).
func (s *server) invitationCreated(c *fiber.Ctx, p *domain.Patient, code *oauth.PatientCode) error {
	return c.Status(fiber.StatusCreated).JSON(fiber.Map{"patientId": p.ID, "clientId": code.ClientID,
		"invitationLink": oauth.AbsoluteLink(code.Link, origin(c)), "expiresAt": code.ExpiresAt})
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
	p, err := s.invitedPatient(c)
	if err != nil {
		return err
	}
	if err := s.oauth.CancelInvitation(c.UserContext(), p.UserID, c.Params("invitationId")); err != nil {
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}

// reissueInvitation replaces an invitation with a new link for the same
// client; the old link stops working.
func (s *server) reissueInvitation(c *fiber.Ctx) error {
	p, err := s.invitedPatient(c)
	if err != nil {
		return err
	}
	code, err := s.oauth.ReissueInvitation(c.UserContext(), p.UserID, c.Params("invitationId"))
	if err != nil {
		return err
	}
	return s.invitationCreated(c, p, code)
}

// invitedPatient returns the path's patient if the actor may invite them.
func (s *server) invitedPatient(c *fiber.Ctx) (*domain.Patient, error) {
	id, err := idParam(c, "id")
	if err != nil {
		return nil, err
	}
	return s.service.PatientForInvitation(c.UserContext(), actor(c), id)
}
