package console_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"regexp"
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

// uploads stores data points of the fixture's patient, who first consents
// to share heart rates and step counts with the study: heart rates at the
// instants, and a day's steps for each day.
func (f *fixture) uploads(t *testing.T, heartRates []time.Time, stepDays []time.Time) {
	t.Helper()
	ctx := context.Background()
	svc := f.env.Service
	yes := true
	if err := svc.AnswerConsents(ctx, domain.SystemActor(), f.patient.ID, []domain.StudyScopeConsents{{StudyID: f.study.ID,
		Scopes: []domain.ScopeConsent{{System: f.hr.System, Code: f.hr.Code, Consented: &yes}}}}); err != nil && !domain.IsCode(err, domain.CodeDuplicate) {
		t.Fatal(err)
	}
	if _, err := svc.AddScopeRequest(ctx, domain.SystemActor(), f.study.ID, domain.ScopeRef{ID: f.steps.ID}); err != nil && !domain.IsCode(err, domain.CodeDuplicate) {
		t.Fatal(err)
	}
	if err := svc.AnswerConsents(ctx, domain.SystemActor(), f.patient.ID, []domain.StudyScopeConsents{{StudyID: f.study.ID,
		Scopes: []domain.ScopeConsent{{System: f.steps.System, Code: f.steps.Code, Consented: &yes}}}}); err != nil && !domain.IsCode(err, domain.CodeDuplicate) {
		t.Fatal(err)
	}
	var in []domain.NewObservation
	add := func(code, body string) {
		in = append(in, domain.NewObservation{Subject: fmt.Sprintf("Patient/%d", f.patient.ID), Device: fmt.Sprintf("Device/%d", f.device.ID),
			Status: "final", Codings: []domain.Coding{{System: domain.SystemOpenMHealth, Code: code}}, ContentType: "application/json", Data: []byte(body)})
	}
	for i, at := range heartRates {
		add(f.hr.Code, fmt.Sprintf(`{"header":{"id":"hr-%d","creation_date_time":%q,"schema_id":{"namespace":"omh","name":"heart-rate","version":"2.0"}},`+
			`"body":{"heart_rate":{"value":%d,"unit":"beats/min"},"effective_time_frame":{"date_time":%q}}}`, i, at.Format(time.RFC3339), 60+i, at.Format(time.RFC3339)))
	}
	for i, day := range stepDays {
		add(f.steps.Code, fmt.Sprintf(`{"header":{"id":"steps-%d","creation_date_time":%q,"schema_id":{"namespace":"omh","name":"step-count","version":"3.0"}},`+
			`"body":{"step_count":{"value":%d,"unit":"steps"},"effective_time_frame":{"time_interval":{"start_date_time":%q,"end_date_time":%q}}}}`,
			i, day.Format(time.RFC3339), 1000*(i+1), day.Format(time.RFC3339), day.AddDate(0, 0, 1).Format(time.RFC3339)))
	}
	for i, res := range svc.CreateObservations(ctx, domain.SystemActor(), in) {
		if res.Err != nil {
			t.Fatalf("upload %d: %v", i, res.Err)
		}
	}
}

// downloadLinks returns the download links of a data page, as a browser
// reads them from its HTML.
func downloadLinks(page string) []string {
	var links []string
	for _, m := range regexp.MustCompile(`<a href="([^"]*\.(?:csv|ndjson)\?[^"]*)" download>`).FindAllStringSubmatch(page, -1) {
		links = append(links, html.UnescapeString(m[1]))
	}
	return links
}

// TestDownloadsCarryTheRangeShown: the downloads of a data page hold what
// the page shows, over the range chosen on it. Before, their links escaped
// their query string, so the server read no range and fell back to the
// last 90 days: 126 rows for 18 shown. An empty range offers no download.
func TestDownloadsCarryTheRangeShown(t *testing.T) {
	f := newFixture(t)
	zone := time.FixedZone("", -8*3600)
	today := time.Now().In(zone)
	var hrs []time.Time
	for d := 1; d <= 60; d++ { // one a day for 60 days, three in the week shown
		hrs = append(hrs, time.Date(today.Year(), today.Month(), today.Day()-d, 7, 30, 0, 0, zone))
	}
	f.uploads(t, hrs, nil)
	from, to := today.AddDate(0, 0, -3).Format(time.DateOnly), today.Format(time.DateOnly)
	path := fmt.Sprintf("/console/patients/%d/data?from=%s&to=%s", f.patient.ID, from, to)
	m := f.callers["manager"]
	resp, page := m.b.Do("GET", f.env.URL+path, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", path, resp.StatusCode)
	}
	shown := strings.Count(page, `<td class="num">`)
	links := downloadLinks(page)
	if shown != 3 || len(links) != 2 {
		t.Fatalf("the page shows %d values and %d download links, want 3 and 2:\n%s", shown, len(links), page)
	}
	for _, link := range links {
		resp, body := m.b.Do("GET", f.env.URL+link, nil)
		observations := map[string]bool{} // NDJSON has a line per observation, a CSV one per value, an observation's id first
		for i, line := range strings.Split(strings.TrimSpace(body), "\n") {
			if id, _, _ := strings.Cut(line, ","); strings.Contains(link, ".csv") {
				observations[id] = i > 0 // the first line is the CSV's header
			} else {
				observations[line] = true
			}
		}
		delete(observations, "observation")
		if resp.StatusCode != http.StatusOK || len(observations) != shown || !strings.Contains(resp.Header.Get("Content-Disposition"), from+"-"+to) {
			t.Errorf("GET %s: %d, %d observations (%s), want the %d shown, from %s to %s", link, resp.StatusCode, len(observations), resp.Header.Get("Content-Disposition"), shown, from, to)
		}
	}
	empty := fmt.Sprintf("/console/patients/%d/data?from=2001-01-01&to=2001-01-31", f.patient.ID)
	if _, page := m.b.Do("GET", f.env.URL+empty, nil); len(downloadLinks(page)) != 0 || !strings.Contains(page, `class="empty"`) {
		t.Errorf("an empty range offers downloads or no empty state:\n%.3000s", page[strings.Index(page, "<main"):])
	}
}

// TestChartsPeopleCanRead: dates in words at the patient's own clock, the
// unit on the y axis, a day's totals as bars (each with its value), the
// table of values linked from the chart, and codes only in a detail line
// for staff, never for the patient.
func TestChartsPeopleCanRead(t *testing.T) {
	f := newFixture(t)
	zone := time.FixedZone("", -8*3600)
	days := []time.Time{time.Date(2026, 3, 1, 0, 0, 0, 0, zone), time.Date(2026, 3, 2, 0, 0, 0, 0, zone)}
	f.uploads(t, []time.Time{time.Date(2026, 3, 1, 7, 30, 0, 0, zone), time.Date(2026, 3, 2, 7, 30, 0, 0, zone)}, days)
	path := fmt.Sprintf("/console/patients/%d/data?from=2026-02-25&to=2026-03-05", f.patient.ID)
	_, page := f.callers["manager"].b.Do("GET", f.env.URL+path, nil)
	for _, want := range []string{
		"<td>1 Mar 2026 07:30</td>", // an instant, at the data point's own clock
		"<td>2 Mar 2026</td>",       // a whole day's steps
		">beats/min</text>",         // the unit on the y axis
		">steps</text>",
		`<rect x=`, "<title>1 Mar 2026: step count 1000 steps</title></rect>", // a bar per day, with its value
		`href="#code-0-table"`, `id="code-0-table"`, // the values, without hover
		`<p class="detail">omh:heart-rate:2.0</p>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the data page lacks %q", want)
		}
	}
	if strings.Contains(page, "2026-03-01T07:30:00-08:00") {
		t.Error("the data page shows a time as a timestamp")
	}
	own := fmt.Sprintf("/console/patients/%d/data?from=2026-02-25&to=2026-03-05", f.patient.ID)
	if _, page := f.callers["patient"].b.Do("GET", f.env.URL+own, nil); strings.Contains(page, "omh:heart-rate:2.0") || !strings.Contains(page, "Heart rate") {
		t.Error("the patient's data page shows a code, or no name")
	}
}

// TestPlainWords: types are names, not the codes the API stores.
func TestPlainWords(t *testing.T) {
	f := newFixture(t)
	for path, want := range map[string]string{
		fmt.Sprintf("/console/organizations/%d/", f.org.ID): "<dd>Healthcare provider</dd>",
		"/console/organizations/":                           "(Healthcare provider; super user)",
		"/console/sources/":                                 "<td>Personal device</td>",
		fmt.Sprintf("/console/studies/%d/", f.study.ID):     "Tracker <span class=\"muted\">(Personal device)</span>",
	} {
		if _, page := f.callers["superuser"].b.Do("GET", f.env.URL+path, nil); !strings.Contains(page, want) {
			t.Errorf("GET %s lacks %q:\n%s", path, want, page[strings.Index(page, "<main"):])
		}
	}
}
