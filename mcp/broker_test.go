package mcp_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/oauth2"

	"exchange/handlers/handlerstest"
	"exchange/mcp"
)

// getJSON fetches a gateway document.
func getJSON(t *testing.T, u string) (*http.Response, map[string]any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp, out
}

// postToken posts a token request and decodes the answer.
func postToken(t *testing.T, g *gateway, form url.Values) (int, map[string]any) {
	t.Helper()
	resp, err := http.PostForm(g.URL+"/token", form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	if resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("token answer Cache-Control %q", resp.Header.Get("Cache-Control"))
	}
	return resp.StatusCode, out
}

func TestMetadata(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(t, nil)
	for _, path := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"} {
		resp, prm := getJSON(t, g.URL+path)
		if resp.StatusCode != http.StatusOK || prm["resource"] != g.URL+"/mcp" {
			t.Fatalf("%s: %d %v", path, resp.StatusCode, prm)
		}
		if as := prm["authorization_servers"].([]any); len(as) != 1 || as[0] != g.URL {
			t.Errorf("%s authorization_servers %v", path, as)
		}
	}
	resp, as := getJSON(t, g.URL+"/.well-known/oauth-authorization-server")
	if resp.StatusCode != http.StatusOK || as["issuer"] != g.URL || as["registration_endpoint"] != g.URL+"/register" ||
		as["authorization_endpoint"] != g.URL+"/authorize" || as["token_endpoint"] != g.URL+"/token" {
		t.Fatalf("AS metadata %d %v", resp.StatusCode, as)
	}
	if m, _ := json.Marshal(as["code_challenge_methods_supported"]); string(m) != `["S256"]` {
		t.Errorf("code_challenge_methods_supported %s", m)
	}
	if m, _ := json.Marshal(as["token_endpoint_auth_methods_supported"]); string(m) != `["none"]` {
		t.Errorf("token_endpoint_auth_methods_supported %s", m)
	}
}

// TestBrokerFlow is the whole flow as an assistant client lives it: DCR,
// authorization through the service's login form, the code exchange, a
// tool call with the token, a refresh, and the refreshed token at work.
func TestBrokerFlow(t *testing.T) {
	s := newStack(t)
	w := s.seed(t)
	g := s.startGateway(t, nil)
	ctx := context.Background()

	status, reg := g.register(t, clientRedirect)
	if status != http.StatusCreated {
		t.Fatalf("register: %d %v", status, reg)
	}
	clientID, _ := reg["client_id"].(string)
	if clientID == "" || reg["token_endpoint_auth_method"] != "none" || reg["client_id_issued_at"] == nil {
		t.Fatalf("registration %v", reg)
	}
	if uris, _ := json.Marshal(reg["redirect_uris"]); string(uris) != `["`+clientRedirect+`"]` {
		t.Errorf("redirect_uris %s", uris)
	}

	// /authorize asks the user; Allow sends the browser to the service's
	// authorization endpoint with the gateway's client and its own PKCE.
	verifier := oauth2.GenerateVerifier()
	cfg := g.oauthConfig(clientID)
	resp, _ := allow(t, stepper(t), cfg.AuthCodeURL(clientState, oauth2.S256ChallengeOption(verifier)))
	to, _ := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || !strings.HasPrefix(to.String(), s.env.URL+"/o/authorize/") {
		t.Fatalf("authorize: %d to %s", resp.StatusCode, to)
	}
	q := to.Query()
	if q.Get("client_id") != gatewayClientID || q.Get("redirect_uri") != g.URL+"/oauth/callback" || q.Get("code_challenge_method") != "S256" ||
		q.Get("code_challenge") == oauth2.S256ChallengeFromVerifier(verifier) || !strings.Contains(q.Get("scope"), "offline_access") {
		t.Fatalf("service authorization request %v", q)
	}

	code := g.signIn(t, clientID, verifier, w.managerA)
	tok, err := cfg.Exchange(ctx, code, oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	if tok.AccessToken == "" || tok.RefreshToken == "" || !strings.EqualFold(tok.TokenType, "bearer") || tok.Expiry.IsZero() {
		t.Fatalf("token %+v", tok)
	}
	c := g.mcpClient(t, tok.AccessToken)
	if got := callJSON(t, c, "count_studies", nil); got["count"] != float64(1) {
		t.Fatalf("count_studies = %v", got)
	}

	// Refresh: new tokens that work; the old refresh token is spent.
	refreshed, err := cfg.TokenSource(ctx, &oauth2.Token{RefreshToken: tok.RefreshToken}).Token()
	if err != nil {
		t.Fatal(err)
	}
	if refreshed.AccessToken == tok.AccessToken || refreshed.RefreshToken == tok.RefreshToken {
		t.Fatal("refresh did not rotate the tokens")
	}
	c2 := g.mcpClient(t, refreshed.AccessToken)
	if got := callJSON(t, c2, "list_studies", nil); got["total"] != float64(1) {
		t.Fatalf("list_studies after refresh = %v", got)
	}
	status, out := postToken(t, g, url.Values{"grant_type": {"refresh_token"}, "client_id": {clientID}, "refresh_token": {tok.RefreshToken}})
	if status != http.StatusBadRequest || out["error"] != "invalid_grant" {
		t.Fatalf("reused refresh token: %d %v", status, out)
	}
	// Another client cannot use this client's refresh token.
	other := g.registerClient(t)
	status, out = postToken(t, g, url.Values{"grant_type": {"refresh_token"}, "client_id": {other}, "refresh_token": {refreshed.RefreshToken}})
	if status != http.StatusBadRequest || out["error"] != "invalid_grant" {
		t.Fatalf("refresh token of another client: %d %v", status, out)
	}

	// The code works once: the service's code inside it is spent, and the
	// service revokes what was issued for a replayed code. Once the
	// gateway's validation cache has expired, the tokens stop working.
	if _, err := cfg.Exchange(ctx, code, oauth2.VerifierOption(verifier)); err == nil {
		t.Error("a code was redeemed twice")
	}
	g.clock.Advance(31 * time.Second)
	if status, _, _ := mcpStatus(t, g, refreshed.AccessToken); status != http.StatusUnauthorized {
		t.Errorf("a token of a replayed code's grant: %d", status)
	}
}

// tamper flips one character in the middle of a blob.
func tamper(blob string) string {
	b := []byte(blob)
	i := len(b) / 2
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

// authorizeState starts an authorization in a browser, allows it, and
// returns the sealed state the gateway sends to the service, and the
// browser, which holds the flow's cookie.
func authorizeState(t *testing.T, g *gateway, clientID, verifier string) (string, *handlerstest.Browser) {
	t.Helper()
	b := stepper(t)
	resp, _ := allow(t, b, g.oauthConfig(clientID).AuthCodeURL(clientState, oauth2.S256ChallengeOption(verifier)))
	to, _ := url.Parse(resp.Header.Get("Location"))
	state := to.Query().Get("state")
	if resp.StatusCode != http.StatusFound || state == "" {
		t.Fatalf("authorize: %d %s", resp.StatusCode, to)
	}
	return state, b
}

// callbackStatus calls the gateway's callback in a browser (nil: one
// without cookies) with a state and code.
func callbackStatus(t *testing.T, b *handlerstest.Browser, g *gateway, state, code string) (int, string) {
	t.Helper()
	if b == nil {
		b = stepper(t)
	}
	resp, _ := b.Do("GET", g.URL+"/oauth/callback?"+url.Values{"state": {state}, "code": {code}}.Encode(), nil)
	return resp.StatusCode, resp.Header.Get("Location")
}

func TestTamperedStateAndCodeAreRefused(t *testing.T) {
	s := newStack(t)
	w := s.seed(t)
	g := s.startGateway(t, nil)
	clientID := g.registerClient(t)
	verifier := oauth2.GenerateVerifier()

	state, b := authorizeState(t, g, clientID, verifier)
	if status, loc := callbackStatus(t, b, g, tamper(state), "service-code"); status != http.StatusBadRequest || loc != "" {
		t.Errorf("tampered state: %d, Location %q", status, loc)
	}
	if status, _ := callbackStatus(t, b, g, state, "service-code"); status != http.StatusFound {
		t.Errorf("the untampered state: %d", status)
	}

	code := g.signIn(t, clientID, verifier, w.managerA)
	form := url.Values{"grant_type": {"authorization_code"}, "client_id": {clientID}, "code": {tamper(code)},
		"code_verifier": {verifier}, "redirect_uri": {clientRedirect}}
	if status, out := postToken(t, g, form); status != http.StatusBadRequest || out["error"] != "invalid_grant" {
		t.Errorf("tampered code: %d %v", status, out)
	}
	form.Set("code", code)
	form.Set("code_verifier", oauth2.GenerateVerifier())
	if status, out := postToken(t, g, form); status != http.StatusBadRequest || out["error"] != "invalid_grant" {
		t.Errorf("wrong verifier: %d %v", status, out)
	}
	form.Set("code_verifier", verifier)
	form.Set("redirect_uri", "http://127.0.0.1:9/other")
	if status, out := postToken(t, g, form); status != http.StatusBadRequest || out["error"] != "invalid_grant" {
		t.Errorf("other redirect_uri: %d %v", status, out)
	}
	form.Set("redirect_uri", clientRedirect)
	form.Set("client_id", tamper(clientID))
	if status, out := postToken(t, g, form); status != http.StatusUnauthorized || out["error"] != "invalid_client" {
		t.Errorf("tampered client_id: %d %v", status, out)
	}
	form.Set("client_id", clientID)
	form.Set("resource", "https://elsewhere.example/mcp")
	if status, out := postToken(t, g, form); status != http.StatusBadRequest || out["error"] != "invalid_target" {
		t.Errorf("foreign resource: %d %v", status, out)
	}
	form.Del("resource")
	// Every refusal above left the code unspent.
	if status, out := postToken(t, g, form); status != http.StatusOK || out["access_token"] == "" {
		t.Fatalf("the genuine request: %d %v", status, out)
	}
	tampered := tamper(exchange(t, g, clientID, verifier, w.managerA)["refresh_token"].(string))
	if status, out := postToken(t, g, url.Values{"grant_type": {"refresh_token"}, "client_id": {clientID}, "refresh_token": {tampered}}); status != http.StatusBadRequest || out["error"] != "invalid_grant" {
		t.Errorf("tampered refresh token: %d %v", status, out)
	}
}

// exchange runs a sign-in and a code exchange, returning the token answer.
func exchange(t *testing.T, g *gateway, clientID, verifier, email string) map[string]any {
	t.Helper()
	code := g.signIn(t, clientID, verifier, email)
	status, body := postToken(t, g, url.Values{"grant_type": {"authorization_code"}, "client_id": {clientID}, "code": {code},
		"code_verifier": {verifier}, "redirect_uri": {clientRedirect}})
	if status != http.StatusOK {
		t.Fatalf("code exchange: %d %v", status, body)
	}
	return body
}

// flow is one of each of the broker's blobs, genuine and unexpired, for
// a registered client of a gateway: the sealed state of an authorization
// in progress, an unredeemed code, and the refresh token of another
// sign-in.
type flow struct {
	s                         *stack
	g                         *gateway
	clientID, verifier        string
	state, code, refreshToken string
	browser                   *handlerstest.Browser // that holds the state's flow cookie
}

// startFlow seeds a world, starts a gateway and signs manager A in twice
// through it: once to a code, once to tokens.
func startFlow(t *testing.T) *flow {
	t.Helper()
	s := newStack(t)
	w := s.seed(t)
	g := s.startGateway(t, nil)
	f := &flow{s: s, g: g, clientID: g.registerClient(t), verifier: oauth2.GenerateVerifier()}
	f.state, f.browser = authorizeState(t, g, f.clientID, f.verifier)
	f.code = g.signIn(t, f.clientID, f.verifier, w.managerA)
	f.refreshToken = exchange(t, g, f.clientID, f.verifier, w.managerA)["refresh_token"].(string)
	return f
}

func TestExpiredBlobsAreRefused(t *testing.T) {
	f := startFlow(t)
	g, clientID, verifier, state, code := f.g, f.clientID, f.verifier, f.state, f.code

	// A state lives 10 minutes, a code 2: both are past after 11.
	g.clock.Advance(11 * time.Minute)
	if status, _ := callbackStatus(t, f.browser, g, state, "service-code"); status != http.StatusBadRequest {
		t.Errorf("expired state: %d", status)
	}
	if status, body := postToken(t, g, url.Values{"grant_type": {"authorization_code"}, "client_id": {clientID}, "code": {code},
		"code_verifier": {verifier}, "redirect_uri": {clientRedirect}}); status != http.StatusBadRequest || body["error"] != "invalid_grant" ||
		!strings.Contains(body["error_description"].(string), "expired") {
		t.Errorf("expired code: %d %v", status, body)
	}
	// A refresh token lives 30 days; past it, it is refused.
	refresh := url.Values{"grant_type": {"refresh_token"}, "client_id": {clientID}, "refresh_token": {f.refreshToken}}
	g.clock.Advance(31 * 24 * time.Hour)
	if status, body := postToken(t, g, refresh); status != http.StatusBadRequest || body["error"] != "invalid_grant" {
		t.Errorf("expired refresh token: %d %v", status, body)
	}
	// A registration lives a year: then the client must register again.
	g.clock.Advance(366 * 24 * time.Hour)
	if status, body := postToken(t, g, refresh); status != http.StatusUnauthorized || body["error"] != "invalid_client" {
		t.Errorf("expired registration at /token: %d %v", status, body)
	}
	resp, err := http.Get(g.oauthConfig(clientID).AuthCodeURL(clientState, oauth2.S256ChallengeOption(verifier)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || resp.Request.URL.Host != strings.TrimPrefix(g.URL, "http://") {
		t.Errorf("expired registration at /authorize: %d at %s", resp.StatusCode, resp.Request.URL)
	}
}

// TestBlobKindsCannotBeReplayedAsOneAnother presents each kind of sealed
// blob where another kind is expected: all are refused although each is
// genuine and unexpired.
func TestBlobKindsCannotBeReplayedAsOneAnother(t *testing.T) {
	f := startFlow(t)
	s, g, clientID, verifier, state, code, refreshToken := f.s, f.g, f.clientID, f.verifier, f.state, f.code, f.refreshToken

	// Each is refused by the AEAD's kind tag, before any check of what the
	// blob holds: the description says the blob itself is invalid.
	const invalid = "invalid or tampered"
	for name, blob := range map[string]string{"client_id": clientID, "state": state, "refresh token": refreshToken} {
		status, body := postToken(t, g, url.Values{"grant_type": {"authorization_code"}, "client_id": {clientID}, "code": {blob},
			"code_verifier": {verifier}, "redirect_uri": {clientRedirect}})
		if status != http.StatusBadRequest || body["error"] != "invalid_grant" {
			t.Errorf("%s as a code: %d %v", name, status, body)
		}
		if desc, _ := body["error_description"].(string); !strings.Contains(desc, invalid) {
			t.Errorf("%s as a code: error_description %q, want %q", name, desc, invalid)
		}
	}
	for name, blob := range map[string]string{"client_id": clientID, "state": state, "code": code} {
		status, body := postToken(t, g, url.Values{"grant_type": {"refresh_token"}, "client_id": {clientID}, "refresh_token": {blob}})
		if status != http.StatusBadRequest || body["error"] != "invalid_grant" {
			t.Errorf("%s as a refresh token: %d %v", name, status, body)
		}
		if desc, _ := body["error_description"].(string); !strings.Contains(desc, invalid) {
			t.Errorf("%s as a refresh token: error_description %q, want %q", name, desc, invalid)
		}
	}
	for name, blob := range map[string]string{"client_id": clientID, "code": code, "refresh token": refreshToken} {
		if status, _ := callbackStatus(t, f.browser, g, blob, "service-code"); status != http.StatusBadRequest {
			t.Errorf("%s as a state: %d", name, status)
		}
	}
	for name, blob := range map[string]string{"state": state, "code": code, "refresh token": refreshToken} {
		status, body := postToken(t, g, url.Values{"grant_type": {"refresh_token"}, "client_id": {blob}, "refresh_token": {refreshToken}})
		if status != http.StatusUnauthorized || body["error"] != "invalid_client" {
			t.Errorf("%s as a client_id: %d %v", name, status, body)
		}
	}
	// A blob sealed under another broker key is refused too.
	g2 := s.startGateway(t, func(c *mcp.Config) { c.BrokerKey = strings.Repeat("k", 40) })
	if status, body := postToken(t, g2, url.Values{"grant_type": {"refresh_token"}, "client_id": {clientID}, "refresh_token": {refreshToken}}); status != http.StatusUnauthorized {
		t.Errorf("a client_id of another key: %d %v", status, body)
	}
}

// TestRegistrationRedirectRules: DCR accepts redirect URIs that are
// loopback http, https, or listed in MCP_ALLOWED_REDIRECTS, and refuses
// the rest with invalid_redirect_uri (RFC 7591 3.2.2), including what
// would make the approval page's host ambiguous.
func TestRegistrationRedirectRules(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(t, func(c *mcp.Config) {
		c.AllowedRedirects = []string{"cursor://anysphere.cursor-retrieval/oauth/callback", "com.example.app:/oauth"}
	})
	for _, c := range []struct {
		uri string
		ok  bool
	}{
		{"https://claude.ai/api/mcp/auth_callback", true},
		{"https://attacker.example/cb", true}, // https: allowed, and the approval page shows its host
		{"https://xn--clude-6ve.ai/cb", true}, // punycode, as the page shows it
		{"http://127.0.0.1:33418/callback", true},
		{"http://127.0.0.1/callback", true},
		{"http://localhost:6274/oauth/callback", true},
		{"HTTP://LOCALHOST:6274/oauth/callback", true},
		{"http://[::1]:8080/cb", true},
		{"cursor://anysphere.cursor-retrieval/oauth/callback", true}, // MCP_ALLOWED_REDIRECTS
		{"com.example.app:/oauth", true},                             // MCP_ALLOWED_REDIRECTS, no host
		{"http://client.example.com/callback", false},                // http, not loopback
		{"http://localhost.attacker.example/cb", false},              // not loopback, whatever its name
		{"http://127.0.0.2:8080/cb", false},                          // loopback, but not one RFC 8252 names
		{"http://[::ffff:127.0.0.1]:8080/cb", false},
		{"vscode://publisher.ext/callback", false}, // not allowed
		{"cursor://anysphere.cursor-retrieval/oauth/callback?x=1", false},
		{"https://client.example.com/cb#frag", false},
		{"https://client.example.com/cb#", false},
		{"https://user:pw@client.example.com/cb", false},
		{"https://@client.example.com/cb", false}, // empty userinfo
		{"https://claude.ai%2f@attacker.example/cb", false},
		{"https://:443/cb", false},                   // no host
		{"https:attacker.example/cb", false},         // opaque
		{"https://clаude.ai/cb", false},              // a Cyrillic а: a look-alike host
		{"https://attacker.example/\u202ecb", false}, // a bidirectional override
		{"https://attacker.example/c b", false},
		{"https://attacker.example:99999/cb", false},
		{"https://attacker.example:0/cb", false},
		{"http://localhost:0/cb", false},
		{"https://" + strings.Repeat("a", 510) + ".example/cb", false},
		{"/relative", false},
		{"javascript:alert(1)", false},
		{"", false},
	} {
		status, body := g.register(t, c.uri)
		if c.ok != (status == http.StatusCreated) {
			t.Errorf("register %q: %d %v", c.uri, status, body)
		}
		if !c.ok && (body["error"] != "invalid_redirect_uri" || body["error_description"] == "") {
			t.Errorf("register %q: error %v", c.uri, body)
		}
	}
	// One refused redirect URI refuses the registration.
	if status, body := g.register(t, clientRedirect, "http://client.example.com/callback"); status != http.StatusBadRequest || body["error"] != "invalid_redirect_uri" {
		t.Errorf("a good and a bad redirect URI: %d %v", status, body)
	}
	if status, body := g.register(t); status != http.StatusBadRequest {
		t.Errorf("no redirect_uris: %d %v", status, body)
	}
	resp, err := http.Post(g.URL+"/register", "application/json", strings.NewReader(`{"redirect_uris": ["https://a.example/cb"], "token_endpoint_auth_method": "client_secret_basic"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a confidential registration: %d", resp.StatusCode)
	}
	resp, err = http.Post(g.URL+"/register", "application/json", strings.NewReader(`not json`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a body that is not JSON: %d", resp.StatusCode)
	}
}

func TestAuthorizeRedirectRules(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(t, nil)
	// At /authorize: only a registered redirect URI, any port on loopback;
	// an unregistered one is never redirected to.
	clientID := g.registerClient(t)
	verifier := oauth2.GenerateVerifier()
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	authorize := func(edit func(url.Values)) (int, *url.URL, string) {
		t.Helper()
		q := url.Values{"client_id": {clientID}, "redirect_uri": {clientRedirect}, "response_type": {"code"}, "state": {clientState},
			"code_challenge": {oauth2.S256ChallengeFromVerifier(verifier)}, "code_challenge_method": {"S256"}}
		edit(q)
		resp, err := noFollow.Get(g.URL + "/authorize?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		page, _ := io.ReadAll(resp.Body)
		loc, _ := url.Parse(resp.Header.Get("Location"))
		return resp.StatusCode, loc, approvalForm(string(page))
	}
	if status, loc, _ := authorize(func(q url.Values) { q.Set("redirect_uri", "https://attacker.example/cb") }); status != http.StatusBadRequest || loc.String() != "" {
		t.Errorf("unregistered redirect_uri: %d to %s", status, loc)
	}
	if status, loc, form := authorize(func(q url.Values) { q.Set("redirect_uri", "http://127.0.0.1:4242/callback") }); status != http.StatusOK || form == "" {
		t.Errorf("the registered loopback redirect on another port: %d to %s, want the approval page", status, loc)
	}
	if status, loc, form := authorize(func(q url.Values) { q.Del("redirect_uri") }); status != http.StatusOK || form == "" {
		t.Errorf("no redirect_uri with one registered: %d to %s, want the approval page", status, loc)
	}
	// Errors in a request with a good redirect URI go back to the client
	// in a browser that approved it before; elsewhere they are shown
	// (TestAuthorizeErrorsRedirectNowhereBeforeApproval).
	approved := stepper(t)
	allow(t, approved, g.oauthConfig(clientID).AuthCodeURL(clientState, oauth2.S256ChallengeOption(verifier)))
	for name, c := range map[string]struct {
		edit func(url.Values)
		code string
	}{
		"no PKCE":          {func(q url.Values) { q.Del("code_challenge"); q.Del("code_challenge_method") }, "invalid_request"},
		"plain PKCE":       {func(q url.Values) { q.Set("code_challenge_method", "plain") }, "invalid_request"},
		"implicit grant":   {func(q url.Values) { q.Set("response_type", "token") }, "unsupported_response_type"},
		"foreign resource": {func(q url.Values) { q.Set("resource", "https://elsewhere.example/mcp") }, "invalid_target"},
	} {
		if status, loc, _ := authorize(c.edit); status != http.StatusBadRequest || loc.String() != "" {
			t.Errorf("%s, in a browser that never approved the client: %d to %s", name, status, loc)
		}
		q := url.Values{"client_id": {clientID}, "redirect_uri": {clientRedirect}, "response_type": {"code"}, "state": {clientState},
			"code_challenge": {oauth2.S256ChallengeFromVerifier(verifier)}, "code_challenge_method": {"S256"}}
		c.edit(q)
		resp, _ := approved.Do("GET", g.URL+"/authorize?"+q.Encode(), nil)
		loc, _ := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusFound || !strings.HasPrefix(loc.String(), clientRedirect) || loc.Query().Get("error") != c.code || loc.Query().Get("state") != clientState {
			t.Errorf("%s: %d to %s", name, resp.StatusCode, loc)
		}
	}
	for _, resource := range []string{g.URL + "/mcp", g.URL, g.URL + "/"} {
		if status, loc, form := authorize(func(q url.Values) { q.Set("resource", resource) }); status != http.StatusOK || form == "" {
			t.Errorf("resource %s: %d to %s, want the approval page", resource, status, loc)
		}
	}
	// The service's refusal (a user who denied, say) reaches the client,
	// in the browser the flow started in.
	state, b := authorizeState(t, g, clientID, verifier)
	resp, _ := b.Do("GET", g.URL+"/oauth/callback?"+url.Values{"state": {state}, "error": {"access_denied"}}.Encode(), nil)
	loc, _ := url.Parse(resp.Header.Get("Location"))
	if !strings.HasPrefix(loc.String(), clientRedirect) || loc.Query().Get("error") != "access_denied" || loc.Query().Get("state") != clientState {
		t.Errorf("denied: %d to %s", resp.StatusCode, loc)
	}
}

// TestLongClientNameIsShortened: a client name is cut to 100 characters,
// never inside one.
func TestLongClientNameIsShortened(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(t, nil)
	long := strings.Repeat("é", 150) // 2 bytes each: a cut by bytes would land inside one at 101
	resp, body := handlerstest.SendTo(t, "POST", g.URL+"/register", "", map[string]any{"redirect_uris": []string{clientRedirect}, "client_name": "a" + long}, nil)
	name, _ := body["client_name"].(string)
	if resp.StatusCode != http.StatusCreated || !utf8.ValidString(name) || utf8.RuneCountInString(name) != 100 || !strings.HasPrefix(name, "aé") {
		t.Errorf("register with a long name: %d client_name %q", resp.StatusCode, name)
	}
}

func TestShortBrokerKeyIsRefused(t *testing.T) {
	base := mcp.Config{ServiceURL: "http://127.0.0.1:8000", ClientID: "gw", ClientSecret: gatewaySecret, ResourceURL: "http://localhost:8401"}
	for _, key := range []string{"", strings.Repeat("k", mcp.MinBrokerKeyLength-1)} {
		cfg := base
		cfg.BrokerKey = key
		if _, err := mcp.New(cfg); err == nil || !strings.Contains(err.Error(), "MCP_BROKER_KEY") || !strings.Contains(err.Error(), strconv.Itoa(mcp.MinBrokerKeyLength)) {
			t.Errorf("key of %d characters: %v", len(key), err)
		}
	}
	cfg := base
	cfg.BrokerKey = strings.Repeat("k", mcp.MinBrokerKeyLength)
	if _, err := mcp.New(cfg); err != nil {
		t.Errorf("a key of %d characters: %v", mcp.MinBrokerKeyLength, err)
	}
	cfg.ClientSecret, cfg.RequireAudience = "", true
	if _, err := mcp.New(cfg); err == nil || !strings.Contains(err.Error(), "MCP_REQUIRE_AUDIENCE") {
		t.Errorf("audience required without a secret: %v", err)
	}
}

// TestAuthorizeErrorsRedirectNowhereBeforeApproval: anyone may register a
// client with any redirect URI, so a request of a client this browser
// never approved is not redirected anywhere on an error, or the gateway
// would send whoever opens a crafted link on to the registrant's site
// (an open redirector, RFC 9700 4.11.2). The error is shown instead.
func TestAuthorizeErrorsRedirectNowhereBeforeApproval(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(t, nil)
	status, out := g.register(t, "https://attacker.example/landing")
	if status != http.StatusCreated {
		t.Fatalf("register: %d %v", status, out)
	}
	for name, q := range map[string]url.Values{
		"implicit grant": {"response_type": {"token"}},
		"no PKCE":        {"response_type": {"code"}},
		"another scope":  {"response_type": {"code"}, "scope": {"user/*.cruds"}, "code_challenge_method": {"S256"}, "code_challenge": {oauth2.S256ChallengeFromVerifier(oauth2.GenerateVerifier())}},
	} {
		q.Set("client_id", out["client_id"].(string))
		resp, page := stepper(t).Do("GET", g.URL+"/authorize?"+q.Encode(), nil)
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" || !strings.Contains(page, "Nothing was shared") {
			t.Errorf("%s: %d to %q\n%s", name, resp.StatusCode, resp.Header.Get("Location"), page)
		}
	}
}
