package domain

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// NewOrganization is the input of CreateOrganization.
type NewOrganization struct {
	Name   string
	Type   OrganizationType
	PartOf int64 // 0: a top-level organization
}

// OrganizationPatch changes an organization; nil fields stay.
type OrganizationPatch struct {
	Name   *string
	Type   *OrganizationType
	PartOf *int64 // 0: make it top level
	// Unchanged is the LastUpdated of the organization the change was
	// made from (the admin API's If-Match); nil: none (checkUnchanged).
	Unchanged *time.Time
}

// OrganizationNode is an organization with its sub-organizations.
type OrganizationNode struct {
	Organization
	Children []OrganizationNode
}

// Member is a practitioner's membership seen from the organization.
type Member struct {
	User User
	Role Role
}

// CreateOrganization stores a new organization. A top-level organization
// needs a superuser; a sub-organization needs an administrator of its parent.
// Names are unique among siblings, so that a create sent again (after a
// timeout) is a duplicate naming the stored one, not a second
// organization. Returns CodeInvalid, CodeForbidden, CodeDuplicate.
func (s *Service) CreateOrganization(ctx context.Context, actor *Actor, in NewOrganization) (*Organization, error) {
	o := &Organization{Name: strings.TrimSpace(in.Name), Type: in.Type, PartOf: in.PartOf}
	if err := validateOrganization(o); err != nil {
		return nil, err
	}
	if err := s.checkParent(ctx, actor, o.PartOf); err != nil {
		return nil, err
	}
	if err := s.checkSiblingName(ctx, o); err != nil {
		return nil, err
	}
	if err := s.store.CreateOrganization(ctx, o); err != nil {
		return nil, err
	}
	return o, nil
}

func validateOrganization(o *Organization) error {
	if o.Name == "" {
		return FieldErrorf("name", "is required")
	}
	if err := LimitName.Check("name", o.Name); err != nil {
		return err
	}
	if !slices.Contains(OrganizationTypes, o.Type) {
		return FieldErrorf("type", "%q is not an organization type (one of %v)", o.Type, OrganizationTypes)
	}
	return nil
}

// checkSiblingName refuses a name another organization under the same
// parent has (CodeDuplicate, naming it).
func (s *Service) checkSiblingName(ctx context.Context, o *Organization) error {
	other, err := s.store.OrganizationByName(ctx, o.Name, o.PartOf)
	switch {
	case IsCode(err, CodeNotFound):
		return nil
	case err != nil:
		return err
	case other.ID == o.ID:
		return nil
	}
	return &Error{Code: CodeDuplicate, Field: "name", Message: fmt.Sprintf("name: organization %d is already named %q there", other.ID, o.Name)}
}

// checkParent checks that the actor may place an organization under
// partOf: a superuser anywhere, an administrator of an existing parent.
func (s *Service) checkParent(ctx context.Context, actor *Actor, partOf int64) error {
	if partOf == 0 {
		if !actor.IsSuperuser() {
			return Errorf(CodeForbidden, "only a superuser may create or move top-level organizations")
		}
		return nil
	}
	if _, err := s.store.OrganizationByID(ctx, partOf); err != nil {
		if IsCode(err, CodeNotFound) {
			return FieldErrorf("partOf", "organization %d does not exist", partOf)
		}
		return err
	}
	if !actor.CanAdministerOrganization(partOf) {
		return Errorf(CodeForbidden, "only a manager of organization %d may add sub-organizations to it", partOf)
	}
	return nil
}

// readableOrganizationIDs returns the organizations the actor may read:
// nil for a superuser (all), the memberships of a practitioner, the
// organizations of a patient.
func (a *Actor) readableOrganizationIDs() []int64 {
	switch {
	case a.IsSuperuser():
		return nil
	case a.Patient != nil:
		return append([]int64{}, a.Patient.OrganizationIDs...)
	default:
		return a.OrganizationIDs()
	}
}

// canSeeOrganization reports whether the actor may read the organization
// itself: members, and patients belonging to it.
func (a *Actor) canSeeOrganization(id int64) bool {
	return a.CanReadOrganization(id) || (a.Patient != nil && slices.Contains(a.Patient.OrganizationIDs, id))
}

// ListOrganizations lists the organizations the actor may see, optionally
// only the children of partOf (0: top level).
func (s *Service) ListOrganizations(ctx context.Context, actor *Actor, partOf *int64, p Page) (List[Organization], error) {
	return s.store.ListOrganizations(ctx, OrganizationQuery{IDs: actor.readableOrganizationIDs(), PartOf: partOf}, p)
}

// Organization returns an organization the actor may see. Returns
// CodeNotFound or CodeForbidden.
func (s *Service) Organization(ctx context.Context, actor *Actor, id int64) (*Organization, error) {
	o, err := s.store.OrganizationByID(ctx, id)
	if err != nil {
		return nil, err
	}
	if !actor.canSeeOrganization(id) {
		return nil, Errorf(CodeForbidden, "you may not read organization %d", id)
	}
	return o, nil
}

// OrganizationByName returns the organization of that name under partOf.
func (s *Service) OrganizationByName(ctx context.Context, name string, partOf int64) (*Organization, error) {
	return s.store.OrganizationByName(ctx, name, partOf)
}

// administered returns the organization if the actor administers it.
func (s *Service) administered(ctx context.Context, actor *Actor, id int64) (*Organization, error) {
	o, err := s.store.OrganizationByID(ctx, id)
	if err != nil {
		return nil, err
	}
	if !actor.CanAdministerOrganization(id) {
		return nil, Errorf(CodeForbidden, "only a manager of organization %d may change it", id)
	}
	return o, nil
}

// UpdateOrganization changes an organization's name, type or place in the
// tree. Moving it needs the right to place it under the new parent, and may
// not put it under itself or one of its descendants. Updates of one
// organization sent at once each keep their change (applyAgain). Returns
// CodeNotFound, CodeForbidden, CodeInvalid, and a Stale CodeConflict if
// in.Unchanged is not the stored version, checked once the actor may make
// the change (as UpdateStudy).
func (s *Service) UpdateOrganization(ctx context.Context, actor *Actor, id int64, in OrganizationPatch) (*Organization, error) {
	return applyAgain(func() (*Organization, error) { return s.updateOrganization(ctx, actor, id, in) }, "organization %d", id)
}

// updateOrganization applies the patch to the stored record once.
func (s *Service) updateOrganization(ctx context.Context, actor *Actor, id int64, in OrganizationPatch) (*Organization, error) {
	o, err := s.administered(ctx, actor, id)
	if err != nil {
		return nil, err
	}
	moves := in.PartOf != nil && *in.PartOf != o.PartOf
	if moves {
		if err := s.checkParent(ctx, actor, *in.PartOf); err != nil {
			return nil, err
		}
	}
	if err := checkUnchanged(in.Unchanged, o.LastUpdated, "organization %d", id); err != nil {
		return nil, err
	}
	old := *o
	if in.Name != nil {
		o.Name = strings.TrimSpace(*in.Name)
	}
	if in.Type != nil {
		o.Type = *in.Type
	}
	if err := validateOrganization(o); err != nil {
		return nil, err
	}
	if moves {
		all, err := s.store.AllOrganizations(ctx)
		if err != nil {
			return nil, err
		}
		if *in.PartOf == id || slices.Contains(descendants(all, id), *in.PartOf) {
			return nil, FieldErrorf("partOf", "organization %d is %d itself or below it", *in.PartOf, id)
		}
		o.PartOf = *in.PartOf
	}
	if reflect.DeepEqual(*o, old) {
		return o, nil // nothing to change: no new version
	}
	if err := s.checkSiblingName(ctx, o); err != nil {
		return nil, err
	}
	return o, s.store.UpdateOrganization(ctx, &old, o)
}

// descendants returns the ids of every organization below root.
func descendants(all []Organization, root int64) []int64 {
	var out []int64
	queue := []int64{root}
	for len(queue) > 0 {
		parent := queue[0]
		queue = queue[1:]
		for _, o := range all {
			if o.PartOf == parent && !slices.Contains(out, o.ID) {
				out = append(out, o.ID)
				queue = append(queue, o.ID)
			}
		}
	}
	return out
}

// DeleteOrganization removes an empty organization (no sub-organizations,
// patients or studies; CodeConflict otherwise) with its memberships. It
// needs whoever could create it: an administrator of the parent, or a
// superuser.
func (s *Service) DeleteOrganization(ctx context.Context, actor *Actor, id int64) error {
	o, err := s.store.OrganizationByID(ctx, id)
	if err != nil {
		return err
	}
	if err := s.checkParent(ctx, actor, o.PartOf); err != nil {
		if IsCode(err, CodeForbidden) {
			return Errorf(CodeForbidden, "only a manager of the parent organization or a superuser may delete organization %d", id)
		}
		return err
	}
	one := Page{Number: 1, Size: 1}
	children, err := s.store.ListOrganizations(ctx, OrganizationQuery{PartOf: &id}, one)
	if err != nil {
		return err
	}
	patients, err := s.store.ListPatients(ctx, PatientQuery{OrganizationIDs: []int64{id}}, one)
	if err != nil {
		return err
	}
	studies, err := s.store.ListStudies(ctx, StudyQuery{OrganizationIDs: []int64{id}}, one)
	if err != nil {
		return err
	}
	if children.Total+patients.Total+studies.Total > 0 {
		return Errorf(CodeConflict, "organization %d still has %d sub-organizations, %d patients and %d studies; move or delete them first",
			id, children.Total, patients.Total, studies.Total)
	}
	return s.store.DeleteOrganization(ctx, id)
}

// RootOrganizationID is the id of ROOT, the organization above the
// top-level ones: JupyterHealth Exchange has one, and its clients ask for
// it by this id. It is not stored: it has no members, patients or
// studies, and nobody changes it.
const RootOrganizationID = 0

// rootOrganization is ROOT as the directory shows it.
var rootOrganization = Organization{ID: RootOrganizationID, Name: "ROOT", Type: "root"}

// The organization directory is every organization's name, type and place
// in the tree, for every signed-in user, members or not: as in
// JupyterHealth Exchange, where a practitioner picks an organization to
// join and a patient sees who runs a study. Names are not health data;
// who belongs to an organization, its members and patients, is, and stays
// with its members (Members, ListPatients). The tree is small (the console
// reads it whole too), so the directory reads it whole and pages it here.

// OrganizationDirectory lists every organization with its
// sub-organizations, by id: ROOT first, or, with partOf, the organizations
// directly under it (0: the top level).
func (s *Service) OrganizationDirectory(ctx context.Context, partOf *int64, p Page) (List[OrganizationNode], error) {
	all, err := s.store.AllOrganizations(ctx)
	if err != nil {
		return List[OrganizationNode]{}, err
	}
	var listed []Organization
	if partOf == nil {
		listed = append([]Organization{rootOrganization}, all...)
	} else {
		for _, o := range all {
			if o.PartOf == *partOf {
				listed = append(listed, o)
			}
		}
	}
	out := List[OrganizationNode]{Total: int64(len(listed)), Items: []OrganizationNode{}}
	if p.Offset() >= out.Total {
		return out, nil
	}
	for _, o := range listed[p.Offset():min(out.Total, p.Offset()+int64(p.Size))] {
		out.Items = append(out.Items, subtree(all, o))
	}
	return out, nil
}

// OrganizationEntry returns an organization of the directory with
// everything below it: ROOT (RootOrganizationID) has every organization
// below it.
func (s *Service) OrganizationEntry(ctx context.Context, id int64) (*OrganizationNode, error) {
	all, err := s.store.AllOrganizations(ctx)
	if err != nil {
		return nil, err
	}
	if id == RootOrganizationID {
		n := subtree(all, rootOrganization)
		return &n, nil
	}
	for _, o := range all {
		if o.ID == id {
			n := subtree(all, o)
			return &n, nil
		}
	}
	return nil, Errorf(CodeNotFound, "organization %d does not exist", id)
}

// WithSubtree returns o, as a write left it, with the organizations below
// it: what the answer of a create or an update shows.
func (s *Service) WithSubtree(ctx context.Context, o Organization) (OrganizationNode, error) {
	all, err := s.store.AllOrganizations(ctx)
	if err != nil {
		return OrganizationNode{}, err
	}
	return subtree(all, o), nil
}

// OrganizationsByIDs returns the organizations of the directory among ids
// (those that exist), in id order: the organizations a patient's record
// names.
func (s *Service) OrganizationsByIDs(ctx context.Context, ids []int64) ([]Organization, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	return s.store.OrganizationsByIDs(ctx, ids)
}

// subtree returns o with the organizations of all below it. A stored
// cycle (which updates refuse to make) ends where an organization repeats.
func subtree(all []Organization, o Organization) OrganizationNode {
	seen := map[int64]bool{}
	var build func(o Organization) OrganizationNode
	build = func(o Organization) OrganizationNode {
		seen[o.ID] = true
		n := OrganizationNode{Organization: o, Children: []OrganizationNode{}}
		for _, c := range all {
			if c.PartOf == o.ID && c.ID != o.ID && !seen[c.ID] {
				n.Children = append(n.Children, build(c))
			}
		}
		return n
	}
	return build(o)
}

// Members lists the practitioners of an organization with their roles; for
// practitioners who may read the organization.
func (s *Service) Members(ctx context.Context, actor *Actor, organizationID int64, p Page) (List[Member], error) {
	if _, err := s.store.OrganizationByID(ctx, organizationID); err != nil {
		return List[Member]{}, err
	}
	if !actor.CanReadOrganization(organizationID) {
		return List[Member]{}, Errorf(CodeForbidden, "you may not read the members of organization %d", organizationID)
	}
	ms, err := s.store.MembershipsOfOrganizations(ctx, []int64{organizationID}, p)
	if err != nil {
		return List[Member]{}, err
	}
	ids := make([]int64, len(ms.Items))
	for i, m := range ms.Items {
		ids[i] = m.UserID
	}
	users, err := s.store.UsersByIDs(ctx, ids)
	if err != nil {
		return List[Member]{}, err
	}
	out := List[Member]{Total: ms.Total, Items: []Member{}}
	for _, m := range ms.Items {
		if i := slices.IndexFunc(users, func(u User) bool { return u.ID == m.UserID }); i >= 0 {
			out.Items = append(out.Items, Member{User: users[i], Role: m.Role})
		}
	}
	return out, nil
}

// validRole checks a role given to a member.
func validRole(role Role) error {
	if !slices.Contains([]Role{RoleNone, RoleViewer, RoleMember, RoleManager}, role) {
		return FieldErrorf("role", "%q is not a role (manager, member, viewer, or null for none)", role)
	}
	return nil
}

// AddMember makes a practitioner user a member of the organization with a
// role (RoleNone allowed). Needs an administrator of the organization.
// Returns CodeDuplicate if the user is already a member.
func (s *Service) AddMember(ctx context.Context, actor *Actor, organizationID, userID int64, role Role) error {
	if err := validRole(role); err != nil {
		return err
	}
	if _, err := s.administered(ctx, actor, organizationID); err != nil {
		return err
	}
	u, err := s.store.UserByID(ctx, userID)
	if IsCode(err, CodeNotFound) {
		return FieldErrorf("userId", "user %d does not exist", userID)
	}
	if err != nil {
		return err
	}
	if u.Type != UserPractitioner {
		return FieldErrorf("userId", "user %d is a patient; only practitioners are members", userID)
	}
	return s.store.CreateMembership(ctx, &Membership{OrganizationID: organizationID, UserID: userID, Role: role})
}

// AddMemberByEmail adds the practitioner with exactly that email (any
// case) to the organization with a role: how a manager adds a colleague
// without searching the user directory. The actor's right is checked
// before the email is looked up, so only administrators learn whether an
// address has an account. Returns CodeInvalid (field email) for an email
// without a practitioner, CodeDuplicate for a member.
func (s *Service) AddMemberByEmail(ctx context.Context, actor *Actor, organizationID int64, email string, role Role) (*User, error) {
	if err := validRole(role); err != nil {
		return nil, err
	}
	if _, err := s.administered(ctx, actor, organizationID); err != nil {
		return nil, err
	}
	email, err := NormalizeEmail("email", email)
	if err != nil {
		return nil, err
	}
	u, err := s.store.UserByEmail(ctx, email)
	if IsCode(err, CodeNotFound) || (err == nil && u.Type != UserPractitioner) {
		return nil, FieldErrorf("email", "no practitioner has the email %s", email)
	}
	if err != nil {
		return nil, err
	}
	if err := s.AddMember(ctx, actor, organizationID, u.ID, role); err != nil {
		return nil, err
	}
	return u, nil
}

// Membership returns one membership (after a write, to answer it).
func (s *Service) Membership(ctx context.Context, organizationID, userID int64) (*Membership, error) {
	return s.store.Membership(ctx, organizationID, userID)
}

// ChangeMemberRole gives a member another role. Returns CodeNotFound if the
// user is not a member.
func (s *Service) ChangeMemberRole(ctx context.Context, actor *Actor, organizationID, userID int64, role Role) error {
	if err := validRole(role); err != nil {
		return err
	}
	if _, err := s.administered(ctx, actor, organizationID); err != nil {
		return err
	}
	return s.store.UpdateMembership(ctx, &Membership{OrganizationID: organizationID, UserID: userID, Role: role})
}

// RemoveMember ends a membership. Returns CodeNotFound if the user is not a
// member.
func (s *Service) RemoveMember(ctx context.Context, actor *Actor, organizationID, userID int64) error {
	if _, err := s.administered(ctx, actor, organizationID); err != nil {
		return err
	}
	return s.store.DeleteMembership(ctx, organizationID, userID)
}
