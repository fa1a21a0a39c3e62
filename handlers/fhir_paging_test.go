package handlers_test

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFHIRPagingThroughAThousandObservations seeds 1,050 observations of
// two patients through the API (a batch of 1,000 and one of 50) and walks
// them through the next links, in id order and by date descending (with
// ties and undated observations), until the links end: no gaps, no
// repeats, and as many as _summary=count says.
func TestFHIRPagingThroughAThousandObservations(t *testing.T) {
	w := fxNewWorld(t)
	const n = 1050
	start := time.Now()
	base := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	dated := map[string]time.Time{} // id -> effective date; undated ones absent
	var created []string
	var obs []fxObs
	var dates []time.Time
	flush := func() {
		ids := w.create(t, w.tok["doc"], obs...)
		for i, id := range ids {
			if !dates[i].IsZero() {
				dated[id] = dates[i]
			}
		}
		created = append(created, ids...)
		obs, dates = obs[:0], dates[:0]
	}
	for i := range n {
		o := fxObs{patient: w.alice.ID, device: w.watch, code: fxHR}
		var date time.Time
		if i%3 == 0 {
			o.patient = w.bob.ID
		}
		switch {
		case i%10 == 1 && i%3 != 0: // alice's, without a time frame
			o.code = fxPA
			o.payload = fxDataPoint(fxPA, map[string]any{"activity_name": "walking"})
		default: // four observations per hour: ties
			date = base.Add(time.Duration(i/4) * time.Hour)
			o.payload = fxDataPoint(fxHR, fxHeartRate(fxAt(date.Format(time.RFC3339))))
		}
		obs, dates = append(obs, o), append(dates, date)
		if len(obs) == 1000 || i == n-1 {
			flush()
		}
	}
	t.Logf("seeded %d observations in %v", n, time.Since(start))

	walk := func(query string, pageSize int) []string {
		t.Helper()
		var ids []string
		next := fxBase + "/Observation?" + query
		for pages := 0; next != ""; pages++ {
			if pages > n/pageSize+2 {
				t.Fatalf("%s: the next links do not end", query)
			}
			resp, body := w.env.GetJSON(t, strings.TrimPrefix(next, w.env.URL), w.tok["doc"])
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s page %d: %d %v", query, pages, resp.StatusCode, body)
			}
			page := fxIDsOf(fxMatches(t, body))
			next = fxLink(body, "next")
			if next != "" {
				if len(page) != pageSize || !strings.HasPrefix(next, w.env.URL+fxBase+"/Observation?") {
					t.Fatalf("%s page %d: %d entries, next %q", query, pages, len(page), next)
				}
				u, _ := url.Parse(next)
				if u.Query().Get("_cursor") == "" || strings.Contains(next, "skip") || strings.Contains(next, "offset") {
					t.Fatalf("next link %q", next)
				}
			}
			ids = append(ids, page...)
		}
		return ids
	}
	unique := func(what string, ids []string) {
		t.Helper()
		if len(ids) != n {
			t.Errorf("%s: %d observations, want %d", what, len(ids), n)
		}
		if !slices.Equal(fxSorted(ids), fxSorted(created)) {
			t.Errorf("%s: the observations paged are not those created (gaps or repeats)", what)
		}
	}

	start = time.Now()
	byID := walk("_count=200", 200)
	unique("in id order", byID)
	if !slices.Equal(byID, fxSorted(byID)) {
		t.Errorf("in id order: not ascending")
	}
	t.Logf("paged %d in id order in %v", len(byID), time.Since(start))

	start = time.Now()
	byDate := walk("_sort=-date&_count=250", 250)
	unique("by date descending", byDate)
	num := func(id string) int64 { v, _ := strconv.ParseInt(id, 10, 64); return v }
	for i := 1; i < len(byDate); i++ {
		a, b := byDate[i-1], byDate[i]
		da, aDated := dated[a]
		db, bDated := dated[b]
		switch {
		case aDated && bDated && (da.Before(db) || (da.Equal(db) && num(a) < num(b))):
			t.Fatalf("by date descending: %s (%v) before %s (%v)", a, da, b, db)
		case !aDated && bDated:
			t.Fatalf("by date descending: undated %s before dated %s", a, b)
		case !aDated && !bDated && num(a) < num(b):
			t.Fatalf("by date descending: undated %s before %s", a, b)
		}
	}
	t.Logf("paged %d by date in %v", len(byDate), time.Since(start))

	// _summary=count agrees with what was paged.
	status, body := w.search(t, w.tok["doc"], "/Observation?_summary=count")
	if status != http.StatusOK || body["total"] != float64(len(byID)) || len(fxEntries(t, body)) != 0 {
		t.Errorf("_summary=count: %d %v, want %d", status, body["total"], len(byID))
	}
	// The default page is 50; the largest 1000.
	status, body = w.search(t, w.tok["doc"], "/Observation")
	if page := fxMatches(t, body); status != http.StatusOK || len(page) != 50 || fxLink(body, "next") == "" ||
		!slices.Equal(fxIDsOf(page), byID[:50]) {
		t.Errorf("the default page: %d, %d entries", status, len(page))
	}
	status, body = w.search(t, w.tok["doc"], "/Observation?_count=1000&_elements=status")
	if page := fxMatches(t, body); status != http.StatusOK || len(page) != 1000 || fxLink(body, "next") == "" {
		t.Errorf("a page of 1000: %d, %d entries", status, len(page))
	}
}

// TestFHIRPagingWhileObservationsArrive walks a patient's observations
// through the next links, as JupyterHealth's client does (_count, then
// each next link as given), while new ones arrive between the pages:
// dated before, among and after those already read, and tied with them.
// Every observation there at the start of a walk is read exactly once, in
// each sort order; none is read twice, new ones included (keyset paging:
// the link says where the page ended, not how many came before).
func TestFHIRPagingWhileObservationsArrive(t *testing.T) {
	w := fxNewWorld(t)
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(hours int) fxObs {
		return fxObs{patient: w.alice.ID, device: w.watch, code: fxHR,
			payload: fxDataPoint(fxHR, fxHeartRate(fxAt(base.Add(time.Duration(hours)*time.Hour).Format(time.RFC3339))))}
	}
	var obs []fxObs
	for i := range 24 {
		obs = append(obs, at(i/2)) // two an hour: ties
	}
	stored := w.create(t, w.tok["doc"], obs...)
	const pageSize, arriving = 8, 3
	for _, sort := range []string{"", "_sort=date", "_sort=-date", "_sort=_lastUpdated", "_sort=-_lastUpdated"} {
		there := slices.Clone(stored)
		seen := map[string]int{}
		next := fxPath(fxBase+"/Observation", "patient", strconv.FormatInt(w.alice.ID, 10), "_count", strconv.Itoa(pageSize))
		if sort != "" {
			next += "&" + sort
		}
		// A page reads pageSize, of which at most arriving came meanwhile.
		for pages := 0; next != ""; pages++ {
			if pages > len(there)/(pageSize-arriving)+2 {
				t.Fatalf("%q: the next links do not end", sort)
			}
			resp, body := w.env.GetJSON(t, strings.TrimPrefix(next, w.env.URL), w.tok["doc"])
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%q page %d: %d %v", sort, pages, resp.StatusCode, body)
			}
			for _, id := range fxIDsOf(fxMatches(t, body)) {
				seen[id]++
			}
			next = fxLink(body, "next")
			// Between the pages, three arrive: before, among (tied with
			// one read already) and after the others.
			stored = append(stored, w.create(t, w.tok["doc"], at(-1-pages), at(pages), at(100+pages))...)
		}
		for id, n := range seen {
			if n > 1 {
				t.Errorf("%q: observation %s read %d times", sort, id, n)
			}
		}
		for _, id := range there {
			if seen[id] != 1 {
				t.Errorf("%q: observation %s, there from the start, read %d times", sort, id, seen[id])
			}
		}
	}
}
