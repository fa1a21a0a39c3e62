package repo_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"exchange/domain"
	"exchange/fhirsearch"
	"exchange/omh"
	"exchange/repo/repotest"
)

// TestObservationStatsOnePass summarizes observations written by the
// service's own write path: per code the count, the first start and last
// end, and per unit the numeric values of the data points with one (not a
// blood pressure's two). The embedded database's scan and, on MongoDB, the
// aggregation give the same answer, and a search's filter narrows both.
func TestObservationStatsOnePass(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	at := time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC)
	dataPoint := func(body string) map[string]any {
		d := json.NewDecoder(strings.NewReader(`{"header": {}, "body": ` + body + `}`))
		d.UseNumber()
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	var obs []*domain.Observation
	add := func(patient int64, code, body string, start time.Time, span time.Duration) {
		tf := &omh.TimeFrame{Start: start, End: start.Add(span), DateTime: start.Format(time.RFC3339)}
		obs = append(obs, &domain.Observation{PatientID: patient, DataSourceID: 1, Status: "final", Code: code,
			Codings: []domain.Coding{{System: domain.SystemOpenMHealth, Code: code}}, ContentType: "application/json",
			Payload: []byte(body), DataPoint: dataPoint(body), Effective: tf})
	}
	for i, bpm := range []int{60, 72, 90} {
		add(1, "omh:heart-rate:2.0", fmt.Sprintf(`{"heart_rate": {"value": %d, "unit": "beats/min"}}`, bpm), at.Add(time.Duration(i)*time.Hour), 0)
	}
	add(1, "omh:blood-glucose:4.0", `{"blood_glucose": {"value": 5.5, "unit": "mmol/L"}}`, at, 0)
	add(1, "omh:blood-glucose:4.0", `{"blood_glucose": {"value": 110, "unit": "mg/dL"}}`, at.Add(24*time.Hour), 0)
	add(1, "omh:blood-pressure:4.0", `{"systolic_blood_pressure": {"value": 120, "unit": "mmHg"}, "diastolic_blood_pressure": {"value": 80, "unit": "mmHg"}}`, at, 0)
	add(1, "omh:step-count:3.0", `{"step_count": {"value": 8000, "unit": "steps"}}`, at, 24*time.Hour)
	add(2, "omh:heart-rate:2.0", `{"heart_rate": {"value": 100, "unit": "beats/min"}}`, at, 0)
	for i, err := range db.CreateObservations(ctx, obs) {
		if err != nil {
			t.Fatalf("observation %d: %v", i, err)
		}
	}
	tr := fhirsearch.NewTranslator(configuredTypes(t), []byte("k"), "https://exchange.example.org/fhir-source", time.Now)
	planOf := func(query string, patients ...int64) *domain.SearchPlan {
		values, _ := url.ParseQuery(query + "&_summary=count")
		q, err := tr.Parse("Observation", values, true)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := q.Plan(domain.Scope{PatientIDs: patients})
		if err != nil {
			t.Fatal(err)
		}
		return plan
	}
	render := func(s domain.ObservationSummary) string {
		out := fmt.Sprint(s.Patients)
		for _, c := range s.Codes {
			out += fmt.Sprintf(" | %s %d %s..%s", c.Code, c.Count, c.First.Format(time.RFC3339), c.Last.Format(time.RFC3339))
			for _, v := range c.Values {
				out += fmt.Sprintf(" [%s %d %g %g %.2f]", v.Unit, v.Count, v.Min, v.Max, v.Mean())
			}
		}
		return out
	}
	for _, tc := range []struct {
		query    string
		patients []int64
		want     string
	}{
		{"", []int64{1}, "[1]" +
			" | omh:blood-glucose:4.0 2 2025-03-01T08:00:00Z..2025-03-02T08:00:00Z [mg/dL 1 110 110 110.00] [mmol/L 1 5.5 5.5 5.50]" +
			" | omh:blood-pressure:4.0 1 2025-03-01T08:00:00Z..2025-03-01T08:00:00Z" +
			" | omh:heart-rate:2.0 3 2025-03-01T08:00:00Z..2025-03-01T10:00:00Z [beats/min 3 60 90 74.00]" +
			" | omh:step-count:3.0 1 2025-03-01T08:00:00Z..2025-03-02T08:00:00Z [steps 1 8000 8000 8000.00]"},
		{"code=omh:heart-rate:2.0", []int64{1, 2}, "[1 2] | omh:heart-rate:2.0 4 2025-03-01T08:00:00Z..2025-03-01T10:00:00Z [beats/min 4 60 100 80.50]"},
		{"code=omh:heart-rate:2.0&date=ge2025-03-01T09:00:00Z", []int64{1}, "[1] | omh:heart-rate:2.0 2 2025-03-01T09:00:00Z..2025-03-01T10:00:00Z [beats/min 2 72 90 81.00]"},
		{"", []int64{}, "[]"},
	} {
		plan := planOf(tc.query, tc.patients...)
		scan, err := db.ObservationStatsScan(ctx, plan)
		if err != nil {
			t.Fatal(err)
		}
		if got := render(scan); got != tc.want {
			t.Errorf("%s of %v, scanned:\n got %s\nwant %s", tc.query, tc.patients, got, tc.want)
		}
		answer, err := db.ObservationStats(ctx, plan)
		if err != nil {
			t.Fatal(err)
		}
		if got := render(answer); got != tc.want {
			t.Errorf("%s of %v:\n got %s\nwant %s", tc.query, tc.patients, got, tc.want)
		}
		if !repotest.IsFerretDB(t) {
			group, err := db.ObservationStatsGroup(ctx, plan)
			if err != nil {
				t.Fatal(err)
			}
			if got := render(group); got != tc.want {
				t.Errorf("%s of %v, aggregated:\n got %s\nwant %s", tc.query, tc.patients, got, tc.want)
			}
		}
	}
}
