package handlers

import (
	"encoding/json"

	"github.com/gofiber/fiber/v2"

	"exchange/domain"
)

// organizationInJSON is the body that creates or changes an organization.
// partOf null, as a top-level organization reads, means the top level; in
// a PATCH a missing partOf leaves it where it is.
type organizationInJSON struct {
	Name   *string    `json:"name"`
	Type   *string    `json:"type"`
	PartOf nullableID `json:"partOf"`
}

// nullableID is an id field that tells null (Set, ID 0) from missing.
type nullableID struct {
	Set bool
	ID  int64
}

func (n *nullableID) UnmarshalJSON(data []byte) error {
	n.Set, n.ID = true, 0
	if string(data) == "null" {
		return nil
	}
	return json.Unmarshal(data, &n.ID)
}

func (in organizationInJSON) patch() domain.OrganizationPatch {
	p := domain.OrganizationPatch{Name: in.Name}
	if in.PartOf.Set {
		p.PartOf = &in.PartOf.ID
	}
	if in.Type != nil {
		t := domain.OrganizationType(*in.Type)
		p.Type = &t
	}
	return p
}

// listOrganizations lists the organization directory: every
// organization, whoever asks (domain.OrganizationDirectory).
func (s *server) listOrganizations(c *fiber.Ctx) error {
	p, err := pageOf(c)
	if err != nil {
		return err
	}
	// partOf=0 lists the top-level organizations.
	var partOf *int64
	if v := c.Query("partOf"); v != "" {
		id, ok := domain.ParseID(v)
		if !ok && v != "0" {
			return domain.FieldErrorf("partOf", "%q is not an organization id (0: top level)", v)
		}
		partOf = &id
	}
	l, err := s.service.OrganizationDirectory(c.UserContext(), partOf, p)
	if err != nil {
		return err
	}
	a := actor(c)
	return writeList(c, p, l, func(n domain.OrganizationNode) organizationEntryJSON { return toOrganizationEntryJSON(a, n) })
}

// getOrganization answers an organization of the directory with the
// organizations below it; 0 is ROOT. The tree route answers the same.
func (s *server) getOrganization(c *fiber.Ctx) error {
	id := int64(domain.RootOrganizationID)
	if c.Params("id") != "0" {
		var err error
		if id, err = idParam(c, "id"); err != nil {
			return err
		}
	}
	n, err := s.service.OrganizationEntry(c.UserContext(), id)
	if err != nil {
		return err
	}
	return writeOrganization(c, *n)
}

func (s *server) createOrganization(c *fiber.Ctx) error {
	var in organizationInJSON
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	org, err := s.service.CreateOrganization(c.UserContext(), actor(c), domain.NewOrganization{
		Name: deref(in.Name), Type: domain.OrganizationType(deref(in.Type)), PartOf: in.PartOf.ID})
	if err != nil {
		return err
	}
	return s.writtenOrganization(c.Status(fiber.StatusCreated), *org)
}

// updateOrganization applies a PATCH; with If-Match, only to the version
// it names (versions.go).
func (s *server) updateOrganization(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	version, err := ifMatchVersion(c)
	if err != nil {
		return err
	}
	var in organizationInJSON
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	patch := in.patch()
	patch.Unchanged = version
	o, err := s.service.UpdateOrganization(c.UserContext(), actor(c), id, patch)
	if err != nil {
		return err
	}
	return s.writtenOrganization(c, *o)
}

// writtenOrganization answers an organization as a write left it, with
// the organizations below it.
func (s *server) writtenOrganization(c *fiber.Ctx, o domain.Organization) error {
	n, err := s.service.WithSubtree(c.UserContext(), o)
	if err != nil {
		return err
	}
	return writeOrganization(c, n)
}

func (s *server) deleteOrganization(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	if err := s.service.DeleteOrganization(c.UserContext(), actor(c), id); err != nil {
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}

// memberInJSON is the body that adds a member or changes their role; a
// null or missing role is a membership without a role.
type memberInJSON struct {
	UserID int64   `json:"userId"`
	Role   *string `json:"role"`
}

func (in memberInJSON) role() domain.Role {
	if in.Role == nil {
		return domain.RoleNone
	}
	return domain.Role(*in.Role)
}

func (s *server) addMember(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	var in memberInJSON
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	if in.UserID == 0 {
		return domain.FieldErrorf("userId", "is required")
	}
	if err := s.service.AddMember(c.UserContext(), actor(c), id, in.UserID, in.role()); err != nil {
		return err
	}
	return s.memberResponse(c, fiber.StatusCreated, id, in.UserID)
}

// memberResponse answers the membership as it now is.
func (s *server) memberResponse(c *fiber.Ctx, status int, organizationID, userID int64) error {
	u, err := s.service.UserByID(c.UserContext(), userID)
	if err != nil {
		return err
	}
	m, err := s.service.Membership(c.UserContext(), organizationID, userID)
	if err != nil {
		return err
	}
	return c.Status(status).JSON(toMemberJSON(domain.Member{User: *u, Role: m.Role}))
}

func (s *server) changeMember(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	userID, err := idParam(c, "userId")
	if err != nil {
		return err
	}
	var in memberInJSON
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	if in.UserID != 0 && in.UserID != userID {
		return domain.FieldErrorf("userId", "does not match the user of the path")
	}
	if err := s.service.ChangeMemberRole(c.UserContext(), actor(c), id, userID, in.role()); err != nil {
		return err
	}
	return s.memberResponse(c, fiber.StatusOK, id, userID)
}
