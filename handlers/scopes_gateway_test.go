package handlers_test

import (
	"net/url"
	"strings"
	"testing"

	"golang.org/x/oauth2"

	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/oauth"
)

// matrixToken is a token of the scope matrix and what to expect of it: a
// script's (scopedToken), or one obtained through a trusted client's
// flow (through).
type matrixToken struct {
	scopedToken
	// through, when set, is the authorization code flow of a trusted
	// client, asking for the scopes, that obtains the token.
	through *trustedFlow
	// like names the token whose answers to the FHIR rows this one must
	// give, the rows listing only the others'; every, when set, is this
	// token's status for every request, FHIR or admin.
	like, every string
}

// trustedFlow is a trusted client (no consent page), confidential as the
// MCP gateway's, registered for the scopes (nil: every scope) when it
// obtains its token, and for repaired afterwards, when set.
type trustedFlow struct {
	registered, repaired []string
}

// trustedTokens are the MCP gateway's: what its client obtains, and the
// tokens of forwarded links whose scope was edited (for write scopes, or
// for scopes naming no access, which act with the user's full access),
// obtained while the client was registered for every scope, before seed
// narrowed it to its read-only scopes, which voids them.
var trustedTokens = []matrixToken{
	{scopedToken{"gateway", "member", oauth.GatewayScopes, false}, &trustedFlow{registered: oauth.GatewayScopes}, "user.rs", ""},
	{scopedToken{"gateway.edited.write", "member", []string{"openid", "user/*.cruds", "exchange/admin.write"}, false}, &trustedFlow{repaired: oauth.GatewayScopes}, "", "401"},
	{scopedToken{"gateway.edited.openid", "member", []string{"openid"}, false}, &trustedFlow{repaired: oauth.GatewayScopes}, "", "401"},
}

// assistantTokens are a trusted client's tokens for the MCP gateway (the
// mcp scope): with a patient context chosen at sign-in, it reads that
// patient alone, as patient/*.rs does.
var assistantTokens = []matrixToken{
	{scopedToken{"ctx.mcp", "member", []string{"openid", "launch/patient", domain.ScopeMCP}, true}, nil, "ctx.rs", ""},
}

// matrixTokens are every token of the scope matrix.
func matrixTokens() []matrixToken {
	var out []matrixToken
	for _, st := range scopedTokens {
		out = append(out, matrixToken{scopedToken: st})
	}
	out = append(out, assistantTokens...)
	return append(out, trustedTokens...)
}

// tokenThrough obtains a trusted token: the user signs in through the
// authorization code flow of its client.
func (w *scopeWorld) tokenThrough(t *testing.T, st matrixToken) string {
	t.Helper()
	const secret, redirect = "trusted-client-secret-0123456789abcdef", "https://gateway.example.org/oauth/callback"
	reg := oauth.ClientRegistration{ID: "trusted-" + st.name, Secret: secret, Name: "MCP gateway", Type: domain.ClientConfidential,
		RedirectURIs: []string{redirect}, SkipAuthorization: true, Scopes: st.through.registered}
	must(w.env.OAuth.SaveClient(w.ctx, reg))
	cfg := &oauth2.Config{ClientID: reg.ID, ClientSecret: secret, RedirectURL: redirect, Scopes: st.scopes,
		Endpoint: oauth2.Endpoint{AuthURL: w.env.URL + "/o/authorize/", TokenURL: w.env.URL + "/o/token/", AuthStyle: oauth2.AuthStyleInHeader}}
	verifier := oauth2.GenerateVerifier()
	b := handlerstest.NewBrowser(t, func(to *url.URL) bool { return strings.HasPrefix(to.String(), redirect) })
	_, page := b.Do("GET", cfg.AuthCodeURL("state-0123456789", oauth2.S256ChallengeOption(verifier)), nil)
	resp, page := b.Login(page, st.user+"@example.org", handlerstest.Password)
	loc, _ := url.Parse(resp.Header.Get("Location"))
	code := loc.Query().Get("code")
	if code == "" {
		t.Fatalf("token %s: no code: %d Location %q\n%s", st.name, resp.StatusCode, loc, page)
	}
	tok := must(cfg.Exchange(w.ctx, code, oauth2.VerifierOption(verifier)))
	if st.through.repaired != nil {
		reg.Scopes = st.through.repaired
		must(w.env.OAuth.SaveClient(w.ctx, reg))
	}
	return tok.AccessToken
}
