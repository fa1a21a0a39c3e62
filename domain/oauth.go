package domain

import (
	"context"
	"time"
)

// ClientType is the OAuth 2.0 client type (RFC 6749 section 2.1).
type ClientType string

// The client types.
const (
	ClientConfidential ClientType = "confidential"
	ClientPublic       ClientType = "public"
	// ClientBackend is a SMART Backend Services client: a system that
	// signs in without a user (client_credentials), authenticating with a
	// JWT signed by its private key (private_key_jwt) whose public key it
	// registered (a JWKS, or a JWKS URL). It acts for one practitioner or
	// one organization, set at registration, and gets system/ scopes only.
	ClientBackend ClientType = "backend"
)

// OAuthClient is a registered OAuth 2.0 client. The secret of a confidential
// client is kept only as a hash; it is shown once, when generated.
type OAuthClient struct {
	ID                      string
	Name                    string
	Type                    ClientType
	SecretHash              string // empty for public clients
	RedirectURIs            []string
	PostLogoutRedirectURIs  []string
	AllowedOrigins          []string
	GrantTypes              []string // authorization_code, refresh_token
	Algorithm               string   // ID token signing algorithm: RS256
	Scopes                  []string // the scopes the client may request (see ScopeAllowed)
	TokenEndpointAuthMethod string   // client_secret_basic, client_secret_post or none
	// AuthMethodPinned: the confidential client authenticates only with
	// TokenEndpointAuthMethod, as registered explicitly; otherwise with
	// either client_secret_basic or client_secret_post.
	AuthMethodPinned  bool
	UserID            int64 // the user who registered it; 0 for the command line
	SkipAuthorization bool  // trusted: the consent page is skipped
	CreatedAt         time.Time
	LastUpdated       time.Time

	// A backend client's public keys: a JSON Web Key Set (JSON), or the
	// URL it is published at; exactly one is set.
	JWKS    string
	JWKSURL string
	// A backend client acts for one practitioner (ActsForUserID) or one
	// organization (ActsForOrganizationID): its tokens reach what that
	// practitioner may read, or what a viewer of that organization may.
	ActsForUserID         int64
	ActsForOrganizationID int64
}

// The ways a client authenticates at the token, introspection and
// revocation endpoints.
const (
	AuthSecretBasic = "client_secret_basic"
	AuthSecretPost  = "client_secret_post"
	AuthNone        = "none"
	// AuthPrivateKeyJWT is a backend client's: a JWT assertion signed
	// with its private key (RFC 7523, SMART client-confidential-asymmetric).
	AuthPrivateKeyJWT = "private_key_jwt"
)

// AcceptsAuthMethod reports whether the client may authenticate with the
// method: none for a public client, private_key_jwt for a backend one; for
// a confidential one, the method it is pinned to, or either secret method.
func (c *OAuthClient) AcceptsAuthMethod(method string) bool {
	switch {
	case c.Type == ClientPublic:
		return method == AuthNone
	case c.Type == ClientBackend:
		return method == AuthPrivateKeyJWT
	case c.AuthMethodPinned:
		return method == c.TokenEndpointAuthMethod
	default:
		return method == AuthSecretBasic || method == AuthSecretPost
	}
}

// OAuthTokenKind names what an OAuthToken record stands for.
type OAuthTokenKind string

// The kinds of OAuth records, one per fosite storage family.
const (
	TokenAuthorizeCode OAuthTokenKind = "authorize_code"
	TokenAccess        OAuthTokenKind = "access_token"
	TokenRefresh       OAuthTokenKind = "refresh_token"
	TokenPKCE          OAuthTokenKind = "pkce"
	TokenOIDC          OAuthTokenKind = "oidc"
)

// OAuthToken is the stored form of one OAuth grant artefact: an
// authorization code, an access or refresh token, or the PKCE and OpenID
// Connect request data tied to a code. It is found by (Kind, Signature);
// the token itself is never stored, only its signature.
type OAuthToken struct {
	Kind      OAuthTokenKind
	Signature string
	RequestID string // shared by every artefact of one grant, across refreshes
	ClientID  string
	UserID    int64
	Active    bool // false once used (codes, refresh tokens) or revoked
	// Pending: used by a token request that is not answered yet; a retry
	// of that request may use it again (package oauth, tokenwrites.go).
	Pending   bool
	IssuedAt  time.Time
	ExpiresAt time.Time // the sweeper deletes the record after this
	Request   []byte    // the serialized authorization request, owned by package oauth
	// Invitation marks an authorization code issued for a patient out of
	// band: an invitation link, which practitioners list and cancel.
	Invitation bool
}

// InvitationCode is an invitation code that package oauth authenticated,
// for its redemption (Service.AcceptInvitation). The code itself is not
// kept: its record is found by its signature.
type InvitationCode struct {
	Signature string // of the code's record (OAuthToken.Signature)
	UserID    int64
	Used      bool // no longer active: redeemed (perhaps by a redemption in progress), or revoked
}

// InvitationRedemption is a patient's use of an invitation code to choose
// a password, as the store records it before its first write.
type InvitationRedemption struct {
	ID           string // the store's record of it, set by RedeemInvitation
	Signature    string // the code's
	UserID       int64
	PasswordHash string    // the new password's (argon2id)
	At           time.Time // when the password changes: the user's CredentialsChangedAt
}

// LoginSession is a browser signed in at the exchange's login page. Its
// cookie carries a random value; the record is found by the value's hash,
// so the database never holds a usable cookie. Ending the record ends the
// session on every instance of the exchange at once.
type LoginSession struct {
	ID        string // hex SHA-256 of the cookie value
	UserID    int64
	AuthTime  time.Time // when the user typed their password
	LastUsed  time.Time // the last use recorded (at most every few minutes)
	ExpiresAt time.Time // when it ends unless used again; the sweeper deletes the record after this
}

// CheckBackendIdentity decides whether registrant may register a backend
// client acting for the practitioner userID or the organization
// organizationID (exactly one is set): the identity must exist, and the
// registrant must be able to give its access away. A practitioner
// registers a client acting as themselves, a manager one acting for their
// organization; a superuser (or the command line) either, for anyone. A
// client acting for a superuser reaches everything, so only a superuser
// may register one. Returns CodeInvalid naming the field, or
// CodeForbidden.
func (s *Service) CheckBackendIdentity(ctx context.Context, registrant *Actor, userID, organizationID int64) error {
	switch {
	case (userID == 0) == (organizationID == 0):
		return FieldErrorf("actsFor", "a backend client acts for exactly one practitioner (actsForUserId) or one organization (actsForOrganizationId)")
	case userID != 0:
		u, err := s.store.UserByID(ctx, userID)
		if IsCode(err, CodeNotFound) || (err == nil && (u.Type != UserPractitioner || !u.IsActive)) {
			return FieldErrorf("actsForUserId", "user %d is not an active practitioner", userID)
		}
		if err != nil {
			return err
		}
		if !registrant.IsSuperuser() && registrant.User.ID != userID {
			return Errorf(CodeForbidden, "a backend client may act for its registrant only, unless a superuser registers it")
		}
	default:
		if _, err := s.store.OrganizationByID(ctx, organizationID); IsCode(err, CodeNotFound) {
			return FieldErrorf("actsForOrganizationId", "organization %d does not exist", organizationID)
		} else if err != nil {
			return err
		}
		if !registrant.CanAdministerOrganization(organizationID) {
			return Errorf(CodeForbidden, "only a manager of organization %d (or a superuser) may register a backend client acting for it", organizationID)
		}
	}
	return nil
}

// PendingSignIn is a sign-in through an identity provider that the
// browser was sent to and has not come back from: what the way back is
// checked against. Every instance sharing the database can finish it;
// it is used once, and not after ExpiresAt.
type PendingSignIn struct {
	// ID is the hash of the state sent to the provider (OpenID Connect
	// state, SAML RelayState): the record holds no usable value.
	ID       string
	Provider string // the IdentityProvider.ID the browser was sent to
	// Browser is the hash of the value of a cookie set in the browser
	// that started the sign-in: only that browser may finish it.
	Browser string
	// Nonce and Verifier are OpenID Connect's nonce and PKCE code
	// verifier; RequestID is the id of the SAML AuthnRequest.
	Nonce     string
	Verifier  string
	RequestID string
	Next      string // the local path to go to after signing in
	ExpiresAt time.Time
	// UserID and AuthTime are set when the provider's answer was accepted
	// for that user (SAML: its answer is posted cross-site, where the
	// browser's cookie is not sent, and checked on the way back).
	UserID   int64
	AuthTime time.Time
}
