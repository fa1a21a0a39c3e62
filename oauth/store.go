package oauth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/ory/fosite"
	"github.com/ory/fosite/handler/oauth2"
	"github.com/ory/fosite/handler/openid"
	"github.com/ory/fosite/handler/pkce"

	"exchange/domain"
)

// Store is the persistence the provider needs; package repo implements it.
// Lookups return domain.CodeNotFound when nothing matches; creates return
// domain.CodeDuplicate when the key is taken.
type Store interface {
	CreateOAuthClient(ctx context.Context, c *domain.OAuthClient) error
	OAuthClient(ctx context.Context, id string) (*domain.OAuthClient, error)
	// UpdateOAuthClient replaces the stored client old with c (same id);
	// domain.CodeVersionMismatch, and nothing changed, if the stored
	// client is no longer old (another change came first).
	UpdateOAuthClient(ctx context.Context, old, c *domain.OAuthClient) error
	OAuthClients(ctx context.Context) ([]domain.OAuthClient, error)

	CreateOAuthToken(ctx context.Context, t *domain.OAuthToken) error
	OAuthToken(ctx context.Context, kind domain.OAuthTokenKind, signature string) (*domain.OAuthToken, error)
	DeactivateOAuthToken(ctx context.Context, kind domain.OAuthTokenKind, signature string) error
	DeactivateOAuthTokensOfRequest(ctx context.Context, kind domain.OAuthTokenKind, requestID string) error
	DeleteOAuthToken(ctx context.Context, kind domain.OAuthTokenKind, signature string) error
	DeleteOAuthTokensOfRequest(ctx context.Context, kind domain.OAuthTokenKind, requestID string) error
	// RetireOAuthTokens marks every record of a kind of the grant but
	// keep used and pending (tokenwrites.go); RetireOAuthToken one record.
	RetireOAuthTokens(ctx context.Context, kind domain.OAuthTokenKind, requestID, keep string) error
	RetireOAuthToken(ctx context.Context, kind domain.OAuthTokenKind, signature string) error
	// AnswerOAuthTokens ends the grant's token request: no record of it is
	// pending any more, and its PKCE and OpenID Connect records go.
	AnswerOAuthTokens(ctx context.Context, requestID string) error

	CreateLoginSession(ctx context.Context, s *domain.LoginSession) error
	LoginSession(ctx context.Context, id string) (*domain.LoginSession, error)
	// TouchLoginSession records a use; it never moves a session's last use
	// or end back, nor revives an ended session.
	TouchLoginSession(ctx context.Context, id string, lastUsed, expiresAt time.Time) error
	// DeleteLoginSession ends a session; a missing one is not an error.
	DeleteLoginSession(ctx context.Context, id string) error
	// Invitations returns the invitation codes of the users.
	Invitations(ctx context.Context, userIDs []int64) ([]domain.OAuthToken, error)

	// Sign-ins through identity providers in progress (federation.go),
	// each live until its ExpiresAt by now: CreatePendingSignIn stores
	// one; PendingSignIn reads it; TakePendingSignIn removes and returns
	// it, to one caller only; AcceptPendingSignIn records its user, once.
	// All but the create return CodeNotFound for none that is live.
	CreatePendingSignIn(ctx context.Context, p *domain.PendingSignIn) error
	PendingSignIn(ctx context.Context, id string, now time.Time) (*domain.PendingSignIn, error)
	TakePendingSignIn(ctx context.Context, id string, now time.Time) (*domain.PendingSignIn, error)
	AcceptPendingSignIn(ctx context.Context, id string, userID int64, authTime, now time.Time) error
	// UseAssertion records an assertion (a SAML assertion, a backend
	// client's signed JWT) as used until expiresAt; CodeDuplicate if it
	// was used already (on any instance).
	UseAssertion(ctx context.Context, key string, expiresAt, now time.Time) error
}

// fositeStore adapts Store to the storage interfaces of the fosite handlers
// the provider composes.
type fositeStore struct {
	store             Store
	users             Users
	refreshTokenLife  time.Duration
	authorizeCodeLife time.Duration
	// refreshSignature is the signature a refresh token is stored under.
	refreshSignature func(ctx context.Context, token string) string
	// fosite verifies backend clients' assertions (backend.go); now is
	// the provider's clock.
	fosite *fosite.Fosite
	now    func() time.Time
}

var (
	_ fosite.ClientManager               = (*fositeStore)(nil)
	_ oauth2.CoreStorage                 = (*fositeStore)(nil)
	_ oauth2.TokenRevocationStorage      = (*fositeStore)(nil)
	_ pkce.PKCERequestStorage            = (*fositeStore)(nil)
	_ openid.OpenIDConnectRequestStorage = (*fositeStore)(nil)
)

// storedRequest is the serialized form of a fosite.Requester. The form keeps
// only what fosite chose to keep (it sanitizes requests before storing).
type storedRequest struct {
	ID                string          `json:"id"`
	RequestedAt       time.Time       `json:"requestedAt"`
	ClientID          string          `json:"clientId"`
	RequestedScope    []string        `json:"requestedScope"`
	GrantedScope      []string        `json:"grantedScope"`
	RequestedAudience []string        `json:"requestedAudience"`
	GrantedAudience   []string        `json:"grantedAudience"`
	Form              url.Values      `json:"form"`
	Session           json.RawMessage `json:"session"`
}

// GetClient implements fosite.ClientManager. While a backend client's
// assertion is checked, the client signs with the assertion's algorithm
// (assertionAlgKey), one of those the profile accepts.
func (s *fositeStore) GetClient(ctx context.Context, id string) (fosite.Client, error) {
	c, err := s.store.OAuthClient(ctx, id)
	if domain.IsCode(err, domain.CodeNotFound) {
		return nil, fosite.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	fc := fositeClient(c)
	if alg, ok := ctx.Value(assertionAlgKey{}).(string); ok && c.Type == domain.ClientBackend {
		fc.TokenEndpointAuthSigningAlgorithm = alg
	}
	return fc, nil
}

func (s *fositeStore) create(ctx context.Context, kind domain.OAuthTokenKind, signature string, r fosite.Requester, expires time.Time) error {
	session, err := json.Marshal(r.GetSession())
	if err != nil {
		return err
	}
	payload, err := json.Marshal(storedRequest{
		ID: r.GetID(), RequestedAt: r.GetRequestedAt(), ClientID: r.GetClient().GetID(),
		RequestedScope: r.GetRequestedScopes(), GrantedScope: r.GetGrantedScopes(),
		RequestedAudience: r.GetRequestedAudience(), GrantedAudience: r.GetGrantedAudience(),
		Form: r.GetRequestForm(), Session: session,
	})
	if err != nil {
		return err
	}
	var userID int64
	if r.GetSession() != nil {
		userID, _ = strconv.ParseInt(r.GetSession().GetSubject(), 10, 64)
	}
	t := &domain.OAuthToken{
		Kind: kind, Signature: signature, RequestID: r.GetID(), ClientID: r.GetClient().GetID(), UserID: userID,
		Active: true, IssuedAt: time.Now().UTC(), ExpiresAt: expires, Request: payload,
		Invitation: kind == domain.TokenAuthorizeCode && ctx.Value(patientCodeKey{}) != nil,
	}
	if j := journalOf(ctx); j != nil {
		j.requestID = t.RequestID
		j.creates = append(j.creates, t)
		return nil
	}
	return s.store.CreateOAuthToken(ctx, t)
}

// get loads a record and rebuilds its request with the session decoded into
// the prototype fosite passes. An inactive record comes back with its
// request and the given inactive error, as fosite requires to detect reuse.
func (s *fositeStore) get(ctx context.Context, kind domain.OAuthTokenKind, signature string, session fosite.Session, inactive error) (fosite.Requester, error) {
	t, err := s.store.OAuthToken(ctx, kind, signature)
	if domain.IsCode(err, domain.CodeNotFound) {
		return nil, fosite.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	var sr storedRequest
	if err := json.Unmarshal(t.Request, &sr); err != nil {
		return nil, fmt.Errorf("decode stored %s: %w", kind, err)
	}
	client, err := s.GetClient(ctx, sr.ClientID)
	if err != nil {
		return nil, err
	}
	if session != nil {
		if err := json.Unmarshal(sr.Session, session); err != nil {
			return nil, fmt.Errorf("decode stored %s session: %w", kind, err)
		}
	}
	r := &fosite.Request{
		ID: sr.ID, RequestedAt: sr.RequestedAt, Client: client,
		RequestedScope: sr.RequestedScope, GrantedScope: sr.GrantedScope,
		RequestedAudience: sr.RequestedAudience, GrantedAudience: sr.GrantedAudience,
		Form: sr.Form, Session: session,
	}
	if !t.Active && !t.Pending {
		return r, inactive
	}
	if ok, err := s.stillSignedIn(ctx, t.UserID, session); err != nil || !ok {
		if err != nil {
			return nil, err
		}
		return r, inactive
	}
	// A pending code is the retry of its own redemption, whose answer was
	// lost: the login it gave the patient is this one.
	if t.Invitation && !t.Pending {
		if ok, err := s.invitationStands(ctx, t.UserID); err != nil || !ok {
			if err != nil {
				return nil, err
			}
			return r, inactive
		}
	}
	if t.Invitation {
		if redeemed, ok := ctx.Value(invitationRedeemKey{}).(*int64); ok {
			*redeemed = t.UserID
		}
	}
	return r, nil
}

// invitationStands reports whether an invitation code of the user may
// still be redeemed: only while the patient has no login
// (domain.User.HasLogin), so an invitation never takes over an account in
// use, and the first one redeemed ends the others.
func (s *fositeStore) invitationStands(ctx context.Context, userID int64) (bool, error) {
	u, err := s.users.UserByID(ctx, userID)
	if domain.IsCode(err, domain.CodeNotFound) {
		return false, nil
	}
	return err == nil && !u.HasLogin(), err
}

// invitationRedeemKey marks the context of a token request: get stores
// there (an *int64) the user of an invitation code the request redeems,
// whose patient then has a login (domain.Service.InvitationAccepted).
type invitationRedeemKey struct{}

// stillSignedIn reports whether the user of a grant still stands by the
// sign-in it came from (domain.User.StillSignedIn, against the sign-in time
// its ID token claims carry): a password change or deactivation voids
// every code and token of the user, even one stored after the change
// revoked the rest. A grant without a user is left to fosite.
func (s *fositeStore) stillSignedIn(ctx context.Context, userID int64, session fosite.Session) (bool, error) {
	claims, ok := session.(openid.Session)
	if userID == 0 || !ok || claims.IDTokenClaims() == nil {
		return true, nil
	}
	u, err := s.users.UserByID(ctx, userID)
	if domain.IsCode(err, domain.CodeNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if read, ok := ctx.Value(userReadKey{}).(**domain.User); ok {
		*read = u
	}
	return u.StillSignedIn(claims.IDTokenClaims().AuthTime), nil
}

// userReadKey marks a context whose caller wants the user stillSignedIn
// reads (a **domain.User to fill): AuthenticateBearer, whose caller makes
// the request's actor of it, so that a request reads its user once.
type userReadKey struct{}

func (s *fositeStore) deactivate(ctx context.Context, kind domain.OAuthTokenKind, signature string) error {
	err := s.store.DeactivateOAuthToken(ctx, kind, signature)
	if domain.IsCode(err, domain.CodeNotFound) {
		return fosite.ErrNotFound
	}
	return err
}

// expiry returns when a record of the request may be swept: the session's
// expiry for the token type, or fallback from now when the session has none.
func expiry(r fosite.Requester, t fosite.TokenType, fallback time.Duration) time.Time {
	if r.GetSession() != nil {
		if exp := r.GetSession().GetExpiresAt(t); !exp.IsZero() {
			return exp
		}
	}
	return time.Now().UTC().Add(fallback)
}

// CreateAuthorizeCodeSession implements oauth2.AuthorizeCodeStorage.
func (s *fositeStore) CreateAuthorizeCodeSession(ctx context.Context, signature string, r fosite.Requester) error {
	return s.create(ctx, domain.TokenAuthorizeCode, signature, r, expiry(r, fosite.AuthorizeCode, s.authorizeCodeLife))
}

// GetAuthorizeCodeSession implements oauth2.AuthorizeCodeStorage.
func (s *fositeStore) GetAuthorizeCodeSession(ctx context.Context, signature string, session fosite.Session) (fosite.Requester, error) {
	return s.get(ctx, domain.TokenAuthorizeCode, signature, session, fosite.ErrInvalidatedAuthorizeCode)
}

// InvalidateAuthorizeCodeSession implements oauth2.AuthorizeCodeStorage;
// in a token request, the journal retires the code last.
func (s *fositeStore) InvalidateAuthorizeCodeSession(ctx context.Context, signature string) error {
	if j := journalOf(ctx); j != nil {
		j.code = signature
		return nil
	}
	return s.deactivate(ctx, domain.TokenAuthorizeCode, signature)
}

// CreateAccessTokenSession implements oauth2.AccessTokenStorage.
func (s *fositeStore) CreateAccessTokenSession(ctx context.Context, signature string, r fosite.Requester) error {
	return s.create(ctx, domain.TokenAccess, signature, r, expiry(r, fosite.AccessToken, time.Hour))
}

// GetAccessTokenSession implements oauth2.AccessTokenStorage.
func (s *fositeStore) GetAccessTokenSession(ctx context.Context, signature string, session fosite.Session) (fosite.Requester, error) {
	return s.get(ctx, domain.TokenAccess, signature, session, fosite.ErrInactiveToken)
}

// DeleteAccessTokenSession implements oauth2.AccessTokenStorage.
func (s *fositeStore) DeleteAccessTokenSession(ctx context.Context, signature string) error {
	return s.store.DeleteOAuthToken(ctx, domain.TokenAccess, signature)
}

// CreateRefreshTokenSession implements oauth2.RefreshTokenStorage.
func (s *fositeStore) CreateRefreshTokenSession(ctx context.Context, signature, _ string, r fosite.Requester) error {
	return s.create(ctx, domain.TokenRefresh, signature, r, expiry(r, fosite.RefreshToken, s.refreshTokenLife))
}

// GetRefreshTokenSession implements oauth2.RefreshTokenStorage. A used or
// revoked refresh token comes back with fosite.ErrInactiveToken and its
// request, so fosite treats its reuse as theft and revokes the grant.
func (s *fositeStore) GetRefreshTokenSession(ctx context.Context, signature string, session fosite.Session) (fosite.Requester, error) {
	return s.get(ctx, domain.TokenRefresh, signature, session, fosite.ErrInactiveToken)
}

// DeleteRefreshTokenSession implements oauth2.RefreshTokenStorage.
func (s *fositeStore) DeleteRefreshTokenSession(ctx context.Context, signature string) error {
	return s.store.DeleteOAuthToken(ctx, domain.TokenRefresh, signature)
}

// RotateRefreshToken implements oauth2.RefreshTokenStorage: the used refresh
// token stays, inactive, so its reuse is detected; the access tokens issued
// with it go, before the new pair is stored. In a token request, the
// journal does both, in its order.
func (s *fositeStore) RotateRefreshToken(ctx context.Context, requestID, signature string) error {
	if j := journalOf(ctx); j != nil {
		j.requestID = requestID
		return nil
	}
	if err := s.deactivate(ctx, domain.TokenRefresh, signature); err != nil {
		return err
	}
	return s.store.DeleteOAuthTokensOfRequest(ctx, domain.TokenAccess, requestID)
}

// RevokeRefreshToken implements oauth2.TokenRevocationStorage.
func (s *fositeStore) RevokeRefreshToken(ctx context.Context, requestID string) error {
	return s.store.DeactivateOAuthTokensOfRequest(ctx, domain.TokenRefresh, requestID)
}

// RevokeAccessToken implements oauth2.TokenRevocationStorage.
func (s *fositeStore) RevokeAccessToken(ctx context.Context, requestID string) error {
	return s.store.DeleteOAuthTokensOfRequest(ctx, domain.TokenAccess, requestID)
}

// CreatePKCERequestSession implements pkce.PKCERequestStorage.
func (s *fositeStore) CreatePKCERequestSession(ctx context.Context, signature string, r fosite.Requester) error {
	return s.create(ctx, domain.TokenPKCE, signature, r, expiry(r, fosite.AuthorizeCode, s.authorizeCodeLife))
}

// GetPKCERequestSession implements pkce.PKCERequestStorage.
func (s *fositeStore) GetPKCERequestSession(ctx context.Context, signature string, session fosite.Session) (fosite.Requester, error) {
	return s.get(ctx, domain.TokenPKCE, signature, session, fosite.ErrNotFound)
}

// DeletePKCERequestSession implements pkce.PKCERequestStorage. fosite
// calls it before the code is exchanged; the record stays until the token
// request is answered (AnswerOAuthTokens), so that a retry of an exchange
// cut short still finds it. Without its code it serves nothing.
func (s *fositeStore) DeletePKCERequestSession(context.Context, string) error { return nil }

// fosite keys OpenID Connect sessions by the authorization code itself, not
// by its signature; only a hash of the code is stored.
func codeKey(code string) string {
	sum := sha256.Sum256([]byte(code))
	return hex.EncodeToString(sum[:])
}

// CreateOpenIDConnectSession implements openid.OpenIDConnectRequestStorage.
func (s *fositeStore) CreateOpenIDConnectSession(ctx context.Context, code string, r fosite.Requester) error {
	return s.create(ctx, domain.TokenOIDC, codeKey(code), r, expiry(r, fosite.AuthorizeCode, s.authorizeCodeLife))
}

// GetOpenIDConnectSession implements openid.OpenIDConnectRequestStorage.
func (s *fositeStore) GetOpenIDConnectSession(ctx context.Context, code string, r fosite.Requester) (fosite.Requester, error) {
	return s.get(ctx, domain.TokenOIDC, codeKey(code), r.GetSession(), fosite.ErrNotFound)
}

// DeleteOpenIDConnectSession implements openid.OpenIDConnectRequestStorage:
// as DeletePKCERequestSession, the record goes when the token request is
// answered.
func (s *fositeStore) DeleteOpenIDConnectSession(context.Context, string) error { return nil }
