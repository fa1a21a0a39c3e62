package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/gofiber/fiber/v2"

	"exchange/domain"
)

// Identity providers in the admin API, for superusers: the same JSON as
// an entry of IDENTITY_PROVIDERS_FILE (DecodeIdentityProviders). The
// client secret is written, never read back: clientSecretSet says whether
// there is one. The answers add what the provider needs to know of this
// exchange: the redirect URI to register (OpenID Connect) or the service
// provider's metadata URL (SAML).

// identityProviderJSON is an identity provider in the admin API and the
// settings file.
type identityProviderJSON struct {
	ID                  string     `json:"id"`
	Kind                string     `json:"kind"`
	Name                string     `json:"name"`
	Issuer              string     `json:"issuer,omitempty"`
	ClientID            string     `json:"clientId,omitempty"`
	ClientSecret        string     `json:"clientSecret,omitempty"`
	Scopes              []string   `json:"scopes,omitempty"`
	MetadataURL         string     `json:"metadataUrl,omitempty"`
	MetadataXML         string     `json:"metadataXml,omitempty"`
	Claims              claimsJSON `json:"claims"`
	AllowedEmailDomains []string   `json:"allowedEmailDomains"`
	FirstSignIn         string     `json:"firstSignIn"`
	LinkVerifiedEmail   bool       `json:"linkVerifiedEmail"`

	// Answers only.
	ClientSecretSet    bool       `json:"clientSecretSet"`
	Source             string     `json:"source,omitempty"` // "file" or "api"
	RedirectURI        string     `json:"redirectUri,omitempty"`
	ServiceProviderURL string     `json:"serviceProviderMetadataUrl,omitempty"`
	LastUpdated        *time.Time `json:"lastUpdated,omitempty"`
}

type claimsJSON struct {
	Subject       string `json:"sub,omitempty"`
	Email         string `json:"email,omitempty"`
	EmailVerified string `json:"email_verified,omitempty"`
	GivenName     string `json:"given_name,omitempty"`
	FamilyName    string `json:"family_name,omitempty"`
}

// provider is the configuration the JSON gives.
func (x identityProviderJSON) provider() domain.IdentityProvider {
	return domain.IdentityProvider{ID: x.ID, Kind: domain.IdentityProviderKind(x.Kind), Name: x.Name, Issuer: x.Issuer,
		ClientID: x.ClientID, ClientSecret: x.ClientSecret, Scopes: x.Scopes, MetadataURL: x.MetadataURL, MetadataXML: x.MetadataXML,
		Claims: domain.ClaimMap(x.Claims), AllowedEmailDomains: x.AllowedEmailDomains, FirstSignIn: domain.FirstSignIn(x.FirstSignIn),
		LinkVerifiedEmail: x.LinkVerifiedEmail}
}

// toIdentityProviderJSON answers a provider (its secret blanked by the
// domain) for the exchange at origin.
func toIdentityProviderJSON(p *domain.IdentityProvider, origin string) identityProviderJSON {
	x := identityProviderJSON{ID: p.ID, Kind: string(p.Kind), Name: p.Name, Issuer: p.Issuer, ClientID: p.ClientID, Scopes: p.Scopes,
		MetadataURL: p.MetadataURL, MetadataXML: p.MetadataXML, Claims: claimsJSON(p.Claims),
		AllowedEmailDomains: p.AllowedEmailDomains, FirstSignIn: string(p.FirstSignIn), LinkVerifiedEmail: p.LinkVerifiedEmail,
		ClientSecretSet: p.ClientSecretSet, Source: "api"}
	if x.AllowedEmailDomains == nil {
		x.AllowedEmailDomains = []string{}
	}
	if p.FromFile {
		x.Source = "file"
	} else {
		x.LastUpdated = &p.LastUpdated
	}
	if p.Kind == domain.IdentityOIDC {
		x.RedirectURI = origin + "/o/login/" + p.ID + "/callback"
	} else {
		x.ServiceProviderURL = origin + "/o/saml/" + p.ID + "/metadata"
	}
	return x
}

// DecodeIdentityProviders reads IDENTITY_PROVIDERS_FILE: a JSON array of
// identity providers, each checked (domain.IdentityProvider.Normalize).
// The error names the entry and field at fault.
func DecodeIdentityProviders(r io.Reader) ([]domain.IdentityProvider, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var in []identityProviderJSON
	if err := dec.Decode(&in); err != nil {
		return nil, errors.New("not a JSON array of identity providers: " + domain.ErrorMessage(jsonError(err)))
	}
	out := make([]domain.IdentityProvider, 0, len(in))
	seen := map[string]bool{}
	for i, x := range in {
		p := x.provider()
		if err := p.Normalize(); err != nil {
			return nil, errors.New("entry " + strconv.Itoa(i) + ": " + domain.ErrorMessage(err))
		}
		if seen[p.ID] {
			return nil, errors.New("entry " + strconv.Itoa(i) + ": id " + p.ID + " is given twice")
		}
		seen[p.ID] = true
		out = append(out, p)
	}
	return out, nil
}

// writeIdentityProvider answers one provider with its version as ETag.
func writeIdentityProvider(c *fiber.Ctx, p *domain.IdentityProvider) error {
	if !p.FromFile {
		c.Set(fiber.HeaderETag, etag(p.LastUpdated.UnixMilli()))
	}
	return c.JSON(toIdentityProviderJSON(p, origin(c)))
}

func (s *server) listIdentityProviders(c *fiber.Ctx) error {
	ps, err := s.service.IdentityProvidersOf(c.UserContext(), actor(c))
	if err != nil {
		return err
	}
	return writeAll(c, ps, func(p domain.IdentityProvider) identityProviderJSON { return toIdentityProviderJSON(&p, origin(c)) })
}

func (s *server) getIdentityProvider(c *fiber.Ctx) error {
	p, err := s.service.IdentityProviderOf(c.UserContext(), actor(c), c.Params("id"))
	if err != nil {
		return err
	}
	return writeIdentityProvider(c, p)
}

func (s *server) createIdentityProvider(c *fiber.Ctx) error {
	var in identityProviderJSON
	if err := decodeIdentityProviderJSON(c.Body(), &in); err != nil {
		return err
	}
	p, err := s.service.CreateIdentityProvider(c.UserContext(), actor(c), in.provider())
	if err != nil {
		return err
	}
	c.Status(fiber.StatusCreated)
	return writeIdentityProvider(c, p)
}

// updateIdentityProvider applies a JSON merge patch (RFC 7396) to the
// provider's configuration; with If-Match, only to the version it names.
// The client secret stays unless the patch gives one.
func (s *server) updateIdentityProvider(c *fiber.Ctx) error {
	ctx, id := c.UserContext(), c.Params("id")
	version, err := ifMatchVersion(c)
	if err != nil {
		return err
	}
	current, err := s.service.IdentityProviderOf(ctx, actor(c), id)
	if err != nil {
		return err
	}
	base, _ := json.Marshal(toIdentityProviderJSON(current, ""))
	if len(bytes.TrimSpace(c.Body())) == 0 || bytes.TrimSpace(c.Body())[0] != '{' {
		return domain.Errorf(domain.CodeInvalid, "the request body must be a JSON object (a merge patch)")
	}
	merged, err := jsonpatch.MergePatch(base, c.Body())
	if err != nil {
		return domain.Errorf(domain.CodeInvalid, "the request body is not a JSON merge patch")
	}
	var in identityProviderJSON
	if err := decodeIdentityProviderJSON(merged, &in); err != nil {
		return err
	}
	if in.ID != id {
		return domain.FieldErrorf("id", "cannot change; create another provider instead")
	}
	p, err := s.service.UpdateIdentityProvider(ctx, actor(c), id, in.provider(), version)
	if err != nil {
		return err
	}
	return writeIdentityProvider(c, p)
}

// decodeIdentityProviderJSON decodes a provider, ignoring the fields only
// answers carry (so that a patch of an answer applies).
func decodeIdentityProviderJSON(body []byte, x *identityProviderJSON) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return jsonError(err)
	}
	for _, answerOnly := range []string{"clientSecretSet", "source", "redirectUri", "serviceProviderMetadataUrl", "lastUpdated"} {
		delete(fields, answerOnly)
	}
	clean, _ := json.Marshal(fields)
	dec := json.NewDecoder(bytes.NewReader(clean))
	dec.DisallowUnknownFields()
	if err := dec.Decode(x); err != nil {
		return jsonError(err)
	}
	return nil
}

func (s *server) deleteIdentityProvider(c *fiber.Ctx) error {
	if err := s.service.DeleteIdentityProvider(c.UserContext(), actor(c), c.Params("id")); err != nil {
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}

// identityInvitationJSON is an invitation to sign in through a provider.
type identityInvitationJSON struct {
	Email     string    `json:"email"`
	InvitedBy int64     `json:"invitedBy"`
	Created   time.Time `json:"created"`
}

func toIdentityInvitationJSON(inv domain.IdentityInvitation) identityInvitationJSON {
	return identityInvitationJSON{Email: inv.Email, InvitedBy: inv.InvitedBy, Created: inv.Created}
}

func (s *server) listIdentityInvitations(c *fiber.Ctx) error {
	invs, err := s.service.IdentityInvitationsOf(c.UserContext(), actor(c), c.Params("id"))
	if err != nil {
		return err
	}
	return writeAll(c, invs, toIdentityInvitationJSON)
}

func (s *server) inviteToIdentityProvider(c *fiber.Ctx) error {
	var in struct {
		Email string `json:"email"`
	}
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	inv, err := s.service.InviteToIdentityProvider(c.UserContext(), actor(c), c.Params("id"), in.Email)
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(toIdentityInvitationJSON(*inv))
}

func (s *server) cancelIdentityInvitation(c *fiber.Ctx) error {
	email, err := url.PathUnescape(c.Params("email"))
	if err != nil || strings.TrimSpace(email) == "" {
		return domain.FieldErrorf("email", "is not an email address")
	}
	if err := s.service.CancelIdentityInvitation(c.UserContext(), actor(c), c.Params("id"), email); err != nil {
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}
