package handlers_test

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// fxData is the fixture with a small set of observations, named:
//
//	a1 alice heart rate 2024-01-10T08:00Z, identifier a1, also LOINC coded
//	a2 alice heart rate 2024-01-20T08:00+02:00, preliminary
//	a3 alice blood pressure 2024-02-05T12:00Z
//	a4 alice step count 2024-02-10T00:00Z..23:00Z, amended
//	a5 alice physical activity, no time frame, coded on the IEEE system
//	a6 alice physical activity, no time frame
//	b1 bob heart rate 2024-01-15T00:00Z
//	b2 bob blood pressure 2024-03-01T00:00Z
//	b3 bob heart rate 2024-01-10T08:00Z (the date of a1), identifier b3
//	d1 dave heart rate 2024-01-12T00:00Z
//	a7, a8 alice heart rate ten and thirteen days ago at noon UTC, created
//	   later than the others (another lastUpdated)
//	c1 carol heart rate 2024-01-12T00:00Z, by the outsider
type fxData struct {
	*fxWorld
	id      map[string]string // name -> id
	name    map[string]string // id -> name
	between time.Time         // after the first batch, before the second
	recent  string            // the day of a7, YYYY-MM-DD
}

func fxNewData(t *testing.T) *fxData {
	w := fxNewWorld(t)
	d := &fxData{fxWorld: w, id: map[string]string{}, name: map[string]string{}}
	hr := func(p int64, frame any, ids ...string) fxObs {
		return fxObs{patient: p, device: w.watch, code: fxHR, identifiers: ids, payload: fxDataPoint(fxHR, fxHeartRate(frame))}
	}
	a1 := hr(w.alice.ID, fxAt("2024-01-10T08:00:00Z"), "a1")
	a1.extra = []map[string]any{{"system": "http://loinc.org", "code": "8867-4"}}
	a2 := hr(w.alice.ID, fxAt("2024-01-20T08:00:00+02:00"))
	a2.status = "preliminary"
	a3 := fxObs{patient: w.alice.ID, device: w.cuff, code: fxBP, payload: fxDataPoint(fxBP, fxBloodPressure(fxAt("2024-02-05T12:00:00Z")))}
	a4 := fxObs{patient: w.alice.ID, device: w.watch, code: fxSteps, status: "amended",
		payload: fxDataPoint(fxSteps, fxStepCount(fxInterval("start_date_time", "2024-02-10T00:00:00Z", "end_date_time", "2024-02-10T23:00:00Z")))}
	a5 := fxObs{patient: w.alice.ID, device: w.watch, system: fxIEEE, code: fxPA, payload: fxDataPoint(fxPA, map[string]any{"activity_name": "walking"})}
	a6 := fxObs{patient: w.alice.ID, device: w.watch, code: fxPA, payload: fxDataPoint(fxPA, map[string]any{"activity_name": "cycling"})}
	b1 := hr(w.bob.ID, fxAt("2024-01-15T00:00:00Z"))
	b2 := fxObs{patient: w.bob.ID, device: w.cuff, code: fxBP, payload: fxDataPoint(fxBP, fxBloodPressure(fxAt("2024-03-01T00:00:00Z")))}
	b3 := hr(w.bob.ID, fxAt("2024-01-10T08:00:00Z"), "b3")
	d1 := hr(w.dave.ID, fxAt("2024-01-12T00:00:00Z"))
	d.name_(w.create(t, w.tok["doc"], a1, a2, a3, a4, a5, a6, b1, b2, b3, d1), "a1", "a2", "a3", "a4", "a5", "a6", "b1", "b2", "b3", "d1")

	time.Sleep(5 * time.Millisecond)
	d.between = time.Now().UTC().Truncate(time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	today := time.Now().UTC().Truncate(24 * time.Hour)
	noon := func(daysAgo int) string {
		return today.AddDate(0, 0, -daysAgo).Add(12 * time.Hour).Format(time.RFC3339)
	}
	d.recent = today.AddDate(0, 0, -10).Format(time.DateOnly)
	d.name_(w.create(t, w.tok["doc"], hr(w.alice.ID, fxAt(noon(10))), hr(w.alice.ID, fxAt(noon(13)))), "a7", "a8")
	d.name_(w.create(t, w.tok["outsider"], hr(w.carol.ID, fxAt("2024-01-12T00:00:00Z"))), "c1")
	return d
}

func (d *fxData) name_(ids []string, names ...string) {
	for i, n := range names {
		d.id[n], d.name[ids[i]] = ids[i], n
	}
}

// names runs a one-page search and names its matches, in order.
func (d *fxData) names(t *testing.T, actor, path string) []string {
	t.Helper()
	var out []string
	for _, id := range d.ids(t, d.tok[actor], path) {
		n, ok := d.name[id]
		if !ok {
			n = "?" + id
		}
		out = append(out, n)
	}
	return out
}

// substitute replaces {alice}, {S1}, {A} ... in a query with ids.
func (d *fxData) substitute(q string) string {
	r := strings.NewReplacer(
		"{alice}", fmt.Sprint(d.alice.ID), "{bob}", fmt.Sprint(d.bob.ID), "{carol}", fmt.Sprint(d.carol.ID), "{dave}", fmt.Sprint(d.dave.ID),
		"{A}", fmt.Sprint(d.orgA.ID), "{A1}", fmt.Sprint(d.orgA1.ID), "{B}", fmt.Sprint(d.orgB.ID),
		"{S1}", fmt.Sprint(d.s1.ID), "{S2}", fmt.Sprint(d.s2.ID), "{S3}", fmt.Sprint(d.s3.ID),
		"{OMH}", url.QueryEscape(fxOMH), "{IEEE}", url.QueryEscape(fxIEEE), "{MRN}", url.QueryEscape(fxMRN), "{IDS}", url.QueryEscape(fxObsIDs),
		"{recent}", d.recent, "{between}", url.QueryEscape(d.between.Format("2006-01-02T15:04:05.000Z07:00")),
		"{a3}", d.id["a3"], "{b2}", d.id["b2"], "{c1}", d.id["c1"],
	)
	return r.Replace(q)
}

// TestFHIRObservationSearch runs the searches of native observations over
// one fixture (fxData): the parameters, the sorts, and the controls.
func TestFHIRObservationSearch(t *testing.T) {
	d := fxNewData(t)
	t.Run("parameters", func(t *testing.T) { fxSearchParameters(t, d) })
	t.Run("sort", func(t *testing.T) { fxSearchSort(t, d) })
	t.Run("controls", func(t *testing.T) { fxSearchControls(t, d) })
}

// fxSearchParameters checks every Observation search parameter, the date
// prefixes, OR and AND, and what each caller may see.
func fxSearchParameters(t *testing.T, d *fxData) {
	all := "a1 a2 a3 a4 a5 a6 b1 b2 b3 d1 a7 a8"
	hr := "a1 a2 b1 b3 d1 a7 a8"
	cases := []struct {
		actor, query, want string
	}{
		// What a caller may read without scoping parameters.
		{"doc", "", all},
		{"viewer", "", all},
		{"nurse", "", "a1 a2 a3 a4 a5 a6 a7 a8"}, // alice is in A1
		{"alice", "", "a1 a2 a3 a4 a5 a6 a7 a8"},
		{"bob", "", "b1 b2 b3"},
		{"carol", "", "c1"},
		{"outsider", "", "c1"},
		{"super", "", all + " c1"},

		// patient, patient.organization, patient.identifier
		{"doc", "patient={alice}", "a1 a2 a3 a4 a5 a6 a7 a8"},
		{"doc", "patient=Patient/{bob}", "b1 b2 b3"},
		{"doc", "patient=http://elsewhere.example.org/fhir/Patient/{dave}", "d1"},
		{"doc", "patient={bob},Patient/{dave}", "b1 b2 b3 d1"},
		{"doc", "patient={bob}&patient={dave}", ""},
		{"doc", "patient=999999", ""},
		{"doc", "patient=Group/{bob}", ""},
		{"alice", "patient={alice}", "a1 a2 a3 a4 a5 a6 a7 a8"},
		{"doc", "patient.organization={A1}", "a1 a2 a3 a4 a5 a6 a7 a8"},
		{"doc", "patient.organization={A}", all},
		{"super", "patient.organization={B}", "c1"},
		{"doc", "patient.organization={A1},{B}&code=omh:step-count:3.0", ""}, // B: 403 below
		{"doc", "patient.identifier={MRN}|B-2", "b1 b2 b3"},
		{"doc", "patient.identifier={MRN}|B-2,{MRN}|A-1&code=omh:blood-pressure:4.0", "a3 b2"},
		{"doc", "patient.identifier={MRN}|nobody", ""},

		// The study search: each patient limited to what they consented to
		// share with the study.
		{"doc", "patient._has:Group:member:_id={S1}", "a1 a2 a3 a4 a5 a6 b1 b3 a7 a8"},
		{"doc", "patient._has:Group:member:_id={S2}", "b2 d1"},
		{"doc", "patient._has:Group:member:_id={S1},{S2}", all},
		// Repeated, each study limits on its own: bob's consents to S1
		// (heart rate) and S2 (blood pressure) have nothing in common.
		{"doc", "patient._has:Group:member:_id={S1}&patient._has:Group:member:_id={S2}", ""},
		{"doc", "patient._has:Group:member:_id={S1}&patient._has:Group:member:_id={S1},{S2}", "a1 a2 a3 a4 a5 a6 b1 b3 a7 a8"},
		{"doc", "patient._has:Group:member:_id={S1}&code={OMH}|omh:blood-pressure:4.0", "a3"},
		{"doc", "patient._has:Group:member:_id={S1}&patient={bob}", "b1 b3"},
		{"doc", "patient._has:Group:member:_id={S1}&patient={dave}", ""}, // dave answered nothing for S1
		{"doc", "patient._has:Group:member:_id={S1}&code=omh:step-count:3.0&date=2024-02-10", "a4"},
		{"alice", "patient._has:Group:member:_id={S1}", "a1 a2 a3 a4 a5 a6 a7 a8"},
		{"outsider", "patient._has:Group:member:_id={S3}", "c1"},
		{"doc", "patient._has:Group:member:_id=999999", ""},

		// code: system|code, |code, bare code, system|; the two native
		// systems answer for each other.
		{"doc", "code={OMH}|omh:heart-rate:2.0", hr},
		{"doc", "code={IEEE}|omh:heart-rate:2.0", hr},
		{"doc", "code=omh:heart-rate:2.0", hr},
		{"doc", "code=|omh:heart-rate:2.0", ""},
		{"doc", "code={OMH}|omh:physical-activity:1.2", "a5 a6"},
		{"doc", "code={IEEE}|omh:physical-activity:1.2", "a5 a6"},
		{"doc", "code={IEEE}|", all},
		{"doc", "code=http://loinc.org|8867-4", "a1"},
		{"doc", "code=8867-4", "a1"},
		{"doc", "code={OMH}|omh:blood-pressure:4.0,{IEEE}|omh:physical-activity:1.2", "a3 a5 a6 b2"},
		{"doc", "code={OMH}|omh:heart-rate:2.0&code={IEEE}|omh:heart-rate:2.0", hr},
		{"doc", "code=omh:heart-rate:2.0&code=omh:blood-pressure:4.0", ""},
		{"doc", "code=omh:heart-rate:2.0&patient={bob}", "b1 b3"},

		// date: effective[x] with FHIR range semantics and every prefix.
		{"doc", "date=2024-01", "a1 a2 b1 b3 d1"},
		{"doc", "date=eq2024-01-10", "a1 b3"},
		{"doc", "date=2024-01-10T08:00", "a1 b3"},
		{"doc", "date=2024-01-20T08:00:00%2B02:00", "a2"},
		{"doc", "date=2024-02-10", "a4"},
		{"doc", "date=2024-02", "a3 a4"},
		{"doc", "date=ne2024-01", "a3 a4 b2 a7 a8"},
		{"doc", "date=lt2024-01-15", "a1 b3 d1"},
		{"doc", "date=le2024-01-15", "a1 b1 b3 d1"},
		{"doc", "date=gt2024-02-10", "b2 a7 a8"},
		{"doc", "date=ge2024-02-10", "a4 b2 a7 a8"},
		{"doc", "date=sa2024-02-09", "a4 b2 a7 a8"},
		{"doc", "date=sa2024-02-10", "b2 a7 a8"},
		{"doc", "date=eb2024-01-20", "a1 b1 b3 d1"},
		{"doc", "date=le2024-01-20", "a1 a2 b1 b3 d1"},
		{"doc", "date=ap{recent}", "a7"},
		{"doc", "date=2024-01-10,2024-03-01", "a1 b2 b3"},
		{"doc", "date=ge2024-01-12&date=lt2024-01-21", "a2 b1 d1"},
		{"doc", "date=2024", "a1 a2 a3 a4 b1 b2 b3 d1"},
		{"doc", "date=lt2024-02-01&code=omh:heart-rate:2.0&patient={alice}", "a1 a2"},

		// identifier, status, _id
		{"doc", "identifier={IDS}|a1", "a1"},
		{"doc", "identifier=a1", "a1"},
		{"doc", "identifier={IDS}|a1,{IDS}|b3", "a1 b3"},
		{"doc", "identifier=https://other.example.org|a1", ""},
		{"doc", "status=preliminary", "a2"},
		{"doc", "status=preliminary,amended", "a2 a4"},
		{"doc", "status=http://hl7.org/fhir/observation-status|amended", "a4"},
		{"doc", "status=http://example.org/status|final", ""},
		{"doc", "status=final&patient={bob}", "b1 b2 b3"},
		{"doc", "_id={a3},{b2}", "a3 b2"},
		{"doc", "_id={c1}", ""},
		{"doc", "_id=not-a-number", ""},

		// _lastUpdated, with a time between the two batches.
		{"doc", "_lastUpdated=gt{between}", "a7 a8"},
		{"doc", "_lastUpdated=sa{between}", "a7 a8"},
		{"doc", "_lastUpdated=ge{between}", "a7 a8"},
		{"doc", "_lastUpdated=lt{between}", "a1 a2 a3 a4 a5 a6 b1 b2 b3 d1"},
		{"doc", "_lastUpdated=eb{between}", "a1 a2 a3 a4 a5 a6 b1 b2 b3 d1"},
		{"doc", "_lastUpdated=le{between}", "a1 a2 a3 a4 a5 a6 b1 b2 b3 d1"},
		{"doc", "_lastUpdated=ne{between}", all},
		{"doc", "_lastUpdated=eq{between}", ""},
		{"doc", "_lastUpdated=gt{between}&_lastUpdated=lt2999", "a7 a8"},
		{"doc", "_lastUpdated=lt2000,gt{between}", "a7 a8"},
		{"doc", "_lastUpdated=le2000", ""},
		{"doc", "_lastUpdated=2000", ""},
		{"doc", "_lastUpdated=ap2000-01-01", ""},

		// _source: omitted, the native store; any value, nothing yet.
		{"doc", "_source=http://localhost:8000/fhir-source/1", ""},
		{"doc", "_source=native", ""},
	}
	for _, c := range cases {
		q := d.substitute(c.query)
		if strings.Contains(c.query, "{B}") && c.actor == "doc" {
			continue // refused: checked below
		}
		got := d.names(t, c.actor, fxPath("/Observation")+"?"+q)
		want := strings.Fields(c.want)
		if !slices.Equal(fxSortNames(d, got), fxSortNames(d, want)) {
			t.Errorf("%s: Observation?%s\n got %v\nwant %v", c.actor, c.query, got, want)
		}
		// Default order is by id; a search by date is in date order, on
		// the key its range bounds (fhirsearch.TestPipelines).
		if !strings.Contains(c.query, "date=") && !slices.Equal(got, fxSortNames(d, got)) {
			t.Errorf("%s: Observation?%s: not in id order: %v", c.actor, c.query, got)
		}
	}

	// A patient the caller may not read names nothing, as an id that does
	// not exist: no 403 tells which patients exist.
	for _, c := range []struct{ actor, query, same string }{
		{"doc", "patient={carol}", "patient=999999"},
		{"doc", "patient={alice},{carol}", "patient={alice},999999"},
		{"doc", "patient.identifier={MRN}|C-3", "patient.identifier={MRN}|none"},
		{"nurse", "patient={bob}", "patient=999999"},
		{"alice", "patient={bob}", "patient=999999"},
		{"outsider", "patient.identifier={MRN}|A-1", "patient.identifier={MRN}|none"},
	} {
		got := d.names(t, c.actor, fxPath("/Observation")+"?"+d.substitute(c.query))
		if want := d.names(t, c.actor, fxPath("/Observation")+"?"+d.substitute(c.same)); !slices.Equal(got, want) {
			t.Errorf("%s: Observation?%s found %v; as %s: %v", c.actor, c.query, got, c.same, want)
		}
	}
	// An organization or study the caller may not read is 403.
	for _, c := range []struct{ actor, query string }{
		{"doc", "patient.organization={B}"},
		{"doc", "patient.organization={A1},{B}"},
		{"doc", "patient._has:Group:member:_id={S3}"},
		{"nurse", "patient._has:Group:member:_id={S1}"},
		{"alice", "patient.organization={B}"},
		{"alice", "patient._has:Group:member:_id={S2}"},
	} {
		status, body := d.search(t, d.tok[c.actor], "/Observation?"+d.substitute(c.query))
		if status != http.StatusForbidden || body["resourceType"] != "OperationOutcome" || fxIssueCode(body) != "forbidden" {
			t.Errorf("%s: Observation?%s: %d %v, want 403", c.actor, c.query, status, body)
		}
	}
	// Searches need a token.
	if status, body := d.search(t, "", "/Observation"); status != http.StatusUnauthorized || body["resourceType"] != "OperationOutcome" {
		t.Errorf("without a token: %d %v", status, body)
	}
}

// fxSortNames orders names by their ids.
func fxSortNames(d *fxData, names []string) []string {
	out := slices.Clone(names)
	slices.SortFunc(out, func(a, b string) int {
		x, y := d.id[a], d.id[b]
		if len(x) != len(y) {
			return len(x) - len(y)
		}
		return strings.Compare(x, y)
	})
	return out
}

// fxSearchSort checks _sort on date and _lastUpdated, both ways: ties
// broken by id in the sort's direction, resources without a date last both
// ways; pages of two walk the same order through the next links.
func fxSearchSort(t *testing.T, d *fxData) {
	first := "a1 a2 a3 a4 a5 a6 b1 b2 b3 d1"
	for _, c := range []struct{ query, want string }{
		{"_sort=date", "a1 b3 d1 b1 a2 a3 a4 b2 a8 a7 a5 a6"},
		{"_sort=-date", "a7 a8 b2 a4 a3 a2 b1 d1 b3 a1 a6 a5"},
		{"_sort=_lastUpdated", first + " a7 a8"},
		{"_sort=lastUpdated", first + " a7 a8"},
		{"_sort=-_lastUpdated", "a8 a7 d1 b3 b2 b1 a6 a5 a4 a3 a2 a1"},
		{"_sort=-lastUpdated", "a8 a7 d1 b3 b2 b1 a6 a5 a4 a3 a2 a1"},
		{"_sort=date&code=omh:heart-rate:2.0", "a1 b3 d1 b1 a2 a8 a7"},
		{"_sort=-date&patient={alice}", "a7 a8 a4 a3 a2 a1 a6 a5"},
		{"_sort=-date&patient._has:Group:member:_id={S1}", "a7 a8 a4 a3 a2 b1 b3 a1 a6 a5"},
		{"_sort=date&date=lt2024-02", "a1 b3 d1 b1 a2"},
	} {
		q := d.substitute(c.query)
		want := strings.Fields(c.want)
		if got := d.names(t, "doc", "/Observation?"+q); !slices.Equal(got, want) {
			t.Errorf("Observation?%s\n got %v\nwant %v", c.query, got, want)
		}
		// The same order in pages of two, through the next links.
		var paged []string
		next := fxBase + "/Observation?" + q + "&_count=2"
		for pages := 0; next != ""; pages++ {
			if pages > len(want) {
				t.Fatalf("Observation?%s: the next links do not end", c.query)
			}
			resp, body := d.env.GetJSON(t, strings.TrimPrefix(next, d.env.URL), d.tok["doc"])
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("Observation?%s page %d: %d %v", c.query, pages, resp.StatusCode, body)
			}
			for _, id := range fxIDsOf(fxMatches(t, body)) {
				paged = append(paged, d.name[id])
			}
			next = fxLink(body, "next")
			if next != "" && !strings.HasPrefix(next, d.env.URL+fxBase+"/Observation?") {
				t.Fatalf("next link %q is not absolute", next)
			}
		}
		if !slices.Equal(paged, want) {
			t.Errorf("Observation?%s in pages of two\n got %v\nwant %v", c.query, paged, want)
		}
	}
}

// fxSearchControls checks _summary, _total, _count, _elements, unknown and
// malformed parameters, links and cursors of searches.
func fxSearchControls(t *testing.T, d *fxData) {
	doc := d.tok["doc"]

	// _summary=count: the total, no entries (entry is there, empty);
	// _total=accurate: both.
	status, body := d.search(t, doc, "/Observation?_summary=count&code=omh:heart-rate:2.0")
	if status != http.StatusOK || body["total"] != float64(7) || fmt.Sprint(body["entry"]) != "[]" || body["type"] != "searchset" {
		t.Errorf("_summary=count: %d %v", status, body)
	}
	status, body = d.search(t, doc, "/Observation?_total=accurate&code=omh:heart-rate:2.0&_count=3")
	if status != http.StatusOK || body["total"] != float64(7) || len(fxMatches(t, body)) != 3 || fxLink(body, "next") == "" {
		t.Errorf("_total=accurate: %d %v", status, body)
	}
	status, body = d.search(t, doc, d.substitute("/Observation?_summary=count&patient._has:Group:member:_id={S1}"))
	if status != http.StatusOK || body["total"] != float64(10) {
		t.Errorf("_summary=count of a study search: %d %v", status, body)
	}
	status, body = d.search(t, d.tok["alice"], "/Observation?_summary=count")
	if status != http.StatusOK || body["total"] != float64(8) {
		t.Errorf("_summary=count as alice: %d %v", status, body)
	}

	// Unknown parameters are ignored and reported, by a count too (its
	// total counts a search without them); refused under Prefer:
	// handling=strict.
	status, body = d.search(t, doc, "/Observation?code=omh:blood-pressure:4.0&color=blue&_has:Group:member:_id=1")
	outcomes := fxOutcomes(t, body)
	if status != http.StatusOK || len(fxMatches(t, body)) != 2 || len(outcomes) != 1 || outcomes[0]["resourceType"] != "OperationOutcome" ||
		!strings.Contains(fxOutcomeText(outcomes[0]), "color") || !strings.Contains(fxOutcomeText(outcomes[0]), "_has:Group:member:_id") {
		t.Errorf("unknown parameters: %d %v", status, fxCompact(body))
	}
	status, body = d.search(t, doc, "/Observation?color=blue&_summary=count")
	outcomes = fxOutcomes(t, body)
	if status != http.StatusOK || body["total"] != float64(12) || len(fxMatches(t, body)) != 0 || len(outcomes) != 1 ||
		!strings.Contains(fxOutcomeText(outcomes[0]), "color") {
		t.Errorf("unknown parameter with _summary=count: %d %v", status, body)
	}
	for _, prefer := range []string{"handling=strict", "return=minimal, handling=strict"} {
		resp, raw := fxDo(t, d.env, "GET", fxBase+"/Observation?color=blue&_summary=count", map[string]string{"Authorization": "Bearer " + doc, "Prefer": prefer}, "")
		out := fxDecode(t, raw)
		if resp.StatusCode != http.StatusBadRequest || out["resourceType"] != "OperationOutcome" || !strings.Contains(fxOutcomeText(out), "color") {
			t.Errorf("Prefer: %s, _summary=count: %d %s", prefer, resp.StatusCode, raw)
		}
		resp, raw = fxDo(t, d.env, "GET", fxBase+"/Observation?color=blue", map[string]string{"Authorization": "Bearer " + doc, "Prefer": prefer}, "")
		out = fxDecode(t, raw)
		if resp.StatusCode != http.StatusBadRequest || out["resourceType"] != "OperationOutcome" || !strings.Contains(fxOutcomeText(out), "color") {
			t.Errorf("Prefer: %s: %d %s", prefer, resp.StatusCode, raw)
		}
	}
	resp, raw := fxDo(t, d.env, "GET", fxBase+"/Observation?code=omh:blood-pressure:4.0", map[string]string{"Authorization": "Bearer " + doc, "Prefer": "handling=lenient"}, "")
	if resp.StatusCode != http.StatusOK || len(fxMatches(t, fxDecode(t, raw))) != 2 {
		t.Errorf("Prefer: handling=lenient: %d %s", resp.StatusCode, raw)
	}

	// Malformed values are 400 naming the parameter.
	for _, c := range []struct{ query, param string }{
		{"date=2024-13", "date"},
		{"date=2024-02-30", "date"},
		{"date=xx2024-01-01", "date"},
		{"date=yesterday", "date"},
		{"date=2024-01-01T25:00", "date"},
		{"_lastUpdated=soon", "_lastUpdated"},
		{"_count=abc", "_count"},
		{"_count=-1", "_count"},
		{"_count=1001", "_count"},
		{"_sort=code", "_sort"},
		{"_sort=date,_lastUpdated", "_sort"},
		{"_summary=data", "_summary"},
		{"_total=maybe", "_total"},
		{"_elements=value.code", "_elements"},
		{"patient.identifier=B-2", "patient.identifier"},
		{"patient.identifier=" + url.QueryEscape(fxMRN) + "|", "patient.identifier"},
		{"code=", "code"},
		{"code=|", "code"},
		{"identifier=", "identifier"},
		{"status=", "status"},
		{"patient=", "patient"},
		{"code:text=heart", "code"},
		{"date=2024&date=nope", "date"},
	} {
		status, body := d.search(t, doc, "/Observation?"+c.query)
		if status != http.StatusBadRequest || body["resourceType"] != "OperationOutcome" || fxIssueCode(body) != "invalid" ||
			!strings.Contains(fxOutcomeText(body), c.param) {
			t.Errorf("Observation?%s: %d %v, want 400 naming %s", c.query, status, body, c.param)
		}
	}

	// _count: the page size, at most 1000; 0 gives no entries.
	status, body = d.search(t, doc, "/Observation?_count=5")
	if status != http.StatusOK || len(fxMatches(t, body)) != 5 || fxLink(body, "next") == "" {
		t.Errorf("_count=5: %d %v", status, body)
	}
	status, body = d.search(t, doc, "/Observation?_count=1000")
	if status != http.StatusOK || len(fxMatches(t, body)) != 12 || fxLink(body, "next") != "" {
		t.Errorf("_count=1000: %d %v", status, body)
	}

	// _elements keeps the elements asked for and the mandatory ones.
	status, body = d.search(t, doc, "/Observation?_elements=effective[x],identifier&_id="+d.id["a1"]+","+d.id["a4"])
	matches := fxMatches(t, body)
	if status != http.StatusOK || len(matches) != 2 {
		t.Fatalf("_elements: %d %v", status, body)
	}
	for _, r := range matches {
		var keys []string
		for k := range r {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		want := []string{"code", "effectiveDateTime", "id", "identifier", "meta", "resourceType", "status"}
		if r["id"] == d.id["a4"] {
			want = []string{"code", "effectivePeriod", "id", "meta", "resourceType", "status"}
		}
		tags := fxArr(fxObj(r["meta"])["tag"])
		if !slices.Equal(keys, want) || len(tags) != 1 || fxObj(tags[0])["code"] != "SUBSETTED" || fxObj(r["meta"])["lastUpdated"] == nil {
			t.Errorf("_elements: %v (tags %v), want %v", keys, tags, want)
		}
	}

	// Links are absolute, on the base the client used; self repeats the query.
	status, body = d.search(t, doc, "/Observation?code=omh:heart-rate:2.0&_count=2")
	if self := fxLink(body, "self"); status != http.StatusOK || self != d.env.URL+fxBase+"/Observation?code=omh:heart-rate:2.0&_count=2" {
		t.Errorf("self link %q", self)
	}
	next := fxLink(body, "next")
	u, err := url.Parse(next)
	if err != nil || !strings.HasPrefix(next, d.env.URL+fxBase+"/Observation?") || u.Query().Get("code") != "omh:heart-rate:2.0" ||
		u.Query().Get("_count") != "2" || u.Query().Get("_cursor") == "" {
		t.Errorf("next link %q", next)
	}
	for _, e := range fxEntries(t, body) {
		if r := fxObj(e["resource"]); e["fullUrl"] != d.env.URL+fxBase+"/Observation/"+r["id"].(string) {
			t.Errorf("fullUrl %v of %v", e["fullUrl"], r["id"])
		}
	}
	resp, raw = fxDo(t, d.env, "GET", "/fhir/r5/Observation?code=omh:heart-rate:2.0&_count=2",
		map[string]string{"Authorization": "Bearer " + doc, "X-Forwarded-Proto": "https", "X-Forwarded-Host": "fhir.example.org"}, "")
	body = fxDecode(t, raw)
	if resp.StatusCode != http.StatusOK || fxLink(body, "self") != "https://fhir.example.org/fhir/r5/Observation?code=omh:heart-rate:2.0&_count=2" ||
		!strings.HasPrefix(fxLink(body, "next"), "https://fhir.example.org/fhir/r5/Observation?") {
		t.Errorf("links behind a proxy, on the alias: %d %v", resp.StatusCode, body["link"])
	}

	// A next link is bound to its search and signed.
	q := u.Query()
	cursor := q.Get("_cursor")
	status, page2 := d.search(t, doc, "/Observation?"+q.Encode())
	if status != http.StatusOK || len(fxMatches(t, page2)) != 2 {
		t.Errorf("page 2: %d %v", status, page2)
	}
	for name, query := range map[string]url.Values{
		"another search":    {"code": {"omh:blood-pressure:4.0"}, "_count": {"2"}, "_cursor": {cursor}},
		"another order":     {"code": {"omh:heart-rate:2.0"}, "_count": {"2"}, "_sort": {"date"}, "_cursor": {cursor}},
		"a forged cursor":   {"code": {"omh:heart-rate:2.0"}, "_count": {"2"}, "_cursor": {cursor[:len(cursor)-2] + "AA"}},
		"not a cursor":      {"code": {"omh:heart-rate:2.0"}, "_count": {"2"}, "_cursor": {"garbage"}},
		"another page size": {"code": {"omh:heart-rate:2.0"}, "_count": {"3"}, "_cursor": {cursor}},
	} {
		status, body := d.search(t, doc, "/Observation?"+query.Encode())
		if status != http.StatusBadRequest || !strings.Contains(fxOutcomeText(body), "_cursor") {
			t.Errorf("%s: %d %v, want 400 naming _cursor", name, status, body)
		}
	}
}
