package mcp_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/oauth2"

	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/oauth"
	"exchange/repo/repotest"
)

// serviceScopes are the scopes the gateway asks the service for.
var serviceScopes = strings.Join(oauth.GatewayScopes, " ")

// TestGatewayTokensCannotWrite: the token the gateway obtains for a user
// carries read scopes only (user/*.rs, exchange/admin.read): every tool
// works with it, and the same token, taken to the service directly, can
// write nothing, though the user (a manager) may.
func TestGatewayTokensCannotWrite(t *testing.T) {
	s := newStack(t)
	w := s.seed(t)
	g := s.startGateway(t, nil)
	_, tok := g.tokens(t, w.managerA)
	if got := tok.Extra("scope"); got != "openid profile email offline_access fhirUser user/*.rs exchange/admin.read" {
		t.Errorf("the gateway's grant: %v", got)
	}
	checkEveryTool(t, w, g.mcpClient(t, tok.AccessToken))

	ctx := context.Background()
	src, err := s.env.Service.CreateFHIRSource(ctx, domain.SystemActor(), w.patientA, 0, "EHR")
	if err != nil {
		t.Fatal(err)
	}
	dp := `{"header": {"id": "x", "creation_date_time": "2025-03-04T08:00:00Z", "schema_id": {"namespace": "omh", "name": "heart-rate", "version": "2.0"}},
		"body": {"heart_rate": {"value": 70, "unit": "beats/min"}, "effective_time_frame": {"date_time": "2025-03-04T08:00:00Z"}}}`
	observation := map[string]any{"resourceType": "Observation", "status": "final",
		"code":            map[string]any{"coding": []any{map[string]string{"system": domain.SystemOpenMHealth, "code": heartRate}}},
		"subject":         map[string]string{"reference": fmt.Sprintf("Patient/%d", w.patientA)},
		"device":          map[string]string{"reference": "Device/1"},
		"valueAttachment": map[string]string{"contentType": "application/json", "data": base64.StdEncoding.EncodeToString([]byte(dp))}}
	condition := map[string]any{"resourceType": "Condition", "subject": map[string]string{"reference": "Patient/x"},
		"clinicalStatus": map[string]any{"coding": []any{map[string]string{"system": "http://terminology.hl7.org/CodeSystem/condition-clinical", "code": "active"}}}}
	source := map[string]string{domain.SourceHeader: fmt.Sprint(src.ID)}
	before := repotest.Snapshot(t, s.env.DB)
	for _, tc := range []struct {
		name, method, path string
		body               any
		header             map[string]string
	}{
		{"a native Observation", "POST", "/FHIR/R5/Observation", observation, nil},
		{"an imported Condition", "POST", "/FHIR/R5/Condition", condition, source},
		{"a batch", "POST", "/FHIR/R5", map[string]any{"resourceType": "Bundle", "type": "batch", "entry": []any{
			map[string]any{"request": map[string]string{"method": "POST", "url": "Observation"}, "resource": observation}}}, nil},
		{"an R4 import", "POST", "/fhir-import/R4/Condition", condition, source},
		{"a study", "POST", "/api/v1/studies", map[string]any{"organizationId": w.orgA, "name": "Written through the gateway"}, nil},
		{"a patient's record", "PATCH", fmt.Sprintf("/api/v1/patients/%d", w.patientA), map[string]any{"phone": "+1-555-0100"}, nil},
		{"an enrollment", "DELETE", fmt.Sprintf("/api/v1/studies/%d/patients", w.studyA), map[string]any{"patientIds": []int64{w.patientA}}, nil},
	} {
		resp, out := handlerstest.SendTo(t, tc.method, s.env.URL+tc.path, tok.AccessToken, tc.body, tc.header)
		refused := resp.StatusCode == http.StatusForbidden
		if resp.StatusCode == http.StatusOK && out["type"] == "batch-response" { // refused entry by entry
			entry, _ := out["entry"].([]any)[0].(map[string]any)
			refused = entry["response"].(map[string]any)["status"] == "403 Forbidden"
		}
		if !refused {
			t.Errorf("writing %s with the gateway's token: %d %v", tc.name, resp.StatusCode, out)
		}
	}
	if !reflect.DeepEqual(before, repotest.Snapshot(t, s.env.DB)) {
		t.Error("a write with the gateway's token changed the database")
	}
	// The manager's own full-access token may write the same study.
	if resp, out := s.env.Send(t, "POST", "/api/v1/studies", s.userToken(t, w.managerA), map[string]any{"organizationId": w.orgA, "name": "Written directly"}); resp.StatusCode != http.StatusCreated {
		t.Errorf("the manager's own token: %d %v", resp.StatusCode, out)
	}
}

// TestGatewayAsksForItsRegisteredScopes: the gateway advertises and asks
// for exactly the scopes the service registers its client for, and refuses
// a client's request for any other.
func TestGatewayAsksForItsRegisteredScopes(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(t, nil)
	_, as := getJSON(t, g.URL+"/.well-known/oauth-authorization-server")
	if got := fmt.Sprint(as["scopes_supported"]); got != fmt.Sprint(oauth.GatewayScopes) {
		t.Errorf("scopes_supported %s, want the registered %v", got, oauth.GatewayScopes)
	}
	clientID := g.registerClient(t)
	// A browser that approved the client: errors go back to it
	// (TestAuthorizeErrorsRedirectNowhereBeforeApproval).
	b := stepper(t)
	allow(t, b, g.oauthConfig(clientID).AuthCodeURL(clientState, oauth2.S256ChallengeOption(oauth2.GenerateVerifier())))
	for scope, want := range map[string]string{
		"openid user/*.cruds":                  "invalid_scope",
		"exchange/admin.write":                 "invalid_scope",
		"openid user/*.rs patient/*.rs":        "invalid_scope",
		"openid user/*.rs exchange/admin.read": "",
		"":                                     "",
	} {
		q := url.Values{"client_id": {clientID}, "redirect_uri": {clientRedirect}, "response_type": {"code"}, "state": {clientState}, "scope": {scope},
			"code_challenge": {oauth2.S256ChallengeFromVerifier(oauth2.GenerateVerifier())}, "code_challenge_method": {"S256"}}
		resp, _ := b.Do("GET", g.URL+"/authorize?"+q.Encode(), nil)
		loc, _ := url.Parse(resp.Header.Get("Location"))
		if want == "" && (resp.StatusCode != http.StatusFound || !strings.Contains(loc.String(), "/o/authorize/")) {
			t.Errorf("scope %q: %d to %s, want forwarded to the service", scope, resp.StatusCode, loc)
		}
		if want != "" && (resp.StatusCode != http.StatusFound || !strings.HasPrefix(loc.String(), clientRedirect) || loc.Query().Get("error") != want) {
			t.Errorf("scope %q: %d to %s, want %s", scope, resp.StatusCode, loc, want)
		}
	}
}

// editedScope follows the link the gateway forwards a browser to, with its
// scope replaced, signing in when the service asks, and returns what
// reached the client.
func editedScope(t *testing.T, b *recordingBrowser, g *gateway, authURL, email, scope string) url.Values {
	t.Helper()
	link := b.forwarded(t, authURL)
	q := link.Query()
	q.Set("scope", scope)
	link.RawQuery = q.Encode()
	b.reached = nil
	resp, page := b.Do("GET", link.String(), nil)
	if strings.Contains(page, `type="password"`) {
		resp, page = b.Login(page, email, handlerstest.Password)
	}
	if len(b.reached) != 1 {
		t.Fatalf("scope %q: reached %v, last %d at %s\n%s", scope, b.reached, resp.StatusCode, resp.Request.URL, page)
	}
	return b.reached[0].Query()
}

// TestEditedScopeInTheForwardedLinkGivesNoToken: the user (a manager, who
// may write) edits the scope of the link the gateway forwarded their own
// browser to. Asking for more than the gateway's client is registered for,
// or for scopes that name no access (which would act with the user's full
// access), the service refuses; asking for less, the gateway keeps the
// token to itself. No edit gives a token.
func TestEditedScopeInTheForwardedLinkGivesNoToken(t *testing.T) {
	s := newStack(t)
	w := s.seed(t)
	g := s.startGateway(t, nil)
	clientID := g.registerClient(t)
	b := newRecordingBrowser(t)
	verifier := oauth2.GenerateVerifier()
	cfg := g.oauthConfig(clientID)
	authURL := cfg.AuthCodeURL(clientState, oauth2.S256ChallengeOption(verifier))
	for _, scope := range []string{
		serviceScopes + " user/*.cruds exchange/admin.write",
		"openid user/Patient.cruds",
		"openid",
		"openid profile email offline_access fhirUser",
		"openid launch/patient patient/*.rs",
	} {
		q := editedScope(t, b, g, authURL, w.managerA, scope)
		if q.Get("error") != "invalid_scope" || q.Has("code") || q.Get("state") != clientState {
			t.Errorf("scope %q: the client received %v, want invalid_scope", scope, q)
		}
	}
	q := editedScope(t, b, g, authURL, w.managerA, "openid user/Patient.rs exchange/admin.read")
	if q.Get("code") == "" {
		t.Fatalf("a narrower scope: %v", q)
	}
	status, body := postToken(t, g, url.Values{"grant_type": {"authorization_code"}, "client_id": {clientID}, "code": {q.Get("code")},
		"code_verifier": {verifier}, "redirect_uri": {clientRedirect}})
	if status != http.StatusBadRequest || body["error"] != "invalid_grant" || body["access_token"] != nil {
		t.Errorf("a narrower scope's code: %d %v", status, body)
	}
}

// TestUnrepairedServiceGivesTheGatewayNoWriteToken: at a service whose
// registration of the gateway's client still allows every scope (seed not
// run since), an edited link obtains a write grant from the service, and
// the gateway hands it to no one.
func TestUnrepairedServiceGivesTheGatewayNoWriteToken(t *testing.T) {
	s := newStack(t)
	s.gatewayScopes = nil
	w := s.seed(t)
	g := s.startGateway(t, nil)
	clientID := g.registerClient(t)
	b := newRecordingBrowser(t)
	verifier := oauth2.GenerateVerifier()
	authURL := g.oauthConfig(clientID).AuthCodeURL(clientState, oauth2.S256ChallengeOption(verifier))
	for _, scope := range []string{serviceScopes + " user/*.cruds exchange/admin.write", "openid offline_access"} {
		q := editedScope(t, b, g, authURL, w.managerA, scope)
		status, body := postToken(t, g, url.Values{"grant_type": {"authorization_code"}, "client_id": {clientID}, "code": {q.Get("code")},
			"code_verifier": {verifier}, "redirect_uri": {clientRedirect}})
		if status != http.StatusBadRequest || body["error"] != "invalid_grant" || body["access_token"] != nil {
			t.Errorf("scope %q: %d %v", scope, status, body)
		}
	}
	// Unedited, the flow works as ever.
	if body := exchange(t, g, clientID, verifier, w.managerA); body["scope"] != serviceScopes {
		t.Errorf("the unedited flow: %v", body)
	}
}
