package oauth_test

import (
	"context"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/oauth2"

	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/oauth"
	"exchange/repo/repotest"
)

func TestMain(m *testing.M) { repotest.Main(m) }

const redirectURI = "https://client.example.test/callback"

// newBrowser is a browser that follows redirects within the exchange and
// stops at the first that leaves it (to the client).
func newBrowser(t *testing.T, env *handlerstest.Env) *handlerstest.Browser {
	server, _ := url.Parse(env.URL)
	return handlerstest.NewBrowser(t, func(to *url.URL) bool { return to.Host != server.Host })
}

// decide answers the consent page.
func decide(b *handlerstest.Browser, page, decision string) *http.Response {
	resp, _ := b.Submit(page, url.Values{"decision": {decision}})
	return resp
}

func oauthConfig(env *handlerstest.Env, clientID, secret string) *oauth2.Config {
	style := oauth2.AuthStyleInHeader
	if secret == "" {
		style = oauth2.AuthStyleInParams
	}
	return &oauth2.Config{
		ClientID: clientID, ClientSecret: secret, RedirectURL: redirectURI,
		Scopes:   []string{"openid", "profile", "email", "offline_access"},
		Endpoint: oauth2.Endpoint{AuthURL: env.URL + "/o/authorize/", TokenURL: env.URL + "/o/token/", AuthStyle: style},
	}
}

// redirectParams returns the query of a redirect to the client.
func redirectParams(t *testing.T, resp *http.Response) url.Values {
	t.Helper()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || resp.StatusCode/100 != 3 || !strings.HasPrefix(loc.String(), redirectURI) {
		t.Fatalf("want a redirect to %s, got %d Location %q", redirectURI, resp.StatusCode, resp.Header.Get("Location"))
	}
	return loc.Query()
}

const state = "state-0123456789"
const nonce = "nonce-0123456789"

// authorize runs the browser part of the flow with a fresh login and
// returns the authorization code.
func authorize(t *testing.T, env *handlerstest.Env, cfg *oauth2.Config, email, verifier string) string {
	t.Helper()
	b := newBrowser(t, env)
	_, page := b.Do("GET", cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("nonce", nonce)), nil)
	resp, page := b.Login(page, email, handlerstest.Password)
	if resp.StatusCode == http.StatusOK && strings.Contains(page, `value="allow"`) {
		resp = decide(b, page, "allow")
	}
	q := redirectParams(t, resp)
	if q.Get("state") != state || q.Get("code") == "" {
		t.Fatalf("redirect query %v", q)
	}
	return q.Get("code")
}

func TestAuthorizationCodeFlowWithPKCEAndRefreshRotation(t *testing.T) {
	env := handlerstest.Start(t)
	ctx := context.Background()
	user := env.Practitioner(t, "doc@example.org", false)
	client, secret := env.Client(t, oauth.ClientRegistration{Name: "Confidential app", Type: domain.ClientConfidential, RedirectURIs: []string{redirectURI}})
	cfg := oauthConfig(env, client.ID, secret)
	verifier := oauth2.GenerateVerifier()

	// Unauthenticated: the authorization endpoint shows the login page.
	b := newBrowser(t, env)
	resp, page := b.Do("GET", cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("nonce", nonce)), nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `<label for="email">Email address</label>`) || !strings.Contains(page, "Confidential app") {
		t.Fatalf("login page: %d\n%s", resp.StatusCode, page)
	}
	// Logging in leads back to the authorization endpoint: the consent page.
	resp, page = b.Login(page, "doc@example.org", handlerstest.Password)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "Authorize Confidential app") || !strings.Contains(page, "See your email address") {
		t.Fatalf("consent page: %d\n%s", resp.StatusCode, page)
	}
	q := redirectParams(t, decide(b, page, "allow"))
	if q.Get("state") != state {
		t.Errorf("state %q", q.Get("state"))
	}

	tok, err := cfg.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	if tok.AccessToken == "" || tok.RefreshToken == "" || !strings.EqualFold(tok.TokenType, "bearer") || tok.ExpiresIn <= 0 {
		t.Fatalf("token response %+v", tok)
	}
	if got := tok.Extra("scope"); got != "openid profile email offline_access" {
		t.Errorf("scope = %v", got)
	}
	verifyIDToken(t, env, tok.Extra("id_token").(string), client.ID, user)
	profile(t, env, tok.AccessToken, http.StatusOK)

	// Refresh rotates both tokens; the old access token stops working.
	rotated, err := refresh(ctx, cfg, tok.RefreshToken)
	if err != nil {
		t.Fatal(err)
	}
	if rotated.RefreshToken == tok.RefreshToken || rotated.AccessToken == tok.AccessToken {
		t.Fatal("refresh did not rotate the tokens")
	}
	profile(t, env, rotated.AccessToken, http.StatusOK)
	profile(t, env, tok.AccessToken, http.StatusUnauthorized)

	// Reusing the old refresh token is refused and revokes the grant: the
	// rotated tokens die with it.
	if _, err := refresh(ctx, cfg, tok.RefreshToken); !isOAuthError(err, "invalid_grant") {
		t.Fatalf("reuse of the old refresh token: %v", err)
	}
	profile(t, env, rotated.AccessToken, http.StatusUnauthorized)
	if _, err := refresh(ctx, cfg, rotated.RefreshToken); !isOAuthError(err, "invalid_grant") {
		t.Errorf("refresh token of a revoked grant: %v", err)
	}
}

func refresh(ctx context.Context, cfg *oauth2.Config, refreshToken string) (*oauth2.Token, error) {
	return cfg.TokenSource(ctx, &oauth2.Token{RefreshToken: refreshToken}).Token()
}

func isOAuthError(err error, code string) bool {
	var re *oauth2.RetrieveError
	return errors.As(err, &re) && re.ErrorCode == code
}

// profile calls the profile endpoint with a bearer token and checks the status.
func profile(t *testing.T, env *handlerstest.Env, token string, want int) map[string]any {
	t.Helper()
	resp, body := env.GetJSON(t, "/api/v1/users/profile", token)
	if resp.StatusCode != want {
		t.Fatalf("profile: status %d, want %d (%v)", resp.StatusCode, want, body)
	}
	if want == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("401 without WWW-Authenticate: Bearer")
	}
	return body
}

// verifyIDToken checks the ID token's RS256 signature against the JWKS and
// its claims.
func verifyIDToken(t *testing.T, env *handlerstest.Env, idToken, clientID string, user *domain.User) {
	t.Helper()
	resp, err := http.Get(env.URL + "/o/.well-known/jwks.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var set struct {
		Keys []struct{ Kty, Kid, Alg, Use, N, E string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&set); err != nil || len(set.Keys) != 1 {
		t.Fatalf("JWKS: %v %+v", err, set)
	}
	k := set.Keys[0]
	n, _ := base64.RawURLEncoding.DecodeString(k.N)
	e, _ := base64.RawURLEncoding.DecodeString(k.E)
	pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
	claims := jwt.MapClaims{}
	parsed, err := jwt.ParseWithClaims(idToken, claims, func(tok *jwt.Token) (any, error) {
		if tok.Header["kid"] != k.Kid {
			return nil, errors.New("unknown kid")
		}
		return pub, nil
	}, jwt.WithValidMethods([]string{"RS256"}), jwt.WithIssuer(env.URL+"/o"), jwt.WithAudience(clientID), jwt.WithExpirationRequired())
	if err != nil || !parsed.Valid {
		t.Fatalf("ID token does not verify: %v", err)
	}
	if claims["sub"] != strconv.FormatInt(user.ID, 10) || claims["email"] != user.Email || claims["nonce"] != nonce {
		t.Errorf("ID token claims %v", claims)
	}
}

func TestAuthorizationRequestsRefused(t *testing.T) {
	env := handlerstest.Start(t)
	env.Practitioner(t, "doc@example.org", false)
	client, _ := env.Client(t, oauth.ClientRegistration{Name: "Public app", Type: domain.ClientPublic, RedirectURIs: []string{redirectURI}})
	verifier := oauth2.GenerateVerifier()
	base := url.Values{"client_id": {client.ID}, "response_type": {"code"}, "redirect_uri": {redirectURI}, "scope": {"openid"},
		"state": {state}, "code_challenge": {oauth2.S256ChallengeFromVerifier(verifier)}, "code_challenge_method": {"S256"}}
	for _, tc := range []struct {
		name   string
		change func(url.Values)
		// toClient: the error is redirected to the client with this code;
		// otherwise it is shown on an error page.
		toClient string
	}{
		{"plain PKCE", func(v url.Values) { v.Set("code_challenge_method", "plain"); v.Set("code_challenge", verifier) }, "invalid_request"},
		{"no PKCE", func(v url.Values) { v.Del("code_challenge"); v.Del("code_challenge_method") }, "invalid_request"},
		{"redirect URI mismatch", func(v url.Values) { v.Set("redirect_uri", redirectURI+"/other") }, ""},
		{"redirect URI on another port", func(v url.Values) { v.Set("redirect_uri", "https://client.example.test:8080/callback") }, ""},
		{"unknown client", func(v url.Values) { v.Set("client_id", "nobody") }, ""},
		{"implicit grant", func(v url.Values) { v.Set("response_type", "token") }, "unsupported_response_type"},
		{"short state", func(v url.Values) { v.Set("state", "abc") }, "invalid_state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := url.Values{}
			for k, v := range base {
				q[k] = append([]string(nil), v...)
			}
			tc.change(q)
			b := newBrowser(t, env)
			resp, page := b.Do("GET", env.URL+"/o/authorize/?"+q.Encode(), nil)
			if tc.toClient == "" {
				if resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, "Authorization refused") {
					t.Fatalf("want an error page, got %d %s\n%s", resp.StatusCode, resp.Header.Get("Location"), page)
				}
				return
			}
			if got := redirectParams(t, resp).Get("error"); got != tc.toClient {
				t.Errorf("error = %q, want %q", got, tc.toClient)
			}
		})
	}
}

func TestTokenRequestsRefused(t *testing.T) {
	env := handlerstest.Start(t)
	ctx := context.Background()
	env.Practitioner(t, "doc@example.org", false)
	client, _ := env.Client(t, oauth.ClientRegistration{Name: "Public app", Type: domain.ClientPublic, RedirectURIs: []string{redirectURI}, SkipAuthorization: true})
	cfg := oauthConfig(env, client.ID, "")
	verifier := oauth2.GenerateVerifier()

	t.Run("wrong verifier", func(t *testing.T) {
		code := authorize(t, env, cfg, "doc@example.org", verifier)
		if _, err := cfg.Exchange(ctx, code, oauth2.VerifierOption(oauth2.GenerateVerifier())); !isOAuthError(err, "invalid_grant") {
			t.Fatalf("wrong verifier: %v", err)
		}
	})
	t.Run("missing verifier", func(t *testing.T) {
		code := authorize(t, env, cfg, "doc@example.org", verifier)
		if _, err := cfg.Exchange(ctx, code); err == nil {
			t.Fatal("exchange without a verifier succeeded")
		}
	})
	t.Run("another redirect URI", func(t *testing.T) {
		code := authorize(t, env, cfg, "doc@example.org", verifier)
		other := *cfg
		other.RedirectURL = redirectURI + "/other"
		if _, err := other.Exchange(ctx, code, oauth2.VerifierOption(verifier)); !isOAuthError(err, "invalid_grant") {
			t.Fatalf("redirect URI mismatch at the token endpoint: %v", err)
		}
	})
	t.Run("another client", func(t *testing.T) {
		code := authorize(t, env, cfg, "doc@example.org", verifier)
		otherClient, _ := env.Client(t, oauth.ClientRegistration{Name: "Other", Type: domain.ClientPublic, RedirectURIs: []string{redirectURI}})
		if _, err := oauthConfig(env, otherClient.ID, "").Exchange(ctx, code, oauth2.VerifierOption(verifier)); !isOAuthError(err, "invalid_grant") {
			t.Fatalf("code redeemed by another client: %v", err)
		}
	})
	t.Run("code reuse revokes its tokens", func(t *testing.T) {
		code := authorize(t, env, cfg, "doc@example.org", verifier)
		tok, err := cfg.Exchange(ctx, code, oauth2.VerifierOption(verifier))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cfg.Exchange(ctx, code, oauth2.VerifierOption(verifier)); !isOAuthError(err, "invalid_grant") {
			t.Fatalf("second use of the code: %v", err)
		}
		profile(t, env, tok.AccessToken, http.StatusUnauthorized)
		if _, err := refresh(ctx, cfg, tok.RefreshToken); !isOAuthError(err, "invalid_grant") {
			t.Errorf("refresh token of a reused code: %v", err)
		}
	})
	t.Run("trusted client skips consent", func(t *testing.T) {
		code := authorize(t, env, cfg, "doc@example.org", verifier)
		tok, err := cfg.Exchange(ctx, code, oauth2.VerifierOption(verifier))
		if err != nil || tok.AccessToken == "" {
			t.Fatalf("exchange: %v", err)
		}
	})
}

func TestConsentDeniedAndCSRF(t *testing.T) {
	env := handlerstest.Start(t)
	env.Practitioner(t, "doc@example.org", false)
	client, _ := env.Client(t, oauth.ClientRegistration{Name: "Public app", Type: domain.ClientPublic, RedirectURIs: []string{redirectURI}})
	cfg := oauthConfig(env, client.ID, "")
	b := newBrowser(t, env)
	authURL := cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(oauth2.GenerateVerifier()))
	_, page := b.Do("GET", authURL, nil)

	// A login post without the form's CSRF token is refused.
	action, fields := handlerstest.Form(t, page)
	fields.Del("csrf_token")
	fields.Set("email", "doc@example.org")
	fields.Set("password", handlerstest.Password)
	if resp, _ := b.Do("POST", env.URL+action, fields); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("login without CSRF token: %d", resp.StatusCode)
	}
	_, page = b.Do("GET", authURL, nil)
	_, page = b.Login(page, "doc@example.org", handlerstest.Password)

	// A consent post without the CSRF token issues nothing.
	action, fields = handlerstest.Form(t, page)
	fields.Set("csrf_token", "forged-token-forged-token-forged-token-1")
	fields.Set("decision", "allow")
	if resp, _ := b.Do("POST", env.URL+action, fields); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("consent with a forged CSRF token: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if got := redirectParams(t, decide(b, page, "deny")).Get("error"); got != "access_denied" {
		t.Fatalf("deny: error %q", got)
	}
}

func TestLoginErrorsAndThrottling(t *testing.T) {
	env := handlerstest.Start(t)
	env.Clock.Stop()
	env.Practitioner(t, "doc@example.org", false)
	b := newBrowser(t, env)
	_, page := b.Do("GET", env.URL+"/o/login/", nil)
	resp, page := b.Login(page, "doc@example.org", "wrong password")
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, `role="alert"`) || !strings.Contains(page, "The email or password is incorrect.") {
		t.Fatalf("wrong password: %d\n%s", resp.StatusCode, page)
	}
	if !strings.Contains(page, `value="doc@example.org"`) || !strings.Contains(page, `aria-invalid="true"`) {
		t.Error("the login page should keep the email and mark the fields invalid")
	}
	for range 4 {
		_, page = b.Login(page, "doc@example.org", "wrong password")
	}
	// After five failures from one address the next attempt waits a
	// second, even with the right password; then it gets in.
	resp, page = b.Login(page, "doc@example.org", handlerstest.Password)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" ||
		!strings.Contains(page, "Too many failed sign-ins; try again in 1 second.") {
		t.Fatalf("after 5 failures: %d Retry-After %q\n%s", resp.StatusCode, resp.Header.Get("Retry-After"), page)
	}
	env.Clock.Advance(time.Second)
	resp, page = b.Login(page, "doc@example.org", handlerstest.Password)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "You are signed in as doc@example.org") {
		t.Fatalf("after the delay: %d\n%s", resp.StatusCode, page)
	}
}

func TestIntrospectionAndRevocation(t *testing.T) {
	env := handlerstest.Start(t)
	ctx := context.Background()
	user := env.Practitioner(t, "doc@example.org", false)
	client, secret := env.Client(t, oauth.ClientRegistration{Name: "Gateway", Type: domain.ClientConfidential, RedirectURIs: []string{redirectURI}, SkipAuthorization: true})
	public, _ := env.Client(t, oauth.ClientRegistration{Name: "Public", Type: domain.ClientPublic, RedirectURIs: []string{redirectURI}})
	cfg := oauthConfig(env, client.ID, secret)
	verifier := oauth2.GenerateVerifier()
	tok, err := cfg.Exchange(ctx, authorize(t, env, cfg, "doc@example.org", verifier), oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	introspect := func(clientID, clientSecret, token string) (int, map[string]any) {
		return introspectAs(t, env, clientID, clientSecret, token)
	}
	status, body := introspect(client.ID, secret, tok.AccessToken)
	if status != http.StatusOK || body["active"] != true || body["sub"] != strconv.FormatInt(user.ID, 10) ||
		body["client_id"] != client.ID || body["username"] != "doc@example.org" || body["scope"] != "openid profile email offline_access" {
		t.Fatalf("introspection: %d %v", status, body)
	}
	if aud, _ := body["aud"].([]any); len(aud) != 1 || aud[0] != client.ID {
		t.Errorf("aud = %v", body["aud"])
	}
	for _, k := range []string{"exp", "iat"} {
		if _, ok := body[k].(float64); !ok {
			t.Errorf("%s missing: %v", k, body)
		}
	}
	if status, _ := introspect(client.ID, "wrong secret", tok.AccessToken); status != http.StatusUnauthorized {
		t.Errorf("wrong client secret: %d", status)
	}
	if status, _ := introspect(public.ID, "", tok.AccessToken); status != http.StatusUnauthorized {
		t.Errorf("public client: %d", status)
	}
	if status, _ := introspect("", "", tok.AccessToken); status != http.StatusUnauthorized {
		t.Errorf("no client: %d", status)
	}

	// Revoking the refresh token revokes the grant's access token too.
	form := url.Values{"token": {tok.RefreshToken}, "token_type_hint": {"refresh_token"}}
	req, _ := http.NewRequest("POST", env.URL+"/o/revoke_token/", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(client.ID, secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("revocation: %d", resp.StatusCode)
	}
	if _, body := introspect(client.ID, secret, tok.AccessToken); body["active"] != false {
		t.Errorf("revoked access token introspects as %v", body)
	}
	profile(t, env, tok.AccessToken, http.StatusUnauthorized)
	if _, err := refresh(ctx, cfg, tok.RefreshToken); !isOAuthError(err, "invalid_grant") {
		t.Errorf("revoked refresh token: %v", err)
	}
}

// introspectAs asks the introspection endpoint about a token as a client
// (HTTP Basic; none when clientID is empty).
func introspectAs(t *testing.T, env *handlerstest.Env, clientID, clientSecret, token string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", env.URL+"/o/introspect/", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if clientID != "" {
		req.SetBasicAuth(clientID, clientSecret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

func TestUserinfo(t *testing.T) {
	env := handlerstest.Start(t)
	ctx := context.Background()
	user := env.Practitioner(t, "doc@example.org", false)
	client, _ := env.Client(t, oauth.ClientRegistration{Name: "App", Type: domain.ClientPublic, RedirectURIs: []string{redirectURI}, SkipAuthorization: true})
	cfg := oauthConfig(env, client.ID, "")
	verifier := oauth2.GenerateVerifier()
	tok, err := cfg.Exchange(ctx, authorize(t, env, cfg, "doc@example.org", verifier), oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cfg.Client(ctx, tok).Get(env.URL + "/o/userinfo/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var claims map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&claims)
	if resp.StatusCode != http.StatusOK || claims["sub"] != strconv.FormatInt(user.ID, 10) || claims["email"] != "doc@example.org" || claims["family_name"] != "Practitioner" {
		t.Fatalf("userinfo: %d %v", resp.StatusCode, claims)
	}
	bad, _ := http.NewRequest("GET", env.URL+"/o/userinfo/", nil)
	bad.Header.Set("Authorization", "Bearer nonsense")
	resp, err = http.DefaultClient.Do(bad)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "invalid_token") {
		t.Errorf("userinfo with a bad token: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
}

func TestPatientAuthorizationCode(t *testing.T) {
	env := handlerstest.Start(t)
	ctx := context.Background()
	patient := env.Invitee(t, "pat@example.org")
	client, _ := env.Client(t, oauth.ClientRegistration{Name: "Patient app", Type: domain.ClientPublic, RedirectURIs: []string{"https://app.example.test/invite?lang=en"}})
	cfg := oauthConfig(env, client.ID, "")
	cfg.RedirectURL = client.RedirectURIs[0]

	code, err := env.OAuth.IssuePatientCode(ctx, patient.UserID, client.ID)
	if err != nil {
		t.Fatal(err)
	}
	link, _ := url.Parse(code.Link)
	if link.Host != "app.example.test" || link.Query().Get("code") != code.Code || link.Query().Get("lang") != "en" {
		t.Errorf("invitation link %s", code.Link)
	}
	if d := code.ExpiresAt.Sub(env.Clock.Now()); d < handlerstest.PatientCodeTTL-time5s || d > handlerstest.PatientCodeTTL+time5s {
		t.Errorf("code valid for %v, want %v", d, handlerstest.PatientCodeTTL)
	}
	if _, err := cfg.Exchange(ctx, code.Code, oauth2.VerifierOption(oauth2.GenerateVerifier())); !isOAuthError(err, "invalid_grant") {
		t.Fatalf("patient code with a wrong verifier: %v", err)
	}

	code, err = env.OAuth.IssuePatientCode(ctx, patient.UserID, client.ID)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := cfg.Exchange(ctx, code.Code, oauth2.VerifierOption(handlerstest.PatientVerifier))
	if err != nil {
		t.Fatalf("redeeming the patient code: %v", err)
	}
	body := profile(t, env, tok.AccessToken, http.StatusOK)
	if p, _ := body["patient"].(map[string]any); p == nil || p["id"] != float64(patient.ID) {
		t.Errorf("profile of the patient token: %v", body)
	}
	if _, err := cfg.Exchange(ctx, code.Code, oauth2.VerifierOption(handlerstest.PatientVerifier)); !isOAuthError(err, "invalid_grant") {
		t.Errorf("second redemption: %v", err)
	}

	// A code issued longer ago than its lifetime is refused.
	env.Clock.Advance(-handlerstest.PatientCodeTTL - 60*1e9)
	old, err := env.OAuth.IssuePatientCode(ctx, patient.UserID, client.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.Exchange(ctx, old.Code, oauth2.VerifierOption(handlerstest.PatientVerifier)); !isOAuthError(err, "invalid_grant") {
		t.Errorf("expired patient code: %v", err)
	}

	if _, err := env.OAuth.IssuePatientCode(ctx, patient.UserID, "unknown-client"); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("unknown client: %v", err)
	}
}

const time5s = 5 * 1e9

func TestDiscoveryDocuments(t *testing.T) {
	env := handlerstest.StartWith(t, handlerstest.Options{TrustedProxies: "127.0.0.1"})
	get := func(path string, header http.Header) (*http.Response, map[string]any) {
		req, _ := http.NewRequest("GET", env.URL+path, nil)
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp, body
	}
	resp, doc := get("/o/.well-known/openid-configuration", nil)
	if resp.StatusCode != http.StatusOK || doc["issuer"] != env.URL+"/o" || doc["token_endpoint"] != env.URL+"/o/token/" ||
		doc["jwks_uri"] != env.URL+"/o/.well-known/jwks.json" || doc["authorization_endpoint"] != env.URL+"/o/authorize/" {
		t.Fatalf("discovery: %d %v", resp.StatusCode, doc)
	}
	for key, want := range map[string]string{
		"code_challenge_methods_supported":                 `["S256"]`,
		"response_types_supported":                         `["code"]`,
		"grant_types_supported":                            `["authorization_code","refresh_token","client_credentials"]`,
		"id_token_signing_alg_values_supported":            `["RS256"]`,
		"token_endpoint_auth_methods_supported":            `["client_secret_basic","client_secret_post","none","private_key_jwt"]`,
		"token_endpoint_auth_signing_alg_values_supported": `["RS384","ES384"]`,
	} {
		if got, _ := json.Marshal(doc[key]); string(got) != want {
			t.Errorf("%s = %s, want %s", key, got, want)
		}
	}
	for _, key := range []string{"userinfo_endpoint", "introspection_endpoint", "revocation_endpoint", "scopes_supported", "subject_types_supported"} {
		if doc[key] == nil {
			t.Errorf("%s missing", key)
		}
	}
	proxiedResp, proxied := get("/o/.well-known/openid-configuration", http.Header{"X-Forwarded-Proto": {"https"}, "X-Forwarded-Host": {"exchange.example.org"}})
	if proxied["issuer"] != "https://exchange.example.org/o" || proxied["userinfo_endpoint"] != "https://exchange.example.org/o/userinfo/" {
		t.Errorf("behind a proxy: %v", proxied)
	}
	if v := proxiedResp.Header.Get("Vary"); !strings.Contains(v, "X-Forwarded-Host") || !strings.Contains(v, "X-Forwarded-Proto") {
		t.Errorf("a document built from forwarded headers must vary on them: Vary %q", v)
	}
	if resp, jwks := get("/o/.well-known/jwks.json", nil); resp.StatusCode != http.StatusOK || len(jwks["keys"].([]any)) != 1 {
		t.Errorf("jwks: %d %v", resp.StatusCode, jwks)
	}
}

func TestBearerTokensForScripts(t *testing.T) {
	env := handlerstest.Start(t)
	ctx := context.Background()
	user := env.Practitioner(t, "script@example.org", true)
	token, _, err := env.OAuth.IssueAccessToken(ctx, user.ID, 60*60*1e9)
	if err != nil {
		t.Fatal(err)
	}
	if body := profile(t, env, token, http.StatusOK); body["email"] != "script@example.org" || body["isSuperuser"] != true || body["patient"] != nil {
		t.Errorf("profile: %v", body)
	}
	// Issued two hours ago with a one-hour lifetime: expired.
	env.Clock.Advance(-2 * 60 * 60 * 1e9)
	expired, _, err := env.OAuth.IssueAccessToken(ctx, user.ID, 60*60*1e9)
	if err != nil {
		t.Fatal(err)
	}
	profile(t, env, expired, http.StatusUnauthorized)
	for _, header := range []string{"", "Bearer", "Basic abc", "Bearer " + token + "x"} {
		req, _ := http.NewRequest("GET", env.URL+"/api/v1/users/profile", nil)
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || body["detail"] == "" || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("Authorization %q: %d %v %q", header, resp.StatusCode, body, resp.Header.Get("WWW-Authenticate"))
		}
	}
}

func TestApplicationRegistrationPage(t *testing.T) {
	env := handlerstest.Start(t)
	ctx := context.Background()
	env.Practitioner(t, "admin@example.org", true)
	env.Patient(t, "pat@example.org")

	anonymous := newBrowser(t, env)
	resp, page := anonymous.Do("GET", env.URL+"/o/applications/register/", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `name="next" value="/o/applications/register/"`) {
		t.Fatalf("anonymous: %d\n%s", resp.StatusCode, page)
	}
	patient := newBrowser(t, env)
	_, page = patient.Do("GET", env.URL+"/o/login/", nil)
	patient.Login(page, "pat@example.org", handlerstest.Password)
	if resp, _ := patient.Do("GET", env.URL+"/o/applications/register/", nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a patient may not register clients: %d", resp.StatusCode)
	}

	admin := newBrowser(t, env)
	_, page = admin.Do("GET", env.URL+"/o/applications/register/", nil)
	_, page = admin.Login(page, "admin@example.org", handlerstest.Password)
	for _, label := range []string{"Name", "Client type", "Authorization grant type", "Redirect URIs", "Algorithm", "Post-logout redirect URIs", "Allowed origins"} {
		if !strings.Contains(page, ">"+label+"<") {
			t.Errorf("register form lacks the field %q", label)
		}
	}
	action, fields := handlerstest.Form(t, page)
	fields.Set("name", "Research dashboard")
	fields.Set("client_type", "confidential")
	fields.Set("authorization_grant_type", "authorization-code")
	fields.Set("algorithm", "RS256")
	fields.Set("redirect_uris", "http://dashboard.example.org/cb")
	resp, page = admin.Do("POST", env.URL+action, fields)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, "use https") || !strings.Contains(page, "Research dashboard") {
		t.Fatalf("http redirect URI: %d\n%s", resp.StatusCode, page)
	}
	fields.Set("redirect_uris", "https://dashboard.example.org/cb\nhttp://localhost:5000/cb")
	resp, page = admin.Do("POST", env.URL+action, fields)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("register: %d\n%s", resp.StatusCode, page)
	}
	id := regexp.MustCompile(`id="client-id">([^<]+)<`).FindStringSubmatch(page)
	secret := regexp.MustCompile(`id="client-secret">([^<]+)<`).FindStringSubmatch(page)
	if id == nil || secret == nil {
		t.Fatalf("the result page shows no client id or secret:\n%s", page)
	}
	stored, err := env.DB.OAuthClient(ctx, id[1])
	if err != nil {
		t.Fatal(err)
	}
	if stored.SecretHash == "" || strings.Contains(stored.SecretHash, secret[1]) || stored.Type != domain.ClientConfidential ||
		len(stored.RedirectURIs) != 2 || stored.UserID == 0 {
		t.Errorf("stored client %+v", stored)
	}
	// The secret works, once shown: the client can introspect with it.
	req, _ := http.NewRequest("POST", env.URL+"/o/introspect/", strings.NewReader("token=x"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(id[1], secret[1])
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("introspection with the new secret: %d", resp.StatusCode)
	}
	// Rotating the secret replaces it.
	newSecret, err := env.OAuth.RotateClientSecret(ctx, id[1])
	if err != nil || newSecret == secret[1] {
		t.Fatalf("rotate: %q %v", newSecret, err)
	}
	fields.Del("csrf_token")
	if resp, _ := admin.Do("POST", env.URL+action, fields); resp.StatusCode != http.StatusForbidden {
		t.Errorf("registration without CSRF token: %d", resp.StatusCode)
	}
}

func TestIDTokenCarriesEmailOnlyWithEmailScope(t *testing.T) {
	env := handlerstest.Start(t)
	ctx := context.Background()
	env.Practitioner(t, "doc@example.org", false)
	client, _ := env.Client(t, oauth.ClientRegistration{Name: "App", Type: domain.ClientPublic, RedirectURIs: []string{redirectURI}, SkipAuthorization: true})
	cfg := oauthConfig(env, client.ID, "")
	cfg.Scopes = []string{"openid"}
	verifier := oauth2.GenerateVerifier()
	tok, err := cfg.Exchange(ctx, authorize(t, env, cfg, "doc@example.org", verifier), oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	claims := jwt.MapClaims{}
	if _, _, err := jwt.NewParser().ParseUnverified(tok.Extra("id_token").(string), claims); err != nil {
		t.Fatal(err)
	}
	if _, ok := claims["email"]; ok || claims["sub"] == nil {
		t.Errorf("ID token without the email scope: %v", claims)
	}
}

// TestLoginNextAndSessionUser: a login returns to any local path (the
// console's), never to another origin; the session cookie covers the whole
// origin, and SessionUser names its user while the user is active.
func TestLoginNextAndSessionUser(t *testing.T) {
	env := handlerstest.Start(t)
	u := env.Practitioner(t, "doc@example.org", false)
	for _, tc := range []struct{ next, want string }{
		{"/console/studies/?page=2", "/console/studies/?page=2"},
		{"/o/applications/register/", "/o/applications/register/"},
		{"https://evil.example/", "/o/login/"},
		{"//evil.example/x", "/o/login/"},
		{"/\\evil.example/x", "/o/login/"},
		{"console/", "/o/login/"},
	} {
		b := handlerstest.NewBrowser(t, func(*url.URL) bool { return true })
		_, page := b.Do("GET", env.URL+"/o/login/?next="+url.QueryEscape(tc.next), nil)
		resp, _ := b.Login(page, "doc@example.org", handlerstest.Password)
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != tc.want {
			t.Errorf("next %q: %d Location %q, want %q", tc.next, resp.StatusCode, resp.Header.Get("Location"), tc.want)
		}
		var session, legacy *http.Cookie
		for _, c := range resp.Cookies() {
			switch {
			case c.Name == "exchange_session" && c.Path == "/":
				session = c
			case c.Name == "exchange_session" && c.Path == "/o/":
				legacy = c
			}
		}
		if legacy == nil || legacy.MaxAge >= 0 {
			t.Errorf("next %q: the login does not drop the session cookie of the old path /o/: %+v", tc.next, legacy)
		}
		if session == nil || session.Path != "/" || !session.HttpOnly {
			t.Fatalf("next %q: session cookie %+v, want HttpOnly with Path /", tc.next, session)
		}
		req, _ := http.NewRequest("GET", env.URL+"/console/", nil)
		req.AddCookie(session)
		if user, ok := env.OAuth.SessionUser(req); !ok || user.ID != u.ID {
			t.Errorf("SessionUser = %+v, %v; want %d", user, ok, u.ID)
		}
		if tc.next == "console/" {
			// A forged or inactive session names nobody.
			forged := *session
			forged.Value = session.Value[:len(session.Value)-1] + map[bool]string{true: "y", false: "x"}[strings.HasSuffix(session.Value, "x")]
			req, _ = http.NewRequest("GET", env.URL+"/console/", nil)
			req.AddCookie(&forged)
			if _, ok := env.OAuth.SessionUser(req); ok {
				t.Error("a forged session names a user")
			}
			inactive := false
			if _, err := env.DB.ChangeUser(context.Background(), u.ID, domain.UserChange{IsActive: &inactive}); err != nil {
				t.Fatal(err)
			}
			req, _ = http.NewRequest("GET", env.URL+"/console/", nil)
			req.AddCookie(session)
			if _, ok := env.OAuth.SessionUser(req); ok {
				t.Error("an inactive user's session names them")
			}
		}
	}
}
