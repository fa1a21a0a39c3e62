package oauth_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/oauth"
	"exchange/repo/repotest"
)

func TestClientRegistrationValidation(t *testing.T) {
	env := handlerstest.Start(t)
	ctx := context.Background()
	ok := oauth.ClientRegistration{Name: "App", Type: domain.ClientConfidential, RedirectURIs: []string{"https://app.example.org/cb"}}
	for _, tc := range []struct {
		name  string
		edit  func(*oauth.ClientRegistration)
		field string // the field the error names; empty: accepted
	}{
		{"valid confidential", func(*oauth.ClientRegistration) {}, ""},
		{"valid public on loopback", func(r *oauth.ClientRegistration) {
			r.Type = domain.ClientPublic
			r.RedirectURIs = []string{"http://127.0.0.1:8765/cb", "http://localhost/cb"}
		}, ""},
		{"native app scheme", func(r *oauth.ClientRegistration) { r.RedirectURIs = []string{"org.example.app:/callback"} }, ""},
		{"no name", func(r *oauth.ClientRegistration) { r.Name = " " }, "name"},
		{"unknown type", func(r *oauth.ClientRegistration) { r.Type = "secretive" }, "clientType"},
		{"no redirect URI", func(r *oauth.ClientRegistration) { r.RedirectURIs = nil }, "redirectUris"},
		{"http elsewhere", func(r *oauth.ClientRegistration) { r.RedirectURIs = []string{"http://app.example.org/cb"} }, "redirectUris"},
		{"fragment", func(r *oauth.ClientRegistration) { r.RedirectURIs = []string{"https://app.example.org/cb#x"} }, "redirectUris"},
		{"relative", func(r *oauth.ClientRegistration) { r.RedirectURIs = []string{"/cb"} }, "redirectUris"},
		{"bad logout URI", func(r *oauth.ClientRegistration) { r.PostLogoutRedirectURIs = []string{"nonsense"} }, "postLogoutRedirectUris"},
		{"origin with a path", func(r *oauth.ClientRegistration) { r.AllowedOrigins = []string{"https://app.example.org/x"} }, "allowedOrigins"},
		{"HS256", func(r *oauth.ClientRegistration) { r.Algorithm = "HS256" }, "algorithm"},
		{"short secret", func(r *oauth.ClientRegistration) { r.Secret = "short" }, "clientSecret"},
		{"public with a secret", func(r *oauth.ClientRegistration) {
			r.Type = domain.ClientPublic
			r.Secret = strings.Repeat("s", 40)
		}, "clientSecret"},
		{"unknown auth method", func(r *oauth.ClientRegistration) { r.TokenEndpointAuthMethod = "private_key_jwt" }, "tokenEndpointAuthMethod"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := ok
			reg.RedirectURIs = append([]string(nil), ok.RedirectURIs...)
			tc.edit(&reg)
			c, secret, err := env.OAuth.RegisterClient(ctx, reg)
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				confidential := reg.Type == domain.ClientConfidential
				if confidential != (secret != "") || confidential != (c.SecretHash != "") || (confidential && strings.Contains(c.SecretHash, secret)) {
					t.Errorf("secret %q, hash %q", secret, c.SecretHash)
				}
				return
			}
			var de *domain.Error
			if !domain.IsCode(err, domain.CodeInvalid) || !errors.As(err, &de) || de.Field != tc.field {
				t.Fatalf("got %v, want an invalid %s", err, tc.field)
			}
		})
	}
	reg := ok
	reg.ID = "fixed-id"
	if _, _, err := env.OAuth.RegisterClient(ctx, reg); err != nil {
		t.Fatal(err)
	}
	if _, _, err := env.OAuth.RegisterClient(ctx, reg); !domain.IsCode(err, domain.CodeDuplicate) {
		t.Errorf("same id twice: %v", err)
	}
	// SaveClient replaces a registration in place (how seed keeps the MCP
	// gateway's client in step with its settings).
	reg.RedirectURIs = []string{"https://gateway.example.org/oauth/callback"}
	reg.Secret = strings.Repeat("g", 32)
	if _, err := env.OAuth.SaveClient(ctx, reg); err != nil {
		t.Fatal(err)
	}
	stored, err := env.DB.OAuthClient(ctx, "fixed-id")
	if err != nil || stored.RedirectURIs[0] != "https://gateway.example.org/oauth/callback" {
		t.Errorf("after SaveClient: %+v %v", stored, err)
	}
}

// TestConcurrentRotationsOfOneSecret: rotations of a client's secret sent
// at once: one stores its secret, which then authenticates the client;
// every other is refused (CodeConflict: send it again) and hands out no
// secret. Before, each replaced the client and returned its secret, and
// every secret but the last stored was dead on arrival.
func TestConcurrentRotationsOfOneSecret(t *testing.T) {
	env := handlerstest.Start(t)
	ctx := context.Background()
	c, _ := env.Client(t, oauth.ClientRegistration{Name: "App", Type: domain.ClientConfidential, RedirectURIs: []string{"https://app.example.org/cb"}})
	secrets := make([]string, 4)
	won := repotest.OneWins(t, len(secrets), func(i int) error {
		s, err := env.OAuth.RotateClientSecret(ctx, c.ID)
		secrets[i] = s
		return err
	}, domain.CodeConflict)
	for i, s := range secrets {
		if i != won && s != "" {
			t.Errorf("refused rotation %d handed out a secret", i)
		}
	}
	if status, _ := introspectAs(t, env, c.ID, secrets[won], "x"); status != http.StatusOK {
		t.Errorf("introspection with the secret of the rotation that stored: %d", status)
	}
}
