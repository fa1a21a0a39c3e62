package domain

import (
	"context"
	"slices"
	"strings"
	"time"
)

// NewPractitioner is the input of CreatePractitioner: a practitioner login,
// optionally placed in an organization with a role.
type NewPractitioner struct {
	Email          string
	Password       string
	FirstName      string
	LastName       string
	OrganizationID int64 // 0: none
	Role           Role
	// Identifier is the practitioner's id at the EHR (User.Identifier);
	// only a superuser may set it.
	Identifier string
}

// PractitionerPatch changes a practitioner; nil fields stay.
type PractitionerPatch struct {
	FirstName *string
	LastName  *string
	// Identifier changes the practitioner's id at the EHR
	// (User.Identifier); only a superuser may.
	Identifier *string
	// Unchanged is the LastUpdated of the practitioner's user the change
	// was made from (the admin API's If-Match); nil: none
	// (checkUnchanged).
	Unchanged *time.Time
}

// Practitioner is a practitioner user with their memberships.
type Practitioner struct {
	User        User
	Memberships []PractitionerMembership
}

// PractitionerMembership is one organization of a practitioner.
type PractitionerMembership struct {
	Organization Organization
	Role         Role
}

// CreatePractitioner creates a practitioner user, and their membership when
// an organization is given: both or neither. A superuser may create any; a
// manager only into their organization.
func (s *Service) CreatePractitioner(ctx context.Context, actor *Actor, in NewPractitioner) (*Practitioner, error) {
	if in.OrganizationID == 0 && !actor.IsSuperuser() {
		return nil, FieldErrorf("organizationId", "is required: you may create practitioners only in an organization you manage")
	}
	if in.OrganizationID != 0 {
		if err := validRole(in.Role); err != nil {
			return nil, err
		}
		if _, err := s.store.OrganizationByID(ctx, in.OrganizationID); err != nil {
			if IsCode(err, CodeNotFound) {
				return nil, FieldErrorf("organizationId", "organization %d does not exist", in.OrganizationID)
			}
			return nil, err
		}
		if !actor.CanAdministerOrganization(in.OrganizationID) {
			return nil, Errorf(CodeForbidden, "only a manager of organization %d may add practitioners to it", in.OrganizationID)
		}
	}
	u, err := s.newUser(NewUser{Email: in.Email, Password: in.Password, FirstName: in.FirstName, LastName: in.LastName, Type: UserPractitioner})
	if err != nil {
		return nil, err
	}
	if in.Identifier != "" {
		if u.Identifier, err = practitionerIdentifier(actor, in.Identifier); err != nil {
			return nil, err
		}
	}
	if in.OrganizationID == 0 {
		err = s.store.CreateUser(ctx, u)
	} else {
		err = s.store.CreatePractitioner(ctx, u, &Membership{OrganizationID: in.OrganizationID, Role: in.Role})
	}
	if err != nil {
		return nil, err
	}
	return s.practitioner(ctx, u)
}

func (s *Service) practitioner(ctx context.Context, u *User) (*Practitioner, error) {
	ps, err := s.practitioners(ctx, []User{*u})
	if err != nil {
		return nil, err
	}
	return &ps[0], nil
}

// practitioners adds the users' memberships and their organizations, in
// two reads whatever the number of users (a page of the list).
func (s *Service) practitioners(ctx context.Context, users []User) ([]Practitioner, error) {
	ids := make([]int64, len(users))
	for i, u := range users {
		ids[i] = u.ID
	}
	ms, err := s.store.MembershipsOfUsers(ctx, ids)
	if err != nil {
		return nil, err
	}
	orgIDs := idsOf(ms, func(m Membership) int64 { return m.OrganizationID })
	orgs := map[int64]Organization{}
	if len(orgIDs) > 0 {
		found, err := s.store.OrganizationsByIDs(ctx, orgIDs)
		if err != nil {
			return nil, err
		}
		for _, o := range found {
			orgs[o.ID] = o
		}
	}
	byUser := map[int64][]PractitionerMembership{}
	for _, m := range ms {
		o, ok := orgs[m.OrganizationID]
		if !ok {
			continue // left behind by an interrupted organization delete
		}
		byUser[m.UserID] = append(byUser[m.UserID], PractitionerMembership{Organization: o, Role: m.Role})
	}
	out := make([]Practitioner, len(users))
	for i, u := range users {
		memberships := byUser[u.ID]
		if memberships == nil {
			memberships = []PractitionerMembership{} // [] in JSON, not null
		}
		out[i] = Practitioner{User: u, Memberships: memberships}
	}
	return out, nil
}

// canReadPractitioner: themselves, a superuser, or a member of one of
// their organizations.
func (a *Actor) canReadPractitioner(p *Practitioner) bool {
	if a.IsSuperuser() || a.User.ID == p.User.ID {
		return true
	}
	return slices.ContainsFunc(p.Memberships, func(m PractitionerMembership) bool { return a.CanReadOrganization(m.Organization.ID) })
}

// PractitionerByID returns a practitioner the actor may read: themselves, a
// colleague of one of their organizations, anyone for a superuser.
func (s *Service) PractitionerByID(ctx context.Context, actor *Actor, id int64) (*Practitioner, error) {
	u, err := s.store.UserByID(ctx, id)
	if err == nil && u.Type != UserPractitioner {
		err = Errorf(CodeNotFound, "practitioner %d does not exist", id)
	}
	if err != nil {
		return nil, err
	}
	p, err := s.practitioner(ctx, u)
	if err != nil {
		return nil, err
	}
	if !actor.canReadPractitioner(p) {
		return nil, Errorf(CodeForbidden, "you may not read practitioner %d", id)
	}
	return p, nil
}

// UpdatePractitioner changes a practitioner's names: themselves or a
// superuser. Returns CodeNotFound, CodeForbidden, CodeInvalid, and a
// Stale CodeConflict if in.Unchanged is not the stored version, checked
// once the actor may change the practitioner (as UpdateStudy).
func (s *Service) UpdatePractitioner(ctx context.Context, actor *Actor, id int64, in PractitionerPatch) (*Practitioner, error) {
	return applyAgain(func() (*Practitioner, error) { return s.updatePractitioner(ctx, actor, id, in) }, "practitioner %d", id)
}

// updatePractitioner applies the patch to the stored user once.
func (s *Service) updatePractitioner(ctx context.Context, actor *Actor, id int64, in PractitionerPatch) (*Practitioner, error) {
	p, err := s.PractitionerByID(ctx, actor, id)
	if err != nil {
		return nil, err
	}
	if !actor.IsSuperuser() && actor.User.ID != id {
		return nil, Errorf(CodeForbidden, "only practitioner %d or a superuser may change their record", id)
	}
	if err := checkUnchanged(in.Unchanged, p.User.LastUpdated, "practitioner %d", id); err != nil {
		return nil, err
	}
	u := p.User
	if in.FirstName != nil {
		u.FirstName = strings.TrimSpace(*in.FirstName)
	}
	if in.LastName != nil {
		u.LastName = strings.TrimSpace(*in.LastName)
	}
	if err := LimitName.checkTexts("firstName", u.FirstName, "lastName", u.LastName); err != nil {
		return nil, err
	}
	ch := UserChange{FirstName: &u.FirstName, LastName: &u.LastName, From: &p.User.LastUpdated}
	if in.Identifier != nil {
		if u.Identifier, err = practitionerIdentifier(actor, *in.Identifier); err != nil {
			return nil, err
		}
		ch.Identifier = &u.Identifier
	}
	if u.FirstName == p.User.FirstName && u.LastName == p.User.LastName && u.Identifier == p.User.Identifier {
		return p, nil // nothing to change: no new version
	}
	if u.LastUpdated, err = s.store.ChangeUser(ctx, u.ID, ch); err != nil {
		return nil, err
	}
	p.User = u
	return p, nil
}

// ListPractitioners lists practitioners: of one organization the actor may
// read, or (organizationID 0) of every organization the actor belongs to,
// all of them for a superuser. Patients may not list practitioners.
func (s *Service) ListPractitioners(ctx context.Context, actor *Actor, organizationID int64, p Page) (List[Practitioner], error) {
	if actor.Patient != nil || actor.User.Type == UserPatient {
		return List[Practitioner]{}, Errorf(CodeForbidden, "patients may not list practitioners")
	}
	q := UserQuery{Type: UserPractitioner}
	orgs := actor.readableOrganizationIDs()
	if organizationID != 0 {
		if _, err := s.store.OrganizationByID(ctx, organizationID); err != nil {
			return List[Practitioner]{}, err
		}
		if !actor.CanReadOrganization(organizationID) {
			return List[Practitioner]{}, Errorf(CodeForbidden, "you may not read organization %d", organizationID)
		}
		orgs = []int64{organizationID}
	}
	if orgs != nil {
		ms, err := s.store.MembershipsOfOrganizations(ctx, orgs, everything)
		if err != nil {
			return List[Practitioner]{}, err
		}
		q.IDs = idsOf(ms.Items, func(m Membership) int64 { return m.UserID })
	}
	users, err := s.store.ListUsers(ctx, q, p)
	if err != nil {
		return List[Practitioner]{}, err
	}
	items, err := s.practitioners(ctx, users.Items)
	if err != nil {
		return List[Practitioner]{}, err
	}
	return List[Practitioner]{Total: users.Total, Items: items}, nil
}

// practitionerIdentifier checks an identifier a practitioner is to be
// known by at the EHR: only a superuser may set one, since whoever holds
// it receives the tokens the EHR's ID tokens for it are exchanged for.
func practitionerIdentifier(actor *Actor, id string) (string, error) {
	if !actor.IsSuperuser() {
		return "", FieldErrorf("identifier", "only a superuser may set a practitioner's EHR identifier")
	}
	id = strings.TrimSpace(id)
	return id, LimitIdentifier.Check("identifier", id)
}
