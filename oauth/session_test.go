package oauth_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"golang.org/x/oauth2"

	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/oauth"
	"exchange/repo/repotest"
)

// sessionOf returns the login session cookie a browser holds for a path of
// the exchange; nil when it would not send one there.
func sessionOf(t *testing.T, env *handlerstest.Env, b *handlerstest.Browser, path string) *http.Cookie {
	t.Helper()
	u, _ := url.Parse(env.URL + path)
	for _, c := range b.Jar().Cookies(u) {
		if c.Name == "exchange_session" {
			return c
		}
	}
	return nil
}

// signedInWith reports whether a request carrying only cookie is signed
// in: the login page then says who is.
func signedInWith(t *testing.T, env *handlerstest.Env, cookie *http.Cookie) bool {
	t.Helper()
	req, _ := http.NewRequest("GET", env.URL+"/o/login/", nil)
	req.AddCookie(cookie)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	return strings.Contains(string(page), "You are signed in as")
}

// signInBrowser signs a new browser in at the login page.
func signInBrowser(t *testing.T, env *handlerstest.Env, email, password string) *handlerstest.Browser {
	t.Helper()
	b := newBrowser(t, env)
	_, page := b.Do("GET", env.URL+"/o/login/", nil)
	if resp, page := b.Login(page, email, password); resp.StatusCode != http.StatusOK || !strings.Contains(page, "You are signed in as "+email) {
		t.Fatalf("sign-in of %s: %d\n%s", email, resp.StatusCode, page)
	}
	return b
}

// Signing out ends the session at the server: a copy of the cookie taken
// before is refused after. Signing in again replaces the session, so a
// value planted in the browser beforehand, or the previous session's,
// never signs in.
func TestLogoutEndsTheSessionAtTheServer(t *testing.T) {
	env := handlerstest.Start(t)
	env.Practitioner(t, "doc@example.org", false)

	b := newBrowser(t, env)
	server, _ := url.Parse(env.URL)
	planted := &http.Cookie{Name: "exchange_session", Value: "planted-by-an-attacker-0123456789abcdef", Path: "/"}
	b.Jar().SetCookies(server, []*http.Cookie{planted})
	_, page := b.Do("GET", env.URL+"/o/login/", nil)
	b.Login(page, "doc@example.org", handlerstest.Password)
	first := sessionOf(t, env, b, "/o/login/")
	if first == nil || first.Value == planted.Value || signedInWith(t, env, planted) || !signedInWith(t, env, first) {
		t.Fatalf("sign-in over a planted cookie: %v", first)
	}

	_, page = b.Do("GET", env.URL+"/o/login/?next=/o/login/", nil) // signed in: the form only when going on
	b.Login(page, "doc@example.org", handlerstest.Password)
	second := sessionOf(t, env, b, "/o/login/")
	if second == nil || second.Value == first.Value || signedInWith(t, env, first) {
		t.Error("signing in again keeps the previous session alive")
	}

	_, page = b.Do("GET", env.URL+"/o/login/", nil)
	resp, page := b.Submit(page, nil) // the sign-out button
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "You are signed out") {
		t.Fatalf("sign out: %d\n%s", resp.StatusCode, page)
	}
	if signedInWith(t, env, second) {
		t.Error("the cookie copied before signing out still signs in")
	}
	req, _ := http.NewRequest("GET", env.URL+"/console/", nil)
	req.AddCookie(second)
	if u, ok := env.OAuth.SessionUser(req); ok {
		t.Errorf("SessionUser after sign-out: %d", u.ID)
	}
}

// After signing in, the login page goes to a path of this origin only.
func TestLoginNextGoesOnlyToLocalPaths(t *testing.T) {
	env := handlerstest.Start(t)
	env.Practitioner(t, "doc@example.org", false)
	for next, want := range map[string]string{
		"/console/patients?sort=name":  "/console/patients?sort=name",
		"//evil.example/x":             "/o/login/",
		"https://evil.example/":        "/o/login/",
		"/\\evil.example":              "/o/login/",
		"/\r\nSet-Cookie: x=y":         "/o/login/",
		"javascript:alert(1)":          "/o/login/",
		"/o/authorize/?client_id=x&a=": "/o/authorize/?client_id=x&a=",
	} {
		b := handlerstest.NewBrowser(t, func(*url.URL) bool { return true }) // stop at the first redirect
		_, page := b.Do("GET", env.URL+"/o/login/?next="+url.QueryEscape(next), nil)
		resp, _ := b.Login(page, "doc@example.org", handlerstest.Password)
		if got := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || got != want {
			t.Errorf("next=%q: %d to %q, want %q", next, resp.StatusCode, got, want)
		}
	}
	// Signing out goes to a local next too, and says so otherwise.
	b := handlerstest.NewBrowser(t, func(*url.URL) bool { return true })
	_, page := b.Do("GET", env.URL+"/o/login/", nil)
	_, fields := handlerstest.Form(t, page)
	for next, want := range map[string]string{"/console/": "/console/", "//evil.example/": ""} {
		resp, body := b.Do("POST", env.URL+"/o/logout/", url.Values{"csrf_token": fields["csrf_token"], "next": {next}})
		if got := resp.Header.Get("Location"); got != want || (want == "" && !strings.Contains(body, "You are signed out")) {
			t.Errorf("sign out with next=%q: %d to %q, want %q", next, resp.StatusCode, got, want)
		}
	}
}

// The session cookie reaches every path of the origin (the console's), and
// the API never takes it for a credential.
func TestSessionCookieIsNoAPICredential(t *testing.T) {
	env := handlerstest.Start(t)
	env.Practitioner(t, "doc@example.org", false)
	b := signInBrowser(t, env, "doc@example.org", handlerstest.Password)
	cookie := sessionOf(t, env, b, "/console/")
	if cookie == nil {
		t.Fatal("the session cookie is not sent to /console/ (Path must be /)")
	}
	for _, path := range []string{"/api/v1/users/profile", "/FHIR/R5/Patient", "/fhir/r5/Observation"} {
		req, _ := http.NewRequest("GET", env.URL+path, nil)
		req.AddCookie(cookie)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s with the session cookie only: %d, want 401", path, resp.StatusCode)
		}
	}
	req, _ := http.NewRequest("GET", env.URL+"/console/", nil)
	req.AddCookie(cookie)
	if _, ok := env.OAuth.SessionUser(req); !ok {
		t.Error("SessionUser refuses a live session")
	}
}

// SessionUser names the user of a live session of an active user only.
func TestSessionUser(t *testing.T) {
	env := handlerstest.Start(t)
	ctx := context.Background()
	doc := env.Practitioner(t, "doc@example.org", false)
	cookie := sessionOf(t, env, signInBrowser(t, env, "doc@example.org", handlerstest.Password), "/")
	ask := func(cookies ...*http.Cookie) (int64, bool) {
		req, _ := http.NewRequest("GET", env.URL+"/console/", nil)
		for _, c := range cookies {
			req.AddCookie(c)
		}
		u, ok := env.OAuth.SessionUser(req)
		if !ok {
			return 0, false
		}
		return u.ID, true
	}
	if id, ok := ask(cookie); !ok || id != doc.ID {
		t.Errorf("SessionUser = %d, %v; want %d", id, ok, doc.ID)
	}
	if _, ok := ask(); ok {
		t.Error("SessionUser without a cookie")
	}
	if id, ok := ask(&http.Cookie{Name: "exchange_session", Value: "forged"}, cookie); !ok || id != doc.ID {
		t.Errorf("a stale cookie before the live one: %d, %v", id, ok)
	}
	inactive := false
	if _, err := env.DB.ChangeUser(ctx, doc.ID, domain.UserChange{IsActive: &inactive}); err != nil {
		t.Fatal(err)
	}
	if _, ok := ask(cookie); ok {
		t.Error("SessionUser names an inactive user")
	}
}

// A password change and a deactivation end the user's sessions and revoke
// their tokens: introspection says inactive, refresh fails, the API
// refuses them.
func TestPasswordChangeAndDeactivationEndSessionsAndTokens(t *testing.T) {
	env := handlerstest.Start(t)
	ctx := context.Background()
	doc := env.Practitioner(t, "doc@example.org", false)
	admin := env.Token(t, env.Practitioner(t, "admin@example.org", true).ID)
	client, secret := env.Client(t, oauth.ClientRegistration{Name: "App", Type: domain.ClientConfidential, RedirectURIs: []string{redirectURI}, SkipAuthorization: true})
	cfg := oauthConfig(env, client.ID, secret)
	grant := func(password string) (*handlerstest.Browser, *oauth2.Token, string) {
		t.Helper()
		b := signInBrowser(t, env, "doc@example.org", password)
		verifier := oauth2.GenerateVerifier()
		resp, _ := b.Do("GET", cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier)), nil)
		tok, err := cfg.Exchange(ctx, redirectParams(t, resp).Get("code"), oauth2.VerifierOption(verifier))
		if err != nil {
			t.Fatal(err)
		}
		return b, tok, env.Token(t, doc.ID)
	}
	ended := func(step string, b *handlerstest.Browser, tok *oauth2.Token, script string) {
		t.Helper()
		if signedInWith(t, env, sessionOf(t, env, b, "/")) {
			t.Errorf("%s: the browser is still signed in", step)
		}
		for _, token := range []string{tok.AccessToken, tok.RefreshToken, script} {
			if _, body := introspectAs(t, env, client.ID, secret, token); body["active"] != false {
				t.Errorf("%s: a token introspects as %v", step, body)
			}
		}
		if _, err := refresh(ctx, cfg, tok.RefreshToken); !isOAuthError(err, "invalid_grant") {
			t.Errorf("%s: refresh: %v", step, err)
		}
		profile(t, env, tok.AccessToken, http.StatusUnauthorized)
		profile(t, env, script, http.StatusUnauthorized)
	}

	b, tok, script := grant(handlerstest.Password)
	if err := env.Service.SetPassword(ctx, "doc@example.org", "a new password 123"); err != nil {
		t.Fatal(err)
	}
	ended("password change", b, tok, script)

	b, tok, script = grant("a new password 123")
	path := fmt.Sprintf("/api/v1/users/%d", doc.ID)
	if resp, out := env.Send(t, "PATCH", path, admin, map[string]any{"isActive": false}); resp.StatusCode != http.StatusOK || out["isActive"] != false {
		t.Fatalf("deactivation: %d %v", resp.StatusCode, out)
	}
	ended("deactivation", b, tok, script)
	if status, _ := from(t, env, "").try("doc@example.org", "a new password 123"); status != http.StatusUnauthorized {
		t.Errorf("an inactive user signs in: %d", status)
	}
	if resp, out := env.Send(t, "PATCH", path, admin, map[string]any{"isActive": true}); resp.StatusCode != http.StatusOK || out["isActive"] != true {
		t.Fatalf("reactivation: %d %v", resp.StatusCode, out)
	}
	signInBrowser(t, env, "doc@example.org", "a new password 123")
}

// A sign-in or grant racing a password change can store its session or
// tokens after the change ended the rest: they are void all the same, as
// they come from a sign-in before the change. (The race is played by
// putting the records back after the change.)
func TestCredentialsStoredAfterAPasswordChangeAreVoid(t *testing.T) {
	env := handlerstest.Start(t)
	ctx := context.Background()
	doc := env.Practitioner(t, "doc@example.org", false)
	client, secret := env.Client(t, oauth.ClientRegistration{Name: "App", Type: domain.ClientConfidential, RedirectURIs: []string{redirectURI}, SkipAuthorization: true})
	cfg := oauthConfig(env, client.ID, secret)
	b := signInBrowser(t, env, "doc@example.org", handlerstest.Password)
	cookie := sessionOf(t, env, b, "/")
	verifier := oauth2.GenerateVerifier()
	resp, _ := b.Do("GET", cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier)), nil)
	tok, err := cfg.Exchange(ctx, redirectParams(t, resp).Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	sessions, tokens := repotest.Collection(t, env.DB, "sessions"), repotest.Collection(t, env.DB, "oauth_tokens")
	var stored []bson.M
	cur, err := sessions.Find(ctx, bson.M{"userId": doc.ID})
	if err != nil || cur.All(ctx, &stored) != nil || len(stored) != 1 {
		t.Fatalf("the session record: %v %v", stored, err)
	}

	if err := env.Service.SetPassword(ctx, "doc@example.org", "a new password 123"); err != nil {
		t.Fatal(err)
	}
	if _, err := sessions.InsertOne(ctx, stored[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := tokens.UpdateMany(ctx, bson.M{"userId": doc.ID}, bson.M{"$set": bson.M{"active": true}}); err != nil {
		t.Fatal(err)
	}
	if signedInWith(t, env, cookie) {
		t.Error("a session stored after the password change signs in")
	}
	for _, token := range []string{tok.AccessToken, tok.RefreshToken} {
		if _, body := introspectAs(t, env, client.ID, secret, token); body["active"] != false {
			t.Errorf("a token stored after the password change introspects as %v", body)
		}
	}
	profile(t, env, tok.AccessToken, http.StatusUnauthorized)
	if _, err := refresh(ctx, cfg, tok.RefreshToken); !isOAuthError(err, "invalid_grant") {
		t.Errorf("refresh with a token stored after the password change: %v", err)
	}
	// A sign-in after the change stands.
	signInBrowser(t, env, "doc@example.org", "a new password 123")
}

// A session ends after its idle timeout without use and after its lifetime
// however used; its last use is written at most every few minutes.
func TestSessionLifetimeAndIdleTimeout(t *testing.T) {
	env := handlerstest.StartWith(t, handlerstest.Options{SessionLifetime: 2 * time.Hour, SessionIdleTimeout: 30 * time.Minute})
	env.Clock.Stop()
	ctx := context.Background()
	env.Practitioner(t, "doc@example.org", false)
	cookie := sessionOf(t, env, signInBrowser(t, env, "doc@example.org", handlerstest.Password), "/")
	sum := sha256.Sum256([]byte(cookie.Value))
	record := func() *domain.LoginSession {
		s, err := env.DB.LoginSession(ctx, hex.EncodeToString(sum[:]))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	signedAt := record().LastUsed

	env.Clock.Advance(time.Minute)
	if !signedInWith(t, env, cookie) || !record().LastUsed.Equal(signedAt) {
		t.Errorf("a use a minute after sign-in: written %v", record().LastUsed.Sub(signedAt))
	}
	for i := range 2 {
		env.Clock.Advance(25 * time.Minute)
		if !signedInWith(t, env, cookie) {
			t.Fatalf("signed out after %d uses 25 minutes apart", i+1)
		}
	}
	if got := record().LastUsed.Sub(signedAt); got != 51*time.Minute {
		t.Errorf("last use written %v after sign-in, want 51m", got)
	}
	env.Clock.Advance(31 * time.Minute)
	if signedInWith(t, env, cookie) {
		t.Error("still signed in after 31 idle minutes")
	}

	cookie = sessionOf(t, env, signInBrowser(t, env, "doc@example.org", handlerstest.Password), "/")
	for range 5 {
		env.Clock.Advance(20 * time.Minute)
		if !signedInWith(t, env, cookie) {
			t.Fatal("a session in use ended before its lifetime")
		}
	}
	env.Clock.Advance(20 * time.Minute)
	if signedInWith(t, env, cookie) {
		t.Error("still signed in at the end of the lifetime")
	}
}
