package mcp

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"golang.org/x/oauth2"
)

// Lifetimes of the broker's blobs.
const (
	clientLifetime  = 365 * 24 * time.Hour // a registration; then the client registers again
	stateLifetime   = 10 * time.Minute     // the user's time at the service's login page
	codeLifetime    = 2 * time.Minute      // from the redirect to the client's token request
	refreshLifetime = 30 * 24 * time.Hour  // the service's refresh tokens live as long
)

// serviceScopes are what the gateway asks the service for: openid for
// userinfo, offline_access for a refresh token, and no more access than
// its tools use (reads of FHIR and of the admin API): a token obtained
// through the gateway cannot write, whatever the user may do. The service
// registers the gateway's client for these scopes and no others
// (oauth.GatewayScopes), and grants it nothing else whatever the forwarded
// link says; the gateway accepts no client request for another scope, and
// hands a client only a token granted readScopes and no scope beyond
// serviceScopes (grantRefused).
const serviceScopes = "openid profile email offline_access fhirUser user/*.rs exchange/admin.read"

// readScopes are the scopes of serviceScopes that name access: what the
// tools read with. A grant must hold both: at the service, a token whose
// scopes name no access acts with the user's full access.
var readScopes = []string{"user/*.rs", "exchange/admin.read"}

// beyondServiceScopes returns the scopes of a space-separated list that
// are not serviceScopes; none for an empty list.
func beyondServiceScopes(scopes string) []string {
	allowed := strings.Fields(serviceScopes)
	var beyond []string
	for _, s := range strings.Fields(scopes) {
		if !slices.Contains(allowed, s) {
			beyond = append(beyond, s)
		}
	}
	return beyond
}

// Limits of a registration, so a client_id stays a reasonable URL part.
const (
	maxRedirectURIs    = 5
	maxRedirectURILen  = 512
	maxClientNameLen   = 100 // characters
	maxStateLen        = 1024
	maxRegistrationLen = 16 << 10
)

// clientRegistration is sealed into the client_id (kindClient).
type clientRegistration struct {
	RedirectURIs []string `json:"r"`
	Name         string   `json:"n,omitempty"`
	IssuedAt     int64    `json:"i"`
}

// clientRequest is a client's authorization request as /authorize
// accepted it: the redirect URI is one the client registered.
type clientRequest struct {
	ClientID    string `json:"c"`
	RedirectURI string `json:"r"`
	State       string `json:"s,omitempty"` // the client's own state
	Challenge   string `json:"p"`           // the client's PKCE challenge
	Resource    string `json:"a,omitempty"`
}

// pendingAuthorization is sealed into the state the service carries
// through its login page (kindState).
type pendingAuthorization struct {
	clientRequest
	Verifier string `json:"v"` // the gateway's PKCE verifier at the service
	Binding  string `json:"b"` // the hash of the browser's flow cookie (binding.go)
}

// codeGrant is sealed into the gateway's authorization code (kindCode).
// It holds the service's code, not tokens: the gateway redeems it when the
// client redeems this one, so the service's single use of codes applies.
type codeGrant struct {
	ClientID    string `json:"c"`
	RedirectURI string `json:"r"`
	Challenge   string `json:"p"`
	Resource    string `json:"a,omitempty"`
	ServiceCode string `json:"x"`
	Verifier    string `json:"v"`
}

// refreshGrant wraps the service's refresh token (kindRefresh), bound to
// the client it was issued to.
type refreshGrant struct {
	ClientID     string `json:"c"`
	Resource     string `json:"a,omitempty"`
	RefreshToken string `json:"t"`
}

// protectedResourceMetadata serves RFC 9728 metadata: the gateway is the
// authorization server of its own MCP endpoint.
func (g *Gateway) protectedResourceMetadata(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Cache-Control", "public, max-age=3600")
	writeJSON(w, http.StatusOK, map[string]any{
		"resource":                 g.resource,
		"authorization_servers":    []string{g.issuer},
		"bearer_methods_supported": []string{"header"},
		"scopes_supported":         strings.Fields(serviceScopes),
		"resource_name":            "Clinical data exchange (MCP gateway)",
	})
}

// authorizationServerMetadata serves RFC 8414 metadata.
func (g *Gateway) authorizationServerMetadata(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Cache-Control", "public, max-age=3600")
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                g.issuer,
		"authorization_endpoint":                g.issuer + "/authorize",
		"token_endpoint":                        g.issuer + "/token",
		"registration_endpoint":                 g.issuer + "/register",
		"response_types_supported":              []string{"code"},
		"response_modes_supported":              []string{"query"},
		"grant_types_supported":                 []string{"authorization_code", "refresh_token"},
		"code_challenge_methods_supported":      []string{"S256"},
		"token_endpoint_auth_methods_supported": []string{"none"},
		"scopes_supported":                      strings.Fields(serviceScopes),
		"service_documentation":                 g.issuer + "/health",
	})
}

// register serves RFC 7591 Dynamic Client Registration for public
// clients. Nothing is stored: the registration is sealed into the
// client_id.
func (g *Gateway) register(w http.ResponseWriter, r *http.Request) {
	var req struct {
		RedirectURIs            []string `json:"redirect_uris"`
		ClientName              string   `json:"client_name"`
		TokenEndpointAuthMethod string   `json:"token_endpoint_auth_method"`
		GrantTypes              []string `json:"grant_types"`
		ResponseTypes           []string `json:"response_types"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRegistrationLen)).Decode(&req); err != nil {
		registrationError(w, "invalid_client_metadata", "The body must be a JSON object of client metadata (RFC 7591).")
		return
	}
	if m := req.TokenEndpointAuthMethod; m != "" && m != "none" {
		registrationError(w, "invalid_client_metadata", "Only public clients register here: token_endpoint_auth_method must be none.")
		return
	}
	for _, gt := range req.GrantTypes {
		if gt != "authorization_code" && gt != "refresh_token" {
			registrationError(w, "invalid_client_metadata", "grant_types may contain authorization_code and refresh_token only.")
			return
		}
	}
	for _, rt := range req.ResponseTypes {
		if rt != "code" {
			registrationError(w, "invalid_client_metadata", "response_types may contain code only.")
			return
		}
	}
	if len(req.RedirectURIs) == 0 || len(req.RedirectURIs) > maxRedirectURIs {
		registrationError(w, "invalid_redirect_uri", "Register between 1 and 5 redirect_uris.")
		return
	}
	for _, u := range req.RedirectURIs {
		if reason := g.redirectRefused(u); reason != "" {
			registrationError(w, "invalid_redirect_uri", reason)
			return
		}
	}
	name := shorten(displayable(req.ClientName), maxClientNameLen)
	reg := clientRegistration{RedirectURIs: req.RedirectURIs, Name: name, IssuedAt: g.cfg.Now().Unix()}
	clientID, err := g.seal.seal(kindClient, clientLifetime, reg)
	if err != nil {
		g.log.Error("sealing a client registration failed", "error", err)
		writeJSON(w, http.StatusInternalServerError, oauthErrorBody{Error: "server_error"})
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, map[string]any{
		"client_id":                  clientID,
		"client_id_issued_at":        reg.IssuedAt,
		"client_secret_expires_at":   0,
		"redirect_uris":              reg.RedirectURIs,
		"client_name":                name,
		"token_endpoint_auth_method": "none",
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
	})
}

func registrationError(w http.ResponseWriter, code, desc string) {
	writeJSON(w, http.StatusBadRequest, oauthErrorBody{Error: code, Description: desc})
}

// redirectRefused says why a redirect URI may not be registered, or ""
// when it may: one of MCP_ALLOWED_REDIRECTS exactly, https, or http on a
// loopback address (RFC 8252 7.3); never with a fragment or userinfo
// (RFC 6749 3.1.2, RFC 7591 2). A redirect URI is where the user's access
// goes, and the approval page shows its host: it must be unambiguous, so
// it is plain ASCII (an internationalized host in its punycode form, not
// a look-alike) with a host and a valid port.
func (g *Gateway) redirectRefused(raw string) string {
	if slices.Contains(g.cfg.AllowedRedirects, raw) {
		return ""
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || len(raw) > maxRedirectURILen || !u.IsAbs() || u.Opaque != "" || u.Hostname() == "":
		return "A redirect URI must be an absolute URL with a host, of at most 512 characters."
	case strings.IndexFunc(raw, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0:
		return "A redirect URI must be ASCII without spaces (RFC 3986): write an internationalized host in its punycode (xn--) form."
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return "A redirect URI must not have a fragment."
	case u.User != nil:
		return "A redirect URI must not carry credentials."
	case !validPort(u.Port()):
		return "A redirect URI's port must be a number from 1 to 65535."
	case u.Scheme == "https":
		return ""
	case u.Scheme == "http" && isLoopback(u.Hostname()):
		return ""
	}
	return "Redirect URIs must use https, or http on a loopback address (127.0.0.1, [::1], localhost); others must be listed in the gateway's MCP_ALLOWED_REDIRECTS."
}

// validPort reports whether the port of a URL is absent or 1-65535.
func validPort(port string) bool {
	if port == "" {
		return true
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}

// isLoopback reports whether host is one of the loopback hosts RFC 8252
// names for native apps' redirects: 127.0.0.1, ::1 or localhost.
func isLoopback(host string) bool {
	return host == "127.0.0.1" || host == "::1" || strings.EqualFold(host, "localhost")
}

// displayable drops the control and format characters (bidirectional
// overrides, zero-width joiners) from a client's name: the approval page
// shows it, and such characters could make it read as another name.
func displayable(name string) string {
	return strings.TrimSpace(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return -1
		}
		return r
	}, name))
}

// redirectMatches reports whether a redirect URI of a request is one
// registered: exactly, or for loopback http any port (RFC 8252 7.3).
func redirectMatches(registered, requested string) bool {
	if registered == requested {
		return true
	}
	a, errA := url.Parse(registered)
	b, errB := url.Parse(requested)
	if errA != nil || errB != nil || a.Scheme != "http" || b.Scheme != "http" || !isLoopback(a.Hostname()) {
		return false
	}
	return a.Hostname() == b.Hostname() && a.Path == b.Path && a.RawQuery == b.RawQuery && b.Fragment == "" && b.User == nil
}

var pkceChallengePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{43}$`)

// errorCodePattern is what an OAuth error code from the service must look
// like to be passed on to the client (anything else: access_denied).
var errorCodePattern = regexp.MustCompile(`^[a-z_]{1,64}$`)

// errorDescriptionPattern is what an error_description from the service
// must look like to be passed on: the characters RFC 6749 4.1.2.1 allows,
// at most 300 of them (anything else is dropped).
var errorDescriptionPattern = regexp.MustCompile(`^[\x20-\x21\x23-\x5B\x5D-\x7E]{0,300}$`)

// acceptedResource reports whether a resource parameter (RFC 8707) names
// this gateway: its MCP endpoint or its origin.
func (g *Gateway) acceptedResource(resource string) bool {
	r := strings.TrimRight(resource, "/")
	return resource == "" || r == g.resource || r == g.issuer
}

// authorize starts the flow: it checks the client's request, then asks
// the user on the approval page unless this browser already approved the
// client and redirect URI (approval.go); with the approval, forward sends
// the browser on to the service.
func (g *Gateway) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	clientID := q.Get("client_id")
	var reg clientRegistration
	if err := g.seal.open(kindClient, clientID, &reg); err != nil {
		errorPage(w, http.StatusBadRequest, "Unknown application", "This application's registration with the gateway is unknown or "+err.Error()+": it must register again.")
		return
	}
	redirectURI := q.Get("redirect_uri")
	if redirectURI == "" && len(reg.RedirectURIs) == 1 {
		redirectURI = reg.RedirectURIs[0]
	}
	if !slices.ContainsFunc(reg.RedirectURIs, func(u string) bool { return redirectMatches(u, redirectURI) }) {
		errorPage(w, http.StatusBadRequest, "Unregistered redirect", "The redirect_uri is not one this application registered.")
		return
	}
	state := q.Get("state")
	// An error goes back to the client only when this browser approved
	// the client and redirect URI before. Anyone may register a client
	// with any redirect URI, so redirecting the errors of any request
	// would make the gateway an open redirector (RFC 9700 4.11.2): a link
	// to /authorize with a bad parameter would send whoever opens it on to
	// the registrant's site. Until the user has trusted the client, an
	// error is shown here, as the approval page would have been.
	fail := func(code, desc string) {
		if !g.approvedBefore(r, clientRequest{ClientID: clientID, RedirectURI: redirectURI}) {
			errorPage(w, http.StatusBadRequest, "The application's request was refused",
				"Nothing was shared, and you were not sent on to the application. It asked the gateway for something it does not grant ("+code+": "+desc+"). "+
					"If you are connecting an assistant, tell its developer.")
			return
		}
		redirectError(w, r, redirectURI, state, code, desc)
	}
	switch {
	case len(state) > maxStateLen:
		fail("invalid_request", "state is longer than 1024 characters")
	case q.Get("response_type") != "code":
		fail("unsupported_response_type", "response_type must be code")
	case q.Get("code_challenge_method") != "S256" || !pkceChallengePattern.MatchString(q.Get("code_challenge")):
		fail("invalid_request", "PKCE is required: code_challenge (S256, 43 characters) with code_challenge_method=S256")
	case !g.acceptedResource(q.Get("resource")):
		fail("invalid_target", "resource must be this gateway's MCP endpoint, "+g.resource)
	case len(beyondServiceScopes(q.Get("scope"))) > 0:
		fail("invalid_scope", "this gateway grants only the read-only scopes "+serviceScopes)
	default:
		req := clientRequest{ClientID: clientID, RedirectURI: redirectURI, State: state, Challenge: q.Get("code_challenge"), Resource: q.Get("resource")}
		if g.approvedBefore(r, req) {
			g.forward(w, r, req)
			return
		}
		g.askApproval(w, r, reg, req)
	}
}

// forward sends the browser to the service's login with the gateway's own
// client, PKCE and a sealed state that remembers the client's request:
// only ever for a request the user approved, and bound to this browser
// (binding.go). A client's scope parameter, checked by authorize, changes
// nothing: the gateway always asks for serviceScopes, which its tools need.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, req clientRequest) {
	verifier := oauth2.GenerateVerifier()
	binding := g.bindFlow(w, r)
	sealed, err := g.seal.seal(kindState, stateLifetime, pendingAuthorization{clientRequest: req, Verifier: verifier, Binding: binding})
	if err != nil {
		g.log.Error("sealing an authorization state failed", "error", err)
		redirectError(w, r, req.RedirectURI, req.State, "server_error", "")
		return
	}
	to := url.Values{
		"response_type": {"code"}, "client_id": {g.cfg.ClientID}, "redirect_uri": {g.callbackURL},
		"scope": {serviceScopes}, "state": {sealed},
		"code_challenge": {oauth2.S256ChallengeFromVerifier(verifier)}, "code_challenge_method": {"S256"},
	}
	http.Redirect(w, r, g.browserURL+"/o/authorize/?"+to.Encode(), http.StatusFound)
}

// callback receives the service's answer, and hands the client a code of
// its own that holds the service's code. It answers only the browser the
// flow was forwarded from, once (binding.go); anywhere else it shows an
// error page and redirects nowhere, errors included, so neither a code nor
// a crafted error reaches the redirect URI of whoever started the flow.
func (g *Gateway) callback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var p pendingAuthorization
	if err := g.seal.open(kindState, q.Get("state"), &p); err != nil {
		errorPage(w, http.StatusBadRequest, "Sign-in expired", "This sign-in is "+err.Error()+". Go back to your application and connect again.")
		return
	}
	if !g.finishFlow(w, r, p.Binding) {
		g.log.Warn("refused a sign-in callback from a browser that did not start the flow, or that finished it already")
		errorPage(w, http.StatusForbidden, "This sign-in was not started in this browser",
			"Nothing was shared: no application received access. This sign-in was started in another browser, or it was finished already. "+
				"If you are connecting an assistant, start again from the assistant. If someone sent you this link, do not use it.")
		return
	}
	if e := q.Get("error"); e != "" {
		code := "access_denied"
		if errorCodePattern.MatchString(e) {
			code = e
		}
		desc := q.Get("error_description")
		if !errorDescriptionPattern.MatchString(desc) {
			desc = ""
		}
		redirectError(w, r, p.RedirectURI, p.State, code, desc)
		return
	}
	if q.Get("code") == "" {
		redirectError(w, r, p.RedirectURI, p.State, "server_error", "the service answered without a code")
		return
	}
	code, err := g.seal.seal(kindCode, codeLifetime, codeGrant{
		ClientID: p.ClientID, RedirectURI: p.RedirectURI, Challenge: p.Challenge, Resource: p.Resource,
		ServiceCode: q.Get("code"), Verifier: p.Verifier,
	})
	if err != nil {
		g.log.Error("sealing an authorization code failed", "error", err)
		redirectError(w, r, p.RedirectURI, p.State, "server_error", "")
		return
	}
	back := url.Values{"code": {code}}
	if p.State != "" {
		back.Set("state", p.State)
	}
	http.Redirect(w, r, withQuery(p.RedirectURI, back), http.StatusFound)
}

// token serves the authorization_code and refresh_token grants.
func (g *Gateway) token(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		tokenError(w, http.StatusBadRequest, "invalid_request", "the body must be application/x-www-form-urlencoded")
		return
	}
	clientID := r.PostForm.Get("client_id")
	var reg clientRegistration
	if err := g.seal.open(kindClient, clientID, &reg); err != nil {
		tokenError(w, http.StatusUnauthorized, "invalid_client", "unknown client_id: register again")
		return
	}
	switch r.PostForm.Get("grant_type") {
	case "authorization_code":
		g.redeemCode(w, r, clientID)
	case "refresh_token":
		g.refresh(w, r, clientID)
	default:
		tokenError(w, http.StatusBadRequest, "unsupported_grant_type", "grant_type must be authorization_code or refresh_token")
	}
}

func (g *Gateway) redeemCode(w http.ResponseWriter, r *http.Request, clientID string) {
	f := r.PostForm
	var c codeGrant
	if err := g.seal.open(kindCode, f.Get("code"), &c); err != nil {
		tokenError(w, http.StatusBadRequest, "invalid_grant", "the code is "+err.Error())
		return
	}
	switch {
	case !equal(c.ClientID, clientID):
		tokenError(w, http.StatusBadRequest, "invalid_grant", "the code was issued to another client")
	case f.Has("redirect_uri") && f.Get("redirect_uri") != c.RedirectURI:
		tokenError(w, http.StatusBadRequest, "invalid_grant", "redirect_uri differs from the authorization request's")
	case f.Get("code_verifier") == "" || !equal(oauth2.S256ChallengeFromVerifier(f.Get("code_verifier")), c.Challenge):
		tokenError(w, http.StatusBadRequest, "invalid_grant", "code_verifier does not match the code_challenge")
	case !g.acceptedResource(f.Get("resource")):
		tokenError(w, http.StatusBadRequest, "invalid_target", "resource must be "+g.resource)
	default:
		tokens, err := g.svc.token(r.Context(), url.Values{
			"grant_type": {"authorization_code"}, "code": {c.ServiceCode},
			"redirect_uri": {g.callbackURL}, "code_verifier": {c.Verifier},
		})
		g.answerTokens(w, clientID, c.Resource, tokens, err)
	}
}

func (g *Gateway) refresh(w http.ResponseWriter, r *http.Request, clientID string) {
	f := r.PostForm
	var rg refreshGrant
	if err := g.seal.open(kindRefresh, f.Get("refresh_token"), &rg); err != nil {
		tokenError(w, http.StatusBadRequest, "invalid_grant", "the refresh token is "+err.Error())
		return
	}
	switch {
	case !equal(rg.ClientID, clientID):
		tokenError(w, http.StatusBadRequest, "invalid_grant", "the refresh token was issued to another client")
	case !g.acceptedResource(f.Get("resource")):
		tokenError(w, http.StatusBadRequest, "invalid_target", "resource must be "+g.resource)
	default:
		tokens, err := g.svc.token(r.Context(), url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rg.RefreshToken}})
		g.answerTokens(w, clientID, rg.Resource, tokens, err)
	}
}

// answerTokens hands the service's tokens to the client, the refresh
// token wrapped, or maps the service's failure onto the token endpoint's.
func (g *Gateway) answerTokens(w http.ResponseWriter, clientID, resource string, t *tokenResponse, err error) {
	if err != nil {
		var se *serviceError
		switch failureOf(err) {
		case failRejected:
			desc := "the service refused the grant"
			if errors.As(err, &se) && se.detail != "" {
				desc = se.detail
			}
			tokenError(w, http.StatusBadRequest, "invalid_grant", desc)
		case failMisconfigured:
			g.log.Error("token exchange failed: the gateway is misconfigured", "error", err)
			tokenError(w, http.StatusInternalServerError, "server_error", "the gateway cannot exchange codes with the service it is configured for")
		default:
			g.log.Warn("token exchange failed: the service is unavailable", "error", err)
			w.Header().Set("Retry-After", retryAfterSeconds)
			tokenError(w, http.StatusServiceUnavailable, "temporarily_unavailable", "the service is unavailable; try again shortly")
		}
		return
	}
	if g.grantRefused(t.Scope) {
		tokenError(w, http.StatusBadRequest, "invalid_grant", "the service granted other scopes than the gateway's read-only set: connect again")
		return
	}
	out := map[string]any{"access_token": t.AccessToken, "token_type": "Bearer", "expires_in": t.ExpiresIn, "scope": t.Scope}
	if t.RefreshToken != "" {
		wrapped, err := g.seal.seal(kindRefresh, refreshLifetime, refreshGrant{ClientID: clientID, Resource: resource, RefreshToken: t.RefreshToken})
		if err != nil {
			g.log.Error("sealing a refresh token failed", "error", err)
			tokenError(w, http.StatusInternalServerError, "server_error", "")
			return
		}
		out["refresh_token"] = wrapped
	}
	writeJSON(w, http.StatusOK, out)
}

// grantRefused reports whether the service's grant is one the gateway
// keeps to itself: any scope beyond serviceScopes, or one of readScopes
// missing. Neither happens unless the link the gateway forwarded was
// edited; beyond serviceScopes, only at a service whose registration of the
// gateway's client is wider than it (a deployment that `exchange seed`
// has not repaired). The token stays here, unused until it expires.
func (g *Gateway) grantRefused(scope string) bool {
	if beyond := beyondServiceScopes(scope); len(beyond) > 0 {
		g.log.Error("the service granted the gateway's client scopes beyond its read-only set; run exchange seed to register the client for those only",
			"scopes", strings.Join(beyond, " "))
		return true
	}
	granted := strings.Fields(scope)
	if slices.ContainsFunc(readScopes, func(s string) bool { return !slices.Contains(granted, s) }) {
		g.log.Warn("the service granted the gateway less than its read scopes: the link it forwarded was edited", "scopes", scope)
		return true
	}
	return false
}

func tokenError(w http.ResponseWriter, status int, code, desc string) {
	writeJSON(w, status, oauthErrorBody{Error: code, Description: desc})
}

// redirectError sends an OAuth error to the client's (checked) redirect URI.
func redirectError(w http.ResponseWriter, r *http.Request, redirectURI, state, code, desc string) {
	q := url.Values{"error": {code}}
	if desc != "" {
		q.Set("error_description", desc)
	}
	if state != "" {
		q.Set("state", state)
	}
	http.Redirect(w, r, withQuery(redirectURI, q), http.StatusFound)
}

// withQuery adds parameters to a URL that may already have a query.
func withQuery(raw string, add url.Values) string {
	u, _ := url.Parse(raw)
	q := u.Query()
	for k, vs := range add {
		q[k] = vs
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }
