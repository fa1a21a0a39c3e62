package oauth

import (
	"context"
	"net/http"
	"net/url"

	"github.com/ory/fosite"

	"exchange/domain"
)

// Client authentication at the token, introspection and revocation
// endpoints, as discovery advertises it: a confidential client sends its
// secret with HTTP Basic (client_secret_basic) or in the form body
// (client_secret_post), either one unless its registration pins one; a
// public client sends only its client_id (none); a backend client a JWT
// assertion signed with its private key (private_key_jwt, backend.go).
// fosite's own strategy accepts only the one method a client names, and
// its introspection only HTTP Basic, so the provider decides here for all
// three endpoints.

// clientCredentials are the credentials of a request and how they came.
type clientCredentials struct {
	method     string // domain.AuthSecretBasic, AuthSecretPost or AuthNone
	id, secret string
}

// credentialsOf reads a request's client credentials: HTTP Basic (the
// RFC 6749 form-encoding undone), or client_id and client_secret in the
// body; never both.
func credentialsOf(r *http.Request, form url.Values) (clientCredentials, error) {
	if id, secret, ok := r.BasicAuth(); ok {
		if form.Get("client_secret") != "" {
			return clientCredentials{}, fosite.ErrInvalidRequest.WithHint("Authenticate with one method: HTTP Basic or client_secret in the body, not both.")
		}
		var err1, err2 error
		c := clientCredentials{method: domain.AuthSecretBasic}
		c.id, err1 = url.QueryUnescape(id)
		c.secret, err2 = url.QueryUnescape(secret)
		if err1 != nil || err2 != nil || c.id == "" {
			return clientCredentials{}, fosite.ErrInvalidClient.WithHint("The HTTP Basic credentials are not form-encoded client credentials.")
		}
		if c.secret == "" {
			c.method = domain.AuthNone
		}
		return c, nil
	}
	c := clientCredentials{method: domain.AuthSecretPost, id: form.Get("client_id"), secret: form.Get("client_secret")}
	if c.id == "" {
		return clientCredentials{}, fosite.ErrInvalidClient.WithHint("The client is not identified: send client_id, and a confidential client its secret.")
	}
	if c.secret == "" {
		c.method = domain.AuthNone
	}
	return c, nil
}

// authenticateClient is fosite's client authentication strategy: the
// client of the credentials, when they are its secret sent a way it
// accepts (domain.OAuthClient.AcceptsAuthMethod).
func (s *fositeStore) authenticateClient(ctx context.Context, r *http.Request, form url.Values) (fosite.Client, error) {
	if form.Get("client_assertion_type") != "" || form.Get("client_assertion") != "" {
		return s.authenticateAssertion(ctx, r, form) // a backend client (backend.go)
	}
	creds, err := credentialsOf(r, form)
	if err != nil {
		if c := s.refreshingPublicClient(ctx, r, form); c != nil {
			return fositeClient(c), nil
		}
		return nil, err
	}
	if creds.id == ConsoleClientID {
		// Its codes are console invitations, used where the patient
		// chooses a password: never exchanged for tokens, with whatever
		// verifier (the patient codes' one is a reference value by default).
		return nil, fosite.ErrInvalidClient.WithHint("The web console's invitations are used in the console, not at this endpoint.")
	}
	c, err := s.store.OAuthClient(ctx, creds.id)
	if domain.IsCode(err, domain.CodeNotFound) {
		return nil, fosite.ErrInvalidClient.WithHint("The client is not registered.")
	}
	if err != nil {
		return nil, fosite.ErrServerError.WithWrap(err)
	}
	if !c.AcceptsAuthMethod(creds.method) {
		if c.Type == domain.ClientBackend {
			return nil, fosite.ErrInvalidClient.WithHint("A backend client authenticates with a client assertion (private_key_jwt).")
		}
		if c.Type == domain.ClientPublic {
			return nil, fosite.ErrInvalidClient.WithHint("A public client sends no secret.")
		}
		return nil, fosite.ErrInvalidClient.WithHintf("The client authenticates with %s, not %s.", acceptedMethods(c), creds.method)
	}
	if c.Type == domain.ClientConfidential {
		if err := (secretHasher{}).Compare(ctx, []byte(c.SecretHash), []byte(creds.secret)); err != nil {
			return nil, fosite.ErrInvalidClient.WithHint("The client credentials are invalid.")
		}
	}
	return fositeClient(c), nil
}

func acceptedMethods(c *domain.OAuthClient) string {
	if c.AuthMethodPinned {
		return c.TokenEndpointAuthMethod
	}
	return domain.AuthSecretBasic + " or " + domain.AuthSecretPost
}

// refreshingPublicClient identifies the client of a refresh request that
// names none by its refresh token, when that client is public: RFC 6749
// asks a public client for no client_id when it refreshes, and standard
// SMART apps (fhirclient) send none. A public client's refresh token is
// all it holds anyway; a confidential client's still needs its secret.
func (s *fositeStore) refreshingPublicClient(ctx context.Context, r *http.Request, form url.Values) *domain.OAuthClient {
	token := form.Get("refresh_token")
	if form.Get("grant_type") != "refresh_token" || token == "" || form.Get("client_id") != "" || r.Header.Get("Authorization") != "" {
		return nil
	}
	t, err := s.store.OAuthToken(ctx, domain.TokenRefresh, s.refreshSignature(ctx, token))
	if err != nil {
		return nil
	}
	c, err := s.store.OAuthClient(ctx, t.ClientID)
	if err != nil || c.Type != domain.ClientPublic {
		return nil
	}
	return c
}
