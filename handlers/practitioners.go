package handlers

import (
	"github.com/gofiber/fiber/v2"

	"exchange/domain"
)

type practitionerInJSON struct {
	Email          string  `json:"email"`
	Password       string  `json:"password"`
	FirstName      *string `json:"firstName"`
	LastName       *string `json:"lastName"`
	OrganizationID int64   `json:"organizationId"`
	Role           *string `json:"role"`
	Identifier     *string `json:"identifier"`
}

func (s *server) createPractitioner(c *fiber.Ctx) error {
	var in practitionerInJSON
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	p, err := s.service.CreatePractitioner(c.UserContext(), actor(c), domain.NewPractitioner{
		Email: in.Email, Password: in.Password, FirstName: deref(in.FirstName), LastName: deref(in.LastName),
		OrganizationID: in.OrganizationID, Role: domain.Role(deref(in.Role)), Identifier: deref(in.Identifier),
	})
	if err != nil {
		return err
	}
	return writePractitioner(c.Status(fiber.StatusCreated), *p)
}

// updatePractitioner applies a PATCH; with If-Match, only to the version
// it names (versions.go).
func (s *server) updatePractitioner(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	version, err := ifMatchVersion(c)
	if err != nil {
		return err
	}
	var in struct {
		FirstName  *string `json:"firstName"`
		LastName   *string `json:"lastName"`
		Identifier *string `json:"identifier"`
	}
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	p, err := s.service.UpdatePractitioner(c.UserContext(), actor(c), id,
		domain.PractitionerPatch{FirstName: in.FirstName, LastName: in.LastName, Identifier: in.Identifier, Unchanged: version})
	if err != nil {
		return err
	}
	return writePractitioner(c, *p)
}
