package oauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v3"
	"github.com/golang-jwt/jwt/v5"
	"github.com/ory/fosite"

	"exchange/domain"
)

// SMART Backend Services (the SMART App Launch guide's backend services
// and client-confidential-asymmetric profiles): a system signs in without
// a user, with the client_credentials grant, and authenticates with a JWT
// it signed with its private key (private_key_jwt, RFC 7523). fosite
// verifies the assertion (signature against the client's registered JWKS
// or JWKS URL, iss = sub = client id, aud = the token URL (or the issuer,
// GetTokenURLs), a jti not seen
// before); this file adds what the SMART profile asks beyond it:
//
//   - RS384 or ES384 only, and a key of the matching type and strength;
//   - exp at most five minutes ahead (assertionLifetime, with a little
//     leeway for clocks), so a stolen assertion is short-lived and the
//     jti record that refuses its replay is too;
//   - a jti used once across every instance: its record is a unique
//     insert (Store.UseAssertion), not fosite's check-then-set;
//   - every refusal is invalid_client;
//   - access tokens of at most five minutes, no refresh token, and only
//     system/ scopes, which read and search;
//   - the token acts for the practitioner or organization the client was
//     registered for: the same permission and consent rules as theirs.

// The limits of the backend profile.
const (
	// BackendAccessTokenLifespan is the lifetime of a backend client's
	// access token.
	BackendAccessTokenLifespan = 5 * time.Minute
	// assertionLifetime is how far ahead an assertion's exp may be;
	// assertionLeeway allows for the client's clock running ahead.
	assertionLifetime = 5 * time.Minute
	assertionLeeway   = 10 * time.Second
	// maxJWKSBytes bounds a registered JWKS and a fetched one.
	maxJWKSBytes = 64 << 10
	// maxJWKSKeys bounds the keys of a JWKS.
	maxJWKSKeys = 20
	// jwksCacheTTL is how long a fetched JWKS is kept; a kid it lacks
	// fetches it again (fosite asks once more, ignoring the cache).
	jwksCacheTTL = 5 * time.Minute
	// jwksFetchTimeout bounds fetching a client's JWKS URL.
	jwksFetchTimeout = 5 * time.Second
)

// BackendSigningAlgorithms are the assertion algorithms accepted.
var BackendSigningAlgorithms = []string{"RS384", "ES384"}

// clientAssertionType is the client_assertion_type of private_key_jwt.
const clientAssertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

// BackendScopes is the default registration of a backend client: read and
// search every type it may see.
var BackendScopes = []string{"system/*.rs"}

// assertionAlgKey carries the algorithm of the assertion being checked to
// GetClient, which presents it as the client's signing algorithm: fosite
// accepts one algorithm per client, the profile two (RS384 or ES384, by
// the key the client holds).
type assertionAlgKey struct{}

// authenticateAssertion authenticates a backend client by its JWT
// assertion. Every refusal is invalid_client; a failure of the store is a
// server error.
func (s *fositeStore) authenticateAssertion(ctx context.Context, r *http.Request, form url.Values) (fosite.Client, error) {
	refuse := func(hint string, args ...any) error { return fosite.ErrInvalidClient.WithHintf(hint, args...) }
	if form.Get("client_assertion_type") != clientAssertionType {
		return nil, refuse("client_assertion_type must be %s.", clientAssertionType)
	}
	if _, _, basic := r.BasicAuth(); basic || form.Get("client_secret") != "" {
		return nil, refuse("Authenticate with one method: a client assertion, or a secret.")
	}
	assertion := form.Get("client_assertion")
	token, _, err := jwt.NewParser().ParseUnverified(assertion, jwt.MapClaims{})
	if err != nil {
		return nil, refuse("The client assertion is not a JWT.")
	}
	alg, _ := token.Header["alg"].(string)
	if !slices.Contains(BackendSigningAlgorithms, alg) {
		return nil, refuse("The client assertion must be signed with RS384 or ES384, not %q.", alg)
	}
	claims := token.Claims.(jwt.MapClaims)
	exp, err := claims.GetExpirationTime()
	if err != nil || exp == nil {
		return nil, refuse("The client assertion has no exp.")
	}
	if exp.After(s.now().Add(assertionLifetime + assertionLeeway)) {
		return nil, refuse("The client assertion's exp is more than five minutes ahead.")
	}
	clientID, _ := claims["sub"].(string)
	if id := form.Get("client_id"); id != "" && id != clientID {
		return nil, refuse("client_id does not match the assertion's sub.")
	}
	c, err := s.store.OAuthClient(ctx, clientID)
	if domain.IsCode(err, domain.CodeNotFound) {
		return nil, refuse("The client is not registered.")
	}
	if err != nil {
		return nil, fosite.ErrServerError.WithWrap(err)
	}
	if c.Type != domain.ClientBackend {
		return nil, refuse("The client authenticates with %s, not a client assertion.", acceptedMethods(c))
	}
	if jku, ok := token.Header["jku"]; ok && (c.JWKSURL == "" || jku != c.JWKSURL) {
		return nil, refuse("The assertion's jku is not the client's registered JWKS URL.")
	}
	client, err := s.fosite.DefaultClientAuthenticationStrategy(context.WithValue(ctx, assertionAlgKey{}, alg), r, form)
	if err != nil {
		rfc := fosite.ErrorToRFC6749Error(err)
		if rfc.ErrorField == fosite.ErrServerError.ErrorField {
			return nil, err
		}
		return nil, fosite.ErrInvalidClient.WithHint(rfc.GetDescription())
	}
	return client, nil
}

// backendGrant completes a client_credentials request of an authenticated
// backend client: it grants the requested scopes, which must all be
// system/ scopes its registration allows (fosite checked the latter), and
// binds the token to the identity the client acts for, for at most
// BackendAccessTokenLifespan.
func (p *Provider) backendGrant(ctx context.Context, ar fosite.AccessRequester) error {
	c, err := p.store.OAuthClient(ctx, ar.GetClient().GetID())
	if err != nil {
		return fosite.ErrServerError.WithWrap(err)
	}
	if c.Type != domain.ClientBackend {
		return fosite.ErrUnauthorizedClient.WithHint("Only backend clients use the client_credentials grant.")
	}
	requested := ar.GetRequestedScopes()
	if len(requested) == 0 {
		return fosite.ErrInvalidScope.WithHint("Ask for the system/ scopes the token needs, such as system/*.rs.")
	}
	for _, sc := range requested {
		if !domain.IsSystemScope(sc) {
			return fosite.ErrInvalidScope.WithHintf("A backend client is granted system/ scopes only, not '%s'.", sc)
		}
	}
	now := p.now().UTC()
	sess, ok := ar.GetSession().(*session)
	if !ok {
		return fosite.ErrServerError.WithHint("unexpected session type")
	}
	if c.ActsForUserID != 0 {
		u, err := p.users.UserByID(ctx, c.ActsForUserID)
		if err != nil || !u.IsActive || u.Type != domain.UserPractitioner {
			return fosite.ErrInvalidGrant.WithHint("The practitioner this client acts for is no longer active.")
		}
		*sess = *p.newSession(u, "", nil, now, now)
	} else {
		sess.Organization = c.ActsForOrganizationID
		sess.Claims.AuthTime, sess.Claims.RequestedAt = now, now
	}
	expires := now.Add(BackendAccessTokenLifespan)
	if at := sess.GetExpiresAt(fosite.AccessToken); !at.IsZero() && at.Before(expires) {
		expires = at
	}
	sess.SetExpiresAt(fosite.AccessToken, expires)
	for _, sc := range requested {
		ar.GrantScope(sc)
	}
	ar.GrantAudience(c.ID)
	return nil
}

// backendClientKeys is the registered JWKS of a backend client, for
// fosite; nil when it registered a URL instead.
func backendClientKeys(c *domain.OAuthClient) *jose.JSONWebKeySet {
	if c.JWKS == "" {
		return nil
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal([]byte(c.JWKS), &set); err != nil {
		return &jose.JSONWebKeySet{} // checked at registration: never
	}
	return &set
}

// checkBackendRegistration completes the registration of a backend
// client: its keys (a JWKS, normalised, or a JWKS URL), its scopes
// (system/ only) and its grant. The identity it acts for is checked by
// the domain (RegisterClient).
func checkBackendRegistration(c *domain.OAuthClient, in ClientRegistration) error {
	switch {
	case in.Secret != "":
		return domain.FieldErrorf("clientSecret", "a backend client has no secret: it signs assertions with its private key")
	case len(c.RedirectURIs) > 0 || len(c.PostLogoutRedirectURIs) > 0:
		return domain.FieldErrorf("redirectUris", "a backend client has no redirect URIs: it uses the client_credentials grant")
	case in.TokenEndpointAuthMethod != "" && in.TokenEndpointAuthMethod != domain.AuthPrivateKeyJWT:
		return domain.FieldErrorf("tokenEndpointAuthMethod", "a backend client authenticates with %s", domain.AuthPrivateKeyJWT)
	case (in.JWKS == "") == (in.JWKSURL == ""):
		return domain.FieldErrorf("jwks", "a backend client registers its public keys: a JWKS or a JWKS URL, one of them")
	case in.SkipAuthorization:
		return domain.FieldErrorf("skipAuthorization", "a backend client has no consent page to skip")
	}
	if in.JWKS != "" {
		set, err := ParseClientJWKS([]byte(in.JWKS))
		if err != nil {
			return domain.FieldErrorf("jwks", "%v", err)
		}
		normalized, err := json.Marshal(set)
		if err != nil {
			return err
		}
		c.JWKS = string(normalized)
	} else {
		if err := checkJWKSURL(in.JWKSURL); err != nil {
			return err
		}
		c.JWKSURL = in.JWKSURL
	}
	if len(in.Scopes) == 0 {
		c.Scopes = BackendScopes
	}
	for _, sc := range c.Scopes {
		if !domain.IsSystemScope(sc) {
			return domain.FieldErrorf("scopes", "a backend client may request system/ scopes only, not %q", sc)
		}
	}
	c.GrantTypes = []string{"client_credentials"}
	c.TokenEndpointAuthMethod, c.AuthMethodPinned = domain.AuthPrivateKeyJWT, true
	c.Algorithm = ""
	c.ActsForUserID, c.ActsForOrganizationID = in.ActsForUserID, in.ActsForOrganizationID
	return nil
}

// checkJWKSURL accepts https URLs, and http on a loopback host (a local
// test), as redirect URIs are.
func checkJWKSURL(raw string) error {
	if err := domain.LimitURL.Check("jwksUrl", raw); err != nil {
		return err
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Host == "" || u.Fragment != "" || (u.Scheme != "https" && u.Scheme != "http") {
		return domain.FieldErrorf("jwksUrl", "%q is not an absolute http(s) URL", raw)
	}
	if !fosite.IsRedirectURISecure(context.Background(), u) {
		return domain.FieldErrorf("jwksUrl", "%q uses http on a host that is not loopback; use https", raw)
	}
	return nil
}

// ParseClientJWKS reads a backend client's JSON Web Key Set: public keys
// only (a private key pasted by mistake is refused, never stored), each
// with a kid, RSA of at least 2048 bits (RS384) or EC on P-384 (ES384),
// for signatures. A key without "use" is given "sig" (fosite looks for
// signature keys; SMART clients often leave "use" out).
func ParseClientJWKS(raw []byte) (*jose.JSONWebKeySet, error) {
	if len(raw) > maxJWKSBytes {
		return nil, fmt.Errorf("the JWKS is %d bytes; at most %d are taken", len(raw), maxJWKSBytes)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(raw, &set); err != nil {
		return nil, fmt.Errorf("not a JSON Web Key Set: %v", err)
	}
	if len(set.Keys) == 0 || len(set.Keys) > maxJWKSKeys {
		return nil, fmt.Errorf("a JWKS holds 1 to %d keys, this one %d", maxJWKSKeys, len(set.Keys))
	}
	for i := range set.Keys {
		if err := checkClientKey(&set.Keys[i]); err != nil {
			return nil, fmt.Errorf("key %d: %v", i, err)
		}
	}
	return &set, nil
}

func checkClientKey(k *jose.JSONWebKey) error {
	if !k.IsPublic() {
		return errors.New("this is a private key: register the public key only, and keep the private key secret")
	}
	if k.KeyID == "" {
		return errors.New("a key needs a kid, which the assertion's header names")
	}
	switch k.Use {
	case "":
		k.Use = "sig"
	case "sig":
	default:
		return fmt.Errorf("use is %q; keys that sign assertions have use sig", k.Use)
	}
	switch key := k.Key.(type) {
	case *rsa.PublicKey:
		if key.N.BitLen() < MinRSABits {
			return fmt.Errorf("an RSA key has at least %d bits", MinRSABits)
		}
		if k.Algorithm != "" && k.Algorithm != "RS384" {
			return fmt.Errorf("alg is %q; an RSA key signs with RS384", k.Algorithm)
		}
	case *ecdsa.PublicKey:
		if key.Curve != elliptic.P384() {
			return errors.New("an EC key is on P-384 (ES384)")
		}
		if k.Algorithm != "" && k.Algorithm != "ES384" {
			return fmt.Errorf("alg is %q; a P-384 key signs with ES384", k.Algorithm)
		}
	default:
		return fmt.Errorf("a %T key is not accepted: RSA (RS384) or EC P-384 (ES384)", k.Key)
	}
	return nil
}

// jwksFetcher fetches and caches the JWKS URLs of backend clients for
// fosite: with a short timeout and a bounded body (a slow or huge answer
// must not hold a token request), keys normalised as ParseClientJWKS does,
// kept for jwksCacheTTL.
type jwksFetcher struct {
	client *http.Client
	now    func() time.Time
	mu     sync.Mutex
	cache  map[string]fetchedJWKS
}

type fetchedJWKS struct {
	set *jose.JSONWebKeySet
	at  time.Time
}

var _ fosite.JWKSFetcherStrategy = (*jwksFetcher)(nil)

func newJWKSFetcher(now func() time.Time) *jwksFetcher {
	return &jwksFetcher{client: &http.Client{Timeout: jwksFetchTimeout}, now: now, cache: map[string]fetchedJWKS{}}
}

// Resolve implements fosite.JWKSFetcherStrategy. A failure is the
// client's: invalid_client, saying what went wrong with its URL.
func (f *jwksFetcher) Resolve(ctx context.Context, location string, ignoreCache bool) (*jose.JSONWebKeySet, error) {
	f.mu.Lock()
	cached, ok := f.cache[location]
	f.mu.Unlock()
	if ok && !ignoreCache && f.now().Sub(cached.at) < jwksCacheTTL {
		return cached.set, nil
	}
	set, err := f.fetch(ctx, location)
	if err != nil {
		return nil, fosite.ErrInvalidClient.WithHintf("The client's JWKS URL could not be read: %v.", err)
	}
	f.mu.Lock()
	f.cache[location] = fetchedJWKS{set: set, at: f.now()}
	f.mu.Unlock()
	return set, nil
}

func (f *jwksFetcher) fetch(ctx context.Context, location string) (*jose.JSONWebKeySet, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, location, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, errors.New("the request failed")
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, errors.New("it answered " + strconv.Itoa(resp.StatusCode))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, errors.New("its answer was cut short")
	}
	return ParseClientJWKS(body)
}

// ClientAssertionJWTValid implements fosite.ClientManager. It checks
// nothing: SetClientAssertionJWT, which fosite calls next, refuses a jti
// used before, in one step that cannot race a replay on another instance.
func (s *fositeStore) ClientAssertionJWTValid(context.Context, string) error { return nil }

// SetClientAssertionJWT implements fosite.ClientManager: the jti is
// recorded as used until the assertion expires (Store.UseAssertion, the
// record of used assertions federated sign-in keeps too, a unique insert),
// so that of two requests replaying one assertion at once, on any
// instances, one is refused.
func (s *fositeStore) SetClientAssertionJWT(ctx context.Context, jti string, exp time.Time) error {
	err := s.store.UseAssertion(ctx, clientAssertionKey+jti, exp, s.now())
	if domain.IsCode(err, domain.CodeDuplicate) {
		return fosite.ErrJTIKnown.WithHint("Claim 'jti' from 'client_assertion' MUST only be used once.")
	}
	if err != nil {
		return fosite.ErrServerError.WithWrap(err)
	}
	return nil
}

// clientAssertionKey prefixes a client assertion's jti among the used
// assertions, apart from SAML assertions (keyed by their issuer's URL).
const clientAssertionKey = "client-assertion\n"
