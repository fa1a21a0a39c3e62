package oauth_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"golang.org/x/oauth2"

	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/oauth"
	"exchange/oauth/oauthtest"
)

// federated is an exchange with one OpenID Connect provider, "uni".
type federated struct {
	env *handlerstest.Env
	idp *oauthtest.OIDCProvider
}

const idpClientID, idpClientSecret = "exchange-at-uni", "uni-secret-0123456789"

// startFederated runs an OpenID Connect provider and an exchange that
// signs in with it, configured as change says (first sign-ins create
// accounts unless it says otherwise).
func startFederated(t *testing.T, change func(p *domain.IdentityProvider), o handlerstest.Options) *federated {
	t.Helper()
	idp := oauthtest.StartOIDC(t, idpClientID, idpClientSecret)
	ip := domain.IdentityProvider{ID: "uni", Kind: domain.IdentityOIDC, Name: "University", Issuer: idp.URL,
		ClientID: idpClientID, ClientSecret: idpClientSecret, FirstSignIn: domain.FirstSignInCreate}
	if change != nil {
		change(&ip)
	}
	if err := ip.Normalize(); err != nil {
		t.Fatal(err)
	}
	o.IdentityProviders = append(o.IdentityProviders, ip)
	o.Audit = true
	return &federated{env: handlerstest.StartWith(t, o), idp: idp}
}

// browser follows redirects between the exchange and the provider, and
// stops at the client's.
func (f *federated) browser(t *testing.T) *handlerstest.Browser {
	return handlerstest.NewBrowser(t, func(to *url.URL) bool { return to.Host == "client.example.test" })
}

var formActions = regexp.MustCompile(`<form method="post" action="([^"]*)"`)

// providerForm returns the index of the form of a page that posts to
// action.
func providerForm(t *testing.T, page, action string) int {
	t.Helper()
	for i, m := range formActions.FindAllStringSubmatch(page, -1) {
		if m[1] == action {
			return i
		}
	}
	t.Fatalf("no form posts to %s:\n%s", action, page)
	return -1
}

// signIn opens the login page (on to next) and presses "Sign in with
// University"; it returns where the browser ended.
func (f *federated) signIn(t *testing.T, b *handlerstest.Browser, next string) (*http.Response, string) {
	t.Helper()
	_, page := b.Do("GET", f.env.URL+"/o/login/?next="+url.QueryEscape(next), nil)
	if !strings.Contains(page, "Sign in with University") {
		t.Fatalf("the login page offers no provider:\n%s", page)
	}
	return b.SubmitForm(page, providerForm(t, page, "/o/login/uni/"), nil)
}

// signedInAs reports whom the browser is signed in as.
func (f *federated) signedInAs(t *testing.T, b *handlerstest.Browser) string {
	t.Helper()
	_, page := b.Do("GET", f.env.URL+"/o/login/", nil)
	m := regexp.MustCompile(`You are signed in as ([^.<]+)\.`).FindStringSubmatch(page)
	if m == nil {
		return ""
	}
	return m[1]
}

// signInEvents returns the sign-in events of the audit trail that name
// the identity provider, as the FHIR API shows them to a superuser.
func (f *federated) signInEvents(t *testing.T) []map[string]any {
	t.Helper()
	if err := f.env.Audit.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	super := f.env.Practitioner(t, fmt.Sprintf("auditor-%d@example.org", time.Now().UnixNano()), true)
	_, bundle := f.env.GetJSON(t, "/FHIR/R5/AuditEvent?_count=100", f.env.Token(t, super.ID))
	var out []map[string]any
	entries, _ := bundle["entry"].([]any)
	for _, e := range entries {
		r := e.(map[string]any)["resource"].(map[string]any)
		for _, a := range r["agent"].([]any) {
			who, _ := a.(map[string]any)["who"].(map[string]any)
			if id, ok := who["identifier"].(map[string]any); ok && id["system"] == "https://w3id.org/exchange/identity-provider" {
				out = append(out, r)
			}
		}
	}
	return out
}

func outcomeOf(event map[string]any) string {
	return event["outcome"].(map[string]any)["code"].(map[string]any)["code"].(string)
}

// TestFederatedSignInCreatesAndLinksByIssuerAndSubject: a first sign-in
// creates a practitioner without organizations, linked to (issuer, sub);
// the next finds the same account by (issuer, sub) even when the
// provider's email changed; each is an AuditEvent naming the provider.
func TestFederatedSignInCreatesAndLinksByIssuerAndSubject(t *testing.T) {
	f := startFederated(t, nil, handlerstest.Options{})
	f.idp.SetUser(map[string]any{"sub": "u-123", "email": "Ada@Uni.example", "email_verified": true, "given_name": "Ada", "family_name": "Lovelace"})
	b := f.browser(t)
	resp, page := f.signIn(t, b, "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "You are signed in as ada@uni.example") {
		t.Fatalf("first sign-in: %d\n%s", resp.StatusCode, page)
	}
	u, err := f.env.DB.UserByEmail(context.Background(), "ada@uni.example")
	if err != nil || u.Type != domain.UserPractitioner || u.FirstName != "Ada" || u.LastName != "Lovelace" || u.PasswordHash != "" || u.IsStaff {
		t.Fatalf("created account %+v, %v", u, err)
	}
	if ms, _ := f.env.DB.MembershipsOfUsers(context.Background(), []int64{u.ID}); len(ms) != 0 {
		t.Errorf("a first sign-in joined organizations: %v", ms)
	}

	// The provider now asserts another email for the same sub: the
	// account is still found by (issuer, sub).
	f.idp.SetUser(map[string]any{"sub": "u-123", "email": "ada.lovelace@uni.example", "email_verified": true})
	other := f.browser(t)
	if _, page := f.signIn(t, other, ""); !strings.Contains(page, "You are signed in as ada@uni.example") {
		t.Fatalf("second sign-in:\n%s", page)
	}
	events := f.signInEvents(t)
	if len(events) != 2 || outcomeOf(events[0]) != "success" || outcomeOf(events[1]) != "success" {
		t.Fatalf("sign-in events: %v", events)
	}
	if who := events[0]["agent"].([]any)[0].(map[string]any)["who"].(map[string]any)["reference"]; who != fmt.Sprintf("Practitioner/%d", u.ID) {
		t.Errorf("the event's agent is %v", who)
	}
}

// TestFederatedSignInCarriesTheAuthorizationOn: a SMART app's
// authorization request survives the detour through the provider: the
// consent page, the code and the tokens, with the scopes consented.
func TestFederatedSignInCarriesTheAuthorizationOn(t *testing.T) {
	f := startFederated(t, nil, handlerstest.Options{})
	f.idp.SetUser(map[string]any{"sub": "u-9", "email": "grace@uni.example", "email_verified": true})
	client, secret := f.env.Client(t, oauth.ClientRegistration{Name: "Dashboard", Type: domain.ClientConfidential, RedirectURIs: []string{redirectURI}})
	cfg := oauthConfig(f.env, client.ID, secret)
	verifier := oauth2.GenerateVerifier()
	b := f.browser(t)
	_, page := b.Do("GET", cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("nonce", nonce)), nil)
	resp, page := b.SubmitForm(page, providerForm(t, page, "/o/login/uni/"), nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "Authorize Dashboard") {
		t.Fatalf("after the provider, the consent page: %d\n%s", resp.StatusCode, page)
	}
	q := redirectParams(t, decide(b, page, "allow"))
	tok, err := cfg.Exchange(context.Background(), q.Get("code"), oauth2.VerifierOption(verifier))
	if err != nil || tok.Extra("scope") != "openid profile email offline_access" {
		t.Fatalf("tokens %+v, %v", tok, err)
	}
}

// TestFederatedSignInRefusals: each answer a provider must not be
// believed for signs no one in, is an AuditEvent of a refused sign-in,
// and says why.
func TestFederatedSignInRefusals(t *testing.T) {
	stranger, _ := rsa.GenerateKey(rand.Reader, 2048)
	cases := []struct {
		name string
		idp  func(p *oauthtest.OIDCProvider)
		want string
	}{
		{"bad signature", func(p *oauthtest.OIDCProvider) {
			p.Mint = func(c map[string]any) string { return oauthtest.Sign(stranger, p.KeyID, jose.RS256, c) }
		}, "did not verify"},
		{"alg none", func(p *oauthtest.OIDCProvider) { p.Mint = oauthtest.Unsigned }, "did not verify"},
		{"HS256 with the client secret", func(p *oauthtest.OIDCProvider) {
			p.Mint = func(c map[string]any) string {
				return oauthtest.Sign([]byte(idpClientSecret+idpClientSecret), p.KeyID, jose.HS256, c)
			}
		}, "did not verify"},
		{"wrong audience", func(p *oauthtest.OIDCProvider) { p.Claims = func(c map[string]any) { c["aud"] = "another-client" } }, "did not verify"},
		{"expired", func(p *oauthtest.OIDCProvider) {
			p.Claims = func(c map[string]any) { c["exp"] = time.Now().Add(-2 * time.Minute).Unix() }
		}, "did not verify"},
		{"issued in the future", func(p *oauthtest.OIDCProvider) {
			p.Claims = func(c map[string]any) { c["iat"] = time.Now().Add(time.Hour).Unix() }
		}, "issued in the future"},
		{"unknown issuer", func(p *oauthtest.OIDCProvider) {
			p.Claims = func(c map[string]any) { c["iss"] = "https://evil.example" }
		}, "did not verify"},
		{"missing nonce", func(p *oauthtest.OIDCProvider) { p.Claims = func(c map[string]any) { delete(c, "nonce") } }, "nonce does not match"},
		{"another sign-in's nonce", func(p *oauthtest.OIDCProvider) { p.Claims = func(c map[string]any) { c["nonce"] = "replayed-nonce" } }, "nonce does not match"},
		{"answer names another issuer (mix-up)", func(p *oauthtest.OIDCProvider) {
			p.Answer = func(q url.Values) { q.Set("iss", "https://other-idp.example") }
		}, "was issued by https://other-idp.example"},
		{"provider refuses", func(p *oauthtest.OIDCProvider) {
			p.Answer = func(q url.Values) { q.Del("code"); q.Set("error", "access_denied") }
		}, "refused the sign-in"},
		{"no stable id", func(p *oauthtest.OIDCProvider) { p.Claims = func(c map[string]any) { delete(c, "sub") } }, "did not say who signed in"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := startFederated(t, nil, handlerstest.Options{})
			f.idp.SetUser(map[string]any{"sub": "u-1", "email": "eve@uni.example", "email_verified": true})
			f.idp.Configure(c.idp)
			b := f.browser(t)
			resp, page := f.signIn(t, b, "")
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, c.want) {
				t.Fatalf("want 401 saying %q, got %d:\n%s", c.want, resp.StatusCode, page)
			}
			if who := f.signedInAs(t, b); who != "" {
				t.Fatalf("signed in as %s", who)
			}
			if _, err := f.env.DB.UserByEmail(context.Background(), "eve@uni.example"); !domain.IsCode(err, domain.CodeNotFound) {
				t.Errorf("a refused sign-in created an account: %v", err)
			}
			if events := f.signInEvents(t); len(events) != 1 || outcomeOf(events[0]) != "error" {
				t.Errorf("events: %v", events)
			}
		})
	}
}

// TestFederatedSignInLinksByEmailOnlyWhenAllowed: an existing account is
// not opened by a provider's (verified) email alone; a superuser's
// invitation of that address, or the provider's switch, links it.
func TestFederatedSignInLinksByEmailOnlyWhenAllowed(t *testing.T) {
	t.Run("refused by default", func(t *testing.T) {
		f := startFederated(t, nil, handlerstest.Options{})
		f.env.Practitioner(t, "chief@uni.example", true)
		f.idp.SetUser(map[string]any{"sub": "attacker", "email": "chief@uni.example", "email_verified": true})
		b := f.browser(t)
		resp, page := f.signIn(t, b, "")
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, "account with the email address chief@uni.example exists here") {
			t.Fatalf("email-only linking: %d\n%s", resp.StatusCode, page)
		}
		if who := f.signedInAs(t, b); who != "" {
			t.Fatalf("signed in as %s", who)
		}
		if _, err := f.env.DB.IdentityLink(context.Background(), f.idp.URL, "attacker"); !domain.IsCode(err, domain.CodeNotFound) {
			t.Errorf("the identity was linked: %v", err)
		}
	})
	t.Run("invited", func(t *testing.T) {
		f := startFederated(t, nil, handlerstest.Options{})
		super := f.env.Practitioner(t, "admin@uni.example", true)
		f.env.Practitioner(t, "doc@uni.example", false)
		actor, _ := f.env.Service.Actor(context.Background(), super.ID)
		if _, err := f.env.Service.InviteToIdentityProvider(context.Background(), actor, "uni", "Doc@Uni.example"); err != nil {
			t.Fatal(err)
		}
		// An unverified address does not use the invitation.
		f.idp.SetUser(map[string]any{"sub": "d-1", "email": "doc@uni.example", "email_verified": false})
		if resp, _ := f.signIn(t, f.browser(t), ""); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("an unverified email used the invitation: %d", resp.StatusCode)
		}
		f.idp.SetUser(map[string]any{"sub": "d-1", "email": "doc@uni.example", "email_verified": "true"})
		b := f.browser(t)
		if _, page := f.signIn(t, b, ""); !strings.Contains(page, "You are signed in as doc@uni.example") {
			t.Fatalf("invited sign-in:\n%s", page)
		}
		if invs, _ := f.env.DB.IdentityInvitations(context.Background(), "uni"); len(invs) != 0 {
			t.Errorf("the invitation is left: %v", invs)
		}
	})
	t.Run("the provider's switch", func(t *testing.T) {
		f := startFederated(t, func(p *domain.IdentityProvider) { p.LinkVerifiedEmail = true }, handlerstest.Options{})
		f.env.Practitioner(t, "doc@uni.example", false)
		f.env.Patient(t, "patient@uni.example")
		f.idp.SetUser(map[string]any{"sub": "d-2", "email": "doc@uni.example", "email_verified": false})
		if resp, _ := f.signIn(t, f.browser(t), ""); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("an unverified email linked: %d", resp.StatusCode)
		}
		f.idp.SetUser(map[string]any{"sub": "p-1", "email": "patient@uni.example", "email_verified": true})
		if resp, page := f.signIn(t, f.browser(t), ""); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, "patient") {
			t.Fatalf("a patient's account was opened: %d\n%s", resp.StatusCode, page)
		}
		f.idp.SetUser(map[string]any{"sub": "d-2", "email": "doc@uni.example", "email_verified": true})
		if _, page := f.signIn(t, f.browser(t), ""); !strings.Contains(page, "You are signed in as doc@uni.example") {
			t.Fatalf("linked sign-in:\n%s", page)
		}
		// The provider gives the address to someone new (another subject):
		// the account stays the first holder's.
		f.idp.SetUser(map[string]any{"sub": "d-3", "email": "doc@uni.example", "email_verified": true})
		b := f.browser(t)
		if resp, page := f.signIn(t, b, ""); resp.StatusCode != http.StatusUnauthorized || f.signedInAs(t, b) != "" {
			t.Fatalf("a second subject of the issuer opened the account: %d\n%s", resp.StatusCode, page)
		}
		if _, err := f.env.DB.IdentityLink(context.Background(), f.idp.URL, "d-3"); !domain.IsCode(err, domain.CodeNotFound) {
			t.Errorf("the second subject was linked: %v", err)
		}
	})
}

// TestFederatedFirstSignInPolicies: "invited" refuses strangers; allowed
// email domains admit only verified addresses in them; a new account
// needs a verified email.
func TestFederatedFirstSignInPolicies(t *testing.T) {
	t.Run("invited only", func(t *testing.T) {
		f := startFederated(t, func(p *domain.IdentityProvider) { p.FirstSignIn = domain.FirstSignInInvited }, handlerstest.Options{})
		f.idp.SetUser(map[string]any{"sub": "s-1", "email": "new@uni.example", "email_verified": true})
		if resp, page := f.signIn(t, f.browser(t), ""); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, "admits only people an administrator invited") {
			t.Fatalf("uninvited: %d\n%s", resp.StatusCode, page)
		}
	})
	t.Run("allowed domains", func(t *testing.T) {
		f := startFederated(t, func(p *domain.IdentityProvider) { p.AllowedEmailDomains = []string{"uni.example"} }, handlerstest.Options{})
		for _, user := range []map[string]any{
			{"sub": "s-2", "email": "someone@evil.example", "email_verified": true},
			{"sub": "s-3", "email": "someone@uni.example", "email_verified": false},
			{"sub": "s-4", "email": "someone@uni.example.evil.example", "email_verified": true},
			{"sub": "s-5"},
		} {
			f.idp.SetUser(user)
			if resp, page := f.signIn(t, f.browser(t), ""); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, "verified email address at uni.example") {
				t.Fatalf("%v: %d\n%s", user, resp.StatusCode, page)
			}
		}
		f.idp.SetUser(map[string]any{"sub": "s-6", "email": "someone@uni.example", "email_verified": true})
		if _, page := f.signIn(t, f.browser(t), ""); !strings.Contains(page, "You are signed in as someone@uni.example") {
			t.Fatalf("in the domain:\n%s", page)
		}
	})
	t.Run("new accounts need a verified email", func(t *testing.T) {
		f := startFederated(t, nil, handlerstest.Options{})
		f.idp.SetUser(map[string]any{"sub": "s-7", "email": "unverified@uni.example"})
		if resp, page := f.signIn(t, f.browser(t), ""); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, "did not vouch for an email address") {
			t.Fatalf("unverified: %d\n%s", resp.StatusCode, page)
		}
	})
}

// TestFederatedSignInIsBoundToItsStateProviderAndBrowser: the provider's
// answer is good once, in the browser that started the sign-in, through
// the provider it was sent to; where it goes after is fixed at the start
// (a local path).
func TestFederatedSignInIsBoundToItsStateProviderAndBrowser(t *testing.T) {
	f := startFederated(t, nil, handlerstest.Options{})
	f.idp.SetUser(map[string]any{"sub": "u-5", "email": "bob@uni.example", "email_verified": true})
	// Catch the provider's answer instead of following it.
	exchangeHost := strings.TrimPrefix(f.env.URL, "http://")
	catcher := handlerstest.NewBrowser(t, func(to *url.URL) bool { return to.Host == exchangeHost && strings.HasSuffix(to.Path, "/callback") })
	_, page := catcher.Do("GET", f.env.URL+"/o/login/?next=//evil.example/x", nil)
	resp, _ := catcher.SubmitForm(page, providerForm(t, page, "/o/login/uni/"), nil)
	answer := resp.Header.Get("Location")
	if !strings.Contains(answer, "/o/login/uni/callback?") {
		t.Fatalf("no answer caught: %d %q", resp.StatusCode, answer)
	}

	// Another browser (an attacker planting their sign-in) gets nothing.
	victim := f.browser(t)
	if resp, page := victim.Do("GET", answer, nil); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, "another browser") {
		t.Fatalf("another browser: %d\n%s", resp.StatusCode, page)
	}
	// The answer was used up by that attempt: the starting browser must
	// start again (single use beats a race to the callback).
	if resp, page := catcher.Do("GET", answer, nil); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, "expired or was already used") {
		t.Fatalf("a used state: %d\n%s", resp.StatusCode, page)
	}

	// Through another provider's callback, the answer is refused.
	_, page = catcher.Do("GET", f.env.URL+"/o/login/", nil)
	resp, _ = catcher.SubmitForm(page, providerForm(t, page, "/o/login/uni/"), nil)
	mixed := strings.Replace(resp.Header.Get("Location"), "/o/login/uni/", "/o/login/other/", 1)
	if resp, page := catcher.Do("GET", mixed, nil); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, "another identity provider") {
		t.Fatalf("mix-up: %d\n%s", resp.StatusCode, page)
	}

	// A good sign-in with next=//evil.example ends on this server.
	b := f.browser(t)
	resp, page = f.signIn(t, b, "//evil.example/x")
	if resp.Request.URL.Host != exchangeHost || !strings.Contains(page, "You are signed in as bob@uni.example") {
		t.Fatalf("ended at %s:\n%s", resp.Request.URL, page)
	}
	if resp, _ := b.Do("GET", f.env.URL+"/o/login/uni/callback?state=forged&code=x", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a forged state: %d", resp.StatusCode)
	}
}

// TestUserInfoCompletesTheIDToken: a provider that keeps the email out of
// the ID token (in its UserInfo) is read there, for the same sub only.
func TestUserInfoCompletesTheIDToken(t *testing.T) {
	f := startFederated(t, nil, handlerstest.Options{})
	f.idp.SetUser(map[string]any{"sub": "u-7", "email": "lin@uni.example", "email_verified": true, "given_name": "Lin"})
	f.idp.Configure(func(p *oauthtest.OIDCProvider) { p.InUserInfo = []string{"email", "email_verified", "given_name"} })
	if _, page := f.signIn(t, f.browser(t), ""); !strings.Contains(page, "You are signed in as lin@uni.example") {
		t.Fatalf("sign-in:\n%s", page)
	}
}

// TestPasswordSignInCanBeTurnedOff: the login page offers the providers
// only, and a password post is refused even with good credentials.
func TestPasswordSignInCanBeTurnedOff(t *testing.T) {
	f := startFederated(t, nil, handlerstest.Options{PasswordSignInOff: true})
	f.env.Practitioner(t, "doc@example.org", false)
	b := f.browser(t)
	_, page := b.Do("GET", f.env.URL+"/o/login/", nil)
	if strings.Contains(page, `type="password"`) || !strings.Contains(page, "Sign in with University") {
		t.Fatalf("login page:\n%s", page)
	}
	form := url.Values{"email": {"doc@example.org"}, "password": {handlerstest.Password}, "csrf_token": {handlerstest.CSRF(t, b, f.env.URL)}}
	if resp, _ := b.Do("POST", f.env.URL+"/o/login/", form); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("password post: %d", resp.StatusCode)
	}
	if who := f.signedInAs(t, b); who != "" {
		t.Fatalf("signed in as %s", who)
	}
}
