package oauth_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"exchange/handlers/handlerstest"
)

// TestEveryAnswerIsNosniff: every /o/ answer, page, JSON or error, says
// X-Content-Type-Options: nosniff, so that no browser reads it as
// another type than it says.
func TestEveryAnswerIsNosniff(t *testing.T) {
	env := handlerstest.Start(t)
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/o/login/", ""},
		{"GET", "/o/authorize/?client_id=nobody", ""},
		{"POST", "/o/token/", "grant_type=authorization_code&code=x"},
		{"GET", "/o/.well-known/openid-configuration", ""},
		{"GET", "/o/.well-known/jwks.json", ""},
		{"GET", "/o/userinfo/", ""},
		{"GET", "/o/no-such-page/", ""},
	} {
		req, err := http.NewRequest(c.method, env.URL+c.path, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		if c.body != "" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s %s: %d with X-Content-Type-Options %q", c.method, (&url.URL{Path: c.path}).Path, resp.StatusCode, got)
		}
	}
}
