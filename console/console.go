package console

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"exchange/domain"
	"exchange/fhirsearch"
	"exchange/handlers/httpstatus"
	"exchange/oauth"
	"exchange/omh"
)

// Prefix is where the console is served.
const Prefix = "/console/"

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Config is what the console is made of.
type Config struct {
	Service *domain.Service
	OAuth   *oauth.Provider
	// Search parses the FHIR searches the data pages run, as /FHIR/R5 does.
	Search *fhirsearch.Translator
	// Schemas are the Open mHealth and IEEE 1752 schemas the exchange knows (nil: not
	// installed), offered when a superuser adds a scope code.
	Schemas *omh.Registry
	// ObservationResource renders a native observation as the FHIR API
	// serves it: the lines of the NDJSON download.
	ObservationResource func(*domain.Observation) any
	// GatewayClientID is the MCP gateway's client (MCP_OAUTH_CLIENT_ID),
	// explained on the OAuth clients page; "" when none is configured.
	GatewayClientID string
	// Exports are the bulk export settings (EXPORT_QUEUE); zero:
	// domain.DefaultExportLimits.
	Exports domain.ExportLimits
	// Capacity says whether the store is past the size it serves
	// comfortably (the embedded database), shown to staff on the home
	// page; nil: it has no such size.
	Capacity func() *domain.StoreCapacity
	Logger   *slog.Logger
}

// Console serves the pages under Prefix.
type Console struct {
	Config
	pages map[string]*template.Template
	mux   *http.ServeMux
}

// New returns the console. It panics if its embedded templates do not
// parse: a build defect, caught by any test.
func New(c Config) *Console {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	con := &Console{Config: c, pages: parsePages(), mux: http.NewServeMux()}
	con.routes()
	return con
}

// ServeHTTP implements http.Handler: the security headers of every answer,
// then the route.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	// Invitation links carry their code in the URL: never sent on.
	h.Set("Referrer-Policy", "no-referrer")
	c.mux.ServeHTTP(w, r)
}

// session is the signed-in user of a request, as the domain sees them.
type session struct {
	actor *domain.Actor
	csrf  string
}

// handler is a page or form handler of a signed-in user. An error it
// returns is rendered as a page with its status.
type handler func(w http.ResponseWriter, r *http.Request, s *session) error

func (c *Console) routes() {
	static, _ := fs.Sub(staticFiles, "static")
	files := http.StripPrefix(Prefix+"static/", http.FileServerFS(static))
	c.mux.Handle("GET "+Prefix+"static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	}))
	c.mux.HandleFunc("GET /console", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
	})
	c.mux.HandleFunc("GET "+oauth.ConsoleInvitationPath+"{$}", c.invitationPage)
	c.mux.HandleFunc("POST "+oauth.ConsoleInvitationPath+"{$}", c.acceptInvitation)

	for pattern, h := range c.signedInRoutes() {
		c.mux.Handle(pattern, c.signedIn(h))
	}
	c.mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		c.renderError(w, r, nil, domain.Errorf(domain.CodeNotFound, "there is no such page"))
	})
}

// signedInRoutes are the pages and forms of signed-in users. Each one is
// in the console's permission tests, which check that none is missing.
func (c *Console) signedInRoutes() map[string]handler {
	return map[string]handler{
		"GET /console/{$}":                                             c.home,
		"GET /console/organizations/{$}":                               c.organizations,
		"GET /console/organizations/{id}/{$}":                          c.organization,
		"POST /console/organizations/{id}/members":                     c.addMember,
		"POST /console/organizations/{id}/members/{user}":              c.changeMember,
		"POST /console/organizations/{id}/members/{user}/remove":       c.removeMember,
		"GET /console/studies/{$}":                                     c.studies,
		"POST /console/studies/{$}":                                    c.createStudy,
		"GET /console/studies/{id}/{$}":                                c.study,
		"POST /console/studies/{id}/{$}":                               c.updateStudy,
		"POST /console/studies/{id}/scopes":                            c.addScope,
		"POST /console/studies/{id}/scopes/{scope}/remove":             c.removeScope,
		"POST /console/studies/{id}/data-sources":                      c.addStudySource,
		"POST /console/studies/{id}/data-sources/{source}/remove":      c.removeStudySource,
		"POST /console/studies/{id}/enroll":                            c.enroll,
		"POST /console/studies/{id}/unenroll":                          c.unenroll,
		"GET /console/studies/{id}/patients/{patient}/data":            c.studyData,
		"GET /console/studies/{id}/patients/{patient}/data.ndjson":     c.studyDataNDJSON,
		"GET /console/studies/{id}/patients/{patient}/data.csv":        c.studyDataCSV,
		"GET /console/patients/{$}":                                    c.patients,
		"POST /console/patients/{$}":                                   c.createPatient,
		"GET /console/patients/{id}/{$}":                               c.patient,
		"POST /console/patients/{id}/identifiers":                      c.addIdentifier,
		"POST /console/patients/{id}/identifiers/remove":               c.removeIdentifier,
		"POST /console/patients/{id}/invitations":                      c.invite,
		"POST /console/patients/{id}/invitations/{invitation}/cancel":  c.cancelInvitation,
		"POST /console/patients/{id}/invitations/{invitation}/reissue": c.reissueInvitation,
		"GET /console/patients/{id}/data":                              c.patientData,
		"GET /console/patients/{id}/data.ndjson":                       c.patientDataNDJSON,
		"GET /console/patients/{id}/data.csv":                          c.patientDataCSV,
		"POST /console/consents":                                       c.answerConsent,
		"GET /console/sources/{$}":                                     c.sources,
		"POST /console/data-sources":                                   c.createDataSource,
		"POST /console/scope-codes":                                    c.createScopeCode,
		"POST /console/fhir-sources":                                   c.createFHIRSource,
		"GET /console/fhir-sources/{id}/{$}":                           c.fhirSource,
		"GET /console/records/{$}":                                     c.records,
		"POST /console/records/connect":                                c.connect,
		"GET " + EHRCallbackPath:                                       c.ehrCallback,
		"POST /console/records/{id}/sync":                              c.connectionForm(c.syncRecords, "syncing"),
		"POST /console/records/{id}/disconnect":                        c.connectionForm(c.disconnectRecords, "disconnected"),
		"POST /console/records/{id}/keep-updated":                      c.connectionForm(c.keepRecordsUpdated, "saved"),
		"GET /console/patients/{id}/records":                           c.patientRecords,
		"GET /console/clients/{$}":                                     c.clients,
		"POST /console/clients/{$}":                                    c.registerClient,
		"POST /console/clients/{id}/rotate":                            c.rotateClient,
		"POST /console/clients/backend":                                c.registerBackendClient,
		"POST /console/studies/{id}/export":                            c.exportStudy,
		"POST /console/patients/{id}/export":                           c.exportPatient,
		"GET /console/exports/{job}/{$}":                               c.exportJob,
		"GET /console/exports/{job}/{file}":                            c.exportFile,
		"POST /console/exports/{job}/delete":                           c.deleteExport,
		"GET /console/identity-providers/{$}":                          c.identityProviders,
		"POST /console/identity-providers/{$}":                         c.createIdentityProvider,
		"POST /console/identity-providers/{id}/remove":                 c.removeIdentityProvider,
		"POST /console/identity-providers/{id}/invitations":            c.inviteToIdentityProvider,
		"POST /console/identity-providers/{id}/invitations/remove":     c.cancelIdentityInvitation,
	}
}

// signedIn runs a handler as the request's signed-in user: without a login
// session a page sends the browser to the login page, which returns here;
// a form post without one, or without its CSRF token, is refused.
func (c *Console) signedIn(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := c.session(w, r)
		switch {
		case err == nil && r.Method == http.MethodPost && !c.OAuth.CSRFValid(r):
			err = domain.Errorf(domain.CodeForbidden, "this form has expired; reload the page and try again")
		case domain.IsCode(err, domain.CodeLogin) && r.Method == http.MethodGet:
			http.Redirect(w, r, "/o/login/?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if err == nil {
			err = h(w, r, s)
		}
		if err != nil {
			c.renderError(w, r, s, err)
		}
	})
}

// session loads the actor of the request's login session through the same
// domain function the API's bearer tokens use, from the user the
// session's check read: a request reads its user once.
func (c *Console) session(w http.ResponseWriter, r *http.Request) (*session, error) {
	user, ok := c.OAuth.SessionUser(r)
	if !ok {
		return nil, domain.Errorf(domain.CodeLogin, "sign in to use the console")
	}
	actor, err := c.Service.ActorOf(r.Context(), user)
	if err != nil {
		return nil, err
	}
	return &session{actor: actor, csrf: c.OAuth.CSRFToken(w, r)}, nil
}

// view is what every page template receives.
type view struct {
	Title   string
	Section string // the navigation entry of the page
	CSRF    string
	Actor   *domain.Actor
	Notice  string // what the last form did
	Page    any
	Form    *formState // the form that was refused, if any
}

// IsPatient reports whether the user is a patient (the patients' pages).
func (v view) IsPatient() bool { return v.Actor != nil && v.Actor.User.Type == domain.UserPatient }

func parsePages() map[string]*template.Template {
	layout := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html"))
	names, _ := fs.Glob(templateFiles, "templates/*.html")
	pages := map[string]*template.Template{}
	for _, name := range names {
		base := strings.TrimPrefix(name, "templates/")
		if base == "layout.html" {
			continue
		}
		pages[base] = template.Must(template.Must(layout.Clone()).ParseFS(templateFiles, name))
	}
	return pages
}

// render writes a page. Pages are never cached: they show health data,
// secrets or what a user may do.
func (c *Console) render(w http.ResponseWriter, r *http.Request, s *session, status int, name, title, section string, data any) {
	c.renderForm(w, r, s, status, name, title, section, data, nil)
}

// renderForm writes a page with one of its forms refused (form: nil for
// none), answered with the refusal's status.
func (c *Console) renderForm(w http.ResponseWriter, r *http.Request, s *session, status int, name, title, section string, data any, form *formState) {
	if form != nil {
		status = form.Status
	}
	v := view{Title: title, Section: section, Page: data, Form: form, Notice: notices[r.URL.Query().Get("done")]}
	if s != nil {
		v.CSRF, v.Actor = s.csrf, s.actor
	} else {
		v.CSRF = c.OAuth.CSRFToken(w, r)
	}
	var buf bytes.Buffer
	if err := c.pages[name].ExecuteTemplate(&buf, "layout.html", v); err != nil {
		c.Logger.Error("console page rendering failed", "page", name, "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// errorPage is the data of the error page.
type errorPage struct {
	Status  int
	Message string
	SignIn  string // the login link when the user must sign in
}

// renderError renders an error as a page with the status the admin API
// would answer. Only faults (500) are logged, without the request's query,
// which may hold an invitation code.
func (c *Console) renderError(w http.ResponseWriter, r *http.Request, s *session, err error) {
	page := errorOf(err)
	if page.Status >= 500 && !errors.Is(err, context.Canceled) {
		c.Logger.Error("console request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	c.render(w, r, s, page.Status, "error.html", http.StatusText(page.Status), "", page)
}

// errorOf is what a page says of an error: the status the admin API would
// answer and its message, "internal error" for a fault. A Stale conflict
// stays 409 here, where the admin API answers 412: a form carries the
// version it was made from in its body, not in an If-Match precondition.
func errorOf(err error) errorPage {
	status := httpstatus.Of(err)
	message := domain.ErrorMessage(err)
	if status >= 500 {
		message = "internal error"
	}
	page := errorPage{Status: status, Message: domain.Sentence(message)}
	if status == http.StatusUnauthorized {
		page.SignIn = "/o/login/?next=" + url.QueryEscape(Prefix)
	}
	return page
}

// formVersion reads the version field of an edit form: the LastUpdated
// of the record the form showed, as the version template function wrote
// it (CodeInvalid if it is missing or malformed).
func formVersion(r *http.Request) (time.Time, error) {
	v, err := time.Parse(time.RFC3339Nano, r.PostFormValue("version"))
	if err != nil {
		return time.Time{}, domain.FieldErrorf("version", "is missing; reload the page and make your change again")
	}
	return v, nil
}

// notices are the messages a form's redirect names with done=: fixed
// texts, so nothing from the request is echoed.
var notices = map[string]string{
	"saved":         "Saved.",
	"created":       "Created.",
	"added":         "Added.",
	"removed":       "Removed.",
	"enrolled":      "The patient is enrolled.",
	"unenrolled":    "The patient is no longer enrolled.",
	"cancelled":     "The invitation is cancelled: its link no longer works.",
	"answered":      "Thank you: your answer is saved. You can change it at any time.",
	"invited":       "Invited: the first sign-in through the provider with that verified address opens its account.",
	"exportDeleted": "The export and its files are deleted.",
	"connected":     "Connected: your record is being copied from your EHR. Reload this page to see it arrive.",
	"syncing":       "Your record is being copied again. Reload this page to see the result.",
	"disconnected": "Disconnected: the exchange no longer holds a sign-in to that EHR. " +
		"What was copied stays with your data.",
}

// seeOther answers a successful form with a redirect to a page (Post,
// Redirect, Get), naming what was done.
func seeOther(w http.ResponseWriter, r *http.Request, path, done string) error {
	if done != "" {
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		path += sep + "done=" + done
	}
	http.Redirect(w, r, path, http.StatusSeeOther)
	return nil
}

// pathID reads an id from the path, written as the console writes it
// (domain.ParseID: no sign, no leading zero, so one page has one URL); any
// other is a 404, as an unknown id is.
func pathID(r *http.Request, name string) (int64, error) {
	id, ok := domain.ParseID(r.PathValue(name))
	if !ok {
		return 0, domain.Errorf(domain.CodeNotFound, "there is no such page")
	}
	return id, nil
}

// formID reads an id from a form field, as domain.ParseID does;
// CodeInvalid naming the field.
func formID(r *http.Request, field string) (int64, error) {
	id, ok := domain.ParseID(r.PostFormValue(field))
	if !ok {
		return 0, domain.FieldErrorf(field, "choose one")
	}
	return id, nil
}

// pageSize is the length of every list page of the console.
const pageSize = 20

// pager is one page of a list, with its links.
type pager struct {
	Number, Total int64
	Prev, Next    string
}

// listPage reads ?page= (from 1) of a list page.
func listPage(r *http.Request) domain.Page {
	n, err := strconv.Atoi(r.URL.Query().Get("page"))
	if err != nil || n < 1 {
		n = 1
	}
	return domain.Page{Number: n, Size: pageSize}
}

// pagerOf returns the links of a page of total items, keeping the other
// query parameters.
func pagerOf(r *http.Request, p domain.Page, total int64) pager {
	link := func(n int) string {
		q := r.URL.Query()
		q.Del("done")
		q.Set("page", strconv.Itoa(n))
		return r.URL.Path + "?" + q.Encode()
	}
	out := pager{Number: int64(p.Number), Total: total}
	if p.Number > 1 {
		out.Prev = link(p.Number - 1)
	}
	if p.Offset()+int64(p.Size) < total {
		out.Next = link(p.Number + 1)
	}
	return out
}

// Pages returns how many pages the list has.
func (p pager) Pages() int64 { return max(1, (p.Total+pageSize-1)/pageSize) }

var funcs = template.FuncMap{
	"date": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2 Jan 2006 15:04 UTC")
	},
	"day":  func(t time.Time) string { return t.UTC().Format(time.DateOnly) },
	"name": patientName,
	// version writes a record's LastUpdated into an edit form (formVersion).
	"version": func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
	"role":    roleName,
	// orgType and sourceType name an organization's and a data source's
	// type in words.
	"orgType":    orgTypeName,
	"sourceType": sourceTypeName,
	"totals":     runTotals,
	"failed":     failedTypes,
}

// patientName is a patient's name as the pages show it.
func patientName(p domain.Patient) string {
	return strings.TrimSpace(strings.Join(p.GivenNames, " ") + " " + p.FamilyName)
}

// roleName is a role in words.
func roleName(r domain.Role) string {
	if r == domain.RoleNone {
		return "no role"
	}
	return strings.ReplaceAll(string(r), "_", " ")
}
