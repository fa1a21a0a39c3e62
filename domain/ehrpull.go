package domain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// A pull reads a connected patient's record from their EHR and imports it
// through the R4 import (conversion, loss report, R5 validation, the
// rewriting of references between its resources) into the connection's
// FHIR source, as the patient. Each type is read on its own: a type the
// EHR refuses is skipped with the reason, one bad resource is refused
// alone, and only a refused token (401) ends the run. Re-pulling stores
// nothing twice and updates nothing: what is stored already is a
// duplicate, counted, and a resource that changed at the EHR is counted
// as such and left as stored. Every run leaves a PullRun record and an
// audit event.

// PulledTypes are the types a pull searches by patient, after reading the
// Patient itself: what a patient portal's API holds of a record
// (conditions, medications, allergies, immunizations, procedures,
// reports, encounters, goals, orders, answers, care plans and teams,
// documents, devices, and observations by category).
var PulledTypes = []string{"Condition", "MedicationRequest", "MedicationDispense", "AllergyIntolerance", "Immunization",
	"Procedure", "DiagnosticReport", "Encounter", "Goal", "ServiceRequest", "QuestionnaireResponse", "CarePlan", "CareTeam",
	"DocumentReference", "Device", "Observation"}

// ObservationCategories are the categories Observations are searched by:
// large EHRs require one (US Core's), and an Observation found under two
// is imported once.
var ObservationCategories = []string{"laboratory", "vital-signs", "social-history", "survey"}

// PullTrigger is what started a pull.
type PullTrigger string

// The triggers.
const (
	PullOnConnect  PullTrigger = "connect"  // the connection was just made
	PullOnDemand   PullTrigger = "manual"   // the patient (or a superuser) asked
	PullOnSchedule PullTrigger = "schedule" // PATIENT_ACCESS_SYNC_INTERVAL
)

// PullOutcome is how a pull ended.
type PullOutcome string

// The outcomes.
const (
	PullRunning PullOutcome = "running"
	// PullCompleted: every type was read through (some resources may have
	// been refused: the counts say).
	PullCompleted PullOutcome = "completed"
	// PullPartial: some types were skipped (the EHR refused their search,
	// or failed): their reasons say why.
	PullPartial PullOutcome = "partial"
	// PullTokenRejected: the EHR refused the token (401): the patient
	// connects again.
	PullTokenRejected PullOutcome = "token-rejected"
	// PullLimited: a bound of the run (resources, pages, time) stopped it.
	PullLimited PullOutcome = "limit-reached"
	// PullFailed: the run could not be made (the source or token could
	// not be read).
	PullFailed PullOutcome = "failed"
	// PullInterrupted: the process running it stopped (a repair records
	// it so).
	PullInterrupted PullOutcome = "interrupted"
)

// PullRun is the record of one pull.
type PullRun struct {
	ID           int64
	ConnectionID int64
	PatientID    int64
	SourceID     int64
	BrandName    string
	Issuer       string
	Trigger      PullTrigger
	// Since is the time an incremental pull read changes after
	// (_lastUpdated=gt); zero for a full pull.
	Since     time.Time
	StartedAt time.Time
	EndedAt   time.Time // zero while running
	Outcome   PullOutcome
	Message   string // what ended the run, when not completed
	Types     []PullTypeResult
}

// PullTypeResult is what a run did of one type.
type PullTypeResult struct {
	Type       string
	Fetched    int // resources the EHR sent
	Stored     int // new in the source
	Duplicates int // stored already (those changed at the EHR since are Changed too)
	Changed    int // duplicates whose content changed at the EHR: kept as stored
	Refused    int // not stored: Reasons say why
	// Skipped says why the type was not read through ("": it was).
	Skipped string
	// Reasons are the distinct reasons of refusals and warnings, each
	// counted, at most maxReasons.
	Reasons []PullReason
	// Dropped counts, per R4 path, the values the R5 maps dropped
	// (Encounter.reasonCode): what the import lost of this type.
	Dropped map[string]int
}

// PullReason is a reason and how many times it came.
type PullReason struct {
	Reason string
	Count  int
}

// maxReasons bounds the reasons a type's result keeps; maxReasonLength
// each one.
const (
	maxReasons      = 20
	maxReasonLength = 300
)

// PullLimits bound a pull.
type PullLimits struct {
	PageSize         int           // _count of a search
	MaxPagesPerType  int           // pages of one type's search (each Observation category its own)
	MaxResources     int           // resources read in one run
	MaxResourceBytes int           // bytes of one resource
	MaxPageBytes     int64         // bytes of one answer of the EHR
	MaxRunTime       time.Duration // one run, under the store's lock lifetime
}

// DefaultPullLimits are the bounds of a pull unless configured.
var DefaultPullLimits = PullLimits{PageSize: 100, MaxPagesPerType: 500, MaxResources: 100_000,
	MaxResourceBytes: 4 << 20, MaxPageBytes: 64 << 20, MaxRunTime: 10 * time.Minute}

// withDefaults fills the zero bounds with DefaultPullLimits'.
func (l PullLimits) withDefaults() PullLimits {
	d := DefaultPullLimits
	if l.PageSize > 0 {
		d.PageSize = l.PageSize
	}
	if l.MaxPagesPerType > 0 {
		d.MaxPagesPerType = l.MaxPagesPerType
	}
	if l.MaxResources > 0 {
		d.MaxResources = l.MaxResources
	}
	if l.MaxResourceBytes > 0 {
		d.MaxResourceBytes = l.MaxResourceBytes
	}
	if l.MaxPageBytes > 0 {
		d.MaxPageBytes = l.MaxPageBytes
	}
	if l.MaxRunTime > 0 {
		d.MaxRunTime = l.MaxRunTime
	}
	return d
}

// PullRunStore keeps pull records and the lock that keeps two pulls of one
// connection from running at once.
type PullRunStore interface {
	CreatePullRun(ctx context.Context, r *PullRun) error
	// FinishPullRun replaces the record with its final state.
	FinishPullRun(ctx context.Context, r *PullRun) error
	// PullRuns returns the runs of the patients (all when nil), newest
	// first.
	PullRuns(ctx context.Context, patientIDs []int64, p Page) (List[PullRun], error)
	// LockEHRPull takes the lock of a connection's pulls, across instances:
	// CodeConflict while another pull of it runs. A lock whose holder died
	// is taken over. release gives it back.
	LockEHRPull(ctx context.Context, connectionID int64) (release func(), err error)
}

// patientAccess is the Service's part of patient access.
type patientAccess struct {
	ehr    EHR
	limits PullLimits
	// background runs the pulls: Shutdown cancels it and waits for them.
	background context.Context
	stop       context.CancelFunc
	pulls      sync.WaitGroup
}

// patientAccessReady says why connections cannot be made, if they cannot.
func (s *Service) patientAccessReady() error {
	if s.ehr == nil {
		return Errorf(CodeNotSupported, "patient access is not configured on this exchange")
	}
	if s.converter == nil {
		return Errorf(CodeNotSupported, "patient access needs the R4 import, which is not available: run scripts/setup")
	}
	return nil
}

// Shutdown stops the pulls running (they end as interrupted) and waits for
// them, at most until ctx ends.
func (s *Service) Shutdown(ctx context.Context) {
	s.stop()
	done := make(chan struct{})
	go func() { s.pulls.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// SyncEHRConnection starts a pull of a connection now: the patient's own
// (or any, for a superuser). It is incremental when the patient lets the
// exchange keep the record up to date and a full pull was made before.
// CodeConflict while another pull of the connection runs (on any
// instance). The run goes on in the background: its record says how it
// ends.
func (s *Service) SyncEHRConnection(ctx context.Context, actor *Actor, id int64) (*PullRun, error) {
	c, err := s.connectionOf(ctx, actor, id, "pulls")
	if err != nil {
		return nil, err
	}
	if err := s.patientAccessReady(); err != nil {
		return nil, err
	}
	if c.Status == EHRReconnect {
		return nil, Errorf(CodeConflict, "the EHR no longer accepts this connection's sign-in: connect again")
	}
	return s.beginPull(ctx, c, PullOnDemand)
}

// SyncDue starts the scheduled pulls: those of the connections the
// patients let the exchange keep up to date, not pulled for interval. It
// returns how many it started; one whose lock is held (another instance
// pulls it) is left.
func (s *Service) SyncDue(ctx context.Context, interval time.Duration) (int, error) {
	if s.patientAccessReady() != nil {
		return 0, nil
	}
	all, err := s.store.EHRConnections(ctx, nil)
	if err != nil {
		return 0, err
	}
	started := 0
	for i := range all {
		c := &all[i]
		if !c.SyncAllowed || c.Status != EHRConnected || s.Now().Sub(c.LastRunAt) < interval {
			continue
		}
		if _, err := s.beginPull(ctx, c, PullOnSchedule); err == nil {
			started++
		} else if !IsCode(err, CodeConflict) {
			s.log.Warn("a scheduled EHR pull could not start", "connection", c.ID, "error", err)
		}
	}
	return started, nil
}

// startPull begins the first pull of a connection just made; a failure to
// begin is logged (the patient can pull again).
func (s *Service) startPull(connectionID int64, trigger PullTrigger) {
	ctx := context.WithoutCancel(s.background)
	c, err := s.store.EHRConnectionByID(ctx, connectionID)
	if err == nil {
		_, err = s.beginPull(ctx, c, trigger)
	}
	if err != nil {
		s.log.Warn("an EHR pull could not start", "connection", connectionID, "trigger", trigger, "error", err)
	}
}

// beginPull takes the connection's lock, records the run and runs it in
// the background, where the lock is released at its end.
func (s *Service) beginPull(ctx context.Context, c *EHRConnection, trigger PullTrigger) (*PullRun, error) {
	release, err := s.store.LockEHRPull(ctx, c.ID)
	if IsCode(err, CodeConflict) {
		return nil, Errorf(CodeConflict, "a pull of EHR connection %d is running: wait for it to end", c.ID)
	}
	if err != nil {
		return nil, err
	}
	run := &PullRun{ConnectionID: c.ID, PatientID: c.PatientID, SourceID: c.SourceID, Issuer: c.Issuer, Trigger: trigger,
		StartedAt: s.Now(), Outcome: PullRunning}
	if brand, err := s.store.EHRBrandByID(ctx, c.BrandID); err == nil {
		run.BrandName = brand.Name
	}
	if c.SyncAllowed && !c.LastCompleteAt.IsZero() {
		// What changed since the last complete pull began, with a margin
		// for the clocks of the two systems: what comes twice is a
		// duplicate.
		run.Since = c.LastCompleteAt.Add(-5 * time.Minute)
	}
	if err := s.store.CreatePullRun(ctx, run); err != nil {
		release()
		return nil, err
	}
	s.pulls.Add(1)
	go func() {
		defer s.pulls.Done()
		defer release()
		ctx, cancel := context.WithTimeout(s.background, s.limits.MaxRunTime)
		defer cancel()
		s.pull(ctx, c, run)
	}()
	copied := *run
	return &copied, nil
}

// puller is one run in progress.
type puller struct {
	s       *Service
	run     *PullRun
	conn    *EHRConnection
	src     *FHIRSource
	actor   *Actor
	session EHRSession
	fetched int             // resources read, for MaxResources
	seen    map[string]bool // Type/id already read in this run
	results map[string]*PullTypeResult
	order   []string // the types of results, in the order met
	// ended is set once the run must stop: the token was refused, or a
	// bound reached.
	ended error
}

// errLimit ends a run at one of its bounds.
var errLimit = errors.New("limit reached")

// pull runs a pull to its end and records it.
func (s *Service) pull(ctx context.Context, c *EHRConnection, run *PullRun) {
	p := &puller{s: s, run: run, conn: c, seen: map[string]bool{}, results: map[string]*PullTypeResult{}}
	err := p.prepare(ctx)
	if err == nil {
		p.readAll(ctx)
	}
	s.finishPull(p, err)
}

// prepare opens the pull's session: the patient as actor, the source, the
// token (refreshed only when the patient let the exchange keep the record
// up to date).
func (p *puller) prepare(ctx context.Context) error {
	s, c := p.s, p.conn
	patient, err := s.store.PatientByID(ctx, c.PatientID)
	if err != nil {
		return err
	}
	if p.actor, err = s.Actor(ctx, patient.UserID); err != nil {
		return err
	}
	if p.src, err = s.store.FHIRSourceByID(ctx, c.SourceID); IsCode(err, CodeNotFound) {
		// The source was deleted (it was empty): made again.
		brand := &EHRBrand{Name: p.run.BrandName, FHIRBaseURL: c.Issuer}
		if p.src, err = s.ehrSource(ctx, p.actor, brand); err == nil {
			c.SourceID, p.run.SourceID = p.src.ID, p.src.ID
		}
	}
	if err != nil {
		return err
	}
	tok, err := s.openToken(c)
	if err != nil {
		return err
	}
	if !c.SyncAllowed {
		tok.RefreshToken = "" // offline access is the patient's to give
	}
	client := c.Client
	if brand, err := s.store.EHRBrandByID(ctx, c.BrandID); err == nil {
		if _, secret, err := s.ehrClientOf(ctx, brand); err == nil {
			client.ClientSecret = secret
		}
	}
	p.session = s.ehr.Open(ctx, client, tok, func(t *EHRToken) error {
		sealed, err := s.sealToken(c, t)
		if err != nil {
			return err
		}
		c.SealedToken = sealed
		return s.changeConnection(context.WithoutCancel(ctx), c.ID, func(now *EHRConnection) { now.SealedToken = sealed })
	})
	return nil
}

// readAll reads the Patient, then every type.
func (p *puller) readAll(ctx context.Context) {
	iss := strings.TrimSuffix(p.conn.Issuer, "/")
	patientURL := iss + "/Patient/" + url.PathEscape(p.conn.EHRPatientID)
	if body, err := p.session.Get(ctx, patientURL, p.s.limits.MaxPageBytes); err != nil {
		p.typeFailed("Patient", err)
	} else {
		p.importResources(ctx, "Patient", []json.RawMessage{body})
	}
	for _, typ := range PulledTypes {
		if p.ended != nil {
			break
		}
		r := p.result(typ)
		if typ != "Observation" {
			p.search(ctx, typ, p.searchURL(typ, ""))
			continue
		}
		for _, category := range ObservationCategories {
			if p.ended != nil || r.Skipped != "" {
				break
			}
			p.search(ctx, typ, p.searchURL(typ, category))
		}
	}
}

// searchURL is the first page of a type's search for the patient.
func (p *puller) searchURL(typ, category string) string {
	q := url.Values{}
	q.Set("patient", p.conn.EHRPatientID)
	q.Set("_count", fmt.Sprint(p.s.limits.PageSize))
	if category != "" {
		q.Set("category", category)
	}
	if !p.run.Since.IsZero() {
		q.Set("_lastUpdated", "gt"+p.run.Since.UTC().Format(time.RFC3339))
	}
	return strings.TrimSuffix(p.conn.Issuer, "/") + "/" + typ + "?" + q.Encode()
}

// search reads a type's search page by page, following next links under
// the EHR's base only (a link elsewhere would take the patient's token
// there).
func (p *puller) search(ctx context.Context, typ, next string) {
	r := p.result(typ)
	for pages := 0; next != "" && p.ended == nil; pages++ {
		if pages == p.s.limits.MaxPagesPerType {
			r.Skipped = fmt.Sprintf("stopped after %d pages (the run's bound)", pages)
			return
		}
		body, err := p.session.Get(ctx, next, p.s.limits.MaxPageBytes)
		if err != nil {
			p.typeFailed(typ, err)
			return
		}
		var page struct {
			ResourceType string `json:"resourceType"`
			Link         []struct {
				Relation string `json:"relation"`
				URL      string `json:"url"`
			} `json:"link"`
			Entry []struct {
				Resource json.RawMessage `json:"resource"`
				Search   struct {
					Mode string `json:"mode"`
				} `json:"search"`
			} `json:"entry"`
		}
		if err := json.Unmarshal(body, &page); err != nil || page.ResourceType != "Bundle" {
			r.Skipped = "the EHR's search answer is not a FHIR Bundle"
			return
		}
		var resources []json.RawMessage
		for _, e := range page.Entry {
			if len(e.Resource) == 0 {
				continue
			}
			if e.Search.Mode == "outcome" || resourceTypeOf(e.Resource) == "OperationOutcome" {
				r.reason("the EHR warned: " + outcomeText(e.Resource))
				continue
			}
			resources = append(resources, e.Resource)
		}
		p.importResources(ctx, typ, resources)
		next = ""
		for _, l := range page.Link {
			if l.Relation == "next" {
				next = l.URL
			}
		}
		if next != "" && !underBase(next, p.conn.Issuer) {
			r.Skipped = "the EHR's next page is not under its FHIR base: not followed"
			return
		}
	}
}

// typeFailed records why a type could not be read: a refused token ends
// the run; a refusal of the search (403, 400, 404) or a failure of the
// EHR skips the type.
func (p *puller) typeFailed(typ string, err error) {
	r := p.result(typ)
	var e *EHRError
	switch {
	case errors.As(err, &e) && e.Status == 401:
		p.ended = err
		r.Skipped = "the EHR refused the token (401)"
	case errors.Is(err, context.DeadlineExceeded):
		p.ended = errLimit
		r.Skipped = "the run's time is up"
	case errors.Is(err, context.Canceled):
		p.ended = err
		r.Skipped = "the exchange stopped"
	case IsCode(err, CodeTooLong):
		r.Skipped = "an answer of the EHR is larger than a run takes"
	default:
		r.Skipped = truncateRunes(err.Error(), maxReasonLength)
	}
}

// importResources converts and stores the resources of a page, as the
// patient: each on its own, through the R4 import.
func (p *puller) importResources(ctx context.Context, searched string, resources []json.RawMessage) {
	s := p.s
	var writes []ResourceWrite
	var types []string
	for _, raw := range resources {
		typ := resourceTypeOf(raw)
		if typ == "" {
			typ = searched
		}
		r := p.result(typ)
		id := upstreamIDOf(raw)
		if id != "" {
			if p.seen[typ+"/"+id] {
				continue // found again (an Observation under two categories, an included resource)
			}
			p.seen[typ+"/"+id] = true
		}
		if p.fetched == s.limits.MaxResources {
			p.ended = errLimit
			r.Skipped = fmt.Sprintf("stopped after %d resources (the run's bound)", p.fetched)
			break
		}
		p.fetched++
		r.Fetched++
		if len(raw) > s.limits.MaxResourceBytes {
			r.refuse(fmt.Sprintf("larger than %d MiB", s.limits.MaxResourceBytes>>20))
			continue
		}
		conv, err := s.ConvertR4(p.src, raw, "")
		if err != nil {
			r.refuse(ErrorMessage(err))
			continue
		}
		if conv.Native {
			r.refuse("an Open mHealth Observation: upload it as a data point, not from an EHR")
			continue
		}
		if r.Dropped == nil && len(conv.Dropped) > 0 {
			r.Dropped = map[string]int{}
		}
		for _, path := range conv.Dropped {
			r.Dropped[path]++
		}
		writes = append(writes, conv.Write(""))
		writes[len(writes)-1].Source = fmt.Sprint(p.src.ID)
		types = append(types, typ)
	}
	if len(writes) == 0 {
		return
	}
	for i, out := range s.CreateResources(ctx, p.actor, writes) {
		r := p.result(types[i])
		var de *Error
		switch {
		case out.Err == nil:
			r.Stored++
		case errors.As(out.Err, &de) && de.Code == CodeDuplicate:
			r.Duplicates++
			if de.Stored == "" {
				r.Changed++
			}
		default:
			r.refuse(ErrorMessage(out.Err))
		}
	}
}

// result is the result of a type, made on first use; the run lists them
// in that order.
func (p *puller) result(typ string) *PullTypeResult {
	if r := p.results[typ]; r != nil {
		return r
	}
	r := &PullTypeResult{Type: typ}
	p.results[typ] = r
	p.order = append(p.order, typ)
	return r
}

// refuse counts a refused resource and its reason.
func (r *PullTypeResult) refuse(reason string) {
	r.Refused++
	r.reason(reason)
}

// reason counts a reason, keeping at most maxReasons distinct ones.
func (r *PullTypeResult) reason(reason string) {
	reason = truncateRunes(reason, maxReasonLength)
	for i := range r.Reasons {
		if r.Reasons[i].Reason == reason {
			r.Reasons[i].Count++
			return
		}
	}
	if len(r.Reasons) < maxReasons {
		r.Reasons = append(r.Reasons, PullReason{Reason: reason, Count: 1})
	}
}

// finishPull records how the run ended, moves the connection's times
// (and its status, when the EHR refused the token), audits the run and
// logs one line of counts.
func (s *Service) finishPull(p *puller, prepareErr error) {
	ctx := context.WithoutCancel(s.background)
	run, c := p.run, p.conn
	run.EndedAt = s.Now()
	run.Types = run.Types[:0]
	for _, typ := range p.order {
		run.Types = append(run.Types, *p.results[typ])
	}
	var e *EHRError
	switch {
	case prepareErr != nil:
		run.Outcome, run.Message = PullFailed, truncateRunes(ErrorMessage(prepareErr), maxReasonLength)
	case errors.As(p.ended, &e) && e.Status == 401:
		run.Outcome, run.Message = PullTokenRejected, "the EHR no longer accepts the connection's sign-in: connect again"
	case errors.Is(p.ended, errLimit):
		run.Outcome, run.Message = PullLimited, "a bound of the run stopped it: pull again to continue"
	case p.ended != nil:
		run.Outcome, run.Message = PullInterrupted, "the exchange stopped during the run: pull again"
	case slices.ContainsFunc(run.Types, func(t PullTypeResult) bool { return t.Skipped != "" }):
		run.Outcome, run.Message = PullPartial, "some types could not be read: their reasons say why"
	default:
		run.Outcome = PullCompleted
	}
	if err := s.store.FinishPullRun(ctx, run); err != nil {
		s.log.Error("recording an EHR pull failed", "run", run.ID, "error", err)
	}
	used := c.SealedToken
	err := s.changeConnection(ctx, c.ID, func(now *EHRConnection) {
		if run.Outcome == PullTokenRejected && bytes.Equal(now.SealedToken, used) {
			now.Status = EHRReconnect // the sign-in the run used, not a newer one
		}
		now.LastRunAt = run.StartedAt
		if run.Outcome == PullCompleted {
			now.LastCompleteAt = run.StartedAt
		}
	})
	if err != nil && !IsCode(err, CodeNotFound) {
		s.log.Error("updating an EHR connection after its pull failed", "connection", c.ID, "error", err)
	}
	var outcome error
	if run.Outcome != PullCompleted {
		outcome = Errorf(CodeUnprocessable, "%s", run.Outcome)
	}
	actor := p.actor
	if actor == nil {
		actor = SystemActor()
	}
	s.audit(ctx, actor, AuditCreate, AuditKindPull, outcome, "Endpoint", nil, []int64{run.PatientID})
	t := run.Totals()
	s.log.Info("EHR pull ended", "run", run.ID, "connection", c.ID, "trigger", run.Trigger, "outcome", run.Outcome,
		"fetched", t.Fetched, "stored", t.Stored, "duplicates", t.Duplicates, "changed", t.Changed, "refused", t.Refused,
		"skipped_types", t.Skipped, "seconds", run.EndedAt.Sub(run.StartedAt).Seconds())
}

// PullTotals sums a run's types.
type PullTotals struct {
	Fetched, Stored, Duplicates, Changed, Refused, Skipped int
}

// Totals sums the run's types.
func (r *PullRun) Totals() PullTotals {
	var t PullTotals
	for _, x := range r.Types {
		t.Fetched += x.Fetched
		t.Stored += x.Stored
		t.Duplicates += x.Duplicates
		t.Changed += x.Changed
		t.Refused += x.Refused
		if x.Skipped != "" {
			t.Skipped++
		}
	}
	return t
}

// PullRunsOfPatient lists a patient's pulls, newest first: the patient's
// own, and those of a patient the actor may read.
func (s *Service) PullRunsOfPatient(ctx context.Context, actor *Actor, patientID int64, p Page) (List[PullRun], error) {
	if _, err := s.readablePatient(ctx, actor, patientID); err != nil {
		return List[PullRun]{}, err
	}
	return s.store.PullRuns(ctx, []int64{patientID}, p)
}

// resourceTypeOf reads a resource's type without decoding the rest.
func resourceTypeOf(raw json.RawMessage) string {
	var r struct {
		ResourceType string `json:"resourceType"`
	}
	_ = json.Unmarshal(raw, &r)
	return r.ResourceType
}

// upstreamIDOf reads a resource's id.
func upstreamIDOf(raw json.RawMessage) string {
	var r struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(raw, &r)
	return r.ID
}

// outcomeText is what an OperationOutcome says, in one line.
func outcomeText(raw json.RawMessage) string {
	var oo struct {
		Issue []struct {
			Severity    string `json:"severity"`
			Diagnostics string `json:"diagnostics"`
			Details     struct {
				Text string `json:"text"`
			} `json:"details"`
		} `json:"issue"`
	}
	_ = json.Unmarshal(raw, &oo)
	var parts []string
	for _, i := range oo.Issue {
		if text := strings.TrimSpace(i.Diagnostics + " " + i.Details.Text); text != "" {
			parts = append(parts, i.Severity+": "+text)
		}
	}
	if len(parts) == 0 {
		return "an OperationOutcome without text"
	}
	return strings.Join(parts, "; ")
}

// underBase reports whether a URL is under a FHIR base: same scheme, host
// and port, and a path below the base's.
func underBase(link, base string) bool {
	l, err1 := url.Parse(link)
	b, err2 := url.Parse(base)
	if err1 != nil || err2 != nil || l.Scheme != b.Scheme || l.Host != b.Host || l.User != nil {
		return false
	}
	prefix := strings.TrimSuffix(b.Path, "/")
	return l.Path == prefix || strings.HasPrefix(l.Path, prefix+"/")
}

// changeConnection writes a change to a connection as it is now, not as a
// pull read it when it began: the patient may have changed it during the
// run (turned updates off, connected again with a new sign-in), which the
// run's copy would write back.
func (s *Service) changeConnection(ctx context.Context, id int64, change func(*EHRConnection)) error {
	c, err := s.store.EHRConnectionByID(ctx, id)
	if err != nil {
		return err
	}
	change(c)
	return s.store.UpdateEHRConnection(ctx, c)
}
