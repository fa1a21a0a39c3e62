package oauth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strings"
	"time"

	"exchange/domain"
)

// The login session is a server-side record (domain.LoginSession) named
// by a random value in an HttpOnly, SameSite=Lax cookie (Lax so it follows
// the top-level redirect from a client to /o/authorize/; Secure whenever
// the public origin is https). A record, not a signed cookie, so that
// signing out, a password change or a deactivation ends the session on
// every instance at once, and a copy of the cookie is worth nothing after.
// The cookie's path is the whole origin so the web console receives it;
// the API never takes it as a credential (bearer tokens only), so it
// cannot be used to forge API requests.
const (
	sessionCookie = "exchange_session"
	// deviceCookie vouches for a browser the account signed in from
	// (domain's sign-in throttle); path /o/: only the sign-in pages read it.
	deviceCookie = "exchange_device"
	csrfCookie   = "exchange_csrf"
	csrfField    = "csrf_token"
	// csrfPath is the whole origin too: one double-submit token serves the
	// forms of /o/ and of the console (whose pages post to /o/logout/).
	csrfPath = "/"
	// legacyCookiePath is where both cookies lived before they covered
	// the whole origin. A browser sends the more specific path's cookie
	// first, so a leftover would shadow the new one under /o/: signing in
	// and out drops them.
	legacyCookiePath = "/o/"
)

// Session defaults: LOGIN_SESSION_LIFETIME and LOGIN_SESSION_IDLE_TIMEOUT.
const (
	DefaultSessionLifetime    = 12 * time.Hour
	DefaultSessionIdleTimeout = 30 * time.Minute
	// maxTouchInterval bounds how often a session's last use is written:
	// often enough for the idle timeout, not a write per request.
	maxTouchInterval = 5 * time.Minute
)

// startSession signs the user in with a new session: a new random value
// at every sign-in, so a value planted in the browser beforehand (session
// fixation) never becomes a signed-in session. The browser's previous
// session, if any, ends. authTime is when the password check began: a
// password change after it voids the session (domain.User.StillSignedIn).
func (p *Provider) startSession(w http.ResponseWriter, r *http.Request, userID int64, authTime time.Time) error {
	p.endSessions(r)
	now := p.now().UTC()
	value := randomToken(32)
	s := &domain.LoginSession{ID: sessionID(value), UserID: userID, AuthTime: authTime, LastUsed: now, ExpiresAt: p.sessionEnd(authTime, now)}
	if err := p.store.CreateLoginSession(r.Context(), s); err != nil {
		return err
	}
	http.SetCookie(w, p.cookie(r, sessionCookie, value, "/", int(p.sessionLifetime/time.Second)))
	p.dropLegacyCookies(w, r)
	return nil
}

// endSession signs the browser out: its session records go, and the
// cookie with them.
func (p *Provider) endSession(w http.ResponseWriter, r *http.Request) {
	p.endSessions(r)
	http.SetCookie(w, p.cookie(r, sessionCookie, "", "/", -1))
	p.dropLegacyCookies(w, r)
}

// dropLegacyCookies expires the cookies left at legacyCookiePath.
func (p *Provider) dropLegacyCookies(w http.ResponseWriter, r *http.Request) {
	for _, name := range []string{sessionCookie, csrfCookie} {
		http.SetCookie(w, p.cookie(r, name, "", legacyCookiePath, -1))
	}
}

func (p *Provider) endSessions(r *http.Request) {
	for _, c := range r.CookiesNamed(sessionCookie) {
		if err := p.store.DeleteLoginSession(r.Context(), sessionID(c.Value)); err != nil {
			p.log.Error("ending a login session failed", "error", err)
		}
	}
}

// sessionID is the record id of a cookie value: its SHA-256, so that the
// database never holds a usable cookie.
func sessionID(value string) string {
	sum := sha256.Sum256([]byte(value))
	return hex.EncodeToString(sum[:])
}

// sessionEnd is when a session that began at authTime and was last used at
// lastUsed ends: at the lifetime's end or after the idle timeout,
// whichever comes first.
func (p *Provider) sessionEnd(authTime, lastUsed time.Time) time.Time {
	end := authTime.Add(p.sessionLifetime)
	if idle := lastUsed.Add(p.sessionIdleTimeout); idle.Before(end) {
		return idle
	}
	return end
}

// session returns the request's live login session and its active user.
// Every cookie of the name is tried (an older cookie of another path may
// come first). A use is recorded when the last recorded one is a touch
// interval old.
func (p *Provider) session(r *http.Request) (*domain.LoginSession, *domain.User, bool) {
	ctx := r.Context()
	now := p.now().UTC()
	for _, c := range r.CookiesNamed(sessionCookie) {
		s, err := p.store.LoginSession(ctx, sessionID(c.Value))
		if err != nil {
			if !domain.IsCode(err, domain.CodeNotFound) {
				p.log.Error("reading a login session failed", "error", err)
			}
			continue
		}
		if !now.Before(p.sessionEnd(s.AuthTime, s.LastUsed)) {
			continue
		}
		u, err := p.users.UserByID(ctx, s.UserID)
		if err != nil || !u.StillSignedIn(s.AuthTime) {
			continue
		}
		if now.Sub(s.LastUsed) >= p.touchInterval() {
			if err := p.store.TouchLoginSession(ctx, s.ID, now, p.sessionEnd(s.AuthTime, now)); err != nil {
				p.log.Error("recording a login session's use failed", "error", err)
			}
		}
		return s, u, true
	}
	return nil, nil, false
}

func (p *Provider) touchInterval() time.Duration {
	return min(maxTouchInterval, p.sessionIdleTimeout/4)
}

// SessionUser returns the user signed in with the request's login session,
// as the session's check read it: a live session (not signed out, within
// its lifetime and idle timeout) of a user who is still active and has not
// changed their password since. It counts as a use of the session. The
// web console calls it, and acts as the user without reading them again
// (domain.Service.ActorOf); the API never does.
func (p *Provider) SessionUser(r *http.Request) (*domain.User, bool) {
	_, u, ok := p.session(r)
	return u, ok
}

// csrfToken returns the request's CSRF token, setting a new cookie when
// there is none. Forms carry it back in csrfField (double-submit cookie).
func (p *Provider) csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) >= 32 {
		return c.Value
	}
	token := randomToken(32)
	http.SetCookie(w, p.cookie(r, csrfCookie, token, csrfPath, 0))
	return token
}

// csrfValid reports whether a form post carries the token of its cookie.
func csrfValid(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	form := r.PostFormValue(csrfField)
	return err == nil && c.Value != "" && subtle.ConstantTimeCompare([]byte(c.Value), []byte(form)) == 1
}

func (p *Provider) cookie(r *http.Request, name, value, path string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: name, Value: value, Path: path, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: strings.HasPrefix(p.proxies.RequestOrigin(r), "https://"),
	}
}
