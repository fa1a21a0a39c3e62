package oauth

import (
	"context"
	"crypto/rsa"
	"crypto/subtle"
	"crypto/x509"
	"net/http"
	"net/url"
	"sync"
	"time"

	"exchange/domain"
)

// Federated sign-in: the login page offers "Sign in with <provider>" for
// each identity provider (domain.IdentityProvider); the browser goes
// there and comes back with the provider's answer, which the OpenID
// Connect relying party (federation_oidc.go) or the SAML service provider
// (federation_saml.go) checks, and package domain turns into an account
// (Users.SignInFederated). What follows is the same login session as a
// password's: the authorization request, consent page and patient picker
// that sent the user to the login page carry on unchanged.
//
// A sign-in in progress is a domain.PendingSignIn in the database, so any
// instance may receive the browser back. It is bound three ways:
//
//   - to the state sent to the provider (OpenID Connect state, SAML
//     RelayState): random, single use, ten minutes;
//   - to the provider it was sent to: an answer that comes back through
//     another provider's callback is refused (identity provider mix-up);
//   - to the browser that started it, by a cookie: an answer carried to
//     another browser (an attacker's own sign-in planted in a victim's
//     browser) signs no one in.
//
// Where to go after signing in (next) is fixed when the sign-in starts,
// as a local path (localNext); nothing that comes back from the provider
// can change it.

// pendingSignInLifetime bounds how long a browser may stay at the
// identity provider.
const pendingSignInLifetime = 10 * time.Minute

// signInCookie names the cookie that binds sign-ins in progress to the
// browser that started them.
const signInCookie = "exchange_sign_in"

// federation holds what federated sign-ins build once and reuse: each
// provider's relying party or service provider, rebuilt when its
// configuration changes.
type federation struct {
	client *http.Client
	now    func() time.Time
	// samlKey signs the SAML service provider's requests and metadata and
	// decrypts encrypted assertions; samlCert is its self-signed
	// certificate, the same on every instance, made once.
	samlKey      *rsa.PrivateKey
	samlCertOnce sync.Once
	samlCert     *x509.Certificate
	samlCertErr  error

	mu   sync.Mutex
	oidc map[string]*oidcRelyingParty
	saml map[string]*samlMetadata // by provider id
}

func newFederation(client *http.Client, key *rsa.PrivateKey, now func() time.Time) *federation {
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	if now == nil {
		now = time.Now
	}
	return &federation{client: client, now: now, samlKey: key, oidc: map[string]*oidcRelyingParty{}, saml: map[string]*samlMetadata{}}
}

// loginProvider is a "Sign in with" button of the login page.
type loginProvider struct {
	ID, Name string
}

// loginProviders lists the identity providers for the login page; a
// failure to read them leaves the page with the password form.
func (p *Provider) loginProviders(ctx context.Context) []loginProvider {
	ps, err := p.users.IdentityProviders(ctx)
	if err != nil {
		p.log.Error("listing identity providers failed", "error", err)
		return nil
	}
	out := make([]loginProvider, len(ps))
	for i, ip := range ps {
		out[i] = loginProvider{ID: ip.ID, Name: ip.Name}
	}
	return out
}

// startFederated serves POST /o/login/{provider}/: the "Sign in with"
// button. It sends the browser to the provider.
func (p *Provider) startFederated(w http.ResponseWriter, r *http.Request) {
	next := r.PostFormValue("next")
	if !localNext(next) {
		next = ""
	}
	if !csrfValid(r) {
		p.renderLogin(w, r, http.StatusForbidden, loginPage{Next: next, Error: "This form has expired. Please sign in again."})
		return
	}
	ip, err := p.users.IdentityProviderByID(r.Context(), r.PathValue("provider"))
	if err != nil {
		p.federatedError(w, r, next, err)
		return
	}
	state := randomToken(32)
	pending := &domain.PendingSignIn{ID: sessionID(state), Provider: ip.ID, Browser: sessionID(p.signInBrowser(w, r)),
		Next: next, ExpiresAt: p.now().UTC().Add(pendingSignInLifetime)}
	var to string
	switch ip.Kind {
	case domain.IdentityOIDC:
		to, err = p.startOIDC(r, ip, state, pending)
	case domain.IdentitySAML:
		to, err = p.startSAML(r, ip, state, pending)
	}
	if err == nil {
		err = p.store.CreatePendingSignIn(r.Context(), pending)
	}
	if err != nil {
		p.federatedError(w, r, next, err)
		return
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// signInBrowser returns the value of the browser's sign-in cookie,
// setting a new one when there is none. It lives as long as a sign-in may
// take, on /o/ only.
func (p *Provider) signInBrowser(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(signInCookie); err == nil && len(c.Value) >= 32 {
		return c.Value
	}
	value := randomToken(32)
	http.SetCookie(w, p.cookie(r, signInCookie, value, "/o/", int(pendingSignInLifetime/time.Second)))
	return value
}

// takePending returns the sign-in in progress of a state that came back,
// using it up, when it was started by this browser for this provider.
// accepted says whether it must carry an accepted user (the second step
// of SAML's way back) or must not.
func (p *Provider) takePending(r *http.Request, provider, state string, accepted bool) (*domain.PendingSignIn, error) {
	expired := domain.Errorf(domain.CodeLogin, "this sign-in has expired or was already used: please start again")
	if state == "" {
		return nil, expired
	}
	pending, err := p.store.TakePendingSignIn(r.Context(), sessionID(state), p.now())
	if domain.IsCode(err, domain.CodeNotFound) {
		return nil, expired
	}
	if err != nil {
		return nil, err
	}
	c, cerr := r.Cookie(signInCookie)
	switch {
	case pending.Provider != provider:
		p.log.Warn("federated sign-in refused: the answer came back through another provider", "started", pending.Provider, "returned", provider)
		return nil, domain.Errorf(domain.CodeLogin, "this answer comes from another identity provider than the one the sign-in was started with")
	case cerr != nil || subtle.ConstantTimeCompare([]byte(sessionID(c.Value)), []byte(pending.Browser)) != 1:
		p.log.Warn("federated sign-in refused: the answer came back to another browser", "provider", provider)
		return nil, domain.Errorf(domain.CodeLogin, "this sign-in was started in another browser: please start again here")
	case accepted != (pending.UserID != 0):
		return nil, expired
	}
	return pending, nil
}

// federatedUser returns the account of the identity a provider's answer
// asserted, or the answer's refusal (answerErr, before it named anyone):
// either way an event of the audit trail, and of the sign-in metrics.
func (p *Provider) federatedUser(ctx context.Context, ip *domain.IdentityProvider, id domain.FederatedIdentity, answerErr error) (*domain.User, error) {
	u, err := (*domain.User)(nil), answerErr
	if err != nil {
		p.users.FederatedSignInRefused(ctx, ip, err)
	} else {
		u, err = p.users.SignInFederated(ctx, ip, id)
	}
	p.metrics.login(err)
	return u, err
}

// finishFederated signs the browser in as the user the provider's answer
// was accepted for, and goes where the sign-in was started for.
func (p *Provider) finishFederated(w http.ResponseWriter, r *http.Request, userID int64, authTime time.Time, next string) {
	if err := p.startSession(w, r, userID, authTime); err != nil {
		p.federatedError(w, r, next, err)
		return
	}
	http.SetCookie(w, p.cookie(r, signInCookie, "", "/o/", -1))
	if next == "" {
		next = "/o/login/"
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// federatedError shows why a federated sign-in did not happen, with the
// way back to the login page (and on to where it was going).
func (p *Provider) federatedError(w http.ResponseWriter, r *http.Request, next string, err error) {
	status := http.StatusUnauthorized
	text := domain.Sentence(domain.ErrorMessage(err))
	switch domain.ErrorCode(err) {
	case domain.CodeLogin:
	case domain.CodeNotFound:
		status, text = http.StatusNotFound, "There is no such identity provider here."
	case domain.CodeUnavailable:
		status = http.StatusBadGateway
	default:
		p.log.Error("federated sign-in failed", "error", err)
		status, text = http.StatusInternalServerError, "The sign-in failed on our side. Please try again later."
	}
	again := "/o/login/"
	if next != "" {
		again += "?next=" + url.QueryEscape(next)
	}
	p.render(w, r, status, "federated-error.html", "Sign-in refused", federatedErrorPage{Text: text, Again: again})
}

// federatedErrorPage is a federated sign-in's refusal.
type federatedErrorPage struct {
	Text  string
	Again string // the login page, on to the same next
}

// unavailable is the error of an identity provider that did not answer as
// it should (its discovery, keys, metadata or token endpoint): a bad
// gateway, not a refusal of the person.
func unavailable(what string, err error) error {
	return &domain.Error{Code: domain.CodeUnavailable, Message: what + ": " + err.Error()}
}
