package handlers

import (
	"time"

	"github.com/gofiber/fiber/v2"

	"exchange/domain"
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

// patientJSON is a patient in the admin API.
type patientJSON struct {
	ID              int64            `json:"id"`
	UserID          int64            `json:"userId"`
	NameFamily      string           `json:"nameFamily"`
	NameGiven       []string         `json:"nameGiven"`
	BirthDate       *string          `json:"birthDate"`
	Telecom         []codedValueJSON `json:"telecom"`
	Identifiers     []codedValueJSON `json:"identifiers"`
	OrganizationIDs []int64          `json:"organizationIds"`
	LastUpdated     time.Time        `json:"lastUpdated"`
}

// codedValueJSON is an identifier or a contact point.
type codedValueJSON struct {
	System string `json:"system"`
	Value  string `json:"value"`
}

func toPatientJSON(p *domain.Patient) *patientJSON {
	out := &patientJSON{ID: p.ID, UserID: p.UserID, NameFamily: p.FamilyName, NameGiven: p.GivenNames,
		Telecom: []codedValueJSON{}, Identifiers: []codedValueJSON{}, OrganizationIDs: p.OrganizationIDs, LastUpdated: p.LastUpdated}
	if out.NameGiven == nil {
		out.NameGiven = []string{}
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
	return out
}

// profile answers who the bearer token acts for.
func (s *server) profile(c *fiber.Ctx) error {
	a := actor(c)
	out := profileJSON{ID: a.User.ID, Email: a.User.Email, FirstName: a.User.FirstName, LastName: a.User.LastName,
		UserType: string(a.User.Type), IsSuperuser: a.User.IsSuperuser}
	if a.Patient != nil {
		out.Patient = toPatientJSON(a.Patient)
	}
	return c.JSON(out)
}
