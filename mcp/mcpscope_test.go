package mcp_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/oauth2"

	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/mcp"
	"exchange/oauth"
)

// hubRedirect is the redirect URI of a JupyterHub registered at the
// exchange.
const hubRedirect = "https://hub.example.test/hub/oauth_callback"

// hubToken runs the authorization code flow of another client of the
// exchange (a JupyterHub) for a user and scopes; when the client asks
// for consent, it checks that the consent page says what want says, and
// allows.
func hubToken(t *testing.T, s *stack, client *domain.OAuthClient, secret, email, scope, want string) *oauth2.Token {
	t.Helper()
	cfg := &oauth2.Config{ClientID: client.ID, ClientSecret: secret, RedirectURL: hubRedirect, Scopes: strings.Fields(scope),
		Endpoint: oauth2.Endpoint{AuthURL: s.env.URL + "/o/authorize/", TokenURL: s.env.URL + "/o/token/", AuthStyle: oauth2.AuthStyleInHeader}}
	verifier := oauth2.GenerateVerifier()
	b := handlerstest.NewBrowser(t, func(to *url.URL) bool { return to.Host == "hub.example.test" })
	_, page := b.Do("GET", cfg.AuthCodeURL("hub-state-0123", oauth2.S256ChallengeOption(verifier)), nil)
	resp, page := b.Login(page, email, handlerstest.Password)
	if want != "" {
		if !strings.Contains(page, want) {
			t.Fatalf("the consent page does not say %q:\n%s", want, page)
		}
		resp, _ = b.Submit(page, url.Values{"decision": {"allow"}})
	}
	loc, _ := url.Parse(resp.Header.Get("Location"))
	code := loc.Query().Get("code")
	if code == "" {
		t.Fatalf("no code: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	tok, err := cfg.Exchange(context.Background(), code, oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestMCPScopeOfAnotherClient: a client the exchange trusts (a JupyterHub
// registered for the mcp scope) obtains a token with the scope mcp, the
// consent page saying what it lets do in plain words; a gateway that
// accepts only its own tokens (MCP_REQUIRE_AUDIENCE) accepts it, and every
// tool works with it, as the user; it cannot write, at the gateway or at
// the exchange; a token of the same client that could write, or without
// mcp, is refused.
func TestMCPScopeOfAnotherClient(t *testing.T) {
	s := newStack(t)
	w := s.seed(t)
	g := s.startGateway(t, func(c *mcp.Config) { c.RequireAudience = true })
	hub, secret := s.env.Client(t, oauth.ClientRegistration{Name: "JupyterHub", Type: domain.ClientConfidential, RedirectURIs: []string{hubRedirect}})

	tok := hubToken(t, s, hub, secret, w.managerA, "openid mcp", "Let AI assistants read, through the MCP gateway")
	if tok.Extra("scope") != "openid mcp" {
		t.Fatalf("granted %v", tok.Extra("scope"))
	}
	checkEveryTool(t, w, g.mcpClient(t, tok.AccessToken))

	// The same token, at the exchange: it reads what the manager may
	// see, and writes nothing though the manager may.
	if resp, out := handlerstest.SendTo(t, "GET", s.env.URL+"/api/v1/studies", tok.AccessToken, nil, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("reading with the mcp token: %d %v", resp.StatusCode, out)
	}
	if resp, out := handlerstest.SendTo(t, "POST", s.env.URL+"/api/v1/studies", tok.AccessToken,
		map[string]any{"organizationId": w.orgA, "name": "Written with mcp"}, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("writing with the mcp token: %d %v", resp.StatusCode, out)
	}

	// Tokens of the hub that are not mcp grants within the gateway's
	// read-only limits are refused by the strict gateway.
	for _, scope := range []string{"openid", "openid mcp user/*.cruds", "openid mcp exchange/admin.write"} {
		other := hubToken(t, s, hub, secret, w.managerA, scope, "Authorize JupyterHub")
		if status, _, body := mcpStatus(t, g, other.AccessToken); status != http.StatusUnauthorized {
			t.Errorf("%q: %d %v", scope, status, body)
		}
	}

	// Discovery names the scope.
	_, disc := s.env.GetJSON(t, "/o/.well-known/openid-configuration", "")
	if scopes, _ := disc["scopes_supported"].([]any); !containsAny(scopes, "mcp") {
		t.Errorf("scopes_supported %v", disc["scopes_supported"])
	}
}

func containsAny(list []any, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
