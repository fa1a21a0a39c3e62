package handlerstest

import (
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// Browser is a user agent for the exchange's HTML pages (login, consent):
// it keeps cookies, follows redirects except those its stop function
// refuses, and fills in forms. It is not safe for concurrent use.
type Browser struct {
	// Header is added to every request (such as the X-Forwarded-For a
	// proxy would add).
	Header http.Header
	t      testing.TB
	client *http.Client
	at     *url.URL // the URL of the last response: where form actions resolve
}

// Jar returns the browser's cookies.
func (b *Browser) Jar() http.CookieJar { return b.client.Jar }

// NewBrowser returns a browser without cookies. It follows every redirect
// except those to a URL for which stop reports true: Do answers those
// redirects themselves (nil stop: follow all).
func NewBrowser(t testing.TB, stop func(to *url.URL) bool) *Browser {
	jar, _ := cookiejar.New(nil)
	return &Browser{t: t, client: &http.Client{Jar: jar, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if stop != nil && stop(req.URL) {
			return http.ErrUseLastResponse
		}
		return nil
	}}}
}

// Do sends a request, form-encoding form as its body when it is not nil,
// and returns the final response and its body.
func (b *Browser) Do(method, rawURL string, form url.Values) (*http.Response, string) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, rawURL, body)
	if err != nil {
		b.t.Fatal(err)
	}
	for k, v := range b.Header {
		req.Header[k] = v
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := b.client.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	b.at = resp.Request.URL
	return resp, string(data)
}

// Submit posts the first form of page, its fields with set added (set
// replaces a field's values), to its action resolved against the URL of
// the last response.
func (b *Browser) Submit(page string, set url.Values) (*http.Response, string) {
	b.t.Helper()
	return b.SubmitForm(page, 0, set)
}

// SubmitForm posts the n-th form of page (from 0), as Submit does.
func (b *Browser) SubmitForm(page string, n int, set url.Values) (*http.Response, string) {
	b.t.Helper()
	action, fields, ok := parseForm(page, n)
	if !ok || b.at == nil {
		b.t.Fatalf("no form %d to submit at %v:\n%s", n, b.at, page)
	}
	for k, v := range set {
		fields[k] = v
	}
	to, err := b.at.Parse(action)
	if err != nil {
		b.t.Fatalf("form action %q: %v", action, err)
	}
	return b.Do("POST", to.String(), fields)
}

// Login submits the exchange's login page with an email and a password.
func (b *Browser) Login(page, email, password string) (*http.Response, string) {
	b.t.Helper()
	return b.Submit(page, url.Values{"email": {email}, "password": {password}})
}

var (
	formElement = regexp.MustCompile(`(?s)<form method="post" action="([^"]*)"[^>]*>(.*?)</form>`)
	inputTag    = regexp.MustCompile(`<input ([^>]*)>`)
	attribute   = regexp.MustCompile(`([a-z-]+)(?:="([^"]*)")?`)
)

// Form returns the action and the fields of the first form of page, as
// the page has them (the action unresolved).
func Form(t testing.TB, page string) (string, url.Values) {
	t.Helper()
	action, fields, ok := parseForm(page, 0)
	if !ok {
		t.Fatalf("no form in page:\n%s", page)
	}
	return action, fields
}

// parseForm reads the n-th post form of page: its action, and what a
// browser submits of it without a click: hidden fields, and the checked
// checkboxes and radio buttons that are not disabled.
func parseForm(page string, n int) (string, url.Values, bool) {
	forms := formElement.FindAllStringSubmatch(page, -1)
	if n >= len(forms) {
		return "", nil, false
	}
	fields := url.Values{}
	for _, tag := range inputTag.FindAllStringSubmatch(forms[n][2], -1) {
		attrs := map[string]string{}
		for _, a := range attribute.FindAllStringSubmatch(tag[1], -1) {
			attrs[a[1]] = html.UnescapeString(a[2])
		}
		_, checked := attrs["checked"]
		_, disabled := attrs["disabled"]
		name := attrs["name"]
		switch typ := attrs["type"]; {
		case name == "" || disabled:
		case typ == "hidden", (typ == "checkbox" || typ == "radio") && checked:
			fields.Add(name, attrs["value"])
		}
	}
	return html.UnescapeString(forms[n][1]), fields, true
}

// CSRF returns the browser's CSRF token for the exchange at base (the
// double-submit cookie's value), for a form a test posts by hand.
func CSRF(t testing.TB, b *Browser, base string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range b.Jar().Cookies(u) {
		if c.Name == "exchange_csrf" {
			return c.Value
		}
	}
	t.Fatalf("the browser has no CSRF cookie for %s", base)
	return ""
}
