package console

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"exchange/domain"
)

// perCode is how many observations of each code a data page shows: the
// latest of the range.
const perCode = 500

// defaultRange is the range a data page shows first: the last 90 days.
const defaultRange = 90 * 24 * time.Hour

// dataQuery is the range of a data page, from its query string.
type dataQuery struct {
	From, To string // YYYY-MM-DD, both included
}

// readRange reads from= and to= (dates), defaulting to the last 90 days.
func (c *Console) readRange(r *http.Request) (dataQuery, error) {
	today := c.Service.Now().Format(time.DateOnly)
	q := dataQuery{From: r.URL.Query().Get("from"), To: r.URL.Query().Get("to")}
	if q.To == "" {
		q.To = today
	}
	to, err := time.Parse(time.DateOnly, q.To)
	if err != nil {
		return q, domain.FieldErrorf("to", "%q is not a date (YYYY-MM-DD)", q.To)
	}
	if q.From == "" {
		q.From = to.Add(-defaultRange).Format(time.DateOnly)
	}
	from, err := time.Parse(time.DateOnly, q.From)
	if err != nil {
		return q, domain.FieldErrorf("from", "%q is not a date (YYYY-MM-DD)", q.From)
	}
	if from.After(to) {
		return q, domain.FieldErrorf("from", "%s is after %s", q.From, q.To)
	}
	return q, nil
}

// groups runs the page's search: the patient's observations in the range,
// grouped by code, the latest perCode of each; with a study, the FHIR
// study search (only what the patient consented to share with it).
func (c *Console) groups(r *http.Request, s *session, patientID, studyID int64, q dataQuery) ([]domain.CodeObservations, error) {
	to, _ := time.Parse(time.DateOnly, q.To)
	params := url.Values{
		"patient": {strconv.FormatInt(patientID, 10)},
		"date":    {"ge" + q.From, "lt" + to.AddDate(0, 0, 1).Format(time.DateOnly)},
		"_sort":   {"-date"},
		"_count":  {strconv.Itoa(perCode)},
	}
	if studyID != 0 {
		params.Set("patient._has:Group:member:_id", strconv.FormatInt(studyID, 10))
	}
	search, err := c.Search.Parse("Observation", params, true)
	if err != nil {
		return nil, err
	}
	return c.Service.ObservationsByCode(r.Context(), s.actor, search)
}

// series is one numeric measure of a kind of data over time.
type series struct {
	Label, Unit string
	Points      []point
}

// point is one value of a series: at an instant (At), or over an interval
// from At to End (a total or a duration, as a day's steps or a night's
// sleep).
type point struct {
	At, End time.Time
	When    string         // the data point's own time frame, in words
	zone    *time.Location // the offset its time frame is written in
	Value   float64
}

// row is one observation in a table: its time and decoded values.
type row struct {
	ID     int64
	When   string
	Values []string
}

// codeView is one kind of data on a data page.
type codeView struct {
	Code    string
	Title   string
	Chart   template.HTML // empty for non-numeric data, and values too large to draw
	Bars    bool          // the chart draws totals over intervals as bars
	Series  []series
	Columns []string
	Rows    []row
	More    bool
}

// unitValueKey is a body member the console charts: snake_case names only.
var unitValueKey = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// decode reads the bodies of the observations of one code as the store
// holds them (domain.Observation.Body: never refused again, so that data
// stored under older rules keeps its page): a member {value: number, unit:
// string} of every body is a numeric series (heart_rate; systolic_ and
// diastolic_blood_pressure); other data is shown as a table of the body's
// values.
func decode(index int, g domain.CodeObservations, titles map[string]string) (codeView, error) {
	v := codeView{Code: g.Code, Title: titles[g.Code], More: g.More}
	if v.Title == "" {
		v.Title = g.Code
	}
	obs := slices.Clone(g.Observations)
	slices.Reverse(obs) // oldest first
	type decoded struct {
		o     domain.Observation
		body  map[string]any
		units map[string]unitValue
	}
	var all []decoded
	keys := map[string]int{}
	for _, o := range obs {
		body := o.Body()
		d := decoded{o: o, body: body, units: unitValues(body)}
		for k := range d.units {
			keys[k]++
		}
		all = append(all, d)
	}
	var numeric []string
	for k, n := range keys {
		if n == len(all) {
			numeric = append(numeric, k)
		}
	}
	sort.Strings(numeric)
	if len(numeric) > 0 && len(numeric) <= len(seriesStyles) {
		// Values over intervals (a day's steps, a night's sleep) are totals:
		// bars, each over its interval, rather than a line through instants.
		v.Bars = slices.ContainsFunc(all, func(d decoded) bool { return d.o.Effective != nil }) &&
			!slices.ContainsFunc(all, func(d decoded) bool { return d.o.Effective != nil && d.o.Effective.IsInstant() })
		for _, k := range numeric {
			s := series{Label: strings.ReplaceAll(k, "_", " "), Unit: all[0].units[k].unit}
			for _, d := range all {
				if d.o.Effective == nil {
					continue
				}
				e := d.o.Effective
				s.Points = append(s.Points, point{At: e.Start, End: e.End, When: when(d.o), zone: frameZone(e.DateTime, e.PeriodStart), Value: d.units[k].value})
			}
			v.Series = append(v.Series, s)
			v.Columns = append(v.Columns, s.Label+" ("+s.Unit+")")
		}
		for _, d := range all {
			r := row{ID: d.o.ID, When: when(d.o)}
			for _, k := range numeric {
				r.Values = append(r.Values, formatValue(d.units[k].value))
			}
			v.Rows = append(v.Rows, r)
		}
		if len(v.Series[0].Points) > 0 {
			chart, err := chartSVG(fmt.Sprintf("chart-%d", index), v.Title, v.Series, v.Bars)
			if err != nil {
				return v, err
			}
			v.Chart = chart
		}
		return v, nil
	}
	v.Columns = []string{"data point"}
	for _, d := range all {
		body := map[string]any{}
		for k, x := range d.body {
			if k != "effective_time_frame" {
				body[k] = x
			}
		}
		text, _ := json.Marshal(body)
		v.Rows = append(v.Rows, row{ID: d.o.ID, When: when(d.o), Values: []string{string(text)}})
	}
	return v, nil
}

type unitValue struct {
	value float64
	unit  string
}

// unitValues returns the body's members of the form {value, unit}.
func unitValues(body map[string]any) map[string]unitValue {
	out := map[string]unitValue{}
	for k, x := range body {
		m, ok := x.(map[string]any)
		if !ok || !unitValueKey.MatchString(k) {
			continue
		}
		n, ok := m["value"].(json.Number)
		unit, isText := m["unit"].(string)
		if !ok || !isText {
			continue
		}
		if f, err := n.Float64(); err == nil {
			out[k] = unitValue{value: f, unit: unit}
		}
	}
	return out
}

// when is an observation's time in words, at the time of day its data
// point gives (the patient's own clock).
func when(o domain.Observation) string {
	if o.Effective == nil {
		return "no time"
	}
	return timeLabel(o.Effective.Start, o.Effective.DateTime, o.Effective.PeriodStart, o.Effective.PeriodEnd)
}

type dataPage struct {
	Patient *domain.Patient
	Study   *domain.StudyView // the study view, or nil
	Range   dataQuery
	Codes   []codeView
	Base    string // the page's path, without extension: the downloads' too
}

func (c *Console) patientData(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.dataPage(w, r, s, false)
}

func (c *Console) studyData(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.dataPage(w, r, s, true)
}

// dataTarget reads the patient (and study) of a data page or download.
func (c *Console) dataTarget(r *http.Request, s *session, inStudy bool) (*domain.Patient, *domain.StudyView, error) {
	ctx := r.Context()
	name := "id"
	var study *domain.StudyView
	if inStudy {
		name = "patient"
		sid, err := pathID(r, "id")
		if err != nil {
			return nil, nil, err
		}
		if study, err = c.Service.StudyByID(ctx, s.actor, sid); err != nil {
			return nil, nil, err
		}
	}
	pid, err := pathID(r, name)
	if err != nil {
		return nil, nil, err
	}
	p, err := c.Service.PatientByID(ctx, s.actor, pid)
	return p, study, err
}

// shown is what a data page or download shows: the patient (and study),
// the range and the observations by code.
type shown struct {
	patient *domain.Patient
	study   *domain.StudyView
	rng     dataQuery
	groups  []domain.CodeObservations
}

// shownData reads the target and range of a data page or download and
// runs its search.
func (c *Console) shownData(r *http.Request, s *session, inStudy bool) (*shown, error) {
	p, study, err := c.dataTarget(r, s, inStudy)
	if err != nil {
		return nil, err
	}
	q, err := c.readRange(r)
	if err != nil {
		return nil, err
	}
	var studyID int64
	if study != nil {
		studyID = study.ID
	}
	groups, err := c.groups(r, s, p.ID, studyID, q)
	if err != nil {
		return nil, err
	}
	return &shown{patient: p, study: study, rng: q, groups: groups}, nil
}

func (c *Console) dataPage(w http.ResponseWriter, r *http.Request, s *session, inStudy bool) error {
	data, err := c.shownData(r, s, inStudy)
	if err != nil {
		return err
	}
	titles, err := c.scopeTitles(r)
	if err != nil {
		return err
	}
	p, study, q := data.patient, data.study, data.rng
	page := dataPage{Patient: p, Study: study, Range: q, Base: r.URL.Path}
	for _, g := range data.groups {
		if len(g.Observations) == 0 {
			continue // a kind of data with none in the range: the page says so only once, when it has none at all
		}
		v, err := decode(len(page.Codes), g, titles)
		if err != nil {
			return err
		}
		page.Codes = append(page.Codes, v)
	}
	title := "Data of " + patientName(*p)
	if study != nil {
		title += " in " + study.Name
	}
	c.render(w, r, s, http.StatusOK, "data.html", title, "patients", page)
	return nil
}

// scopeTitles names codes as the scope code catalogue does.
func (c *Console) scopeTitles(r *http.Request) (map[string]string, error) {
	codes, err := c.Service.ListScopeCodes(r.Context(), domain.Page{Number: 1, Size: domain.MaxPageSize})
	out := map[string]string{}
	for _, sc := range codes.Items {
		out[sc.Code] = sc.Text
	}
	return out, err
}

func (c *Console) patientDataNDJSON(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.download(w, r, s, false, c.writeNDJSON)
}

func (c *Console) studyDataNDJSON(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.download(w, r, s, true, c.writeNDJSON)
}

func (c *Console) patientDataCSV(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.download(w, r, s, false, writeCSV)
}

func (c *Console) studyDataCSV(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.download(w, r, s, true, writeCSV)
}

// download answers the data a page shows as a file.
func (c *Console) download(w http.ResponseWriter, r *http.Request, s *session, inStudy bool,
	write func(w http.ResponseWriter, name string, groups []domain.CodeObservations) error) error {
	data, err := c.shownData(r, s, inStudy)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("patient-%d", data.patient.ID)
	if data.study != nil {
		name = fmt.Sprintf("study-%d-patient-%d", data.study.ID, data.patient.ID)
	}
	w.Header().Set("Cache-Control", "no-store")
	return write(w, fmt.Sprintf("%s-%s-%s", name, data.rng.From, data.rng.To), data.groups)
}

// writeNDJSON writes each observation as the FHIR API serves it, one per
// line (FHIR Bulk Data's format).
func (c *Console) writeNDJSON(w http.ResponseWriter, name string, groups []domain.CodeObservations) error {
	w.Header().Set("Content-Type", "application/fhir+ndjson")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`.ndjson"`)
	enc := json.NewEncoder(w)
	for _, g := range groups {
		for i := range g.Observations {
			if err := enc.Encode(c.ObservationResource(&g.Observations[i])); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeCSV writes the decoded values: one row per value of a data point,
// with the path of the value in the data point's body.
func writeCSV(w http.ResponseWriter, name string, groups []domain.CodeObservations) error {
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`.csv"`)
	out := csv.NewWriter(w)
	_ = out.Write([]string{"observation", "code", "effective_start", "effective_end", "field", "value"})
	for _, g := range groups {
		for _, o := range g.Observations {
			start, end := "", ""
			if o.Effective != nil {
				start, end = o.Effective.Start.UTC().Format(time.RFC3339), o.Effective.End.UTC().Format(time.RFC3339)
			}
			for _, leaf := range leaves("", o.Body()) {
				_ = out.Write([]string{strconv.FormatInt(o.ID, 10), csvSafe(g.Code), start, end, csvSafe(leaf[0]), csvSafe(leaf[1])})
			}
		}
	}
	out.Flush()
	return out.Error()
}

// leaves flattens a decoded JSON value into (path, value) pairs, in key
// order.
func leaves(path string, v any) [][2]string {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var out [][2]string
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			out = append(out, leaves(p, x[k])...)
		}
		return out
	case []any:
		var out [][2]string
		for i, e := range x {
			out = append(out, leaves(fmt.Sprintf("%s[%d]", path, i), e)...)
		}
		return out
	case nil:
		return [][2]string{{path, ""}}
	default:
		return [][2]string{{path, fmt.Sprint(x)}}
	}
}

// csvSafe keeps a text cell from being read as a formula by a
// spreadsheet (CSV injection): a cell that starts with =, +, -, @, a tab
// or a carriage return and is not a number gets a leading quote. Every
// column that carries text from a data point goes through it: values,
// field names (a data point's keys are the sender's) and codes.
func csvSafe(v string) string {
	if v == "" || !strings.ContainsAny(v[:1], "=+-@\t\r") {
		return v
	}
	if _, err := strconv.ParseFloat(v, 64); err == nil {
		return v
	}
	return "'" + v
}
