package oauth

import (
	"cmp"
	"context"
	"errors"
	"net/url"
	"slices"
	"time"

	"github.com/ory/fosite"

	"exchange/domain"
)

// ConsoleClientID is the built-in client of invitations to the web console:
// its codes are not redeemed by an app at /o/token/ but by the patient in
// the console, who sets a password there. Its redirect URI is the console's
// local invitation path, so IssuePatientCode gives a link relative to the
// origin, and no browser flow can ever use the client (fosite accepts only
// absolute redirect URIs); the token endpoint refuses it (clientauth.go).
const ConsoleClientID = "exchange-console"

// ConsoleInvitationPath is the console page an invitation of
// ConsoleClientID opens (with ?code=).
const ConsoleInvitationPath = "/console/invitation/"

// consoleClient returns the console's client, created on first use.
func (p *Provider) consoleClient(ctx context.Context) (*domain.OAuthClient, error) {
	c, err := p.store.OAuthClient(ctx, ConsoleClientID)
	if !domain.IsCode(err, domain.CodeNotFound) {
		return c, err
	}
	c = &domain.OAuthClient{ID: ConsoleClientID, Name: "Exchange web console", Type: domain.ClientPublic,
		RedirectURIs: []string{ConsoleInvitationPath}, GrantTypes: []string{"authorization_code"},
		TokenEndpointAuthMethod: "none", Algorithm: "RS256", Scopes: []string{"openid"}, CreatedAt: p.now().UTC()}
	if err := p.store.CreateOAuthClient(ctx, c); err != nil && !domain.IsCode(err, domain.CodeDuplicate) {
		return nil, err
	}
	return c, nil
}

// InvitationRequest asks for a new invitation (Provider.Invite).
type InvitationRequest struct {
	PatientID int64
	// ClientID is the app that redeems it; ConsoleClientID: the web
	// console, where the patient chooses a password.
	ClientID string
	// ReplaceLogin replaces the patient's login if they have one
	// (domain.Service.ReplaceLogin: managers only); else such a patient
	// is refused.
	ReplaceLogin bool
	// Origin is where patients' browsers reach the service: a console
	// invitation's link is a path on it.
	Origin string
}

// SentInvitation is a new invitation as its creator learns of it: its
// link only when the service has no delivery channel.
type SentInvitation struct {
	PatientID     int64
	ClientID      string
	ExpiresAt     time.Time
	LoginReplaced bool // the patient's login was replaced (ended) for it
	domain.InvitationDelivery
}

// Invite issues an invitation for the patient as the actor may
// (domain.Service.Invite: a patient without a login, or a manager's
// replacement of one) and delivers it (domain.Service.DeliverInvitation:
// by email when there is a channel, else the link back to its creator).
// The client is checked first, so that a wrong client id replaces no
// login. Returns domain.CodeNotFound for an unknown client or a patient
// the actor may not read, domain.CodeInvalid for a client that cannot
// redeem codes, and what Invite and DeliverInvitation return.
func (p *Provider) Invite(ctx context.Context, actor *domain.Actor, r InvitationRequest) (*SentInvitation, error) {
	if _, err := p.invitationClient(ctx, r.ClientID); err != nil {
		return nil, domain.AsFieldError(err, "clientId")
	}
	in, err := p.users.Invite(ctx, actor, r.PatientID, r.ReplaceLogin)
	if err != nil {
		return nil, err
	}
	return p.issueAndDeliver(ctx, actor, in, r.ClientID, r.Origin)
}

// Reinvite replaces a pending invitation of the patient with a new one for
// the same client, delivered as Invite delivers: a lost or leaked link
// stops working. The patient must still be one the actor may invite
// (a patient who has a login since is refused, CodeConflict). Returns
// domain.CodeNotFound if the patient has no such invitation.
func (p *Provider) Reinvite(ctx context.Context, actor *domain.Actor, patientID int64, id, origin string) (*SentInvitation, error) {
	in, err := p.users.Invite(ctx, actor, patientID, false)
	if err != nil {
		return nil, err
	}
	old, err := p.cancelInvitation(ctx, in.User.ID, id)
	if err != nil {
		return nil, err
	}
	return p.issueAndDeliver(ctx, actor, in, old.ClientID, origin)
}

// issueAndDeliver issues the invitee's code for the client and delivers
// its link, made on the service's public URL when it has one, else on
// the request's origin.
func (p *Provider) issueAndDeliver(ctx context.Context, actor *domain.Actor, in *domain.Invitee, clientID, origin string) (*SentInvitation, error) {
	origin = cmp.Or(p.publicURL, origin)
	code, err := p.IssuePatientCode(ctx, in.User.ID, clientID)
	if err != nil {
		return nil, domain.AsFieldError(err, "clientId")
	}
	d, err := p.users.DeliverInvitation(ctx, actor, in, AbsoluteLink(code.Link, origin), code.ExpiresAt)
	if err != nil {
		return nil, err
	}
	return &SentInvitation{PatientID: in.Patient.ID, ClientID: clientID, ExpiresAt: code.ExpiresAt, LoginReplaced: in.Replaced,
		InvitationDelivery: d}, nil
}

// CancelPatientInvitation withdraws an invitation of the patient, as an
// actor who may invite them (domain.Service.PatientForInvitation).
func (p *Provider) CancelPatientInvitation(ctx context.Context, actor *domain.Actor, patientID int64, id string) error {
	pt, err := p.users.PatientForInvitation(ctx, actor, patientID)
	if err != nil {
		return err
	}
	_, err = p.cancelInvitation(ctx, pt.UserID, id)
	return err
}

// Invitation is a patient authorization code issued out of band, as
// listed: the code itself is never kept, so a link is shown only when
// issued.
type Invitation struct {
	ID        string // the grant's request id: what cancels it
	UserID    int64
	ClientID  string
	IssuedAt  time.Time
	ExpiresAt time.Time
	Redeemed  bool // used by the app, or in the console (or cancelled by a replay)
}

// Pending reports whether the invitation can still be redeemed at now.
func (i Invitation) Pending(now time.Time) bool { return !i.Redeemed && now.Before(i.ExpiresAt) }

// Invitations lists the unexpired invitations of the users (patient user
// ids), oldest first. Callers check who may see them (domain).
func (p *Provider) Invitations(ctx context.Context, userIDs []int64) ([]Invitation, error) {
	if len(userIDs) == 0 {
		return nil, nil
	}
	tokens, err := p.store.Invitations(ctx, userIDs)
	if err != nil {
		return nil, err
	}
	now := p.now()
	var out []Invitation
	for _, t := range tokens {
		if now.Before(t.ExpiresAt) {
			out = append(out, Invitation{ID: t.RequestID, UserID: t.UserID, ClientID: t.ClientID, IssuedAt: t.IssuedAt,
				ExpiresAt: t.ExpiresAt, Redeemed: !t.Active})
		}
	}
	return out, nil
}

// cancelInvitation withdraws the user's invitation id and returns it: its
// code and the PKCE and OpenID Connect records beside it go, so the link
// no longer works. Returns domain.CodeNotFound if the user has no such
// invitation.
func (p *Provider) cancelInvitation(ctx context.Context, userID int64, id string) (*Invitation, error) {
	invitations, err := p.Invitations(ctx, []int64{userID})
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(invitations, func(i Invitation) bool { return i.ID == id })
	if i < 0 {
		return nil, domain.Errorf(domain.CodeNotFound, "invitation %q does not exist", id)
	}
	for _, kind := range []domain.OAuthTokenKind{domain.TokenAuthorizeCode, domain.TokenPKCE, domain.TokenOIDC} {
		if err := p.store.DeleteOAuthTokensOfRequest(ctx, kind, id); err != nil {
			return nil, err
		}
	}
	return &invitations[i], nil
}

// consoleInvitation authenticates a console invitation code: an unexpired
// invitation of ConsoleClientID whose HMAC is right, used or not.
func (p *Provider) consoleInvitation(ctx context.Context, code string) (*domain.OAuthToken, error) {
	signature := p.strategy.AuthorizeCodeSignature(ctx, code)
	t, err := p.store.OAuthToken(ctx, domain.TokenAuthorizeCode, signature)
	if domain.IsCode(err, domain.CodeNotFound) {
		return nil, domain.ErrInvitationGone
	}
	if err != nil {
		return nil, err
	}
	if !t.Invitation || t.ClientID != ConsoleClientID || !p.now().Before(t.ExpiresAt) {
		return nil, domain.ErrInvitationGone
	}
	req, err := p.storage.GetAuthorizeCodeSession(ctx, signature, emptySession())
	// A used code's record still comes, with the error that says so.
	if used := !t.Active && errors.Is(err, fosite.ErrInvalidatedAuthorizeCode); err != nil && !used || req == nil {
		return nil, domain.ErrInvitationGone
	}
	// The signature found the record; the whole code must match it too.
	if err := p.strategy.ValidateAuthorizeCode(ctx, req, code); err != nil && !fosite.ErrTokenExpired.Is(err) {
		return nil, domain.ErrInvitationGone
	}
	return t, nil
}

// ConsoleInvitationUser returns the user a console invitation code is for,
// without using it. Returns domain.CodeNotFound for a code that does not
// work (used, too).
func (p *Provider) ConsoleInvitationUser(ctx context.Context, code string) (int64, error) {
	t, err := p.consoleInvitation(ctx, code)
	if err != nil {
		return 0, err
	}
	if !t.Active {
		return 0, domain.ErrInvitationGone
	}
	return t.UserID, nil
}

// ConsoleInvitationCode authenticates a console invitation code for its
// redemption (domain.Service.AcceptInvitation, which uses it once). A
// used code is returned too, marked so: the retry of a redemption cut
// short finds its code used by itself. Returns domain.CodeNotFound for a
// code that is not a console invitation's, is tampered with or expired.
func (p *Provider) ConsoleInvitationCode(ctx context.Context, code string) (*domain.InvitationCode, error) {
	t, err := p.consoleInvitation(ctx, code)
	if err != nil {
		return nil, err
	}
	return &domain.InvitationCode{Signature: t.Signature, UserID: t.UserID, Used: !t.Active}, nil
}

// AbsoluteLink makes an invitation link absolute on the origin a request
// came to (a console invitation's link is a local path).
func AbsoluteLink(link, origin string) string {
	if u, err := url.Parse(link); err == nil && !u.IsAbs() {
		return origin + link
	}
	return link
}

// ClientName returns the name of a client an invitation is for, to show
// it; the id itself when the client is gone.
func (p *Provider) ClientName(ctx context.Context, id string) (string, error) {
	c, err := p.store.OAuthClient(ctx, id)
	if domain.IsCode(err, domain.CodeNotFound) {
		return id, nil
	}
	if err != nil {
		return "", err
	}
	return c.Name, nil
}
