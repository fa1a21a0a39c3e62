package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"exchange/domain"
	"exchange/handlers/handlerstest"
)

// TestInvitationAcceptance: a manager invites a patient to the console;
// the link and its QR code are shown once; the patient opens the link,
// a refused password keeps the invitation (the reason beside the field),
// a good one uses it, and the confirmation that follows signs the patient
// in with their email filled in. The link then no longer works.
func TestInvitationAcceptance(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	// A patient created without a password, as the console creates them.
	p, err := f.env.Service.CreatePatient(ctx, domain.SystemActor(), domain.NewPatient{Email: "invited@example.org", FamilyName: "Ito",
		GivenNames: []string{"Iris"}, OrganizationIDs: []int64{f.org.ID}})
	if err != nil {
		t.Fatal(err)
	}
	resp, page := f.callers["manager"].post(f.env, "/console/patients/"+itoa(p.ID)+"/invitations", url.Values{"for": {"console"}})
	if resp.StatusCode != http.StatusCreated || !strings.Contains(page, `class="qr"`) {
		t.Fatalf("invite: %d\n%s", resp.StatusCode, page)
	}
	link := between(page, `<code class="secret" id="invitation-link">`, `</code>`)
	u, err := url.Parse(strings.ReplaceAll(link, "&amp;", "&"))
	if err != nil || u.Host != strings.TrimPrefix(f.env.URL, "http://") || u.Path != "/console/invitation/" || u.Query().Get("code") == "" {
		t.Fatalf("invitation link %q", link)
	}
	// The page lists the invitation, waiting; the home page counts it.
	if _, home := f.callers["manager"].b.Do("GET", f.env.URL+"/console/", nil); !strings.Contains(home, "Iris Ito</a>: sent") {
		t.Error("the home page does not list the invitation not redeemed")
	}

	b := handlerstest.NewBrowser(t, func(*url.URL) bool { return true })
	resp, page = b.Do("GET", u.String(), nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "invited@example.org") {
		t.Fatalf("invitation page: %d\n%s", resp.StatusCode, page)
	}
	action, fields := handlerstest.Form(t, page)
	submit := func(password, confirm string) (*http.Response, string) {
		form := url.Values{}
		for k, v := range fields {
			form[k] = v
		}
		form.Set("password", password)
		form.Set("confirm", confirm)
		return b.Do("POST", f.env.URL+action, form)
	}
	if resp, page = submit("short", "short"); resp.StatusCode != http.StatusBadRequest || !besideField(page, "password") {
		t.Errorf("a short password: %d, want 400 with the reason beside the password\n%s", resp.StatusCode, page)
	}
	if resp, page = submit("a good long password", "another password"); resp.StatusCode != http.StatusBadRequest || !besideField(page, "confirm") {
		t.Errorf("different passwords: %d, want 400 with the reason beside the second password\n%s", resp.StatusCode, page)
	}
	resp, page = submit("a good long password", "a good long password")
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "Your password is set") {
		t.Fatalf("accept: %d\n%s", resp.StatusCode, page)
	}
	// The confirmation signs in on the exchange's login, the email filled in.
	signIn, signInFields := handlerstest.Form(t, page)
	if signIn != "/o/login/" || signInFields.Get("next") != "/console/" || !strings.Contains(page, `name="email" value="invited@example.org"`) {
		t.Fatalf("the confirmation's form: %s %v\n%s", signIn, signInFields, page)
	}
	signInFields.Set("email", "invited@example.org")
	signInFields.Set("password", "a good long password")
	if resp, _ := b.Do("POST", f.env.URL+signIn, signInFields); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/" {
		t.Errorf("sign in from the confirmation: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, _ = submit("a good long password", "a good long password"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the link used twice: %d", resp.StatusCode)
	}
	if resp, _ = b.Do("GET", u.String(), nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the used link opened: %d", resp.StatusCode)
	}
	if _, err := f.env.Service.Authenticate(ctx, "invited@example.org", "a good long password", "10.0.0.9"); err != nil {
		t.Errorf("sign in with the chosen password: %v", err)
	}
	if _, home := f.callers["manager"].b.Do("GET", f.env.URL+"/console/patients/"+itoa(p.ID)+"/", nil); !strings.Contains(home, "redeemed") {
		t.Error("the patient's page does not show the invitation redeemed")
	}
	// A made-up code shows the same refusal as a used one.
	if resp, _ = b.Do("GET", f.env.URL+"/console/invitation/?code=made.up", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("a made-up code: %d", resp.StatusCode)
	}
}

func itoa(id int64) string { return strconv.FormatInt(id, 10) }

func between(s, start, end string) string {
	i := strings.Index(s, start)
	if i < 0 {
		return ""
	}
	s = s[i+len(start):]
	if j := strings.Index(s, end); j >= 0 {
		return s[:j]
	}
	return s
}
