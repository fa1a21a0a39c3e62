package oauth_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/oauth2"

	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/oauth"
)

// postForm posts a form to an /o/ endpoint, with HTTP Basic (the
// credentials form-encoded, as RFC 6749 has it) when user is set, and
// decodes the JSON answer.
func postForm(t *testing.T, env *handlerstest.Env, path string, form url.Values, user, pass string) (*http.Response, map[string]any) {
	t.Helper()
	header := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	if user != "" {
		header["Authorization"] = "Basic " + base64.StdEncoding.EncodeToString([]byte(url.QueryEscape(user)+":"+url.QueryEscape(pass)))
	}
	return handlerstest.SendTo(t, "POST", env.URL+path, "", form.Encode(), header)
}

// codeFlow runs the authorization request of cfg with scopes as email,
// lets decide answer the pages after the login (nil: allow everything
// asked), and redeems the code.
func codeFlow(t *testing.T, env *handlerstest.Env, cfg *oauth2.Config, email string, decide func(b *handlerstest.Browser, page string) *http.Response, opts ...oauth2.AuthCodeOption) *oauth2.Token {
	t.Helper()
	verifier := oauth2.GenerateVerifier()
	b := newBrowser(t, env)
	_, page := b.Do("GET", cfg.AuthCodeURL(state, append(opts, oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("nonce", nonce))...), nil)
	resp, page := b.Login(page, email, handlerstest.Password)
	if decide != nil {
		resp = decide(b, page)
	} else if strings.Contains(page, `value="allow"`) {
		resp, _ = b.Submit(page, url.Values{"decision": {"allow"}})
	}
	q := redirectParams(t, resp)
	if q.Get("code") == "" {
		t.Fatalf("no code: %v", q)
	}
	tok, err := cfg.Exchange(context.Background(), q.Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func idTokenClaims(t *testing.T, tok *oauth2.Token) jwt.MapClaims {
	t.Helper()
	claims := jwt.MapClaims{}
	if _, _, err := jwt.NewParser().ParseUnverified(tok.Extra("id_token").(string), claims); err != nil {
		t.Fatal(err)
	}
	return claims
}

func fhirStatus(t *testing.T, env *handlerstest.Env, token, path string) (int, map[string]any) {
	t.Helper()
	resp, out := env.GetJSON(t, "/FHIR/R5/"+path, token)
	return resp.StatusCode, out
}

func TestConsentListsScopesAndGrantsWhatIsTicked(t *testing.T) {
	env := handlerstest.Start(t)
	env.Practitioner(t, "doc@example.org", false)
	client, _ := env.Client(t, oauth.ClientRegistration{Name: "SMART app", Type: domain.ClientPublic, RedirectURIs: []string{redirectURI}})
	cfg := oauthConfig(env, client.ID, "")
	cfg.Scopes = []string{"openid", "email", "fhirUser", "user/*.rs", "patient/Observation.rs?code=omh:heart-rate:2.0", "exchange/admin.read"}
	var consent string
	tok := codeFlow(t, env, cfg, "doc@example.org", func(b *handlerstest.Browser, page string) *http.Response {
		consent = page
		// Untick all but email and the admin reads; ask for a scope that
		// was not requested.
		resp, _ := b.Submit(page, url.Values{"decision": {"allow"}, "scope": {"email", "exchange/admin.read", "user/*.cruds"}})
		return resp
	})
	for _, want := range []string{
		"Read and search the data of every kind you can see",
		"Read and search the Observation data of the patient you choose (only with code omh:heart-rate:2.0)",
		"Read the administration data you can see",
		"Know which FHIR record stands for you",
		`name="scope" value="user/*.rs" checked`,
		`id="scope-0" checked disabled`, // openid cannot be unticked
	} {
		if !strings.Contains(consent, want) {
			t.Errorf("the consent page lacks %q:\n%s", want, consent)
		}
	}
	if got := tok.Extra("scope"); got != "openid email exchange/admin.read" {
		t.Errorf("granted scope = %v, want what was ticked: openid email exchange/admin.read", got)
	}
	if claims := idTokenClaims(t, tok); claims["fhirUser"] != nil || claims["email"] != "doc@example.org" {
		t.Errorf("ID token claims of the unticked fhirUser: %v", claims)
	}
	// The unticked resource scopes are not granted
	// (TestUntickingNeverWidensAConsent: unticking all of them is refused).
	if status, _ := fhirStatus(t, env, tok.AccessToken, "Patient"); status != http.StatusForbidden {
		t.Errorf("a token of openid email exchange/admin.read searches patients: %d", status)
	}
}

func TestRefreshMayNarrowNeverWiden(t *testing.T) {
	env := handlerstest.Start(t)
	patient := env.Patient(t, "pat@example.org")
	client, _ := env.Client(t, oauth.ClientRegistration{Name: "App", Type: domain.ClientPublic, RedirectURIs: []string{redirectURI}, SkipAuthorization: true})
	cfg := oauthConfig(env, client.ID, "")
	cfg.Scopes = []string{"openid", "fhirUser", "launch/patient", "user/*.rs", "offline_access"}
	tok := codeFlow(t, env, cfg, "pat@example.org", nil)
	if got := tok.Extra("scope"); got != "openid fhirUser launch/patient user/*.rs offline_access" {
		t.Fatalf("trusted client: granted %v, want what it asked", got)
	}
	refresh := func(rt, scope string) (*http.Response, map[string]any) {
		form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}, "client_id": {client.ID}}
		if scope != "" {
			form.Set("scope", scope)
		}
		return postForm(t, env, "/o/token/", form, "", "")
	}
	// Dropping every resource scope would widen the grant too: scopes that
	// name no access act with the user's full access.
	for _, wider := range []string{"openid user/*.cruds", "openid patient/*.rs", "openid exchange/admin.read", "openid email", "openid nonsense",
		"openid", "openid fhirUser launch/patient offline_access"} {
		if resp, out := refresh(tok.RefreshToken, wider); resp.StatusCode != http.StatusBadRequest || out["error"] != "invalid_scope" {
			t.Errorf("refresh widening to %q: %d %v", wider, resp.StatusCode, out)
		}
	}
	// A refused refresh did not use the refresh token up.
	resp, out := refresh(tok.RefreshToken, "openid launch/patient user/Observation.rs")
	if resp.StatusCode != http.StatusOK || out["scope"] != "openid launch/patient user/Observation.rs" || out["patient"] != strconv.FormatInt(patient.ID, 10) {
		t.Fatalf("narrowing refresh: %d %v", resp.StatusCode, out)
	}
	narrowed := out["access_token"].(string)
	if status, _ := fhirStatus(t, env, narrowed, "Observation"); status != http.StatusOK {
		t.Errorf("the narrowed token searches observations: %d", status)
	}
	if status, oo := fhirStatus(t, env, narrowed, "Patient"); status != http.StatusForbidden || !strings.Contains(fmt.Sprint(oo), "user/Patient.s") {
		t.Errorf("the narrowed token searches patients: %d %v", status, oo)
	}
	// The narrowed grant is what the next refresh starts from.
	if resp, out := refresh(out["refresh_token"].(string), "openid user/*.rs"); resp.StatusCode != http.StatusBadRequest || out["error"] != "invalid_scope" {
		t.Errorf("widening back after narrowing: %d %v", resp.StatusCode, out)
	}
}

func TestLaunchPatientOfAPatient(t *testing.T) {
	env := handlerstest.Start(t)
	patient := env.Patient(t, "pat@example.org")
	client, secret := env.Client(t, oauth.ClientRegistration{Name: "Patient app", Type: domain.ClientConfidential, RedirectURIs: []string{redirectURI}})
	cfg := oauthConfig(env, client.ID, secret)
	cfg.Scopes = []string{"openid", "fhirUser", "launch/patient", "patient/*.rs", "offline_access"}
	var consent string
	tok := codeFlow(t, env, cfg, "pat@example.org", func(b *handlerstest.Browser, page string) *http.Response {
		consent = page
		resp, _ := b.Submit(page, url.Values{"decision": {"allow"}})
		return resp
	})
	if !strings.Contains(consent, "Open your patient record") || !strings.Contains(consent, "Read and search your data of every kind") {
		t.Errorf("a patient's consent page:\n%s", consent)
	}
	id := strconv.FormatInt(patient.ID, 10)
	if tok.Extra("patient") != id {
		t.Errorf("token response patient = %v, want %s", tok.Extra("patient"), id)
	}
	wantUser := env.URL + "/FHIR/R5/Patient/" + id
	if claims := idTokenClaims(t, tok); claims["fhirUser"] != wantUser {
		t.Errorf("ID token fhirUser = %v, want %s", claims["fhirUser"], wantUser)
	}
	resp, err := cfg.Client(context.Background(), tok).Get(env.URL + "/o/userinfo/")
	if err != nil {
		t.Fatal(err)
	}
	var info map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if info["fhirUser"] != wantUser {
		t.Errorf("userinfo %v", info)
	}
	if status, body := fhirStatus(t, env, tok.AccessToken, "Patient/"+id); status != http.StatusOK || body["id"] != id {
		t.Errorf("the patient reads their record: %d %v", status, body)
	}
	// Introspection names the patient context; a refresh keeps it.
	_, in := postForm(t, env, "/o/introspect/", url.Values{"token": {tok.AccessToken}}, client.ID, secret)
	if in["active"] != true || in["patient"] != id || in["scope"] != "openid fhirUser launch/patient patient/*.rs offline_access" {
		t.Errorf("introspection %v", in)
	}
	rotated, err := refresh(context.Background(), cfg, tok.RefreshToken)
	if err != nil || rotated.Extra("patient") != id {
		t.Fatalf("refresh: %v patient %v", err, rotated.Extra("patient"))
	}
	if claims := idTokenClaims(t, rotated); claims["fhirUser"] != wantUser {
		t.Errorf("refreshed ID token fhirUser = %v", claims["fhirUser"])
	}
}

func TestLaunchPatientPickedByAPractitioner(t *testing.T) {
	env := handlerstest.Start(t)
	ctx := context.Background()
	sys := domain.SystemActor()
	doc := env.Practitioner(t, "doc@example.org", false)
	clinic := env.Patient(t, "alice@example.org") // creates the Test Organization
	org, _ := env.Service.OrganizationByName(ctx, "Test Organization", 0)
	if err := env.Service.AddMember(ctx, sys, org.ID, doc.ID, domain.RoleMember); err != nil {
		t.Fatal(err)
	}
	other, err := env.Service.CreatePatient(ctx, sys, domain.NewPatient{Email: "bob@example.org", FamilyName: "Okafor", GivenNames: []string{"Bob"}, OrganizationIDs: []int64{org.ID}})
	if err != nil {
		t.Fatal(err)
	}
	elsewhere, err := env.Service.CreateOrganization(ctx, sys, domain.NewOrganization{Name: "Elsewhere", Type: "prov"})
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := env.Service.CreatePatient(ctx, sys, domain.NewPatient{Email: "carol@example.org", FamilyName: "Doe", GivenNames: []string{"Carol"}, OrganizationIDs: []int64{elsewhere.ID}})
	if err != nil {
		t.Fatal(err)
	}
	client, _ := env.Client(t, oauth.ClientRegistration{Name: "Clinician app", Type: domain.ClientPublic, RedirectURIs: []string{redirectURI}})
	cfg := oauthConfig(env, client.ID, "")
	cfg.Scopes = []string{"openid", "fhirUser", "launch/patient", "patient/*.rs", "offline_access"}

	tok := codeFlow(t, env, cfg, "doc@example.org", func(b *handlerstest.Browser, page string) *http.Response {
		if !strings.Contains(page, "Open the record of a patient you choose next") {
			t.Errorf("consent page:\n%s", page)
		}
		resp, picker := b.Submit(page, url.Values{"decision": {"allow"}})
		if resp.StatusCode != http.StatusOK || !strings.Contains(picker, "Choose a patient") ||
			!strings.Contains(picker, "Jo Doe, born 1980-01-02") || !strings.Contains(picker, "Bob Okafor") || strings.Contains(picker, "Carol") {
			t.Fatalf("the picker lists the practitioner's patients only: %d\n%s", resp.StatusCode, picker)
		}
		// Search by name: the form keeps the scopes allowed on the consent page.
		_, picker = b.Submit(picker, url.Values{"patient_name": {"oka"}})
		if !strings.Contains(picker, "Bob Okafor") || strings.Contains(picker, "Jo Doe") {
			t.Fatalf("name search:\n%s", picker)
		}
		// A patient the practitioner may not read, posted by hand: refused
		// as if unknown, and no code is issued.
		for _, forged := range []string{strconv.FormatInt(stranger.ID, 10), "999999", "x"} {
			resp, page := b.SubmitForm(picker, 1, url.Values{"launch_patient": {forged}})
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(page, "You may not open that record") {
				t.Errorf("choosing %s: %d %s\n%s", forged, resp.StatusCode, resp.Header.Get("Location"), page)
			}
		}
		resp, _ = b.SubmitForm(picker, 1, url.Values{"launch_patient": {strconv.FormatInt(other.ID, 10)}})
		return resp
	})
	bob := strconv.FormatInt(other.ID, 10)
	if tok.Extra("patient") != bob || tok.Extra("scope") != "openid fhirUser launch/patient patient/*.rs offline_access" {
		t.Fatalf("token response %v %v", tok.Extra("patient"), tok.Extra("scope"))
	}
	if claims := idTokenClaims(t, tok); claims["fhirUser"] != env.URL+"/FHIR/R5/Practitioner/"+strconv.FormatInt(doc.ID, 10) {
		t.Errorf("fhirUser %v", claims["fhirUser"])
	}
	// patient/ scopes reach the chosen patient only, though the practitioner reads both.
	if status, _ := fhirStatus(t, env, tok.AccessToken, "Patient/"+bob); status != http.StatusOK {
		t.Errorf("reading the chosen patient: %d", status)
	}
	if status, _ := fhirStatus(t, env, tok.AccessToken, "Patient/"+strconv.FormatInt(clinic.ID, 10)); status != http.StatusNotFound {
		t.Errorf("reading another patient of the practitioner: %d", status)
	}
	if _, bundle := fhirStatus(t, env, tok.AccessToken, "Patient"); (bundle["total"] != nil && bundle["total"] != float64(1)) || len(bundle["entry"].([]any)) != 1 {
		t.Errorf("patient search under patient/*.rs: %v", bundle)
	}
	rotated, err := refresh(ctx, cfg, tok.RefreshToken)
	if err != nil || rotated.Extra("patient") != bob {
		t.Fatalf("the launch context survives a refresh: %v %v", err, rotated.Extra("patient"))
	}
	if status, _ := fhirStatus(t, env, rotated.AccessToken, "Patient/"+strconv.FormatInt(clinic.ID, 10)); status != http.StatusNotFound {
		t.Errorf("after refresh, reading another patient: %d", status)
	}

	// Without an interaction, a practitioner's launch cannot be completed.
	trusted, _ := env.Client(t, oauth.ClientRegistration{Name: "Trusted", Type: domain.ClientPublic, RedirectURIs: []string{redirectURI}, SkipAuthorization: true})
	b := newBrowser(t, env)
	_, page := b.Do("GET", env.URL+"/o/login/", nil)
	b.Login(page, "doc@example.org", handlerstest.Password)
	tcfg := oauthConfig(env, trusted.ID, "")
	tcfg.Scopes = cfg.Scopes
	resp, _ := b.Do("GET", tcfg.AuthCodeURL(state, oauth2.S256ChallengeOption(oauth2.GenerateVerifier()), oauth2.SetAuthURLParam("prompt", "none")), nil)
	if got := redirectParams(t, resp).Get("error"); got != "interaction_required" {
		t.Errorf("prompt=none with a patient to choose: %q", got)
	}
	// A trusted client skips consent, not the picker.
	resp, page = b.Do("GET", tcfg.AuthCodeURL(state, oauth2.S256ChallengeOption(oauth2.GenerateVerifier())), nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "Choose a patient") {
		t.Errorf("trusted client with launch/patient: %d\n%s", resp.StatusCode, page)
	}
}

func TestScopesRefused(t *testing.T) {
	env := handlerstest.Start(t)
	env.Practitioner(t, "doc@example.org", false)
	narrow, _ := env.Client(t, oauth.ClientRegistration{Name: "Narrow", Type: domain.ClientPublic, RedirectURIs: []string{redirectURI},
		Scopes: []string{"openid", "patient/Observation.rs", "launch/patient"}})
	wide, _ := env.Client(t, oauth.ClientRegistration{Name: "Wide", Type: domain.ClientPublic, RedirectURIs: []string{redirectURI}})
	for _, tc := range []struct {
		client, scope string
		want          string // the error redirected, or "" when the consent page shows
		extra         url.Values
	}{
		{wide.ID, "openid nonsense", "invalid_scope", nil},
		{wide.ID, "openid patient/Foo.rs", "invalid_scope", nil},
		{wide.ID, "openid system/*.rs", "invalid_scope", nil},
		{wide.ID, "openid launch", "invalid_scope", nil},
		{wide.ID, "openid patient/Observation.rs?status=final", "invalid_scope", nil},
		{wide.ID, "openid patient/Observation.sr", "invalid_scope", nil},
		{narrow.ID, "openid patient/Patient.rs", "invalid_scope", nil},
		{narrow.ID, "openid user/Observation.rs", "invalid_scope", nil},
		{narrow.ID, "openid patient/Observation.rs email", "invalid_scope", nil},
		{narrow.ID, "openid patient/Observation.r?code=omh:heart-rate:2.0", "", nil},
		{wide.ID, "openid patient/*.read user/Observation.write launch/patient fhirUser", "", nil},
		{wide.ID, "openid user/*.rs", "invalid_request", url.Values{"aud": {"https://evil.example.org/fhir"}}},
		{wide.ID, "openid user/*.rs", "", url.Values{"aud": {env.URL + "/FHIR/R5/"}}},
	} {
		q := url.Values{"client_id": {tc.client}, "response_type": {"code"}, "redirect_uri": {redirectURI}, "scope": {tc.scope},
			"state": {state}, "code_challenge": {oauth2.S256ChallengeFromVerifier(oauth2.GenerateVerifier())}, "code_challenge_method": {"S256"}}
		for k, v := range tc.extra {
			q[k] = v
		}
		b := newBrowser(t, env)
		_, page := b.Do("GET", env.URL+"/o/authorize/?"+q.Encode(), nil)
		if tc.want != "" && !strings.Contains(page, `type="password"`) {
			// Refused before the login page.
			b2 := newBrowser(t, env)
			resp, _ := b2.Do("GET", env.URL+"/o/authorize/?"+q.Encode(), nil)
			if got := redirectParams(t, resp).Get("error"); got != tc.want {
				t.Errorf("%s %q: error %q, want %s", tc.client, tc.scope, got, tc.want)
			}
			continue
		}
		if tc.want != "" {
			t.Errorf("%s %q %v: the login page shows, want %s", tc.client, tc.scope, tc.extra, tc.want)
			continue
		}
		resp, page := b.Login(page, "doc@example.org", handlerstest.Password)
		if resp.StatusCode != http.StatusOK || !strings.Contains(page, `value="allow"`) {
			t.Errorf("%q: want the consent page, got %d %s", tc.scope, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	for _, bad := range [][]string{{"openid", "patient/Foo.rs"}, {"openid", "nonsense"}} {
		_, _, err := env.OAuth.RegisterClient(context.Background(), oauth.ClientRegistration{Name: "Bad", Type: domain.ClientPublic,
			RedirectURIs: []string{redirectURI}, Scopes: bad})
		if !domain.IsCode(err, domain.CodeInvalid) || !strings.Contains(err.Error(), "scopes") {
			t.Errorf("registering scopes %v: %v", bad, err)
		}
	}
	if wide.Scopes == nil || !slices.Equal(wide.Scopes, domain.AllScopes) {
		t.Errorf("a default registration allows every scope: %v", wide.Scopes)
	}
}

func TestClientAuthenticationMethods(t *testing.T) {
	env := handlerstest.Start(t)
	env.Practitioner(t, "doc@example.org", false)
	either, eitherSecret := env.Client(t, oauth.ClientRegistration{Name: "Either", Type: domain.ClientConfidential, RedirectURIs: []string{redirectURI}, SkipAuthorization: true})
	basic, basicSecret := env.Client(t, oauth.ClientRegistration{Name: "Basic", Type: domain.ClientConfidential, RedirectURIs: []string{redirectURI},
		SkipAuthorization: true, TokenEndpointAuthMethod: domain.AuthSecretBasic})
	post, postSecret := env.Client(t, oauth.ClientRegistration{Name: "Post", Type: domain.ClientConfidential, RedirectURIs: []string{redirectURI},
		SkipAuthorization: true, TokenEndpointAuthMethod: domain.AuthSecretPost})
	if either.AuthMethodPinned || !basic.AuthMethodPinned || !post.AuthMethodPinned {
		t.Errorf("pinned only when registered explicitly: %v %v %v", either.AuthMethodPinned, basic.AuthMethodPinned, post.AuthMethodPinned)
	}
	// send posts form as the client: with HTTP Basic or in the body.
	send := func(path, method, id, secret string, form url.Values) (*http.Response, map[string]any) {
		form = cloneValues(form)
		if method == domain.AuthSecretPost {
			form.Set("client_id", id)
			form.Set("client_secret", secret)
			return postForm(t, env, path, form, "", "")
		}
		return postForm(t, env, path, form, id, secret)
	}
	tokens := func(id, secret, method string) map[string]any {
		cfg := oauthConfig(env, id, secret)
		verifier := oauth2.GenerateVerifier()
		code := authorize(t, env, cfg, "doc@example.org", verifier)
		resp, out := send("/o/token/", method, id, secret, url.Values{"grant_type": {"authorization_code"}, "code": {code},
			"redirect_uri": {redirectURI}, "code_verifier": {verifier}})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s with %s at the token endpoint: %d %v", id, method, resp.StatusCode, out)
		}
		return out
	}
	for _, tc := range []struct {
		id, secret string
		methods    []string
	}{
		{either.ID, eitherSecret, []string{domain.AuthSecretBasic, domain.AuthSecretPost}},
		{basic.ID, basicSecret, []string{domain.AuthSecretBasic}},
		{post.ID, postSecret, []string{domain.AuthSecretPost}},
	} {
		for _, method := range []string{domain.AuthSecretBasic, domain.AuthSecretPost} {
			accepted := slices.Contains(tc.methods, method)
			if !accepted {
				// Refused at each endpoint, with the right secret.
				for _, path := range []string{"/o/token/", "/o/introspect/", "/o/revoke_token/"} {
					resp, out := send(path, method, tc.id, tc.secret, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"x"}, "token": {"x"}})
					if resp.StatusCode != http.StatusUnauthorized {
						t.Errorf("%s pinned, %s at %s: %d %v", tc.id, method, path, resp.StatusCode, out)
					}
				}
				continue
			}
			tok := tokens(tc.id, tc.secret, method)
			access, refreshToken := tok["access_token"].(string), tok["refresh_token"].(string)
			resp, out := send("/o/introspect/", method, tc.id, tc.secret, url.Values{"token": {access}})
			if resp.StatusCode != http.StatusOK || out["active"] != true || out["client_id"] != tc.id {
				t.Errorf("%s with %s at introspection: %d %v", tc.id, method, resp.StatusCode, out)
			}
			resp, out = send("/o/token/", method, tc.id, tc.secret, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refreshToken}})
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s with %s refreshing: %d %v", tc.id, method, resp.StatusCode, out)
			}
			resp, _ = send("/o/revoke_token/", method, tc.id, tc.secret, url.Values{"token": {out["refresh_token"].(string)}})
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s with %s at revocation: %d", tc.id, method, resp.StatusCode)
			}
			if _, in := send("/o/introspect/", method, tc.id, tc.secret, url.Values{"token": {out["access_token"].(string)}}); in["active"] != false {
				t.Errorf("%s with %s: the revoked grant's access token is %v", tc.id, method, in)
			}
			// A wrong secret is refused the same way.
			if resp, _ := send("/o/introspect/", method, tc.id, "wrong-secret", url.Values{"token": {access}}); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s with %s and a wrong secret: %d", tc.id, method, resp.StatusCode)
			}
		}
	}
	// One method at a time; a public client sends no secret.
	form := url.Values{"token": {"x"}, "client_id": {either.ID}, "client_secret": {eitherSecret}}
	if resp, out := postForm(t, env, "/o/revoke_token/", form, either.ID, eitherSecret); resp.StatusCode/100 != 4 || out["error"] != "invalid_request" {
		t.Errorf("both methods at once: %d %v", resp.StatusCode, out)
	}
	public, _ := env.Client(t, oauth.ClientRegistration{Name: "Public", Type: domain.ClientPublic, RedirectURIs: []string{redirectURI}})
	if resp, out := postForm(t, env, "/o/token/", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"x"}, "client_id": {public.ID}, "client_secret": {"guess"}}, "", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a public client with a secret: %d %v", resp.StatusCode, out)
	}
	if _, _, err := env.OAuth.RegisterClient(context.Background(), oauth.ClientRegistration{Name: "Bad", Type: domain.ClientPublic,
		RedirectURIs: []string{redirectURI}, TokenEndpointAuthMethod: domain.AuthSecretPost}); !domain.IsCode(err, domain.CodeInvalid) {
		t.Errorf("a public client pinned to a secret method: %v", err)
	}
	_, doc := env.GetJSON(t, "/o/.well-known/openid-configuration", "")
	for _, key := range []string{"token_endpoint_auth_methods_supported", "introspection_endpoint_auth_methods_supported", "revocation_endpoint_auth_methods_supported"} {
		if got := fmt.Sprint(doc[key]); !strings.Contains(got, "client_secret_basic") || !strings.Contains(got, "client_secret_post") {
			t.Errorf("discovery %s = %s", key, got)
		}
	}
}

func cloneValues(v url.Values) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = slices.Clone(vs)
	}
	return out
}

func TestBrowserAppsReachTheTokenEndpoint(t *testing.T) {
	env := handlerstest.Start(t)
	for _, path := range []string{"/o/token/", "/o/revoke_token/", "/o/userinfo/", "/o/.well-known/openid-configuration"} {
		req, _ := http.NewRequest("OPTIONS", env.URL+path, nil)
		req.Header.Set("Origin", "https://app.example.org")
		req.Header.Set("Access-Control-Request-Method", "POST")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
			t.Errorf("preflight of %s: %d %q", path, resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
		}
	}
	resp, _ := postForm(t, env, "/o/token/", url.Values{"grant_type": {"refresh_token"}}, "", "")
	if resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Error("token endpoint answers without CORS")
	}
	// The pages that read the login cookie are not for other origins.
	for _, path := range []string{"/o/authorize/", "/o/login/"} {
		resp, _ := env.GetJSON(t, path, "")
		if resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("%s answers with CORS", path)
		}
	}
}

func TestScopedTokensForScripts(t *testing.T) {
	env := handlerstest.Start(t)
	ctx := context.Background()
	doc := env.Practitioner(t, "doc@example.org", false)
	patient := env.Patient(t, "pat@example.org")
	hour := time.Hour
	if _, _, err := env.OAuth.IssueScopedAccessToken(ctx, doc.ID, hour, []string{"openid", "patient/Foo.rs"}, 0); !domain.IsCode(err, domain.CodeInvalid) {
		t.Errorf("unknown type: %v", err)
	}
	if _, _, err := env.OAuth.IssueScopedAccessToken(ctx, doc.ID, hour, []string{"patient/*.rs"}, 0); !domain.IsCode(err, domain.CodeInvalid) {
		t.Errorf("a practitioner's patient/ token without a patient: %v", err)
	}
	if _, _, err := env.OAuth.IssueScopedAccessToken(ctx, doc.ID, hour, []string{"patient/*.rs"}, patient.ID); !domain.IsCode(err, domain.CodeInvalid) {
		t.Errorf("a patient the practitioner may not read: %v", err)
	}
	token, _, err := env.OAuth.IssueScopedAccessToken(ctx, patient.UserID, hour, []string{"patient/Patient.r"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if status, _ := fhirStatus(t, env, token, "Patient/"+strconv.FormatInt(patient.ID, 10)); status != http.StatusOK {
		t.Errorf("a patient's patient/Patient.r token reads their record: %d", status)
	}
	if resp, out := env.GetJSON(t, "/api/v1/users/profile", token); resp.StatusCode != http.StatusForbidden || !strings.Contains(fmt.Sprint(out["detail"]), "exchange/admin.read") {
		t.Errorf("the admin API with a SMART-limited token: %d %v", resp.StatusCode, out)
	}
}

// TestPublicClientsRefreshWithoutClientID: RFC 6749 asks a public client
// for no client_id when it refreshes, and SMART apps (fhirclient) send
// none; a confidential client's refresh token still needs its secret.
func TestPublicClientsRefreshWithoutClientID(t *testing.T) {
	env := handlerstest.Start(t)
	env.Practitioner(t, "doc@example.org", false)
	public, _ := env.Client(t, oauth.ClientRegistration{Name: "SMART app", Type: domain.ClientPublic, RedirectURIs: []string{redirectURI}, SkipAuthorization: true})
	tok := codeFlow(t, env, oauthConfig(env, public.ID, ""), "doc@example.org", nil)
	resp, out := postForm(t, env, "/o/token/", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken}}, "", "")
	if resp.StatusCode != http.StatusOK || out["access_token"] == nil {
		t.Fatalf("a public client's refresh without client_id: %d %v", resp.StatusCode, out)
	}
	// Reuse is still detected, and revokes the grant.
	if resp, out := postForm(t, env, "/o/token/", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken}}, "", ""); resp.StatusCode != http.StatusBadRequest || out["error"] != "invalid_grant" {
		t.Errorf("reused refresh token: %d %v", resp.StatusCode, out)
	}
	if resp, _ := env.GetJSON(t, "/api/v1/users/profile", out["access_token"].(string)); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the rotated access token after reuse: %d", resp.StatusCode)
	}

	confidential, secret := env.Client(t, oauth.ClientRegistration{Name: "Server app", Type: domain.ClientConfidential, RedirectURIs: []string{redirectURI}, SkipAuthorization: true})
	tok = codeFlow(t, env, oauthConfig(env, confidential.ID, secret), "doc@example.org", nil)
	for _, form := range []url.Values{
		{"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken}},
		{"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken}, "client_id": {confidential.ID}},
	} {
		if resp, out := postForm(t, env, "/o/token/", form, "", ""); resp.StatusCode != http.StatusUnauthorized || out["error"] != "invalid_client" {
			t.Errorf("a confidential client's refresh token without its secret (%v): %d %v", form, resp.StatusCode, out)
		}
	}
	if _, err := refresh(context.Background(), oauthConfig(env, confidential.ID, secret), tok.RefreshToken); err != nil {
		t.Errorf("with its secret, after the refused attempts: %v", err)
	}
}
