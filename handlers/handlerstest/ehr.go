package handlerstest

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"exchange/domain"
	"exchange/smartclient"
	"exchange/smartclient/ehrtest"
)

// EHRCallbackPath is the console's callback of EHR connections
// (console.EHRCallbackPath).
const EHRCallbackPath = "/console/records/callback"

// FastEHRClient is the exchange's client of EHRs with short waits between
// retries, for Options.EHR.
func FastEHRClient() *smartclient.Client {
	c := smartclient.New()
	c.Retries, c.Backoff = 2, func(int) time.Duration { return 5 * time.Millisecond }
	return c
}

// RegisterEHR makes a test EHR a brand of the exchange, with the
// exchange's client registration at it, and returns the brand's id.
func (e *Env) RegisterEHR(t testing.TB, ehr *ehrtest.EHR, name string) int64 {
	t.Helper()
	ctx, sys := context.Background(), domain.SystemActor()
	ehr.RedirectURI = e.URL + EHRCallbackPath
	bundle := `{"resourceType": "Bundle", "type": "collection", "entry": [
		{"resource": {"resourceType": "Endpoint", "id": "ep", "status": "active", "connectionType": {"code": "hl7-fhir-rest"}, "address": "` + ehr.Base + `"}},
		{"resource": {"resourceType": "Organization", "id": "brand", "name": "` + name + `", "endpoint": [{"reference": "Endpoint/ep"}]}}]}`
	if _, err := e.Service.ImportEHRBrands(ctx, sys, []byte(bundle), "test-"+name); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Service.SetEHRClient(ctx, sys, domain.EHRClientChange{Vendor: "test-" + name, ClientID: ehr.ClientID}); err != nil {
		t.Fatal(err)
	}
	found, err := e.Service.SearchEHRFacilities(ctx, name, "", "", 1)
	if err != nil || len(found) != 1 {
		t.Fatalf("the brand %s: %v %v", name, found, err)
	}
	return found[0].BrandID
}

// ConnectEHR returns the patient's connection to a brand's EHR, made
// (when the patient has none) as the console makes it, the EHR signing in
// ehrPatient, once no pull of the patient runs.
func (e *Env) ConnectEHR(t testing.TB, ehr *ehrtest.EHR, brand int64, patient *domain.Patient, ehrPatient string) int64 {
	t.Helper()
	ctx, sys := context.Background(), domain.SystemActor()
	actor, err := e.Service.Actor(ctx, patient.UserID)
	if err != nil {
		t.Fatal(err)
	}
	conns, err := e.Service.EHRConnectionsOfPatient(ctx, sys, patient.ID)
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	for _, c := range conns {
		if c.BrandID == brand {
			id = c.ID
		}
	}
	if id == 0 {
		ehr.SignIn(ehrPatient)
		to, err := e.Service.StartEHRConnection(ctx, actor, brand, e.URL+EHRCallbackPath, true)
		if err != nil {
			t.Fatal(err)
		}
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := client.Get(to)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		back, err := url.Parse(resp.Header.Get("Location"))
		if err != nil {
			t.Fatal(err)
		}
		c, err := e.Service.FinishEHRConnection(ctx, actor, back.Query().Get("state"), back.Query().Get("code"), "")
		if err != nil {
			t.Fatal(err)
		}
		id = c.ID
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		runs, err := e.Service.PullRunsOfPatient(ctx, sys, patient.ID, domain.Page{Number: 1, Size: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(runs.Items) == 0 || runs.Items[0].Outcome != domain.PullRunning {
			break
		}
	}
	return id
}
