package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"exchange/domain"
)

func TestPractitionersCreate(t *testing.T) {
	w := admNewWorld(t)
	ctx := context.Background()

	// A manager creates a practitioner into their organization.
	created := w.call(t, "POST", "/api/v1/practitioners", w.manager, map[string]any{
		"email": "New.Doc@Example.org", "password": "a long enough password", "firstName": "New", "lastName": "Doc",
		"organizationId": w.org.ID, "role": "member"}, http.StatusCreated)
	id := admID(t, created)
	orgs := admList(t, created, "organizations")
	if created["email"] != "new.doc@example.org" || created["firstName"] != "New" || created["lastName"] != "Doc" ||
		created["userType"] != "practitioner" || created["isSuperuser"] != false || len(orgs) != 1 ||
		admID(t, orgs[0]) != w.org.ID || orgs[0]["role"] != "member" || orgs[0]["name"] != "Hospital" {
		t.Fatalf("created: %v", created)
	}
	if m, err := w.env.Service.Membership(ctx, w.org.ID, id); err != nil || m.Role != domain.RoleMember {
		t.Errorf("membership: %v %v", m, err)
	}
	if _, err := w.env.Service.Authenticate(ctx, "new.doc@example.org", "a long enough password", "test"); err != nil {
		t.Errorf("the new practitioner cannot log in: %v", err)
	}
	// Without a role: a role-less membership.
	norole := w.call(t, "POST", "/api/v1/practitioners", w.manager, map[string]any{"email": "norole@example.org", "organizationId": w.org.ID}, http.StatusCreated)
	if orgs := admList(t, norole, "organizations"); len(orgs) != 1 || orgs[0]["role"] != nil {
		t.Errorf("no role: %v", norole)
	}
	// A superuser may create one without an organization.
	loose := w.call(t, "POST", "/api/v1/practitioners", w.admin, map[string]any{"email": "loose@example.org"}, http.StatusCreated)
	if orgs := admList(t, loose, "organizations"); len(orgs) != 0 {
		t.Errorf("loose: %v", loose)
	}

	// Refusals leave no user behind.
	before := admSnapshot(t, w.env)
	for _, tc := range []struct {
		name   string
		token  string
		body   map[string]any
		status int
		field  string
	}{
		{"bad role", w.manager, map[string]any{"email": "x@example.org", "organizationId": w.org.ID, "role": "king"}, http.StatusBadRequest, "role"},
		{"unknown organization", w.admin, map[string]any{"email": "x@example.org", "organizationId": 9999, "role": "member"}, http.StatusBadRequest, "organizationId"},
		{"no organization", w.manager, map[string]any{"email": "x@example.org"}, http.StatusBadRequest, "organizationId"},
		{"bad email", w.manager, map[string]any{"email": "not an email", "organizationId": w.org.ID}, http.StatusBadRequest, "email"},
		{"short password", w.manager, map[string]any{"email": "x@example.org", "password": "short", "organizationId": w.org.ID}, http.StatusBadRequest, "password"},
		{"taken email", w.manager, map[string]any{"email": "NEW.doc@example.org", "organizationId": w.org.ID}, http.StatusConflict, "email"},
		{"member", w.member, map[string]any{"email": "x@example.org", "organizationId": w.org.ID, "role": "member"}, http.StatusForbidden, ""},
	} {
		resp, out := w.env.Send(t, "POST", "/api/v1/practitioners", tc.token, tc.body)
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d %v, want %d", tc.name, resp.StatusCode, out, tc.status)
			continue
		}
		admCheckDetail(t, tc.name, out, tc.field)
	}
	admSameSnapshot(t, "refused practitioner creates", before, admSnapshot(t, w.env))
	if _, err := w.env.Service.UserByEmail(ctx, "x@example.org"); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("a refused practitioner left a user behind: %v", err)
	}
}

func TestPractitionersReadUpdateList(t *testing.T) {
	w := admNewWorld(t)
	ctx := context.Background()
	other, err := w.env.Service.CreateOrganization(ctx, domain.SystemActor(), domain.NewOrganization{Name: "Other", Type: "prov"})
	if err != nil {
		t.Fatal(err)
	}
	stranger := w.practitioner(t, "stranger@example.org")
	if err := w.env.Service.AddMember(ctx, domain.SystemActor(), other.ID, stranger.ID, domain.RoleManager); err != nil {
		t.Fatal(err)
	}
	memberPath := fmt.Sprintf("/api/v1/practitioners/%d", w.memberID)

	// GET: self, colleagues, superusers.
	got := w.call(t, "GET", memberPath, w.viewer, nil, http.StatusOK)
	if admID(t, got) != w.memberID || got["email"] != "member@example.org" || got["lastUpdated"] == nil {
		t.Errorf("GET: %v", got)
	}
	if orgs := admList(t, got, "organizations"); len(orgs) != 1 || orgs[0]["role"] != "member" {
		t.Errorf("organizations: %v", got)
	}
	w.call(t, "GET", memberPath, w.env.Token(t, stranger.ID), nil, http.StatusForbidden)
	w.call(t, "GET", "/api/v1/practitioners/9999", w.admin, nil, http.StatusNotFound)
	p := w.patient(t, "pat@example.org", "Doe", "Jo", w.org.ID)
	w.call(t, "GET", fmt.Sprintf("/api/v1/practitioners/%d", p.UserID), w.admin, nil, http.StatusNotFound)

	// PATCH names: self or a superuser.
	self := w.call(t, "PATCH", memberPath, w.member, map[string]any{"firstName": " Mem ", "lastName": "Ber"}, http.StatusOK)
	if self["firstName"] != "Mem" || self["lastName"] != "Ber" {
		t.Errorf("PATCH self: %v", self)
	}
	admin := w.call(t, "PATCH", memberPath, w.admin, map[string]any{"lastName": "Bertrand"}, http.StatusOK)
	if admin["firstName"] != "Mem" || admin["lastName"] != "Bertrand" {
		t.Errorf("PATCH by a superuser: %v", admin)
	}
	w.call(t, "PATCH", memberPath, w.manager, map[string]any{"firstName": "Nope"}, http.StatusForbidden)
	w.call(t, "PATCH", memberPath, w.member, map[string]any{"email": "new@example.org"}, http.StatusBadRequest, "email")
	if u, err := w.env.Service.UserByID(ctx, w.memberID); err != nil || u.FirstName != "Mem" || u.LastName != "Bertrand" || u.Email != "member@example.org" {
		t.Errorf("stored: %+v %v", u, err)
	}

	// List by organization.
	list := w.call(t, "GET", fmt.Sprintf("/api/v1/practitioners?organizationId=%d", w.org.ID), w.viewer, nil, http.StatusOK)
	if got, want := admIDs(t, list), []int64{w.managerID, w.memberID, w.viewerID}; !slices.Equal(got, want) || list["count"] != float64(3) {
		t.Errorf("practitioners of the organization: %v, want %v", got, want)
	}
	list = w.call(t, "GET", fmt.Sprintf("/api/v1/practitioners?organizationId=%d", other.ID), w.admin, nil, http.StatusOK)
	if got := admIDs(t, list); !slices.Equal(got, []int64{stranger.ID}) {
		t.Errorf("practitioners of the other organization: %v", got)
	}
	w.call(t, "GET", fmt.Sprintf("/api/v1/practitioners?organizationId=%d", other.ID), w.viewer, nil, http.StatusForbidden)
	w.call(t, "GET", "/api/v1/practitioners?organizationId=x", w.viewer, nil, http.StatusBadRequest, "organizationId")
	// Without a filter: the colleagues of every organization of the actor.
	if got := admIDs(t, w.call(t, "GET", "/api/v1/practitioners", w.viewer, nil, http.StatusOK)); !slices.Equal(got, []int64{w.managerID, w.memberID, w.viewerID}) {
		t.Errorf("the viewer's colleagues: %v", got)
	}
	w.call(t, "GET", "/api/v1/practitioners", w.env.Token(t, p.UserID), nil, http.StatusForbidden)
}
