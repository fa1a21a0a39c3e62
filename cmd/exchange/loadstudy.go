package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"exchange/bulkimport"
	"exchange/domain"
)

// `exchange load-study` is a client of a running exchange, like `exchange
// import r4`: it sets up a study through the admin API as a superuser,
// sends a study's worth of data the way its patients' apps and an EHR
// import would, then makes the searches a practitioner, a patient, the
// console and the MCP tools make, and prints what each cost the service
// (docs/operations.md, "A study-sized load").

// loadStudyOptions are the command's flags.
type loadStudyOptions struct {
	url, token        string
	patients, days    int
	first             time.Time // the first day (UTC midnight)
	batch, workers    int
	synthea           string // the Synthea sample's folder; "": no EHR records
	name              string
	stateFile         string
	searchesOnly      bool
	only              *regexp.Regexp
	repeat            int
	metrics           serverMetrics
	verifier          string // PATIENT_AUTHORIZATION_CODE_VERIFIER
	mongoURI, mongoDB string // the service's database, for the profiler
}

// defaultSyntheaDir is where scripts/setup's neighbour keeps the Synthea
// sample, seen from the repository's root.
const defaultSyntheaDir = "../shared/fhir/synthea-r4-10-patients"

func loadStudyCommand(ctx context.Context, s *settings, log *slog.Logger, io stdio, args []string) error {
	o := loadStudyOptions{verifier: s.PatientVerifier, mongoURI: s.MongoURI, mongoDB: s.MongoDatabase}
	fs := newFlags("load-study", io)
	fs.StringVar(&o.url, "url", cmp.Or(io.getenv("EXCHANGE_URL"), fmt.Sprintf("http://127.0.0.1:%d", s.Port)), "the service (else EXCHANGE_URL)")
	fs.StringVar(&o.token, "token", io.getenv("EXCHANGE_TOKEN"), "a superuser's bearer `TOKEN` (else EXCHANGE_TOKEN; \"exchange token create\" prints one)")
	fs.IntVar(&o.patients, "patients", 2, "patients in the study")
	fs.IntVar(&o.days, "days", 1, "days of data per patient")
	start := fs.String("start", "", "the first `DAY` (YYYY-MM-DD; default: the days up to yesterday, UTC)")
	fs.IntVar(&o.batch, "batch", 1000, "observations per request")
	fs.IntVar(&o.workers, "workers", 2, "requests in flight while uploading")
	synthea := defaultSyntheaDir
	if _, err := os.Stat(synthea); err != nil {
		synthea = ""
	}
	fs.StringVar(&o.synthea, "synthea", synthea, "the Synthea R4 sample's `DIR`, one patient's record of which each patient gets; \"\": none")
	fs.StringVar(&o.name, "name", "", "the study's name (default: Load study and the time); its organization gets it too")
	fs.StringVar(&o.stateFile, "state", "", "a `FILE` that keeps the study's ids and logins, for --searches-only")
	fs.BoolVar(&o.searchesOnly, "searches-only", false, "send nothing: run the searches over the study of --state")
	only := fs.String("only", "", "run only the searches whose name matches this `REGEXP`")
	fs.IntVar(&o.repeat, "repeat", 1, "times each search runs")
	fs.StringVar(&o.metrics.url, "metrics-url", "", "the service's /metrics `URL` (default: the service's own; with METRICS_ADDR, that address)")
	fs.StringVar(&o.metrics.token, "metrics-token", io.getenv("METRICS_TOKEN"), "the service's METRICS_TOKEN, if it has one")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: exchange load-study [flags]\n\nSets up a study on a running service, sends it a study's worth of data through the public API,\n"+
			"then measures the searches its users make (wall time, server CPU, and on MongoDB keys and documents examined).")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var err error
	switch {
	case o.token == "":
		return usageError("load-study: give a superuser's token: --token or EXCHANGE_TOKEN")
	case o.patients < 1 || o.days < 1 || o.batch < 1 || o.workers < 1 || o.repeat < 1:
		return usageError("load-study: --patients, --days, --batch, --workers and --repeat are at least 1")
	case o.searchesOnly && o.stateFile == "":
		return usageError("load-study: --searches-only runs over the study of --state FILE")
	}
	if o.only, err = regexp.Compile(*only); err != nil {
		return usageError("load-study: --only: " + err.Error())
	}
	today := time.Now().UTC().Truncate(24 * time.Hour)
	o.first = today.AddDate(0, 0, -o.days)
	if *start != "" {
		if o.first, err = time.Parse(time.DateOnly, *start); err != nil {
			return usageError(fmt.Sprintf("load-study: --start %q is not a day (YYYY-MM-DD)", *start))
		}
	}
	o.url = strings.TrimRight(o.url, "/")
	if o.metrics.url == "" {
		o.metrics.url = o.url + "/metrics"
	}
	if o.name == "" {
		o.name = "Load study " + time.Now().UTC().Format("2006-01-02 15:04:05")
	}
	admin := bearerClient(ctx, o.url, oauth2.StaticTokenSource(&oauth2.Token{AccessToken: o.token}))

	var st *studyState
	if o.searchesOnly {
		if st, err = readStudyState(o.stateFile); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(io.err, "load-study: setting up %q: %s, %s from %s\n", o.name, counted(o.patients, "patient"), counted(o.days, "day"), o.first.Format(time.DateOnly))
		if st, err = setUpStudy(ctx, admin, o); err != nil {
			return err
		}
		if o.stateFile != "" {
			if err := st.write(o.stateFile); err != nil {
				return err
			}
		}
		if err := loadStudyData(ctx, o, st, admin, log, io); err != nil {
			return err
		}
	}
	return runStudySearches(ctx, o, st, admin, io.out, io.err)
}

// studyState is what the searches need of a study set up earlier: kept in
// --state (with a practitioner's password: the file is the operator's
// only).
type studyState struct {
	Name              string           `json:"name"`
	Slug              string           `json:"slug"` // names the study's logins and identifiers
	OrganizationID    int64            `json:"organizationId"`
	StudyID           int64            `json:"studyId"`
	PatientIDs        []int64          `json:"patientIds"`
	SourceIDs         []int64          `json:"sourceIds"` // per patient; none without EHR records
	SourceURIs        []string         `json:"sourceUris"`
	DeviceIDs         map[string]int64 `json:"deviceIds"`
	First             string           `json:"first"` // YYYY-MM-DD
	Days              int              `json:"days"`
	Practitioner      string           `json:"practitioner"`
	Password          string           `json:"password"`
	AppClientID       string           `json:"appClientId"`       // the patients' app: public, for invitations
	DashboardClientID string           `json:"dashboardClientId"` // the practitioner's: trusted, confidential
	DashboardSecret   string           `json:"dashboardSecret"`
	RedirectURI       string           `json:"redirectUri"`
}

func readStudyState(name string) (*studyState, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var st studyState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &st, nil
}

func (st *studyState) write(name string) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(name, append(data, '\n'), 0o600)
}

// firstDay is the study's first day, UTC midnight.
func (st *studyState) firstDay() time.Time {
	t, _ := time.Parse(time.DateOnly, st.First)
	return t
}

// loadStudyRedirect is where the study's OAuth clients are sent their
// codes; nothing listens there: the command reads the code from the
// redirect.
const loadStudyRedirect = "http://127.0.0.1/exchange-load-study/callback"

// listOf is the admin API's list answer.
type listOf[T any] struct {
	Results []T `json:"results"`
}

// setUpStudy creates, through the admin API, what the study's data needs:
// its scope codes and devices (kept from earlier runs), an organization
// with the study, a practitioner member, the patients, enrolled and
// consenting to every code, a FHIR source each for their EHR record, and
// the OAuth clients of the patients' app and the practitioner's dashboard.
func setUpStudy(ctx context.Context, admin *apiClient, o loadStudyOptions) (*studyState, error) {
	sum := sha256.Sum256([]byte(o.name))
	st := &studyState{Name: o.name, Slug: hex.EncodeToString(sum[:4]), First: o.first.Format(time.DateOnly), Days: o.days,
		DeviceIDs: map[string]int64{}, RedirectURI: loadStudyRedirect}
	var codes listOf[struct {
		ID     int64  `json:"id"`
		System string `json:"codingSystem"`
		Code   string `json:"codingCode"`
	}]
	if err := admin.send(ctx, "GET", "/api/v1/scope_codes?pageSize=1000", nil, &codes); err != nil {
		return nil, err
	}
	codeIDs := map[string]int64{}
	for _, c := range codes.Results {
		if c.System == domain.SystemOpenMHealth {
			codeIDs[c.Code] = c.ID
		}
	}
	var created struct {
		ID  int64  `json:"id"`
		URI string `json:"uri"`
	}
	for _, code := range studyCodes() {
		if codeIDs[code] != 0 {
			continue
		}
		if err := admin.send(ctx, "POST", "/api/v1/scope_codes", map[string]any{"codingSystem": domain.SystemOpenMHealth, "codingCode": code,
			"text": strings.TrimPrefix(code, "omh:")}, &created); err != nil {
			return nil, err
		}
		codeIDs[code] = created.ID
	}
	var devices listOf[struct {
		ID   int64  `json:"id"`
		Name string `json:"name"`
	}]
	if err := admin.send(ctx, "GET", "/api/v1/data_sources?pageSize=1000", nil, &devices); err != nil {
		return nil, err
	}
	for _, d := range devices.Results {
		st.DeviceIDs[d.Name] = d.ID
	}
	for _, d := range studyDevices {
		if st.DeviceIDs[d.name] != 0 {
			continue
		}
		var ids []int64
		for _, c := range d.codes {
			ids = append(ids, codeIDs[c])
		}
		if err := admin.send(ctx, "POST", "/api/v1/data_sources", map[string]any{"name": d.name, "type": "personal_device",
			"supportedScopeCodeIds": ids}, &created); err != nil {
			return nil, err
		}
		st.DeviceIDs[d.name] = created.ID
	}

	if err := admin.send(ctx, "POST", "/api/v1/organizations", map[string]any{"name": o.name, "type": "prov"}, &created); err != nil {
		return nil, fmt.Errorf("the study's organization (a study of this --name exists?): %w", err)
	}
	st.OrganizationID = created.ID
	if err := admin.send(ctx, "POST", "/api/v1/studies", map[string]any{"organizationId": st.OrganizationID, "name": o.name,
		"description": "Generated by exchange load-study."}, &created); err != nil {
		return nil, err
	}
	st.StudyID = created.ID
	study := fmt.Sprintf("/api/v1/studies/%d", st.StudyID)
	for _, code := range studyCodes() {
		if err := admin.send(ctx, "POST", study+"/scope_requests", map[string]any{"scopeCodeId": codeIDs[code]}, nil); err != nil {
			return nil, err
		}
	}
	for _, d := range studyDevices {
		if err := admin.send(ctx, "POST", study+"/data_sources", map[string]any{"dataSourceId": st.DeviceIDs[d.name]}, nil); err != nil {
			return nil, err
		}
	}
	st.Practitioner, st.Password = fmt.Sprintf("load-%s-practitioner@example.org", st.Slug), randomSecret()
	if err := admin.send(ctx, "POST", "/api/v1/practitioners", map[string]any{"email": st.Practitioner, "password": st.Password,
		"firstName": "Load", "lastName": "Practitioner", "organizationId": st.OrganizationID, "role": "member"}, nil); err != nil {
		return nil, err
	}
	var client struct {
		ID     string `json:"clientId"`
		Secret string `json:"clientSecret"`
	}
	if err := admin.send(ctx, "POST", "/api/v1/oauth_clients", map[string]any{"name": o.name + " app", "clientType": "public",
		"redirectUris": []string{st.RedirectURI}}, &client); err != nil {
		return nil, err
	}
	st.AppClientID = client.ID
	if err := admin.send(ctx, "POST", "/api/v1/oauth_clients", map[string]any{"name": o.name + " dashboard", "clientType": "confidential",
		"redirectUris": []string{st.RedirectURI}, "skipAuthorization": true}, &client); err != nil {
		return nil, err
	}
	st.DashboardClientID, st.DashboardSecret = client.ID, client.Secret

	var consents []map[string]any
	for _, code := range studyCodes() {
		consents = append(consents, map[string]any{"codingSystem": domain.SystemOpenMHealth, "codingCode": code, "consented": true})
	}
	for k := range o.patients {
		if err := admin.send(ctx, "POST", "/api/v1/patients", map[string]any{"email": fmt.Sprintf("load-%s-p%d@example.org", st.Slug, k+1),
			"nameFamily": fmt.Sprintf("Load%d", k+1), "nameGiven": []string{"Study"},
			"birthDate": fmt.Sprintf("%d-%02d-%02d", 1950+k%50, 1+k%12, 1+k%28), "organizationIds": []int64{st.OrganizationID}}, &created); err != nil {
			return nil, err
		}
		id := created.ID
		st.PatientIDs = append(st.PatientIDs, id)
		if err := admin.send(ctx, "POST", study+"/patients", map[string]any{"patientIds": []int64{id}}, nil); err != nil {
			return nil, err
		}
		if err := admin.send(ctx, "POST", fmt.Sprintf("/api/v1/patients/%d/consents", id), map[string]any{
			"studyScopeConsents": []any{map[string]any{"studyId": st.StudyID, "scopeConsents": consents}}}, nil); err != nil {
			return nil, err
		}
		if o.synthea != "" {
			if err := admin.send(ctx, "POST", "/api/v1/fhir_sources", map[string]any{"patient": id, "label": "Hospital EHR"}, &created); err != nil {
				return nil, err
			}
			st.SourceIDs, st.SourceURIs = append(st.SourceIDs, created.ID), append(st.SourceURIs, created.URI)
		}
	}
	return st, nil
}

// loadStudyData sends the patients' EHR records through the R4 import,
// then their devices' readings through FHIR batches, and says what each
// cost the service.
func loadStudyData(ctx context.Context, o loadStudyOptions, st *studyState, admin *apiClient, log *slog.Logger, std stdio) error {
	if o.synthea != "" {
		before, err := o.metrics.read(ctx)
		if err != nil {
			return err
		}
		sum, err := importEHRRecords(ctx, o, st, log, std.err)
		if err != nil {
			return err
		}
		after, err := o.metrics.read(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(std.out, "EHR records: %d R4 resources of %s through the R4 import in %s: %d converted, %d with loss, %d failed; server CPU %.1f s (%.1f ms per resource)\n",
			sum.Read, counted(len(st.PatientIDs), "patient"), sum.Elapsed.Round(100*time.Millisecond), sum.Converted, sum.WithLoss, sum.Failed,
			after.CPU-before.CPU, 1000*(after.CPU-before.CPU)/float64(max(sum.Read, 1)))
	} else {
		fmt.Fprintln(std.out, "EHR records: none (no --synthea)")
	}
	before, err := o.metrics.read(ctx)
	if err != nil {
		return err
	}
	up, err := uploadObservations(ctx, o, st, admin, std.err)
	if err != nil {
		return err
	}
	after, err := o.metrics.read(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(std.out, "Observations: %d in %d batches of up to %d in %s (%.0f/s): %d created, %d already stored, %d refused; server CPU %.1f s (%.2f ms per observation)\n",
		up.sent, up.batches, o.batch, up.elapsed.Round(100*time.Millisecond), float64(up.sent)/max(up.elapsed.Seconds(), 0.001),
		up.created, up.duplicates, up.refused, after.CPU-before.CPU, 1000*(after.CPU-before.CPU)/float64(max(up.sent, 1)))
	if up.refused > 0 {
		return fmt.Errorf("%d observations were refused; the first: %s", up.refused, up.firstRefusal)
	}
	return nil
}

// importEHRRecords writes each patient's record, re-keyed, to one NDJSON
// file and sends it with the bulk R4 import, each patient's resources to
// their own FHIR source.
func importEHRRecords(ctx context.Context, o loadStudyOptions, st *studyState, log *slog.Logger, progress io.Writer) (bulkimport.Summary, error) {
	records, err := syntheaRecords(o.synthea)
	if err != nil {
		return bulkimport.Summary{}, err
	}
	dir, err := os.MkdirTemp("", "exchange-load-study-")
	if err != nil {
		return bulkimport.Summary{}, err
	}
	defer os.RemoveAll(dir)
	input, err := os.Create(filepath.Join(dir, "records.ndjson"))
	if err != nil {
		return bulkimport.Summary{}, err
	}
	routes := map[string]int64{}
	for k := range st.PatientIDs {
		record, patient := records[k%len(records)].rekeyed(st.Slug, k+1)
		routes["Patient/"+patient] = st.SourceIDs[k]
		for _, line := range record {
			if _, err := input.Write(append(line, '\n')); err != nil {
				input.Close()
				return bulkimport.Summary{}, err
			}
		}
	}
	if err := input.Close(); err != nil {
		return bulkimport.Summary{}, err
	}
	sources, err := json.Marshal(routes)
	if err != nil {
		return bulkimport.Summary{}, err
	}
	if err := os.WriteFile(filepath.Join(dir, "sources.json"), sources, 0o600); err != nil {
		return bulkimport.Summary{}, err
	}
	report := filepath.Join(dir, "report.ndjson")
	sum, err := bulkimport.Run(ctx, bulkimport.Options{URL: o.url, Token: o.token, Input: []string{input.Name()},
		SourcesFile: filepath.Join(dir, "sources.json"), Workers: o.workers, Report: report,
		Progress: progress, ProgressEvery: 10 * time.Second, Log: log})
	if sum.Failed > 0 {
		fmt.Fprintf(progress, "load-study: %d R4 resources failed; the first: %s\n", sum.Failed, firstFailure(report))
	}
	return sum, err
}

// firstFailure is the first resource the import's report says failed:
// its type and why.
func firstFailure(report string) string {
	failure := "(not in the report)"
	_ = eachLine(report, func(line []byte) error {
		var r struct {
			ResourceType string `json:"resourceType"`
			Result       string `json:"result"`
			Issue        []struct {
				Diagnostics string   `json:"diagnostics"`
				Expression  []string `json:"expression"`
			} `json:"issue"`
		}
		if json.Unmarshal(line, &r) != nil || r.Result != "failed" {
			return nil
		}
		failure = r.ResourceType
		for _, i := range r.Issue {
			failure += fmt.Sprintf("; %s %s", strings.Join(i.Expression, ","), i.Diagnostics)
		}
		return errors.New("found")
	})
	return failure
}

// uploaded counts the observations sent.
type uploaded struct {
	mu                           sync.Mutex
	sent, batches                int
	created, duplicates, refused int
	firstRefusal                 string
	elapsed                      time.Duration
}

// batchJob is one FHIR batch of one patient's readings.
type batchJob struct {
	patient *apiClient
	body    []byte
	size    int
}

// uploadObservations sends every patient's readings, day after day as
// their phones would, each in batches of o.batch with the patient's own
// token (from an invitation to the study's app), o.workers at once.
// Progress goes to progress every 10 s.
func uploadObservations(ctx context.Context, o loadStudyOptions, st *studyState, admin *apiClient, progress io.Writer) (*uploaded, error) {
	app := oauthEndpoint(o.url, st.AppClientID, "", st.RedirectURI)
	patients := make([]*apiClient, len(st.PatientIDs))
	for k, id := range st.PatientIDs {
		ts, err := patientToken(ctx, admin, app, o.verifier, id)
		if err != nil {
			return nil, err
		}
		patients[k] = bearerClient(ctx, o.url, ts)
	}
	total := len(st.PatientIDs) * st.Days * readingsPerDay()
	up := &uploaded{}
	start := time.Now()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	jobs := make(chan batchJob, o.workers)
	go func() {
		defer close(jobs)
		for day := range st.Days {
			midnight := st.firstDay().AddDate(0, 0, day)
			readings := dayReadings(midnight)
			for k, id := range st.PatientIDs {
				for from := 0; from < len(readings); from += o.batch {
					chunk := readings[from:min(from+o.batch, len(readings))]
					entries := make([]json.RawMessage, len(chunk))
					for i, r := range chunk {
						var err error
						device := st.DeviceIDs[r.series.device]
						if entries[i], err = observationEntry(r, st.Slug, k+1, id, device); err != nil {
							cancel(err)
							return
						}
					}
					body, err := json.Marshal(map[string]any{"resourceType": "Bundle", "type": "batch", "entry": entries})
					if err != nil {
						cancel(err)
						return
					}
					select {
					case jobs <- batchJob{patients[k], body, len(chunk)}:
					case <-ctx.Done():
						return
					}
				}
			}
		}
	}()
	var wg sync.WaitGroup
	for range o.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for job := range jobs {
				if err := up.send(ctx, job); err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		wg.Wait()
	}()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-tick.C:
			up.mu.Lock()
			fmt.Fprintf(progress, "load-study: %d of %d observations sent (%.0f/s)\n", up.sent, total, float64(up.sent)/time.Since(start).Seconds())
			up.mu.Unlock()
		}
	}
	up.elapsed = time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return up, err
	}
	return up, nil
}

// send posts one batch and counts its entries' answers.
func (up *uploaded) send(ctx context.Context, job batchJob) error {
	var answer struct {
		Entry []struct {
			Response struct {
				Status   string          `json:"status"`
				Location string          `json:"location"`
				Outcome  json.RawMessage `json:"outcome"`
			} `json:"response"`
		} `json:"entry"`
	}
	if err := job.patient.send(ctx, "POST", "/FHIR/R5/", job.body, &answer); err != nil {
		return err
	}
	if len(answer.Entry) != job.size {
		return fmt.Errorf("a batch of %d observations was answered with %d entries", job.size, len(answer.Entry))
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	up.sent += job.size
	up.batches++
	for _, e := range answer.Entry {
		status, _, _ := strings.Cut(e.Response.Status, " ")
		switch code, _ := strconv.Atoi(status); {
		case code == 201:
			up.created++
		case code == 409 && e.Response.Location != "": // stored already; a 409 without it was refused
			up.duplicates++
		default:
			up.refused++
			if up.firstRefusal == "" {
				up.firstRefusal = e.Response.Status + " " + string(e.Response.Outcome)
			}
		}
	}
	return nil
}

// errNoSearches: --only matched nothing.
var errNoSearches = errors.New("load-study: --only matches no search")

// searchNames lists the searches, for the message of an --only that
// matches none.
func searchNames() string {
	var names []string
	for _, s := range studySearches {
		names = append(names, s.name)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
