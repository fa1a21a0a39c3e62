package mcp

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// The approval page: the gateway's own consent.
//
// The gateway signs users in at the service with one confidential client
// that the service trusts (it shows no consent page for it). Were
// /authorize to forward at once, any party that registers a client here
// would receive the access of whoever opens its link while signed in at
// the service: the confused deputy of the MCP specification's security
// best practices. So the gateway asks the user first, on its own origin,
// and forwards only after Allow. The answer is remembered in the browser
// per client id and redirect URI, so a client the user approved does not
// ask again, while a new client or a new redirect URI does.
//
// Everything is sealed (seal.go), as the rest of the broker, so the
// gateway stays stateless:
//   - The page's form carries the request it asks about (kindApprovalRequest),
//     bound to a nonce that the browser holds in a cookie (kindCSRF): a
//     decision posted from anywhere but this page in this browser is
//     refused (double submit). Requests from other sites are refused
//     earlier still (http.CrossOriginProtection), and the CSRF cookie is
//     SameSite=Lax, so a cross-site post never carries it.
//   - The approvals cookie (kindApprovals) lists the keys of approved
//     (client id, redirect URI) pairs, each with its expiry, the newest
//     first and at most maxRememberedApprovals of them.
//
// Cookies are HttpOnly and SameSite=Lax (the approvals cookie must reach
// /authorize on the top-level navigation from the assistant). Behind an
// https MCP_RESOURCE_URL they are Secure and named __Host-, which a
// sibling subdomain cannot set (cookie tossing: planting one's own
// approval in a victim's browser); that prefix requires Path=/. On a
// plain http gateway (a developer's loopback) they are scoped to
// /authorize. The flows' cookies (binding.go) are set the same way.

// DefaultApprovalLifetime is how long a browser remembers an approval
// unless MCP_APPROVAL_LIFETIME says otherwise.
const DefaultApprovalLifetime = 30 * 24 * time.Hour

// maxRememberedApprovals bounds the approvals cookie: about 40 bytes an
// approval, well under a browser's 4 KiB per cookie.
const maxRememberedApprovals = 20

// approvalPageLifetime is how long the approval page's form and its CSRF
// cookie stay good: as long as the state at the service's login page.
const approvalPageLifetime = stateLifetime

// Names of the cookies, before the __Host- prefix of an https gateway.
const (
	approvalsCookie = "mcp-gateway-approvals"
	csrfCookie      = "mcp-gateway-csrf"
)

// approvalRequest is sealed into the approval page's form
// (kindApprovalRequest): the request the user decides on, and the nonce of
// the CSRF cookie the browser that saw the page holds.
type approvalRequest struct {
	clientRequest
	Nonce string `json:"n"`
}

// csrfToken is sealed into the CSRF cookie (kindCSRF).
type csrfToken struct {
	Nonce string `json:"n"`
}

// rememberedApproval is an entry of the approvals cookie (kindApprovals).
type rememberedApproval struct {
	Key     string `json:"k"` // approvalKey of the client id and redirect URI
	Expires int64  `json:"e"` // unix seconds
}

// approvalKey identifies a client id and redirect URI pair in the
// approvals cookie: a digest, as client ids are long.
func approvalKey(clientID, redirectURI string) string {
	sum := sha256.Sum256([]byte(clientID + "\x00" + redirectURI))
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

// cookieSettings are how the gateway's browser cookies are set: see the
// comment at the top of this file.
type cookieSettings struct {
	prefix string // "__Host-" on an https gateway
	root   string // the path of MCP_RESOURCE_URL, below which the endpoints are, on plain http
	secure bool
}

func newCookieSettings(issuer string) cookieSettings {
	u, _ := url.Parse(issuer) // checked by New
	if u.Scheme == "https" {
		return cookieSettings{prefix: "__Host-", secure: true}
	}
	return cookieSettings{root: u.Path}
}

// path is the Path of a cookie that the endpoint (such as "/authorize")
// reads: the endpoint's own on plain http, "/" on https, as __Host-
// requires.
func (c cookieSettings) path(endpoint string) string {
	if c.secure {
		return "/"
	}
	return c.root + endpoint
}

// set sets a cookie for the endpoint that reads it.
func (c cookieSettings) set(w http.ResponseWriter, name, endpoint, value string, lifetime time.Duration) {
	http.SetCookie(w, &http.Cookie{Name: c.prefix + name, Value: value, Path: c.path(endpoint), MaxAge: int(lifetime / time.Second),
		HttpOnly: true, Secure: c.secure, SameSite: http.SameSiteLaxMode})
}

// clear tells the browser to drop a cookie set for the endpoint.
func (c cookieSettings) clear(w http.ResponseWriter, name, endpoint string) {
	http.SetCookie(w, &http.Cookie{Name: c.prefix + name, Value: "", Path: c.path(endpoint), MaxAge: -1,
		HttpOnly: true, Secure: c.secure, SameSite: http.SameSiteLaxMode})
}

func (c cookieSettings) value(r *http.Request, name string) string {
	if ck, err := r.Cookie(c.prefix + name); err == nil {
		return ck.Value
	}
	return ""
}

// names returns the names of the request's cookies that start with
// prefix, without the __Host- prefix.
func (c cookieSettings) names(r *http.Request, prefix string) []string {
	var out []string
	for _, ck := range r.Cookies() {
		if name, ok := strings.CutPrefix(ck.Name, c.prefix); ok && strings.HasPrefix(name, prefix) && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// approvals returns the unexpired approvals this browser remembers; none
// when its cookie is missing, tampered, of another kind or expired.
func (g *Gateway) approvals(r *http.Request) []rememberedApproval {
	var list []rememberedApproval
	if g.seal.open(kindApprovals, g.cookies.value(r, approvalsCookie), &list) != nil {
		return nil
	}
	now := g.cfg.Now().Unix()
	return slices.DeleteFunc(list, func(a rememberedApproval) bool { return a.Expires <= now })
}

// approvedBefore reports whether this browser approved the request's
// client id and redirect URI within the approval lifetime.
func (g *Gateway) approvedBefore(r *http.Request, req clientRequest) bool {
	key := approvalKey(req.ClientID, req.RedirectURI)
	return slices.ContainsFunc(g.approvals(r), func(a rememberedApproval) bool { return a.Key == key })
}

// rememberApproval adds the request's client id and redirect URI to the
// browser's approvals, the newest first, dropping the oldest beyond
// maxRememberedApprovals. Nothing is remembered when the lifetime is zero.
func (g *Gateway) rememberApproval(w http.ResponseWriter, r *http.Request, req clientRequest) {
	lifetime := g.cfg.ApprovalLifetime
	if lifetime <= 0 {
		return
	}
	key := approvalKey(req.ClientID, req.RedirectURI)
	list := slices.DeleteFunc(g.approvals(r), func(a rememberedApproval) bool { return a.Key == key })
	list = slices.Insert(list, 0, rememberedApproval{Key: key, Expires: g.cfg.Now().Add(lifetime).Unix()})
	list = list[:min(len(list), maxRememberedApprovals)]
	sealed, err := g.seal.seal(kindApprovals, lifetime, list)
	if err != nil {
		g.log.Error("sealing the approvals cookie failed", "error", err)
		return
	}
	g.cookies.set(w, approvalsCookie, authorizePath, sealed, lifetime)
}

// askApproval shows the approval page for a request, with a CSRF cookie
// whose nonce the page's sealed request carries. A browser keeps its nonce
// while its cookie is good, so approval pages open in two tabs both work.
func (g *Gateway) askApproval(w http.ResponseWriter, r *http.Request, reg clientRegistration, req clientRequest) {
	var csrf csrfToken
	if g.seal.open(kindCSRF, g.cookies.value(r, csrfCookie), &csrf) != nil || csrf.Nonce == "" {
		csrf.Nonce = rand.Text()
	}
	cookie, errCookie := g.seal.seal(kindCSRF, approvalPageLifetime, csrf)
	form, errForm := g.seal.seal(kindApprovalRequest, approvalPageLifetime, approvalRequest{clientRequest: req, Nonce: csrf.Nonce})
	if err := errors.Join(errCookie, errForm); err != nil {
		g.log.Error("sealing an approval request failed", "error", err)
		redirectError(w, r, req.RedirectURI, req.State, "server_error", "")
		return
	}
	g.cookies.set(w, csrfCookie, authorizePath, cookie, approvalPageLifetime)
	to, _ := url.Parse(req.RedirectURI) // registered, so it parses
	host := to.Host
	if host == "" {
		host = to.Scheme + ":" // a private-use scheme without an authority (RFC 8252 7.1)
	}
	view := approvalView{
		ClientName: displayable(reg.Name), Host: host, RedirectURI: req.RedirectURI,
		Loopback: to.Scheme == "http" && isLoopback(to.Hostname()),
		Action:   g.issuer + "/authorize", Request: form, Remember: describeLifetime(g.cfg.ApprovalLifetime),
	}
	setPageHeaders(w.Header())
	w.WriteHeader(http.StatusOK)
	if err := pages.ExecuteTemplate(w, "approval", view); err != nil {
		g.log.Error("rendering the approval page failed", "error", err)
	}
}

// decide takes the user's answer on the approval page. Allow remembers the
// approval and forwards to the service; Deny returns access_denied to the
// client. Both go only to the redirect URI sealed in the request, which
// /authorize matched against the client's sealed registration: never to
// one taken from the form.
func (g *Gateway) decide(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		errorPage(w, http.StatusBadRequest, "Not an approval", "The approval form could not be read. Go back to your application and connect again.")
		return
	}
	var req approvalRequest
	if err := g.seal.open(kindApprovalRequest, r.PostForm.Get("request"), &req); err != nil {
		errorPage(w, http.StatusBadRequest, "Approval expired", "This approval page is "+err.Error()+". Go back to your application and connect again.")
		return
	}
	var csrf csrfToken
	if err := g.seal.open(kindCSRF, g.cookies.value(r, csrfCookie), &csrf); err != nil || csrf.Nonce == "" || !equal(csrf.Nonce, req.Nonce) {
		errorPage(w, http.StatusForbidden, "Approval not confirmed",
			"This answer did not come from the approval page this browser was shown. Go back to your application and connect again.")
		return
	}
	switch r.PostForm.Get("decision") {
	case "allow":
		g.rememberApproval(w, r, req.clientRequest)
		g.forward(w, r, req.clientRequest)
	case "deny":
		redirectError(w, r, req.RedirectURI, req.State, "access_denied", "the user did not allow the application access")
	default:
		errorPage(w, http.StatusBadRequest, "No answer", "Choose Allow or Deny on the approval page.")
	}
}

// crossOriginRefused answers a decision posted from another site.
func crossOriginRefused(w http.ResponseWriter, _ *http.Request) {
	errorPage(w, http.StatusForbidden, "Approval not confirmed",
		"This answer was sent from another site, not from the gateway's approval page. Go back to your application and connect again.")
}

// describeLifetime says how long an approval is remembered, in words for
// the page; "" when approvals are not remembered.
func describeLifetime(d time.Duration) string {
	switch {
	case d <= 0:
		return ""
	case d%(24*time.Hour) == 0 && d > 24*time.Hour:
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	case d == 24*time.Hour:
		return "a day"
	case d%time.Hour == 0 && d > time.Hour:
		return fmt.Sprintf("%d hours", d/time.Hour)
	}
	return d.String()
}
