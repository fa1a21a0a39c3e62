package oauth

import (
	"bytes"
	"embed"
	"html/template"
	"net/http"
	"strings"

	"exchange/domain"
)

//go:embed templates/*.html
var templateFiles embed.FS

// signInScript is the login page's proof of work (static/signin.js).
//
//go:embed static/signin.js
var signInScript []byte

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
	// Password offers the password form; Providers the identity
	// providers' buttons (renderLogin sets both).
	Password  bool
	Providers []loginProvider
	// Challenge and WorkBits are the proof of work the page's script
	// solves (static/signin.js; domain.Service.SignInChallenge).
	Challenge string
	WorkBits  int
}

type consentPage struct {
	Client string
	User   string
	Scopes []scopeDescription
	Action string
}

// scopeDescription is one requested scope on the consent page: in plain
// words, and whether the user may untick it.
type scopeDescription struct {
	Scope, Text string
	Required    bool
}

// pickerPage is where a practitioner chooses the patient a SMART app opens
// (launch/patient). Scopes are the ones allowed on the consent page,
// carried on to the authorization.
type pickerPage struct {
	Client   string
	User     string
	Scopes   []string
	Action   string
	Name     string // the name searched for
	Patients []pickedPatient
	More     bool // more patients match than are listed
	Error    string
}

type pickedPatient struct {
	ID              int64
	Name, BirthDate string
}

type registerPage struct {
	User                   string
	Name                   string
	ClientType             string
	RedirectURIs           string
	PostLogoutRedirectURIs string
	AllowedOrigins         string
	Scopes                 string
	AuthMethod             string
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
	domain.ScopeOpenID:        "Confirm who you are",
	domain.ScopeProfile:       "See your name",
	domain.ScopeEmail:         "See your email address",
	domain.ScopeFHIRUser:      "Know which FHIR record stands for you",
	domain.ScopeOfflineAccess: "Keep access while you are not using the application",
	domain.ScopeOnlineAccess:  "Keep access while you are signed in",
	domain.ScopeAdminRead:     "Read the administration data you can see: organizations, members, studies, patients, consents and data sources",
	domain.ScopeAdminWrite:    "Change the administration data you may change: organizations, members, studies, patients, consents and data sources",
	domain.ScopeMCP:           "Let AI assistants read, through the MCP gateway, the health and administration data you can see (they cannot change anything)",
}

// describeScopes puts requested scopes in plain words for the consent
// page; patientUser says whose data patient/ scopes reach: the user's own,
// or the patient a practitioner chooses next.
func describeScopes(scopes []string, patientUser bool) []scopeDescription {
	out := make([]scopeDescription, 0, len(scopes))
	for _, s := range scopes {
		d := scopeDescription{Scope: s, Text: scopeTexts[s], Required: s == domain.ScopeOpenID}
		switch rs, err := domain.ParseScope(s); {
		case s == domain.ScopeLaunchPatient && patientUser:
			d.Text = "Open your patient record"
		case s == domain.ScopeLaunchPatient:
			d.Text = "Open the record of a patient you choose next"
		case err == nil && rs != nil:
			d.Text = describeResourceScope(rs, patientUser)
		case d.Text == "":
			d.Text = s
		}
		out = append(out, d)
	}
	return out
}

// describeResourceScope says what a SMART resource scope lets the app do:
// "Read and search the chosen patient's Observation data (only with code
// omh:heart-rate:2.0)".
func describeResourceScope(rs *domain.ResourceScope, patientUser bool) string {
	verbs := rs.Interactions.Verbs()
	for i, v := range verbs {
		if v == "update" {
			verbs[i] = "change"
		}
	}
	text := strings.Join(verbs[:len(verbs)-1], ", ")
	if text != "" {
		text += " and "
	}
	text += verbs[len(verbs)-1]
	what := "data of every kind"
	if rs.Type != "*" {
		what = rs.Type + " data"
	}
	switch {
	case patientUser:
		text += " your " + what
	case rs.Patient:
		text += " the " + what + " of the patient you choose"
	default:
		text += " the " + what + " you can see"
	}
	var only []string
	for _, c := range rs.Constraints {
		only = append(only, c.Param+" "+strings.Join(c.Values, " or "))
	}
	if len(only) > 0 {
		text += " (only with " + strings.Join(only, ", and ") + ")"
	}
	return strings.ToUpper(text[:1]) + text[1:]
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
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func (p *Provider) renderLogin(w http.ResponseWriter, r *http.Request, status int, d loginPage) {
	d.Password, d.Providers = p.passwordSignIn, p.loginProviders(r.Context())
	d.Challenge, d.WorkBits = p.users.SignInChallenge()
	p.render(w, r, status, "login.html", "Sign in", d)
}

func (p *Provider) renderConsent(w http.ResponseWriter, r *http.Request, d consentPage) {
	p.render(w, r, http.StatusOK, "consent.html", "Authorize "+d.Client, d)
}

func (p *Provider) renderPicker(w http.ResponseWriter, r *http.Request, status int, d pickerPage) {
	p.render(w, r, status, "picker.html", "Choose a patient", d)
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
