package handlers

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/gofiber/fiber/v2"

	"exchange/domain"
	"exchange/oauth"
)

// clientJSON is an OAuth client in the admin API. The secret appears only
// in the response that created it.
type clientJSON struct {
	ClientID               string   `json:"clientId"`
	ClientSecret           string   `json:"clientSecret,omitempty"`
	Name                   string   `json:"name"`
	ClientType             string   `json:"clientType"`
	AuthorizationGrantType string   `json:"authorizationGrantType"` // empty for the built-in command-line client
	RedirectURIs           []string `json:"redirectUris"`
	PostLogoutRedirectURIs []string `json:"postLogoutRedirectUris"`
	AllowedOrigins         []string `json:"allowedOrigins"`
	Algorithm              string   `json:"algorithm"`
	Scopes                 []string `json:"scopes"`
	// TokenEndpointAuthMethod is how the client authenticates: none (a
	// public client), or for a confidential client the method it is pinned
	// to when AuthMethodPinned, else either secret method.
	TokenEndpointAuthMethod string    `json:"tokenEndpointAuthMethod"`
	AuthMethodPinned        bool      `json:"authMethodPinned"`
	SkipAuthorization       bool      `json:"skipAuthorization"`
	UserID                  *int64    `json:"userId"`
	CreatedAt               time.Time `json:"createdAt"`
	// A backend client's public keys (its JWKS, or the URL they are
	// published at) and the practitioner or organization it acts for.
	JWKS                  json.RawMessage `json:"jwks,omitempty"`
	JWKSURL               string          `json:"jwksUrl,omitempty"`
	ActsForUserID         *int64          `json:"actsForUserId,omitempty"`
	ActsForOrganizationID *int64          `json:"actsForOrganizationId,omitempty"`
}

// newClientJSON is the body of POST /api/v1/oauth_clients.
type newClientJSON struct {
	Name                   string   `json:"name"`
	ClientType             string   `json:"clientType"`
	AuthorizationGrantType string   `json:"authorizationGrantType"`
	RedirectURIs           []string `json:"redirectUris"`
	PostLogoutRedirectURIs []string `json:"postLogoutRedirectUris"`
	AllowedOrigins         []string `json:"allowedOrigins"`
	Algorithm              string   `json:"algorithm"`
	SkipAuthorization      bool     `json:"skipAuthorization"`
	// Scopes the client may request; none: every scope.
	Scopes []string `json:"scopes"`
	// TokenEndpointAuthMethod pins a confidential client to
	// client_secret_basic or client_secret_post; none: either.
	TokenEndpointAuthMethod string `json:"tokenEndpointAuthMethod"`
	// A backend client (clientType backend): its JWKS (an object) or JWKS
	// URL, and the practitioner (user id) or organization it acts for.
	JWKS                  json.RawMessage `json:"jwks"`
	JWKSURL               string          `json:"jwksUrl"`
	ActsForUserID         int64           `json:"actsForUserId"`
	ActsForOrganizationID int64           `json:"actsForOrganizationId"`
}

func toClientJSON(c *domain.OAuthClient, secret string) clientJSON {
	out := clientJSON{ClientID: c.ID, ClientSecret: secret, Name: c.Name, ClientType: string(c.Type),
		RedirectURIs: c.RedirectURIs, PostLogoutRedirectURIs: c.PostLogoutRedirectURIs,
		AllowedOrigins: c.AllowedOrigins, Algorithm: c.Algorithm, Scopes: c.Scopes, TokenEndpointAuthMethod: c.TokenEndpointAuthMethod,
		AuthMethodPinned: c.AuthMethodPinned, SkipAuthorization: c.SkipAuthorization, CreatedAt: c.CreatedAt}
	if c.UserID != 0 {
		out.UserID = &c.UserID
	}
	if c.JWKS != "" {
		out.JWKS = json.RawMessage(c.JWKS)
	}
	out.JWKSURL = c.JWKSURL
	if c.ActsForUserID != 0 {
		out.ActsForUserID = &c.ActsForUserID
	}
	if c.ActsForOrganizationID != 0 {
		out.ActsForOrganizationID = &c.ActsForOrganizationID
	}
	switch {
	case slices.Contains(c.GrantTypes, "authorization_code"):
		out.AuthorizationGrantType = "authorization-code"
	case slices.Contains(c.GrantTypes, "client_credentials"):
		out.AuthorizationGrantType = "client-credentials"
	}
	return out
}

// createClient registers an OAuth client (staff and superusers).
func (s *server) createClient(c *fiber.Ctx) error {
	var in newClientJSON
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	if g := in.AuthorizationGrantType; g != "" && g != "authorization-code" && !(g == "client-credentials" && in.ClientType == string(domain.ClientBackend)) {
		return domain.FieldErrorf("authorizationGrantType", "authorization-code, or client-credentials for a backend client")
	}
	jwks := ""
	if len(in.JWKS) > 0 && string(in.JWKS) != "null" {
		jwks = string(in.JWKS)
	}
	client, secret, err := s.oauth.RegisterClientAs(c.UserContext(), actor(c), oauth.ClientRegistration{
		Name: in.Name, Type: domain.ClientType(in.ClientType), RedirectURIs: in.RedirectURIs,
		PostLogoutRedirectURIs: in.PostLogoutRedirectURIs, AllowedOrigins: in.AllowedOrigins,
		Algorithm: in.Algorithm, SkipAuthorization: in.SkipAuthorization, Scopes: in.Scopes,
		TokenEndpointAuthMethod: in.TokenEndpointAuthMethod,
		JWKS:                    jwks, JWKSURL: in.JWKSURL, ActsForUserID: in.ActsForUserID, ActsForOrganizationID: in.ActsForOrganizationID,
	})
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(toClientJSON(client, secret))
}

// listClients lists the OAuth clients the actor may see.
func (s *server) listClients(c *fiber.Ctx) error {
	clients, err := s.oauth.ClientsOf(c.UserContext(), actor(c))
	if err != nil {
		return err
	}
	return writeAll(c, clients, func(cl domain.OAuthClient) clientJSON { return toClientJSON(&cl, "") })
}
