package mcp_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/oauth2"

	"exchange/handlers/handlerstest"
	"exchange/mcp"
)

// forwarded opens a client's authorization request in a browser, allows
// it on the approval page (unless the browser approved it before) and
// returns the link the gateway forwards the browser to: the service's
// /o/authorize/ with the gateway's client and the sealed state.
func forwarded(t *testing.T, b *handlerstest.Browser, authURL string) *url.URL {
	t.Helper()
	resp, page := b.Do("GET", authURL, nil)
	if approvalForm(page) != "" {
		resp, page = b.Submit(page, url.Values{"decision": {"allow"}})
	}
	to, _ := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || to.Query().Get("state") == "" || !strings.Contains(to.Path, "/o/authorize") {
		t.Fatalf("%s: want a forward to the service, got %d Location %q\n%s", authURL, resp.StatusCode, to, page)
	}
	return to
}

// recordingBrowser is a browser that follows every redirect except one
// to a client's redirect URI (the attacker's or clientRedirect), which it
// records; while step is set, it follows none.
type recordingBrowser struct {
	*handlerstest.Browser
	step    bool
	reached []*url.URL // what reached a client
}

func newRecordingBrowser(t *testing.T) *recordingBrowser {
	v := &recordingBrowser{}
	v.Browser = handlerstest.NewBrowser(t, func(to *url.URL) bool {
		if strings.HasPrefix(to.String(), attackerRedirect) || strings.HasPrefix(to.String(), clientRedirect) {
			v.reached = append(v.reached, to)
			return true
		}
		return v.step
	})
	return v
}

// forwarded is the package's forwarded, in a recording browser.
func (v *recordingBrowser) forwarded(t *testing.T, authURL string) *url.URL {
	t.Helper()
	v.step = true
	defer func() { v.step = false }()
	return forwarded(t, v.Browser, authURL)
}

// TestForwardedLinkReplayedInAnotherBrowser is the attack: a party
// registers a client with its own redirect, approves it in its own
// browser, and sends the link the gateway forwarded it to, to a victim.
// The victim signs in at the service (or is signed in, or has a flow of
// their own under way): the service, which trusts the gateway's client,
// returns to the gateway's callback, and the callback, in a browser that
// did not start the flow, shows an error page and sends nothing anywhere.
func TestForwardedLinkReplayedInAnotherBrowser(t *testing.T) {
	s := newStack(t)
	w := s.seed(t)
	g := s.startGateway(t, nil)
	attackerClient := g.registerNamed(t, "Claude", attackerRedirect)
	attacker := stepper(t)
	link := func() string { return forwarded(t, attacker, g.authURL(attackerClient, attackerRedirect)).String() }

	refused := func(name string, v *recordingBrowser, resp *http.Response, page string) {
		t.Helper()
		if resp.StatusCode != http.StatusForbidden || resp.Request.URL.Path != "/oauth/callback" || resp.Header.Get("Location") != "" {
			t.Errorf("%s: %d at %s Location %q, want the gateway's error page", name, resp.StatusCode, resp.Request.URL, resp.Header.Get("Location"))
		}
		if !strings.Contains(page, "This sign-in was not started in this browser") || !strings.Contains(page, "Nothing was shared") {
			t.Errorf("%s: the page does not say what happened:\n%s", name, page)
		}
		if len(v.reached) > 0 {
			t.Errorf("%s: the browser was sent to %v", name, v.reached)
		}
	}

	// A victim who signs in on the service's login page the link shows.
	victim := newRecordingBrowser(t)
	_, page := victim.Do("GET", link(), nil)
	resp, page := victim.Login(page, w.managerA, handlerstest.Password)
	refused("signing in", victim, resp, page)

	// The same victim, signed in now, sent another link: straight through
	// the service to the same page.
	resp, page = victim.Do("GET", link(), nil)
	refused("signed in", victim, resp, page)

	// A victim with a flow of their own under way, whose cookie the
	// attacker's state does not name; their own flow still finishes.
	own := g.registerClient(t)
	ownLink := victim.forwarded(t, g.authURL(own, clientRedirect))
	resp, page = victim.Do("GET", link(), nil)
	refused("with a flow of their own", victim, resp, page)
	victim.Do("GET", ownLink.String(), nil)
	if len(victim.reached) != 1 || victim.reached[0].Query().Get("code") == "" || !strings.HasPrefix(victim.reached[0].String(), clientRedirect) {
		t.Errorf("the victim's own flow: reached %v, want a code at %s", victim.reached, clientRedirect)
	}

	// The attacker's own flow, in the attacker's browser, works: the
	// binding refuses the browser, not the flow.
	attacker2 := newRecordingBrowser(t)
	_, page = attacker2.Do("GET", attacker2.forwarded(t, g.authURL(attackerClient, attackerRedirect)).String(), nil)
	attacker2.Login(page, w.managerB, handlerstest.Password)
	if len(attacker2.reached) != 1 || attacker2.reached[0].Query().Get("code") == "" {
		t.Errorf("the attacker's own flow in the attacker's browser: reached %v", attacker2.reached)
	}
}

// TestCallbackRedirectsOnlyTheBrowserThatStartedTheFlow: a genuine state
// with an error (or a code) sent to the callback by another browser
// redirects nowhere (the state's redirect URI would take whatever the
// sender wrote); in the browser that started the flow it reaches the
// client once, its description kept only when it is plain.
func TestCallbackRedirectsOnlyTheBrowserThatStartedTheFlow(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(t, nil)
	clientID := g.registerNamed(t, "assistant", attackerRedirect)
	callback := func(b *handlerstest.Browser, q url.Values) *http.Response {
		resp, _ := b.Do("GET", g.URL+"/oauth/callback?"+q.Encode(), nil)
		return resp
	}
	starter := stepper(t)
	state := forwarded(t, starter, g.authURL(clientID, attackerRedirect)).Query().Get("state")
	for name, q := range map[string]url.Values{
		"an error":   {"state": {state}, "error": {"access_denied"}, "error_description": {"Your session expired: sign in at https://attacker.example/login"}},
		"a code":     {"state": {state}, "code": {"service-code"}},
		"no answer":  {"state": {state}},
		"both":       {"state": {state}, "code": {"x"}, "error": {"server_error"}},
		"two states": {"state": {state, "x"}, "error": {"access_denied"}},
	} {
		if resp := callback(stepper(t), q); resp.StatusCode != http.StatusForbidden || resp.Header.Get("Location") != "" {
			t.Errorf("%s from another browser: %d Location %q, want 403 and no redirect", name, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	// The starter's browser: its error reaches the client, the description
	// dropped when it holds what RFC 6749 does not allow.
	resp := callback(starter, url.Values{"state": {state}, "error": {"access_denied"}, "error_description": {`a "quoted" \ description`}})
	loc, _ := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || !strings.HasPrefix(loc.String(), attackerRedirect+"?") || loc.Query().Get("error") != "access_denied" ||
		loc.Query().Get("state") != clientState || loc.Query().Has("error_description") {
		t.Errorf("the starter's error: %d to %s", resp.StatusCode, loc)
	}
	// Once: the flow's cookie is gone.
	if resp := callback(starter, url.Values{"state": {state}, "code": {"service-code"}}); resp.StatusCode != http.StatusForbidden || resp.Header.Get("Location") != "" {
		t.Errorf("the state again in the starter's browser: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	state = forwarded(t, starter, g.authURL(clientID, attackerRedirect)).Query().Get("state")
	resp = callback(starter, url.Values{"state": {state}, "error": {"login_required"}, "error_description": {"The user is not signed in."}})
	if loc, _ := url.Parse(resp.Header.Get("Location")); loc.Query().Get("error") != "login_required" || loc.Query().Get("error_description") != "The user is not signed in." {
		t.Errorf("a plain description: %d to %s", resp.StatusCode, loc)
	}
}

// flowCookies are the flow cookies a browser sends to the callback.
func flowCookies(b *handlerstest.Browser, g *gateway) []*http.Cookie {
	to, _ := url.Parse(g.URL + "/oauth/callback")
	var out []*http.Cookie
	for _, c := range b.Jar().Cookies(to) {
		if strings.HasPrefix(c.Name, "mcp-gateway-flow-") {
			out = append(out, c)
		}
	}
	return out
}

// TestFlowCookies: each forwarded flow has its own cookie, HttpOnly and
// SameSite=Lax (Secure and __Host- on https),
// cleared when the flow finishes; flows in two tabs both finish, and a
// browser holds at most 8 pending flows.
func TestFlowCookies(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(t, nil)
	clientID := g.registerClient(t)
	verifier := oauth2.GenerateVerifier()
	b := stepper(t)
	resp, _ := allow(t, b, g.oauthConfig(clientID).AuthCodeURL(clientState, oauth2.S256ChallengeOption(verifier)))
	var flow *http.Cookie
	for _, c := range resp.Cookies() {
		if strings.HasPrefix(c.Name, "mcp-gateway-flow-") {
			flow = c
		}
	}
	if flow == nil || !flow.HttpOnly || flow.SameSite != http.SameSiteLaxMode || flow.Path != "/" || flow.Secure || flow.MaxAge != 600 || len(flow.Value) < 43 {
		t.Fatalf("flow cookie %+v", flow)
	}
	first, _ := url.Parse(resp.Header.Get("Location"))
	second := forwarded(t, b, g.authURL(clientID, clientRedirect)) // approved: no page
	if n := len(flowCookies(b, g)); n != 2 {
		t.Fatalf("two flows, %d cookies", n)
	}
	for i, to := range []*url.URL{second, first} {
		resp, _ := b.Do("GET", g.URL+"/oauth/callback?"+url.Values{"state": {to.Query().Get("state")}, "code": {"service-code"}}.Encode(), nil)
		if resp.StatusCode != http.StatusFound || !strings.HasPrefix(resp.Header.Get("Location"), clientRedirect) {
			t.Errorf("flow %d of two in one browser: %d", 2-i, resp.StatusCode)
		}
		cleared := false
		for _, c := range resp.Cookies() {
			cleared = cleared || (strings.HasPrefix(c.Name, "mcp-gateway-flow-") && c.MaxAge < 0 && c.Path == "/")
		}
		if !cleared {
			t.Errorf("flow %d: the callback did not clear its cookie: %v", 2-i, resp.Cookies())
		}
	}
	if n := len(flowCookies(b, g)); n != 0 {
		t.Errorf("finished flows left %d cookies", n)
	}

	// A page that keeps starting flows in the browser: never more than 8
	// cookies, and the newest flow finishes.
	var last *url.URL
	for i := range 20 {
		last = forwarded(t, b, g.authURL(clientID, clientRedirect))
		if n := len(flowCookies(b, g)); n > 8 {
			t.Fatalf("after %d flows, %d flow cookies", i+1, n)
		}
	}
	resp, _ = b.Do("GET", g.URL+"/oauth/callback?"+url.Values{"state": {last.Query().Get("state")}, "code": {"service-code"}}.Encode(), nil)
	if resp.StatusCode != http.StatusFound {
		t.Errorf("the newest of 20 flows: %d", resp.StatusCode)
	}

	// Behind https: Secure, __Host-, Path=/.
	https := s.startGateway(t, func(c *mcp.Config) { c.ResourceURL = "https://mcp.example.org" })
	resp, page := stepper(t).Do("GET", https.authURL(https.registerClient(t), clientRedirect), nil)
	resp = post(t, https, url.Values{"request": {approvalForm(page)}, "decision": {"allow"}}, []*http.Cookie{cookie(resp, "__Host-mcp-gateway-csrf")}, nil)
	flow = nil
	for _, c := range resp.Cookies() {
		if strings.HasPrefix(c.Name, "__Host-mcp-gateway-flow-") {
			flow = c
		}
	}
	if flow == nil || !flow.Secure || !flow.HttpOnly || flow.Path != "/" || flow.Domain != "" || flow.SameSite != http.SameSiteLaxMode {
		t.Errorf("flow cookie of an https gateway %+v (all: %v)", flow, resp.Cookies())
	}
}
