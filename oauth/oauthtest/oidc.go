// Package oauthtest runs the outside parties of the exchange's sign-ins
// in tests: an OpenID Connect provider (also an EHR that issues ID tokens
// for a token exchange) built on go-jose, with hooks that make it answer
// as a broken or hostile provider would.
package oauthtest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	josejwt "github.com/go-jose/go-jose/v4/jwt"
)

// OIDCProvider is an OpenID Connect provider on a loopback port. Its
// authorization endpoint signs in whoever User is without asking, and
// sends the browser back with a code; its token endpoint redeems the code
// (with the client's secret and the PKCE verifier) for an access token and
// an ID token that Mint signs.
type OIDCProvider struct {
	URL          string // the issuer
	ClientID     string
	ClientSecret string
	Key          *rsa.PrivateKey
	KeyID        string

	mu sync.Mutex
	// User is the claims of whoever signs in next (sub, email, ...).
	User map[string]any
	// Mint signs an ID token's claims; nil: RS256 with Key. Tests replace
	// it to mint tokens a provider must not (another key, another alg).
	Mint func(claims map[string]any) string
	// Claims, when set, changes the ID token's claims before Mint (drop
	// the nonce, move exp, name another audience).
	Claims func(claims map[string]any)
	// InUserInfo moves these claims from the ID token to the UserInfo
	// endpoint, as providers that keep ID tokens small do.
	InUserInfo []string
	// Answer, when set, changes the redirect back to the client (add
	// iss, replace the state).
	Answer func(q url.Values)
	codes  map[string]grant
	tokens map[string]map[string]any // access token: its UserInfo claims

	discoveries atomic.Int32
}

// Discoveries is how many times its configuration was read.
func (p *OIDCProvider) Discoveries() int { return int(p.discoveries.Load()) }

type grant struct {
	clientID, redirectURI, nonce, challenge string
	user                                    map[string]any
}

// StartOIDC runs a provider for the client, until the test ends.
func StartOIDC(t testing.TB, clientID, clientSecret string) *OIDCProvider {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p := &OIDCProvider{ClientID: clientID, ClientSecret: clientSecret, Key: key, KeyID: "test-key-1",
		codes: map[string]grant{}, tokens: map[string]map[string]any{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", p.discovery)
	mux.HandleFunc("GET /.well-known/smart-configuration", p.discovery)
	mux.HandleFunc("GET /jwks", p.jwks)
	mux.HandleFunc("GET /authorize", p.authorize)
	mux.HandleFunc("POST /token", p.token)
	mux.HandleFunc("GET /userinfo", p.userinfo)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// SetUser sets who signs in next.
func (p *OIDCProvider) SetUser(claims map[string]any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.User = claims
}

// Configure applies a change to the provider's hooks under its lock.
func (p *OIDCProvider) Configure(change func(p *OIDCProvider)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	change(p)
}

func (p *OIDCProvider) discovery(w http.ResponseWriter, _ *http.Request) {
	p.discoveries.Add(1)
	writeJSON(w, map[string]any{
		"issuer": p.URL, "authorization_endpoint": p.URL + "/authorize", "token_endpoint": p.URL + "/token",
		"userinfo_endpoint": p.URL + "/userinfo", "jwks_uri": p.URL + "/jwks",
		"response_types_supported": []string{"code"}, "subject_types_supported": []string{"public"},
		"id_token_signing_alg_values_supported": []string{"RS256", "HS256", "none"},
		"code_challenge_methods_supported":      []string{"S256"},
	})
}

func (p *OIDCProvider) jwks(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &p.Key.PublicKey, KeyID: p.KeyID, Algorithm: "RS256", Use: "sig"}}})
}

func (p *OIDCProvider) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	redirect, err := url.Parse(q.Get("redirect_uri"))
	if q.Get("client_id") != p.ClientID || err != nil || q.Get("response_type") != "code" || q.Get("code_challenge_method") != "S256" {
		http.Error(w, "bad authorization request", http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	code := randomString()
	p.codes[code] = grant{clientID: q.Get("client_id"), redirectURI: q.Get("redirect_uri"), nonce: q.Get("nonce"),
		challenge: q.Get("code_challenge"), user: p.User}
	answer := p.Answer
	p.mu.Unlock()
	back := redirect.Query()
	back.Set("code", code)
	back.Set("state", q.Get("state"))
	if answer != nil {
		answer(back)
	}
	redirect.RawQuery = back.Encode()
	http.Redirect(w, r, redirect.String(), http.StatusFound)
}

func (p *OIDCProvider) token(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	id, secret, ok := r.BasicAuth()
	if !ok {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	} else {
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
	}
	p.mu.Lock()
	g, found := p.codes[r.PostForm.Get("code")]
	delete(p.codes, r.PostForm.Get("code"))
	p.mu.Unlock()
	sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
	switch {
	case id != p.ClientID || secret != p.ClientSecret:
		w.WriteHeader(http.StatusUnauthorized)
		writeJSON(w, map[string]string{"error": "invalid_client"})
		return
	case !found || g.redirectURI != r.PostForm.Get("redirect_uri") || base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge:
		w.WriteHeader(http.StatusBadRequest)
		writeJSON(w, map[string]string{"error": "invalid_grant"})
		return
	}
	now := time.Now()
	claims := map[string]any{"iss": p.URL, "aud": p.ClientID, "iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix()}
	if g.nonce != "" {
		claims["nonce"] = g.nonce
	}
	info := map[string]any{}
	p.mu.Lock()
	for k, v := range g.user {
		claims[k] = v
		info[k] = v
	}
	for _, k := range p.InUserInfo {
		delete(claims, k)
	}
	if p.Claims != nil {
		p.Claims(claims)
	}
	mint := p.Mint
	access := randomString()
	p.tokens[access] = info
	p.mu.Unlock()
	if mint == nil {
		mint = p.IDToken
	}
	writeJSON(w, map[string]any{"access_token": access, "token_type": "Bearer", "expires_in": 300, "id_token": mint(claims)})
}

func (p *OIDCProvider) userinfo(w http.ResponseWriter, r *http.Request) {
	token := r.Header.Get("Authorization")
	p.mu.Lock()
	info, ok := p.tokens[strings.TrimPrefix(token, "Bearer ")]
	p.mu.Unlock()
	if !ok {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	writeJSON(w, info)
}

// IDToken signs claims with the provider's key, RS256.
func (p *OIDCProvider) IDToken(claims map[string]any) string {
	return Sign(p.Key, p.KeyID, jose.RS256, claims)
}

// Sign signs claims as a JWT with the key and algorithm (an RSA key for
// RS256, a []byte for HS256), naming kid.
func Sign(key any, kid string, alg jose.SignatureAlgorithm, claims map[string]any) string {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		panic(err)
	}
	token, err := josejwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		panic(err)
	}
	return token
}

// Unsigned returns claims as a JWT with alg "none" and no signature.
func Unsigned(claims map[string]any) string {
	header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`))
	body, _ := json.Marshal(claims)
	return header + "." + base64.RawURLEncoding.EncodeToString(body) + "."
}

func randomString() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
