package domain

import (
	"context"
	"slices"
	"strings"
)

// NewOrganization is the input of CreateOrganization.
type NewOrganization struct {
	Name   string
	Type   OrganizationType
	PartOf int64 // 0: a top-level organization
}

// CreateOrganization stores a new organization. A top-level organization
// needs a superuser; a sub-organization needs an administrator of its parent.
// Returns CodeInvalid, CodeForbidden, or CodeNotFound for an unknown parent.
func (s *Service) CreateOrganization(ctx context.Context, actor *Actor, in NewOrganization) (*Organization, error) {
	o := &Organization{Name: strings.TrimSpace(in.Name), Type: in.Type, PartOf: in.PartOf}
	if o.Name == "" {
		return nil, FieldErrorf("name", "is required")
	}
	if !slices.Contains(OrganizationTypes, o.Type) {
		return nil, FieldErrorf("type", "%q is not an organization type (one of %v)", o.Type, OrganizationTypes)
	}
	if o.PartOf == 0 {
		if !actor.IsSuperuser() {
			return nil, Errorf(CodeForbidden, "only a superuser may create a top-level organization")
		}
	} else {
		if _, err := s.store.OrganizationByID(ctx, o.PartOf); err != nil {
			if IsCode(err, CodeNotFound) {
				return nil, FieldErrorf("partOf", "organization %d does not exist", o.PartOf)
			}
			return nil, err
		}
		if !actor.CanAdministerOrganization(o.PartOf) {
			return nil, Errorf(CodeForbidden, "only a manager of organization %d may add sub-organizations", o.PartOf)
		}
	}
	if err := s.store.CreateOrganization(ctx, o); err != nil {
		return nil, err
	}
	return o, nil
}

// OrganizationByName returns the organization of that name under partOf.
func (s *Service) OrganizationByName(ctx context.Context, name string, partOf int64) (*Organization, error) {
	return s.store.OrganizationByName(ctx, name, partOf)
}

// AddMember makes a practitioner user a member of the organization with a
// role (RoleNone allowed). Needs an administrator of the organization.
// Returns CodeDuplicate if the user is already a member.
func (s *Service) AddMember(ctx context.Context, actor *Actor, organizationID, userID int64, role Role) error {
	if !slices.Contains([]Role{RoleNone, RoleViewer, RoleMember, RoleManager}, role) {
		return FieldErrorf("role", "%q is not a role (manager, member, viewer, or none)", role)
	}
	if _, err := s.store.OrganizationByID(ctx, organizationID); err != nil {
		return err
	}
	if !actor.CanAdministerOrganization(organizationID) {
		return Errorf(CodeForbidden, "only a manager of organization %d may add members", organizationID)
	}
	u, err := s.store.UserByID(ctx, userID)
	if err != nil {
		return err
	}
	if u.Type != UserPractitioner {
		return FieldErrorf("userId", "user %d is a patient; only practitioners are members", userID)
	}
	return s.store.CreateMembership(ctx, &Membership{OrganizationID: organizationID, UserID: userID, Role: role})
}
