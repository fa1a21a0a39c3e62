package handlers_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"exchange/domain"
	"exchange/handlers"
	"exchange/handlers/handlerstest"
	"exchange/repo/repotest"
)

// fileProviders is an IDENTITY_PROVIDERS_FILE with one provider.
const fileProviders = `[{"id": "campus", "kind": "saml", "name": "Campus", "metadataUrl": "https://idp.campus.example/metadata",
  "claims": {"sub": "NameID"}, "allowedEmailDomains": ["@Campus.example"], "firstSignIn": "create"}]`

// TestIdentityProvidersAdmin: superusers configure identity providers
// through the admin API beside those of the file, which stay read-only;
// client secrets are written, kept sealed, never read back; invitations
// are listed and cancelled; nobody else may see any of it.
func TestIdentityProvidersAdmin(t *testing.T) {
	fromFile, err := handlers.DecodeIdentityProviders(strings.NewReader(fileProviders))
	if err != nil {
		t.Fatal(err)
	}
	o := behindLoopbackProxy
	o.IdentityProviders = fromFile
	w := admNewWorldWith(t, o)
	ctx := context.Background()
	const secret = "the-client-secret-at-the-university"

	created := w.call(t, "POST", "/api/v1/identity_providers", w.admin, map[string]any{
		"id": "uni", "kind": "oidc", "name": "University", "issuer": "https://login.uni.example",
		"clientId": "exchange", "clientSecret": secret, "claims": map[string]any{"email": "mail"}}, http.StatusCreated)
	if created["clientSecret"] != nil || created["clientSecretSet"] != true || created["firstSignIn"] != "invited" ||
		created["linkVerifiedEmail"] != false || created["source"] != "api" ||
		!strings.HasSuffix(created["redirectUri"].(string), "/o/login/uni/callback") || created["scopes"] == nil {
		t.Fatalf("created %v", created)
	}
	// The database holds the secret sealed.
	stored := repotest.Snapshot(t, w.env.DB)["identity_providers"]
	if len(stored) != 1 || strings.Contains(stored[0], secret) || !strings.Contains(stored[0], "sealed-v1:") {
		t.Errorf("stored %v", stored)
	}
	if p, err := w.env.Service.IdentityProviderByID(ctx, "uni"); err != nil || p.ClientSecret != secret {
		t.Errorf("the sign-in's provider %+v %v", p, err)
	}

	list := w.call(t, "GET", "/api/v1/identity_providers", w.admin, nil, http.StatusOK)
	results := admResults(t, list)
	if len(results) != 2 || results[0]["id"] != "campus" || results[0]["source"] != "file" ||
		!strings.HasSuffix(results[0]["serviceProviderMetadataUrl"].(string), "/o/saml/campus/metadata") ||
		results[0]["allowedEmailDomains"].([]any)[0] != "campus.example" || results[1]["id"] != "uni" {
		t.Fatalf("list %v", list)
	}

	// A merge patch changes what it names; the secret stays.
	resp, _ := w.env.Send(t, "GET", "/api/v1/identity_providers/uni", w.admin, nil)
	tag := resp.Header.Get("ETag")
	patched := admCall(t, w.env, "PATCH", "/api/v1/identity_providers/uni", w.admin, map[string]any{"name": "Uni", "firstSignIn": "create"}, http.StatusOK)
	if patched["name"] != "Uni" || patched["firstSignIn"] != "create" || patched["clientSecretSet"] != true {
		t.Errorf("patched %v", patched)
	}
	if p, _ := w.env.Service.IdentityProviderByID(ctx, "uni"); p.ClientSecret != secret || p.Claims.Email != "mail" {
		t.Errorf("after the patch %+v", p)
	}
	if resp, out := handlerstest.SendTo(t, "PATCH", w.env.URL+"/api/v1/identity_providers/uni", w.admin, map[string]any{"name": "Stale"},
		map[string]string{"If-Match": tag}); resp.StatusCode != http.StatusPreconditionFailed {
		t.Errorf("a patch of a stale version: %d %v", resp.StatusCode, out)
	}

	for _, c := range []struct {
		name   string
		method string
		path   string
		token  string
		body   any
		status int
	}{
		{"a member lists", "GET", "/api/v1/identity_providers", w.member, nil, http.StatusForbidden},
		{"a manager creates", "POST", "/api/v1/identity_providers", w.manager, map[string]any{"id": "x", "kind": "oidc", "name": "X", "issuer": "https://x.example", "clientId": "c"}, http.StatusForbidden},
		{"a member reads", "GET", "/api/v1/identity_providers/uni", w.member, nil, http.StatusForbidden},
		{"an http issuer", "POST", "/api/v1/identity_providers", w.admin, map[string]any{"id": "x", "kind": "oidc", "name": "X", "issuer": "http://x.example", "clientId": "c"}, http.StatusBadRequest},
		{"no openid scope", "POST", "/api/v1/identity_providers", w.admin, map[string]any{"id": "x", "kind": "oidc", "name": "X", "issuer": "https://x.example", "clientId": "c", "scopes": []string{"email"}}, http.StatusBadRequest},
		{"an unknown kind", "POST", "/api/v1/identity_providers", w.admin, map[string]any{"id": "x", "kind": "ldap", "name": "X"}, http.StatusBadRequest},
		{"a bad id", "POST", "/api/v1/identity_providers", w.admin, map[string]any{"id": "../x", "kind": "oidc", "name": "X", "issuer": "https://x.example", "clientId": "c"}, http.StatusBadRequest},
		{"SAML without metadata", "POST", "/api/v1/identity_providers", w.admin, map[string]any{"id": "x", "kind": "saml", "name": "X"}, http.StatusBadRequest},
		{"an unknown field", "POST", "/api/v1/identity_providers", w.admin, map[string]any{"id": "x", "kind": "saml", "name": "X", "metadataUrl": "https://x.example/m", "admin": true}, http.StatusBadRequest},
		{"a taken id", "POST", "/api/v1/identity_providers", w.admin, map[string]any{"id": "uni", "kind": "oidc", "name": "X", "issuer": "https://x.example", "clientId": "c"}, http.StatusConflict},
		{"the file's id", "POST", "/api/v1/identity_providers", w.admin, map[string]any{"id": "campus", "kind": "oidc", "name": "X", "issuer": "https://x.example", "clientId": "c"}, http.StatusConflict},
		{"the file's provider changed", "PATCH", "/api/v1/identity_providers/campus", w.admin, map[string]any{"name": "Mine"}, http.StatusForbidden},
		{"the file's provider removed", "DELETE", "/api/v1/identity_providers/campus", w.admin, nil, http.StatusForbidden},
		{"an id changed", "PATCH", "/api/v1/identity_providers/uni", w.admin, map[string]any{"id": "other"}, http.StatusBadRequest},
		{"a patch that is no object", "PATCH", "/api/v1/identity_providers/uni", w.admin, []string{"x"}, http.StatusBadRequest},
		{"an unknown provider", "GET", "/api/v1/identity_providers/nope", w.admin, nil, http.StatusNotFound},
		{"an invitation by a manager", "POST", "/api/v1/identity_providers/uni/invitations", w.manager, map[string]any{"email": "x@uni.example"}, http.StatusForbidden},
		{"an invitation of no email", "POST", "/api/v1/identity_providers/uni/invitations", w.admin, map[string]any{"email": "nope"}, http.StatusBadRequest},
		{"an invitation to no provider", "POST", "/api/v1/identity_providers/nope/invitations", w.admin, map[string]any{"email": "x@uni.example"}, http.StatusNotFound},
	} {
		t.Run(c.name, func(t *testing.T) { w.wantStatus(t, c.method, c.path, c.token, c.body, c.status) })
	}

	// Invitations.
	w.call(t, "POST", "/api/v1/identity_providers/uni/invitations", w.admin, map[string]any{"email": "New@Uni.example"}, http.StatusCreated)
	invs := w.call(t, "GET", "/api/v1/identity_providers/uni/invitations", w.admin, nil, http.StatusOK)
	if r := admResults(t, invs); len(r) != 1 || r[0]["email"] != "new@uni.example" {
		t.Fatalf("invitations %v", invs)
	}
	w.wantStatus(t, "DELETE", "/api/v1/identity_providers/uni/invitations/new@uni.example", w.admin, nil, http.StatusNoContent)
	w.wantStatus(t, "DELETE", "/api/v1/identity_providers/uni/invitations/new@uni.example", w.admin, nil, http.StatusNotFound)

	w.wantStatus(t, "DELETE", "/api/v1/identity_providers/uni", w.admin, nil, http.StatusNoContent)
	if _, err := w.env.Service.IdentityProviderByID(ctx, "uni"); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("removed provider: %v", err)
	}
}

// TestPractitionerIdentifier: a superuser sets a practitioner's EHR
// identifier (what a token exchange finds them by); nobody else may, not
// even for themselves.
func TestPractitionerIdentifier(t *testing.T) {
	w := admNewWorld(t)
	created := w.call(t, "POST", "/api/v1/practitioners", w.admin, map[string]any{"email": "ehr@example.org", "identifier": "prac-42"}, http.StatusCreated)
	if created["identifier"] != "prac-42" {
		t.Fatalf("created %v", created)
	}
	w.wantStatus(t, "POST", "/api/v1/practitioners", w.manager, map[string]any{"email": "x@example.org", "organizationId": w.org.ID, "identifier": "prac-42"}, http.StatusBadRequest)
	w.wantStatus(t, "PATCH", "/api/v1/practitioners/"+strconv.FormatInt(w.memberID, 10), w.member, map[string]any{"identifier": "prac-42"}, http.StatusBadRequest)
	patched := w.call(t, "PATCH", "/api/v1/practitioners/"+strconv.FormatInt(w.memberID, 10), w.admin, map[string]any{"identifier": "prac-43"}, http.StatusOK)
	if patched["identifier"] != "prac-43" {
		t.Fatalf("patched %v", patched)
	}
	found, _ := w.env.DB.PractitionersByIdentifier(context.Background(), "prac-43", 2)
	if len(found) != 1 || found[0].ID != w.memberID {
		t.Errorf("found %v", found)
	}
}
