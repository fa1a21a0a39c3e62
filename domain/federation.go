package domain

import (
	"context"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Federated sign-in: staff sign in through their institution's identity
// provider (OpenID Connect or SAML 2.0) instead of typing a password here.
// Package oauth runs the protocols and hands the identity a provider
// asserted to SignInFederated, which decides whose account that is:
//
//   - An account is found by the pair (issuer, subject) the provider
//     asserts, never by email alone: an email address is only as good as
//     the provider that vouches for it, and a provider that lets anyone
//     claim any address (or a second provider with addresses in the same
//     domain) would otherwise open every account with that address.
//   - An account that exists but is not linked yet is linked by its email
//     only when the provider's email is verified and either a superuser
//     invited that address to that provider, or the provider's
//     LinkVerifiedEmail switch (off by default) says its emails are to be
//     trusted for linking.
//   - A first sign-in without an account creates a practitioner who
//     belongs to no organization (FirstSignInCreate), or is refused unless
//     invited (FirstSignInInvited, the default).
//
// Every attempt, refused or not, is an AuditEvent of kind sign-in naming
// the identity provider.

// IdentityProviderKind is the protocol an identity provider speaks.
type IdentityProviderKind string

// The protocols.
const (
	IdentityOIDC IdentityProviderKind = "oidc"
	IdentitySAML IdentityProviderKind = "saml"
)

// FirstSignIn is what the first sign-in of an identity no account is
// linked to does.
type FirstSignIn string

// The first sign-in policies.
const (
	// FirstSignInCreate creates a practitioner without organizations: they
	// see nothing until a manager adds them to one.
	FirstSignInCreate FirstSignIn = "create"
	// FirstSignInInvited refuses the sign-in unless a superuser invited
	// the (verified) email address to the provider.
	FirstSignInInvited FirstSignIn = "invited"
)

// IdentityProvider is an institution's identity provider that staff may
// sign in with. Superusers configure them, in IDENTITY_PROVIDERS_FILE
// (FromFile: read-only here) or through the admin API.
type IdentityProvider struct {
	// ID names the provider in URLs (/o/login/{id}/): lower-case letters,
	// digits and '-'.
	ID   string
	Kind IdentityProviderKind
	// Name is what the sign-in button says: "Sign in with {Name}".
	Name string

	// OpenID Connect: the issuer (its configuration is discovered from
	// {Issuer}/.well-known/openid-configuration), this exchange's client
	// registration there, and the scopes asked for.
	Issuer       string
	ClientID     string
	ClientSecret string // never shown once stored
	Scopes       []string

	// SAML 2.0: the provider's metadata, from a URL or as the XML itself.
	MetadataURL string
	MetadataXML string

	// Claims names the claims (OpenID Connect) or attributes (SAML) that
	// carry the identity; empty names take the defaults of the protocol.
	Claims ClaimMap
	// AllowedEmailDomains, when not empty, admits only identities whose
	// verified email address is in one of these domains.
	AllowedEmailDomains []string
	FirstSignIn         FirstSignIn
	// LinkVerifiedEmail links an existing account to a first sign-in with
	// the same verified email address. Off by default: turn it on only for
	// a provider whose every email address belongs to the person signing
	// in (an institution's own directory).
	LinkVerifiedEmail bool

	FromFile    bool
	LastUpdated time.Time
	// ClientSecretSet says, where ClientSecret is left out (a superuser's
	// view), whether there is one.
	ClientSecretSet bool
}

// ClaimMap names where an identity's parts are asserted. For SAML, Subject
// names an attribute (eduPersonPrincipalName by default) or is "NameID": the
// persistent NameID of the assertion's subject; EmailVerified does not
// apply (an institution's directory asserts its own addresses).
type ClaimMap struct {
	Subject       string
	Email         string
	EmailVerified string
	GivenName     string
	FamilyName    string
}

// FederatedIdentity is who an identity provider says signed in.
type FederatedIdentity struct {
	// Issuer and Subject name the person for good: the OpenID Connect
	// issuer and sub, or the SAML entity id and stable user id.
	Issuer  string
	Subject string
	Email   string
	// EmailVerified: the provider vouches that the address is theirs.
	EmailVerified bool
	GivenName     string
	FamilyName    string
}

// IdentityLink ties an identity at a provider to an account here.
type IdentityLink struct {
	Issuer   string
	Subject  string
	Provider string // the IdentityProvider.ID it was made through
	UserID   int64
	Created  time.Time
}

// IdentityInvitation lets the first sign-in through a provider with a
// verified email address link the account of that address (or create it,
// when there is none), whatever the provider's policies.
type IdentityInvitation struct {
	Provider  string
	Email     string
	InvitedBy int64
	Created   time.Time
}

// FederationStore keeps identity providers configured through the admin
// API, the links between identities and accounts, and invitations.
type FederationStore interface {
	CreateIdentityProvider(ctx context.Context, p *IdentityProvider) error
	IdentityProviderByID(ctx context.Context, id string) (*IdentityProvider, error)
	ListIdentityProviders(ctx context.Context) ([]IdentityProvider, error)
	// UpdateIdentityProvider replaces the stored provider old with p (same
	// ID); CodeVersionMismatch, and nothing changed, if it is no longer old.
	UpdateIdentityProvider(ctx context.Context, old, p *IdentityProvider) error
	// DeleteIdentityProvider removes the provider and its invitations; the
	// links made through it stay (the accounts are still theirs).
	DeleteIdentityProvider(ctx context.Context, id string) error

	// IdentityLink returns the link of (issuer, subject); CodeNotFound.
	IdentityLink(ctx context.Context, issuer, subject string) (*IdentityLink, error)
	// CreateIdentityLink stores a link to an existing user; CodeDuplicate
	// if the identity is linked already.
	CreateIdentityLink(ctx context.Context, l *IdentityLink) error
	// CreateLinkedUser stores the link, then the user under the link's
	// user id (a new one when l.UserID is 0; u.ID and l.UserID are set).
	// Called again with the stored link of a create that was cut short, it
	// stores the user. CodeDuplicate (field email) if another user has the
	// email: the link it stored is removed again.
	CreateLinkedUser(ctx context.Context, u *User, l *IdentityLink) error
	// IdentityLinksOfUser returns the user's links.
	IdentityLinksOfUser(ctx context.Context, userID int64) ([]IdentityLink, error)

	// PutIdentityInvitation stores an invitation, replacing one of the same
	// provider and email.
	PutIdentityInvitation(ctx context.Context, inv *IdentityInvitation) error
	IdentityInvitation(ctx context.Context, provider, email string) (*IdentityInvitation, error)
	IdentityInvitations(ctx context.Context, provider string) ([]IdentityInvitation, error)
	// DeleteIdentityInvitation removes an invitation; a missing one is
	// CodeNotFound.
	DeleteIdentityInvitation(ctx context.Context, provider, email string) error

	// PractitionersByIdentifier returns up to limit active or inactive
	// practitioners whose Identifier is id, by id.
	PractitionersByIdentifier(ctx context.Context, id string, limit int) ([]User, error)
}

var identityProviderIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// DefaultOIDCScopes are the scopes asked of an OpenID Connect provider
// configured without any.
var DefaultOIDCScopes = []string{"openid", "email", "profile"}

// Normalize validates a provider's configuration and fills in its
// defaults. Returns CodeInvalid naming the field at fault.
func (p *IdentityProvider) Normalize() error {
	p.ID = strings.TrimSpace(p.ID)
	p.Name = strings.TrimSpace(p.Name)
	if !identityProviderIDPattern.MatchString(p.ID) {
		return FieldErrorf("id", "%q is not a provider id: 1 to 63 lower-case letters, digits and '-', starting with a letter or digit", p.ID)
	}
	if p.Name == "" {
		return FieldErrorf("name", "is required: the sign-in button says \"Sign in with\" it")
	}
	if err := LimitName.Check("name", p.Name); err != nil {
		return err
	}
	switch p.FirstSignIn {
	case "":
		p.FirstSignIn = FirstSignInInvited
	case FirstSignInCreate, FirstSignInInvited:
	default:
		return FieldErrorf("firstSignIn", "must be %q or %q", FirstSignInCreate, FirstSignInInvited)
	}
	if len(p.AllowedEmailDomains) > MaxListItems {
		return FieldErrorf("allowedEmailDomains", "has %d items; at most %d", len(p.AllowedEmailDomains), MaxListItems)
	}
	domains := []string{}
	for i, d := range p.AllowedEmailDomains {
		d = strings.ToLower(strings.TrimPrefix(strings.TrimSpace(d), "@"))
		if d == "" || strings.ContainsAny(d, "@/ ") || !strings.Contains(d, ".") || len(d) > 253 {
			return FieldErrorf("allowedEmailDomains["+strconv.Itoa(i)+"]", "%q is not a domain name", p.AllowedEmailDomains[i])
		}
		if !slices.Contains(domains, d) {
			domains = append(domains, d)
		}
	}
	p.AllowedEmailDomains = domains
	for field, v := range map[string]string{"claims.sub": p.Claims.Subject, "claims.email": p.Claims.Email,
		"claims.email_verified": p.Claims.EmailVerified, "claims.given_name": p.Claims.GivenName, "claims.family_name": p.Claims.FamilyName} {
		if err := LimitIdentifier.Check(field, v); err != nil {
			return err
		}
	}
	switch p.Kind {
	case IdentityOIDC:
		return p.normalizeOIDC()
	case IdentitySAML:
		return p.normalizeSAML()
	}
	return FieldErrorf("kind", "must be %q or %q", IdentityOIDC, IdentitySAML)
}

func (p *IdentityProvider) normalizeOIDC() error {
	p.Issuer = strings.TrimSpace(p.Issuer)
	if err := checkProviderURL("issuer", p.Issuer); err != nil {
		return err
	}
	if p.ClientID = strings.TrimSpace(p.ClientID); p.ClientID == "" {
		return FieldErrorf("clientId", "is required: this exchange's client id at the provider")
	}
	if err := LimitIdentifier.Check("clientId", p.ClientID); err != nil {
		return err
	}
	if err := LimitSecret.Check("clientSecret", p.ClientSecret); err != nil {
		return err
	}
	if len(p.Scopes) == 0 {
		p.Scopes = slices.Clone(DefaultOIDCScopes)
	}
	if err := LimitIdentifier.CheckAll("scopes", p.Scopes); err != nil {
		return err
	}
	if !slices.Contains(p.Scopes, "openid") {
		return FieldErrorf("scopes", "must include openid")
	}
	if p.MetadataURL != "" || p.MetadataXML != "" {
		return FieldErrorf("metadataUrl", "is for SAML providers; an OpenID Connect provider is discovered from its issuer")
	}
	return nil
}

func (p *IdentityProvider) normalizeSAML() error {
	p.MetadataURL = strings.TrimSpace(p.MetadataURL)
	if (p.MetadataURL == "") == (p.MetadataXML == "") {
		return FieldErrorf("metadataUrl", "give the provider's metadata: its URL (metadataUrl) or the XML itself (metadataXml), one of them")
	}
	if p.MetadataURL != "" {
		if err := checkProviderURL("metadataUrl", p.MetadataURL); err != nil {
			return err
		}
	}
	if len(p.MetadataXML) > 1<<20 {
		return FieldErrorf("metadataXml", "is larger than 1 MiB")
	}
	if p.Issuer != "" || p.ClientID != "" || p.ClientSecret != "" {
		return FieldErrorf("issuer", "issuer, clientId and clientSecret are for OpenID Connect providers")
	}
	if p.Claims.EmailVerified != "" {
		return FieldErrorf("claims.email_verified", "does not apply to SAML: the provider's addresses count as verified")
	}
	p.Scopes = nil
	return nil
}

// checkProviderURL accepts an https URL, or http on a loopback host (a
// provider on the same machine, in development and tests).
func checkProviderURL(field, raw string) error {
	if err := LimitURL.Check(field, raw); err != nil {
		return err
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return FieldErrorf(field, "%q is not an absolute URL without query or fragment", raw)
	}
	if u.Scheme == "https" || (u.Scheme == "http" && IsLoopbackHost(u.Hostname())) {
		return nil
	}
	return FieldErrorf(field, "%q must use https (http only on a loopback address)", raw)
}

// IsLoopbackHost reports whether a host name is this machine: localhost or
// a loopback address.
func IsLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// emailDomainAllowed reports whether the provider admits the address.
func (p *IdentityProvider) emailDomainAllowed(email string, verified bool) bool {
	if len(p.AllowedEmailDomains) == 0 {
		return true
	}
	if !verified {
		return false
	}
	at := strings.LastIndexByte(email, '@')
	return at >= 0 && slices.Contains(p.AllowedEmailDomains, email[at+1:])
}

// SignInFederated returns the account of an identity the provider
// asserted, linking or creating it as the provider's policies allow (see
// the top of this file), and records the attempt in the audit trail.
// Refusals are CodeLogin with a message for the person signing in.
func (s *Service) SignInFederated(ctx context.Context, p *IdentityProvider, id FederatedIdentity) (*User, error) {
	u, known, err := s.signInFederated(ctx, p, id)
	if u == nil {
		u = known
	}
	if err != nil {
		// The reason may quote the email address: the log names the
		// account instead, and the audit trail keeps the event.
		var user int64
		if u != nil {
			user = u.ID
		}
		s.log.Info("federated sign-in refused", "provider", p.ID, "code", ErrorCode(err), "user", user)
	}
	s.auditUserEvent(ctx, u, AuditKindSignIn, "", p.ID, err)
	return u, err
}

// FederatedSignInRefused records, in the audit trail and the log, a
// sign-in through the provider refused before it named anyone: its answer
// did not verify, or it did not answer.
func (s *Service) FederatedSignInRefused(ctx context.Context, p *IdentityProvider, err error) {
	s.log.Info("federated sign-in refused", "provider", p.ID, "reason", ErrorMessage(err))
	s.auditUserEvent(ctx, nil, AuditKindSignIn, "", p.ID, err)
}

// signInFederated decides SignInFederated; known is the account a refusal
// concerns, when there is one.
func (s *Service) signInFederated(ctx context.Context, p *IdentityProvider, id FederatedIdentity) (u, known *User, err error) {
	if id.Issuer == "" || id.Subject == "" {
		return nil, nil, Errorf(CodeLogin, "%s did not say who signed in (no stable user id)", p.Name)
	}
	email, err := NormalizeEmail("email", id.Email)
	if err != nil {
		email, id.EmailVerified = "", false
	}
	if !p.emailDomainAllowed(email, id.EmailVerified) {
		return nil, nil, Errorf(CodeLogin, "%s may sign in only people with a verified email address at %s", p.Name, strings.Join(p.AllowedEmailDomains, ", "))
	}
	link, err := s.store.IdentityLink(ctx, id.Issuer, id.Subject)
	switch {
	case err == nil:
		return s.linkedUser(ctx, p, id, email, link)
	case !IsCode(err, CodeNotFound):
		return nil, nil, err
	}
	var invitation *IdentityInvitation
	if email != "" && id.EmailVerified {
		if invitation, err = s.store.IdentityInvitation(ctx, p.ID, email); err != nil && !IsCode(err, CodeNotFound) {
			return nil, nil, err
		}
	}
	var existing *User
	if email != "" {
		if existing, err = s.store.UserByEmail(ctx, email); err != nil && !IsCode(err, CodeNotFound) {
			return nil, nil, err
		}
	}
	now := s.Now()
	link = &IdentityLink{Issuer: id.Issuer, Subject: id.Subject, Provider: p.ID, Created: now}
	switch {
	case existing != nil:
		if !id.EmailVerified || (invitation == nil && !p.LinkVerifiedEmail) {
			return nil, existing, Errorf(CodeLogin, "an account with the email address %s exists here, and signing in with %s does not open it: ask an administrator to invite this address to %s", email, p.Name, p.Name)
		}
		if err := signInAccount(existing); err != nil {
			return nil, existing, err
		}
		// An account linked to another subject of the same issuer stays
		// that subject's: an address the provider gave to someone new does
		// not open the old holder's account.
		links, err := s.store.IdentityLinksOfUser(ctx, existing.ID)
		if err != nil {
			return nil, existing, err
		}
		if slices.ContainsFunc(links, func(l IdentityLink) bool { return l.Issuer == id.Issuer && l.Subject != id.Subject }) {
			return nil, existing, Errorf(CodeLogin, "this account is linked to another %s identity: ask an administrator", p.Name)
		}
		link.UserID = existing.ID
		if err := s.store.CreateIdentityLink(ctx, link); err != nil && !IsCode(err, CodeDuplicate) {
			return nil, existing, err
		}
		u = existing
	case invitation == nil && p.FirstSignIn != FirstSignInCreate:
		return nil, nil, Errorf(CodeLogin, "you have no account here yet, and %s admits only people an administrator invited: ask one to invite your email address", p.Name)
	case email == "" || !id.EmailVerified:
		return nil, nil, Errorf(CodeLogin, "%s did not vouch for an email address of yours, which a new account here needs", p.Name)
	default:
		if u, err = s.createFederatedUser(ctx, id, email, link); err != nil {
			return nil, nil, err
		}
	}
	if invitation != nil {
		if err := s.store.DeleteIdentityInvitation(ctx, p.ID, email); err != nil && !IsCode(err, CodeNotFound) {
			s.log.Error("removing a used identity invitation failed", "provider", p.ID, "error", err)
		}
	}
	return u, nil, nil
}

// linkedUser returns the account of an identity's link. A link whose
// account is missing is the trace of a creation cut short: it is
// finished now.
func (s *Service) linkedUser(ctx context.Context, p *IdentityProvider, id FederatedIdentity, email string, link *IdentityLink) (u, known *User, err error) {
	if err := s.linkedThrough(ctx, p, link); err != nil {
		known, _ = s.store.UserByID(ctx, link.UserID)
		return nil, known, err
	}
	u, err = s.store.UserByID(ctx, link.UserID)
	if IsCode(err, CodeNotFound) {
		if email == "" || !id.EmailVerified {
			return nil, nil, Errorf(CodeLogin, "%s did not vouch for an email address of yours, which a new account here needs", p.Name)
		}
		u, err = s.createFederatedUser(ctx, id, email, link)
	}
	if err != nil {
		return nil, nil, err
	}
	if err := signInAccount(u); err != nil {
		return nil, u, err
	}
	return u, nil, nil
}

// linkedThrough refuses an answer of one provider that names an identity
// linked through another provider still configured here. The issuer of
// an answer is what its provider declares: a SAML provider's entity id is
// whatever its metadata says, so a provider configured from metadata its
// own operator controls could declare the entity id (or an OpenID Connect
// issuer) of another and assert the stable ids of the accounts linked
// through that one (identity provider mix-up). A link whose provider was
// removed is taken up by the provider it comes back through.
func (s *Service) linkedThrough(ctx context.Context, p *IdentityProvider, link *IdentityLink) error {
	if link.Provider == p.ID {
		return nil
	}
	other, err := s.IdentityProviderByID(ctx, link.Provider)
	if IsCode(err, CodeNotFound) {
		return nil
	}
	name := link.Provider
	if err == nil {
		name = other.Name
	}
	s.log.Warn("federated sign-in refused: the identity is linked through another provider", "provider", p.ID, "linked", link.Provider)
	return Errorf(CodeLogin, "this identity is linked to an account here through %s, not %s: sign in with %s", name, p.Name, name)
}

// signInAccount refuses accounts a federated sign-in may not open: an
// inactive one, and a patient's (identity providers are staff's way in;
// patients sign in with the password of their invitation).
func signInAccount(u *User) error {
	if !u.IsActive {
		return Errorf(CodeLogin, "this account is deactivated")
	}
	if u.Type != UserPractitioner {
		return Errorf(CodeLogin, "a patient's account cannot be opened through an institution's identity provider")
	}
	return nil
}

// createFederatedUser creates the practitioner of a first sign-in: no
// password, no organization. Sign-ins of the same identity racing it (a
// second tab, another instance) end with the one account: the one whose
// link was stored first, whose user is stored by whichever gets there.
func (s *Service) createFederatedUser(ctx context.Context, id FederatedIdentity, email string, link *IdentityLink) (*User, error) {
	for range createAttempts {
		u, err := s.newUser(NewUser{Email: email, FirstName: truncated(id.GivenName, LimitName.Max), LastName: truncated(id.FamilyName, LimitName.Max), Type: UserPractitioner})
		if err != nil {
			return nil, err
		}
		err = s.store.CreateLinkedUser(ctx, u, link)
		if !IsCode(err, CodeDuplicate) {
			return u, err
		}
		stored, lerr := s.store.IdentityLink(ctx, id.Issuer, id.Subject)
		if lerr != nil {
			break // the email is another account's
		}
		if again, uerr := s.store.UserByID(ctx, stored.UserID); uerr == nil {
			return again, nil
		}
		link = stored // its user is not stored yet: store it, under the link's id
	}
	return nil, Errorf(CodeLogin, "an account with the email address %s exists here; ask an administrator to invite this address", email)
}

// createAttempts bounds how often a first sign-in tries again after
// another sign-in of the same identity got there first.
const createAttempts = 3

// truncated cuts s to at most n characters: a provider's long name must
// not refuse the sign-in.
func truncated(s string, n int) string {
	s = strings.TrimSpace(s)
	if r := []rune(s); len(r) > n {
		return string(r[:n])
	}
	return s
}
