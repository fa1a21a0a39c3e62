package oauth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/url"
	"slices"
	"strings"

	"github.com/ory/fosite"

	"exchange/domain"
)

// GrantTypes are the grants a registered client may use.
var GrantTypes = []string{"authorization_code", "refresh_token"}

// CLIClientID is the built-in client that tokens printed by
// `exchange token create` belong to. It has no redirect URIs and no grants,
// so it can never take part in a browser flow.
const CLIClientID = "exchange-cli"

// GatewayScopes are the only scopes the MCP gateway's client is registered
// for (`exchange seed` registers it so, and repairs a wider registration):
// what its tools read, and nothing that writes. The client skips the
// consent page, and a trusted client obtains no scope beyond its
// registration (withinCeiling), so no edit of the link the gateway
// forwards can give a token through the gateway more than reading.
var GatewayScopes = []string{domain.ScopeOpenID, domain.ScopeProfile, domain.ScopeEmail, domain.ScopeOfflineAccess,
	domain.ScopeFHIRUser, "user/*.rs", domain.ScopeAdminRead}

// fositeClient presents a stored client to fosite: a backend client with
// its public keys (its JWKS, or the URL fosite fetches them from).
func fositeClient(c *domain.OAuthClient) *fosite.DefaultOpenIDConnectClient {
	if c.Type == domain.ClientBackend {
		fc := fositeClientOf(c)
		fc.JSONWebKeys, fc.JSONWebKeysURI = backendClientKeys(c), c.JWKSURL
		return fc
	}
	return fositeClientOf(c)
}

func fositeClientOf(c *domain.OAuthClient) *fosite.DefaultOpenIDConnectClient {
	return &fosite.DefaultOpenIDConnectClient{
		DefaultClient: &fosite.DefaultClient{
			ID:            c.ID,
			Secret:        []byte(c.SecretHash),
			RedirectURIs:  c.RedirectURIs,
			GrantTypes:    c.GrantTypes,
			ResponseTypes: []string{"code"},
			Scopes:        c.Scopes,
			// A client may hold tokens meant for itself: the audience the
			// introspection response reports.
			Audience: []string{c.ID},
			Public:   c.Type == domain.ClientPublic,
		},
		TokenEndpointAuthMethod: c.TokenEndpointAuthMethod,
	}
}

// ClientRegistration is the input of RegisterClient.
type ClientRegistration struct {
	ID                     string // optional; generated when empty
	Secret                 string // optional for confidential clients; generated when empty
	Name                   string
	Type                   domain.ClientType
	RedirectURIs           []string
	PostLogoutRedirectURIs []string
	AllowedOrigins         []string
	Algorithm              string // RS256, the only one offered; empty means RS256
	UserID                 int64
	SkipAuthorization      bool
	// TokenEndpointAuthMethod pins a confidential client to one way of
	// authenticating: client_secret_basic or client_secret_post. Empty: it
	// may use either.
	TokenEndpointAuthMethod string
	// Scopes the client may request; empty: every scope of the vocabulary
	// (domain.AllScopes), so that a standard SMART app works; for a
	// backend client, BackendScopes.
	Scopes []string
	// A backend client's public keys: a JSON Web Key Set, or the https URL
	// it is published at (one of them).
	JWKS    string
	JWKSURL string
	// The practitioner (a user id) or the organization a backend client
	// acts for: one of them.
	ActsForUserID         int64
	ActsForOrganizationID int64
}

// MinClientSecretLength is the shortest client secret accepted when an
// operator chooses one (generated secrets are 43 characters).
const MinClientSecretLength = 32

// RegisterClient validates and stores a new client. It returns the client
// and, for a confidential client, its secret in clear: the only time it is
// shown. Returns domain.CodeInvalid or domain.CodeDuplicate.
func (p *Provider) RegisterClient(ctx context.Context, in ClientRegistration) (*domain.OAuthClient, string, error) {
	return p.register(ctx, domain.SystemActor(), in)
}

// register stores a new client on behalf of registrant; a backend
// client's identity must be one the registrant may give its access to
// (domain.Service.CheckBackendIdentity).
func (p *Provider) register(ctx context.Context, registrant *domain.Actor, in ClientRegistration) (*domain.OAuthClient, string, error) {
	c, secret, err := p.newClient(in)
	if err != nil {
		return nil, "", err
	}
	if c.Type == domain.ClientBackend {
		if err := p.users.CheckBackendIdentity(ctx, registrant, c.ActsForUserID, c.ActsForOrganizationID); err != nil {
			return nil, "", err
		}
	}
	if err := p.store.CreateOAuthClient(ctx, c); err != nil {
		return nil, "", err
	}
	return c, secret, nil
}

// RegisterClientAs registers a client on behalf of an actor: staff and
// superusers may register clients, and only a superuser may mark one
// trusted (no consent page). Returns domain.CodeForbidden otherwise.
func (p *Provider) RegisterClientAs(ctx context.Context, actor *domain.Actor, in ClientRegistration) (*domain.OAuthClient, string, error) {
	if !actor.CanRegisterClients() {
		return nil, "", domain.Errorf(domain.CodeForbidden, "only staff members and superusers may register OAuth clients")
	}
	if in.SkipAuthorization && !actor.IsSuperuser() {
		return nil, "", domain.Errorf(domain.CodeForbidden, "only a superuser may register a trusted client")
	}
	in.UserID = actor.User.ID
	return p.register(ctx, actor, in)
}

// ClientsOf returns the clients an actor may see: all of them for a
// superuser, the ones they registered for staff. Returns
// domain.CodeForbidden for anyone else.
func (p *Provider) ClientsOf(ctx context.Context, actor *domain.Actor) ([]domain.OAuthClient, error) {
	if !actor.CanRegisterClients() {
		return nil, domain.Errorf(domain.CodeForbidden, "only staff members and superusers may list OAuth clients")
	}
	all, err := p.store.OAuthClients(ctx)
	if err != nil || actor.IsSuperuser() {
		return all, err
	}
	var mine []domain.OAuthClient
	for _, c := range all {
		if c.UserID == actor.User.ID {
			mine = append(mine, c)
		}
	}
	return mine, nil
}

// SaveClient creates the client, or replaces the registration of the client
// with the same id: how seed keeps the MCP gateway's client in step with
// the settings.
func (p *Provider) SaveClient(ctx context.Context, in ClientRegistration) (*domain.OAuthClient, error) {
	if in.ID == "" {
		return nil, domain.FieldErrorf("clientId", "is required")
	}
	c, _, err := p.newClient(in)
	if err != nil {
		return nil, err
	}
	old, err := p.store.OAuthClient(ctx, in.ID)
	switch {
	case domain.IsCode(err, domain.CodeNotFound):
		return c, p.store.CreateOAuthClient(ctx, c)
	case err != nil:
		return nil, err
	}
	c.CreatedAt = old.CreatedAt
	return c, clientChanged(p.store.UpdateOAuthClient(ctx, old, c), in.ID)
}

// RotateClientSecret replaces the secret of a confidential client with a
// new, generated one and returns it: a lost secret cannot be recovered.
func (p *Provider) RotateClientSecret(ctx context.Context, id string) (string, error) {
	c, err := p.store.OAuthClient(ctx, id)
	if err != nil {
		return "", err
	}
	if c.Type != domain.ClientConfidential {
		return "", domain.Errorf(domain.CodeInvalid, "client %q is %s and has no secret", id, c.Type)
	}
	old := *c
	secret := randomToken(32)
	c.SecretHash = hashSecret(secret)
	if err := clientChanged(p.store.UpdateOAuthClient(ctx, &old, c), id); err != nil {
		return "", err
	}
	return secret, nil
}

// clientChanged is the error of a client's update: CodeConflict when the
// client changed after it was read (another rotation, a seed saving its
// registration), so that neither change is lost unseen: the caller sends
// the change again against the client as it is now.
func clientChanged(err error, id string) error {
	if domain.IsCode(err, domain.CodeVersionMismatch) {
		return domain.Errorf(domain.CodeConflict, "client %q changed meanwhile; send the change again", id)
	}
	return err
}

// Clients returns every registered client.
func (p *Provider) Clients(ctx context.Context) ([]domain.OAuthClient, error) {
	return p.store.OAuthClients(ctx)
}

func (p *Provider) newClient(in ClientRegistration) (*domain.OAuthClient, string, error) {
	if err := checkClientLimits(in); err != nil {
		return nil, "", err
	}
	c := &domain.OAuthClient{
		ID:                     strings.TrimSpace(in.ID),
		Name:                   strings.TrimSpace(in.Name),
		Type:                   in.Type,
		RedirectURIs:           trimmed(in.RedirectURIs),
		PostLogoutRedirectURIs: trimmed(in.PostLogoutRedirectURIs),
		AllowedOrigins:         trimmed(in.AllowedOrigins),
		GrantTypes:             GrantTypes,
		Algorithm:              "RS256",
		Scopes:                 trimmed(in.Scopes),
		UserID:                 in.UserID,
		SkipAuthorization:      in.SkipAuthorization,
	}
	if c.ID == "" {
		c.ID = randomToken(24)
	}
	if c.Name == "" {
		return nil, "", domain.FieldErrorf("name", "is required")
	}
	if in.Algorithm != "" && in.Algorithm != "RS256" {
		return nil, "", domain.FieldErrorf("algorithm", "only RS256 is supported")
	}
	if err := p.checkScopes(c.Scopes); err != nil {
		return nil, "", err
	}
	if c.Type == domain.ClientBackend {
		return c, "", checkBackendRegistration(c, in)
	}
	if in.JWKS != "" || in.JWKSURL != "" || in.ActsForUserID != 0 || in.ActsForOrganizationID != 0 {
		return nil, "", domain.FieldErrorf("clientType", "public keys and an identity to act for are a backend client's")
	}
	if len(c.Scopes) == 0 {
		c.Scopes = domain.AllScopes
	} else if i := slices.IndexFunc(c.Scopes, domain.IsSystemScope); i >= 0 {
		return nil, "", domain.FieldErrorf("scopes", "%q: system/ scopes are a backend client's (client type backend)", c.Scopes[i])
	}
	if len(c.RedirectURIs) == 0 {
		return nil, "", domain.FieldErrorf("redirectUris", "at least one redirect URI is required for the authorization code grant")
	}
	for _, list := range []struct {
		field string
		uris  []string
	}{{"redirectUris", c.RedirectURIs}, {"postLogoutRedirectUris", c.PostLogoutRedirectURIs}} {
		for _, u := range list.uris {
			if err := checkRedirectURI(list.field, u); err != nil {
				return nil, "", err
			}
		}
	}
	for _, o := range c.AllowedOrigins {
		if u, err := url.Parse(o); err != nil || u.Scheme == "" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return nil, "", domain.FieldErrorf("allowedOrigins", "%q is not an origin (scheme://host[:port])", o)
		}
	}
	secret := ""
	switch c.Type {
	case domain.ClientPublic:
		if in.Secret != "" {
			return nil, "", domain.FieldErrorf("clientSecret", "a public client has no secret")
		}
		if m := in.TokenEndpointAuthMethod; m != "" && m != domain.AuthNone {
			return nil, "", domain.FieldErrorf("tokenEndpointAuthMethod", "a public client authenticates with none, not %s", m)
		}
		c.TokenEndpointAuthMethod = domain.AuthNone
	case domain.ClientConfidential:
		secret = in.Secret
		if secret == "" {
			secret = randomToken(32)
		} else if len(secret) < MinClientSecretLength {
			return nil, "", domain.FieldErrorf("clientSecret", "must be at least %d characters", MinClientSecretLength)
		}
		c.SecretHash = hashSecret(secret)
		// Either secret method works unless the registration names one.
		c.TokenEndpointAuthMethod, c.AuthMethodPinned = in.TokenEndpointAuthMethod, in.TokenEndpointAuthMethod != ""
		if !c.AuthMethodPinned {
			c.TokenEndpointAuthMethod = domain.AuthSecretBasic
		}
		if c.TokenEndpointAuthMethod != domain.AuthSecretBasic && c.TokenEndpointAuthMethod != domain.AuthSecretPost {
			return nil, "", domain.FieldErrorf("tokenEndpointAuthMethod", "must be %s or %s", domain.AuthSecretBasic, domain.AuthSecretPost)
		}
	default:
		return nil, "", domain.FieldErrorf("clientType", "must be %q, %q or %q", domain.ClientConfidential, domain.ClientPublic, domain.ClientBackend)
	}
	return c, secret, nil
}

// checkClientLimits holds a registration to the service's bounds on
// stored text (domain.LimitName, ...), before anything reads or quotes its
// values.
func checkClientLimits(in ClientRegistration) error {
	if err := domain.LimitIdentifier.Check("clientId", in.ID); err != nil {
		return err
	}
	if err := domain.LimitSecret.Check("clientSecret", in.Secret); err != nil {
		return err
	}
	if err := domain.LimitName.Check("name", in.Name); err != nil {
		return err
	}
	if err := domain.LimitIdentifier.CheckAll("scopes", in.Scopes); err != nil {
		return err
	}
	for _, list := range []struct {
		field string
		uris  []string
	}{{"redirectUris", in.RedirectURIs}, {"postLogoutRedirectUris", in.PostLogoutRedirectURIs}, {"allowedOrigins", in.AllowedOrigins}} {
		if err := domain.LimitURL.CheckAll(list.field, list.uris); err != nil {
			return err
		}
	}
	return nil
}

// checkRedirectURI accepts absolute URIs without a fragment that are https,
// http on a loopback host, or a private-use scheme of a native app.
func checkRedirectURI(field, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Fragment != "" || (u.Host == "" && (u.Scheme == "http" || u.Scheme == "https")) {
		return domain.FieldErrorf(field, "%q is not an absolute URI without a fragment", raw)
	}
	if !fosite.IsRedirectURISecure(context.Background(), u) {
		return domain.FieldErrorf(field, "%q uses http on a host that is not loopback; use https", raw)
	}
	return nil
}

func trimmed(ss []string) []string {
	out := []string{}
	for _, s := range ss {
		if s = strings.TrimSpace(s); s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// randomToken returns n random bytes, base64url-encoded.
func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Client secrets are generated with 256 bits of entropy (or, when an
// operator sets one, at least 32 characters), so a plain SHA-256 resists
// guessing as well as a slow hash would, and keeps the token endpoint and
// the gateway's frequent introspection calls cheap.
const secretHashPrefix = "sha256$"

func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return secretHashPrefix + hex.EncodeToString(sum[:])
}

// secretHasher is fosite's view of hashSecret.
type secretHasher struct{}

func (secretHasher) Hash(_ context.Context, data []byte) ([]byte, error) {
	return []byte(hashSecret(string(data))), nil
}

func (secretHasher) Compare(_ context.Context, hash, data []byte) error {
	if len(hash) == 0 || subtle.ConstantTimeCompare(hash, []byte(hashSecret(string(data)))) != 1 {
		return errors.New("client secret mismatch")
	}
	return nil
}

// RotateClientSecretAs replaces a client's secret on behalf of an actor: a
// superuser, or the staff member who registered it. Returns
// domain.CodeForbidden otherwise (also for a client the actor may not see,
// as ClientsOf would not list it), domain.CodeNotFound for no such client.
func (p *Provider) RotateClientSecretAs(ctx context.Context, actor *domain.Actor, id string) (string, error) {
	if !actor.CanRegisterClients() {
		return "", domain.Errorf(domain.CodeForbidden, "only staff members and superusers may rotate client secrets")
	}
	c, err := p.store.OAuthClient(ctx, id)
	if err != nil {
		return "", err
	}
	if !actor.IsSuperuser() && c.UserID != actor.User.ID {
		return "", domain.Errorf(domain.CodeForbidden, "only a superuser or the staff member who registered client %q may rotate its secret", id)
	}
	return p.RotateClientSecret(ctx, id)
}
