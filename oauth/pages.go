package oauth

import (
	"bytes"
	"embed"
	"html/template"
	"net/http"
)

//go:embed templates/*.html
var templateFiles embed.FS

var pageTemplates = template.Must(template.ParseFS(templateFiles, "templates/*.html"))

// page is what every template receives: the page's own data under Page.
type page struct {
	Title string
	CSRF  string
	Page  any
}

type loginPage struct {
	Next       string
	ClientName string // set when the login is part of an authorization
	Email      string
	Error      string
}

type consentPage struct {
	Client string
	User   string
	Scopes []scopeDescription
	Action string
}

type scopeDescription struct {
	Scope, Text string
}

type registerPage struct {
	User                   string
	Name                   string
	ClientType             string
	RedirectURIs           string
	PostLogoutRedirectURIs string
	AllowedOrigins         string
	Error                  string
}

type registeredPage struct {
	ClientID, Secret, Name string
}

type messagePage struct {
	Text    string
	SignOut bool // offer the sign-out button
}

var scopeTexts = map[string]string{
	"openid":         "Confirm who you are",
	"profile":        "See your name",
	"email":          "See your email address",
	"offline_access": "Keep access while you are not using the application",
}

func describeScopes(scopes []string) []scopeDescription {
	out := make([]scopeDescription, 0, len(scopes))
	for _, s := range scopes {
		text, ok := scopeTexts[s]
		if !ok {
			text = s
		}
		out = append(out, scopeDescription{Scope: s, Text: text})
	}
	return out
}

// render writes a page with security headers; templates get the CSRF token.
func (p *Provider) render(w http.ResponseWriter, r *http.Request, status int, name, title string, data any) {
	var buf bytes.Buffer
	if err := p.pages.ExecuteTemplate(&buf, name, page{Title: title, CSRF: p.csrfToken(w, r), Page: data}); err != nil {
		p.log.Error("page rendering failed", "page", name, "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func (p *Provider) renderLogin(w http.ResponseWriter, r *http.Request, status int, d loginPage) {
	p.render(w, r, status, "login.html", "Sign in", d)
}

func (p *Provider) renderConsent(w http.ResponseWriter, r *http.Request, d consentPage) {
	p.render(w, r, http.StatusOK, "consent.html", "Authorize "+d.Client, d)
}

func (p *Provider) renderRegister(w http.ResponseWriter, r *http.Request, status int, d registerPage) {
	p.render(w, r, status, "register.html", "Register an application", d)
}

func (p *Provider) renderRegistered(w http.ResponseWriter, r *http.Request, d registeredPage) {
	p.render(w, r, http.StatusCreated, "registered.html", "Application registered", d)
}

func (p *Provider) renderMessage(w http.ResponseWriter, r *http.Request, status int, title, text string) {
	p.render(w, r, status, "message.html", title, messagePage{Text: text})
}

func (p *Provider) renderSignedIn(w http.ResponseWriter, r *http.Request, email string) {
	p.render(w, r, http.StatusOK, "message.html", "Signed in", messagePage{Text: "You are signed in as " + email + ".", SignOut: true})
}
