package console_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"exchange/domain"
	"exchange/omh"
	"exchange/repo"
	"exchange/repo/repotest"
)

// TestStoredDataPointsKeepTheirPage: the console shows a data point as the
// store holds it, never checked again against today's upload rules. A
// data point stored before a rule changed (here a header that is neither
// an Open mHealth nor an IEEE 1752 header, which omh.Parse now refuses)
// still shows on the patient's data page and in its downloads, and the
// FHIR read still serves it byte for byte.
func TestStoredDataPointsKeepTheirPage(t *testing.T) {
	f := newFixture(t)
	payload := []byte(`{"header":{"schema_id":{"namespace":"omh","name":"heart-rate","version":"2.0"},"creation_date_time":"2025-06-01T08:00:00Z"},` +
		`"body":{"heart_rate":{"value":71,"unit":"beats/min"},"effective_time_frame":{"date_time":"2025-06-01T08:00:00Z"}}}`)
	if _, err := omh.Parse(payload); err == nil {
		t.Fatal("the data point of the test passes today's parser: it proves nothing")
	}
	doc, err := omh.Decode(payload)
	if err != nil {
		t.Fatal(err)
	}
	tf, err := omh.EffectiveTimeFrame(doc["body"].(map[string]any))
	if err != nil {
		t.Fatal(err)
	}
	const id = 900001
	o := &domain.Observation{ID: id, PatientID: f.patient.ID, DataSourceID: f.device.ID, Status: "final",
		Codings: []domain.Coding{{System: domain.SystemOpenMHealth, Code: f.hr.Code}}, Code: f.hr.Code,
		ContentType: "application/json", Payload: payload, DataPoint: doc, Effective: tf, LastUpdated: time.Now().UTC().Truncate(time.Microsecond)}
	stored, claims, err := repo.ObservationDocuments(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := repotest.Collection(t, f.env.DB, "observation_identifiers").InsertMany(ctx, claims); err != nil {
		t.Fatal(err)
	}
	if _, err := repotest.Collection(t, f.env.DB, "observations").InsertOne(ctx, stored); err != nil {
		t.Fatal(err)
	}

	base := fmt.Sprintf("%s/console/patients/%d/data", f.env.URL, f.patient.ID)
	const when = "?from=2025-05-01&to=2025-07-01"
	for _, c := range []struct{ path, want string }{
		{base + when, "71"},
		{base + ".csv" + when, "heart_rate.value,71"},
		{base + ".ndjson" + when, base64.StdEncoding.EncodeToString(payload)},
	} {
		resp, body := f.callers["manager"].b.Do("GET", c.path, nil)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, c.want) {
			t.Errorf("GET %s: %d, want 200 showing %q\n%.600s", c.path, resp.StatusCode, c.want, body)
		}
	}
	manager := must(f.env.Service.UserByEmail(ctx, "manager@example.org"))
	resp, read := f.env.GetJSON(t, fmt.Sprintf("/FHIR/R5/Observation/%d", id), f.env.Token(t, manager.ID))
	attachment, _ := read["valueAttachment"].(map[string]any)
	if resp.StatusCode != http.StatusOK || attachment["data"] != base64.StdEncoding.EncodeToString(payload) {
		out, _ := json.Marshal(read)
		t.Errorf("the FHIR read: %d %s", resp.StatusCode, out)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestHugeValuesKeepTheDataPage: an upload accepts any number as a heart
// rate (unit-value's value has no bound), and the data page charts what
// it finds. A value so large that the chart's padding vanishes in it
// (1e17 ± 1 is 1e17) must not break the page (gonum's "illegal range"
// panic, a 500): its rows still show, without a chart.
func TestHugeValuesKeepTheDataPage(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	patient, err := f.env.Service.Actor(ctx, must(f.env.Service.UserByEmail(ctx, "pat@example.org")).ID)
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	if err := f.env.Service.AnswerConsents(ctx, domain.SystemActor(), f.patient.ID, []domain.StudyScopeConsents{{StudyID: f.study.ID,
		Scopes: []domain.ScopeConsent{{System: f.hr.System, Code: f.hr.Code, Consented: &yes}}}}); err != nil {
		t.Fatal(err)
	}
	dp := `{"header":{"id":"huge","creation_date_time":"2025-06-01T08:00:00Z","schema_id":{"namespace":"omh","name":"heart-rate","version":"2.0"}},` +
		`"body":{"heart_rate":{"value":1e17,"unit":"beats/min"},"effective_time_frame":{"date_time":"2025-06-01T08:00:00Z"}}}`
	res := f.env.Service.CreateObservations(ctx, patient, []domain.NewObservation{{
		Subject: fmt.Sprintf("Patient/%d", f.patient.ID), Device: fmt.Sprintf("Device/%d", f.device.ID), Status: "final",
		Codings: []domain.Coding{{System: domain.SystemOpenMHealth, Code: f.hr.Code}}, ContentType: "application/json", Data: []byte(dp)}})
	if res[0].Err != nil {
		t.Fatalf("the patient's upload: %v", res[0].Err)
	}
	path := fmt.Sprintf("%s/console/patients/%d/data?from=2025-05-01&to=2025-07-01", f.env.URL, f.patient.ID)
	if resp, body := f.callers["manager"].b.Do("GET", path, nil); resp.StatusCode != http.StatusOK || !strings.Contains(body, "100000000000000000") {
		t.Errorf("GET %s: %d, want 200 showing the value\n%.600s", path, resp.StatusCode, body)
	}
}
