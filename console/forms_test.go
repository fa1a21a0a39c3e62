package console_test

import (
	"fmt"
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"exchange/domain"
)

// TestRefusedFormsKeepWhatWasTyped: every form that takes what a user
// types, refused (a taken email or identifier, an unknown practitioner, an
// empty name, a redirect URI that is not allowed, ...), answers its page
// again with the refusal's status: the form holds what was typed, and the
// reason stands right before the field at fault, which names it and is
// marked invalid. Before, most forms answered a bare error page and what
// was typed was lost.
func TestRefusedFormsKeepWhatWasTyped(t *testing.T) {
	f := newFixture(t)
	patient := fmt.Sprintf("/console/patients/%d/", f.patient.ID)
	for _, tc := range []struct {
		name, caller, path string
		form               url.Values
		status             int
		field              string   // the id of the field the reason is beside
		typed              []string // values the answer's form holds again
		also               []string // more the answer holds
	}{
		{"a taken email", "manager", "/console/patients/",
			url.Values{"given": {"Ann"}, "family": {"Other"}, "email": {"pat@example.org"}, "birthDate": {"1990-02-03"}, "organization": {itoa(f.org.ID)}},
			http.StatusConflict, "p-email", []string{"Ann", "Other", "pat@example.org", "1990-02-03"}, nil},
		{"an identifier of another patient", "manager", "/console/patients/",
			url.Values{"given": {"Ann"}, "family": {"Other"}, "email": {"ann@example.org"}, "organization": {itoa(f.org.ID)},
				"identifierSystem": {"urn:mrn"}, "identifierValue": {"taken-1"}},
			http.StatusConflict, "p-value", []string{"ann@example.org", "urn:mrn", "taken-1"}, nil},
		{"a birth date in the future", "manager", "/console/patients/",
			url.Values{"given": {"Ann"}, "family": {"Other"}, "email": {"ann@example.org"}, "birthDate": {"2999-01-01"}, "organization": {itoa(f.org.ID)}},
			http.StatusBadRequest, "p-birth", []string{"ann@example.org", "2999-01-01"}, nil},
		{"an identifier taken, added to a patient", "manager", patient + "identifiers",
			url.Values{"system": {"urn:mrn"}, "value": {"taken-1"}}, http.StatusConflict, "id-value", []string{"urn:mrn", "taken-1"}, nil},
		{"an identifier system that is no URI", "manager", patient + "identifiers",
			url.Values{"system": {"mrn"}, "value": {"77"}}, http.StatusBadRequest, "id-system", []string{"mrn", "77"}, nil},
		{"an unknown practitioner", "manager", fmt.Sprintf("/console/organizations/%d/members", f.org.ID),
			url.Values{"email": {"nobody@example.org"}, "role": {"viewer"}}, http.StatusBadRequest, "new-email", []string{"nobody@example.org"}, nil},
		{"a study without a name", "manager", "/console/studies/",
			url.Values{"name": {" "}, "description": {"Typed at length"}, "organization": {itoa(f.org.ID)}},
			http.StatusBadRequest, "study-name", []string{"Typed at length"}, nil},
		{"a patient enrolled already", "manager", fmt.Sprintf("/console/studies/%d/enroll", f.study.ID),
			url.Values{"patient": {itoa(f.patient.ID)}}, http.StatusConflict, "enroll-patient", nil, nil},
		{"a data source without a name", "superuser", "/console/data-sources",
			url.Values{"name": {""}, "type": {"medical_device"}}, http.StatusBadRequest, "ds-name", nil, nil},
		{"a FHIR source without a label", "manager", "/console/fhir-sources",
			url.Values{"patient": {itoa(f.patient.ID)}, "label": {""}}, http.StatusBadRequest, "fs-label", nil, nil},
		{"a redirect URI over http", "superuser", "/console/clients/",
			url.Values{"name": {"Typed app name"}, "type": {"public"}, "grant": {"authorization_code"}, "algorithm": {"RS256"},
				"redirectUris": {"http://app.example.org/cb"}},
			http.StatusBadRequest, "c-redirect", []string{"Typed app name", "http://app.example.org/cb"}, nil},
		{"an identity provider's malformed id", "superuser", "/console/identity-providers/",
			url.Values{"kind": {"oidc"}, "id": {"Not An Id"}, "name": {"Typed provider"}, "issuer": {"https://idp.example.org"},
				"clientId": {"typed-client"}, "clientSecret": {"never shown again"}, "firstSignIn": {"invited"}},
			http.StatusBadRequest, "p-id", []string{"Not An Id", "Typed provider", "typed-client"}, nil},
		// The invitation's choices are one group, each on its line; the
		// choice made stays made.
		{"an app invitation without the app", "manager", patient + "invitations",
			url.Values{"for": {"app"}, "client": {""}}, http.StatusBadRequest, "client", nil,
			[]string{`<fieldset class="choices"><legend>Invite`, `<div class="choice"><input type="radio" id="for-app" name="for" value="app" checked>`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "an identifier of another patient" || tc.name == "an identifier taken, added to a patient" {
				f.takeIdentifier(t, "urn:mrn", "taken-1")
			}
			resp, page := f.callers[tc.caller].post(f.env, tc.path, tc.form)
			if resp.StatusCode != tc.status {
				t.Fatalf("POST %s: %d, want %d\n%.2000s", tc.path, resp.StatusCode, tc.status, page)
			}
			if !strings.Contains(page, `<form method="post"`) || !besideField(page, tc.field) {
				t.Errorf("the answer has no reason beside #%s:\n%s", tc.field, page)
			}
			if strings.Contains(page, "never shown again") {
				t.Error("the answer shows a secret that was typed")
			}
			for _, want := range tc.also {
				if !strings.Contains(page, want) {
					t.Errorf("the answer lacks %q", want)
				}
			}
			for _, v := range tc.typed {
				if !strings.Contains(page, `value="`+html.EscapeString(v)+`"`) && !strings.Contains(page, ">"+html.EscapeString(v)+"</textarea>") {
					t.Errorf("the form does not hold %q again", v)
				}
			}
		})
	}
}

// takeIdentifier gives the identifier to a patient of another organization
// (once).
func (f *fixture) takeIdentifier(t *testing.T, system, value string) {
	t.Helper()
	p, err := f.env.Service.PatientByID(t.Context(), domain.SystemActor(), f.outsiderPatient.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range p.Identifiers {
		if id.System == system && id.Value == value {
			return
		}
	}
	if _, err := f.env.Service.UpdatePatient(t.Context(), domain.SystemActor(), p.ID, domain.PatientPatch{AddIdentifiers: []domain.Identifier{{System: system, Value: value}}}); err != nil {
		t.Fatal(err)
	}
}

// besideField reports whether a page shows a reason right before the
// input with the id, which names it in aria-describedby and is marked
// invalid.
func besideField(page, id string) bool {
	reason := strings.Index(page, `<p class="error field" id="`+id+`-error" role="alert">`)
	input := strings.Index(page, `id="`+id+`"`)
	tag := between(page[max(input, 0):], "", ">")
	return reason >= 0 && input > reason && strings.Contains(tag, `aria-invalid="true"`) && strings.Contains(tag, id+"-error")
}
