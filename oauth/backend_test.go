package oauth_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/oauth"
)

// SMART Backend Services: client_credentials with private_key_jwt.

func TestBackendServicesSignIn(t *testing.T) {
	env := handlerstest.Start(t)
	doc := env.Practitioner(t, "doc@example.org", false)
	token := env.URL + "/o/token/"
	for _, alg := range []string{"RS384", "ES384"} {
		t.Run(alg, func(t *testing.T) {
			key := handlerstest.NewBackendKey(t, alg)
			client := env.BackendClient(t, key, doc.ID, 0)
			resp, body := env.TokenRequest(t, "system/*.rs", key.Assertion(t, client.ID, token, 5*time.Minute, nil))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%d %v", resp.StatusCode, body)
			}
			if body["token_type"] != "bearer" || body["scope"] != "system/*.rs" || body["refresh_token"] != nil {
				t.Errorf("token response %v", body)
			}
			if exp, _ := body["expires_in"].(float64); exp <= 0 || exp > 300 {
				t.Errorf("expires_in %v: a backend token lives at most 300 s", body["expires_in"])
			}
			access := body["access_token"].(string)
			if r, b := env.GetJSON(t, "/FHIR/R5/Patient", access); r.StatusCode != http.StatusOK {
				t.Errorf("FHIR search with the backend token: %d %v", r.StatusCode, b)
			}
			// The token reads only: system/ scopes never write.
			if r, _ := env.Send(t, "POST", "/api/v1/organizations", access, map[string]any{"name": "X", "type": "prov"}); r.StatusCode != http.StatusForbidden {
				t.Errorf("admin write with a backend token: %d", r.StatusCode)
			}
			// Aud without the trailing slash is the same endpoint, and the
			// issuer names the same server (RFC 7523bis).
			for _, aud := range []string{strings.TrimSuffix(token, "/"), env.URL + "/o"} {
				if r, b := env.TokenRequest(t, "system/Observation.rs", key.Assertion(t, client.ID, aud, time.Minute, nil)); r.StatusCode != http.StatusOK {
					t.Errorf("aud %s: %d %v", aud, r.StatusCode, b)
				}
			}
		})
	}
}

func TestBackendAssertionsRefused(t *testing.T) {
	env := handlerstest.Start(t)
	doc := env.Practitioner(t, "doc@example.org", false)
	key := handlerstest.NewBackendKey(t, "RS384")
	client := env.BackendClient(t, key, doc.ID, 0)
	other := handlerstest.NewBackendKey(t, "ES384")
	token := env.URL + "/o/token/"
	for _, tc := range []struct {
		name     string
		lifetime time.Duration
		edit     func(jwt.MapClaims, map[string]any)
	}{
		{"exp more than five minutes ahead", 6 * time.Minute, nil},
		{"expired", -time.Minute, nil},
		{"no exp", time.Minute, func(c jwt.MapClaims, _ map[string]any) { delete(c, "exp") }},
		{"no jti", time.Minute, func(c jwt.MapClaims, _ map[string]any) { delete(c, "jti") }},
		{"aud is the FHIR base", time.Minute, func(c jwt.MapClaims, _ map[string]any) { c["aud"] = env.URL + "/FHIR/R5" }},
		{"iss is another client", time.Minute, func(c jwt.MapClaims, _ map[string]any) { c["iss"] = "someone-else" }},
		{"sub is another client", time.Minute, func(c jwt.MapClaims, _ map[string]any) { c["sub"] = "someone-else" }},
		{"unknown kid", time.Minute, func(_ jwt.MapClaims, h map[string]any) { h["kid"] = "not-registered" }},
		{"jku elsewhere", time.Minute, func(_ jwt.MapClaims, h map[string]any) { h["jku"] = "https://attacker.example/jwks" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := env.TokenRequest(t, "system/*.rs", key.Assertion(t, client.ID, token, tc.lifetime, tc.edit))
			if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusBadRequest || body["error"] != "invalid_client" {
				t.Errorf("%d %v, want invalid_client", resp.StatusCode, body)
			}
		})
	}
	t.Run("signed by another key", func(t *testing.T) {
		forged := other.Assertion(t, client.ID, token, time.Minute, func(_ jwt.MapClaims, h map[string]any) { h["kid"] = key.KeyID })
		if resp, body := env.TokenRequest(t, "system/*.rs", forged); body["error"] != "invalid_client" {
			t.Errorf("%d %v", resp.StatusCode, body)
		}
	})
	t.Run("RS256 and HS256", func(t *testing.T) {
		for _, alg := range []string{"RS256", "HS256", "none"} {
			tok := jwt.NewWithClaims(jwt.GetSigningMethod("HS256"), jwt.MapClaims{"iss": client.ID, "sub": client.ID, "aud": token,
				"exp": time.Now().Add(time.Minute).Unix(), "jti": alg})
			tok.Header["alg"], tok.Header["kid"] = alg, key.KeyID
			signed, _ := tok.SignedString([]byte("a shared secret of thirty-two bytes"))
			if resp, body := env.TokenRequest(t, "system/*.rs", signed); body["error"] != "invalid_client" {
				t.Errorf("%s: %d %v", alg, resp.StatusCode, body)
			}
		}
	})
	t.Run("a replayed jti", func(t *testing.T) {
		assertion := key.Assertion(t, client.ID, token, time.Minute, nil)
		if resp, body := env.TokenRequest(t, "system/*.rs", assertion); resp.StatusCode != http.StatusOK {
			t.Fatalf("first use: %d %v", resp.StatusCode, body)
		}
		if resp, body := env.TokenRequest(t, "system/*.rs", assertion); body["error"] != "invalid_client" {
			t.Errorf("replay: %d %v", resp.StatusCode, body)
		}
	})
	t.Run("a jti replayed at once", func(t *testing.T) {
		assertion := key.Assertion(t, client.ID, token, time.Minute, nil)
		var mu sync.Mutex
		ok := 0
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				if resp, _ := env.TokenRequest(t, "system/*.rs", assertion); resp.StatusCode == http.StatusOK {
					mu.Lock()
					ok++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if ok != 1 {
			t.Errorf("%d of 8 simultaneous uses of one assertion got a token; want 1", ok)
		}
	})
	t.Run("a secret with the assertion", func(t *testing.T) {
		resp, body := postForm(t, env, "/o/token/", map[string][]string{"grant_type": {"client_credentials"}, "scope": {"system/*.rs"},
			"client_assertion_type": {"urn:ietf:params:oauth:client-assertion-type:jwt-bearer"},
			"client_assertion":      {key.Assertion(t, client.ID, token, time.Minute, nil)}}, client.ID, "a-secret")
		if body["error"] != "invalid_client" {
			t.Errorf("%d %v", resp.StatusCode, body)
		}
	})
}

func TestBackendScopesAndGrants(t *testing.T) {
	env := handlerstest.Start(t)
	doc := env.Practitioner(t, "doc@example.org", false)
	key := handlerstest.NewBackendKey(t, "ES384")
	client := env.BackendClient(t, key, doc.ID, 0)
	token := env.URL + "/o/token/"
	for scope, want := range map[string]string{
		"":                     "invalid_scope",
		"user/*.rs":            "invalid_scope",
		"system/*.rs openid":   "invalid_scope",
		"system/*.cruds":       "invalid_scope",
		"system/Observation.c": "invalid_scope",
	} {
		resp, body := env.TokenRequest(t, scope, key.Assertion(t, client.ID, token, time.Minute, nil))
		if body["error"] != want {
			t.Errorf("scope %q: %d %v, want %s", scope, resp.StatusCode, body, want)
		}
	}
	// A confidential client with a secret may not use client_credentials.
	conf, secret := env.Client(t, oauth.ClientRegistration{Name: "App", Type: domain.ClientConfidential, RedirectURIs: []string{redirectURI}})
	resp, body := postForm(t, env, "/o/token/", map[string][]string{"grant_type": {"client_credentials"}, "scope": {"user/*.rs"}}, conf.ID, secret)
	if resp.StatusCode == http.StatusOK {
		t.Errorf("a confidential client got a client_credentials token: %v", body)
	}
	// A backend client is refused with a secret, or without a client assertion.
	resp, body = postForm(t, env, "/o/token/", map[string][]string{"grant_type": {"client_credentials"}, "scope": {"system/*.rs"}}, client.ID, "x")
	if body["error"] != "invalid_client" {
		t.Errorf("backend client with a secret: %d %v", resp.StatusCode, body)
	}
	// A deactivated practitioner's client gets no token.
	if _, err := env.Service.SetUserActive(context.Background(), domain.SystemActor(), doc.ID, false, nil); err != nil {
		t.Fatal(err)
	}
	if resp, body := env.TokenRequest(t, "system/*.rs", key.Assertion(t, client.ID, token, time.Minute, nil)); resp.StatusCode == http.StatusOK {
		t.Errorf("the client of a deactivated practitioner got a token: %v", body)
	}
}

func TestBackendClientWithJWKSURL(t *testing.T) {
	env := handlerstest.Start(t)
	doc := env.Practitioner(t, "doc@example.org", false)
	key := handlerstest.NewBackendKey(t, "ES384")
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(key.JWKS(t)))
	}))
	t.Cleanup(jwks.Close)
	client, _, err := env.OAuth.RegisterClient(context.Background(), oauth.ClientRegistration{Name: "URL keys", Type: domain.ClientBackend,
		JWKSURL: jwks.URL + "/jwks.json", ActsForUserID: doc.ID})
	if err != nil {
		t.Fatal(err)
	}
	resp, body := env.TokenRequest(t, "system/*.rs", key.Assertion(t, client.ID, env.URL+"/o/token/", time.Minute,
		func(_ jwt.MapClaims, h map[string]any) { h["jku"] = jwks.URL + "/jwks.json" }))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %v", resp.StatusCode, body)
	}
}

func TestBackendClientActingForAnOrganization(t *testing.T) {
	env := handlerstest.Start(t)
	ctx := context.Background()
	mine := env.Patient(t, "mine@example.org")
	other, err := env.Service.CreateOrganization(ctx, domain.SystemActor(), domain.NewOrganization{Name: "Other", Type: "prov"})
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := env.Service.CreatePatient(ctx, domain.SystemActor(), domain.NewPatient{Email: "theirs@example.org", Password: handlerstest.Password,
		FamilyName: "Roe", GivenNames: []string{"Rae"}, OrganizationIDs: []int64{other.ID}})
	if err != nil {
		t.Fatal(err)
	}
	key := handlerstest.NewBackendKey(t, "RS384")
	client := env.BackendClient(t, key, 0, mine.OrganizationIDs[0])
	access := env.BackendToken(t, key, client.ID, "system/Patient.rs")
	_, bundle := env.GetJSON(t, "/FHIR/R5/Patient", access)
	ids := []string{}
	for _, e := range bundle["entry"].([]any) {
		ids = append(ids, e.(map[string]any)["resource"].(map[string]any)["id"].(string))
	}
	if len(ids) != 1 || ids[0] != strconv.FormatInt(mine.ID, 10) {
		t.Errorf("the organization's client read patients %v; want only %d (not %d of another organization)", ids, mine.ID, theirs.ID)
	}
	if r, _ := env.GetJSON(t, "/FHIR/R5/Observation", access); r.StatusCode != http.StatusForbidden {
		t.Errorf("Observation search with a system/Patient.rs token: %d", r.StatusCode)
	}
}

func TestBackendClientRegistration(t *testing.T) {
	env := handlerstest.Start(t)
	ctx := context.Background()
	staff := env.Practitioner(t, "staff@example.org", false)
	other := env.Practitioner(t, "other@example.org", false)
	boss := env.Practitioner(t, "boss@example.org", true)
	org := env.Patient(t, "p@example.org").OrganizationIDs[0]
	key := handlerstest.NewBackendKey(t, "RS384")
	staffActor, _ := env.Service.Actor(ctx, staff.ID)
	staffActor.User.IsStaff = true
	base := oauth.ClientRegistration{Name: "Backend", Type: domain.ClientBackend, JWKS: key.JWKS(t), ActsForUserID: staff.ID}
	for _, tc := range []struct {
		name string
		edit func(*oauth.ClientRegistration)
		code domain.Code // "": accepted
	}{
		{"acting as themselves", func(*oauth.ClientRegistration) {}, ""},
		{"acting for a colleague", func(r *oauth.ClientRegistration) { r.ActsForUserID = other.ID }, domain.CodeForbidden},
		{"acting for a superuser", func(r *oauth.ClientRegistration) { r.ActsForUserID = boss.ID }, domain.CodeForbidden},
		{"acting for an organization they do not manage", func(r *oauth.ClientRegistration) { r.ActsForUserID, r.ActsForOrganizationID = 0, org }, domain.CodeForbidden},
		{"acting for an organization that does not exist", func(r *oauth.ClientRegistration) { r.ActsForUserID, r.ActsForOrganizationID = 0, org+100 }, domain.CodeInvalid},
		{"acting for a practitioner and an organization", func(r *oauth.ClientRegistration) { r.ActsForOrganizationID = org }, domain.CodeInvalid},
		{"acting for nobody", func(r *oauth.ClientRegistration) { r.ActsForUserID = 0 }, domain.CodeInvalid},
		{"a private key", func(r *oauth.ClientRegistration) {
			r.JWKS = `{"keys":[{"kty":"EC","crv":"P-384","kid":"k","x":"` + strings.Repeat("A", 64) + `","y":"` + strings.Repeat("A", 64) + `","d":"` + strings.Repeat("A", 64) + `"}]}`
		}, domain.CodeInvalid},
		{"no keys", func(r *oauth.ClientRegistration) { r.JWKS = "" }, domain.CodeInvalid},
		{"a JWKS URL over http elsewhere", func(r *oauth.ClientRegistration) { r.JWKS, r.JWKSURL = "", "http://keys.example.org/jwks" }, domain.CodeInvalid},
		{"user scopes", func(r *oauth.ClientRegistration) { r.Scopes = []string{"user/*.rs"} }, domain.CodeInvalid},
		{"a secret", func(r *oauth.ClientRegistration) { r.Secret = strings.Repeat("s", 40) }, domain.CodeInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := base
			tc.edit(&reg)
			_, _, err := env.OAuth.RegisterClientAs(ctx, staffActor, reg)
			if tc.code == "" && err != nil || tc.code != "" && domain.ErrorCode(err) != tc.code {
				t.Errorf("got %v, want %q", err, tc.code)
			}
		})
	}
	// A confidential client may not be registered with system/ scopes.
	if _, _, err := env.OAuth.RegisterClient(ctx, oauth.ClientRegistration{Name: "App", Type: domain.ClientConfidential,
		RedirectURIs: []string{redirectURI}, Scopes: []string{"system/*.rs"}}); !domain.IsCode(err, domain.CodeInvalid) {
		t.Errorf("confidential client with system/ scopes: %v", err)
	}
	// Nor may a user's script token carry them.
	if _, _, err := env.OAuth.IssueScopedAccessToken(ctx, staff.ID, time.Hour, []string{"system/*.rs"}, 0); !domain.IsCode(err, domain.CodeInvalid) {
		t.Errorf("script token with system/ scopes: %v", err)
	}
}
