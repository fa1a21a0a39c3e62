package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"exchange/repo"
)

// studySearch is one search a user of the study makes, as the requests
// it takes (the MCP tools' summary takes two).
type studySearch struct {
	name string // what --only matches
	who  string // practitioner, patient, console or mcp: whose client sends it
	what string
	// paths are the requests, built from the study; they may send
	// requests of their own first, which are not measured (the first page
	// of a next page).
	paths func(sc *searchContext) ([]string, error)
}

// searchContext is what the searches name: the study's first patient, the
// study, their days.
type searchContext struct {
	ctx                        context.Context
	st                         *studyState
	patient                    int64
	firstDay, middle, lastDay  time.Time
	practitioner, app, console *apiClient
}

func (sc *searchContext) observations(query string) string { return "/FHIR/R5/Observation?" + query }

func day(t time.Time) string { return t.Format(time.DateOnly) }

// studySearches are the searches the command measures. Each names the user
// and the request of the exchange's own clients it copies.
var studySearches = []studySearch{
	{name: "glucose-day", who: "practitioner", what: "a patient's glucose on one day, first page of 50",
		paths: func(sc *searchContext) ([]string, error) { return []string{sc.glucoseDay()}, nil }},
	{name: "glucose-day-next", who: "practitioner", what: "the next page of glucose-day (keyset cursor)",
		paths: func(sc *searchContext) ([]string, error) {
			var page struct {
				Link []struct{ Relation, URL string } `json:"link"`
			}
			if err := sc.practitioner.send(sc.ctx, "GET", sc.glucoseDay(), nil, &page); err != nil {
				return nil, err
			}
			for _, l := range page.Link {
				if l.Relation == "next" {
					u, err := url.Parse(l.URL)
					if err != nil {
						return nil, err
					}
					return []string{u.RequestURI()}, nil
				}
			}
			return nil, errors.New("glucose-day has no next page")
		}},
	{name: "heart-rate-newest", who: "practitioner", what: "a patient's heart rate of the last day, newest first",
		paths: func(sc *searchContext) ([]string, error) {
			return []string{sc.observations(fmt.Sprintf("patient=%d&code=omh:heart-rate:2.0&date=ge%s&_sort=-date&_count=50", sc.patient, day(sc.lastDay)))}, nil
		}},
	{name: "study-blood-pressure", who: "practitioner", what: "the blood pressures the study's patients share with it",
		paths: func(sc *searchContext) ([]string, error) {
			return []string{sc.observations(fmt.Sprintf("patient._has:Group:member:_id=%d&code=omh:blood-pressure:4.0&_count=50", sc.st.StudyID))}, nil
		}},
	{name: "patient-count", who: "practitioner", what: "how many observations a patient has (_summary=count)",
		paths: func(sc *searchContext) ([]string, error) {
			return []string{sc.observations(fmt.Sprintf("patient=%d&_summary=count", sc.patient))}, nil
		}},
	{name: "study-patients", who: "practitioner", what: "the study's patients (admin API, as JupyterHealth's client lists them)",
		paths: func(sc *searchContext) ([]string, error) {
			return []string{fmt.Sprintf("/api/v1/studies/%d/patients?page=1&pageSize=20", sc.st.StudyID)}, nil
		}},
	{name: "ehr-conditions", who: "practitioner", what: "the conditions of a patient's EHR record (imported store)",
		paths: func(sc *searchContext) ([]string, error) {
			if len(sc.st.SourceURIs) == 0 {
				return nil, nil
			}
			return []string{"/FHIR/R5/Condition?_source=" + url.QueryEscape(sc.st.SourceURIs[0]) + "&_count=50"}, nil
		}},
	{name: "ehr-encounters-newest", who: "practitioner", what: "the encounters of a patient's EHR record, newest first",
		paths: func(sc *searchContext) ([]string, error) {
			if len(sc.st.SourceURIs) == 0 {
				return nil, nil
			}
			return []string{"/FHIR/R5/Encounter?_source=" + url.QueryEscape(sc.st.SourceURIs[0]) + "&_sort=-date&_count=50"}, nil
		}},
	{name: "my-heart-rate-hour", who: "patient", what: "the patient's own heart rate of the last hour",
		paths: func(sc *searchContext) ([]string, error) {
			from := sc.lastDay.Add(23 * time.Hour).Format(time.RFC3339)
			return []string{sc.observations("code=omh:heart-rate:2.0&date=ge" + url.QueryEscape(from) + "&_count=60")}, nil
		}},
	{name: "my-latest-glucose", who: "patient", what: "the patient's latest glucose readings, newest first",
		paths: func(sc *searchContext) ([]string, error) {
			return []string{sc.observations("code=omh:blood-glucose:4.0&_sort=-date&_count=12")}, nil
		}},
	{name: "my-steps", who: "patient", what: "the patient's daily steps",
		paths: func(sc *searchContext) ([]string, error) {
			return []string{sc.observations("code=omh:step-count:3.0&_count=50")}, nil
		}},
	{name: "console-study-data", who: "console", what: "a patient's data page in the study: the last 90 days, 500 per code",
		paths: func(sc *searchContext) ([]string, error) {
			return []string{fmt.Sprintf("/console/studies/%d/patients/%d/data?to=%s", sc.st.StudyID, sc.patient, day(sc.lastDay))}, nil
		}},
	{name: "console-day-data", who: "console", what: "a patient's data page of one day",
		paths: func(sc *searchContext) ([]string, error) {
			return []string{fmt.Sprintf("/console/patients/%d/data?from=%s&to=%s", sc.patient, day(sc.middle), day(sc.middle))}, nil
		}},
	{name: "mcp-summarize", who: "mcp", what: "summarize_observations: the data types, then Observation/$stats",
		paths: func(sc *searchContext) ([]string, error) {
			return []string{"/api/v1/scope_codes?pageSize=1000", fmt.Sprintf("/FHIR/R5/Observation/$stats?patient=%d", sc.patient)}, nil
		}},
	{name: "mcp-data-range", who: "mcp", what: "patient_data_range of heart rate: Observation/$stats of one code",
		paths: func(sc *searchContext) ([]string, error) {
			return []string{fmt.Sprintf("/FHIR/R5/Observation/$stats?patient=%d&code=omh:heart-rate:2.0", sc.patient)}, nil
		}},
	{name: "mcp-list", who: "mcp", what: "list_observations: a patient's newest 20",
		paths: func(sc *searchContext) ([]string, error) {
			return []string{sc.observations(fmt.Sprintf("patient=%d&_sort=-date&_count=20", sc.patient))}, nil
		}},
	{name: "mcp-study-count", who: "mcp", what: "count_observations of the study",
		paths: func(sc *searchContext) ([]string, error) {
			return []string{sc.observations(fmt.Sprintf("patient._has:Group:member:_id=%d&_summary=count", sc.st.StudyID))}, nil
		}},
}

// glucoseDay is the first page of a day of glucose readings.
func (sc *searchContext) glucoseDay() string {
	return sc.observations(fmt.Sprintf("patient=%d&code=omh:blood-glucose:4.0&date=ge%s&date=lt%s&_count=50",
		sc.patient, day(sc.middle), day(sc.middle.AddDate(0, 0, 1))))
}

// searchCost is what one run of a search cost.
type searchCost struct {
	wall    time.Duration
	cpu     float64 // server CPU seconds
	gcShare float64 // of the busy CPU; -1 unknown
	answer  string
	work    *repo.ProfiledWork // nil without a profiler
	rss     float64
}

// runStudySearches signs the study's practitioner in (token and console
// session) and gives its first patient's app a token, then runs each
// search o.repeat times and prints a table of their costs.
func runStudySearches(ctx context.Context, o loadStudyOptions, st *studyState, admin *apiClient, out, progress io.Writer) error {
	var searches []studySearch
	for _, s := range studySearches {
		if o.only.MatchString(s.name) {
			searches = append(searches, s)
		}
	}
	if len(searches) == 0 {
		return fmt.Errorf("%w (the searches: %s)", errNoSearches, searchNames())
	}
	dashboard := oauthEndpoint(o.url, st.DashboardClientID, st.DashboardSecret, st.RedirectURI)
	console, practitionerToken, err := signIn(ctx, o.url, dashboard, st.Practitioner, st.Password)
	if err != nil {
		return err
	}
	appToken, err := patientToken(ctx, admin, oauthEndpoint(o.url, st.AppClientID, "", st.RedirectURI), o.verifier, st.PatientIDs[0])
	if err != nil {
		return err
	}
	sc := &searchContext{ctx: ctx, st: st, patient: st.PatientIDs[0], firstDay: st.firstDay(),
		lastDay: st.firstDay().AddDate(0, 0, st.Days-1), middle: st.firstDay().AddDate(0, 0, st.Days/2),
		practitioner: bearerClient(ctx, o.url, practitionerToken), app: bearerClient(ctx, o.url, appToken), console: console}
	clients := map[string]*apiClient{"practitioner": sc.practitioner, "mcp": sc.practitioner, "patient": sc.app, "console": sc.console}

	profiler, profilerNote := startProfiler(ctx, o)
	if profiler != nil {
		defer func() { _ = profiler.Stop(context.WithoutCancel(ctx)) }()
	}
	baseline, err := measureSearch(ctx, o.metrics, profiler, nil, nil)
	if err != nil {
		return err
	}
	costs := make([][]searchCost, len(searches))
	paths := make([][]string, len(searches))
	for pass := range o.repeat {
		for i, s := range searches {
			p, err := s.paths(sc)
			if err != nil {
				return fmt.Errorf("search %s: %w", s.name, err)
			}
			if len(p) == 0 {
				continue // nothing to search: no EHR records
			}
			paths[i] = p
			c, err := measureSearch(ctx, o.metrics, profiler, clients[s.who], p)
			if err != nil {
				return fmt.Errorf("search %s: %w", s.name, err)
			}
			costs[i] = append(costs[i], c)
			fmt.Fprintf(progress, "load-study: search %s (pass %d of %d): %s; %.1f s, server CPU %.2f s\n",
				s.name, pass+1, o.repeat, c.answer, c.wall.Seconds(), c.cpu)
		}
	}
	printSearchCosts(out, o, st, searches, paths, costs, baseline, profilerNote)
	return nil
}

// startProfiler turns on the profiler of the service's MongoDB database,
// named by MONGODB_URI; else it says why there are no counts.
func startProfiler(ctx context.Context, o loadStudyOptions) (*repo.Profiler, string) {
	const embedded = "n/a on the embedded database (FerretDB on SQLite has no profiler and uses no index but _id)"
	if o.mongoURI == "" {
		return nil, embedded + "; on MongoDB, set MONGODB_URI to the service's database"
	}
	p, err := repo.StartProfiler(ctx, o.mongoURI, o.mongoDB)
	switch {
	case errors.Is(err, repo.ErrNoProfiler):
		return nil, embedded
	case err != nil:
		return nil, "n/a: " + err.Error()
	}
	return p, "keys and documents examined by every operation of the database during the search (MongoDB's profiler, level 2)"
}

// measureSearch sends the requests one after the other and returns what
// they cost: wall time, the service's CPU (from /metrics before and after),
// the GC's share of it, and with a profiler what the database examined.
// Without requests it measures the measurement: two reads of /metrics.
func measureSearch(ctx context.Context, m serverMetrics, profiler *repo.Profiler, client *apiClient, paths []string) (searchCost, error) {
	var c searchCost
	var mark repo.ProfileMark
	if profiler != nil {
		var err error
		if mark, err = profiler.Mark(ctx); err != nil {
			return c, err
		}
	}
	before, err := m.read(ctx)
	if err != nil {
		return c, err
	}
	start := time.Now()
	var answers []string
	for _, p := range paths {
		status, contentType, body, err := client.get(ctx, p)
		switch {
		case ctx.Err() != nil:
			return c, ctx.Err()
		case err != nil: // measured all the same: what it cost until the failure
			answers = append(answers, "no answer: "+err.Error())
		default:
			answers = append(answers, describeAnswer(status, contentType, body))
		}
	}
	c.wall = time.Since(start)
	after, err := m.read(ctx)
	if err != nil {
		return c, err
	}
	c.cpu, c.rss, c.answer, c.gcShare = after.CPU-before.CPU, after.RSS, strings.Join(answers, "; "), -1
	if busy := after.Busy - before.Busy; after.HaveGCCPU && busy > 0 {
		c.gcShare = (after.GC - before.GC) / busy
	}
	if profiler != nil {
		w, err := profiler.Since(ctx, mark)
		if err != nil {
			return c, err
		}
		c.work = &w
	}
	return c, nil
}

// describeAnswer says in a few words what a search answered.
func describeAnswer(status int, contentType string, body []byte) string {
	if status != 200 {
		return fmt.Sprintf("%d %.60s", status, strings.Join(strings.Fields(string(body)), " "))
	}
	if strings.HasPrefix(contentType, "text/html") {
		return fmt.Sprintf("page of %d KiB", (len(body)+1023)/1024)
	}
	var a struct {
		ResourceType string            `json:"resourceType"`
		Total        *int64            `json:"total"`
		Entry        []json.RawMessage `json:"entry"`
		Parameter    []json.RawMessage `json:"parameter"`
		Count        *int64            `json:"count"`
		Results      []json.RawMessage `json:"results"`
	}
	_ = json.Unmarshal(body, &a)
	switch {
	case a.ResourceType == "Bundle" && len(a.Entry) == 0 && a.Total != nil:
		return fmt.Sprintf("total %d", *a.Total)
	case a.ResourceType == "Bundle":
		return fmt.Sprintf("%d entries", len(a.Entry))
	case a.ResourceType == "Parameters":
		return fmt.Sprintf("%d codes", len(a.Parameter))
	case a.Count != nil:
		return fmt.Sprintf("%d of %d", len(a.Results), *a.Count)
	}
	return fmt.Sprintf("%d bytes", len(body))
}

// printSearchCosts prints what the searches are, then their costs: one
// row per search, the median of its runs and, over several, the range.
func printSearchCosts(out io.Writer, o loadStudyOptions, st *studyState, searches []studySearch, paths [][]string,
	costs [][]searchCost, baseline searchCost, profilerNote string) {
	fmt.Fprintf(out, "\nSearches of %q (%s, %s from %s), as its first patient's practitioner, the patient, the console and the MCP tools:\n",
		st.Name, counted(len(st.PatientIDs), "patient"), counted(st.Days, "day"), st.First)
	for i, s := range searches {
		if paths[i] != nil {
			fmt.Fprintf(out, "  %-22s %s: %s\n  %-22s GET %s\n", s.name, s.who, s.what, "", strings.Join(paths[i], " + GET "))
		}
	}
	fmt.Fprintln(out)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "search\tanswer\twall\tserver CPU\tGC share\tkeys examined\tdocs examined\t")
	row := func(name string, runs []searchCost) {
		walls, cpus := make([]float64, len(runs)), make([]float64, len(runs))
		for i, c := range runs {
			walls[i], cpus[i] = c.wall.Seconds(), c.cpu
		}
		last := runs[len(runs)-1]
		gc := "n/a"
		if last.gcShare >= 0 {
			gc = fmt.Sprintf("%.0f%%", 100*last.gcShare)
		}
		keys, docs := "n/a", "n/a"
		if last.work != nil {
			keys, docs = fmt.Sprint(last.work.KeysExamined), fmt.Sprint(last.work.DocsExamined)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name, last.answer, spread(walls), spread(cpus), gc, keys, docs)
	}
	row("(two reads of /metrics)", []searchCost{baseline})
	var rss float64
	for i, s := range searches {
		if len(costs[i]) > 0 {
			row(s.name, costs[i])
			for _, c := range costs[i] {
				rss = max(rss, c.rss)
			}
		}
	}
	_ = w.Flush()
	fmt.Fprintf(out, "\nwall and server CPU in seconds: the median of %d runs (with their range); GC share: the collector's part of the service's busy CPU (the runtime's estimate).\n", o.repeat)
	fmt.Fprintf(out, "keys and docs examined: %s.\n", profilerNote)
	fmt.Fprintf(out, "server memory (RSS) after a search: at most %.0f MiB", rss/(1<<20))
	if limit, err := o.metrics.read(context.Background()); err == nil && limit.MemLimit > 0 && limit.MemLimit < 1<<62 {
		fmt.Fprintf(out, "; its memory limit (GOMEMLIMIT): %.0f MiB", limit.MemLimit/(1<<20))
	}
	fmt.Fprintln(out)
	for i, s := range searches {
		if len(costs[i]) > 0 && costs[i][0].work != nil && len(costs[i][0].work.PlanSummaries) > 0 {
			fmt.Fprintf(out, "  plan of %s: %s\n", s.name, strings.Join(costs[i][0].work.PlanSummaries, " | "))
		}
	}
}

// counted is n things: "1 day", "2 days".
func counted(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// spread is the median of values, and their range when there are several.
func spread(values []float64) string {
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	median := sorted[len(sorted)/2]
	if len(sorted)%2 == 0 {
		median = (sorted[len(sorted)/2-1] + sorted[len(sorted)/2]) / 2
	}
	if len(sorted) == 1 {
		return fmt.Sprintf("%.3f", median)
	}
	return fmt.Sprintf("%.3f (%.3f-%.3f)", median, sorted[0], sorted[len(sorted)-1])
}
