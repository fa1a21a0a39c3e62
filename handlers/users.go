package handlers

import (
	"github.com/gofiber/fiber/v2"
)

// profileJSON is the body of GET /api/v1/users/profile.
type profileJSON struct {
	ID          int64        `json:"id"`
	Email       string       `json:"email"`
	FirstName   string       `json:"firstName"`
	LastName    string       `json:"lastName"`
	Patient     *patientJSON `json:"patient"`
	UserType    string       `json:"userType"`
	IsSuperuser bool         `json:"isSuperuser"`
}

// profile answers who the bearer token acts for.
func (s *server) profile(c *fiber.Ctx) error {
	a := actor(c)
	out := profileJSON{ID: a.User.ID, Email: a.User.Email, FirstName: a.User.FirstName, LastName: a.User.LastName,
		UserType: string(a.User.Type), IsSuperuser: a.User.IsSuperuser}
	if a.Patient != nil {
		p := toPatientJSON(*a.Patient)
		out.Patient = &p
	}
	return c.JSON(out)
}

// listUsers finds users by email, for practitioners adding members.
func (s *server) listUsers(c *fiber.Ctx) error {
	p, err := pageOf(c)
	if err != nil {
		return err
	}
	l, err := s.service.ListUsers(c.UserContext(), actor(c), c.Query("email"), p)
	if err != nil {
		return err
	}
	return writeList(c, p, l, toUserJSON)
}
