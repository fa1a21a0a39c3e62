package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"exchange/domain"
	"exchange/handlers/handlerstest"
)

func TestOAuthClientsAPI(t *testing.T) {
	env := handlerstest.Start(t)
	admin := env.Token(t, env.Practitioner(t, "admin@example.org", true).ID)
	staffUser, err := env.Service.CreateUser(context.Background(), domain.NewUser{Email: "staff@example.org", Type: domain.UserPractitioner, IsStaff: true})
	if err != nil {
		t.Fatal(err)
	}
	staff := env.Token(t, staffUser.ID)
	patient := env.Token(t, env.Patient(t, "pat@example.org").UserID)
	body := map[string]any{"name": "Dashboard", "clientType": "confidential", "redirectUris": []string{"https://dash.example.org/cb"}, "algorithm": "RS256"}

	resp, created := env.Send(t, "POST", "/api/v1/oauth_clients", admin, body)
	if resp.StatusCode != http.StatusCreated || created["clientId"] == "" || created["clientSecret"] == nil || created["authorizationGrantType"] != "authorization-code" {
		t.Fatalf("create: %d %v", resp.StatusCode, created)
	}
	trusted := map[string]any{"name": "Trusted", "clientType": "public", "redirectUris": []string{"http://127.0.0.1/cb"}, "skipAuthorization": true}
	for _, tc := range []struct {
		name   string
		token  string
		body   any
		status int
		detail string
	}{
		{"patient", patient, body, http.StatusForbidden, ""},
		{"staff, trusted", staff, trusted, http.StatusForbidden, ""},
		{"staff", staff, body, http.StatusCreated, ""},
		{"no token", "", body, http.StatusUnauthorized, ""},
		{"unknown field", admin, map[string]any{"name": "x", "colour": "red"}, http.StatusBadRequest, "colour: is not a known field"},
		{"wrong type", admin, map[string]any{"name": 7}, http.StatusBadRequest, "name: must be a string, not number"},
		{"not JSON", admin, "{name:", http.StatusBadRequest, ""},
		{"empty", admin, "", http.StatusBadRequest, ""},
		{"two objects", admin, `{"name":"a"} {"name":"b"}`, http.StatusBadRequest, ""},
		{"no redirect", admin, map[string]any{"name": "x", "clientType": "public"}, http.StatusBadRequest, ""},
		{"implicit grant", admin, map[string]any{"name": "x", "clientType": "public", "authorizationGrantType": "implicit"}, http.StatusBadRequest, ""},
	} {
		resp, out := env.Send(t, "POST", "/api/v1/oauth_clients", tc.token, tc.body)
		if resp.StatusCode != tc.status || (tc.status >= 400 && out["detail"] == nil) || (tc.detail != "" && out["detail"] != tc.detail) {
			t.Errorf("%s: %d %v, want %d %q", tc.name, resp.StatusCode, out, tc.status, tc.detail)
		}
	}
	resp, list := env.GetJSON(t, "/api/v1/oauth_clients", admin)
	results, _ := list["results"].([]any)
	// The two registered here, and the built-in client of the tokens.
	if resp.StatusCode != http.StatusOK || len(results) != 3 {
		t.Fatalf("superuser list: %d %v", resp.StatusCode, list)
	}
	for _, r := range results {
		if _, leaked := r.(map[string]any)["clientSecret"]; leaked {
			t.Error("a listed client shows its secret")
		}
	}
	if _, list := env.GetJSON(t, "/api/v1/oauth_clients", staff); list["count"] != float64(1) {
		t.Errorf("staff sees their own clients only: %v", list)
	}
	if resp, _ := env.GetJSON(t, "/api/v1/oauth_clients", patient); resp.StatusCode != http.StatusForbidden {
		t.Errorf("patient list: %d", resp.StatusCode)
	}
}

// TestBackendClientsAPI: a backend client registered through the admin
// API with its JWKS, acting for its registrant; its keys and identity are
// listed, it has no secret; it may not act for someone else.
func TestBackendClientsAPI(t *testing.T) {
	env := handlerstest.Start(t)
	staffUser, err := env.Service.CreateUser(context.Background(), domain.NewUser{Email: "staff@example.org", Type: domain.UserPractitioner, IsStaff: true})
	if err != nil {
		t.Fatal(err)
	}
	staff := env.Token(t, staffUser.ID)
	other := env.Practitioner(t, "other@example.org", false)
	key := handlerstest.NewBackendKey(t, "RS384")
	body := map[string]any{"name": "Pipeline", "clientType": "backend", "authorizationGrantType": "client-credentials",
		"jwks": json.RawMessage(key.JWKS(t)), "actsForUserId": staffUser.ID}
	resp, created := env.Send(t, "POST", "/api/v1/oauth_clients", staff, body)
	if resp.StatusCode != http.StatusCreated || created["clientSecret"] != nil || created["authorizationGrantType"] != "client-credentials" ||
		created["tokenEndpointAuthMethod"] != "private_key_jwt" || created["actsForUserId"] != float64(staffUser.ID) || created["jwks"] == nil {
		t.Fatalf("create: %d %v", resp.StatusCode, created)
	}
	env.BackendToken(t, key, created["clientId"].(string), "system/*.rs")
	body["actsForUserId"] = other.ID
	if resp, out := env.Send(t, "POST", "/api/v1/oauth_clients", staff, body); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a backend client acting for a colleague: %d %v", resp.StatusCode, out)
	}
}
