package oauth

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/golang-jwt/jwt/v5"

	"exchange/domain"
)

// Token exchange (RFC 8693) from an EHR launch, as JupyterHealth Exchange
// defines it, so that its EHR-embedded dashboards work unchanged: a SMART
// app launched from an EHR posts the EHR's OpenID Connect ID token for the
// clinician to POST /o/token-exchange, authenticating as a confidential
// client, and receives an access token of this exchange for the
// practitioner the token's fhirUser names.
//
// The ID token's iss must be a trusted issuer (TOKEN_EXCHANGE_TRUSTED_ISSUERS,
// a trailing slash ignored); its keys are discovered from
// {iss}/.well-known/smart-configuration, then openid-configuration (https
// only, http on loopback hosts); the signature by an allowed algorithm
// (idTokenAlgorithms: no "none", no HS*), exp and iat with leeway, and aud
// (TOKEN_EXCHANGE_AUDIENCE) are checked. The refusals answer with
// JupyterHealth Exchange's statuses: 400 for a malformed request, 401 for
// a client or token that does not authenticate, 403 for an untrusted
// issuer or a fhirUser that is no Practitioner, 404 for a practitioner
// not known here (or not known as one), 502 when the issuer's keys cannot
// be found.

// The RFC 8693 names this endpoint speaks.
const (
	grantTokenExchange = "urn:ietf:params:oauth:grant-type:token-exchange"
	tokenTypeIDToken   = "urn:ietf:params:oauth:token-type:id_token"
	tokenTypeAccess    = "urn:ietf:params:oauth:token-type:access_token"
)

// TokenExchangeConfig configures /o/token-exchange.
type TokenExchangeConfig struct {
	// TrustedIssuers are the EHRs whose ID tokens are exchanged
	// (TOKEN_EXCHANGE_TRUSTED_ISSUERS), compared without a trailing slash.
	TrustedIssuers []string
	// Audience is the aud the ID tokens must carry
	// (TOKEN_EXCHANGE_AUDIENCE): the SMART app's client id at the EHR.
	Audience string
}

// tokenExchange checks the EHRs' ID tokens, with their key sets cached by
// issuer (go-oidc fetches a key set again when a token names a key it has
// not seen).
type tokenExchange struct {
	config  TokenExchangeConfig
	trusted []string // TrustedIssuers without trailing slashes
	client  *http.Client
	now     func() time.Time

	mu   sync.Mutex
	keys map[string]issuerKeys
}

type issuerKeys struct {
	set        oidc.KeySet
	discovered time.Time
}

// issuerKeysLifetime is how long an issuer's discovered jwks_uri is used
// before it is discovered again.
const issuerKeysLifetime = time.Hour

func newTokenExchange(c TokenExchangeConfig, client *http.Client, now func() time.Time) *tokenExchange {
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	if now == nil {
		now = time.Now
	}
	x := &tokenExchange{config: c, client: client, now: now, keys: map[string]issuerKeys{}}
	for _, iss := range c.TrustedIssuers {
		x.trusted = append(x.trusted, strings.TrimRight(iss, "/"))
	}
	return x
}

// exchangeError is a refusal of the token exchange endpoint.
type exchangeError struct {
	status      int
	code        string
	description string
}

func exchangeErrorf(status int, code, format string, args ...any) *exchangeError {
	return &exchangeError{status: status, code: code, description: fmt.Sprintf(format, args...)}
}

// tokenExchangeHandler serves POST /o/token-exchange.
func (p *Provider) tokenExchangeHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	resp, xerr := p.exchangeToken(r)
	if xerr != nil {
		p.metrics.tokenRefusedWith(xerr.code)
		if xerr.status == http.StatusUnauthorized && xerr.code == "invalid_client" {
			w.Header().Set("WWW-Authenticate", `Basic realm="exchange"`)
		}
		writeJSON(w, xerr.status, map[string]string{"error": xerr.code, "error_description": xerr.description})
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// exchangeToken checks the request and issues the token; in JupyterHealth
// Exchange's order, so that each malformed request gets its status.
func (p *Provider) exchangeToken(r *http.Request) (map[string]any, *exchangeError) {
	ctx := r.Context()
	if err := r.ParseForm(); err != nil {
		return nil, exchangeErrorf(http.StatusBadRequest, "invalid_request", "The body must be application/x-www-form-urlencoded.")
	}
	form := r.PostForm
	for _, name := range []string{"audience", "requested_token_type", "subject_token_type", "subject_token", "grant_type"} {
		if form.Get(name) == "" {
			return nil, exchangeErrorf(http.StatusBadRequest, "invalid_request", "Missing required argument: %s.", name)
		}
	}
	origin := p.proxies.RequestOrigin(r)
	scope := form.Get("scope")
	if scope == "" {
		scope = domain.ScopeOpenID
	}
	switch {
	case form.Get("grant_type") != grantTokenExchange:
		return nil, exchangeErrorf(http.StatusBadRequest, "unsupported_grant_type", "grant_type must be %s.", grantTokenExchange)
	case form.Get("subject_token_type") != tokenTypeIDToken:
		return nil, exchangeErrorf(http.StatusBadRequest, "invalid_request", "subject_token_type must be %s.", tokenTypeIDToken)
	case form.Get("requested_token_type") != tokenTypeAccess:
		return nil, exchangeErrorf(http.StatusBadRequest, "invalid_request", "requested_token_type must be %s.", tokenTypeAccess)
	case strings.TrimRight(form.Get("audience"), "/") != origin:
		return nil, exchangeErrorf(http.StatusBadRequest, "invalid_target", "audience must be this server, %s.", origin)
	case scope != domain.ScopeOpenID:
		return nil, exchangeErrorf(http.StatusBadRequest, "invalid_scope", "Only the scope openid is exchanged.")
	}
	client, err := p.storage.authenticateClient(ctx, r, form)
	if err == nil && client.IsPublic() {
		err = fmt.Errorf("a public client")
	}
	if err != nil {
		return nil, exchangeErrorf(http.StatusUnauthorized, "invalid_client", "Client authentication failed: a confidential client authenticates with its secret (HTTP Basic or the form).")
	}
	x := p.exchange
	if len(x.trusted) == 0 || x.config.Audience == "" {
		return nil, exchangeErrorf(http.StatusBadRequest, "unsupported_grant_type", "Token exchange is not configured on this server.")
	}
	raw := form.Get("subject_token")
	unverified := jwt.MapClaims{}
	if _, _, err := jwt.NewParser().ParseUnverified(raw, unverified); err != nil {
		return nil, exchangeErrorf(http.StatusBadRequest, "invalid_request", "subject_token is not a JWT.")
	}
	issuer, _ := unverified["iss"].(string)
	if issuer == "" || !slices.Contains(x.trusted, strings.TrimRight(issuer, "/")) {
		p.log.Warn("token exchange refused: an untrusted issuer", "issuer", truncatedText(issuer, 200))
		return nil, exchangeErrorf(http.StatusForbidden, "access_denied", "The issuer of the subject_token is not trusted.")
	}
	fhirUser, xerr := x.verify(ctx, issuer, raw)
	if xerr != nil {
		p.log.Info("token exchange refused", "issuer", issuer, "reason", xerr.description)
		return nil, xerr
	}
	stored, err := p.store.OAuthClient(ctx, client.GetID())
	if err != nil {
		p.log.Error("token exchange failed", "error", err)
		return nil, exchangeErrorf(http.StatusInternalServerError, "server_error", "The token could not be issued.")
	}
	// The exchanged token acts with the practitioner's full access: a
	// client registered for less may not have it (withinCeiling).
	if !withinCeiling([]string{domain.ScopeOpenID}, stored.Scopes) {
		return nil, exchangeErrorf(http.StatusBadRequest, "invalid_scope", "This client is registered for limited access; an exchanged token would act with the practitioner's full access.")
	}
	u, err := p.users.ExchangedPractitioner(ctx, issuer, fhirUser, client.GetID())
	if err != nil {
		status := map[domain.Code]int{domain.CodeInvalid: http.StatusBadRequest, domain.CodeForbidden: http.StatusForbidden,
			domain.CodeNotFound: http.StatusNotFound, domain.CodeLogin: http.StatusUnauthorized}[domain.ErrorCode(err)]
		if status == 0 {
			p.log.Error("token exchange failed", "error", err)
			return nil, exchangeErrorf(http.StatusInternalServerError, "server_error", "The token could not be issued.")
		}
		return nil, exchangeErrorf(status, "invalid_grant", "%s", domain.Sentence(domain.ErrorMessage(err)))
	}
	expires := p.now().UTC().Add(AccessTokenLifespan).Round(time.Second)
	token, err := p.issueToken(ctx, u, stored, []string{domain.ScopeOpenID}, 0, expires)
	if err != nil {
		p.log.Error("token exchange failed", "error", err)
		return nil, exchangeErrorf(http.StatusInternalServerError, "server_error", "The token could not be issued.")
	}
	p.metrics.tokenIssuedFor("token_exchange")
	return map[string]any{"access_token": token, "issued_token_type": tokenTypeAccess, "token_type": "Bearer",
		"expires_in": int(expires.Sub(p.now()).Seconds()), "scope": domain.ScopeOpenID}, nil
}

// verify checks an ID token of a trusted issuer (iss exactly as the token
// spells it) and returns its fhirUser claim.
func (x *tokenExchange) verify(ctx context.Context, issuer, raw string) (string, *exchangeError) {
	keys, err := x.keySet(ctx, issuer)
	if err != nil {
		return "", exchangeErrorf(http.StatusBadGateway, "temporarily_unavailable", "The signing keys of the issuer could not be found: %v.", err)
	}
	verifier := oidc.NewVerifier(issuer, keys, &oidc.Config{ClientID: x.config.Audience, SupportedSigningAlgs: idTokenAlgorithms,
		Now: func() time.Time { return x.now().Add(-clockLeeway) }})
	token, err := verifier.Verify(ctx, raw)
	if err != nil {
		return "", exchangeErrorf(http.StatusUnauthorized, "invalid_grant", "The subject_token failed validation.")
	}
	if token.IssuedAt.IsZero() || token.IssuedAt.After(x.now().Add(clockLeeway)) {
		return "", exchangeErrorf(http.StatusUnauthorized, "invalid_grant", "The subject_token failed validation (iat).")
	}
	var claims struct {
		FHIRUser string `json:"fhirUser"`
	}
	if err := token.Claims(&claims); err != nil || claims.FHIRUser == "" {
		return "", exchangeErrorf(http.StatusBadRequest, "invalid_grant", "The subject_token has no fhirUser claim.")
	}
	return claims.FHIRUser, nil
}

// keySet returns the issuer's key set, discovering its jwks_uri the first
// time and every issuerKeysLifetime. Key sets are kept by the trusted
// issuer, without trailing slashes: the subject token chooses how many it
// carries, and each spelling must not cost a discovery and a key set.
func (x *tokenExchange) keySet(ctx context.Context, issuer string) (oidc.KeySet, error) {
	issuer = strings.TrimRight(issuer, "/")
	x.mu.Lock()
	k, ok := x.keys[issuer]
	x.mu.Unlock()
	if ok && x.now().Sub(k.discovered) < issuerKeysLifetime {
		return k.set, nil
	}
	jwksURI, err := x.discoverJWKS(ctx, issuer)
	if err != nil {
		return nil, err
	}
	k = issuerKeys{set: oidc.NewRemoteKeySet(oidc.ClientContext(context.Background(), x.client), jwksURI), discovered: x.now()}
	x.mu.Lock()
	x.keys[issuer] = k
	x.mu.Unlock()
	return k.set, nil
}

// discoverJWKS reads the issuer's jwks_uri from its SMART configuration,
// else its OpenID configuration.
func (x *tokenExchange) discoverJWKS(ctx context.Context, issuer string) (string, error) {
	if err := fetchableURL(issuer); err != nil {
		return "", err
	}
	base := strings.TrimRight(issuer, "/")
	var last error
	for _, path := range []string{"/.well-known/smart-configuration", "/.well-known/openid-configuration"} {
		uri, err := x.jwksURIAt(ctx, base+path)
		if err == nil {
			return uri, nil
		}
		last = err
	}
	return "", last
}

// jwksURIAt reads jwks_uri from one discovery document.
func (x *tokenExchange) jwksURIAt(ctx context.Context, at string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, at, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := x.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("%s did not answer", at)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s answered %d", at, resp.StatusCode)
	}
	var doc struct {
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&doc); err != nil || doc.JWKSURI == "" {
		return "", fmt.Errorf("%s names no jwks_uri", at)
	}
	if err := fetchableURL(doc.JWKSURI); err != nil {
		return "", err
	}
	return doc.JWKSURI, nil
}

// fetchableURL accepts the URLs this server fetches keys from: https, or
// http on a loopback host.
func fetchableURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || !(u.Scheme == "https" || (u.Scheme == "http" && domain.IsLoopbackHost(u.Hostname()))) {
		return fmt.Errorf("%q is not an https URL", truncatedText(raw, 200))
	}
	return nil
}
