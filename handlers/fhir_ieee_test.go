package handlers_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"exchange/domain"
	"exchange/omh"
	"exchange/omh/omhtest"
)

// consentStudy creates a study of organization A that asks for the codes
// (on the Open mHealth system), enrolls the patient and consents to them
// all.
func (w *fxWorld) consentStudy(t *testing.T, p *domain.Patient, codes ...string) {
	t.Helper()
	svc := w.env.Service
	st := fxMust(svc.CreateStudy(w.ctx, fxSys, domain.NewStudy{OrganizationID: w.orgA.ID, Name: "Study of " + t.Name(), Description: "codes"}))
	answers := map[*domain.ScopeCode]bool{}
	for _, code := range codes {
		c := fxMust(svc.EnsureScopeCode(w.ctx, fxOMH, code, code))
		if err := svc.RequestScope(w.ctx, fxSys, st, c.ID); err != nil {
			t.Fatal(err)
		}
		answers[c] = true
	}
	w.consent(p, st, answers)
}

// fxRead reads an observation and checks that its payload decodes to the
// bytes uploaded, exactly.
func (w *fxWorld) readPayload(t *testing.T, id string, payload []byte) map[string]any {
	t.Helper()
	resp, r := w.env.GetJSON(t, fxBase+"/Observation/"+id, w.tok["doc"])
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("read %s: %d %v", id, resp.StatusCode, r)
	}
	data, err := base64.StdEncoding.DecodeString(fmt.Sprint(fxObj(r["valueAttachment"])["data"]))
	if err != nil || !bytes.Equal(data, payload) {
		t.Errorf("Observation/%s: the payload does not decode to the uploaded bytes (%v):\n%s\nwant\n%s", id, err, data, payload)
	}
	return r
}

// TestFHIRIEEEHeaders: data points with IEEE 1752 headers, as JupyterHealth
// Exchange's clients send them, of Open mHealth and IEEE schemas, under
// either coding system, are created, kept byte for byte and given the
// effective[x] of their time frame; the same with Open mHealth headers.
func TestFHIRIEEEHeaders(t *testing.T) {
	w := fxNewWorld(t)
	const bg, bw, sleep = "omh:blood-glucose:4.0", "omh:body-weight:3.0", "ieee:sleep-episode:1.0"
	w.consentStudy(t, w.alice, bg, bw, sleep)
	type want struct{ dateTime, start, end string }
	cases := []struct {
		name, system, code string
		body               map[string]any
		want               want
	}{
		{"blood glucose", fxOMH, bg, map[string]any{"blood_glucose": map[string]any{"value": 5.4, "unit": "mmol/L"},
			"effective_time_frame": fxAt("2024-03-05T07:25:00-08:00"), "temporal_relationship_to_meal": "fasting"},
			want{dateTime: "2024-03-05T07:25:00-08:00"}},
		{"blood glucose on the IEEE system", fxIEEE, bg, map[string]any{"blood_glucose": map[string]any{"value": 97, "unit": "mg/dL"},
			"effective_time_frame": fxAt("2024-03-05T15:25:00.5Z"), "descriptive_statistic": "average"},
			want{dateTime: "2024-03-05T15:25:00.5Z"}},
		{"body weight over a week", fxOMH, bw, map[string]any{"body_weight": map[string]any{"value": 71.5, "unit": "kg"},
			"effective_time_frame": fxInterval("start_date_time", "2024-03-01T00:00:00+01:00", "duration", fxDuration(1, "wk")), "descriptive_statistic": "average"},
			want{start: "2024-03-01T00:00:00+01:00", end: "2024-03-08T00:00:00+01:00"}},
		{"heart rate", fxOMH, fxHR, fxHeartRate(fxAt("2024-03-05T10:15:30+02:00")), want{dateTime: "2024-03-05T10:15:30+02:00"}},
		{"IEEE physical activity", fxIEEE, fxIEEEPA, map[string]any{"activity_name": "walking", "distance": map[string]any{"value": 2.1, "unit": "km"},
			"effective_time_frame": fxInterval("end_date_time", "2024-03-05T08:00:00-05:00", "duration", fxDuration(40, "min"))},
			want{start: "2024-03-05T07:20:00-05:00", end: "2024-03-05T08:00:00-05:00"}},
		{"IEEE sleep episode on the Open mHealth system", fxOMH, sleep, map[string]any{"is_main_sleep": true,
			"total_sleep_time":     map[string]any{"value": 7.5, "unit": "h"},
			"effective_time_frame": fxInterval("start_date_time", "2024-03-04T23:10:00+09:00", "end_date_time", "2024-03-05T07:05:00+09:00")},
			want{start: "2024-03-04T23:10:00+09:00", end: "2024-03-05T07:05:00+09:00"}},
	}
	var obs []fxObs
	var names []string
	for _, c := range cases {
		for header, payload := range map[string][]byte{"IEEE header": fxIEEEDataPoint(c.code, c.body), "Open mHealth header": fxDataPoint(c.code, c.body)} {
			obs = append(obs, fxObs{patient: w.alice.ID, device: w.watch, system: c.system, code: c.code, payload: payload})
			names = append(names, c.name+", "+header)
		}
	}
	check := func(where string, i int, r map[string]any) {
		t.Helper()
		c := cases[i/2]
		dt, period := r["effectiveDateTime"], fxObj(r["effectivePeriod"])
		if c.want.dateTime != "" && (dt != c.want.dateTime || period != nil) ||
			c.want.start != "" && (dt != nil || period["start"] != c.want.start || period["end"] != c.want.end) {
			t.Errorf("%s, %s: effectiveDateTime %v, effectivePeriod %v; want %+v", where, names[i], dt, period, c.want)
		}
	}
	// The first case one by one, the rest in a batch: the same data point
	// sent twice is one observation.
	for i, o := range obs[:2] {
		resp, r := w.env.Send(t, "POST", fxBase+"/Observation", w.tok["alice"], o.resource())
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("create %s: %d %v", names[i], resp.StatusCode, r)
		}
		check("create", i, w.readPayload(t, r["id"].(string), o.payload))
	}
	ids := w.create(t, w.tok["alice"], obs[2:]...)
	for i, id := range ids {
		check("read", i+2, w.readPayload(t, id, obs[i+2].payload))
	}
}

// TestFHIRDataPointsTheSchemasRefuse: the schemas the Open mHealth schemas
// reference (IEEE 1752 unit values, time frames, descriptive statistics)
// and the IEEE schemas themselves are checked, and the header too: each
// refusal is a 422 whose OperationOutcome says where in the data point the
// problem is; nothing is stored.
func TestFHIRDataPointsTheSchemasRefuse(t *testing.T) {
	w := fxNewWorld(t)
	const bg, bw = "omh:blood-glucose:4.0", "omh:body-weight:3.0"
	w.consentStudy(t, w.alice, bg, bw)
	glucose := func(unit string) map[string]any {
		return map[string]any{"blood_glucose": map[string]any{"value": 4.0, "unit": unit}, "effective_time_frame": fxAt("2024-03-05T07:25:00Z")}
	}
	weight := func(kv ...any) map[string]any {
		b := map[string]any{"body_weight": map[string]any{"value": 70, "unit": "kg"}, "effective_time_frame": fxAt("2024-03-05T07:25:00Z")}
		for i := 0; i+1 < len(kv); i += 2 {
			b[kv[i].(string)] = kv[i+1]
		}
		return b
	}
	cases := []struct {
		name    string
		code    string
		payload []byte
		at      string // the place the outcome names
	}{
		{"blood glucose 4.0 in G, IEEE header", bg, fxIEEEDataPoint(bg, glucose("G")), "/body/blood_glucose/unit"},
		{"blood glucose 4.0 in G, Open mHealth header", bg, fxDataPoint(bg, glucose("G")), "/body/blood_glucose/unit"},
		{"body weight 3.0 yesterday", bw, fxIEEEDataPoint(bw, weight("effective_time_frame", fxAt("yesterday"))), "/body/effective_time_frame"},
		{"body weight 3.0, a bogus statistic", bw, fxIEEEDataPoint(bw, weight("descriptive_statistic", "most")), "/body/descriptive_statistic"},
		{"body weight 3.0, part of a day (not an IEEE time interval)", bw,
			fxIEEEDataPoint(bw, weight("effective_time_frame", fxInterval("date", "2024-03-05", "part_of_day", "morning"))), "/body/effective_time_frame"},
		{"blood pressure 4.0, a duration in fortnights", fxBP,
			fxDataPoint(fxBP, fxBloodPressure(fxInterval("start_date_time", "2024-03-05T10:00:00Z", "duration", fxDuration(1, "fortnight")))), "/body/effective_time_frame"},
		{"IEEE physical activity at an instant", fxIEEEPA, fxIEEEDataPoint(fxIEEEPA, map[string]any{"activity_name": "walking",
			"effective_time_frame": fxAt("2024-03-05T10:00:00Z")}), "/body/effective_time_frame"},
		{"IEEE physical activity without a time frame", fxIEEEPA, fxIEEEDataPoint(fxIEEEPA, map[string]any{"activity_name": "walking"}), "/body"},
		{"an IEEE header whose uuid is none", fxHR, fxDataPointWith(map[string]any{"uuid": "dp-1", "source_creation_date_time": "2024-03-05T10:00:00Z"},
			fxHR, fxHeartRate(fxAt("2024-03-05T10:00:00Z"))), "/header/uuid"},
		{"a header of neither kind", fxHR, fxDataPointWith(map[string]any{"id": "dp-1"}, fxHR, fxHeartRate(fxAt("2024-03-05T10:00:00Z"))),
			"neither an Open mHealth header (id, creation_date_time, schema_id; it has no creation_date_time) nor an IEEE 1752 header (uuid, source_creation_date_time, schema_id; it has no uuid, source_creation_date_time)"},
	}
	before := fxSnapshot(t, w)
	for _, c := range cases {
		o := fxObs{patient: w.alice.ID, device: w.watch, code: c.code, payload: c.payload}
		resp, out := w.env.Send(t, "POST", fxBase+"/Observation", w.tok["alice"], o.resource())
		var issue map[string]any
		if issues := fxArr(out["issue"]); len(issues) > 0 {
			issue = fxObj(issues[0])
		}
		if resp.StatusCode != http.StatusUnprocessableEntity || out["resourceType"] != "OperationOutcome" || issue["code"] != "processing" ||
			!strings.Contains(fxOutcomeText(out), c.at) || !slices.Equal(fxArr(issue["expression"]), []any{"Observation.valueAttachment.data"}) {
			t.Errorf("%s: %d %s, want 422 naming %s", c.name, resp.StatusCode, fxCompact(out), c.at)
		}
		entry := w.batch(t, w.tok["alice"], o.resource())[0]
		if r := fxObj(entry["response"]); r["status"] != "422 Unprocessable Entity" || !strings.Contains(fxOutcomeText(fxObj(r["outcome"])), c.at) {
			t.Errorf("%s in a batch: %s", c.name, fxCompact(entry))
		}
	}
	if after := fxSnapshot(t, w); !slices.Equal(after["observations"], before["observations"]) {
		t.Errorf("refused data points were stored: %v", after["observations"])
	}
}

// TestFHIROfficialTestData wraps every object among the schemas' own test
// data as the body of a data point of its schema, once with an Open mHealth
// header and once with an IEEE 1752 header, and sends them all in one
// batch through the real HTTP stack: each is created (and kept byte for
// byte) or refused with 422, as its folder says.
func TestFHIROfficialTestData(t *testing.T) {
	cases := omhtest.TestData(t)
	w := fxNewWorld(t)
	var codes []string
	for _, c := range cases {
		if code := c.Schema.Code(); !slices.Contains(codes, code) {
			codes = append(codes, code)
		}
	}
	w.consentStudy(t, w.alice, codes...)
	type sent struct {
		c      omhtest.Case
		header string
	}
	var resources []any
	var what []sent
	var payloads [][]byte
	skipped := 0
	for _, c := range cases {
		if _, ok := c.Value.(map[string]any); !ok {
			skipped++ // a string, number or array: no body
			continue
		}
		system := fxOMH
		if c.Schema.Namespace == omh.NamespaceIEEE {
			system = fxIEEE
		}
		code := c.Schema.Code()
		for header, payload := range map[string][]byte{
			"Open mHealth header": fxDataPoint(code, json.RawMessage(c.JSON)),
			"IEEE header":         fxIEEEDataPoint(code, json.RawMessage(c.JSON)),
		} {
			resources = append(resources, fxObs{patient: w.alice.ID, device: w.watch, system: system, code: code, payload: payload}.resource())
			what = append(what, sent{c, header})
			payloads = append(payloads, payload)
		}
	}
	// These shouldPass files hold intervals that end years before they
	// start, which no schema can refuse and the service does on purpose
	// (TestTimeFramesThatCannotBeReadAreRefused).
	refusedOnPurpose := map[string]bool{
		"omh/body-temperature/4.0/shouldPass/valid-temperature-with-statistic.json": true,
		"omh/calories-burned/2.0/shouldPass/with-descriptive-statistic.json":        true,
		"omh/sleep-duration/2.0/shouldPass/with-descriptive-statistic.json":         true,
	}
	created := 0
	for i, e := range w.batch(t, w.tok["alice"], resources...) {
		s := what[i]
		status := fxObj(e["response"])["status"]
		switch {
		case refusedOnPurpose[s.c.Name] && status == "422 Unprocessable Entity" &&
			strings.Contains(fxOutcomeText(fxObj(fxObj(e["response"])["outcome"])), "before it starts"):
		case s.c.ShouldPass && status == "201 Created":
			created++
			data, err := base64.StdEncoding.DecodeString(fmt.Sprint(fxObj(fxObj(e["resource"])["valueAttachment"])["data"]))
			if err != nil || !bytes.Equal(data, payloads[i]) {
				t.Errorf("%s, %s: the payload is not kept byte for byte", s.c.Name, s.header)
			}
		case !s.c.ShouldPass && status == "422 Unprocessable Entity":
		default:
			t.Errorf("%s, %s: %v %s", s.c.Name, s.header, status, fxOutcomeText(fxObj(fxObj(e["response"])["outcome"])))
		}
	}
	t.Logf("%d test data files, %d of them objects: %d data points sent, %d created, %d refused",
		len(cases), len(cases)-skipped, len(resources), created, len(resources)-created)
	status, body := w.search(t, w.tok["alice"], fmt.Sprintf("/Observation?patient=%d&_summary=count", w.alice.ID))
	if status != http.StatusOK || body["total"] != float64(created) {
		t.Errorf("stored: %d %v, want %d", status, body["total"], created)
	}
}
