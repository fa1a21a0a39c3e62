package handlers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/repo/repotest"
)

// Helpers of the admin API tests (admin_*_test.go). Their names start with
// adm so that they stay apart from other test files of the package.

// admCall sends a request and checks its status. An error answer must be
// exactly {"detail": "<non-empty>"}, and, when fields are given, the detail
// must name each of them. It returns the decoded body.
func admCall(t *testing.T, env *handlerstest.Env, method, path, token string, body any, status int, fields ...string) map[string]any {
	t.Helper()
	resp, out := env.Send(t, method, path, token, body)
	if resp.StatusCode != status {
		t.Fatalf("%s %s: %d %v, want %d", method, path, resp.StatusCode, out, status)
	}
	if status >= 400 {
		admCheckDetail(t, method+" "+path, out, fields...)
	}
	return out
}

// admCheckDetail checks an error body: {"detail": ...} and nothing else,
// naming every field.
func admCheckDetail(t *testing.T, what string, out map[string]any, fields ...string) {
	t.Helper()
	detail, ok := out["detail"].(string)
	if !ok || detail == "" || len(out) != 1 {
		t.Fatalf("%s: error body %v, want {\"detail\": ...}", what, out)
	}
	for _, f := range fields {
		if !strings.Contains(detail, f) {
			t.Errorf("%s: detail %q does not name %q", what, detail, f)
		}
	}
}

// admID reads the numeric "id" (or another key) of a JSON object.
func admID(t *testing.T, obj map[string]any, key ...string) int64 {
	t.Helper()
	k := "id"
	if len(key) > 0 {
		k = key[0]
	}
	v, ok := obj[k].(float64)
	if !ok {
		t.Fatalf("%s of %v is not a number", k, obj)
	}
	return int64(v)
}

// admResults returns the results of a list envelope.
func admResults(t *testing.T, list map[string]any) []map[string]any {
	t.Helper()
	raw, ok := list["results"].([]any)
	if !ok {
		t.Fatalf("no results array in %v", list)
	}
	out := make([]map[string]any, len(raw))
	for i, r := range raw {
		out[i] = r.(map[string]any)
	}
	return out
}

// admIDs returns the ids of the results of a list envelope, in order.
func admIDs(t *testing.T, list map[string]any) []int64 {
	t.Helper()
	var ids []int64
	for _, r := range admResults(t, list) {
		ids = append(ids, admID(t, r))
	}
	return ids
}

// admObj reads a nested object.
func admObj(t *testing.T, obj map[string]any, key string) map[string]any {
	t.Helper()
	v, ok := obj[key].(map[string]any)
	if !ok {
		t.Fatalf("%s of %v is not an object", key, obj)
	}
	return v
}

// admList reads a nested array of objects.
func admList(t *testing.T, obj map[string]any, key string) []map[string]any {
	t.Helper()
	raw, ok := obj[key].([]any)
	if !ok {
		t.Fatalf("%s of %v is not an array", key, obj)
	}
	out := make([]map[string]any, len(raw))
	for i, r := range raw {
		out[i] = r.(map[string]any)
	}
	return out
}

// admSnapshot is the database's content without the id counters, which a
// refused create may advance.
func admSnapshot(t *testing.T, env *handlerstest.Env) map[string][]string {
	t.Helper()
	s := repotest.Snapshot(t, env.DB)
	delete(s, "counters")
	return s
}

// admSameSnapshot fails the test if the database changed.
func admSameSnapshot(t *testing.T, what string, before, after map[string][]string) {
	t.Helper()
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("%s changed the database:\nbefore %v\nafter  %v", what, before, after)
	}
}

// admWorld is a small organization tree with people in it, made through
// the service: a superuser, an organization with a manager, a member and a
// viewer, and what tests add.
type admWorld struct {
	env                            *handlerstest.Env
	admin, manager, member, viewer string // tokens
	managerID, memberID, viewerID  int64
	org                            *domain.Organization
}

// behindLoopbackProxy trusts the tests' own address as a reverse proxy, so
// that they can check the URLs built from X-Forwarded-Proto and -Host.
var behindLoopbackProxy = handlerstest.Options{TrustedProxies: "127.0.0.1"}

// admNewWorld marks the test parallel: each test has its own database, and
// the admin tests overlap their waits on it.
func admNewWorld(t *testing.T) *admWorld {
	t.Helper()
	return admNewWorldWith(t, behindLoopbackProxy)
}

// admNewWorldWith is admNewWorld with settings.
func admNewWorldWith(t *testing.T, o handlerstest.Options) *admWorld {
	t.Helper()
	t.Parallel()
	env := handlerstest.StartWith(t, o)
	ctx := context.Background()
	sys := domain.SystemActor()
	w := &admWorld{env: env}
	w.admin = env.Token(t, admPractitioner(t, env, "admin@example.org", true).ID)
	org, err := env.Service.CreateOrganization(ctx, sys, domain.NewOrganization{Name: "Hospital", Type: "prov"})
	if err != nil {
		t.Fatal(err)
	}
	w.org = org
	for _, x := range []struct {
		email string
		role  domain.Role
		id    *int64
		token *string
	}{
		{"manager@example.org", domain.RoleManager, &w.managerID, &w.manager},
		{"member@example.org", domain.RoleMember, &w.memberID, &w.member},
		{"viewer@example.org", domain.RoleViewer, &w.viewerID, &w.viewer},
	} {
		u := admPractitioner(t, env, x.email, false)
		if err := env.Service.AddMember(ctx, sys, org.ID, u.ID, x.role); err != nil {
			t.Fatal(err)
		}
		*x.id, *x.token = u.ID, env.Token(t, u.ID)
	}
	return w
}

// admPractitioner creates a practitioner user without a password (hashing
// one costs more than most requests).
func admPractitioner(t *testing.T, env *handlerstest.Env, email string, superuser bool) *domain.User {
	t.Helper()
	u, err := env.Service.CreateUser(context.Background(), domain.NewUser{Email: email, FirstName: "Pat", LastName: "Practitioner",
		Type: domain.UserPractitioner, IsSuperuser: superuser})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// practitioner creates a practitioner user without a password.
func (w *admWorld) practitioner(t *testing.T, email string) *domain.User {
	t.Helper()
	return admPractitioner(t, w.env, email, false)
}

// patient creates a patient in the organizations through the service.
func (w *admWorld) patient(t *testing.T, email, family, given string, orgs ...int64) *domain.Patient {
	t.Helper()
	p, err := w.env.Service.CreatePatient(context.Background(), domain.SystemActor(), domain.NewPatient{
		Email: email, FamilyName: family, GivenNames: []string{given}, OrganizationIDs: orgs})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// study creates a study of the organization through the service.
func (w *admWorld) study(t *testing.T, orgID int64, name string) *domain.Study {
	t.Helper()
	st, err := w.env.Service.CreateStudy(context.Background(), domain.SystemActor(), domain.NewStudy{OrganizationID: orgID, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// scopeCode creates an Open mHealth scope code.
func (w *admWorld) scopeCode(t *testing.T, code, text string) *domain.ScopeCode {
	t.Helper()
	c, err := w.env.Service.CreateScopeCode(context.Background(), domain.SystemActor(), domain.SystemOpenMHealth, code, text)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// call is admCall on the world's server.
func (w *admWorld) call(t *testing.T, method, path, token string, body any, status int, fields ...string) map[string]any {
	t.Helper()
	return admCall(t, w.env, method, path, token, body, status, fields...)
}

// wantStatus checks only the status of a request (and the error shape).
func (w *admWorld) wantStatus(t *testing.T, method, path, token string, body any, status int) {
	t.Helper()
	resp, out := w.env.Send(t, method, path, token, body)
	if resp.StatusCode != status {
		t.Errorf("%s %s: %d %v, want %d", method, path, resp.StatusCode, out, status)
		return
	}
	if status >= 400 {
		admCheckDetail(t, method+" "+path, out)
	}
}
