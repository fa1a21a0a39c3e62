package oauth

import (
	"context"
	"crypto/hkdf"
	"crypto/rsa"
	"crypto/sha256"
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/ory/fosite"
	"github.com/ory/fosite/compose"
	"github.com/ory/fosite/handler/openid"
	"github.com/ory/fosite/token/jwt"
	"github.com/prometheus/client_golang/prometheus"

	"exchange/domain"
)

// Token lifetimes.
const (
	AccessTokenLifespan   = time.Hour
	RefreshTokenLifespan  = 30 * 24 * time.Hour
	AuthorizeCodeLifespan = 10 * time.Minute
	IDTokenLifespan       = time.Hour
)

// Users is what the provider needs from the domain: password logins and
// the users tokens act for.
type Users interface {
	// SignIn checks an email and password typed into the login page, with
	// the device cookie and proof of work beside them; domain.CodeLogin or
	// domain.CodeThrottled when refused. SignInChallenge is the page's
	// proof-of-work challenge and its bits.
	SignIn(ctx context.Context, a domain.SignInAttempt) (*domain.SignedIn, error)
	SignInChallenge() (string, int)
	// UserByID returns the user; domain.CodeNotFound if there is none.
	UserByID(ctx context.Context, id int64) (*domain.User, error)
	// Actor returns what the permission model needs to know of an active
	// user, with full access; domain.CodeLogin if the user is gone or
	// inactive.
	Actor(ctx context.Context, userID int64) (*domain.Actor, error)
	// ListPatients and PatientByID find the patient a practitioner opens
	// in a SMART launch (launch/patient), among those they may read.
	ListPatients(ctx context.Context, actor *domain.Actor, f domain.PatientFilter, p domain.Page) (domain.List[domain.Patient], error)
	PatientByID(ctx context.Context, actor *domain.Actor, id int64) (*domain.Patient, error)
	// TokenIssued records, in the audit trail, that the token endpoint
	// issued tokens for the user to the client.
	TokenIssued(ctx context.Context, userID int64, clientID string)
	// CheckBackendIdentity decides whether registrant may register a
	// backend client acting for the practitioner or the organization.
	CheckBackendIdentity(ctx context.Context, registrant *domain.Actor, userID, organizationID int64) error

	// IdentityProviders and IdentityProviderByID are the identity
	// providers staff sign in with, client secrets included.
	IdentityProviders(ctx context.Context) ([]domain.IdentityProvider, error)
	IdentityProviderByID(ctx context.Context, id string) (*domain.IdentityProvider, error)
	// SignInFederated returns the account of an identity a provider
	// asserted; CodeLogin, with a message for the person, when refused.
	SignInFederated(ctx context.Context, p *domain.IdentityProvider, id domain.FederatedIdentity) (*domain.User, error)
	// FederatedSignInRefused records a provider's answer refused before
	// it named anyone (it did not verify).
	FederatedSignInRefused(ctx context.Context, p *domain.IdentityProvider, err error)
	// ExchangedPractitioner returns the practitioner an EHR's verified ID
	// token names as fhirUser, for a token exchange by the client.
	ExchangedPractitioner(ctx context.Context, issuer, fhirUser, clientID string) (*domain.User, error)
	// Invite, DeliverInvitation, PatientForInvitation and
	// InvitationAccepted are the rules of invitations (Provider.Invite):
	// who may invite whom, how a new one reaches its patient, who may
	// cancel one, and that an app redeemed one (the patient has a login
	// from then on).
	Invite(ctx context.Context, actor *domain.Actor, patientID int64, replace bool) (*domain.Invitee, error)
	DeliverInvitation(ctx context.Context, actor *domain.Actor, in *domain.Invitee, link string, expires time.Time) (domain.InvitationDelivery, error)
	PatientForInvitation(ctx context.Context, actor *domain.Actor, id int64) (*domain.Patient, error)
	InvitationAccepted(ctx context.Context, userID int64) error
}

// Config configures a Provider.
type Config struct {
	Store Store
	Users Users
	// SecretKey is the installation's SECRET_KEY: the HMAC key of tokens
	// derives from it. At least 32 bytes.
	SecretKey []byte
	// SigningKey signs ID tokens (RS256).
	SigningKey *rsa.PrivateKey
	// PatientCodeChallenge is the S256 PKCE challenge bound to every patient
	// authorization code; the client redeems the code with its verifier.
	PatientCodeChallenge string
	// PatientCodeTTL is how long a patient authorization code stays valid.
	PatientCodeTTL time.Duration
	Logger         *slog.Logger
	// TrustedProxies are the peers whose forwarding headers give the
	// client's address and origin; none by default.
	TrustedProxies TrustedProxies
	// SessionLifetime and SessionIdleTimeout end login sessions: so long
	// after sign-in, or after so long unused. Zero: the defaults.
	SessionLifetime    time.Duration
	SessionIdleTimeout time.Duration
	// ResourceTypes are the types the FHIR API serves: what a SMART
	// resource scope (patient/<type>.rs) may name besides *.
	ResourceTypes []string
	// Metrics receives the token endpoint's and the sign-ins' series; nil:
	// none.
	Metrics prometheus.Registerer
	// Now is the clock of login sessions and of the codes and tokens this
	// package issues itself; nil means time.Now. fosite's own expiry checks
	// use the wall clock.
	Now func() time.Time
	// PasswordSignInOff hides the login page's password form and refuses
	// its posts (PASSWORD_SIGN_IN=false): staff sign in through identity
	// providers only.
	PasswordSignInOff bool
	// TokenExchange configures /o/token-exchange; without trusted issuers
	// it refuses every request.
	TokenExchange TokenExchangeConfig
	// HTTPClient reaches identity providers and EHRs (discovery, key sets,
	// SAML metadata, code exchanges); nil: a client with a 10-second
	// timeout.
	HTTPClient *http.Client
	// PublicURL is the origin patients' browsers reach the service at
	// (PUBLIC_URL): invitation links are made on it, never on the Host
	// of the request that asks for one, which its sender chooses. "": the
	// request's origin (links then go back to that request's sender only:
	// there is no delivery channel).
	PublicURL string
}

// Provider is the authorization server. Its Handler serves /o/.
type Provider struct {
	oauth2           fosite.OAuth2Provider
	strategy         *compose.CommonStrategy
	storage          *fositeStore
	store            Store
	users            Users
	key              signingKey
	patientChallenge string
	types            map[string]bool
	log              *slog.Logger
	metrics          *metrics
	now              func() time.Time
	pages            *template.Template
	proxies          TrustedProxies
	publicURL        string

	sessionLifetime, sessionIdleTimeout time.Duration
	passwordSignIn                      bool
	federation                          *federation
	exchange                            *tokenExchange
}

// MinSecretKeyLength is the shortest SECRET_KEY accepted.
const MinSecretKeyLength = 32

// New composes the provider: authorization code with PKCE (S256 only),
// refresh token rotation, OpenID Connect ID tokens, introspection and
// revocation, and the client_credentials grant of backend clients
// (backend.go). No implicit, hybrid or password grant.
func New(c Config) (*Provider, error) {
	if len(c.SecretKey) < MinSecretKeyLength {
		return nil, errors.New("oauth: the secret key must be at least 32 bytes")
	}
	if c.SigningKey == nil {
		return nil, errors.New("oauth: a signing key is required")
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	types := map[string]bool{}
	for _, t := range c.ResourceTypes {
		types[t] = true
	}
	hmacKey, err := deriveKey(c.SecretKey, "exchange oauth token hmac")
	if err != nil {
		return nil, err
	}
	if c.SessionLifetime <= 0 {
		c.SessionLifetime = DefaultSessionLifetime
	}
	if c.SessionIdleTimeout <= 0 {
		c.SessionIdleTimeout = DefaultSessionIdleTimeout
	}
	base := &fosite.Config{
		AccessTokenLifespan:            AccessTokenLifespan,
		RefreshTokenLifespan:           RefreshTokenLifespan,
		AuthorizeCodeLifespan:          AuthorizeCodeLifespan,
		IDTokenLifespan:                IDTokenLifespan,
		GlobalSecret:                   hmacKey,
		EnforcePKCE:                    true,
		EnforcePKCEForPublicClients:    true,
		EnablePKCEPlainChallengeMethod: false,
		// Every grant gets a refresh token, not only offline_access ones.
		RefreshTokenScopes:       []string{},
		ScopeStrategy:            scopeStrategy(types),
		AudienceMatchingStrategy: fosite.DefaultAudienceMatchingStrategy,
		ClientSecretsHasher:      secretHasher{},
		MinParameterEntropy:      fosite.MinParameterEntropy,
		JWKSFetcherStrategy:      newJWKSFetcher(c.Now),
	}
	cfg := &providerConfig{Config: base, patientCodeTTL: c.PatientCodeTTL, now: c.Now, proxies: c.TrustedProxies}
	key := newSigningKey(c.SigningKey)
	keyGetter := func(context.Context) (any, error) { return key.private, nil }
	strategy := &compose.CommonStrategy{
		CoreStrategy:               compose.NewOAuth2HMACStrategy(cfg),
		OpenIDConnectTokenStrategy: compose.NewOpenIDConnectStrategy(keyGetter, cfg),
		Signer:                     &jwt.DefaultSigner{GetPrivateKey: keyGetter},
	}
	storage := &fositeStore{store: c.Store, users: c.Users, refreshTokenLife: RefreshTokenLifespan, authorizeCodeLife: AuthorizeCodeLifespan,
		refreshSignature: strategy.CoreStrategy.RefreshTokenSignature, now: c.Now}
	base.ClientAuthenticationStrategy = storage.authenticateClient
	provider := fosite.NewOAuth2Provider(storage, cfg)
	storage.fosite = provider
	for _, factory := range []compose.Factory{
		compose.OAuth2AuthorizeExplicitFactory,
		compose.OAuth2RefreshTokenGrantFactory,
		compose.OpenIDConnectExplicitFactory,
		compose.OpenIDConnectRefreshFactory,
		compose.OAuth2TokenIntrospectionFactory,
		compose.OAuth2TokenRevocationFactory,
		compose.OAuth2PKCEFactory,
		compose.OAuth2ClientCredentialsGrantFactory,
	} {
		// Handlers see cfg (with its overrides); the handler lists live in base.
		h := factory(cfg, storage, strategy)
		if ah, ok := h.(fosite.AuthorizeEndpointHandler); ok {
			base.AuthorizeEndpointHandlers.Append(ah)
		}
		if th, ok := h.(fosite.TokenEndpointHandler); ok {
			base.TokenEndpointHandlers.Append(th)
		}
		if ti, ok := h.(fosite.TokenIntrospector); ok {
			base.TokenIntrospectionHandlers.Append(ti)
		}
		if rh, ok := h.(fosite.RevocationHandler); ok {
			base.RevocationHandlers.Append(rh)
		}
	}
	return &Provider{
		oauth2: provider, strategy: strategy, storage: storage, store: c.Store, users: c.Users,
		key: key, patientChallenge: c.PatientCodeChallenge, types: types,
		log: c.Logger, metrics: newMetrics(c.Metrics), now: c.Now, pages: pageTemplates, proxies: c.TrustedProxies,
		sessionLifetime: c.SessionLifetime, sessionIdleTimeout: c.SessionIdleTimeout,
		passwordSignIn: !c.PasswordSignInOff, federation: newFederation(c.HTTPClient, c.SigningKey, c.Now),
		exchange: newTokenExchange(c.TokenExchange, c.HTTPClient, c.Now), publicURL: c.PublicURL,
	}, nil
}

func deriveKey(secret []byte, purpose string) ([]byte, error) {
	return hkdf.Key(sha256.New, secret, nil, purpose, 32)
}

// providerConfig overrides two settings that fosite reads from a static
// configuration but that depend on the request here.
type providerConfig struct {
	*fosite.Config
	patientCodeTTL time.Duration
	now            func() time.Time
	proxies        TrustedProxies
}

type patientCodeKey struct{}

// GetAuthorizeCodeLifespan gives patient authorization codes, issued out of
// band, their own long lifetime, measured from the provider's clock (fosite
// adds the lifespan to the wall clock).
func (c *providerConfig) GetAuthorizeCodeLifespan(ctx context.Context) time.Duration {
	if ctx.Value(patientCodeKey{}) != nil {
		return time.Until(c.now().Add(c.patientCodeTTL))
	}
	return c.Config.GetAuthorizeCodeLifespan(ctx)
}

// GetIDTokenIssuer returns {origin}/o for the request being served, so the
// ID token's iss matches the discovery document the client read, whatever
// host name (or proxy) it came through.
func (c *providerConfig) GetIDTokenIssuer(ctx context.Context) string {
	if r, ok := ctx.Value(fosite.RequestContextKey).(*http.Request); ok {
		return c.proxies.RequestOrigin(r) + "/o"
	}
	return c.Config.GetIDTokenIssuer(ctx)
}

// GetTokenURLs returns what a backend client's assertion may name as its
// aud, on the origin of the request being served: the token endpoint's
// URL (with and without the trailing slash), as SMART asks, or the
// issuer, as RFC 7523bis recommends and openid-client sends.
func (c *providerConfig) GetTokenURLs(ctx context.Context) []string {
	if r, ok := ctx.Value(fosite.RequestContextKey).(*http.Request); ok {
		issuer := c.proxies.RequestOrigin(r) + "/o"
		return []string{issuer + "/token/", issuer + "/token", issuer}
	}
	return c.Config.GetTokenURLs(ctx)
}

// newSession returns the fosite session of a grant for the user. The ID
// token carries the email only when the email scope was granted, and
// resource (the user's FHIR resource, see fhirUser) as fhirUser only with
// fhirUser.
func (p *Provider) newSession(u *domain.User, resource string, scopes fosite.Arguments, authTime, requestedAt time.Time) *session {
	sub := strconv.FormatInt(u.ID, 10)
	extra := map[string]any{}
	if scopes.Has(domain.ScopeEmail) {
		extra["email"] = u.Email
	}
	if scopes.Has(domain.ScopeFHIRUser) && resource != "" {
		extra["fhirUser"] = resource
	}
	return &session{DefaultSession: openid.DefaultSession{
		Claims: &jwt.IDTokenClaims{
			Subject: sub, AuthTime: authTime.UTC(), RequestedAt: requestedAt.UTC(),
			Extra: extra,
		},
		Headers:  &jwt.Headers{Extra: map[string]any{"kid": p.key.kid}},
		Subject:  sub,
		Username: u.Email,
	}}
}

// emptySession is the prototype fosite fills from storage.
func emptySession() *session {
	return &session{DefaultSession: openid.DefaultSession{Claims: &jwt.IDTokenClaims{}, Headers: &jwt.Headers{}}}
}

// Bearer is what an access token stands for: the user it acts for, the
// scopes granted to it and its patient context (the SMART launch patient;
// 0: none); or, for a backend client acting for an organization, that
// organization and no user. domain.Service.TokenActor (OrganizationActor)
// turns it into the request's actor.
type Bearer struct {
	Organization int64
	UserID       int64
	// User is the user as the token's check read it (it checks that the
	// sign-in the token came from still stands); nil when it read none.
	User     *domain.User
	ClientID string // the client it was issued to
	Scopes   []string
	Patient  int64
}

// AuthenticateBearer returns what an access token stands for. Refresh
// tokens, unknown, expired or revoked tokens, and tokens whose grant is no
// longer within their client's registration (withinCeiling: a client whose
// registration was narrowed, such as the gateway's by `exchange seed`,
// keeps no token granted beyond it) are refused with domain.CodeLogin.
func (p *Provider) AuthenticateBearer(ctx context.Context, token string) (*Bearer, error) {
	var user *domain.User
	ctx = context.WithValue(ctx, userReadKey{}, &user)
	use, ar, err := p.oauth2.IntrospectToken(ctx, token, fosite.AccessToken, emptySession())
	if err != nil || use != fosite.AccessToken {
		return nil, domain.Errorf(domain.CodeLogin, "the access token is invalid, expired or revoked")
	}
	if s, ok := ar.GetSession().(*session); ok && s.Organization != 0 {
		return &Bearer{Organization: s.Organization, ClientID: ar.GetClient().GetID(), Scopes: ar.GetGrantedScopes()}, nil
	}
	id, err := strconv.ParseInt(ar.GetSession().GetSubject(), 10, 64)
	if err != nil {
		return nil, domain.Errorf(domain.CodeLogin, "the access token has no user")
	}
	if !withinCeiling(ar.GetGrantedScopes(), ar.GetClient().GetScopes()) {
		return nil, domain.Errorf(domain.CodeLogin, "the access token's scopes are beyond what its client is registered for")
	}
	b := &Bearer{UserID: id, ClientID: ar.GetClient().GetID(), Scopes: ar.GetGrantedScopes()}
	if user != nil && user.ID == id {
		b.User = user
	}
	if s, ok := ar.GetSession().(*session); ok {
		b.Patient = s.LaunchPatient
	}
	return b, nil
}
