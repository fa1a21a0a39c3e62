package console

import (
	"net/http"
	"strings"

	"exchange/domain"
)

// The sign-in page of the console: superusers see the identity providers
// staff sign in with (those of IDENTITY_PROVIDERS_FILE, read-only, and
// those added here), what to register at each, add and remove providers,
// and invite email addresses to them.

type identityProvidersPage struct {
	Providers []providerView
	Origin    string // this exchange's, for the URLs to register
}

// providerView is a provider with its invitations.
type providerView struct {
	domain.IdentityProvider
	Invitations []domain.IdentityInvitation
}

func (c *Console) identityProviders(w http.ResponseWriter, r *http.Request, s *session) error {
	ps, err := c.Service.IdentityProvidersOf(r.Context(), s.actor)
	if err != nil {
		return err
	}
	page := identityProvidersPage{Origin: c.OAuth.RequestOrigin(r)}
	for _, p := range ps {
		invs, err := c.Service.IdentityInvitationsOf(r.Context(), s.actor, p.ID)
		if err != nil {
			return err
		}
		page.Providers = append(page.Providers, providerView{IdentityProvider: p, Invitations: invs})
	}
	c.render(w, r, s, http.StatusOK, "identity-providers.html", "Institutional sign-in", "sign-in", page)
	return nil
}

// createIdentityProvider adds a provider from the form: OpenID Connect
// (issuer, client id and secret) or SAML (metadata URL).
func (c *Console) createIdentityProvider(w http.ResponseWriter, r *http.Request, s *session) error {
	f := r.PostFormValue
	p := domain.IdentityProvider{ID: f("id"), Kind: domain.IdentityProviderKind(f("kind")), Name: f("name"),
		FirstSignIn: domain.FirstSignIn(f("firstSignIn")), LinkVerifiedEmail: f("linkVerifiedEmail") == "1",
		AllowedEmailDomains: strings.Fields(strings.ReplaceAll(f("allowedEmailDomains"), ",", " "))}
	if p.Kind == domain.IdentityOIDC {
		p.Issuer, p.ClientID, p.ClientSecret, p.Scopes = f("issuer"), f("clientId"), f("clientSecret"), strings.Fields(f("scopes"))
	} else {
		p.MetadataURL = f("metadataUrl")
	}
	if _, err := c.Service.CreateIdentityProvider(r.Context(), s.actor, p); err != nil {
		return err
	}
	return seeOther(w, r, "/console/identity-providers/", "created")
}

func (c *Console) removeIdentityProvider(w http.ResponseWriter, r *http.Request, s *session) error {
	if err := c.Service.DeleteIdentityProvider(r.Context(), s.actor, r.PathValue("id")); err != nil {
		return err
	}
	return seeOther(w, r, "/console/identity-providers/", "removed")
}

func (c *Console) inviteToIdentityProvider(w http.ResponseWriter, r *http.Request, s *session) error {
	if _, err := c.Service.InviteToIdentityProvider(r.Context(), s.actor, r.PathValue("id"), r.PostFormValue("email")); err != nil {
		return err
	}
	return seeOther(w, r, "/console/identity-providers/", "invited")
}

func (c *Console) cancelIdentityInvitation(w http.ResponseWriter, r *http.Request, s *session) error {
	if err := c.Service.CancelIdentityInvitation(r.Context(), s.actor, r.PathValue("id"), r.PostFormValue("email")); err != nil {
		return err
	}
	return seeOther(w, r, "/console/identity-providers/", "removed")
}
