package mcp

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"regexp"
)

// The flow binding: a forwarded authorization belongs to the browser
// that approved it.
//
// forward sends the browser to the service's /o/authorize/ with a sealed
// state, which the service hands back to /oauth/callback with its code.
// The forwarded link is a bearer: whoever opens it follows it. Were the
// sealed state enough at the callback, a party could approve its own
// client in its own browser, copy the link the gateway forwards to and
// send it to a user: the service, which trusts the gateway's client and
// asks no consent, would return that user's code through the callback to
// the party's redirect URI, the approval page never shown to the user.
//
// So forward also gives the browser it answers a cookie that holds a
// random 256-bit secret, and seals the secret's SHA-256 into the state.
// The callback accepts the state only from a browser that holds a cookie
// whose value hashes to it (compared in constant time), and clears that
// cookie at once: each flow finishes once, in the browser that started it.
// In any other browser the callback shows an error page. It makes no code
// and redirects nowhere, not even an error: the state's redirect URI is
// the one of whoever started the flow.
//
// Each flow has its own cookie, named after its hash, so flows started in
// two tabs do not undo each other, and a user's own pending flow vouches
// for no one else's link. A browser keeps at most maxPendingFlows: a
// forward beyond them clears the others, so a page that keeps starting
// flows in a user's browser cannot grow its cookies without bound (the
// user's own pending flow then has to be started again). The cookies live
// as long as the state (stateLifetime), HttpOnly and SameSite=Lax (the
// service's redirect to the callback is a top-level navigation, maybe from
// another site), and are set as the approval page's (approval.go), Secure
// and __Host- on https, but for the whole gateway (Path=/, below the path
// of MCP_RESOURCE_URL on plain http): /authorize counts them, the callback
// reads them.
//
// What it cannot stop: whoever can set cookies for the gateway's host
// name can plant a binding of their own flow. On https, __Host- keeps
// sibling subdomains out, but any page served on the same host name, on
// any port, can set the gateway's cookies; on plain http (a developer's
// loopback) so can any page on that host. Serve nothing untrusted on the
// gateway's host name.

// flowCookiePrefix starts the name of every flow's cookie; the name ends
// with the start of the flow's hash.
const flowCookiePrefix = "mcp-gateway-flow-"

// maxPendingFlows is how many flows a browser may have started and not
// finished; more than a user starts at once.
const maxPendingFlows = 8

// flowCookiePath is the endpoint path of the flows' cookies: every path,
// as both /authorize and the callback read them.
const flowCookiePath = "/"

// flowBindingPattern is the form of a flow's binding (the base64url
// SHA-256 of its secret), as sealed into the state.
var flowBindingPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{43}$`)

// flowCookie is the name of the cookie of the flow with the binding.
func flowCookie(binding string) string { return flowCookiePrefix + binding[:16] }

// flowHash is the binding of a flow's secret.
func flowHash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// bindFlow gives the browser the cookie of a new flow and returns the
// flow's binding, to be sealed into its state. Past maxPendingFlows, the
// browser's other flows are cleared first.
func (g *Gateway) bindFlow(w http.ResponseWriter, r *http.Request) string {
	if pending := g.cookies.names(r, flowCookiePrefix); len(pending) >= maxPendingFlows {
		for _, name := range pending {
			g.cookies.clear(w, name, flowCookiePath)
		}
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret) // never fails (crypto/rand)
	value := base64.RawURLEncoding.EncodeToString(secret)
	binding := flowHash(value)
	g.cookies.set(w, flowCookie(binding), flowCookiePath, value, stateLifetime)
	return binding
}

// finishFlow reports whether the request comes from the browser that the
// flow with the binding was forwarded from, and if so clears the flow's
// cookie: a flow finishes once.
func (g *Gateway) finishFlow(w http.ResponseWriter, r *http.Request, binding string) bool {
	if !flowBindingPattern.MatchString(binding) {
		return false // a state sealed before flows were bound, or a fault
	}
	value := g.cookies.value(r, flowCookie(binding))
	if value == "" || !equal(flowHash(value), binding) {
		return false
	}
	g.cookies.clear(w, flowCookie(binding), flowCookiePath)
	return true
}
