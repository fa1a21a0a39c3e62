package oauth_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/oauth"
)

// TestInvitations: invitation codes are listed per patient (ordinary codes
// are not), cancelled and re-issued; a console invitation is a local link
// that works once, in the console only.
func TestInvitations(t *testing.T) {
	env := handlerstest.Start(t)
	ctx := context.Background()
	patient := env.Invitee(t, "pat@example.org")
	other := env.Invitee(t, "other@example.org")
	sys := domain.SystemActor()
	app, _ := env.Client(t, oauth.ClientRegistration{Name: "Patient app", Type: domain.ClientPublic, RedirectURIs: []string{"https://app.example.test/invite", redirectURI}})

	appCode, err := env.OAuth.IssuePatientCode(ctx, patient.UserID, app.ID)
	if err != nil {
		t.Fatal(err)
	}
	console, err := env.OAuth.IssuePatientCode(ctx, patient.UserID, oauth.ConsoleClientID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(console.Link, oauth.ConsoleInvitationPath+"?code=") {
		t.Fatalf("console invitation link %q", console.Link)
	}
	if got := oauth.AbsoluteLink(console.Link, "https://x.example"); got != "https://x.example"+console.Link {
		t.Errorf("AbsoluteLink = %q", got)
	}
	if got := oauth.AbsoluteLink(appCode.Link, "https://x.example"); got != appCode.Link {
		t.Errorf("AbsoluteLink of an app link = %q", got)
	}
	// An ordinary login's code is no invitation.
	env.Patient(t, "signed.in@example.org")
	authorize(t, env, oauthConfig(env, app.ID, ""), "signed.in@example.org", oauth2.GenerateVerifier())

	list, err := env.OAuth.Invitations(ctx, []int64{patient.UserID, other.UserID})
	if err != nil || len(list) != 2 || list[0].ClientID != app.ID || list[1].ClientID != oauth.ConsoleClientID {
		t.Fatalf("invitations = %+v, %v", list, err)
	}
	if !list[0].Pending(env.Clock.Now()) || list[0].UserID != patient.UserID {
		t.Errorf("a new invitation is pending: %+v", list[0])
	}

	// The console's code works in the console only, once.
	if _, err := env.OAuth.ConsoleInvitationUser(ctx, appCode.Code); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("an app's code opened the console: %v", err)
	}
	code, _ := url.Parse(console.Link)
	secret := code.Query().Get("code")
	if _, err := env.OAuth.ConsoleInvitationUser(ctx, secret+"x"); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("a tampered code: %v", err)
	}
	// The token endpoint refuses it, even with the patient codes' verifier
	// (a reference value by default), and leaves it usable.
	consoleCfg := oauthConfig(env, oauth.ConsoleClientID, "")
	consoleCfg.RedirectURL = oauth.ConsoleInvitationPath
	if _, err := consoleCfg.Exchange(ctx, secret, oauth2.VerifierOption(handlerstest.PatientVerifier)); !isOAuthError(err, "invalid_client") {
		t.Errorf("a console invitation redeemed at the token endpoint: %v", err)
	}
	if id, err := env.OAuth.ConsoleInvitationUser(ctx, secret); err != nil || id != patient.UserID {
		t.Fatalf("peek = %d, %v", id, err)
	}
	// Re-issue replaces the app's link: the old code is refused, the new works.
	if err := env.OAuth.CancelPatientInvitation(ctx, sys, other.ID, list[0].ID); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("cancelling another patient's invitation: %v", err)
	}
	fresh, err := env.OAuth.Reinvite(ctx, sys, patient.ID, list[0].ID, env.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg := oauthConfig(env, app.ID, "")
	cfg.RedirectURL = app.RedirectURIs[0]
	if _, err := cfg.Exchange(ctx, appCode.Code, oauth2.VerifierOption(handlerstest.PatientVerifier)); !isOAuthError(err, "invalid_grant") {
		t.Errorf("a re-issued invitation's old code: %v", err)
	}
	list, _ = env.OAuth.Invitations(ctx, []int64{patient.UserID})
	if len(list) != 2 || list[1].ClientID != app.ID || !list[1].Pending(env.Clock.Now()) {
		t.Fatalf("after re-issue: %+v", list)
	}
	if err := env.OAuth.CancelPatientInvitation(ctx, sys, patient.ID, list[1].ID); err != nil {
		t.Fatal(err)
	}
	freshLink, _ := url.Parse(fresh.Link)
	if _, err := cfg.Exchange(ctx, freshLink.Query().Get("code"), oauth2.VerifierOption(handlerstest.PatientVerifier)); !isOAuthError(err, "invalid_grant") {
		t.Errorf("a cancelled invitation's code: %v", err)
	}

	redeem := func(password string) error {
		t.Helper()
		c, err := env.OAuth.ConsoleInvitationCode(ctx, secret)
		if err != nil {
			return err
		}
		if c.UserID != patient.UserID {
			t.Fatalf("the code is for user %d, want %d", c.UserID, patient.UserID)
		}
		return env.Service.AcceptInvitation(ctx, c, password)
	}
	if err := redeem("the first password"); err != nil {
		t.Fatalf("redeem: %v", err)
	}
	if err := redeem("another password"); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("second redemption: %v", err)
	}
	if _, err := env.OAuth.ConsoleInvitationCode(ctx, secret+"x"); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("a tampered code, used: %v", err)
	}
	list, _ = env.OAuth.Invitations(ctx, []int64{patient.UserID})
	if len(list) != 1 || !list[0].Redeemed || list[0].Pending(env.Clock.Now()) {
		t.Errorf("a redeemed invitation is listed as redeemed: %+v", list)
	}

	// Past its lifetime an invitation is no longer listed nor usable.
	late, err := env.OAuth.IssuePatientCode(ctx, other.UserID, oauth.ConsoleClientID)
	if err != nil {
		t.Fatal(err)
	}
	env.Clock.Advance(handlerstest.PatientCodeTTL + 60*1e9)
	if list, _ = env.OAuth.Invitations(ctx, []int64{patient.UserID, other.UserID}); len(list) != 0 {
		t.Errorf("expired invitations listed: %+v", list)
	}
	u, _ := url.Parse(late.Link)
	if _, err := env.OAuth.ConsoleInvitationCode(ctx, u.Query().Get("code")); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("an expired console invitation: %v", err)
	}
}

// invitationWorld is an organization with a manager and a member, and an
// app that patients connect with invitations.
type invitationWorld struct {
	env             *handlerstest.Env
	org             *domain.Organization
	manager, member string // tokens
	app             *domain.OAuthClient
}

func newInvitationWorld(t *testing.T, o handlerstest.Options) *invitationWorld {
	env := handlerstest.StartWith(t, o)
	ctx := context.Background()
	env.Invitee(t, "first@example.org") // makes the test organization
	org, err := env.Service.OrganizationByName(ctx, "Test Organization", 0)
	if err != nil {
		t.Fatal(err)
	}
	w := &invitationWorld{env: env, org: org}
	for role, token := range map[domain.Role]*string{domain.RoleManager: &w.manager, domain.RoleMember: &w.member} {
		u := env.Practitioner(t, string(role)+"@example.org", false)
		if err := env.Service.AddMember(ctx, domain.SystemActor(), org.ID, u.ID, role); err != nil {
			t.Fatal(err)
		}
		*token = env.Token(t, u.ID)
	}
	w.app, _ = env.Client(t, oauth.ClientRegistration{Name: "Patient app", Type: domain.ClientPublic, RedirectURIs: []string{"https://app.example.test/invite"}})
	return w
}

// invite sends POST /patients/{id}/invitation and checks the status.
func (w *invitationWorld) invite(t *testing.T, token string, patient int64, body map[string]any, want int) map[string]any {
	t.Helper()
	resp, out := w.env.Send(t, "POST", fmt.Sprintf("/api/v1/patients/%d/invitation", patient), token, body)
	if resp.StatusCode != want {
		t.Fatalf("invitation of patient %d with %v: %d %v, want %d", patient, body, resp.StatusCode, out, want)
	}
	return out
}

// redeemApp redeems an app invitation link at the token endpoint, as the
// app (or anyone holding the link: the verifier is published) would.
func (w *invitationWorld) redeemApp(link string) (*oauth2.Token, error) {
	u, err := url.Parse(link)
	if err != nil {
		return nil, err
	}
	cfg := oauthConfig(w.env, w.app.ID, "")
	cfg.RedirectURL = w.app.RedirectURIs[0]
	return cfg.Exchange(context.Background(), u.Query().Get("code"), oauth2.VerifierOption(handlerstest.PatientVerifier))
}

// TestInvitationCannotTakeOverALogin: a member cannot invite a patient who
// has a login, for an app or the console, and so cannot become them; a
// manager replaces the login only by asking to, which ends it at once
// (password, tokens) and leaves events in the patient's audit trail.
func TestInvitationCannotTakeOverALogin(t *testing.T) {
	w := newInvitationWorld(t, handlerstest.Options{Audit: true})
	ctx := context.Background()
	patient := w.env.Patient(t, "has.login@example.org")
	old := w.env.Token(t, patient.UserID)
	for _, client := range []string{w.app.ID, oauth.ConsoleClientID} {
		w.invite(t, w.member, patient.ID, map[string]any{"clientId": client}, http.StatusConflict)
		w.invite(t, w.manager, patient.ID, map[string]any{"clientId": client}, http.StatusConflict)
		w.invite(t, w.member, patient.ID, map[string]any{"clientId": client, "replaceLogin": true}, http.StatusForbidden)
	}
	if list, _ := w.env.OAuth.Invitations(ctx, []int64{patient.UserID}); len(list) != 0 {
		t.Fatalf("refused invitations were issued: %+v", list)
	}
	if _, err := w.env.Service.Authenticate(ctx, "has.login@example.org", handlerstest.Password, "192.0.2.1"); err != nil {
		t.Fatalf("the patient's password after refused invitations: %v", err)
	}
	profile(t, w.env, old, http.StatusOK)

	// Even a code issued around the rules does not redeem while the
	// patient has a login.
	code, err := w.env.OAuth.IssuePatientCode(ctx, patient.UserID, w.app.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.redeemApp(code.Link); !isOAuthError(err, "invalid_grant") {
		t.Errorf("an invitation of a patient with a login redeemed: %v", err)
	}

	out := w.invite(t, w.manager, patient.ID, map[string]any{"clientId": oauth.ConsoleClientID, "replaceLogin": true}, http.StatusCreated)
	if out["loginReplaced"] != true || out["delivery"] != "link" {
		t.Errorf("a replacement: %v", out)
	}
	if _, err := w.env.Service.Authenticate(ctx, "has.login@example.org", handlerstest.Password, "192.0.2.1"); !domain.IsCode(err, domain.CodeLogin) {
		t.Errorf("the replaced password still signs in: %v", err)
	}
	profile(t, w.env, old, http.StatusUnauthorized)
	link, _ := url.Parse(fmt.Sprint(out["invitationLink"]))
	c, err := w.env.OAuth.ConsoleInvitationCode(ctx, link.Query().Get("code"))
	if err != nil {
		t.Fatalf("the replacement's invitation: %v", err)
	}
	if err := w.env.Service.AcceptInvitation(ctx, c, "a brand new password"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.env.Service.Authenticate(ctx, "has.login@example.org", "a brand new password", "192.0.2.1"); err != nil {
		t.Errorf("the new password: %v", err)
	}

	// The patient reads both acts in their own audit trail.
	mine := w.env.Token(t, patient.UserID)
	for _, code := range []string{"login-replaced", "invitation"} {
		if got := auditCodes(t, w.env, mine, patient.ID, code); got == 0 {
			t.Errorf("no %s event in the patient's audit trail", code)
		}
	}
}

// auditCodes counts the AuditEvents of a code about the patient that the
// token reads, once the trail has written them.
func auditCodes(t *testing.T, env *handlerstest.Env, token string, patient int64, code string) int {
	t.Helper()
	var n int
	for range 50 {
		resp, out := env.GetJSON(t, fmt.Sprintf("/FHIR/R5/AuditEvent?patient=%d&_count=100", patient), token)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("audit events: %d %v", resp.StatusCode, out)
		}
		entries, _ := out["entry"].([]any)
		n = 0
		for _, e := range entries {
			if strings.Contains(fmt.Sprint(e), "code:"+code) {
				n++
			}
		}
		if n > 0 {
			return n
		}
		time.Sleep(100 * time.Millisecond)
	}
	return n
}

// TestRedeemingAnInvitationEndsTheOthers: a patient without a login is
// invited by a member; once one invitation is redeemed, the patient has a
// login, the others no longer work and no new one is issued.
func TestRedeemingAnInvitationEndsTheOthers(t *testing.T) {
	w := newInvitationWorld(t, handlerstest.Options{})
	ctx := context.Background()
	patient := w.env.Invitee(t, "new@example.org")
	first := w.invite(t, w.member, patient.ID, map[string]any{"clientId": w.app.ID}, http.StatusCreated)
	second := w.invite(t, w.member, patient.ID, map[string]any{"clientId": w.app.ID}, http.StatusCreated)
	console := w.invite(t, w.member, patient.ID, map[string]any{"clientId": oauth.ConsoleClientID}, http.StatusCreated)
	if first["delivery"] != "link" || first["loginReplaced"] != false {
		t.Errorf("an invitation without a delivery channel: %v", first)
	}
	tok, err := w.redeemApp(fmt.Sprint(first["invitationLink"]))
	if err != nil {
		t.Fatalf("redeeming the first invitation: %v", err)
	}
	profile(t, w.env, tok.AccessToken, http.StatusOK)
	if _, err := w.redeemApp(fmt.Sprint(second["invitationLink"])); !isOAuthError(err, "invalid_grant") {
		t.Errorf("a second invitation after the first was redeemed: %v", err)
	}
	link, _ := url.Parse(fmt.Sprint(console["invitationLink"]))
	if _, err := w.env.OAuth.ConsoleInvitationUser(ctx, link.Query().Get("code")); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("a console invitation after an app's was redeemed: %v", err)
	}
	w.invite(t, w.member, patient.ID, map[string]any{"clientId": w.app.ID}, http.StatusConflict)
	// The app's tokens stand.
	profile(t, w.env, tok.AccessToken, http.StatusOK)
}

// TestConsoleInvitationOnAFreshService: the documented call with the
// built-in client exchange-console works before anything made its client.
func TestConsoleInvitationOnAFreshService(t *testing.T) {
	w := newInvitationWorld(t, handlerstest.Options{})
	patient := w.env.Invitee(t, "console@example.org")
	out := w.invite(t, w.member, patient.ID, map[string]any{"clientId": oauth.ConsoleClientID}, http.StatusCreated)
	link := fmt.Sprint(out["invitationLink"])
	if !strings.HasPrefix(link, w.env.URL+oauth.ConsoleInvitationPath+"?code=") {
		t.Fatalf("console invitation link %q", link)
	}
	b := newBrowser(t, w.env)
	if resp, page := b.Do("GET", link, nil); resp.StatusCode != http.StatusOK || !strings.Contains(page, "console@example.org") {
		t.Errorf("the invitation page: %d", resp.StatusCode)
	}
}

// TestInvitationsGoByEmail: with a delivery channel, the invitation goes
// to the patient's address and its creator never sees the link; a
// replacement tells the patient.
func TestInvitationsGoByEmail(t *testing.T) {
	mail := handlerstest.StartMailServer(t)
	w := newInvitationWorld(t, handlerstest.Options{Mailer: mail.Mailer, PublicURL: "https://exchange.example.test"})
	patient := w.env.Invitee(t, "emailed@example.org")
	out := w.invite(t, w.member, patient.ID, map[string]any{"clientId": w.app.ID}, http.StatusCreated)
	if out["delivery"] != "email" || out["sentTo"] != "e•••@example.org" || out["invitationLink"] != nil {
		t.Fatalf("an emailed invitation's answer: %v", out)
	}
	if strings.Contains(fmt.Sprint(out), "code=") {
		t.Fatalf("the answer carries a code: %v", out)
	}
	inbox := mail.To("emailed@example.org")
	if len(inbox) != 1 {
		t.Fatalf("%d messages to the patient, want 1", len(inbox))
	}
	link := regexp.MustCompile(`https://app\.example\.test/invite\?code=\S+`).FindString(inbox[0].Text)
	if link == "" {
		t.Fatalf("no link in the message: %q", inbox[0].Text)
	}
	if _, err := w.redeemApp(link); err != nil {
		t.Fatalf("redeeming the emailed link: %v", err)
	}

	// A replacement: the patient is told, and the new link goes to them,
	// on the service's public URL whatever Host the request named (else
	// the sender of the request would receive the patient's code).
	resp, out := handlerstest.SendTo(t, "POST", fmt.Sprintf("%s/api/v1/patients/%d/invitation", w.env.URL, patient.ID), w.manager,
		map[string]any{"clientId": oauth.ConsoleClientID, "replaceLogin": true}, map[string]string{"Host": "attacker.example"})
	if resp.StatusCode != http.StatusCreated || out["loginReplaced"] != true || out["invitationLink"] != nil {
		t.Errorf("an emailed replacement's answer: %d %v", resp.StatusCode, out)
	}
	inbox = mail.To("emailed@example.org")
	if len(inbox) != 3 || !strings.Contains(inbox[1].Subject, "login was replaced") ||
		!strings.Contains(inbox[2].Text, "https://exchange.example.test"+oauth.ConsoleInvitationPath) || strings.Contains(inbox[2].Text, "attacker.example") {
		t.Errorf("after a replacement the patient has %d messages: %+v", len(inbox), inbox)
	}
}
