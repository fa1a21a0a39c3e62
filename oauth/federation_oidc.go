package oauth

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"exchange/domain"
)

// The OpenID Connect relying party: the authorization code flow with PKCE
// (S256), state and nonce, against a provider discovered from its issuer.
// coreos/go-oidc checks the ID token's signature against the provider's
// JWKS (cached, and fetched again when a token names a key it has not
// seen: the provider rotated its keys), its iss and aud; this file adds
// the nonce, iat, the leeway on exp, and the algorithm allowlist.

// idTokenAlgorithms are the signature algorithms an ID token may use: the
// asymmetric ones. Never "none", never HS* (a provider's client secret is
// not a key the token can be trusted by, and an HMAC "signed" with a
// public key is the classic confusion attack).
var idTokenAlgorithms = []string{
	oidc.RS256, oidc.RS384, oidc.RS512, oidc.PS256, oidc.PS384, oidc.PS512,
	oidc.ES256, oidc.ES384, oidc.ES512, oidc.EdDSA,
}

// clockLeeway is the clock difference tolerated between an identity
// provider and this server, on exp and iat.
const clockLeeway = time.Minute

// oidcRelyingParty is the client of one OpenID Connect provider.
type oidcRelyingParty struct {
	config   domain.IdentityProvider // what it was built from
	provider *oidc.Provider
	verifier *oidc.IDTokenVerifier
}

// relyingParty returns the client of the provider, discovering it the
// first time and again after its configuration changed.
func (f *federation) relyingParty(ctx context.Context, ip *domain.IdentityProvider) (*oidcRelyingParty, error) {
	f.mu.Lock()
	rp := f.oidc[ip.ID]
	f.mu.Unlock()
	if rp != nil && sameConfig(&rp.config, ip) {
		return rp, nil
	}
	ctx = oidc.ClientContext(ctx, f.client)
	provider, err := oidc.NewProvider(ctx, ip.Issuer)
	if err != nil {
		return nil, unavailable(fmt.Sprintf("the configuration of %s could not be discovered at %s", ip.Name, ip.Issuer), err)
	}
	var advertised struct {
		Algorithms []string `json:"id_token_signing_alg_values_supported"`
	}
	_ = provider.Claims(&advertised)
	algorithms := slices.DeleteFunc(slices.Clone(advertised.Algorithms), func(a string) bool { return !slices.Contains(idTokenAlgorithms, a) })
	if len(algorithms) == 0 {
		algorithms = []string{oidc.RS256}
	}
	// The key set outlives this request: its fetches use a context of
	// their own, with the federation's client.
	keys := oidc.ClientContext(context.Background(), f.client)
	rp = &oidcRelyingParty{config: *ip, provider: provider, verifier: provider.VerifierContext(keys, &oidc.Config{
		ClientID: ip.ClientID, SupportedSigningAlgs: algorithms,
		// exp is checked with the leeway: the verifier's clock runs late.
		Now: func() time.Time { return f.now().Add(-clockLeeway) },
	})}
	f.mu.Lock()
	f.oidc[ip.ID] = rp
	f.mu.Unlock()
	return rp, nil
}

// sameConfig reports whether a provider's configuration is the one a
// client was built from.
func sameConfig(a, b *domain.IdentityProvider) bool {
	return a.LastUpdated.Equal(b.LastUpdated) && a.Issuer == b.Issuer && a.ClientID == b.ClientID &&
		a.ClientSecret == b.ClientSecret && slices.Equal(a.Scopes, b.Scopes) && a.MetadataURL == b.MetadataURL && a.MetadataXML == b.MetadataXML
}

// oauth2Config is the code flow's configuration for a request's origin.
func (p *Provider) oauth2Config(r *http.Request, rp *oidcRelyingParty) *oauth2.Config {
	return &oauth2.Config{
		ClientID: rp.config.ClientID, ClientSecret: rp.config.ClientSecret, Endpoint: rp.provider.Endpoint(),
		RedirectURL: p.proxies.RequestOrigin(r) + "/o/login/" + rp.config.ID + "/callback",
		Scopes:      rp.config.Scopes,
	}
}

// startOIDC returns where to send the browser: the provider's
// authorization endpoint, with the state, a nonce and a PKCE challenge
// that the sign-in in progress keeps.
func (p *Provider) startOIDC(r *http.Request, ip *domain.IdentityProvider, state string, pending *domain.PendingSignIn) (string, error) {
	rp, err := p.federation.relyingParty(r.Context(), ip)
	if err != nil {
		return "", err
	}
	pending.Nonce, pending.Verifier = randomToken(32), oauth2.GenerateVerifier()
	return p.oauth2Config(r, rp).AuthCodeURL(state, oidc.Nonce(pending.Nonce), oauth2.S256ChallengeOption(pending.Verifier)), nil
}

// oidcCallback serves GET /o/login/{provider}/callback: the provider's
// answer.
func (p *Provider) oidcCallback(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	provider := r.PathValue("provider")
	pending, err := p.takePending(r, provider, q.Get("state"), false)
	if err != nil {
		p.federatedError(w, r, "", err)
		return
	}
	ip, err := p.users.IdentityProviderByID(ctx, provider)
	if err == nil && ip.Kind != domain.IdentityOIDC {
		err = domain.Errorf(domain.CodeNotFound, "not an OpenID Connect provider")
	}
	if err != nil {
		p.federatedError(w, r, pending.Next, err)
		return
	}
	authTime := p.now().UTC()
	id, err := p.oidcIdentity(r, ip, pending)
	u, err := p.federatedUser(ctx, ip, id, err)
	if err != nil {
		p.federatedError(w, r, pending.Next, err)
		return
	}
	p.finishFederated(w, r, u.ID, authTime, pending.Next)
}

// oidcIdentity checks the provider's answer and returns the identity it
// asserts: the code redeemed with the PKCE verifier, the ID token
// verified (signature by an allowed algorithm, iss, aud, exp and iat with
// leeway, nonce), then the claims of the ID token, completed by the
// UserInfo endpoint's for the same sub.
func (p *Provider) oidcIdentity(r *http.Request, ip *domain.IdentityProvider, pending *domain.PendingSignIn) (domain.FederatedIdentity, error) {
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		return domain.FederatedIdentity{}, domain.Errorf(domain.CodeLogin, "%s refused the sign-in (%s)", ip.Name, truncatedText(e+" "+q.Get("error_description"), 200))
	}
	rp, err := p.federation.relyingParty(r.Context(), ip)
	if err != nil {
		return domain.FederatedIdentity{}, err
	}
	// RFC 9207: an answer that names its issuer must name this one.
	if iss := q.Get("iss"); iss != "" && iss != ip.Issuer {
		return domain.FederatedIdentity{}, domain.Errorf(domain.CodeLogin, "the answer was issued by %s, not by %s", truncatedText(iss, 200), ip.Name)
	}
	ctx := oidc.ClientContext(r.Context(), p.federation.client)
	cfg := p.oauth2Config(r, rp)
	token, err := cfg.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(pending.Verifier))
	if err != nil {
		return domain.FederatedIdentity{}, domain.Errorf(domain.CodeLogin, "%s did not accept its own answer (the code exchange failed)", ip.Name)
	}
	raw, _ := token.Extra("id_token").(string)
	if raw == "" {
		return domain.FederatedIdentity{}, domain.Errorf(domain.CodeLogin, "%s sent no ID token", ip.Name)
	}
	idToken, err := rp.verifier.Verify(ctx, raw)
	if err != nil {
		p.log.Info("federated sign-in refused: the ID token did not verify", "provider", ip.ID, "reason", err.Error())
		return domain.FederatedIdentity{}, domain.Errorf(domain.CodeLogin, "the ID token of %s did not verify", ip.Name)
	}
	if idToken.IssuedAt.After(p.now().Add(clockLeeway)) {
		return domain.FederatedIdentity{}, domain.Errorf(domain.CodeLogin, "the ID token of %s is issued in the future", ip.Name)
	}
	if idToken.Nonce == "" || subtle.ConstantTimeCompare([]byte(idToken.Nonce), []byte(pending.Nonce)) != 1 {
		return domain.FederatedIdentity{}, domain.Errorf(domain.CodeLogin, "the ID token of %s was not issued for this sign-in (its nonce does not match)", ip.Name)
	}
	claims := map[string]any{}
	if err := idToken.Claims(&claims); err != nil {
		return domain.FederatedIdentity{}, domain.Errorf(domain.CodeLogin, "the ID token of %s has unreadable claims", ip.Name)
	}
	if rp.provider.UserInfoEndpoint() != "" {
		p.addUserInfo(ctx, ip, rp, token, idToken.Subject, claims)
	}
	id := mapClaims(ip.Claims, claims)
	id.Issuer = idToken.Issuer
	if name := ip.Claims.Subject; name != "" && name != "sub" {
		// A subject claim other than sub must come from the signed token.
		id.Subject = claimString(idTokenClaim(idToken, name))
	}
	return id, nil
}

// addUserInfo completes the ID token's claims with the UserInfo
// endpoint's (providers put the profile and email there), when it answers
// for the same sub; the ID token's own claims stay.
func (p *Provider) addUserInfo(ctx context.Context, ip *domain.IdentityProvider, rp *oidcRelyingParty, token *oauth2.Token, subject string, claims map[string]any) {
	info, err := rp.provider.UserInfo(ctx, oauth2.StaticTokenSource(token))
	if err != nil {
		p.log.Info("the UserInfo endpoint of an identity provider did not answer", "provider", ip.ID, "reason", err.Error())
		return
	}
	if info.Subject != subject {
		p.log.Warn("an identity provider's UserInfo answered for another subject: ignored", "provider", ip.ID)
		return
	}
	extra := map[string]any{}
	if info.Claims(&extra) != nil {
		return
	}
	for k, v := range extra {
		if _, ok := claims[k]; !ok {
			claims[k] = v
		}
	}
}

// idTokenClaim reads one claim of a verified ID token.
func idTokenClaim(t *oidc.IDToken, name string) any {
	all := map[string]any{}
	_ = t.Claims(&all)
	return all[name]
}

// mapClaims reads an identity out of claims, by the provider's claim map
// (the standard names by default).
func mapClaims(m domain.ClaimMap, claims map[string]any) domain.FederatedIdentity {
	name := func(configured, standard string) string {
		if configured != "" {
			return configured
		}
		return standard
	}
	return domain.FederatedIdentity{
		Subject:       claimString(claims["sub"]),
		Email:         claimString(claims[name(m.Email, "email")]),
		EmailVerified: claimTrue(claims[name(m.EmailVerified, "email_verified")]),
		GivenName:     claimString(claims[name(m.GivenName, "given_name")]),
		FamilyName:    claimString(claims[name(m.FamilyName, "family_name")]),
	}
}

func claimString(v any) string {
	s, _ := v.(string)
	return s
}

// claimTrue reads a boolean claim; some providers send "true".
func claimTrue(v any) bool {
	switch b := v.(type) {
	case bool:
		return b
	case string:
		return strings.EqualFold(b, "true")
	}
	return false
}

// truncatedText cuts what another server sent to at most n bytes for a
// message.
func truncatedText(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
