package mcp_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"exchange/handlers/handlerstest"
	"exchange/mcp"
)

// attackerRedirect is a redirect URI DCR accepts (https) of a party that
// wants the user's access.
const attackerRedirect = "https://attacker.example/cb"

// registerNamed registers a client with a name and redirect URIs.
func (g *gateway) registerNamed(t *testing.T, name string, redirectURIs ...string) string {
	t.Helper()
	resp, body := handlerstest.SendTo(t, "POST", g.URL+"/register", "", map[string]any{"redirect_uris": redirectURIs, "client_name": name}, nil)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("register: %d %v", resp.StatusCode, body)
	}
	return body["client_id"].(string)
}

// authURL is a client's authorization request at the gateway.
func (g *gateway) authURL(clientID, redirectURI string) string {
	return g.URL + "/authorize?" + url.Values{"client_id": {clientID}, "redirect_uri": {redirectURI}, "response_type": {"code"},
		"state": {clientState}, "code_challenge": {oauth2.S256ChallengeFromVerifier(oauth2.GenerateVerifier())}, "code_challenge_method": {"S256"}}.Encode()
}

// cookie returns the Set-Cookie of the answer with the name, or nil.
func cookie(resp *http.Response, name string) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// TestApprovalPageStopsTheConsentBypass is the consent bypass: a
// party registers an https redirect of its own and sends a victim its
// /authorize link. The gateway does not forward: it shows its own page,
// with the client's name escaped, the redirect's host in full and what the
// client will be able to do, which no other site can frame.
func TestApprovalPageStopsTheConsentBypass(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(t, nil)
	name := `<script>alert("pwned")</script> Claude` + "\u202e" + `evil`
	clientID := g.registerNamed(t, name, attackerRedirect)

	b := stepper(t)
	resp, page := b.Do("GET", g.authURL(clientID, attackerRedirect), nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Location") != "" || approvalForm(page) == "" {
		t.Fatalf("the attacker's link: %d Location %q, want the approval page\n%s", resp.StatusCode, resp.Header.Get("Location"), page)
	}
	for header, want := range map[string]string{
		"Content-Type": "text/html; charset=utf-8", "X-Frame-Options": "DENY", "Cache-Control": "no-store",
		"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
	} {
		if got := resp.Header.Get(header); got != want {
			t.Errorf("%s: %q, want %q", header, got, want)
		}
	}
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"frame-ancestors 'none'", "default-src 'none'", "style-src 'sha256-"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "script-src") {
		t.Errorf("Content-Security-Policy %q allows scripts or inline code", csp)
	}
	for _, want := range []string{
		`<html lang="en">`, "<title>", "<h1>", "&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt; Claudeevil", // escaped, the override dropped
		`<p class="host">attacker.example</p>`, attackerRedirect,
		"studies", "patients", "observations", "Read-only",
		`<button type="submit" name="decision" value="allow"`, `<button type="submit" name="decision" value="deny"`,
		`<form method="post" action="` + g.URL + `/authorize">`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "<script") || strings.Contains(page, "\u202e") || strings.Contains(page, " style=") {
		t.Errorf("the page has a script, an inline style attribute or the override:\n%s", page)
	}
	csrf := cookie(resp, "mcp-gateway-csrf")
	if csrf == nil || !csrf.HttpOnly || csrf.SameSite != http.SameSiteLaxMode || csrf.Path != "/authorize" || csrf.Secure || csrf.MaxAge <= 0 {
		t.Errorf("CSRF cookie %+v", csrf)
	}
}

// TestApprovalCookiesOfAnHTTPSGateway: behind https the cookies are
// Secure and __Host- (no sibling subdomain can toss one in), so Path=/.
func TestApprovalCookiesOfAnHTTPSGateway(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(t, func(c *mcp.Config) { c.ResourceURL = "https://mcp.example.org" })
	clientID := g.registerClient(t)
	resp, page := stepper(t).Do("GET", g.authURL(clientID, clientRedirect), nil)
	if resp.StatusCode != http.StatusOK || approvalForm(page) == "" {
		t.Fatalf("%d\n%s", resp.StatusCode, page)
	}
	csrf := cookie(resp, "__Host-mcp-gateway-csrf")
	if csrf == nil || !csrf.Secure || !csrf.HttpOnly || csrf.Path != "/" || csrf.Domain != "" || csrf.SameSite != http.SameSiteLaxMode {
		t.Errorf("CSRF cookie of an https gateway %+v (all: %v)", csrf, resp.Cookies())
	}
	if !strings.Contains(page, `action="https://mcp.example.org/authorize"`) {
		t.Errorf("the form does not post to the public URL:\n%s", page)
	}
	if !strings.Contains(page, "(an application on this computer)") {
		t.Errorf("a loopback redirect is not named as one:\n%s", page)
	}
}

// TestDenyReturnsAccessDenied: Deny goes to the registered redirect URI
// with access_denied and the client's state, never with a code, and never
// to a redirect URI the form names.
func TestDenyReturnsAccessDenied(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(t, nil)
	clientID := g.registerNamed(t, "assistant", attackerRedirect)
	b := stepper(t)
	_, page := b.Do("GET", g.authURL(clientID, attackerRedirect), nil)
	resp, _ := b.Submit(page, url.Values{"decision": {"deny"}, "redirect_uri": {"https://elsewhere.example/cb"}})
	loc, _ := url.Parse(resp.Header.Get("Location"))
	q := loc.Query()
	if resp.StatusCode != http.StatusFound || !strings.HasPrefix(loc.String(), attackerRedirect+"?") || q.Get("error") != "access_denied" ||
		q.Get("state") != clientState || q.Has("code") {
		t.Fatalf("deny: %d to %s", resp.StatusCode, loc)
	}
	if cookie(resp, "mcp-gateway-approvals") != nil {
		t.Error("a denial was remembered")
	}
	// Denied, the next request asks again.
	if resp, page := b.Do("GET", g.authURL(clientID, attackerRedirect), nil); resp.StatusCode != http.StatusOK || approvalForm(page) == "" {
		t.Errorf("after a denial: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	// Neither Allow nor Deny: refused, nowhere redirected.
	if resp, _ := b.Submit(page, url.Values{"decision": {"maybe"}}); resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" {
		t.Errorf("decision maybe: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// send sends a request as a browser would, with a form body (when not
// nil), cookies and extra headers, without following a redirect.
func send(t *testing.T, method, rawURL string, form url.Values, cookies []*http.Cookie, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, rawURL, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	for _, c := range cookies {
		req.AddCookie(c)
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// post sends a decision to the approval page's /authorize.
func post(t *testing.T, g *gateway, form url.Values, cookies []*http.Cookie, header map[string]string) *http.Response {
	t.Helper()
	return send(t, "POST", g.URL+"/authorize", form, cookies, header)
}

// shownTo opens an authorization URL in a browser without cookies and
// returns the approval page's sealed request and CSRF cookie.
func shownTo(t *testing.T, authURL string) (string, *http.Cookie) {
	t.Helper()
	resp, page := stepper(t).Do("GET", authURL, nil)
	form, csrf := approvalForm(page), cookie(resp, "mcp-gateway-csrf")
	if form == "" || csrf == nil {
		t.Fatalf("%s: no approval page and CSRF cookie: %d\n%s", authURL, resp.StatusCode, page)
	}
	return form, csrf
}

// TestForgedDecisionsAreRefused tries to click Allow for the user: a
// decision that does not come from the page this browser was shown is
// refused, and goes nowhere.
func TestForgedDecisionsAreRefused(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(t, nil)
	clientID := g.registerNamed(t, "assistant", attackerRedirect)
	authURL := g.authURL(clientID, attackerRedirect)
	// The attacker opens the page in their own browser; the victim opened it
	// in theirs.
	attackerForm, attackerCSRF := shownTo(t, authURL)
	victimForm, victimCSRF := shownTo(t, authURL)
	allowWith := func(form string) url.Values { return url.Values{"request": {form}, "decision": {"allow"}} }

	for name, c := range map[string]struct {
		form    url.Values
		cookies []*http.Cookie
		header  map[string]string
		status  int
	}{
		"the attacker's form, no cookie (a cross-site post carries none)": {allowWith(attackerForm), nil, nil, http.StatusForbidden},
		"the attacker's form with the victim's cookie":                    {allowWith(attackerForm), []*http.Cookie{victimCSRF}, nil, http.StatusForbidden},
		"the victim's form with the attacker's cookie (tossed)":           {allowWith(victimForm), []*http.Cookie{attackerCSRF}, nil, http.StatusForbidden},
		"posted from another site (Sec-Fetch-Site)": {allowWith(victimForm), []*http.Cookie{victimCSRF},
			map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		"posted from a sibling site (Sec-Fetch-Site)": {allowWith(victimForm), []*http.Cookie{victimCSRF},
			map[string]string{"Sec-Fetch-Site": "same-site"}, http.StatusForbidden},
		"posted from another origin (Origin)": {allowWith(victimForm), []*http.Cookie{victimCSRF},
			map[string]string{"Origin": "https://attacker.example"}, http.StatusForbidden},
		"a tampered request":             {allowWith(tamper(victimForm)), []*http.Cookie{victimCSRF}, nil, http.StatusBadRequest},
		"no request":                     {url.Values{"decision": {"allow"}}, []*http.Cookie{victimCSRF}, nil, http.StatusBadRequest},
		"the CSRF cookie as the request": {allowWith(victimCSRF.Value), []*http.Cookie{victimCSRF}, nil, http.StatusBadRequest},
		"the request as the CSRF cookie": {allowWith(victimForm), []*http.Cookie{{Name: victimCSRF.Name, Value: victimForm}}, nil, http.StatusForbidden},
		"a client_id as the request":     {allowWith(clientID), []*http.Cookie{victimCSRF}, nil, http.StatusBadRequest},
	} {
		resp := post(t, g, c.form, c.cookies, c.header)
		if resp.StatusCode != c.status || resp.Header.Get("Location") != "" {
			t.Errorf("%s: %d Location %q, want %d and no redirect", name, resp.StatusCode, resp.Header.Get("Location"), c.status)
		}
		if cookie(resp, "mcp-gateway-approvals") != nil {
			t.Errorf("%s: an approval was remembered", name)
		}
	}
	// The genuine decision, posted from the page itself, goes through.
	resp := post(t, g, allowWith(victimForm), []*http.Cookie{victimCSRF}, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": g.URL})
	if resp.StatusCode != http.StatusFound || !strings.HasPrefix(resp.Header.Get("Location"), s.env.URL+"/o/authorize/") {
		t.Fatalf("the victim's own Allow: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	// A page left open past its 10 minutes is refused.
	g.clock.Advance(11 * time.Minute)
	if resp := post(t, g, allowWith(victimForm), []*http.Cookie{victimCSRF}, nil); resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" {
		t.Errorf("an expired page: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// TestApprovalsAreRemembered: after Allow, the same client and redirect
// URI go straight to the service; another redirect URI of the client, or
// another client with the same redirect URI, ask again. A tampered,
// expired, foreign or mistyped approvals cookie approves nothing.
func TestApprovalsAreRemembered(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(t, nil)
	const otherRedirect = "https://attacker.example/other"
	clientID := g.registerNamed(t, "assistant", attackerRedirect, otherRedirect)
	b := stepper(t)
	resp, _ := allow(t, b, g.authURL(clientID, attackerRedirect))
	approvals := cookie(resp, "mcp-gateway-approvals")
	if approvals == nil || !approvals.HttpOnly || approvals.SameSite != http.SameSiteLaxMode || approvals.Path != "/authorize" ||
		approvals.MaxAge != int(mcp.DefaultApprovalLifetime/time.Second) {
		t.Fatalf("approvals cookie %+v", approvals)
	}
	toService := func(resp *http.Response) bool {
		return resp.StatusCode == http.StatusFound && strings.HasPrefix(resp.Header.Get("Location"), s.env.URL+"/o/authorize/")
	}
	if resp, _ := b.Do("GET", g.authURL(clientID, attackerRedirect), nil); !toService(resp) {
		t.Errorf("the approved client and redirect again: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	asks := func(b *handlerstest.Browser, clientID, redirectURI string) bool {
		resp, page := b.Do("GET", g.authURL(clientID, redirectURI), nil)
		return resp.StatusCode == http.StatusOK && approvalForm(page) != ""
	}
	if !asks(b, clientID, otherRedirect) {
		t.Error("another redirect URI of the approved client did not ask")
	}
	newcomer := g.registerNamed(t, "assistant", attackerRedirect)
	if !asks(b, newcomer, attackerRedirect) {
		t.Error("a new client with the approved redirect URI did not ask")
	}

	// The cookie, replayed: for the approved pair it works in any browser
	// (it is the browser's own record); for any other pair it approves
	// nothing, whatever it is made of.
	withCookie := func(c *http.Cookie, clientID, redirectURI string) *http.Response {
		return send(t, "GET", g.authURL(clientID, redirectURI), nil, []*http.Cookie{c}, nil)
	}
	if resp := withCookie(approvals, clientID, attackerRedirect); !toService(resp) {
		t.Errorf("the genuine cookie: %d", resp.StatusCode)
	}
	_, csrf := shownTo(t, g.authURL(clientID, attackerRedirect))
	for name, c := range map[string]*http.Cookie{
		"tampered":          {Name: approvals.Name, Value: tamper(approvals.Value)},
		"a CSRF cookie":     {Name: approvals.Name, Value: csrf.Value},
		"a client_id":       {Name: approvals.Name, Value: clientID},
		"under another key": {Name: approvals.Name, Value: approvalsOfAnotherGateway(t, s)},
	} {
		if resp := withCookie(c, clientID, attackerRedirect); toService(resp) {
			t.Errorf("%s approvals cookie approved the client", name)
		}
	}
	if resp := withCookie(approvals, newcomer, attackerRedirect); toService(resp) {
		t.Error("the cookie approved another client")
	}
	// Past its lifetime, the approval is forgotten.
	g.clock.Advance(mcp.DefaultApprovalLifetime + time.Minute)
	if !asks(b, clientID, attackerRedirect) {
		t.Error("an expired approval still approves")
	}
}

// approvalsOfAnotherGateway is a genuine approvals cookie of a gateway
// with another broker key.
func approvalsOfAnotherGateway(t *testing.T, s *stack) string {
	t.Helper()
	other := s.startGateway(t, func(c *mcp.Config) { c.BrokerKey = strings.Repeat("o", 40) })
	resp, _ := allow(t, stepper(t), other.authURL(other.registerClient(t), clientRedirect))
	return cookie(resp, "mcp-gateway-approvals").Value
}

// TestApprovalsCookieIsBounded: a browser remembers the newest 20
// approvals; the cookie stays small.
func TestApprovalsCookieIsBounded(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(t, nil)
	b := stepper(t)
	var clients []string
	var size int
	for range 25 {
		clients = append(clients, g.registerClient(t))
		resp, _ := allow(t, b, g.authURL(clients[len(clients)-1], clientRedirect))
		size = len(cookie(resp, "mcp-gateway-approvals").Value)
	}
	if size > 2048 {
		t.Errorf("the approvals cookie of 25 approvals is %d bytes", size)
	}
	for i, clientID := range clients {
		resp, _ := b.Do("GET", g.authURL(clientID, clientRedirect), nil)
		if remembered := resp.StatusCode == http.StatusFound; remembered != (i >= 5) {
			t.Errorf("approval %d of 25: remembered %v", i+1, remembered)
		}
	}
}

// TestApprovalsNotRemembered: with MCP_APPROVAL_LIFETIME=0 the page asks
// every time, and no approvals cookie is set.
func TestApprovalsNotRemembered(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(t, func(c *mcp.Config) { c.ApprovalLifetime = 0 })
	clientID := g.registerClient(t)
	b := stepper(t)
	resp, _ := allow(t, b, g.authURL(clientID, clientRedirect))
	if resp.StatusCode != http.StatusFound || cookie(resp, "mcp-gateway-approvals") != nil {
		t.Errorf("Allow: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	allow(t, b, g.authURL(clientID, clientRedirect)) // asks again
}
