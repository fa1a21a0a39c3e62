package domain

import "time"

// ClientType is the OAuth 2.0 client type (RFC 6749 section 2.1).
type ClientType string

// The client types.
const (
	ClientConfidential ClientType = "confidential"
	ClientPublic       ClientType = "public"
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
}

// The ways a client authenticates at the token, introspection and
// revocation endpoints.
const (
	AuthSecretBasic = "client_secret_basic"
	AuthSecretPost  = "client_secret_post"
	AuthNone        = "none"
)

// AcceptsAuthMethod reports whether the client may authenticate with the
// method: none for a public client; for a confidential one, the method it
// is pinned to, or either secret method.
func (c *OAuthClient) AcceptsAuthMethod(method string) bool {
	switch {
	case c.Type == ClientPublic:
		return method == AuthNone
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
