package oauth_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

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
	patient := env.Patient(t, "pat@example.org")
	other := env.Patient(t, "other@example.org")
	app, _ := env.Client(t, oauth.ClientRegistration{Name: "Patient app", Type: domain.ClientPublic, RedirectURIs: []string{"https://app.example.test/invite", redirectURI}})

	appCode, err := env.OAuth.IssuePatientCode(ctx, patient.UserID, app.ID)
	if err != nil {
		t.Fatal(err)
	}
	console, err := env.OAuth.IssueConsoleInvitation(ctx, patient.UserID)
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
	authorize(t, env, oauthConfig(env, app.ID, ""), "pat@example.org", oauth2.GenerateVerifier())

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
	if len(list) != 2 || !list[1].Redeemed || list[1].Pending(env.Clock.Now()) {
		t.Errorf("a redeemed invitation is listed as redeemed: %+v", list)
	}

	// Re-issue replaces the app's link: the old code is refused, the new works.
	if err := env.OAuth.CancelInvitation(ctx, other.UserID, list[0].ID); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("cancelling another patient's invitation: %v", err)
	}
	fresh, err := env.OAuth.ReissueInvitation(ctx, patient.UserID, list[0].ID)
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
	if err := env.OAuth.CancelInvitation(ctx, patient.UserID, list[1].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.Exchange(ctx, fresh.Code, oauth2.VerifierOption(handlerstest.PatientVerifier)); !isOAuthError(err, "invalid_grant") {
		t.Errorf("a cancelled invitation's code: %v", err)
	}

	// Past its lifetime an invitation is no longer listed nor usable.
	late, err := env.OAuth.IssueConsoleInvitation(ctx, patient.UserID)
	if err != nil {
		t.Fatal(err)
	}
	env.Clock.Advance(handlerstest.PatientCodeTTL + 60*1e9)
	if list, _ = env.OAuth.Invitations(ctx, []int64{patient.UserID}); len(list) != 0 {
		t.Errorf("expired invitations listed: %+v", list)
	}
	u, _ := url.Parse(late.Link)
	if _, err := env.OAuth.ConsoleInvitationCode(ctx, u.Query().Get("code")); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("an expired console invitation: %v", err)
	}
}
