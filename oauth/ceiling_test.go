package oauth_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/oauth"
)

// authorizeError sends an authorization request for scope in a browser
// without a session and returns the error redirected to the client, or ""
// when the login page shows.
func authorizeError(t *testing.T, env *handlerstest.Env, clientID, scope string) string {
	t.Helper()
	q := url.Values{"client_id": {clientID}, "response_type": {"code"}, "redirect_uri": {redirectURI}, "scope": {scope}, "state": {state},
		"code_challenge": {oauth2.S256ChallengeFromVerifier(oauth2.GenerateVerifier())}, "code_challenge_method": {"S256"}}
	resp, _ := newBrowser(t, env).Do("GET", env.URL+"/o/authorize/?"+q.Encode(), nil)
	if resp.StatusCode == http.StatusOK {
		return ""
	}
	return redirectParams(t, resp).Get("error")
}

// TestTrustedClientsObtainOnlyTheirRegisteredScopes: a client that skips
// the consent page (as the MCP gateway's) obtains no scope beyond its
// registration, and a request whose scopes name no access, which would act
// with the user's full access, is no way around it; nor is unticking every
// scope on the consent page of a client registered so.
func TestTrustedClientsObtainOnlyTheirRegisteredScopes(t *testing.T) {
	env := handlerstest.Start(t)
	env.Practitioner(t, "doc@example.org", true)
	registered := []string{"openid", "offline_access", "user/*.rs"}
	trusted, _ := env.Client(t, oauth.ClientRegistration{Name: "Trusted reader", Type: domain.ClientPublic, RedirectURIs: []string{redirectURI},
		SkipAuthorization: true, Scopes: registered})
	for _, scope := range []string{"openid user/*.cruds", "openid exchange/admin.write", "openid", "openid offline_access", "openid patient/*.rs"} {
		if got := authorizeError(t, env, trusted.ID, scope); got != "invalid_scope" {
			t.Errorf("trusted client asking %q: error %q, want invalid_scope", scope, got)
		}
	}
	cfg := oauthConfig(env, trusted.ID, "")
	cfg.Scopes = []string{"openid", "user/Patient.rs"}
	tok := codeFlow(t, env, cfg, "doc@example.org", nil)
	if got := tok.Extra("scope"); got != "openid user/Patient.rs" {
		t.Errorf("trusted client asking within its registration: granted %v", got)
	}
	if status, _ := fhirStatus(t, env, tok.AccessToken, "Patient"); status != http.StatusOK {
		t.Errorf("searching patients: %d", status)
	}
	if status, _ := fhirStatus(t, env, tok.AccessToken, "Observation"); status != http.StatusForbidden {
		t.Errorf("searching observations, which its scopes do not name: %d", status)
	}
	if resp, _ := env.Send(t, "POST", "/api/v1/studies", tok.AccessToken, map[string]any{"name": "x"}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("writing through the admin API: %d", resp.StatusCode)
	}

	// The same registration behind the consent page: unticking every
	// resource scope allows nothing, rather than everything.
	asking, _ := env.Client(t, oauth.ClientRegistration{Name: "Reader", Type: domain.ClientPublic, RedirectURIs: []string{redirectURI}, Scopes: registered})
	if got := authorizeError(t, env, asking.ID, "openid"); got != "invalid_scope" {
		t.Errorf("asking openid alone: error %q", got)
	}
	cfg = oauthConfig(env, asking.ID, "")
	cfg.Scopes = []string{"openid", "user/*.rs"}
	b := newBrowser(t, env)
	_, page := b.Do("GET", cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(oauth2.GenerateVerifier())), nil)
	_, page = b.Login(page, "doc@example.org", handlerstest.Password)
	resp, _ := b.Submit(page, url.Values{"decision": {"allow"}, "scope": {"openid"}})
	if q := redirectParams(t, resp); q.Get("error") != "access_denied" || q.Has("code") {
		t.Errorf("consent with every resource scope unticked: %v", q)
	}
}

// TestNarrowedRegistrationEndsWiderTokens: once a client's registration
// is narrowed (as seed repairs the gateway's), the tokens granted beyond
// it stop working at once, and their refresh tokens are refused; those
// within it keep working.
func TestNarrowedRegistrationEndsWiderTokens(t *testing.T) {
	env := handlerstest.Start(t)
	env.Practitioner(t, "doc@example.org", true)
	reg := oauth.ClientRegistration{ID: "narrowed-app", Name: "App", Type: domain.ClientPublic, RedirectURIs: []string{redirectURI}, SkipAuthorization: true}
	if _, err := env.OAuth.SaveClient(context.Background(), reg); err != nil {
		t.Fatal(err)
	}
	token := func(scopes ...string) *oauth2.Token {
		cfg := oauthConfig(env, reg.ID, "")
		cfg.Scopes = scopes
		return codeFlow(t, env, cfg, "doc@example.org", nil)
	}
	write := token("openid", "offline_access", "user/*.cruds", "exchange/admin.write")
	full := token("openid", "offline_access")
	read := token("openid", "offline_access", "user/*.rs")
	for name, tok := range map[string]*oauth2.Token{"write": write, "full": full, "read": read} {
		if status, _ := fhirStatus(t, env, tok.AccessToken, "Patient"); status != http.StatusOK {
			t.Fatalf("%s token before the registration narrows: %d", name, status)
		}
	}
	reg.Scopes = []string{"openid", "offline_access", "user/*.rs"}
	if _, err := env.OAuth.SaveClient(context.Background(), reg); err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]*oauth2.Token{"write": write, "full": full} {
		if status, _ := fhirStatus(t, env, tok.AccessToken, "Patient"); status != http.StatusUnauthorized {
			t.Errorf("%s token after the registration narrowed: %d, want 401", name, status)
		}
		resp, out := postForm(t, env, "/o/token/", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken}, "client_id": {reg.ID}}, "", "")
		if resp.StatusCode != http.StatusBadRequest || out["access_token"] != nil {
			t.Errorf("refreshing the %s token: %d %v", name, resp.StatusCode, out)
		}
	}
	if status, _ := fhirStatus(t, env, read.AccessToken, "Patient"); status != http.StatusOK {
		t.Errorf("the read token, within the narrowed registration: %d", status)
	}
}

// TestInvitationOfAClientRegisteredForLess: a patient's invitation grants
// the identity scopes, which act with the patient's full access; for an
// app registered for less, it grants the access the app is registered
// for, so its token is within the registration and works.
func TestInvitationOfAClientRegisteredForLess(t *testing.T) {
	env := handlerstest.Start(t)
	ctx := context.Background()
	patient := env.Invitee(t, "pat@example.org") // without a login: one an invitation may be for
	client, _ := env.Client(t, oauth.ClientRegistration{Name: "Patient app", Type: domain.ClientPublic, RedirectURIs: []string{redirectURI},
		Scopes: []string{"openid", "offline_access", "patient/Observation.rs", "patient/Patient.r"}})
	code, err := env.OAuth.IssuePatientCode(ctx, patient.UserID, client.ID)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := oauthConfig(env, client.ID, "").Exchange(ctx, code.Code, oauth2.VerifierOption(handlerstest.PatientVerifier))
	if err != nil {
		t.Fatalf("redeeming the invitation: %v", err)
	}
	if got := tok.Extra("scope"); got != "openid offline_access patient/Observation.rs patient/Patient.r" {
		t.Errorf("the invitation's grant: %v", got)
	}
	if status, _ := fhirStatus(t, env, tok.AccessToken, fmt.Sprintf("Patient/%d", patient.ID)); status != http.StatusOK {
		t.Errorf("reading her own record: %d", status)
	}
	if status, _ := fhirStatus(t, env, tok.AccessToken, "Condition"); status != http.StatusForbidden {
		t.Errorf("searching what the registration does not name: %d", status)
	}
}

// TestUntickingNeverWidensAConsent: on the consent page of a client with
// a default registration (every scope), unticking every resource and
// admin scope asked for allows nothing; it does not leave the identity
// scopes, whose token would act with the user's full access, writes
// included. A request that named no access to begin with is what the
// page showed, and is granted as before.
func TestUntickingNeverWidensAConsent(t *testing.T) {
	env := handlerstest.Start(t)
	env.Practitioner(t, "doc@example.org", true)
	app, _ := env.Client(t, oauth.ClientRegistration{Name: "Default app", Type: domain.ClientPublic, RedirectURIs: []string{redirectURI}})
	for _, asked := range [][]string{
		{"openid", "email", "user/Observation.rs"},
		{"openid", "mcp"},
		{"openid", "fhirUser", "exchange/admin.read", "patient/*.rs"},
	} {
		cfg := oauthConfig(env, app.ID, "")
		cfg.Scopes = asked
		b := newBrowser(t, env)
		_, page := b.Do("GET", cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(oauth2.GenerateVerifier())), nil)
		_, page = b.Login(page, "doc@example.org", handlerstest.Password)
		resp, _ := b.Submit(page, url.Values{"decision": {"allow"}, "scope": {"email", "fhirUser"}})
		if q := redirectParams(t, resp); q.Get("error") != "access_denied" || q.Has("code") {
			t.Errorf("asking %v, every access unticked: %v, want access_denied", asked, q)
		}
	}
	cfg := oauthConfig(env, app.ID, "")
	cfg.Scopes = []string{"openid", "email"}
	if tok := codeFlow(t, env, cfg, "doc@example.org", nil); tok.Extra("scope") != "openid email" {
		t.Errorf("asking identity scopes only: granted %v", tok.Extra("scope"))
	}
}

// TestDefaultRegistrationsOfEarlierVersionsStayUnlimited: a client
// registered with every scope stores the vocabulary of its day, which
// did not hold mcp. Upgrading must not turn such a registration into a
// limited one: the tokens `exchange token create` printed (openid
// profile email: the user's full access, through exchange-cli as stored
// then) keep working, and a trusted app registered so still obtains an
// identity-only grant.
func TestDefaultRegistrationsOfEarlierVersionsStayUnlimited(t *testing.T) {
	env := handlerstest.Start(t)
	ctx := context.Background()
	doc := env.Practitioner(t, "doc@example.org", true)
	before := slices.DeleteFunc(slices.Clone(domain.AllScopes), func(s string) bool { return s == domain.ScopeMCP })
	if err := env.DB.CreateOAuthClient(ctx, &domain.OAuthClient{ID: oauth.CLIClientID, Name: "exchange command line", Type: domain.ClientPublic,
		TokenEndpointAuthMethod: domain.AuthNone, Algorithm: "RS256", Scopes: before}); err != nil {
		t.Fatal(err)
	}
	token, _, err := env.OAuth.IssueAccessToken(ctx, doc.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if resp, _ := env.GetJSON(t, "/api/v1/users/profile", token); resp.StatusCode != http.StatusOK {
		t.Errorf("a command-line token of an earlier version's exchange-cli: %d", resp.StatusCode)
	}
	app := oauth.ClientRegistration{ID: "earlier-app", Name: "App", Type: domain.ClientPublic, RedirectURIs: []string{redirectURI},
		SkipAuthorization: true, Scopes: before}
	if _, err := env.OAuth.SaveClient(ctx, app); err != nil {
		t.Fatal(err)
	}
	if got := authorizeError(t, env, app.ID, "openid email"); got != "" {
		t.Errorf("an identity-only request of an earlier default registration: error %q", got)
	}
}
