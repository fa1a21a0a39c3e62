package handlers

import (
	"time"

	"github.com/gofiber/fiber/v2"

	"exchange/domain"
)

// profileJSON is the body of GET /api/v1/users/profile. isSuperUser is
// isSuperuser as JupyterHealth Exchange's client reads it.
type profileJSON struct {
	ID          int64        `json:"id"`
	Email       string       `json:"email"`
	FirstName   string       `json:"firstName"`
	LastName    string       `json:"lastName"`
	Patient     *patientJSON `json:"patient"`
	UserType    string       `json:"userType"`
	IsSuperuser bool         `json:"isSuperuser"`
	IsSuperUser bool         `json:"isSuperUser"`
}

// profile answers who the bearer token acts for.
func (s *server) profile(c *fiber.Ctx) error {
	a := actor(c)
	out := profileJSON{ID: a.User.ID, Email: a.User.Email, FirstName: a.User.FirstName, LastName: a.User.LastName,
		UserType: string(a.User.Type), IsSuperuser: a.User.IsSuperuser, IsSuperUser: a.User.IsSuperuser}
	if a.Patient != nil {
		p, err := s.patientsJSON(c.UserContext(), []domain.Patient{*a.Patient})
		if err != nil {
			return err
		}
		out.Patient = &p[0]
	}
	return c.JSON(out)
}

// listUsers is the user directory: superusers find users by a part of
// their email; managers look up a practitioner to add by their exact email.
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

// userStatusJSON is the answer of PATCH /api/v1/users/:id.
type userStatusJSON struct {
	userJSON
	IsActive    bool      `json:"isActive"`
	LastUpdated time.Time `json:"lastUpdated"`
}

func toUserStatusJSON(u domain.User) userStatusJSON {
	return userStatusJSON{userJSON: toUserJSON(u), IsActive: u.IsActive, LastUpdated: u.LastUpdated}
}

// updateUser activates or deactivates a user (superusers); deactivating
// ends their sessions and revokes their tokens. With If-Match, only the
// version it names (versions.go).
func (s *server) updateUser(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	version, err := ifMatchVersion(c)
	if err != nil {
		return err
	}
	var in struct {
		IsActive *bool `json:"isActive"`
	}
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	var u *domain.User
	if in.IsActive == nil {
		// null or {}: nothing to change, and the version stays.
		u, err = s.service.UserStatus(c.UserContext(), actor(c), id, version)
	} else {
		u, err = s.service.SetUserActive(c.UserContext(), actor(c), id, *in.IsActive, version)
	}
	if err != nil {
		return err
	}
	return writeUserStatus(c, *u)
}
