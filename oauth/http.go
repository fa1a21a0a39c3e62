package oauth

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ory/fosite"

	"exchange/domain"
)

// Handler returns the net/http handler of every /o/ endpoint. Each path
// answers with and without its trailing slash.
func (p *Provider) Handler() http.Handler {
	mux := http.NewServeMux()
	route := func(methods, path string, h http.HandlerFunc) {
		for _, m := range strings.Split(methods, ",") {
			if trimmed, ok := strings.CutSuffix(path, "/"); ok {
				mux.HandleFunc(m+" "+path+"{$}", h)
				mux.HandleFunc(m+" "+trimmed, h)
			} else {
				mux.HandleFunc(m+" "+path, h)
			}
		}
	}
	route("GET,POST", "/o/authorize/", p.authorize)
	route("POST,OPTIONS", "/o/token/", cors(p.token))
	route("POST", "/o/introspect/", p.introspect)
	route("POST,OPTIONS", "/o/revoke_token/", cors(p.revoke))
	route("GET,POST,OPTIONS", "/o/userinfo/", cors(p.userinfo))
	route("GET,OPTIONS", "/o/.well-known/openid-configuration", cors(p.discovery))
	route("GET,OPTIONS", "/o/.well-known/jwks.json", cors(p.jwksHandler))
	route("GET,POST", "/o/login/", p.login)
	route("GET", "/o/static/signin.js", serveSignInScript)
	route("POST", "/o/logout/", p.logout)
	route("GET,POST", "/o/applications/register/", p.registerApplication)
	route("POST", "/o/login/{provider}/", p.startFederated)
	route("GET", "/o/login/{provider}/callback", p.oidcCallback)
	route("GET", "/o/saml/{provider}/metadata", p.samlMetadata)
	route("POST", "/o/saml/{provider}/acs", p.samlACS)
	route("GET", "/o/saml/{provider}/finish", p.samlFinish)
	route("POST,OPTIONS", "/o/token-exchange", cors(p.tokenExchangeHandler))
	return nosniff(mux)
}

// serveSignInScript serves the login page's script (a file of ours, so
// that the pages' Content-Security-Policy allows scripts from 'self'
// only).
func serveSignInScript(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	w.Header().Set("Cache-Control", "public, max-age=3600")
	_, _ = w.Write(signInScript)
}

// nosniff tells browsers to take every /o/ answer as the type it says
// (X-Content-Type-Options): a JSON error or a page is never run as a
// script or read as another type, whatever its bytes.
func nosniff(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		h.ServeHTTP(w, r)
	})
}

// cors lets browser apps (a SMART app in a page of its own origin) call an
// endpoint that reads no cookie: the token, revocation and userinfo
// endpoints, discovery and the JWKS. What authorizes such a call is in the
// request (a code with its PKCE verifier, a refresh token, a bearer
// token), so any origin may make it, as any server can; the pages that
// read the login cookie (authorize, login, consent) get no CORS headers.
func cors(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		if r.Method == http.MethodOptions {
			w.Header().Set("Access-Control-Allow-Methods", "GET, POST")
			w.Header().Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Accept")
			w.Header().Set("Access-Control-Max-Age", "86400")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h(w, r)
	}
}

// authorize serves the authorization endpoint. The authorization request is
// always read from the URL query: the body of a POST carries only the
// consent form and must never reach fosite, which stores the form it sees.
func (p *Provider) authorize(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	query := r.URL.Query()
	// Redirect URIs match exactly (fosite would accept any port on a
	// loopback address); a mismatch is shown to the user, never redirected to.
	if c, err := p.store.OAuthClient(ctx, query.Get("client_id")); err == nil {
		if ru := query.Get("redirect_uri"); ru != "" && !slices.Contains(c.RedirectURIs, ru) {
			p.renderMessage(w, r, http.StatusBadRequest, "Authorization refused",
				"The redirect URI of this request is not registered for the application. Contact the application's developer.")
			return
		}
	}
	areq := r.Clone(ctx)
	areq.Method, areq.Body, areq.Form, areq.PostForm = http.MethodGet, http.NoBody, nil, nil
	ar, err := p.oauth2.NewAuthorizeRequest(ctx, areq)
	if err != nil {
		p.writeAuthorizeError(w, r, ar, err)
		return
	}
	// fosite checks PKCE only when it issues the code; refuse a request
	// without S256 before the user is asked to log in.
	if query.Get("code_challenge") == "" || query.Get("code_challenge_method") != "S256" {
		p.writeAuthorizeError(w, r, ar, fosite.ErrInvalidRequest.WithHint("PKCE with code_challenge_method S256 is required."))
		return
	}
	// A SMART app names the FHIR server it wants a token for: never
	// another one, whose operator would then hold our users' tokens.
	if aud := query.Get("aud"); aud != "" && !fhirAudience(p.proxies.RequestOrigin(r), aud) {
		p.writeAuthorizeError(w, r, ar, fosite.ErrInvalidRequest.WithHintf("aud must be this server's FHIR base URL, %s%s.", p.proxies.RequestOrigin(r), fhirPath))
		return
	}
	ctx = withRequest(ctx, r)
	client, err := p.store.OAuthClient(ctx, ar.GetClient().GetID())
	if err != nil {
		p.writeAuthorizeError(w, r, ar, err)
		return
	}
	// fosite refused any scope the registration does not allow; a request
	// of none that names access would act with the user's full access,
	// wider than a registration that limits it (withinCeiling).
	if !withinCeiling(ar.GetRequestedScopes(), client.Scopes) {
		p.writeAuthorizeError(w, r, ar, fosite.ErrInvalidScope.WithHint(
			"This application is registered for limited access: its request must name the resource or admin scopes it needs."))
		return
	}
	prompt := fosite.RemoveEmpty(strings.Split(query.Get("prompt"), " "))
	sess, user, loggedIn := p.session(r)
	if loggedIn && maxAgeExceeded(query.Get("max_age"), sess.AuthTime, p.now()) {
		loggedIn = false
	}
	if !loggedIn || (slices.Contains(prompt, "login") && r.Method == http.MethodGet) {
		if slices.Contains(prompt, "none") {
			p.writeAuthorizeError(w, r, ar, fosite.ErrLoginRequired)
			return
		}
		// After logging in, come back without prompt=login, or the login
		// page would be asked for again and again.
		back := *r.URL
		q := back.Query()
		q.Del("prompt")
		back.RawQuery = q.Encode()
		p.renderLogin(w, r, http.StatusOK, loginPage{Next: back.RequestURI(), ClientName: client.Name})
		return
	}
	actor, err := p.users.Actor(ctx, user.ID)
	if err != nil {
		p.writeAuthorizeError(w, r, ar, err)
		return
	}
	granted := ar.GetRequestedScopes()
	switch {
	case r.Method == http.MethodPost:
		if !csrfValid(r) {
			p.renderMessage(w, r, http.StatusForbidden, "Form expired", "This form has expired. Go back to the application and start again.")
			return
		}
		if r.PostFormValue("decision") != "allow" {
			p.writeAuthorizeError(w, r, ar, fosite.ErrAccessDenied.WithHint("The user denied the request."))
			return
		}
		// The consent page's ticked scopes (the picker page carries them
		// on): the user may narrow the request, never widen it. Unticking
		// every access of a request that named some would leave scopes
		// that act with the user's full access (withinCeiling): beyond the
		// request as well as beyond a registration that limits it.
		granted = grantedScopes(granted, r.PostForm["scope"])
		if !withinCeiling(granted, client.Scopes) || !withinCeiling(granted, ar.GetRequestedScopes()) {
			p.writeAuthorizeError(w, r, ar, fosite.ErrAccessDenied.WithHint("The user allowed none of the access the application asked for."))
			return
		}
	case !client.SkipAuthorization:
		if slices.Contains(prompt, "none") {
			p.writeAuthorizeError(w, r, ar, fosite.ErrConsentRequired)
			return
		}
		p.renderConsent(w, r, consentPage{Client: client.Name, User: user.Email, Scopes: describeScopes(granted, actor.Patient != nil), Action: r.URL.RequestURI()})
		return
	}
	launch, chosen := p.launchPatient(w, r, ar, actor, client.Name, granted, prompt)
	if !chosen {
		return
	}
	for _, s := range granted {
		ar.GrantScope(s)
	}
	ar.GrantAudience(client.ID)
	grant := p.newSession(user, fhirUser(p.proxies.RequestOrigin(r), actor), granted, sess.AuthTime, ar.GetRequestedAt())
	grant.LaunchPatient = launch
	resp, err := p.oauth2.NewAuthorizeResponse(ctx, ar, grant)
	if err != nil {
		p.writeAuthorizeError(w, r, ar, err)
		return
	}
	p.oauth2.WriteAuthorizeResponse(ctx, w, ar, resp)
}

// withRequest puts the HTTP request where fosite's configuration looks for
// it (the ID token issuer depends on the request's origin). fosite does so
// itself in NewAccessRequest, but not in the response steps that sign.
func withRequest(ctx context.Context, r *http.Request) context.Context {
	return context.WithValue(ctx, fosite.RequestContextKey, r)
}

func maxAgeExceeded(maxAge string, authTime, now time.Time) bool {
	seconds, err := strconv.ParseInt(maxAge, 10, 64)
	return err == nil && seconds >= 0 && authTime.Add(time.Duration(seconds)*time.Second).Before(now)
}

// writeAuthorizeError redirects the error to the client when its redirect
// URI is known to be valid, and shows it to the user otherwise.
func (p *Provider) writeAuthorizeError(w http.ResponseWriter, r *http.Request, ar fosite.AuthorizeRequester, err error) {
	if ar != nil && ar.IsRedirectURIValid() {
		p.oauth2.WriteAuthorizeError(r.Context(), w, ar, err)
		return
	}
	rfc := fosite.ErrorToRFC6749Error(err)
	if rfc.CodeField >= 500 {
		p.log.Error("authorization request failed", "error", err)
	}
	p.renderMessage(w, r, http.StatusBadRequest, "Authorization refused", rfc.GetDescription())
}

// token serves the token endpoint: authorization_code and refresh_token.
func (p *Provider) token(w http.ResponseWriter, r *http.Request) {
	var invitee int64
	ctx := context.WithValue(withRequest(r.Context(), r), invitationRedeemKey{}, &invitee)
	ar, err := p.oauth2.NewAccessRequest(ctx, r, emptySession())
	if err == nil {
		err = withinRegistration(ar)
	}
	if err == nil {
		err = narrowRefresh(ar)
	}
	if err == nil && ar.GetGrantTypes().ExactOne("client_credentials") {
		err = p.backendGrant(ctx, ar)
	}
	if err != nil {
		p.logServerError("token request failed", err)
		p.metrics.tokenRefused(err)
		p.oauth2.WriteAccessError(ctx, w, ar, err)
		return
	}
	resp, err := p.oauth2.NewAccessResponse(ctx, ar)
	if err == nil && invitee != 0 {
		// An app redeemed an invitation: the patient has a login now, and
		// their other invitations end. Before the answer, so that no
		// answer goes out unrecorded; the code is pending until then, so
		// the retry of a request cut short finds it standing.
		if err = p.users.InvitationAccepted(context.WithoutCancel(ctx), invitee); err != nil {
			err = fosite.ErrServerError.WithWrap(err)
		}
	}
	if err != nil {
		p.logServerError("token response failed", err)
		p.metrics.tokenRefused(err)
		p.oauth2.WriteAccessError(ctx, w, ar, err)
		return
	}
	// SMART's launch context: the patient beside the access token.
	if s, ok := ar.GetSession().(*session); ok && s.LaunchPatient != 0 && ar.GetGrantedScopes().Has(domain.ScopeLaunchPatient) {
		resp.SetExtra("patient", strconv.FormatInt(s.LaunchPatient, 10))
	}
	p.metrics.tokenIssued(ar)
	if id, err := strconv.ParseInt(ar.GetSession().GetSubject(), 10, 64); err == nil {
		p.users.TokenIssued(ctx, id, ar.GetClient().GetID())
	}
	p.oauth2.WriteAccessResponse(ctx, w, ar, resp)
	// Answered: the used code or refresh token is no longer good for a
	// retry (tokenwrites.go).
	if err := p.storage.answered(ctx, ar.GetID()); err != nil {
		p.logServerError("ending the token request failed", err)
	}
}

// introspect serves RFC 7662 introspection to confidential clients, which
// authenticate as at the token endpoint (client_secret_basic or
// client_secret_post). A bearer token is not accepted as caller
// credentials here: only registered confidential clients may introspect.
func (p *Provider) introspect(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if fosite.AccessTokenFromRequest(r) != "" {
		p.oauth2.WriteIntrospectionError(ctx, w, fosite.ErrRequestUnauthorized.WithHint("Authenticate as a confidential client with its secret."))
		return
	}
	if err := r.ParseForm(); err != nil {
		p.oauth2.WriteIntrospectionError(ctx, w, fosite.ErrInvalidRequest.WithHint("The body must be application/x-www-form-urlencoded."))
		return
	}
	c, err := p.storage.authenticateClient(ctx, r, r.PostForm)
	if err == nil && (c.IsPublic() || r.PostForm.Get("client_assertion") != "") {
		err = fosite.ErrInvalidClient.WithHint("Only confidential clients with a secret may introspect tokens.")
	}
	if err != nil {
		p.logServerError("introspection failed", err)
		p.oauth2.WriteIntrospectionError(ctx, w, fosite.ErrRequestUnauthorized.WithHint(fosite.ErrorToRFC6749Error(err).GetDescription()))
		return
	}
	if _, _, basic := r.BasicAuth(); !basic {
		// fosite reads the caller's credentials from HTTP Basic only:
		// hand it the ones just checked in that form.
		r.SetBasicAuth(url.QueryEscape(r.PostForm.Get("client_id")), url.QueryEscape(r.PostForm.Get("client_secret")))
	}
	ir, err := p.oauth2.NewIntrospectionRequest(ctx, r, emptySession())
	if err != nil {
		p.logServerError("introspection failed", err)
		p.oauth2.WriteIntrospectionError(ctx, w, err)
		return
	}
	p.oauth2.WriteIntrospectionResponse(ctx, w, ir)
}

// revoke serves RFC 7009 revocation.
func (p *Provider) revoke(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	err := p.oauth2.NewRevocationRequest(ctx, r)
	p.logServerError("revocation failed", err)
	p.oauth2.WriteRevocationResponse(ctx, w, err)
}

func (p *Provider) logServerError(msg string, err error) {
	if err != nil && fosite.ErrorToRFC6749Error(err).CodeField >= 500 {
		p.log.Error(msg, "error", err)
	}
}

// userinfo serves the OpenID Connect UserInfo endpoint.
func (p *Provider) userinfo(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	token := fosite.AccessTokenFromRequest(r)
	use, ar, err := p.oauth2.IntrospectToken(ctx, token, fosite.AccessToken, emptySession())
	if token == "" || err != nil || use != fosite.AccessToken {
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token", error_description="The access token is missing, invalid, expired or revoked."`)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_token"})
		return
	}
	if !ar.GetGrantedScopes().Has("openid") {
		w.Header().Set("WWW-Authenticate", `Bearer error="insufficient_scope", scope="openid"`)
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "insufficient_scope"})
		return
	}
	id, _ := strconv.ParseInt(ar.GetSession().GetSubject(), 10, 64)
	u, err := p.users.UserByID(ctx, id)
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token", error_description="The user of this token no longer exists."`)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_token"})
		return
	}
	claims := map[string]any{"sub": strconv.FormatInt(u.ID, 10)}
	scopes := ar.GetGrantedScopes()
	if scopes.Has("email") {
		claims["email"] = u.Email
	}
	if scopes.Has("profile") {
		claims["given_name"] = u.FirstName
		claims["family_name"] = u.LastName
		claims["name"] = strings.TrimSpace(u.FirstName + " " + u.LastName)
		claims["preferred_username"] = u.Email
	}
	if s, ok := ar.GetSession().(*session); ok && s.Claims.Extra["fhirUser"] != nil {
		claims["fhirUser"] = s.Claims.Extra["fhirUser"]
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, claims)
}

// discovery serves the OpenID Provider Metadata, with absolute URLs on the
// origin the client used.
func (p *Provider) discovery(w http.ResponseWriter, r *http.Request) {
	issuer := p.proxies.RequestOrigin(r) + "/o"
	w.Header().Set("Cache-Control", "public, max-age=3600")
	// The document depends on these headers: a shared cache must not serve
	// one client's version to another.
	w.Header().Set("Vary", VaryForwarded)
	writeJSON(w, http.StatusOK, Metadata(issuer))
}

// SupportedScopes are the scopes discovery lists: the named ones and the
// resource scope wildcards. Any narrower resource scope (a type, fewer
// interactions, ?category= or ?code= constraints, the SMART v1 .read,
// .write and .* spellings) is accepted too. system/ scopes are backend
// clients' only.
var SupportedScopes = append(slices.Clone(domain.NamedScopes), "patient/*.rs", "patient/*.cruds", "user/*.rs", "user/*.cruds", "system/*.rs")

// SupportedGrantTypes are the grants discovery lists: those of registered
// clients (GrantTypes) and backend clients' client_credentials.
var SupportedGrantTypes = append(slices.Clone(GrantTypes), "client_credentials")

// TokenEndpointAuthMethods are the ways clients authenticate at the token
// endpoint.
var TokenEndpointAuthMethods = []string{domain.AuthSecretBasic, domain.AuthSecretPost, domain.AuthNone, domain.AuthPrivateKeyJWT}

// Metadata returns the OpenID Provider Metadata for an issuer ({origin}/o);
// the FHIR layer's SMART configuration reuses its endpoints.
func Metadata(issuer string) map[string]any {
	return map[string]any{
		"issuer":                                           issuer,
		"authorization_endpoint":                           issuer + "/authorize/",
		"token_endpoint":                                   issuer + "/token/",
		"userinfo_endpoint":                                issuer + "/userinfo/",
		"jwks_uri":                                         issuer + "/.well-known/jwks.json",
		"introspection_endpoint":                           issuer + "/introspect/",
		"revocation_endpoint":                              issuer + "/revoke_token/",
		"response_types_supported":                         []string{"code"},
		"response_modes_supported":                         []string{"query"},
		"grant_types_supported":                            SupportedGrantTypes,
		"subject_types_supported":                          []string{"public"},
		"id_token_signing_alg_values_supported":            []string{"RS256"},
		"scopes_supported":                                 SupportedScopes,
		"token_endpoint_auth_methods_supported":            TokenEndpointAuthMethods,
		"token_endpoint_auth_signing_alg_values_supported": BackendSigningAlgorithms,
		"introspection_endpoint_auth_methods_supported":    []string{domain.AuthSecretBasic, domain.AuthSecretPost},
		"revocation_endpoint_auth_methods_supported":       []string{domain.AuthSecretBasic, domain.AuthSecretPost, domain.AuthNone},
		"code_challenge_methods_supported":                 []string{"S256"},
		"claims_supported":                                 []string{"sub", "iss", "aud", "exp", "iat", "auth_time", "nonce", "email", "name", "given_name", "family_name", "preferred_username", "fhirUser"},
		"prompt_values_supported":                          []string{"none", "login", "consent"},
	}
}

func (p *Provider) jwksHandler(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Cache-Control", "public, max-age=3600")
	writeJSON(w, http.StatusOK, p.key.jwks())
}

// login serves the login page. next, a local path, is where a successful
// login goes; without it the page says who is signed in. A refusal by the
// throttle says when to try again, in Retry-After and on the page.
func (p *Provider) login(w http.ResponseWriter, r *http.Request) {
	next := r.FormValue("next")
	if !localNext(next) {
		next = ""
	}
	if r.Method == http.MethodGet {
		if _, u, ok := p.session(r); ok && next == "" {
			p.renderSignedIn(w, r, u.Email)
			return
		}
		p.renderLogin(w, r, http.StatusOK, loginPage{Next: next})
		return
	}
	page := loginPage{Next: next, Email: r.PostFormValue("email")}
	if !p.passwordSignIn {
		page.Error = "Signing in with a password is turned off here: sign in with your institution."
		p.renderLogin(w, r, http.StatusForbidden, page)
		return
	}
	if !csrfValid(r) {
		page.Error = "This form has expired. Please sign in again."
		p.renderLogin(w, r, http.StatusForbidden, page)
		return
	}
	checkedAt := p.now().UTC()
	attempt := domain.SignInAttempt{Email: page.Email, Password: r.PostFormValue("password"),
		Address: p.proxies.RequestClientAddress(r).String(), Challenge: r.PostFormValue("work_challenge"), Work: r.PostFormValue("work")}
	if c, err := r.Cookie(deviceCookie); err == nil {
		attempt.Device = c.Value
	}
	in, err := p.users.SignIn(r.Context(), attempt)
	p.metrics.login(err)
	if err == nil {
		err = p.startSession(w, r, in.User.ID, checkedAt)
	}
	if err == nil {
		// The browser is known to the account from now on (domain's
		// device cookie): only at the sign-in pages, never to scripts.
		http.SetCookie(w, p.cookie(r, deviceCookie, in.Device, "/o/", int(domain.DeviceLife/time.Second)))
	}
	if err != nil {
		status := http.StatusUnauthorized
		switch domain.ErrorCode(err) {
		case domain.CodeThrottled:
			status = http.StatusTooManyRequests
			w.Header().Set("Retry-After", strconv.Itoa(int((domain.RetryAfter(err)+time.Second-1)/time.Second)))
		case domain.CodeLogin:
		default:
			p.log.Error("login failed", "error", err)
			status = http.StatusInternalServerError
		}
		page.Error = domain.Sentence(domain.ErrorMessage(err))
		p.renderLogin(w, r, status, page)
		return
	}
	if next == "" {
		next = "/o/login/"
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// localNext accepts only a path on this origin, so the login page cannot be
// used to send anyone elsewhere: it starts with one slash ("//host" is
// another origin to a browser, and so is "/\host" to some), and carries no
// control characters.
func localNext(next string) bool {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\") {
		return false
	}
	for _, c := range next {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	u, err := url.Parse(next)
	return err == nil && u.Scheme == "" && u.Host == "" && u.User == nil
}

// logout ends the login session at the server, then goes to next (a local
// path) or says so.
func (p *Provider) logout(w http.ResponseWriter, r *http.Request) {
	if !csrfValid(r) {
		p.renderMessage(w, r, http.StatusForbidden, "Form expired", "This form has expired. Reload the page and try again.")
		return
	}
	p.endSession(w, r)
	if next := r.PostFormValue("next"); localNext(next) {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	p.renderMessage(w, r, http.StatusOK, "Signed out", "You are signed out.")
}

// registerApplication serves the client registration form to staff and
// superusers.
func (p *Provider) registerApplication(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	sess, _, ok := p.session(r)
	var actor *domain.Actor
	if ok {
		var err error
		if actor, err = p.users.Actor(ctx, sess.UserID); err != nil {
			ok = false
		}
	}
	if !ok {
		http.Redirect(w, r, "/o/login/?next="+url.QueryEscape(r.URL.Path), http.StatusSeeOther)
		return
	}
	if !actor.CanRegisterClients() {
		p.renderMessage(w, r, http.StatusForbidden, "Not allowed", "Only staff members and superusers may register applications.")
		return
	}
	form := registerPage{User: actor.User.Email, ClientType: string(domain.ClientConfidential), Scopes: strings.Join(domain.AllScopes, "\n")}
	if r.Method == http.MethodGet {
		p.renderRegister(w, r, http.StatusOK, form)
		return
	}
	form.Name = r.PostFormValue("name")
	form.ClientType = r.PostFormValue("client_type")
	form.RedirectURIs = r.PostFormValue("redirect_uris")
	form.PostLogoutRedirectURIs = r.PostFormValue("post_logout_redirect_uris")
	form.AllowedOrigins = r.PostFormValue("allowed_origins")
	form.Scopes = r.PostFormValue("scopes")
	form.AuthMethod = r.PostFormValue("auth_method")
	if !csrfValid(r) {
		form.Error = "This form has expired. Please submit it again."
		p.renderRegister(w, r, http.StatusForbidden, form)
		return
	}
	if g := r.PostFormValue("authorization_grant_type"); g != "authorization-code" {
		form.Error = "Authorization grant type: only the authorization code grant is offered."
		p.renderRegister(w, r, http.StatusBadRequest, form)
		return
	}
	c, secret, err := p.RegisterClientAs(ctx, actor, ClientRegistration{
		Name: form.Name, Type: domain.ClientType(form.ClientType), Algorithm: r.PostFormValue("algorithm"),
		RedirectURIs: strings.Fields(form.RedirectURIs), PostLogoutRedirectURIs: strings.Fields(form.PostLogoutRedirectURIs),
		AllowedOrigins: strings.Fields(form.AllowedOrigins), Scopes: strings.Fields(form.Scopes),
		TokenEndpointAuthMethod: form.AuthMethod,
	})
	if err != nil {
		status := http.StatusBadRequest
		if domain.ErrorCode(err) == domain.CodeInternal {
			p.log.Error("client registration failed", "error", err)
			status = http.StatusInternalServerError
		}
		form.Error = domain.Sentence(domain.ErrorMessage(err))
		p.renderRegister(w, r, status, form)
		return
	}
	p.renderRegistered(w, r, registeredPage{ClientID: c.ID, Secret: secret, Name: c.Name})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
