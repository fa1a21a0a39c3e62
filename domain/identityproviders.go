package domain

import (
	"context"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"time"
)

// The identity providers staff sign in with: those of
// IDENTITY_PROVIDERS_FILE (Config.IdentityProviders, read-only here) and
// those superusers configure through the admin API, whose client secrets
// are stored sealed (AES-GCM under a key derived from SECRET_KEY), so that
// whoever reads the database (an analyst in mongosh, a backup) does not
// read them.

// IdentityProviders returns every identity provider, with its client
// secret, the file's first: what the sign-in page offers and package oauth
// signs in with. Only the oauth package and superusers' use cases call it.
func (s *Service) IdentityProviders(ctx context.Context) ([]IdentityProvider, error) {
	stored, err := s.store.ListIdentityProviders(ctx)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(s.fileProviders)
	for _, p := range stored {
		if s.fileProvider(p.ID) != nil {
			continue // the file's wins: it was configured after
		}
		if err := s.openSecret(&p); err != nil {
			s.log.Error("an identity provider's client secret cannot be opened (was SECRET_KEY changed?)", "provider", p.ID)
		}
		out = append(out, p)
	}
	return out, nil
}

// IdentityProviderByID returns one provider with its client secret;
// CodeNotFound if there is none.
func (s *Service) IdentityProviderByID(ctx context.Context, id string) (*IdentityProvider, error) {
	if p := s.fileProvider(id); p != nil {
		c := *p
		return &c, nil
	}
	p, err := s.store.IdentityProviderByID(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := s.openSecret(p); err != nil {
		return nil, Errorf(CodeInternal, "the client secret of identity provider %q cannot be opened: was SECRET_KEY changed? Set the secret again", id)
	}
	return p, nil
}

func (s *Service) fileProvider(id string) *IdentityProvider {
	for i := range s.fileProviders {
		if s.fileProviders[i].ID == id {
			return &s.fileProviders[i]
		}
	}
	return nil
}

// IdentityProvidersOf returns the providers to a superuser, client secrets
// left out. Returns CodeForbidden for anyone else.
func (s *Service) IdentityProvidersOf(ctx context.Context, actor *Actor) ([]IdentityProvider, error) {
	if err := identityAdmin(actor); err != nil {
		return nil, err
	}
	ps, err := s.IdentityProviders(ctx)
	for i := range ps {
		ps[i].ClientSecretSet, ps[i].ClientSecret = ps[i].ClientSecret != "", ""
	}
	return ps, err
}

// IdentityProviderOf returns one provider to a superuser, its client
// secret left out.
func (s *Service) IdentityProviderOf(ctx context.Context, actor *Actor, id string) (*IdentityProvider, error) {
	if err := identityAdmin(actor); err != nil {
		return nil, err
	}
	p := s.fileProvider(id)
	if p != nil {
		c := *p
		p = &c
	} else {
		var err error
		if p, err = s.store.IdentityProviderByID(ctx, id); err != nil {
			return nil, err
		}
	}
	p.ClientSecretSet, p.ClientSecret = p.ClientSecret != "", ""
	return p, nil
}

func identityAdmin(actor *Actor) error {
	if !actor.IsSuperuser() {
		return Errorf(CodeForbidden, "only a superuser may configure identity providers")
	}
	return nil
}

// CreateIdentityProvider stores a new provider configured by a superuser.
// Returns CodeInvalid, or CodeDuplicate when the id is taken (in the file
// too).
func (s *Service) CreateIdentityProvider(ctx context.Context, actor *Actor, p IdentityProvider) (*IdentityProvider, error) {
	if err := identityAdmin(actor); err != nil {
		return nil, err
	}
	p.FromFile = false
	if err := p.Normalize(); err != nil {
		return nil, err
	}
	if s.fileProvider(p.ID) != nil {
		return nil, &Error{Code: CodeDuplicate, Field: "id", Message: "id: identity provider " + p.ID + " is configured in IDENTITY_PROVIDERS_FILE"}
	}
	stored, err := s.sealSecret(p)
	if err != nil {
		return nil, err
	}
	if err := s.store.CreateIdentityProvider(ctx, &stored); err != nil {
		return nil, err
	}
	p.LastUpdated, p.ClientSecretSet, p.ClientSecret = stored.LastUpdated, p.ClientSecret != "", ""
	return &p, nil
}

// UpdateIdentityProvider replaces a provider's configuration with p (its
// id unchanged); an empty client secret keeps the stored one. unchanged
// is the LastUpdated the change was made from (If-Match); nil: none.
// Providers of the file are read-only (CodeForbidden).
func (s *Service) UpdateIdentityProvider(ctx context.Context, actor *Actor, id string, p IdentityProvider, unchanged *time.Time) (*IdentityProvider, error) {
	if err := identityAdmin(actor); err != nil {
		return nil, err
	}
	if s.fileProvider(id) != nil {
		return nil, Errorf(CodeForbidden, "identity provider %s is configured in IDENTITY_PROVIDERS_FILE: change it there", id)
	}
	return applyAgain(func() (*IdentityProvider, error) {
		old, err := s.store.IdentityProviderByID(ctx, id)
		if err != nil {
			return nil, err
		}
		if err := checkUnchanged(unchanged, old.LastUpdated, "identity provider %s", id); err != nil {
			return nil, err
		}
		next := p
		next.ID, next.FromFile = id, false
		if err := next.Normalize(); err != nil {
			return nil, err
		}
		stored := next
		if next.ClientSecret == "" {
			stored.ClientSecret = old.ClientSecret // sealed already
		} else if stored, err = s.sealSecret(next); err != nil {
			return nil, err
		}
		if err := s.store.UpdateIdentityProvider(ctx, old, &stored); err != nil {
			return nil, err
		}
		next.LastUpdated, next.ClientSecretSet, next.ClientSecret = stored.LastUpdated, stored.ClientSecret != "", ""
		return &next, nil
	}, "identity provider %s", id)
}

// DeleteIdentityProvider removes a provider configured through the admin
// API, and its invitations. Accounts linked through it stay, and can sign
// in through it again if it is configured again with the same issuer.
func (s *Service) DeleteIdentityProvider(ctx context.Context, actor *Actor, id string) error {
	if err := identityAdmin(actor); err != nil {
		return err
	}
	if s.fileProvider(id) != nil {
		return Errorf(CodeForbidden, "identity provider %s is configured in IDENTITY_PROVIDERS_FILE: remove it there", id)
	}
	return s.store.DeleteIdentityProvider(ctx, id)
}

// InviteToIdentityProvider lets the first sign-in through the provider
// with this verified email address open the account of the address, or
// create it (see IdentityInvitation).
func (s *Service) InviteToIdentityProvider(ctx context.Context, actor *Actor, provider, email string) (*IdentityInvitation, error) {
	if err := identityAdmin(actor); err != nil {
		return nil, err
	}
	email, err := NormalizeEmail("email", email)
	if err != nil {
		return nil, err
	}
	p, err := s.IdentityProviderOf(ctx, actor, provider)
	if err != nil {
		return nil, err
	}
	if u, err := s.store.UserByEmail(ctx, email); err == nil && u.Type != UserPractitioner {
		return nil, FieldErrorf("email", "%s is a patient's account; identity providers are for staff", email)
	}
	inv := &IdentityInvitation{Provider: p.ID, Email: email, InvitedBy: actor.User.ID, Created: s.Now()}
	return inv, s.store.PutIdentityInvitation(ctx, inv)
}

// IdentityInvitationsOf lists a provider's invitations to a superuser.
func (s *Service) IdentityInvitationsOf(ctx context.Context, actor *Actor, provider string) ([]IdentityInvitation, error) {
	if _, err := s.IdentityProviderOf(ctx, actor, provider); err != nil {
		return nil, err
	}
	return s.store.IdentityInvitations(ctx, provider)
}

// CancelIdentityInvitation removes an invitation; CodeNotFound if there
// is none.
func (s *Service) CancelIdentityInvitation(ctx context.Context, actor *Actor, provider, email string) error {
	if err := identityAdmin(actor); err != nil {
		return err
	}
	return s.store.DeleteIdentityInvitation(ctx, provider, strings.ToLower(strings.TrimSpace(email)))
}

// sealedPrefix marks a sealed client secret.
const sealedPrefix = "sealed-v1:"

// sealSecret returns p with its client secret sealed.
func (s *Service) sealSecret(p IdentityProvider) (IdentityProvider, error) {
	if p.ClientSecret == "" {
		return p, nil
	}
	sealed, err := s.seal.Seal([]byte(p.ClientSecret), p.ID)
	if err != nil {
		return p, err
	}
	p.ClientSecret = sealedPrefix + base64.RawStdEncoding.EncodeToString(sealed)
	return p, nil
}

// openSecret opens p's sealed client secret in place; on failure the
// secret is left empty.
func (s *Service) openSecret(p *IdentityProvider) error {
	raw, ok := strings.CutPrefix(p.ClientSecret, sealedPrefix)
	if !ok {
		return nil
	}
	p.ClientSecret = ""
	sealed, err := base64.RawStdEncoding.DecodeString(raw)
	if err != nil {
		return errors.New("malformed sealed secret")
	}
	plain, err := s.seal.Open(sealed, p.ID)
	if err != nil {
		return err
	}
	p.ClientSecret = string(plain)
	return nil
}
