package handlers_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"exchange/repo/repotest"
)

// TestFHIREffectiveTimeFrames creates one observation per shape of
// body.effective_time_frame through a batch and reads effective[x] back,
// from the batch answer, a read by id and a search.
func TestFHIREffectiveTimeFrames(t *testing.T) {
	w := fxNewWorld(t)
	type want struct{ dateTime, start, end string } // all empty: no effective[x]
	cases := []struct {
		name string
		code string
		body map[string]any
		want want
	}{
		{"date_time with an offset and a fraction", fxHR, fxHeartRate(fxAt("2024-03-05T10:15:30.123+02:00")), want{dateTime: "2024-03-05T10:15:30.123+02:00"}},
		{"date_time in UTC", fxHR, fxHeartRate(fxAt("2024-03-05T10:15:30Z")), want{dateTime: "2024-03-05T10:15:30Z"}},
		{"start and end", fxHR, fxHeartRate(fxInterval("start_date_time", "2024-03-05T08:00:00-05:00", "end_date_time", "2024-03-05T09:30:00-05:00")),
			want{start: "2024-03-05T08:00:00-05:00", end: "2024-03-05T09:30:00-05:00"}},
		{"start and end in different offsets", fxHR, fxHeartRate(fxInterval("start_date_time", "2024-03-05T08:00:00-05:00", "end_date_time", "2024-03-05T15:30:00+01:00")),
			want{start: "2024-03-05T08:00:00-05:00", end: "2024-03-05T15:30:00+01:00"}},
		{"start and picoseconds", fxHR, fxHeartRate(fxInterval("start_date_time", "2024-03-05T10:00:00Z", "duration", fxDuration(3000, "ps"))),
			want{start: "2024-03-05T10:00:00Z", end: "2024-03-05T10:00:00.000000003Z"}},
		{"start and nanoseconds", fxHR, fxHeartRate(fxInterval("start_date_time", "2024-03-05T10:00:00Z", "duration", fxDuration(5, "ns"))),
			want{start: "2024-03-05T10:00:00Z", end: "2024-03-05T10:00:00.000000005Z"}},
		{"start and microseconds", fxHR, fxHeartRate(fxInterval("start_date_time", "2024-03-05T10:00:00Z", "duration", fxDuration(7, "us"))),
			want{start: "2024-03-05T10:00:00Z", end: "2024-03-05T10:00:00.000007Z"}},
		{"start and milliseconds", fxHR, fxHeartRate(fxInterval("start_date_time", "2024-03-05T10:00:00Z", "duration", fxDuration(250, "ms"))),
			want{start: "2024-03-05T10:00:00Z", end: "2024-03-05T10:00:00.25Z"}},
		{"start and seconds", fxHR, fxHeartRate(fxInterval("start_date_time", "2024-03-05T10:00:00Z", "duration", fxDuration(30, "sec"))),
			want{start: "2024-03-05T10:00:00Z", end: "2024-03-05T10:00:30Z"}},
		{"start and minutes", fxHR, fxHeartRate(fxInterval("start_date_time", "2024-03-05T10:00:00+09:00", "duration", fxDuration(90, "min"))),
			want{start: "2024-03-05T10:00:00+09:00", end: "2024-03-05T11:30:00+09:00"}},
		{"start and fractional hours", fxHR, fxHeartRate(fxInterval("start_date_time", "2024-03-05T10:00:00Z", "duration", fxDuration(1.5, "h"))),
			want{start: "2024-03-05T10:00:00Z", end: "2024-03-05T11:30:00Z"}},
		{"start and days", fxHR, fxHeartRate(fxInterval("start_date_time", "2024-03-05T10:00:00Z", "duration", fxDuration(2, "d"))),
			want{start: "2024-03-05T10:00:00Z", end: "2024-03-07T10:00:00Z"}},
		{"start and weeks", fxHR, fxHeartRate(fxInterval("start_date_time", "2024-03-05T10:00:00Z", "duration", fxDuration(1, "wk"))),
			want{start: "2024-03-05T10:00:00Z", end: "2024-03-12T10:00:00Z"}},
		{"start and a month", fxHR, fxHeartRate(fxInterval("start_date_time", "2024-03-15T10:00:00+01:00", "duration", fxDuration(1, "Mo"))),
			want{start: "2024-03-15T10:00:00+01:00", end: "2024-04-15T10:00:00+01:00"}},
		// Whole months follow the calendar as package omh specifies (its
		// TestEffectiveTimeFrame): a day past the end of the target month
		// carries into the next one, as time.AddDate normalises it.
		{"a month from 31 January ends on the last day of February", fxHR, fxHeartRate(fxInterval("start_date_time", "2024-01-31T10:00:00+01:00", "duration", fxDuration(1, "Mo"))),
			want{start: "2024-01-31T10:00:00+01:00", end: "2024-02-29T10:00:00+01:00"}},
		{"a fraction of a month is that share of the next month", fxHR, fxHeartRate(fxInterval("start_date_time", "2024-01-15T00:00:00Z", "duration", fxDuration(1.5, "Mo"))),
			want{start: "2024-01-15T00:00:00Z", end: "2024-02-29T12:00:00Z"}},
		{"start and years", fxHR, fxHeartRate(fxInterval("start_date_time", "2023-06-01T00:00:00-07:00", "duration", fxDuration(2, "yr"))),
			want{start: "2023-06-01T00:00:00-07:00", end: "2025-06-01T00:00:00-07:00"}},
		{"a year from 29 February ends on 28 February", fxHR, fxHeartRate(fxInterval("start_date_time", "2024-02-29T06:00:00Z", "duration", fxDuration(1, "yr"))),
			want{start: "2024-02-29T06:00:00Z", end: "2025-02-28T06:00:00Z"}},
		{"a year across 29 February", fxHR, fxHeartRate(fxInterval("start_date_time", "2023-03-01T06:00:00Z", "duration", fxDuration(1, "yr"))),
			want{start: "2023-03-01T06:00:00Z", end: "2024-03-01T06:00:00Z"}},
		{"end and minutes", fxHR, fxHeartRate(fxInterval("end_date_time", "2024-03-05T10:00:00+05:30", "duration", fxDuration(45, "min"))),
			want{start: "2024-03-05T09:15:00+05:30", end: "2024-03-05T10:00:00+05:30"}},
		{"end and a month", fxHR, fxHeartRate(fxInterval("end_date_time", "2024-03-15T00:00:00-04:00", "duration", fxDuration(1, "Mo"))),
			want{start: "2024-02-15T00:00:00-04:00", end: "2024-03-15T00:00:00-04:00"}},
		{"end and a year and a half", fxHR, fxHeartRate(fxInterval("end_date_time", "2024-07-01T00:00:00Z", "duration", fxDuration(1.5, "yr"))),
			want{start: "2022-12-30T12:00:00Z", end: "2024-07-01T00:00:00Z"}}, // 1 year back, then half of the year before that
		{"step count over a day's interval", fxSteps, fxStepCount(fxInterval("start_date_time", "2024-03-05T00:00:00Z", "duration", fxDuration(1, "d"))),
			want{start: "2024-03-05T00:00:00Z", end: "2024-03-06T00:00:00Z"}},
		{"morning", fxHR, fxHeartRate(fxInterval("date", "2024-03-05", "part_of_day", "morning")),
			want{start: "2024-03-05T06:00:00Z", end: "2024-03-05T12:00:00Z"}},
		{"afternoon", fxHR, fxHeartRate(fxInterval("date", "2024-03-05", "part_of_day", "afternoon")),
			want{start: "2024-03-05T12:00:00Z", end: "2024-03-05T18:00:00Z"}},
		{"evening", fxHR, fxHeartRate(fxInterval("date", "2024-03-05", "part_of_day", "evening")),
			want{start: "2024-03-05T18:00:00Z", end: "2024-03-06T00:00:00Z"}},
		{"night", fxSteps, fxStepCount(fxInterval("date", "2024-03-05", "part_of_day", "night")),
			want{start: "2024-03-05T00:00:00Z", end: "2024-03-05T06:00:00Z"}},
		{"IEEE start and end", fxIEEEPA, map[string]any{"activity_name": "walking",
			"effective_time_frame": fxInterval("start_date_time", "2024-03-05T07:00:00-08:00", "end_date_time", "2024-03-05T07:45:00-08:00")},
			want{start: "2024-03-05T07:00:00-08:00", end: "2024-03-05T07:45:00-08:00"}},
		{"IEEE end and duration", fxIEEEPA, map[string]any{"activity_name": "walking",
			"effective_time_frame": fxInterval("end_date_time", "2024-03-05T07:45:00+05:30", "duration", fxDuration(45, "min"))},
			want{start: "2024-03-05T07:00:00+05:30", end: "2024-03-05T07:45:00+05:30"}},
		{"missing", fxPA, map[string]any{"activity_name": "walking"}, want{}},
		// A leap second reads as the instant after it.
		{"a leap second", fxHR, fxHeartRate(fxAt("2016-12-31T23:59:60Z")), want{dateTime: "2017-01-01T00:00:00Z"}},
		// An interval that ends before it starts is refused: see
		// TestTimeFramesThatCannotBeReadAreRefused.
	}
	obs := make([]fxObs, len(cases))
	for i, c := range cases {
		system := fxOMH
		if strings.HasPrefix(c.code, "ieee:") {
			system = fxIEEE
		}
		obs[i] = fxObs{patient: w.alice.ID, device: w.watch, system: system, code: c.code, payload: fxDataPoint(c.code, c.body)}
	}
	resources := make([]any, len(obs))
	for i, o := range obs {
		resources[i] = o.resource()
	}
	entries := w.batch(t, w.tok["doc"], resources...)

	check := func(where string, r map[string]any, c int) {
		t.Helper()
		wnt := cases[c].want
		dt, hasDT := r["effectiveDateTime"]
		period, hasPeriod := r["effectivePeriod"]
		switch {
		case wnt.dateTime != "":
			if dt != wnt.dateTime || hasPeriod {
				t.Errorf("%s %q: effectiveDateTime %v, effectivePeriod %v; want %s", where, cases[c].name, dt, period, wnt.dateTime)
			}
		case wnt.start != "":
			p := fxObj(period)
			if hasDT || p["start"] != wnt.start || p["end"] != wnt.end {
				t.Errorf("%s %q: effectiveDateTime %v, effectivePeriod %v; want %s .. %s", where, cases[c].name, dt, period, wnt.start, wnt.end)
			}
		default:
			for k := range r {
				if strings.HasPrefix(k, "effective") {
					t.Errorf("%s %q: %s is %v; want no effective[x]", where, cases[c].name, k, r[k])
				}
			}
		}
		data, err := base64.StdEncoding.DecodeString(fmt.Sprint(fxObj(r["valueAttachment"])["data"]))
		if err != nil || string(data) != string(obs[c].payload) {
			t.Errorf("%s %q: the payload does not decode to the uploaded bytes: %v\n%s", where, cases[c].name, err, data)
		}
	}
	ids := make([]string, len(entries))
	byID := map[string]int{}
	for i, e := range entries {
		if got := fxObj(e["response"])["status"]; got != "201 Created" {
			t.Fatalf("%q: %v %s", cases[i].name, got, fxCompact(e))
		}
		r := fxObj(e["resource"])
		ids[i] = r["id"].(string)
		byID[ids[i]] = i
		check("batch answer", r, i)
	}
	for i, id := range ids {
		resp, r := w.env.GetJSON(t, fxBase+"/Observation/"+id, w.tok["doc"])
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("read %s: %d %v", id, resp.StatusCode, r)
		}
		check("read", r, i)
	}
	// Each observation is found by a search too, with the same effective[x].
	status, bundle := w.search(t, w.tok["doc"], fmt.Sprintf("/Observation?patient=%d&_count=100", w.alice.ID))
	if status != http.StatusOK {
		t.Fatalf("search: %d %v", status, bundle)
	}
	found := fxMatches(t, bundle)
	if len(found) != len(cases) {
		t.Fatalf("search found %d of %d", len(found), len(cases))
	}
	for _, r := range found {
		check("search", r, byID[r["id"].(string)])
	}
}

var fxInstant = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z$`)

// TestFHIRBatchStatuses sends one batch with an entry for every outcome a
// batch entry can have, and checks that each failed entry wrote nothing.
func TestFHIRBatchStatuses(t *testing.T) {
	w := fxNewWorld(t)
	doc := w.tok["doc"]
	hr := func(id string) fxObs {
		return fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, identifiers: []string{id},
			payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2024-03-05T10:00:00Z")))}
	}
	edit := func(o fxObs, f func(r map[string]any)) map[string]any {
		r := o.resource()
		f(r)
		return r
	}
	payload := func(o fxObs, raw string) fxObs { o.payload = []byte(raw); return o }
	dpWith := func(code, extra string) string {
		parts := strings.Split(code, ":")
		return fmt.Sprintf(`{"header": {"id": "x", "creation_date_time": "2024-06-01T12:00:00Z", "schema_id": {"namespace": %q, "name": %q, "version": %q}},
 "body": {"heart_rate": {"value": 60, "unit": "beats/min"}, "effective_time_frame": {"date_time": "2024-03-05T10:00:00Z"}%s}}`, parts[0], parts[1], parts[2], extra)
	}
	cases := []struct {
		name     string
		entry    any    // a resource, or a whole entry when request is custom
		raw      bool   // entry is a whole entry
		status   string // the entry's response status
		issue    string // the outcome's issue code
		mentions string // the outcome's diagnostics or expression names this
	}{
		{"created", hr("ok-1").resource(), false, "201 Created", "", ""},
		{"a request that is no POST of an Observation", map[string]any{"resource": hr("e-1").resource(), "request": map[string]any{"method": "PUT", "url": "Observation/1"}}, true,
			"400 Bad Request", "invalid", "request"},
		{"a request without a resource", map[string]any{"request": map[string]any{"method": "POST", "url": "Observation"}}, true, "400 Bad Request", "invalid", "resource"},
		{"another resource type", edit(hr("e-2"), func(r map[string]any) { r["resourceType"] = "Patient" }), false, "400 Bad Request", "invalid", "resourceType"},
		{"no subject", edit(hr("e-3"), func(r map[string]any) { delete(r, "subject") }), false, "400 Bad Request", "invalid", "subject"},
		{"a subject that is no patient", edit(hr("e-4"), func(r map[string]any) { r["subject"] = map[string]any{"reference": "Group/1"} }), false, "400 Bad Request", "invalid", "subject"},
		{"no device", edit(hr("e-5"), func(r map[string]any) { delete(r, "device") }), false, "400 Bad Request", "invalid", "device"},
		{"an unknown status", edit(hr("e-6"), func(r map[string]any) { r["status"] = "done" }), false, "400 Bad Request", "invalid", "status"},
		{"a status of the wrong JSON type", edit(hr("e-7"), func(r map[string]any) { r["status"] = 3 }), false, "400 Bad Request", "invalid", "status"},
		{"data that is not Base64", edit(hr("e-8"), func(r map[string]any) { fxObj(r["valueAttachment"])["data"] = "%%%" }), false, "400 Bad Request", "invalid", "data"},
		{"no data", edit(hr("e-9"), func(r map[string]any) { delete(fxObj(r["valueAttachment"]), "data") }), false, "400 Bad Request", "invalid", "data"},
		{"a content type that is not JSON", edit(hr("e-10"), func(r map[string]any) { fxObj(r["valueAttachment"])["contentType"] = "text/plain" }), false, "400 Bad Request", "invalid", "contentType"},
		{"two native codings", edit(hr("e-11"), func(r map[string]any) {
			r["code"] = map[string]any{"coding": []any{map[string]any{"system": fxOMH, "code": fxHR}, map[string]any{"system": fxIEEE, "code": fxHR}}}
		}), false, "400 Bad Request", "invalid", "coding"},
		// Without a native coding, an Observation is imported: it needs a
		// FHIR source.
		{"no native coding", edit(hr("e-12"), func(r map[string]any) {
			r["code"] = map[string]any{"coding": []any{map[string]any{"system": "http://loinc.org", "code": "8867-4"}}}
		}), false, "400 Bad Request", "invalid", "meta.source"},
		{"a native code that is no schema id", edit(hr("e-13"), func(r map[string]any) {
			r["code"] = map[string]any{"coding": []any{map[string]any{"system": fxOMH, "code": "heart rate"}}}
		}), false, "400 Bad Request", "invalid", "coding"},
		{"an identifier without a system", edit(hr("e-14"), func(r map[string]any) { r["identifier"] = []any{map[string]any{"value": "v"}} }), false, "400 Bad Request", "invalid", "identifier"},
		{"a patient of another organization", fxObs{patient: w.carol.ID, device: w.watch, code: fxHR, identifiers: []string{"e-15"},
			payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2024-03-05T10:00:00Z")))}.resource(), false, "404 Not Found", "not-found", "Observation.subject"},
		{"a scope the patient consented to in no study", fxObs{patient: w.bob.ID, device: w.watch, code: fxSteps, identifiers: []string{"e-16"},
			payload: fxDataPoint(fxSteps, fxStepCount(fxInterval("date", "2024-03-05", "part_of_day", "morning")))}.resource(), false, "403 Forbidden", "forbidden", ""},
		{"a scope pending in one study and not requested by the other", fxObs{patient: w.dave.ID, device: w.cuff, code: fxBP, identifiers: []string{"e-17"},
			payload: fxDataPoint(fxBP, fxBloodPressure(fxAt("2024-03-05T10:00:00Z")))}.resource(), false, "403 Forbidden", "forbidden", ""},
		{"IEEE-coded heart rate, consented under the Open mHealth system", fxObs{patient: w.bob.ID, device: w.cuff, system: fxIEEE, code: fxHR, identifiers: []string{"e-18"},
			payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2024-03-05T10:00:00Z")))}.resource(), false, "201 Created", "", ""},
		{"an unknown patient", edit(hr("e-19"), func(r map[string]any) { r["subject"] = map[string]any{"reference": "Patient/999999"} }), false, "404 Not Found", "not-found", "subject"},
		{"an unknown device", edit(hr("e-20"), func(r map[string]any) { r["device"] = map[string]any{"reference": "Device/999999"} }), false, "404 Not Found", "not-found", "device"},
		{"an identifier another entry took", hr("ok-1").resource(), false, "409 Conflict", "duplicate", "ok-1"},
		{"a payload that fails its schema", payload(hr("e-21"), `{"header": {"id": "x", "creation_date_time": "2024-06-01T12:00:00Z", "schema_id": {"namespace": "omh", "name": "heart-rate", "version": "2.0"}},
 "body": {"heart_rate": {"value": 60, "unit": "bpm"}, "effective_time_frame": {"date_time": "2024-03-05T10:00:00Z"}}}`).resource(), false, "422 Unprocessable Entity", "processing", "heart_rate"},
		{"a payload without its required time frame", payload(hr("e-22"), string(fxDataPoint(fxHR, fxHeartRate(nil)))).resource(), false, "422 Unprocessable Entity", "processing", "effective_time_frame"},
		{"a payload header without an id", payload(hr("e-23"), `{"header": {"creation_date_time": "2024-06-01T12:00:00Z", "schema_id": {"namespace": "omh", "name": "heart-rate", "version": "2.0"}},
 "body": {"heart_rate": {"value": 60, "unit": "beats/min"}, "effective_time_frame": {"date_time": "2024-03-05T10:00:00Z"}}}`).resource(), false, "422 Unprocessable Entity", "processing", "id"},
		{"a schema id that disagrees with the code", payload(hr("e-24"), dpWith(fxBP, "")).resource(), false, "422 Unprocessable Entity", "processing", "schema_id"},
		{"a key with a dot", payload(hr("e-25"), dpWith(fxHR, `, "a.b": 1`)).resource(), false, "422 Unprocessable Entity", "processing", "a.b"},
		{"a key starting with $", payload(hr("e-26"), dpWith(fxHR, `, "extra": {"$where": 1}`)).resource(), false, "422 Unprocessable Entity", "processing", "$where"},
		{"a key holding NUL", payload(hr("e-27"), dpWith(fxHR, `, "a\u0000b": 1`)).resource(), false, "422 Unprocessable Entity", "processing", "key"},
		{"a payload that is no JSON object", payload(hr("e-28"), `[1, 2]`).resource(), false, "422 Unprocessable Entity", "processing", ""},
		{"created after the failures", hr("ok-2").resource(), false, "201 Created", "", ""},
	}
	var entries []any
	for _, c := range cases {
		if c.raw {
			entries = append(entries, c.entry)
		} else {
			entries = append(entries, map[string]any{"resource": c.entry, "request": map[string]any{"method": "POST", "url": "Observation"}})
		}
	}
	resp, out := w.env.Send(t, "POST", fxBase+"/", doc, map[string]any{"resourceType": "Bundle", "type": "batch", "entry": entries})
	if resp.StatusCode != http.StatusOK || out["type"] != "batch-response" || resp.Header.Get("Content-Type") != "application/fhir+json" {
		t.Fatalf("batch: %d %s %v", resp.StatusCode, resp.Header.Get("Content-Type"), out)
	}
	got := fxEntries(t, out)
	if len(got) != len(cases) {
		t.Fatalf("%d entries answered for %d", len(got), len(cases))
	}
	created := 0
	for i, c := range cases {
		r := fxObj(got[i]["response"])
		if r["status"] != c.status {
			t.Errorf("entry %d (%s): status %v, want %s: %s", i, c.name, r["status"], c.status, fxCompact(got[i]))
			continue
		}
		if c.status == "201 Created" {
			created++
			res := fxObj(got[i]["resource"])
			id, _ := res["id"].(string)
			if res["resourceType"] != "Observation" || id == "" || r["location"] != "Observation/"+id+"/_history/1" || r["etag"] != `W/"1"` ||
				!strings.HasSuffix(fmt.Sprint(got[i]["fullUrl"]), fxBase+"/Observation/"+id) || !fxInstant.MatchString(fmt.Sprint(r["lastModified"])) {
				t.Errorf("entry %d (%s): %s", i, c.name, fxCompact(got[i]))
			}
			continue
		}
		outcome := fxObj(r["outcome"])
		if outcome["resourceType"] != "OperationOutcome" || fxIssueCode(outcome) != c.issue || got[i]["resource"] != nil {
			t.Errorf("entry %d (%s): outcome %s, want issue %s", i, c.name, fxCompact(got[i]), c.issue)
		}
		if text := fxCompact(outcome); c.mentions != "" && !strings.Contains(text, c.mentions) {
			t.Errorf("entry %d (%s): the outcome does not name %q: %s", i, c.name, c.mentions, text)
		}
	}
	// Nothing of the failed entries was stored.
	status, count := w.search(t, w.tok["super"], "/Observation?_summary=count")
	if status != http.StatusOK || count["total"] != float64(created) {
		t.Errorf("after the batch: %d %v, want a total of %d", status, count["total"], created)
	}
	// A batch of failures changes nothing in the database (but the id
	// counter, which the store advanced for the entries that reached it).
	var failing []any
	for _, c := range cases {
		if c.status != "201 Created" && !c.raw {
			failing = append(failing, c.entry)
		}
	}
	mixed := hr("fresh-1")
	mixed.identifiers = append(mixed.identifiers, "ok-1") // claims fresh-1, loses on ok-1
	failing = append(failing, mixed.resource())
	before := fxSnapshot(t, w)
	for i, e := range w.batch(t, doc, failing...) {
		if s := fxObj(e["response"])["status"]; s == "201 Created" {
			t.Errorf("failing entry %d: %v", i, s)
		}
	}
	if after := fxSnapshot(t, w); fxCompact(after) != fxCompact(before) {
		t.Errorf("a batch of failures changed the database:\nbefore %v\nafter  %v", before, after)
	}

	// The identifiers of failed entries were released: they can be used now.
	retry := hr("e-21")
	retry.identifiers = []string{"e-15", "e-16", "e-21", "e-27"}
	w.create(t, doc, retry)

	// Who writes: a viewer may not, a patient writes only their own data.
	own := fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2024-03-06T10:00:00Z")))}
	other := own
	other.patient = w.bob.ID
	for i, c := range []struct {
		actor string
		obs   fxObs
		want  string
	}{
		{"viewer", own, "403 Forbidden"},
		{"nurse", own, "201 Created"},     // a member of A1, one of alice's organizations
		{"nurse", other, "404 Not Found"}, // a patient out of sight: as one that does not exist
		{"outsider", own, "404 Not Found"},
		{"alice", own, "201 Created"},
		{"alice", other, "404 Not Found"},
		{"super", other, "201 Created"},
	} {
		// Each its own data point: the same one twice is one observation.
		o := c.obs
		o.payload = fxDataPoint(fxHR, fxHeartRate(fxAt(fmt.Sprintf("2024-03-06T10:%02d:00Z", i))))
		e := w.batch(t, w.tok[c.actor], o.resource())[0]
		if s := fxObj(e["response"])["status"]; s != c.want {
			t.Errorf("%s writing for patient %d: %v, want %s", c.actor, c.obs.patient, s, c.want)
		}
	}

	// Refusals of the whole Bundle.
	for _, c := range []struct {
		name, token, body string
		status            int
	}{
		{"no token", "", fxCompact(fxBatch(own.resource())), http.StatusUnauthorized},
		{"not JSON", doc, "{", http.StatusBadRequest},
		{"not a Bundle", doc, fxCompact(own.resource()), http.StatusBadRequest},
		{"a transaction", doc, strings.Replace(fxCompact(fxBatch(own.resource())), `"batch"`, `"transaction"`, 1), http.StatusBadRequest},
	} {
		resp, out := w.env.Send(t, "POST", fxBase+"/", c.token, c.body)
		if resp.StatusCode != c.status || out["resourceType"] != "OperationOutcome" {
			t.Errorf("%s: %d %v, want %d and an OperationOutcome", c.name, resp.StatusCode, out, c.status)
		}
	}
	// The base without its trailing slash takes batches too, and so does
	// the alias.
	for _, path := range []string{fxBase, "/fhir/r5", "/fhir/r5/"} {
		own.identifiers = []string{"base-" + path}
		resp, out := w.env.Send(t, "POST", path, doc, fxBatch(own.resource()))
		if e := fxEntries(t, out); resp.StatusCode != http.StatusOK || len(e) != 1 || fxObj(e[0]["response"])["status"] != "201 Created" {
			t.Errorf("POST %s: %d %v", path, resp.StatusCode, out)
		}
	}
	// An empty batch answers an empty batch-response.
	if entries := w.batch(t, doc); len(entries) != 0 {
		t.Errorf("empty batch: %v", entries)
	}
}

// TestFHIRIdentifiersAreIdempotent re-sends observations: an identifier
// already stored is 409 duplicate, in a batch and in a single create, and
// nothing more is stored.
func TestFHIRIdentifiersAreIdempotent(t *testing.T) {
	w := fxNewWorld(t)
	doc := w.tok["doc"]
	obs := fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, identifiers: []string{"reading-1"},
		payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2024-03-05T10:00:00Z")))}
	first := w.create(t, doc, obs)[0]
	total := func() float64 {
		t.Helper()
		_, b := w.search(t, w.tok["super"], "/Observation?_summary=count")
		return b["total"].(float64)
	}

	// Re-sent in a batch, and twice within one batch.
	again := fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, identifiers: []string{"reading-2"},
		payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2024-03-05T11:00:00Z")))}
	// A 409 of what is stored names it (the resend of a stored
	// observation); one of a different observation names none.
	entries := w.batch(t, doc, obs.resource(), again.resource(), again.resource())
	secondID, _ := fxObj(entries[1]["resource"])["id"].(string)
	for i, want := range []struct{ status, location string }{
		{"409 Conflict", "Observation/" + first}, {"201 Created", "Observation/" + secondID + "/_history/1"}, {"409 Conflict", "Observation/" + secondID},
	} {
		r := fxObj(entries[i]["response"])
		if r["status"] != want.status || r["location"] != want.location {
			t.Errorf("entry %d: %v at %v, want %s at %s", i, r["status"], r["location"], want.status, want.location)
		}
		if want.status == "409 Conflict" && fxIssueCode(fxObj(r["outcome"])) != "duplicate" {
			t.Errorf("entry %d: outcome %v, want issue code duplicate", i, r["outcome"])
		}
	}
	// Re-sent as a single create, even for another patient.
	resp, out := w.env.Send(t, "POST", fxBase+"/Observation", doc, obs.resource())
	if resp.StatusCode != http.StatusConflict || out["resourceType"] != "OperationOutcome" || fxIssueCode(out) != "duplicate" ||
		!strings.HasSuffix(resp.Header.Get("Location"), fxBase+"/Observation/"+first) {
		t.Errorf("single create of a stored identifier: %d, Location %q: %v", resp.StatusCode, resp.Header.Get("Location"), out)
	}
	bobs := obs
	bobs.patient = w.bob.ID
	if e := w.batch(t, doc, bobs.resource())[0]; fxObj(e["response"])["status"] != "409 Conflict" || fxObj(e["response"])["location"] != nil {
		t.Errorf("another patient's observation with a taken identifier: %v", e["response"])
	}
	// An observation with one new and one taken identifier is refused whole,
	// and the new one stays free.
	mixed := obs
	mixed.identifiers = []string{"reading-3", "reading-1"}
	if e := w.batch(t, doc, mixed.resource())[0]; fxObj(e["response"])["status"] != "409 Conflict" {
		t.Errorf("one taken identifier of two: %v", e["response"])
	}
	if n := total(); n != 2 {
		t.Errorf("%v observations stored, want 2", n)
	}
	fresh := obs
	fresh.identifiers = []string{"reading-3"}
	w.create(t, doc, fresh)
	// The same value in another system is another identifier.
	r := obs.resource()
	r["identifier"] = []any{map[string]any{"system": "https://other.example.org/ids", "value": "reading-1"}}
	if e := w.batch(t, doc, r)[0]; fxObj(e["response"])["status"] != "201 Created" {
		t.Errorf("the value in another system: %v", e["response"])
	}
	if ids := w.ids(t, doc, "/Observation?identifier="+fxObsIDs+"|reading-1"); len(ids) != 1 || ids[0] != first {
		t.Errorf("identifier search: %v, want [%s]", ids, first)
	}
}

// TestFHIRSingleCreate posts one Observation to [base]/Observation: a
// native coding takes the batch path, answers 201 with Location and ETag,
// and the resource reads back the same.
func TestFHIRSingleCreate(t *testing.T) {
	w := fxNewWorld(t)
	before := time.Now().UTC()
	obs := fxObs{patient: w.alice.ID, device: w.watch, system: fxIEEE, code: fxHR, identifiers: []string{"single-1"},
		extra:   []map[string]any{{"system": "http://loinc.org", "code": "8867-4", "display": "Heart rate"}},
		payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2024-03-05T10:00:00+01:00")))}
	resp, body := fxDo(t, w.env, "POST", fxBase+"/Observation", map[string]string{"Authorization": "Bearer " + w.tok["doc"]}, fxCompact(obs.resource()))
	created := fxDecode(t, body)
	id, _ := created["id"].(string)
	if resp.StatusCode != http.StatusCreated || created["resourceType"] != "Observation" || id == "" {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	if loc := resp.Header.Get("Location"); loc != w.env.URL+fxBase+"/Observation/"+id+"/_history/1" {
		t.Errorf("Location %q", loc)
	}
	if etag := resp.Header.Get("ETag"); etag != `W/"1"` {
		t.Errorf("ETag %q", etag)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/fhir+json" {
		t.Errorf("Content-Type %q", ct)
	}
	meta := fxObj(created["meta"])
	last, err := time.Parse(time.RFC3339Nano, fmt.Sprint(meta["lastUpdated"]))
	if err != nil || !fxInstant.MatchString(fmt.Sprint(meta["lastUpdated"])) || last.Before(before.Truncate(time.Microsecond)) || last.After(time.Now()) || meta["versionId"] != "1" {
		t.Errorf("meta %v", meta)
	}
	coding := fxArr(fxObj(created["code"])["coding"])
	if len(coding) != 2 || fxObj(coding[0])["system"] != fxIEEE || fxObj(coding[1])["code"] != "8867-4" ||
		created["status"] != "final" || fxObj(created["subject"])["reference"] != fmt.Sprintf("Patient/%d", w.alice.ID) ||
		fxObj(created["device"])["reference"] != fmt.Sprintf("Device/%d", w.watch) || created["effectiveDateTime"] != "2024-03-05T10:00:00+01:00" ||
		fxObj(fxArr(created["identifier"])[0])["value"] != "single-1" || fxObj(created["valueAttachment"])["contentType"] != "application/json" {
		t.Errorf("created %s", body)
	}
	read := w.read(t, "doc", "Observation/"+id)
	if fxCompact(read) != fxCompact(created) {
		t.Errorf("read back differs:\n%s\n%s", fxCompact(read), fxCompact(created))
	}
	// Refusals are OperationOutcomes with the status of the batch entry.
	for _, c := range []struct {
		name   string
		token  string
		obs    fxObs
		status int
	}{
		{"not consented", w.tok["doc"], fxObs{patient: w.bob.ID, device: w.watch, code: fxSteps, payload: fxDataPoint(fxSteps, fxStepCount(fxInterval("date", "2024-03-05", "part_of_day", "night")))}, http.StatusForbidden},
		{"viewer", w.tok["viewer"], fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, payload: obs.payload}, http.StatusForbidden},
		{"schema", w.tok["doc"], fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, payload: fxDataPoint(fxHR, fxHeartRate(nil))}, http.StatusUnprocessableEntity},
		{"unknown device", w.tok["doc"], fxObs{patient: w.alice.ID, device: 999999, code: fxHR, payload: obs.payload}, http.StatusNotFound},
	} {
		resp, out := w.env.Send(t, "POST", fxBase+"/Observation", c.token, c.obs.resource())
		if resp.StatusCode != c.status || out["resourceType"] != "OperationOutcome" {
			t.Errorf("%s: %d %v, want %d", c.name, resp.StatusCode, out, c.status)
		}
	}
	// The alias creates too, and points at itself.
	obs.identifiers = []string{"single-2"}
	resp, body = fxDo(t, w.env, "POST", "/fhir/r5/Observation", map[string]string{"Authorization": "Bearer " + w.tok["alice"]}, fxCompact(obs.resource()))
	second := fxDecode(t, body)
	if id2, _ := second["id"].(string); resp.StatusCode != http.StatusCreated || resp.Header.Get("Location") != w.env.URL+"/fhir/r5/Observation/"+id2+"/_history/1" {
		t.Errorf("create on the alias: %d %s %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	// meta.lastUpdated keeps microseconds: finer than a BSON date, and the
	// same on every read (checked above). Each has a sub-millisecond part
	// but once in a thousand: both lacking one means milliseconds.
	last2, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(fxObj(second["meta"])["lastUpdated"]))
	if last.Nanosecond()%1000 != 0 || last2.Nanosecond()%1000 != 0 || (last.Nanosecond()%1e6 == 0 && last2.Nanosecond()%1e6 == 0) {
		t.Errorf("meta.lastUpdated %v and %v: not microseconds", last, last2)
	}
}

// fxSnapshot is the database's documents but the id counters.
func fxSnapshot(t *testing.T, w *fxWorld) map[string][]string {
	t.Helper()
	snap := repotest.Snapshot(t, w.env.DB)
	delete(snap, "counters")
	return snap
}

// read reads a resource ("Type/id") as the named actor; it must succeed.
func (w *fxWorld) read(t *testing.T, actor, ref string) map[string]any {
	t.Helper()
	resp, body := w.env.GetJSON(t, fxBase+"/"+ref, w.tok[actor])
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("read %s as %s: %d %v", ref, actor, resp.StatusCode, body)
	}
	return body
}
