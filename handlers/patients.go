package handlers

import (
	"strings"

	"github.com/gofiber/fiber/v2"

	"exchange/domain"
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
	return c.Status(fiber.StatusCreated).JSON(toPatientJSON(*p))
}

func (s *server) updatePatient(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
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
		Identifiers: in.identifiers(), OrganizationIDs: in.OrganizationIDs,
	})
	if err != nil {
		return err
	}
	return c.JSON(toPatientJSON(*p))
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
	return c.Status(fiber.StatusCreated).JSON(fiber.Map{"patientId": p.ID, "clientId": in.ClientID, "invitationLink": code.Link, "expiresAt": code.ExpiresAt})
}
