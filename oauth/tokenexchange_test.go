package oauth_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/oauth"
	"exchange/oauth/oauthtest"
)

// The EHR launch's token exchange, as JupyterHealth Exchange's own tests
// check it (tests/backend/test_token_exchange.py): an EHR's ID token for
// a practitioner whose identifier is test-practitioner, traded by a
// confidential client.
const (
	ehrAudience        = "smart-client-id"
	idTokenType        = "urn:ietf:params:oauth:token-type:id_token"
	accessTokenType    = "urn:ietf:params:oauth:token-type:access_token"
	tokenExchangeGrant = "urn:ietf:params:oauth:grant-type:token-exchange"
)

type exchangeCase struct {
	name string
	// token changes the ID token's claims, or mints another one.
	claims func(c map[string]any)
	mint   func(ehr *oauthtest.OIDCProvider, c map[string]any) string
	// form changes the request's form; basic sends client credentials
	// by HTTP Basic (id, secret) instead.
	form  func(f url.Values)
	basic []string
	// setup changes the exchange's accounts first.
	setup      func(t *testing.T, env *handlerstest.Env)
	noPractice bool     // no practitioner has the identifier
	scopes     []string // the client's registered scopes (nil: every scope)
	want       int
}

// TestTokenExchangeMatrix is JupyterHealth Exchange's twelve cases, and
// some of its edges, against the whole exchange: its real client
// authentication, an EHR on a loopback port serving its
// smart-configuration and JWKS, and the admin API the issued token opens.
func TestTokenExchangeMatrix(t *testing.T) {
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	cases := []exchangeCase{
		{name: "valid id token issues a token", want: http.StatusOK},
		{name: "a client registered for limited access", scopes: []string{"openid", "user/*.rs"}, want: http.StatusBadRequest},
		{name: "no client authentication", form: func(f url.Values) { f.Del("client_id"); f.Del("client_secret") }, want: http.StatusUnauthorized},
		{name: "wrong client secret", form: func(f url.Values) { f.Set("client_secret", "wrong-secret") }, want: http.StatusUnauthorized},
		{name: "HTTP Basic client authentication", basic: []string{"", ""}, want: http.StatusOK},
		{name: "HTTP Basic with a wrong secret", basic: []string{"", "wrong-secret"}, want: http.StatusUnauthorized},
		{name: "issuer with a trailing slash", claims: func(c map[string]any) { c["iss"] = c["iss"].(string) + "/" }, want: http.StatusOK},
		{name: "untrusted issuer", claims: func(c map[string]any) { c["iss"] = "https://evil.example" }, want: http.StatusForbidden},
		{name: "expired", claims: func(c map[string]any) { c["exp"] = time.Now().Add(-time.Hour).Unix() }, want: http.StatusUnauthorized},
		{name: "HS256", mint: func(_ *oauthtest.OIDCProvider, c map[string]any) string {
			return oauthtest.Sign([]byte("shared-secret-shared-secret-shared-secret"), "test-key-1", jose.HS256, c)
		}, want: http.StatusUnauthorized},
		{name: "alg none", mint: func(_ *oauthtest.OIDCProvider, c map[string]any) string { return oauthtest.Unsigned(c) }, want: http.StatusUnauthorized},
		{name: "signed by another key", mint: func(ehr *oauthtest.OIDCProvider, c map[string]any) string {
			return oauthtest.Sign(other, ehr.KeyID, jose.RS256, c)
		}, want: http.StatusUnauthorized},
		{name: "unknown practitioner", noPractice: true, want: http.StatusNotFound},
		{name: "fhirUser not a Practitioner", claims: func(c map[string]any) { c["fhirUser"] = "Patient/test-practitioner" }, want: http.StatusForbidden},
		{name: "identifier shared by two practitioners", setup: func(t *testing.T, env *handlerstest.Env) {
			practitionerKnownAs(t, env, "dupe@example.org", "test-practitioner")
		}, want: http.StatusNotFound},
		{name: "audience mismatch", form: func(f url.Values) { f.Set("audience", "https://wrong.example.org") }, want: http.StatusBadRequest},
		{name: "missing parameter", form: func(f url.Values) { f.Del("subject_token_type") }, want: http.StatusBadRequest},
		{name: "ID token for another app", claims: func(c map[string]any) { c["aud"] = "another-app" }, want: http.StatusUnauthorized},
		{name: "no fhirUser", claims: func(c map[string]any) { delete(c, "fhirUser") }, want: http.StatusBadRequest},
		{name: "absolute fhirUser", claims: func(c map[string]any) { c["fhirUser"] = "https://ehr.example/fhir/Practitioner/test-practitioner" }, want: http.StatusOK},
		{name: "another scope", form: func(f url.Values) { f.Set("scope", "openid exchange/admin.write") }, want: http.StatusBadRequest},
		// Edges an attacker tries: the audience among others, or absent
		// from a list; the issuer spelled with another case or port; other
		// forms of fhirUser; iat missing or in the future.
		{name: "aud a list holding the audience", claims: func(c map[string]any) { c["aud"] = []string{"another-app", ehrAudience} }, want: http.StatusOK},
		{name: "aud a list without the audience", claims: func(c map[string]any) { c["aud"] = []string{"another-app", "a-third"} }, want: http.StatusUnauthorized},
		{name: "issuer in upper case", claims: func(c map[string]any) { c["iss"] = strings.ToUpper(c["iss"].(string)) }, want: http.StatusForbidden},
		{name: "issuer on another port", claims: func(c map[string]any) {
			u, _ := url.Parse(c["iss"].(string))
			u.Host = u.Hostname() + ":1"
			c["iss"] = u.String()
		}, want: http.StatusForbidden},
		{name: "fhirUser of a version", claims: func(c map[string]any) { c["fhirUser"] = "Practitioner/test-practitioner/_history/2" }, want: http.StatusForbidden},
		{name: "fhirUser with a query", claims: func(c map[string]any) { c["fhirUser"] = "Practitioner/test-practitioner?x=1" }, want: http.StatusNotFound},
		{name: "fhirUser without an id", claims: func(c map[string]any) { c["fhirUser"] = "Practitioner/" }, want: http.StatusBadRequest},
		{name: "fhirUser not a string", claims: func(c map[string]any) { c["fhirUser"] = []string{"Practitioner/test-practitioner"} }, want: http.StatusBadRequest},
		{name: "no iat", claims: func(c map[string]any) { delete(c, "iat") }, want: http.StatusUnauthorized},
		{name: "iat in the future", claims: func(c map[string]any) { c["iat"] = time.Now().Add(time.Hour).Unix() }, want: http.StatusUnauthorized},
		{name: "a deactivated practitioner", setup: func(t *testing.T, env *handlerstest.Env) {
			u, _ := env.DB.PractitionersByIdentifier(context.Background(), "test-practitioner", 1)
			if _, err := env.Service.SetUserActive(context.Background(), domain.SystemActor(), u[0].ID, false, nil); err != nil {
				t.Fatal(err)
			}
		}, want: http.StatusUnauthorized},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runExchangeCase(t, c) })
	}
}

// practitionerKnownAs creates a practitioner with an EHR identifier, as a
// superuser does.
func practitionerKnownAs(t *testing.T, env *handlerstest.Env, email, identifier string) *domain.Practitioner {
	t.Helper()
	p, err := env.Service.CreatePractitioner(context.Background(), domain.SystemActor(), domain.NewPractitioner{Email: email, Identifier: identifier})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func runExchangeCase(t *testing.T, c exchangeCase) {
	ehr := oauthtest.StartOIDC(t, ehrAudience, "")
	env := handlerstest.StartWith(t, handlerstest.Options{Audit: true,
		TokenExchange: oauth.TokenExchangeConfig{TrustedIssuers: []string{ehr.URL}, Audience: ehrAudience}})
	var practitioner *domain.Practitioner
	if !c.noPractice {
		practitioner = practitionerKnownAs(t, env, "doc@example.org", "test-practitioner")
	}
	if c.setup != nil {
		c.setup(t, env)
	}
	client, secret := env.Client(t, oauth.ClientRegistration{Name: "SoF EHR Launch", Type: domain.ClientConfidential, RedirectURIs: []string{redirectURI}, Scopes: c.scopes})
	now := time.Now()
	claims := map[string]any{"iss": ehr.URL, "aud": ehrAudience, "sub": "prac-1", "fhirUser": "Practitioner/test-practitioner",
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	if c.claims != nil {
		c.claims(claims)
	}
	token := ehr.IDToken(claims)
	if c.mint != nil {
		token = c.mint(ehr, claims)
	}
	form := url.Values{"subject_token": {token}, "subject_token_type": {idTokenType}, "requested_token_type": {accessTokenType},
		"audience": {env.URL}, "grant_type": {tokenExchangeGrant}, "scope": {"openid"},
		"client_id": {client.ID}, "client_secret": {secret}}
	if c.form != nil {
		c.form(form)
	}
	req, _ := http.NewRequest("POST", env.URL+"/o/token-exchange", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if c.basic != nil {
		form.Del("client_id")
		form.Del("client_secret")
		req, _ = http.NewRequest("POST", env.URL+"/o/token-exchange", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		pw := secret
		if c.basic[1] != "" {
			pw = c.basic[1]
		}
		req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(client.ID+":"+pw)))
	}
	resp, body := sendJSON(t, req)
	if resp.StatusCode != c.want {
		t.Fatalf("status %d, want %d: %v", resp.StatusCode, c.want, body)
	}
	if c.want != http.StatusOK {
		if body["error"] == nil || body["access_token"] != nil {
			t.Errorf("refusal body %v", body)
		}
		return
	}
	if body["token_type"] != "Bearer" || body["issued_token_type"] != accessTokenType || body["scope"] != "openid" ||
		body["expires_in"].(float64) <= 0 || body["access_token"] == "" {
		t.Fatalf("answer %v", body)
	}
	// The token acts for the practitioner, through the client.
	_, profile := env.GetJSON(t, "/api/v1/users/profile", body["access_token"].(string))
	if profile["email"] != "doc@example.org" {
		t.Errorf("the token's user: %v", profile)
	}
	bearer, err := env.OAuth.AuthenticateBearer(context.Background(), body["access_token"].(string))
	if err != nil || bearer.ClientID != client.ID || bearer.UserID != practitioner.User.ID {
		t.Errorf("the token's bearer %+v, %v", bearer, err)
	}
}

// sendJSON sends a request and decodes its JSON answer.
func sendJSON(t *testing.T, req *http.Request) (*http.Response, map[string]any) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := map[string]any{}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("%d, not JSON: %v", resp.StatusCode, err)
	}
	return resp, body
}

// TestTokenExchangeKeysAreKeptPerTrustedIssuer: an issuer is trusted with
// any number of trailing slashes, and a client chooses how many its
// subject token's iss carries (unsigned, as only the verification that
// follows needs its keys). The keys are discovered and kept once per
// trusted issuer, not once per spelling: ever new spellings neither make
// the exchange fetch the EHR's configuration again nor grow its memory.
func TestTokenExchangeKeysAreKeptPerTrustedIssuer(t *testing.T) {
	ehr := oauthtest.StartOIDC(t, ehrAudience, "")
	env := handlerstest.StartWith(t, handlerstest.Options{
		TokenExchange: oauth.TokenExchangeConfig{TrustedIssuers: []string{ehr.URL}, Audience: ehrAudience}})
	practitionerKnownAs(t, env, "doc@example.org", "test-practitioner")
	client, secret := env.Client(t, oauth.ClientRegistration{Name: "SoF EHR Launch", Type: domain.ClientConfidential, RedirectURIs: []string{redirectURI}})
	for i := range 10 {
		claims := map[string]any{"iss": ehr.URL + strings.Repeat("/", i), "aud": ehrAudience, "sub": "prac-1",
			"fhirUser": "Practitioner/test-practitioner", "iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}
		form := url.Values{"subject_token": {ehr.IDToken(claims)}, "subject_token_type": {idTokenType}, "requested_token_type": {accessTokenType},
			"audience": {env.URL}, "grant_type": {tokenExchangeGrant}, "client_id": {client.ID}, "client_secret": {secret}}
		if resp, body := postForm(t, env, "/o/token-exchange", form, "", ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("iss with %d trailing slashes: %d %v", i, resp.StatusCode, body)
		}
	}
	if n := ehr.Discoveries(); n != 1 {
		t.Errorf("the EHR's configuration was read %d times for 10 spellings of its issuer, want once", n)
	}
}
