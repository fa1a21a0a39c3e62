package oauth

import "net/http"

// CSRFField is the form field that carries the CSRF token on every form of
// the exchange's pages, /o/ and the web console alike: one double-submit
// cookie for the origin, so a console page can post to /o/logout/.
const CSRFField = csrfField

// CSRFToken returns the request's CSRF token for a form, setting its cookie
// when there is none.
func (p *Provider) CSRFToken(w http.ResponseWriter, r *http.Request) string {
	return p.csrfToken(w, r)
}

// CSRFValid reports whether a form post carries the token of its cookie.
func (p *Provider) CSRFValid(r *http.Request) bool { return csrfValid(r) }

// RequestOrigin is the scheme://host the request came through (as a
// trusted proxy forwards it): where a page tells what to register at an
// identity provider.
func (p *Provider) RequestOrigin(r *http.Request) string { return p.proxies.RequestOrigin(r) }
