package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"exchange/domain"
)

func TestOrganizationsCreateReadUpdate(t *testing.T) {
	w := admNewWorld(t)

	// A top-level organization needs a superuser.
	top := w.call(t, "POST", "/api/v1/organizations", w.admin, map[string]any{"name": " Clinic ", "type": "prov"}, http.StatusCreated)
	if top["name"] != "Clinic" || top["type"] != "prov" || top["partOf"] != float64(0) || top["lastUpdated"] == nil {
		t.Fatalf("created: %v", top)
	}
	topID := admID(t, top)
	w.call(t, "POST", "/api/v1/organizations", w.manager, map[string]any{"name": "Rogue", "type": "prov"}, http.StatusForbidden)

	// A sub-organization needs a manager of the parent.
	sub := w.call(t, "POST", "/api/v1/organizations", w.manager, map[string]any{"name": "Cardiology", "type": "dept", "partOf": w.org.ID}, http.StatusCreated)
	subID := admID(t, sub)
	if sub["partOf"] != float64(w.org.ID) {
		t.Errorf("sub-organization: %v", sub)
	}
	w.call(t, "POST", "/api/v1/organizations", w.member, map[string]any{"name": "X", "type": "dept", "partOf": w.org.ID}, http.StatusForbidden)
	w.call(t, "POST", "/api/v1/organizations", w.manager, map[string]any{"name": "X", "type": "dept", "partOf": topID}, http.StatusForbidden)

	// Invalid input names the field.
	w.call(t, "POST", "/api/v1/organizations", w.admin, map[string]any{"name": " ", "type": "prov"}, http.StatusBadRequest, "name")
	w.call(t, "POST", "/api/v1/organizations", w.admin, map[string]any{"name": "X", "type": "castle"}, http.StatusBadRequest, "type")
	w.call(t, "POST", "/api/v1/organizations", w.admin, map[string]any{"name": "X", "type": "prov", "partOf": 9999}, http.StatusBadRequest, "partOf")
	w.call(t, "POST", "/api/v1/organizations", w.admin, map[string]any{"name": "X", "type": "prov", "colour": "red"}, http.StatusBadRequest, "colour")
	w.call(t, "POST", "/api/v1/organizations", w.admin, map[string]any{"name": 3, "type": "prov"}, http.StatusBadRequest, "name")

	// GET one.
	got := w.call(t, "GET", fmt.Sprintf("/api/v1/organizations/%d", subID), w.admin, nil, http.StatusOK)
	if got["name"] != "Cardiology" || got["type"] != "dept" || got["partOf"] != float64(w.org.ID) || admID(t, got) != subID {
		t.Errorf("GET: %v", got)
	}
	w.call(t, "GET", "/api/v1/organizations/9999", w.admin, nil, http.StatusNotFound)
	w.call(t, "GET", "/api/v1/organizations/abc", w.admin, nil, http.StatusNotFound)
	// Every organization is in the directory, for members and others.
	if got := w.call(t, "GET", fmt.Sprintf("/api/v1/organizations/%d", topID), w.viewer, nil, http.StatusOK); got["name"] != "Clinic" || got["currentUserRole"] != nil {
		t.Errorf("another organization, as the viewer: %v", got)
	}

	// PATCH name and type (a manager of the organization itself).
	org := fmt.Sprintf("/api/v1/organizations/%d", w.org.ID)
	patched := w.call(t, "PATCH", org, w.manager, map[string]any{"name": "General Hospital", "type": "dept"}, http.StatusOK)
	if patched["name"] != "General Hospital" || patched["type"] != "dept" || patched["partOf"] != float64(0) {
		t.Errorf("PATCH: %v", patched)
	}
	if got := w.call(t, "GET", org, w.admin, nil, http.StatusOK); got["name"] != "General Hospital" || got["type"] != "dept" {
		t.Errorf("after PATCH: %v", got)
	}
	w.call(t, "PATCH", org, w.manager, map[string]any{"type": "castle"}, http.StatusBadRequest, "type")
	w.call(t, "PATCH", org, w.manager, map[string]any{"name": ""}, http.StatusBadRequest, "name")
	w.call(t, "PATCH", org, w.member, map[string]any{"name": "Mine"}, http.StatusForbidden)
	if got := w.call(t, "GET", org, w.admin, nil, http.StatusOK); got["name"] != "General Hospital" {
		t.Errorf("a refused PATCH changed the organization: %v", got)
	}

	// PATCH partOf: moving under another parent, and back to the top, is
	// for a superuser; a cycle is refused.
	w.call(t, "PATCH", org, w.manager, map[string]any{"partOf": topID}, http.StatusForbidden)
	moved := w.call(t, "PATCH", org, w.admin, map[string]any{"partOf": topID}, http.StatusOK)
	if moved["partOf"] != float64(topID) {
		t.Errorf("moved: %v", moved)
	}
	top2 := fmt.Sprintf("/api/v1/organizations/%d", topID)
	w.call(t, "PATCH", top2, w.admin, map[string]any{"partOf": subID}, http.StatusBadRequest, "partOf")
	w.call(t, "PATCH", top2, w.admin, map[string]any{"partOf": topID}, http.StatusBadRequest, "partOf")
	w.call(t, "PATCH", top2, w.admin, map[string]any{"partOf": 9999}, http.StatusBadRequest, "partOf")
	if got := w.call(t, "GET", top2, w.admin, nil, http.StatusOK); got["partOf"] != float64(0) {
		t.Errorf("a refused move changed the organization: %v", got)
	}
	// partOf null or 0 (as a top-level organization reads) is the top level.
	w.call(t, "PATCH", org, w.manager, map[string]any{"partOf": nil}, http.StatusForbidden)
	back := w.call(t, "PATCH", org, w.admin, map[string]any{"partOf": nil}, http.StatusOK)
	if back["partOf"] != float64(0) {
		t.Errorf("moved back to the top: %v", back)
	}
	if got := w.call(t, "GET", org, w.admin, nil, http.StatusOK); got["partOf"] != float64(0) {
		t.Errorf("after the move to the top: %v", got)
	}
	w.call(t, "PATCH", org, w.admin, map[string]any{"partOf": topID}, http.StatusOK)
	if back := w.call(t, "PATCH", org, w.admin, map[string]any{"partOf": 0}, http.StatusOK); back["partOf"] != float64(0) {
		t.Errorf("partOf 0: %v", back)
	}
	// A PATCH without partOf leaves it.
	if same := w.call(t, "PATCH", fmt.Sprintf("/api/v1/organizations/%d", subID), w.admin, map[string]any{"name": "Cardio"}, http.StatusOK); same["partOf"] != float64(w.org.ID) {
		t.Errorf("a PATCH without partOf moved it: %v", same)
	}
	w.call(t, "PATCH", org, w.admin, map[string]any{"partOf": "x"}, http.StatusBadRequest, "partOf")
	w.call(t, "POST", "/api/v1/organizations", w.admin, map[string]any{"name": "Y", "type": "prov", "partOf": "x"}, http.StatusBadRequest, "partOf")
	if nullTop := w.call(t, "POST", "/api/v1/organizations", w.admin, map[string]any{"name": "Z", "type": "prov", "partOf": nil}, http.StatusCreated); nullTop["partOf"] != float64(0) {
		t.Errorf("created with partOf null: %v", nullTop)
	}
}

func TestOrganizationDelete(t *testing.T) {
	w := admNewWorld(t)
	ctx := context.Background()
	sys := domain.SystemActor()
	dept, err := w.env.Service.CreateOrganization(ctx, sys, domain.NewOrganization{Name: "Dept", Type: "dept", PartOf: w.org.ID})
	if err != nil {
		t.Fatal(err)
	}
	team, err := w.env.Service.CreateOrganization(ctx, sys, domain.NewOrganization{Name: "Team", Type: "team", PartOf: dept.ID})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.env.Service.AddMember(ctx, sys, dept.ID, w.viewerID, domain.RoleMember); err != nil {
		t.Fatal(err)
	}
	deptPath := fmt.Sprintf("/api/v1/organizations/%d", dept.ID)
	teamPath := fmt.Sprintf("/api/v1/organizations/%d", team.ID)

	// A sub-organization blocks the delete.
	w.call(t, "DELETE", deptPath, w.admin, nil, http.StatusConflict)
	// Only a manager of the parent (or a superuser) deletes a child: a
	// member of the department may not, while the hospital's manager
	// manages the department through the tree.
	w.call(t, "DELETE", teamPath, w.viewer, nil, http.StatusForbidden)
	w.call(t, "DELETE", teamPath, w.manager, nil, http.StatusNoContent)
	w.call(t, "GET", teamPath, w.admin, nil, http.StatusNotFound)
	w.call(t, "DELETE", teamPath, w.admin, nil, http.StatusNotFound)

	// A patient blocks it.
	p := w.patient(t, "p@example.org", "Doe", "Jo", dept.ID)
	w.call(t, "DELETE", deptPath, w.admin, nil, http.StatusConflict)
	if _, err := w.env.Service.UpdatePatient(ctx, sys, p.ID, domain.PatientPatch{OrganizationIDs: &[]int64{w.org.ID}}); err != nil {
		t.Fatal(err)
	}
	// A study blocks it.
	st := w.study(t, dept.ID, "Study")
	w.call(t, "DELETE", deptPath, w.admin, nil, http.StatusConflict)
	if err := w.env.Service.DeleteStudy(ctx, sys, st.ID); err != nil {
		t.Fatal(err)
	}
	if got := w.call(t, "GET", deptPath, w.admin, nil, http.StatusOK); got["name"] != "Dept" {
		t.Errorf("refused deletes removed the organization: %v", got)
	}

	// Empty: deleted with its memberships, by a manager of the parent.
	w.call(t, "DELETE", deptPath, w.member, nil, http.StatusForbidden)
	w.call(t, "DELETE", deptPath, w.manager, nil, http.StatusNoContent)
	w.call(t, "GET", deptPath, w.admin, nil, http.StatusNotFound)
	if _, err := w.env.Service.Membership(ctx, dept.ID, w.viewerID); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("membership of the deleted organization: %v", err)
	}
	viewer := w.call(t, "GET", fmt.Sprintf("/api/v1/practitioners/%d", w.viewerID), w.admin, nil, http.StatusOK)
	if orgs := admList(t, viewer, "organizations"); len(orgs) != 1 || admID(t, orgs[0]) != w.org.ID {
		t.Errorf("the viewer's organizations after the delete: %v", orgs)
	}
	// Top level: superusers only.
	w.call(t, "DELETE", fmt.Sprintf("/api/v1/organizations/%d", w.org.ID), w.manager, nil, http.StatusForbidden)
}

func TestOrganizationTree(t *testing.T) {
	w := admNewWorld(t)
	ctx := context.Background()
	sys := domain.SystemActor()
	mk := func(name string, parent int64) int64 {
		o, err := w.env.Service.CreateOrganization(ctx, sys, domain.NewOrganization{Name: name, Type: "dept", PartOf: parent})
		if err != nil {
			t.Fatal(err)
		}
		return o.ID
	}
	a := mk("A", w.org.ID)
	b := mk("B", w.org.ID)
	a1 := mk("A1", a)
	other := mk("Elsewhere", 0)
	_ = other

	tree := w.call(t, "GET", fmt.Sprintf("/api/v1/organizations/%d/tree", w.org.ID), w.viewer, nil, http.StatusOK)
	if admID(t, tree) != w.org.ID || tree["name"] != "Hospital" || tree["type"] != "prov" {
		t.Fatalf("root: %v", tree)
	}
	level1 := admList(t, tree, "children")
	if len(level1) != 2 || admID(t, level1[0]) != a || admID(t, level1[1]) != b || level1[0]["partOf"] != float64(w.org.ID) {
		t.Fatalf("level 1: %v", level1)
	}
	level2 := admList(t, level1[0], "children")
	if len(level2) != 1 || admID(t, level2[0]) != a1 || level2[0]["name"] != "A1" {
		t.Fatalf("level 2: %v", level2)
	}
	if leaf := admList(t, level2[0], "children"); len(leaf) != 0 {
		t.Errorf("a leaf has children: %v", leaf)
	}
	if none := admList(t, level1[1], "children"); len(none) != 0 {
		t.Errorf("B has children: %v", none)
	}
	// A subtree.
	sub := w.call(t, "GET", fmt.Sprintf("/api/v1/organizations/%d/tree", a), w.admin, nil, http.StatusOK)
	if kids := admList(t, sub, "children"); admID(t, sub) != a || len(kids) != 1 || admID(t, kids[0]) != a1 {
		t.Errorf("subtree: %v", sub)
	}
	w.call(t, "GET", "/api/v1/organizations/9999/tree", w.admin, nil, http.StatusNotFound)
	if tree := w.call(t, "GET", fmt.Sprintf("/api/v1/organizations/%d/tree", other), w.viewer, nil, http.StatusOK); tree["name"] != "Elsewhere" {
		t.Errorf("the tree of another organization, as the viewer: %v", tree)
	}
}

func TestOrganizationMembers(t *testing.T) {
	w := admNewWorld(t)
	ctx := context.Background()
	users := fmt.Sprintf("/api/v1/organizations/%d/users", w.org.ID)
	newcomer := w.practitioner(t, "new@example.org")
	patient := w.patient(t, "pat@example.org", "Doe", "Jo", w.org.ID)

	// A membership without a role shows role: null.
	if err := w.env.Service.AddMember(ctx, domain.SystemActor(), w.org.ID, newcomer.ID, domain.RoleNone); err != nil {
		t.Fatal(err)
	}
	list := w.call(t, "GET", users, w.viewer, nil, http.StatusOK)
	want := map[int64]any{w.managerID: "manager", w.memberID: "member", w.viewerID: "viewer", newcomer.ID: nil}
	results := admResults(t, list)
	if list["count"] != float64(4) || len(results) != 4 {
		t.Fatalf("members: %v", list)
	}
	for _, m := range results {
		id := admID(t, m)
		role, ok := m["role"]
		if wantRole, known := want[id]; !known || !ok || role != wantRole {
			t.Errorf("member %d has role %v (present %v), want %v", id, role, ok, want[id])
		}
		if m["email"] == nil || m["userType"] != "practitioner" {
			t.Errorf("member %v", m)
		}
	}
	w.call(t, "DELETE", fmt.Sprintf("%s/%d", users, newcomer.ID), w.manager, nil, http.StatusNoContent)

	// Add.
	added := w.call(t, "POST", users, w.manager, map[string]any{"userId": newcomer.ID, "role": "member"}, http.StatusCreated)
	if admID(t, added) != newcomer.ID || added["role"] != "member" || added["email"] != "new@example.org" {
		t.Errorf("added: %v", added)
	}
	w.call(t, "POST", users, w.manager, map[string]any{"userId": newcomer.ID, "role": "viewer"}, http.StatusConflict)
	w.call(t, "POST", users, w.manager, map[string]any{"userId": patient.UserID, "role": "viewer"}, http.StatusBadRequest, "userId")
	w.call(t, "POST", users, w.manager, map[string]any{"userId": 9999, "role": "viewer"}, http.StatusBadRequest, "userId")
	w.call(t, "POST", users, w.manager, map[string]any{"role": "viewer"}, http.StatusBadRequest, "userId")
	other := w.practitioner(t, "other@example.org")
	w.call(t, "POST", users, w.manager, map[string]any{"userId": other.ID, "role": "king"}, http.StatusBadRequest, "role")
	w.call(t, "POST", users, w.member, map[string]any{"userId": other.ID, "role": "viewer"}, http.StatusForbidden)
	w.call(t, "POST", "/api/v1/organizations/9999/users", w.admin, map[string]any{"userId": other.ID}, http.StatusNotFound)
	if m, err := w.env.Service.Membership(ctx, w.org.ID, newcomer.ID); err != nil || m.Role != domain.RoleMember {
		t.Errorf("a refused add changed the membership: %v %v", m, err)
	}

	// Change the role, also to none.
	member := fmt.Sprintf("%s/%d", users, newcomer.ID)
	if changed := w.call(t, "PATCH", member, w.manager, map[string]any{"role": "viewer"}, http.StatusOK); changed["role"] != "viewer" || admID(t, changed) != newcomer.ID {
		t.Errorf("PATCH role: %v", changed)
	}
	if changed := w.call(t, "PATCH", member, w.manager, map[string]any{"role": nil}, http.StatusOK); changed["role"] != nil {
		t.Errorf("PATCH role null: %v", changed)
	}
	w.call(t, "PATCH", member, w.manager, map[string]any{"role": "king"}, http.StatusBadRequest, "role")
	w.call(t, "PATCH", fmt.Sprintf("%s/%d", users, other.ID), w.manager, map[string]any{"role": "viewer"}, http.StatusNotFound)
	w.call(t, "PATCH", member, w.viewer, map[string]any{"role": "manager"}, http.StatusForbidden)
	if m, err := w.env.Service.Membership(ctx, w.org.ID, newcomer.ID); err != nil || m.Role != domain.RoleNone {
		t.Errorf("after refused role changes: %v %v", m, err)
	}

	// Remove.
	w.call(t, "DELETE", member, w.viewer, nil, http.StatusForbidden)
	w.call(t, "DELETE", member, w.manager, nil, http.StatusNoContent)
	w.call(t, "DELETE", member, w.manager, nil, http.StatusNotFound)
	if list := w.call(t, "GET", users, w.admin, nil, http.StatusOK); list["count"] != float64(3) {
		t.Errorf("after the removal: %v", list)
	}
	// Patients do not read members.
	w.call(t, "GET", users, w.env.Token(t, patient.UserID), nil, http.StatusForbidden)
}

func TestOrganizationStudies(t *testing.T) {
	w := admNewWorld(t)
	ctx := context.Background()
	other, err := w.env.Service.CreateOrganization(ctx, domain.SystemActor(), domain.NewOrganization{Name: "Other", Type: "prov"})
	if err != nil {
		t.Fatal(err)
	}
	s1 := w.study(t, w.org.ID, "One")
	s2 := w.study(t, w.org.ID, "Two")
	w.study(t, other.ID, "Elsewhere")

	list := w.call(t, "GET", fmt.Sprintf("/api/v1/organizations/%d/studies", w.org.ID), w.viewer, nil, http.StatusOK)
	results := admResults(t, list)
	if list["count"] != float64(2) || len(results) != 2 || admID(t, results[0]) != s1.ID || admID(t, results[1]) != s2.ID {
		t.Fatalf("studies: %v", list)
	}
	if org := admObj(t, results[0], "organization"); admID(t, org) != w.org.ID || org["name"] != "Hospital" || results[0]["name"] != "One" {
		t.Errorf("study: %v", results[0])
	}
	w.call(t, "GET", fmt.Sprintf("/api/v1/organizations/%d/studies", other.ID), w.viewer, nil, http.StatusForbidden)
	w.call(t, "GET", "/api/v1/organizations/9999/studies", w.admin, nil, http.StatusNotFound)
}

// partOf=0 lists the top level; a manager of a parent manages its
// sub-organizations through the tree.
func TestAdminTopLevelListAndInheritedRoles(t *testing.T) {
	w := admNewWorld(t)
	sub := w.call(t, "POST", "/api/v1/organizations", w.manager, map[string]any{"name": "Ward", "type": "dept", "partOf": w.org.ID}, http.StatusCreated)
	top := w.call(t, "GET", "/api/v1/organizations?partOf=0", w.admin, nil, http.StatusOK)
	if ids := admIDs(t, top); len(ids) != 1 || ids[0] != w.org.ID {
		t.Errorf("top level: %v", ids)
	}
	w.call(t, "GET", "/api/v1/organizations?partOf=-1", w.admin, nil, http.StatusBadRequest, "partOf")
	path := fmt.Sprintf("/api/v1/organizations/%d", admID(t, sub))
	w.call(t, "GET", path, w.viewer, nil, http.StatusOK)
	w.call(t, "PATCH", path, w.manager, map[string]any{"name": "Ward 7"}, http.StatusOK)
	w.call(t, "PATCH", path, w.member, map[string]any{"name": "Ward 8"}, http.StatusForbidden)
}
