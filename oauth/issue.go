package oauth

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/ory/fosite"

	"exchange/domain"
)

// IssueAccessToken creates a bearer access token for the user, valid for
// ttl, and returns it: the tokens `exchange token create` prints for
// scripts. Its scopes (openid profile email) name no resource access, so
// it acts with the user's full access (ScriptScopes). It is stored and revocable like any
// other; it belongs to the built-in CLIClientID client, created on first
// use.
func (p *Provider) IssueAccessToken(ctx context.Context, userID int64, ttl time.Duration) (string, time.Time, error) {
	return p.IssueScopedAccessToken(ctx, userID, ttl, ScriptScopes, 0)
}

// ScriptScopes are the scopes of the tokens `exchange token create` prints
// by default.
var ScriptScopes = []string{domain.ScopeOpenID, domain.ScopeProfile, domain.ScopeEmail}

// IssueScopedAccessToken is IssueAccessToken with the scopes the token is
// granted (`exchange token create --scopes`): a script can hold a token
// that may only read Observations, say. patient is the token's patient
// context, which patient/ scopes reach: a patient user's is their own
// record (patient must be 0 or it); a practitioner's must be a patient
// they may read. Returns domain.CodeInvalid for a scope outside the
// vocabulary, or a practitioner's patient/ scopes without a patient.
func (p *Provider) IssueScopedAccessToken(ctx context.Context, userID int64, ttl time.Duration, scopes []string, patient int64) (string, time.Time, error) {
	if ttl <= 0 {
		return "", time.Time{}, domain.FieldErrorf("ttl", "must be positive")
	}
	if err := p.checkScopes(scopes); err != nil {
		return "", time.Time{}, err
	}
	if i := slices.IndexFunc(scopes, domain.IsSystemScope); i >= 0 {
		return "", time.Time{}, domain.FieldErrorf("scopes", "%q: system/ scopes are a backend client's; a user's token takes user/ scopes", scopes[i])
	}
	u, err := p.users.UserByID(ctx, userID)
	if err != nil {
		return "", time.Time{}, err
	}
	actor, err := p.users.Actor(ctx, userID)
	if err != nil {
		return "", time.Time{}, err
	}
	if patient, err = p.tokenPatient(ctx, actor, scopes, patient); err != nil {
		return "", time.Time{}, err
	}
	client, err := p.cliClient(ctx)
	if err != nil {
		return "", time.Time{}, err
	}
	expires := p.now().UTC().Add(ttl).Round(time.Second)
	token, err := p.issueToken(ctx, u, client, scopes, patient, expires)
	return token, expires, err
}

// issueToken creates a stored, revocable access token of the client for
// the user, granted the scopes with the patient context (0: none), valid
// until expires; no refresh token.
func (p *Provider) issueToken(ctx context.Context, u *domain.User, client *domain.OAuthClient, scopes []string, patient int64, expires time.Time) (string, error) {
	now := p.now().UTC()
	granted := fosite.Arguments(scopes)
	session := p.newSession(u, "", granted, now, now)
	session.LaunchPatient = patient
	session.SetExpiresAt(fosite.AccessToken, expires)
	req := fosite.NewAccessRequest(session)
	req.Client = fositeClient(client)
	req.RequestedAt = now
	for _, s := range granted {
		req.AppendRequestedScope(s)
		req.GrantScope(s)
	}
	req.GrantAudience(client.ID)
	token, signature, err := p.strategy.GenerateAccessToken(ctx, req)
	if err != nil {
		return "", err
	}
	return token, p.storage.CreateAccessTokenSession(ctx, signature, req.Sanitize(nil))
}

// tokenPatient checks the patient context asked for a command-line token.
func (p *Provider) tokenPatient(ctx context.Context, actor *domain.Actor, scopes []string, patient int64) (int64, error) {
	if actor.Patient != nil {
		if patient != 0 && patient != actor.Patient.ID {
			return 0, domain.FieldErrorf("patient", "a patient's token has their own record, Patient/%d, as its patient context", actor.Patient.ID)
		}
		return actor.Patient.ID, nil
	}
	if patient == 0 {
		if slices.ContainsFunc(scopes, func(s string) bool { return strings.HasPrefix(s, "patient/") }) {
			return 0, domain.FieldErrorf("patient", "patient/ scopes reach the token's patient context: name the patient")
		}
		return 0, nil
	}
	if _, err := p.users.PatientByID(ctx, actor, patient); err != nil {
		return 0, domain.FieldErrorf("patient", "Patient/%d is not a patient you may read", patient)
	}
	return patient, nil
}

func (p *Provider) cliClient(ctx context.Context) (*domain.OAuthClient, error) {
	c, err := p.store.OAuthClient(ctx, CLIClientID)
	if !domain.IsCode(err, domain.CodeNotFound) {
		return c, err
	}
	c = &domain.OAuthClient{ID: CLIClientID, Name: "exchange command line", Type: domain.ClientPublic,
		TokenEndpointAuthMethod: "none", Algorithm: "RS256", Scopes: domain.AllScopes}
	if err := p.store.CreateOAuthClient(ctx, c); err != nil && !domain.IsCode(err, domain.CodeDuplicate) {
		return nil, err
	}
	return c, nil
}

// invitationScopes are the scopes of a patient authorization code, as far
// as the client may request them.
var invitationScopes = []string{domain.ScopeOpenID, domain.ScopeProfile, domain.ScopeEmail, domain.ScopeOfflineAccess}

// invitationClient returns the client an invitation may be issued for:
// one that redeems authorization codes at a redirect URI. Returns
// domain.CodeNotFound for an unknown client and domain.CodeInvalid for
// one that cannot redeem codes.
func (p *Provider) invitationClient(ctx context.Context, clientID string) (*domain.OAuthClient, error) {
	if err := domain.LimitIdentifier.Check("clientId", clientID); err != nil {
		return nil, err
	}
	client, err := p.store.OAuthClient(ctx, clientID)
	if clientID == ConsoleClientID && domain.IsCode(err, domain.CodeNotFound) {
		// The console's client is built in: made on its first invitation,
		// whichever way that comes (the admin API, the console, the CLI).
		client, err = p.consoleClient(ctx)
	}
	if err != nil {
		return nil, err
	}
	if len(client.RedirectURIs) == 0 || !slices.Contains(client.GrantTypes, "authorization_code") {
		return nil, domain.Errorf(domain.CodeInvalid, "client %q cannot redeem authorization codes", clientID)
	}
	return client, nil
}

// PatientCode is an authorization code issued for a patient out of band.
type PatientCode struct {
	ClientID  string
	Code      string
	Link      string // the client's first redirect URI with the code: the invitation link
	ExpiresAt time.Time
}

// IssuePatientCode creates an authorization code for the patient user and
// the client, bound to the fixed patient PKCE challenge, valid for
// PATIENT_AUTHORIZATION_CODE_TTL and usable once. The client redeems it at
// /o/token/ with the matching verifier; ConsoleClientID's is redeemed in
// the console instead. The code stands only while the patient has no
// login (domain.User.HasLogin): callers check who may invite whom
// (domain.Service.Invite). Returns domain.CodeNotFound for an
// unknown client and domain.CodeInvalid for a client that cannot redeem it.
func (p *Provider) IssuePatientCode(ctx context.Context, userID int64, clientID string) (*PatientCode, error) {
	client, err := p.invitationClient(ctx, clientID)
	if err != nil {
		return nil, err
	}
	u, err := p.users.UserByID(ctx, userID)
	if err != nil {
		return nil, err
	}
	redirect, err := url.Parse(client.RedirectURIs[0])
	if err != nil {
		return nil, err
	}
	now := p.now().UTC()
	ar := fosite.NewAuthorizeRequest()
	ar.Client = fositeClient(client)
	ar.RedirectURI = redirect
	ar.ResponseTypes = fosite.Arguments{"code"}
	ar.RequestedAt = now
	ar.State = randomToken(16)
	// As with any code, the client redeems it with this redirect_uri.
	ar.Form = url.Values{
		"response_type":         {"code"},
		"client_id":             {clientID},
		"redirect_uri":          {redirect.String()},
		"code_challenge":        {p.patientChallenge},
		"code_challenge_method": {"S256"},
	}
	// The patient's app gets the identity scopes its client may request:
	// full access to the patient's own data, as the invitation promises;
	// a client registered for less gets the access it is registered for,
	// as full access would be beyond its registration (withinCeiling).
	var scopes []string
	for _, s := range invitationScopes {
		if domain.ScopeAllowed(client.Scopes, s) {
			scopes = append(scopes, s)
		}
	}
	if !withinCeiling(scopes, client.Scopes) {
		for _, s := range client.Scopes {
			if !fullAccess([]string{s}) {
				scopes = append(scopes, s)
			}
		}
	}
	for _, s := range scopes {
		ar.AppendRequestedScope(s)
		ar.GrantScope(s)
	}
	ar.Form.Set("scope", strings.Join(scopes, " "))
	ar.GrantAudience(clientID)
	ctx = context.WithValue(ctx, patientCodeKey{}, true)
	resp, err := p.oauth2.NewAuthorizeResponse(ctx, ar, p.newSession(u, "", ar.GetGrantedScopes(), now, now))
	if err != nil {
		return nil, fmt.Errorf("issue patient code: %w: %s", err, fosite.ErrorToRFC6749Error(err).GetDescription())
	}
	code := resp.GetCode()
	q := redirect.Query()
	q.Set("code", code)
	link := *redirect
	link.RawQuery = q.Encode()
	return &PatientCode{ClientID: clientID, Code: code, Link: link.String(), ExpiresAt: ar.GetSession().GetExpiresAt(fosite.AuthorizeCode)}, nil
}
