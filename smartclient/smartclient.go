// Package smartclient is the exchange as a SMART App Launch client of
// patients' EHRs (standalone launch, server-side): discovery of an EHR's
// smart-configuration, the authorize URL (PKCE S256, state, aud), the code
// exchange and refresh (golang.org/x/oauth2), the check of a signed
// id_token against the EHR's keys, revocation, and reads of the EHR's FHIR
// API with the patient's token. It implements domain.EHR; what to read and
// what to keep is the domain's (ehrpull.go).
//
// Design principles:
//
//   - Bounded: every request has a timeout, an answer is read up to a size,
//     and transient failures (a lost connection, 429, 5xx) are retried a
//     few times with backoff, honouring Retry-After.
//   - Tokens go only where they belong: reads are under the EHR's FHIR
//     base (the domain checks next links), token requests to the
//     discovered token endpoint; no token, code or secret is logged or put
//     in an error.
//   - An access token the EHR refuses before its time (401) is refreshed
//     once, when the session may refresh, and the request made again.
package smartclient

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/oauth2"

	"exchange/domain"
)

// Client is the exchange's client of EHRs.
type Client struct {
	// HTTP makes the requests; its transport is shared by every EHR.
	HTTP *http.Client
	// Timeout bounds one request; Retries how many times a transient
	// failure is tried again, waiting Backoff(n) (doubling from half a
	// second, at most 30 s) or the EHR's Retry-After.
	Timeout time.Duration
	Retries int
	Backoff func(n int) time.Duration
}

var _ domain.EHR = (*Client)(nil)

// New returns a client with the defaults: 30 s a request, 3 retries.
func New() *Client {
	return &Client{HTTP: &http.Client{Timeout: 2 * time.Minute, CheckRedirect: noRedirects}, Timeout: 30 * time.Second, Retries: 3}
}

// noRedirects keeps a token from following a redirect to another host:
// FHIR reads are not redirected.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

func (c *Client) backoff(n int) time.Duration {
	if c.Backoff != nil {
		return c.Backoff(n)
	}
	return min(30*time.Second, time.Duration(500<<n)*time.Millisecond)
}

// maxDiscovery bounds a smart-configuration or key set.
const maxDiscovery = 1 << 20

// Discover implements domain.EHR.
func (c *Client) Discover(ctx context.Context, iss string) (*domain.SMARTConfiguration, error) {
	body, err := c.get(ctx, c.HTTP, strings.TrimSuffix(iss, "/")+"/.well-known/smart-configuration", "application/json", maxDiscovery)
	if err != nil {
		return nil, err
	}
	var conf domain.SMARTConfiguration
	if err := json.Unmarshal(body, &conf); err != nil {
		return nil, &domain.EHRError{Status: http.StatusBadGateway, Message: "its smart-configuration is not JSON"}
	}
	for name, u := range map[string]string{"authorization_endpoint": conf.AuthorizationEndpoint, "token_endpoint": conf.TokenEndpoint,
		"revocation_endpoint": conf.RevocationEndpoint, "jwks_uri": conf.JWKSURI} {
		if u != "" && !httpURL(u) {
			return nil, &domain.EHRError{Status: http.StatusBadGateway, Message: "its smart-configuration's " + name + " is not an http(s) URL"}
		}
	}
	return &conf, nil
}

func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" && u.User == nil
}

// oauthConfig is the client's configuration at one EHR. A confidential
// client sends its secret in the Authorization header; a public one its
// client_id as a parameter (no detection: a code is redeemed once).
func oauthConfig(e domain.EHRClientConfig) *oauth2.Config {
	style := oauth2.AuthStyleInHeader
	if e.ClientSecret == "" {
		style = oauth2.AuthStyleInParams
	}
	return &oauth2.Config{ClientID: e.ClientID, ClientSecret: e.ClientSecret, RedirectURL: e.RedirectURI, Scopes: e.Scopes,
		Endpoint: oauth2.Endpoint{AuthURL: e.AuthorizeURL, TokenURL: e.TokenURL, AuthStyle: style}}
}

// AuthorizeURL implements domain.EHR.
func (c *Client) AuthorizeURL(e domain.EHRClientConfig, state, verifier string) string {
	return oauthConfig(e).AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("aud", e.Issuer))
}

// withHTTP is ctx carrying the client's HTTP client, bounded, for
// golang.org/x/oauth2's token requests.
func (c *Client) withHTTP(ctx context.Context) context.Context {
	return context.WithValue(ctx, oauth2.HTTPClient, &http.Client{Timeout: c.Timeout, Transport: c.HTTP.Transport, CheckRedirect: noRedirects})
}

// Exchange implements domain.EHR.
func (c *Client) Exchange(ctx context.Context, e domain.EHRClientConfig, code, verifier string) (*domain.EHRToken, error) {
	tok, err := oauthConfig(e).Exchange(c.withHTTP(ctx), code, oauth2.VerifierOption(verifier))
	if err != nil {
		return nil, tokenError(err)
	}
	out := tokenOf(tok)
	if idToken, _ := tok.Extra("id_token").(string); idToken != "" && e.JWKSURI != "" {
		claims, err := c.checkIDToken(ctx, e, idToken)
		if err != nil {
			return nil, &domain.EHRError{Status: http.StatusBadGateway, Message: "its id_token does not check: " + err.Error()}
		}
		out.FHIRUser, _ = claims["fhirUser"].(string)
	}
	return out, nil
}

// tokenOf reads an oauth2 token and the SMART members of its response.
func tokenOf(tok *oauth2.Token) *domain.EHRToken {
	out := &domain.EHRToken{AccessToken: tok.AccessToken, RefreshToken: tok.RefreshToken, TokenType: tok.TokenType, Expiry: tok.Expiry}
	out.Patient, _ = tok.Extra("patient").(string)
	out.Scope, _ = tok.Extra("scope").(string)
	return out
}

// tokenError is the EHRError of a failed token request: the status and
// OAuth error code, never the request.
func tokenError(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		status := http.StatusUnauthorized
		if re.Response != nil {
			status = re.Response.StatusCode
		}
		if re.ErrorCode == "invalid_grant" {
			status = http.StatusUnauthorized // the grant is gone: connect again
		}
		msg := "the token endpoint refused the request"
		if re.ErrorCode != "" {
			msg += " (" + re.ErrorCode + ")"
		}
		return &domain.EHRError{Status: status, Message: msg}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &domain.EHRError{Status: 0, Message: "the token endpoint: " + errorWithoutURL(err)}
}

// checkIDToken checks an id_token's RS256 signature against the EHR's key
// set, its audience (the client), and its time.
func (c *Client) checkIDToken(ctx context.Context, e domain.EHRClientConfig, idToken string) (jwt.MapClaims, error) {
	body, err := c.get(ctx, c.HTTP, e.JWKSURI, "application/json", maxDiscovery)
	if err != nil {
		return nil, err
	}
	keys, err := rsaKeys(body)
	if err != nil {
		return nil, err
	}
	claims := jwt.MapClaims{}
	_, err = jwt.ParseWithClaims(idToken, claims, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		if k, ok := keys[kid]; ok {
			return k, nil
		}
		if len(keys) == 1 && kid == "" {
			for _, k := range keys {
				return k, nil
			}
		}
		return nil, fmt.Errorf("no key %q in the EHR's key set", kid)
	}, jwt.WithValidMethods([]string{"RS256", "RS384", "RS512"}), jwt.WithAudience(e.ClientID), jwt.WithExpirationRequired(), jwt.WithLeeway(time.Minute))
	return claims, err
}

// rsaKeys reads the RSA keys of a JSON Web Key Set, by kid.
func rsaKeys(data []byte) (map[string]*rsa.PublicKey, error) {
	var set struct {
		Keys []struct {
			Kty, Kid, N, E, Use string
		} `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, errors.New("its key set is not JSON")
	}
	out := map[string]*rsa.PublicKey{}
	for _, k := range set.Keys {
		if k.Kty != "RSA" || k.Use == "enc" {
			continue
		}
		n, err1 := base64.RawURLEncoding.DecodeString(k.N)
		e, err2 := base64.RawURLEncoding.DecodeString(k.E)
		if err1 != nil || err2 != nil || len(e) == 0 || len(e) > 4 {
			continue
		}
		out[k.Kid] = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
	}
	if len(out) == 0 {
		return nil, errors.New("its key set has no RSA signing key")
	}
	return out, nil
}

// Revoke implements domain.EHR (RFC 7009): the refresh token, which
// revokes the grant, else the access token.
func (c *Client) Revoke(ctx context.Context, e domain.EHRClientConfig, t *domain.EHRToken) error {
	if e.RevocationURL == "" {
		return nil
	}
	form := url.Values{}
	if t.RefreshToken != "" {
		form.Set("token", t.RefreshToken)
		form.Set("token_type_hint", "refresh_token")
	} else {
		form.Set("token", t.AccessToken)
		form.Set("token_type_hint", "access_token")
	}
	if e.ClientSecret == "" {
		form.Set("client_id", e.ClientID)
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.RevocationURL, strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if e.ClientSecret != "" {
		req.SetBasicAuth(url.QueryEscape(e.ClientID), url.QueryEscape(e.ClientSecret))
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return &domain.EHRError{Status: 0, Message: "the revocation endpoint: " + errorWithoutURL(err)}
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return &domain.EHRError{Status: resp.StatusCode, Message: "the revocation endpoint refused the token"}
	}
	return nil
}

// Open implements domain.EHR.
func (c *Client) Open(ctx context.Context, e domain.EHRClientConfig, t *domain.EHRToken, saved func(*domain.EHRToken) error) domain.EHRSession {
	base := &oauth2.Token{AccessToken: t.AccessToken, RefreshToken: t.RefreshToken, TokenType: t.TokenType, Expiry: t.Expiry}
	s := &session{c: c, conf: oauthConfig(e), ctx: c.withHTTP(context.WithoutCancel(ctx)), current: base, patient: t.Patient,
		fhirUser: t.FHIRUser, saved: saved}
	return s
}

// session is a patient's token at one EHR: it refreshes the token when it
// expires, or once when the EHR refuses it before, and saves each new one.
type session struct {
	c        *Client
	conf     *oauth2.Config
	ctx      context.Context // for token requests
	mu       sync.Mutex
	current  *oauth2.Token
	patient  string
	fhirUser string
	saved    func(*domain.EHRToken) error
}

// token returns a valid access token: the current one, or a refreshed one
// when it expired (or force).
func (s *session) token(force bool) (*oauth2.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current.Valid() && !force {
		return s.current, nil
	}
	if s.current.RefreshToken == "" {
		return nil, &domain.EHRError{Status: http.StatusUnauthorized, Message: "the access token expired and may not be refreshed"}
	}
	expired := *s.current
	expired.Expiry = time.Unix(1, 0) // the source refreshes what it holds only once expired
	tok, err := s.conf.TokenSource(s.ctx, &expired).Token()
	if err != nil {
		return nil, tokenError(err)
	}
	if tok.RefreshToken == "" {
		tok.RefreshToken = s.current.RefreshToken // not rotated: the same goes on
	}
	s.current = tok
	if s.saved != nil {
		t := tokenOf(tok)
		t.Patient, t.FHIRUser = s.patient, s.fhirUser
		if err := s.saved(t); err != nil {
			return nil, fmt.Errorf("saving the refreshed EHR token: %w", err)
		}
	}
	return tok, nil
}

// Get implements domain.EHRSession.
func (s *session) Get(ctx context.Context, rawURL string, maxBytes int64) ([]byte, error) {
	refreshed := false
	for {
		tok, err := s.token(false)
		if err != nil {
			return nil, err
		}
		client := &http.Client{Timeout: s.c.HTTP.Timeout, CheckRedirect: noRedirects,
			Transport: &oauth2.Transport{Source: oauth2.StaticTokenSource(tok), Base: s.c.HTTP.Transport}}
		body, err := s.c.get(ctx, client, rawURL, "application/fhir+json", maxBytes)
		var e *domain.EHRError
		if errors.As(err, &e) && e.Status == http.StatusUnauthorized && !refreshed && tok.RefreshToken != "" {
			// Refused before its time: refreshed once, and asked again.
			if _, err := s.token(true); err != nil {
				return nil, err
			}
			refreshed = true
			continue
		}
		return body, err
	}
}

// get reads a URL with the client's timeout and retries of transient
// failures, at most maxBytes of the answer.
func (c *Client) get(ctx context.Context, client *http.Client, rawURL, accept string, maxBytes int64) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		body, retryAfter, err := c.getOnce(ctx, client, rawURL, accept, maxBytes)
		if err != nil && ctx.Err() != nil {
			return nil, ctx.Err() // the caller's time is up, or it stopped: no EHR's fault
		}
		var e *domain.EHRError
		transient := errors.As(err, &e) && (e.Status == 0 || e.Status == http.StatusTooManyRequests || e.Status >= 500)
		if !transient || attempt >= c.Retries || ctx.Err() != nil {
			return body, err
		}
		wait := c.backoff(attempt)
		if retryAfter > 0 {
			wait = min(retryAfter, 30*time.Second)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (c *Client) getOnce(ctx context.Context, client *http.Client, rawURL, accept string, maxBytes int64) ([]byte, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, 0, &domain.EHRError{Status: http.StatusBadRequest, Message: "not a URL"}
	}
	req.Header.Set("Accept", accept)
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, 0, &domain.EHRError{Status: 0, Message: "no answer within " + c.Timeout.String()}
		}
		return nil, 0, &domain.EHRError{Status: 0, Message: errorWithoutURL(err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBytes+1))
	if err != nil {
		return nil, 0, &domain.EHRError{Status: 0, Message: "the answer was cut: " + errorWithoutURL(err)}
	}
	if int64(len(body)) > maxBytes {
		return nil, 0, domain.Errorf(domain.CodeTooLong, "an answer of the EHR is over %d bytes", maxBytes)
	}
	if resp.StatusCode != http.StatusOK {
		retryAfter := time.Duration(0)
		if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
			retryAfter = time.Duration(secs) * time.Second
		}
		return nil, retryAfter, &domain.EHRError{Status: resp.StatusCode, Message: outcomeMessage(body, resp.StatusCode)}
	}
	return body, 0, nil
}

// outcomeMessage is what a refusal says: its OperationOutcome's text, else
// the status's name.
func outcomeMessage(body []byte, status int) string {
	var oo struct {
		ResourceType string `json:"resourceType"`
		Issue        []struct {
			Code        string `json:"code"`
			Diagnostics string `json:"diagnostics"`
			Details     struct {
				Text string `json:"text"`
			} `json:"details"`
		} `json:"issue"`
	}
	msg := http.StatusText(status)
	if json.Unmarshal(bytes.TrimSpace(body), &oo) == nil && oo.ResourceType == "OperationOutcome" && len(oo.Issue) > 0 {
		i := oo.Issue[0]
		if text := strings.TrimSpace(i.Diagnostics + " " + i.Details.Text); text != "" {
			msg = text
		} else if i.Code != "" {
			msg = i.Code
		}
	}
	if r := []rune(msg); len(r) > 200 {
		msg = string(r[:200])
	}
	return msg
}

// errorWithoutURL is a transport error's text without its URL, whose
// query may name the patient.
func errorWithoutURL(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}
