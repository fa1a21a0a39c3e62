package oauth

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The login session is a signed cookie, not a server-side record: it holds
// the user id, when they logged in and when the session ends. It is
// HttpOnly, SameSite=Lax (so it follows the top-level redirect from a client
// to /o/authorize/) and Secure whenever the public origin is https.
const (
	sessionCookie = "exchange_session"
	csrfCookie    = "exchange_csrf"
	csrfField     = "csrf_token"
	cookiePath    = "/o/"
)

// loginSession is the content of the session cookie.
type loginSession struct {
	UserID   int64
	AuthTime time.Time
	Expires  time.Time
}

func (p *Provider) sign(payload string) string {
	m := hmac.New(sha256.New, p.cookieKey)
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// setSession starts a login session for the user.
func (p *Provider) setSession(w http.ResponseWriter, r *http.Request, userID int64) {
	now := p.now().UTC()
	payload := fmt.Sprintf("%d|%d|%d", userID, now.Unix(), now.Add(loginSessionLifespan).Unix())
	value := base64.RawURLEncoding.EncodeToString([]byte(payload)) + "." + p.sign(payload)
	http.SetCookie(w, p.cookie(r, sessionCookie, value, int(loginSessionLifespan/time.Second)))
}

// clearSession ends the login session.
func (p *Provider) clearSession(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, p.cookie(r, sessionCookie, "", -1))
}

// session returns the request's valid login session, if any.
func (p *Provider) session(r *http.Request) (loginSession, bool) {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return loginSession{}, false
	}
	enc, sig, ok := strings.Cut(c.Value, ".")
	if !ok {
		return loginSession{}, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || subtle.ConstantTimeCompare([]byte(sig), []byte(p.sign(string(raw)))) != 1 {
		return loginSession{}, false
	}
	parts := strings.Split(string(raw), "|")
	if len(parts) != 3 {
		return loginSession{}, false
	}
	var n [3]int64
	for i, part := range parts {
		if n[i], err = strconv.ParseInt(part, 10, 64); err != nil {
			return loginSession{}, false
		}
	}
	s := loginSession{UserID: n[0], AuthTime: time.Unix(n[1], 0).UTC(), Expires: time.Unix(n[2], 0).UTC()}
	if !p.now().Before(s.Expires) {
		return loginSession{}, false
	}
	return s, true
}

// csrfToken returns the request's CSRF token, setting a new cookie when
// there is none. Forms carry it back in csrfField (double-submit cookie).
func (p *Provider) csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) >= 32 {
		return c.Value
	}
	token := randomToken(32)
	http.SetCookie(w, p.cookie(r, csrfCookie, token, 0))
	return token
}

// csrfValid reports whether a form post carries the token of its cookie.
func csrfValid(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	form := r.PostFormValue(csrfField)
	return err == nil && c.Value != "" && subtle.ConstantTimeCompare([]byte(c.Value), []byte(form)) == 1
}

func (p *Provider) cookie(r *http.Request, name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: name, Value: value, Path: cookiePath, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: strings.HasPrefix(requestOrigin(r), "https://"),
	}
}

// VaryForwarded is the Vary header of responses built from Origin.
const VaryForwarded = "X-Forwarded-Proto, X-Forwarded-Host"

// Origin returns the scheme://host a client used to reach the service,
// honouring the X-Forwarded-Proto and X-Forwarded-Host set by a reverse
// proxy (their first value when a chain of proxies appended several).
func Origin(tls bool, host, forwardedProto, forwardedHost string) string {
	scheme := "http"
	if tls {
		scheme = "https"
	}
	if v := firstValue(forwardedProto); v == "http" || v == "https" {
		scheme = v
	}
	if v := firstValue(forwardedHost); v != "" {
		host = v
	}
	return scheme + "://" + host
}

func firstValue(header string) string {
	v, _, _ := strings.Cut(header, ",")
	return strings.ToLower(strings.TrimSpace(v))
}

func requestOrigin(r *http.Request) string {
	return Origin(r.TLS != nil, r.Host, r.Header.Get("X-Forwarded-Proto"), r.Header.Get("X-Forwarded-Host"))
}
