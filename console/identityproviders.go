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
	return c.renderIdentityProviders(w, r, s, nil)
}

// renderIdentityProviders renders the sign-in page, with a form of it that
// was refused.
func (c *Console) renderIdentityProviders(w http.ResponseWriter, r *http.Request, s *session, form *formState) error {
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
	c.renderForm(w, r, s, http.StatusOK, "identity-providers.html", "Institutional sign-in", "sign-in", page, form)
	return nil
}

// The forms of the sign-in page: adding a provider (an id taken is about
// the id), and inviting an email address to one, or cancelling it.
var (
	newProviderForm = formSpec{name: "new-provider", fields: map[string]string{
		"id": "id", "name": "name", "issuer": "issuer", "clientId": "clientId", "clientSecret": "clientSecret", "scopes": "scopes",
		"metadataUrl": "metadataUrl", "allowedEmailDomains": "allowedEmailDomains", "firstSignIn": "firstSignIn", "kind": "kind"},
		unnamed: map[domain.Code]string{domain.CodeDuplicate: "id"}}
	providerInviteForm = formSpec{name: "provider-invite", fields: map[string]string{"email": "email"}, unnamed: map[domain.Code]string{domain.CodeDuplicate: "email"}}
	providerChangeForm = formSpec{name: "provider-change"}
)

// providerRefused answers a refused form of a provider's: the page again,
// the provider named in the form's state (its forms are one per provider).
func (c *Console) providerRefused(w http.ResponseWriter, r *http.Request, s *session, spec formSpec, err error) error {
	return spec.refused(r, err, func(form *formState) error {
		form.Values.Set("provider", r.PathValue("id"))
		return c.renderIdentityProviders(w, r, s, form)
	})
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
		r.PostForm.Del("clientSecret") // never shown again
		return newProviderForm.refused(r, err, func(form *formState) error { return c.renderIdentityProviders(w, r, s, form) })
	}
	return seeOther(w, r, "/console/identity-providers/", "created")
}

func (c *Console) removeIdentityProvider(w http.ResponseWriter, r *http.Request, s *session) error {
	if err := c.Service.DeleteIdentityProvider(r.Context(), s.actor, r.PathValue("id")); err != nil {
		return c.providerRefused(w, r, s, providerChangeForm, err)
	}
	return seeOther(w, r, "/console/identity-providers/", "removed")
}

func (c *Console) inviteToIdentityProvider(w http.ResponseWriter, r *http.Request, s *session) error {
	if _, err := c.Service.InviteToIdentityProvider(r.Context(), s.actor, r.PathValue("id"), r.PostFormValue("email")); err != nil {
		return c.providerRefused(w, r, s, providerInviteForm, err)
	}
	return seeOther(w, r, "/console/identity-providers/", "invited")
}

func (c *Console) cancelIdentityInvitation(w http.ResponseWriter, r *http.Request, s *session) error {
	if err := c.Service.CancelIdentityInvitation(r.Context(), s.actor, r.PathValue("id"), r.PostFormValue("email")); err != nil {
		return c.providerRefused(w, r, s, providerChangeForm, err)
	}
	return seeOther(w, r, "/console/identity-providers/", "removed")
}
