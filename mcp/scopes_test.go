package mcp_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"reflect"
	"testing"

	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/repo/repotest"
)

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
