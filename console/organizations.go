package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"exchange/domain"
)

// allOrganizations is a page large enough for every organization a user
// reads: the tree is small (the domain reads it whole too).
var allOrganizations = domain.Page{Number: 1, Size: domain.MaxPageSize}

// readableOrganizations returns the organizations the user may see.
func (c *Console) readableOrganizations(ctx context.Context, a *domain.Actor) ([]domain.Organization, error) {
	l, err := c.Service.ListOrganizations(ctx, a, nil, allOrganizations)
	return l.Items, err
}

// dataOrganizations returns the organizations where the user may write
// patient data: where a study or a patient may be created.
func (c *Console) dataOrganizations(ctx context.Context, a *domain.Actor) ([]domain.Organization, error) {
	orgs, err := c.readableOrganizations(ctx, a)
	return slices.DeleteFunc(orgs, func(o domain.Organization) bool { return !a.CanManageDataIn(o.ID) }), err
}

// orgNode is an organization of the tree as the page shows it.
type orgNode struct {
	domain.Organization
	Role     string
	Children []orgNode
}

// tree arranges organizations under their parents; those whose parent the
// user does not see are roots.
func tree(a *domain.Actor, orgs []domain.Organization) []orgNode {
	seen := map[int64]bool{}
	for _, o := range orgs {
		seen[o.ID] = true
	}
	var build func(parent int64) []orgNode
	build = func(parent int64) []orgNode {
		var out []orgNode
		for _, o := range orgs {
			if (parent == 0 && !seen[o.PartOf]) || (parent != 0 && o.PartOf == parent) {
				r, _ := a.RoleIn(o.ID)
				role := roleName(r)
				if a.Patient != nil {
					role = "patient"
				}
				out = append(out, orgNode{Organization: o, Role: role, Children: build(o.ID)})
			}
		}
		return out
	}
	return build(0)
}

// organizationsPage is one page of the organizations the user sees, by
// id, arranged as a tree: one whose parent is on another page heads a
// branch of its own (its page names its parent).
type organizationsPage struct {
	Tree  []orgNode
	Pager pager
}

func (c *Console) organizations(w http.ResponseWriter, r *http.Request, s *session) error {
	p := listPage(r)
	l, err := c.Service.ListOrganizations(r.Context(), s.actor, nil, p)
	if err != nil {
		return err
	}
	if err := domain.CheckPage(p, l.Total); err != nil {
		return err
	}
	page := organizationsPage{Tree: tree(s.actor, l.Items), Pager: pagerOf(r, p, l.Total)}
	c.render(w, r, s, http.StatusOK, "organizations.html", "Organizations", "organizations", page)
	return nil
}

type organizationPage struct {
	Org        *domain.Organization
	Parent     *domain.Organization
	Children   []domain.Organization
	Members    []domain.Member
	Pager      pager
	Studies    []domain.StudyView
	Administer bool
	Roles      []domain.Role
}

func (c *Console) organization(w http.ResponseWriter, r *http.Request, s *session) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	return c.renderOrganization(w, r, s, id, nil)
}

// renderOrganization renders an organization's page, with a form of it
// that was refused.
func (c *Console) renderOrganization(w http.ResponseWriter, r *http.Request, s *session, id int64, form *formState) error {
	ctx := r.Context()
	o, err := c.Service.Organization(ctx, s.actor, id)
	if err != nil {
		return err
	}
	page := organizationPage{Org: o, Administer: s.actor.CanAdministerOrganization(id),
		Roles: []domain.Role{domain.RoleManager, domain.RoleMember, domain.RoleViewer, domain.RoleNone}}
	orgs, err := c.readableOrganizations(ctx, s.actor)
	if err != nil {
		return err
	}
	for _, x := range orgs {
		if x.PartOf == id {
			page.Children = append(page.Children, x)
		}
		if x.ID == o.PartOf {
			page.Parent = &x
		}
	}
	if s.actor.CanReadOrganization(id) {
		p := listPage(r)
		members, err := c.Service.Members(ctx, s.actor, id, p)
		if err != nil {
			return err
		}
		if err := domain.CheckPage(p, members.Total); err != nil {
			return err
		}
		page.Members, page.Pager = members.Items, pagerOf(r, p, members.Total)
	}
	studies, err := c.Service.ListStudies(ctx, s.actor, id, domain.Page{Number: 1, Size: domain.MaxPageSize})
	if err != nil {
		return err
	}
	page.Studies = studies.Items
	c.renderForm(w, r, s, http.StatusOK, "organization.html", o.Name, "organizations", page, form)
	return nil
}

// The forms of an organization's page: adding a practitioner (an unknown
// email, or one of a member already, is about the email), and each
// member's role.
var (
	addMemberForm    = formSpec{name: "add-member", fields: map[string]string{"email": "email", "role": "role"}, unnamed: map[domain.Code]string{domain.CodeDuplicate: "email"}}
	memberRoleForm   = formSpec{name: "member-role", fields: map[string]string{"role": "role"}}
	removeMemberForm = formSpec{name: "remove-member"}
)

// role reads a role from a form: "none" is a membership without a role.
func role(r *http.Request) domain.Role {
	v := strings.TrimSpace(r.PostFormValue("role"))
	if v == "none" {
		return domain.RoleNone
	}
	return domain.Role(v)
}

func (c *Console) addMember(w http.ResponseWriter, r *http.Request, s *session) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	if _, err := c.Service.AddMemberByEmail(r.Context(), s.actor, id, r.PostFormValue("email"), role(r)); err != nil {
		return addMemberForm.refused(r, err, func(form *formState) error { return c.renderOrganization(w, r, s, id, form) })
	}
	return seeOther(w, r, fmt.Sprintf("%sorganizations/%d/", Prefix, id), "added")
}

func (c *Console) changeMember(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.member(w, r, s, memberRoleForm, "saved", func(org, user int64) error {
		return c.Service.ChangeMemberRole(r.Context(), s.actor, org, user, role(r))
	})
}

func (c *Console) removeMember(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.member(w, r, s, removeMemberForm, "removed", func(org, user int64) error {
		return c.Service.RemoveMember(r.Context(), s.actor, org, user)
	})
}

// member applies a change to the membership the path names.
func (c *Console) member(w http.ResponseWriter, r *http.Request, s *session, spec formSpec, done string, change func(org, user int64) error) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	user, err := pathID(r, "user")
	if err != nil {
		return err
	}
	if err := change(id, user); err != nil {
		return spec.refused(r, err, func(form *formState) error {
			form.Values = url.Values{"member": {strconv.FormatInt(user, 10)}, "role": r.PostForm["role"]}
			return c.renderOrganization(w, r, s, id, form)
		})
	}
	return seeOther(w, r, fmt.Sprintf("%sorganizations/%d/", Prefix, id), done)
}
