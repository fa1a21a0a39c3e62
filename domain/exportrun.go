package domain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Running export jobs: the ExportRunner of each server process claims
// queued jobs (at most Concurrency at once), plans them into parts, and
// writes each part's files while it streams the part's search: the same
// plan as the owner's search of that type (observationPlan, ...), run
// without paging or sorting, so that memory stays flat however large the
// export. A part's files are committed, then the part is recorded done in
// the job: a run cut short resumes at its first part not recorded, whose
// leftovers it removes first.

// ExportSearches makes the searches of an export: package fhirsearch's
// Translator.
type ExportSearches interface {
	// ExportSearch parses the search of an export's part: the type, its
	// query, and its type filters, of which a resource must match one
	// (none: no filter). Its plan streams the whole result, in no order.
	ExportSearch(resourceType string, query url.Values, filters []url.Values) (Search, error)
	// ImportedType reports whether the imported store keeps type t, and
	// whether t has a patient search parameter (is in the Patient
	// compartment).
	ImportedType(t string) (ok, patient bool)
}

// ExportEncoder writes the records of an export as lines: package
// handlers renders them as FHIR.
type ExportEncoder interface {
	// AppendRecord appends the line of one record, newline included, in
	// the format, keeping only elements when set. record is an
	// *Observation, *Patient, *User (a Practitioner), *Organization,
	// *GroupView, *DataSource, *Resource or *AuditEvent.
	AppendRecord(dst []byte, format ExportFormat, elements []string, record any) ([]byte, error)
}

// ExportStreams runs an export's plans: every record a plan selects,
// handed over in batches (each batch is the callee's until it returns).
type ExportStreams interface {
	StreamObservations(ctx context.Context, plan *SearchPlan, each func([]Observation) error) error
	StreamPatients(ctx context.Context, plan *SearchPlan, each func([]Patient) error) error
	StreamUsers(ctx context.Context, plan *SearchPlan, each func([]User) error) error
	StreamOrganizations(ctx context.Context, plan *SearchPlan, each func([]Organization) error) error
	StreamStudies(ctx context.Context, plan *SearchPlan, each func([]Study) error) error
	StreamDataSources(ctx context.Context, plan *SearchPlan, each func([]DataSource) error) error
	StreamResources(ctx context.Context, plan *SearchPlan, each func([]Resource) error) error
	StreamAuditEvents(ctx context.Context, plan *SearchPlan, each func([]AuditEvent) error) error
	// ImportedResourceTypes returns the types of the imported resources of
	// the FHIR sources (nil: of every source), sorted.
	ImportedResourceTypes(ctx context.Context, sourceIDs []int64) ([]string, error)
}

// ExportRunner runs a process's share of the export jobs.
type ExportRunner struct {
	Service *Service
	Encoder ExportEncoder
	// Concurrency is how many jobs this process runs at once
	// (EXPORT_CONCURRENCY); others wait in the queue.
	Concurrency int
	Limits      ExportLimits
	// Settle is how long after its transactionTime a job starts reading:
	// writes stamped before it, still on their way to the database, land
	// first. Zero: DefaultExportSettle.
	Settle time.Duration
	// Poll is how often the runner looks for work besides being woken by
	// a kick-off in this process; zero: a second.
	Poll time.Duration
	// FileResources is the most resources one file holds; zero:
	// DefaultExportFileResources.
	FileResources int
	Log           *slog.Logger
}

// Defaults of the runner.
const (
	DefaultExportSettle        = 2 * time.Second
	DefaultExportFileResources = 100_000
	// exportProgressEvery is how often a running part records its count
	// (and so finds out it was deleted).
	exportProgressEvery = 2 * time.Second
	// exportSweepEvery is how often the runner hands back the jobs of dead
	// instances and removes expired and deleted ones.
	exportSweepEvery = 30 * time.Second
)

// errExportStopped ends a run whose job was deleted meanwhile.
var errExportStopped = errors.New("the export was deleted while it ran")

// defaults fills in the settings left zero.
func (r *ExportRunner) defaults() {
	if r.Concurrency <= 0 {
		r.Concurrency = 1
	}
	if r.Settle <= 0 {
		r.Settle = DefaultExportSettle
	}
	if r.Poll <= 0 {
		r.Poll = time.Second
	}
	if r.FileResources <= 0 {
		r.FileResources = DefaultExportFileResources
	}
	if r.Log == nil {
		r.Log = slog.Default()
	}
}

// Run claims and runs jobs until ctx ends; then it hands back the jobs it
// was running (queued again, to be resumed here or elsewhere).
func (r *ExportRunner) Run(ctx context.Context) {
	r.defaults()
	s := r.Service
	slots := make(chan struct{}, r.Concurrency)
	var running sync.WaitGroup
	poll := time.NewTicker(r.Poll)
	defer poll.Stop()
	var lastSweep time.Time
	for ctx.Err() == nil {
		if time.Since(lastSweep) >= exportSweepEvery {
			r.sweep(ctx)
			lastSweep = time.Now()
		}
	claim:
		for {
			select {
			case slots <- struct{}{}:
			default:
				break claim
			}
			j, err := s.store.ClaimExportJob(ctx, s.Now().Add(-r.Settle))
			if err != nil {
				<-slots
				if !IsCode(err, CodeNotFound) && ctx.Err() == nil {
					r.Log.Warn("claiming an export job failed", "error", err)
				}
				break
			}
			running.Add(1)
			go func() {
				defer func() { <-slots; running.Done() }()
				r.RunJob(ctx, j)
			}()
		}
		select {
		case <-ctx.Done():
		case <-s.exportWake:
		case <-poll.C:
		}
	}
	running.Wait()
	stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if n, err := s.store.RequeueExportJobs(stop, true); err != nil {
		r.Log.Warn("handing back the running export jobs failed", "error", err)
	} else if n > 0 {
		r.Log.Info("export jobs handed back for another run", "jobs", n)
	}
}

// sweep hands back the jobs of dead instances and removes the jobs that
// are deleted or expired, with their files, once no download reads them.
func (r *ExportRunner) sweep(ctx context.Context) {
	s := r.Service
	if n, err := s.store.RequeueExportJobs(ctx, false); err != nil && ctx.Err() == nil {
		r.Log.Warn("handing back the export jobs of dead instances failed", "error", err)
	} else if n > 0 {
		r.Log.Info("export jobs of instances that died handed back", "jobs", n)
	}
	jobs, err := s.store.ExportJobsToRemove(ctx, s.Now())
	if err != nil {
		if ctx.Err() == nil {
			r.Log.Warn("listing expired export jobs failed", "error", err)
		}
		return
	}
	for _, j := range jobs {
		if err := s.exportFiles.DeleteExportFiles(ctx, j.ID, 0); err != nil {
			r.Log.Warn("removing an export's files failed", "job", j.ID, "error", err)
			continue
		}
		if err := s.store.RemoveExportJob(ctx, j.ID); err != nil {
			r.Log.Warn("removing an export job failed", "job", j.ID, "error", err)
		}
	}
}

// RunJob runs one claimed job to its end: completed, failed, stopped by
// its deletion, or interrupted by ctx (then Run hands it back). Run calls
// it for each job it claims; a benchmark, for a job of its own.
func (r *ExportRunner) RunJob(ctx context.Context, j *ExportJob) {
	r.defaults()
	s := r.Service
	log := r.Log.With("job", j.ID)
	err := r.runParts(ctx, j)
	switch {
	case err == nil, ctx.Err() != nil:
		return
	case errors.Is(err, errExportStopped):
		// Deleted while it ran: the sweep removes its files once this
		// process no longer holds it.
		if err := s.store.ReleaseExportJob(ctx, j.ID); err != nil {
			log.Warn("releasing a deleted export failed", "error", err)
		}
		return
	}
	code, failure := ErrorCode(err), Sentence(ErrorMessage(err))
	if code == CodeInternal {
		log.Error("export job failed", "error", err)
		failure = "The export failed on an internal error, which the service logged."
	}
	for {
		j.State, j.Failure, j.FailureCode, j.FinishedAt = ExportFailed, failure, code, s.Now()
		j.ExpiresAt = j.FinishedAt.Add(r.Limits.Retention)
		err := s.store.UpdateExportJob(ctx, j)
		if !IsCode(err, CodeVersionMismatch) {
			if err != nil && ctx.Err() == nil {
				log.Warn("recording an export's failure failed", "error", err)
			}
			return
		}
		fresh, err := s.store.ExportJob(ctx, j.ID)
		if err != nil || fresh.State == ExportDeleted {
			return
		}
		j = fresh
	}
}

// runParts plans the job if it is new, then writes its parts from the
// first not done, then completes it.
func (r *ExportRunner) runParts(ctx context.Context, j *ExportJob) error {
	s := r.Service
	actor, err := s.exportActor(ctx, j.Owner)
	if err != nil {
		return Errorf(CodeForbidden, "the export's owner may no longer export: %s", ErrorMessage(err))
	}
	if j.Parts == nil {
		parts, err := s.planExport(ctx, actor, j)
		if err != nil {
			return err
		}
		j.Parts = append(parts, ExportPart{})[:len(parts)] // recorded as planned, even when empty
		if j.StartedAt.IsZero() {
			j.StartedAt = s.Now()
		}
		if err := r.save(ctx, j); err != nil {
			return err
		}
	}
	for i := j.PartsDone; i < len(j.Parts); i++ {
		// A run cut short may have left files of this part (and a later
		// one's: none, parts run in order).
		if err := s.exportFiles.DeleteExportFiles(ctx, j.ID, i); err != nil {
			return err
		}
		outputs, err := r.writePart(ctx, actor, j, i)
		if err != nil {
			return err
		}
		j.Outputs = append(j.Outputs, outputs...)
		j.PartsDone, j.Count = i+1, 0
		if err := r.save(ctx, j); err != nil {
			return err
		}
	}
	j.State, j.FinishedAt = ExportCompleted, s.Now()
	j.ExpiresAt = j.FinishedAt.Add(r.Limits.Retention)
	if err := r.save(ctx, j); err != nil {
		return err
	}
	var patients []int64
	for _, o := range j.Outputs {
		patients = append(patients, o.Patients...)
	}
	// The job's files are written; a download records its own read.
	if err := s.auditExportJob(ctx, actor, AuditExecute, AuditKindExportComplete, j, "", sortedUnique(patients)); err != nil {
		// The files stay downloadable: each download records its own read,
		// or is refused when the trail refuses it.
		s.log.Warn("the audit trail refused an export's completion event", "job", j.ID, "error", err)
	}
	return nil
}

// save writes the job; a job changed meanwhile (deleted by its owner) stops
// the run.
func (r *ExportRunner) save(ctx context.Context, j *ExportJob) error {
	err := r.Service.store.UpdateExportJob(ctx, j)
	if IsCode(err, CodeVersionMismatch) || IsCode(err, CodeNotFound) {
		return errExportStopped
	}
	return err
}

// exportActor is the actor an export runs as: its owner, with the
// kick-off token's scopes. CodeLogin when the owner is gone or inactive.
func (s *Service) exportActor(ctx context.Context, o ExportOwner) (*Actor, error) {
	var a *Actor
	var err error
	if o.Organization != 0 {
		a, err = s.OrganizationActor(ctx, o.Organization, o.Scopes)
	} else {
		a, err = s.TokenActor(ctx, o.UserID, nil, o.Scopes, o.Patient)
	}
	if err != nil {
		return nil, err
	}
	a.ClientID = o.ClientID
	return a, nil
}

// writePart streams part i of the job into its files.
func (r *ExportRunner) writePart(ctx context.Context, actor *Actor, j *ExportJob, i int) ([]ExportOutput, error) {
	s := r.Service
	part := j.Parts[i]
	query, err := url.ParseQuery(part.Query)
	if err != nil {
		return nil, err
	}
	var filters []url.Values
	for _, f := range part.Filters {
		v, err := url.ParseQuery(f)
		if err != nil {
			return nil, err
		}
		filters = append(filters, v)
	}
	q, err := s.exportSearches.ExportSearch(part.Type, query, filters)
	if err != nil {
		return nil, err
	}
	w := &partWriter{ctx: ctx, files: s.exportFiles, job: j.ID, part: i, typ: part.Type, max: int64(r.FileResources)}
	defer w.abort()
	var line []byte
	lastSave := time.Now()
	err = s.streamPart(ctx, actor, q, part, func(patient int64, record any) error {
		var err error
		if line, err = r.Encoder.AppendRecord(line[:0], j.Request.Format, j.Request.Elements, record); err != nil {
			return err
		}
		if err := w.write(line, patient); err != nil {
			return err
		}
		if time.Since(lastSave) >= exportProgressEvery {
			lastSave = time.Now()
			j.Count = w.total
			return r.save(ctx, j)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return w.commit()
}

// streamPart runs the part's search as actor, the plan of the owner's own
// search of the type, and hands each record with its patient (0: none) to
// emit.
func (s *Service) streamPart(ctx context.Context, actor *Actor, q Search, part ExportPart, emit func(patient int64, record any) error) error {
	if part.Imported {
		plan, _, err := s.resourcePlan(ctx, actor, q, part.Patients)
		if err != nil || plan == nil {
			return err
		}
		return streamEach(ctx, plan, s.store.StreamResources, func(r *Resource) error { return emit(r.SourcePatientID, r) })
	}
	switch part.Type {
	case "Observation":
		plan, _, err := s.observationPlan(ctx, actor, q, part.Patients)
		if err != nil {
			return err
		}
		return streamEach(ctx, plan, s.store.StreamObservations, func(o *Observation) error { return emit(o.PatientID, o) })
	case "Patient":
		plan, _, err := s.patientPlan(ctx, actor, q, part.Patients)
		if err != nil {
			return err
		}
		return streamEach(ctx, plan, s.store.StreamPatients, func(p *Patient) error { return emit(p.ID, p) })
	case "Practitioner":
		plan, err := s.practitionerPlan(ctx, actor, q, nil)
		if err != nil {
			return err
		}
		return streamEach(ctx, plan, s.store.StreamUsers, func(u *User) error { return emit(0, u) })
	case "Organization":
		plan, err := s.organizationPlan(ctx, actor, q, nil)
		if err != nil {
			return err
		}
		return streamEach(ctx, plan, s.store.StreamOrganizations, func(o *Organization) error { return emit(0, o) })
	case "Group":
		plan, err := s.groupPlan(ctx, actor, q, nil)
		if err != nil {
			return err
		}
		return s.store.StreamStudies(ctx, plan, func(studies []Study) error {
			groups, err := s.groupViews(ctx, studies)
			for i := 0; err == nil && i < len(groups); i++ {
				err = emit(0, &groups[i])
			}
			return err
		})
	case "Device":
		plan, err := s.devicePlan(ctx, actor, q, nil)
		if err != nil {
			return err
		}
		return streamEach(ctx, plan, s.store.StreamDataSources, func(d *DataSource) error { return emit(0, d) })
	case "AuditEvent":
		plan, viewer, own, err := s.auditPlan(ctx, actor, q)
		if err != nil {
			return err
		}
		return s.store.StreamAuditEvents(ctx, plan, func(events []AuditEvent) error {
			events = ownViews(viewer, own, events)
			for i := range events {
				if err := emit(0, &events[i]); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return Errorf(CodeNotSupported, "%s has no native store to export", part.Type)
}

// streamEach streams a plan, handing each record to emit.
func streamEach[T any](ctx context.Context, plan *SearchPlan, stream func(context.Context, *SearchPlan, func([]T) error) error, emit func(*T) error) error {
	return stream(ctx, plan, func(batch []T) error {
		for i := range batch {
			if err := emit(&batch[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// partWriter writes a part's lines into files of at most max lines each,
// which it opens as they are needed (a part without records has none).
type partWriter struct {
	ctx   context.Context
	files ExportFiles
	job   string
	part  int
	typ   string
	max   int64
	w     ExportFileWriter // the file being written
	count int64            // its lines
	total int64            // the part's lines
	seen  map[int64]bool   // the current file's patients
	done  []ExportOutput
}

func (p *partWriter) write(line []byte, patient int64) error {
	if p.w == nil {
		name := exportFileName(p.typ, p.part, len(p.done))
		w, err := p.files.CreateExportFile(p.ctx, p.job, p.part, name)
		if err != nil {
			return err
		}
		p.w, p.count, p.seen = w, 0, map[int64]bool{}
		p.done = append(p.done, ExportOutput{Type: p.typ, Name: name})
	}
	if _, err := p.w.Write(line); err != nil {
		return err
	}
	p.count++
	p.total++
	if patient != 0 {
		p.seen[patient] = true
	}
	if p.count >= p.max {
		return p.close()
	}
	return nil
}

// close commits the file being written.
func (p *partWriter) close() error {
	if p.w == nil {
		return nil
	}
	size, err := p.w.Commit()
	p.w = nil
	if err != nil {
		return err
	}
	out := &p.done[len(p.done)-1]
	out.Count, out.Bytes = p.count, size
	for id := range p.seen {
		out.Patients = append(out.Patients, id)
	}
	slices.Sort(out.Patients)
	return nil
}

// commit commits the last file and returns the part's files.
func (p *partWriter) commit() ([]ExportOutput, error) {
	if err := p.close(); err != nil {
		return nil, err
	}
	return p.done, nil
}

// abort drops a file left open by a failure.
func (p *partWriter) abort() {
	if p.w != nil {
		p.w.Abort()
		p.w = nil
	}
}

// exportFileName names a part's n-th file: the type, then the part and
// file numbers, so names are unique in the job and say what they hold.
func exportFileName(typ string, part, n int) string {
	return fmt.Sprintf("%s.%d.%d.ndjson", typ, part, n)
}

// ExportFilePart is the part a file name of exportFileName belongs to;
// false for a name it did not make.
func ExportFilePart(name string) (int, bool) {
	rest, ok := cutSuffixDot(name, ".ndjson")
	if !ok {
		return 0, false
	}
	i := len(rest) - 1
	for i >= 0 && rest[i] != '.' {
		i--
	}
	if i < 0 {
		return 0, false
	}
	rest = rest[:i]
	j := len(rest) - 1
	for j >= 0 && rest[j] != '.' {
		j--
	}
	if j < 0 {
		return 0, false
	}
	part, err := strconv.Atoi(rest[j+1:])
	return part, err == nil && part >= 0
}

func cutSuffixDot(s, suffix string) (string, bool) {
	if len(s) < len(suffix) || s[len(s)-len(suffix):] != suffix {
		return s, false
	}
	return s[:len(s)-len(suffix)], true
}

// partQuery is the base query of a part of type t: the imported store's
// (every source the owner may read) or the native store's.
func (s *Service) partQuery(t string, imported bool) url.Values {
	if imported {
		return url.Values{"_source:below": {s.sourceBase + "/"}}
	}
	return url.Values{}
}

// planExport plans a job's parts: one search per type, with the level's
// join (a study's patients, under its consent; the patients asked for),
// the job's time bounds and the type's filters; imported resources of
// every type the owner's sources hold. With _since, a study's patients
// who joined it after _since (or answered its consent requests since) are
// exported whole: their earlier data is new to the study's export.
func (s *Service) planExport(ctx context.Context, actor *Actor, j *ExportJob) ([]ExportPart, error) {
	req := j.Request
	upper := j.TransactionTime
	if req.Until != nil && req.Until.Before(upper) {
		upper = *req.Until
	}
	bounded := func(q url.Values, withSince bool) string {
		q = cloneValues(q)
		q.Add("_lastUpdated", "le"+upper.UTC().Format(exportInstant))
		if withSince && req.Since != nil {
			q.Add("_lastUpdated", "gt"+req.Since.UTC().Format(exportInstant))
		}
		return q.Encode()
	}
	filters := map[string][]string{}
	for _, f := range req.TypeFilters {
		t, query, _ := strings.Cut(f, "?")
		filters[t] = append(filters[t], query)
	}
	// Who each part covers: the patients asked for, a study's members
	// (split by when they joined, with _since), or, when nil, every
	// patient the owner may read.
	type cohort struct {
		patients  []int64
		withSince bool
	}
	cohorts := []cohort{{patients: req.Patients, withSince: true}}
	if req.Level == ExportGroup {
		members, err := s.enrolled(ctx, []int64{req.GroupID})
		if err != nil {
			return nil, err
		}
		cohorts = []cohort{{patients: members, withSince: true}}
		if req.Since != nil {
			late, err := s.joinedSince(ctx, req.GroupID, *req.Since)
			if err != nil {
				return nil, err
			}
			cohorts = []cohort{{patients: without(members, late), withSince: true}, {patients: intersect(members, late), withSince: false}}
		}
	}
	var parts []ExportPart
	add := func(t string, imported bool, join url.Values, perPatient bool) {
		base := s.partQuery(t, imported)
		for k, v := range join {
			base[k] = v
		}
		if !perPatient {
			parts = append(parts, ExportPart{Type: t, Imported: imported, Query: bounded(base, true), Filters: filters[t]})
			return
		}
		for _, c := range cohorts {
			if c.patients != nil && len(c.patients) == 0 {
				continue // nobody: no part
			}
			parts = append(parts, ExportPart{Type: t, Imported: imported, Query: bounded(base, c.withSince), Filters: filters[t], Patients: c.patients})
		}
	}
	study := url.Values{}
	if req.Level == ExportGroup {
		study.Set("_has:Group:member:_id", strconv.FormatInt(req.GroupID, 10))
	}
	for _, t := range req.Types {
		if !slices.Contains(exportNativeTypes, t) {
			add(t, true, nil, req.Level != ExportSystem)
			continue
		}
		switch t {
		case "Observation":
			join := url.Values{}
			if req.Level == ExportGroup {
				join.Set("patient._has:Group:member:_id", strconv.FormatInt(req.GroupID, 10))
			}
			add(t, false, join, req.Level != ExportSystem)
		case "Patient":
			add(t, false, study, req.Level != ExportSystem)
		case "Group":
			join := url.Values{}
			if req.Level == ExportGroup {
				join.Set("_id", strconv.FormatInt(req.GroupID, 10))
			}
			add(t, false, join, false)
		default: // Organization, Device: a study's own; Practitioner, AuditEvent: system level only
			add(t, false, study, false)
		}
	}
	if !req.TypesAsked {
		imported, err := s.importedExportTypes(ctx, actor, req)
		if err != nil {
			return nil, err
		}
		for _, t := range imported {
			add(t, true, nil, req.Level != ExportSystem)
		}
	}
	return parts, nil
}

// exportInstant is how an export writes its time bounds into searches.
const exportInstant = "2006-01-02T15:04:05.000Z07:00"

// cloneValues copies a query, its value lists included.
func cloneValues(v url.Values) url.Values {
	out := make(url.Values, len(v))
	for k, vs := range v {
		out[k] = slices.Clone(vs)
	}
	return out
}

// without returns the ids of a that b lacks.
func without(a, b []int64) []int64 {
	out := []int64{}
	for _, id := range a {
		if !slices.Contains(b, id) {
			out = append(out, id)
		}
	}
	return out
}

// joinedSince returns the patients whose enrollment in the study, or one
// of whose answers to its consent requests, was written after since.
func (s *Service) joinedSince(ctx context.Context, studyID int64, since time.Time) ([]int64, error) {
	es, err := s.store.Enrollments(ctx, EnrollmentQuery{StudyIDs: []int64{studyID}})
	if err != nil {
		return nil, err
	}
	cs, err := s.store.Consents(ctx, ConsentQuery{StudyIDs: []int64{studyID}})
	if err != nil {
		return nil, err
	}
	var late []int64
	for _, e := range es {
		if e.LastUpdated.After(since) {
			late = append(late, e.PatientID)
		}
	}
	for _, c := range cs {
		if c.LastUpdated.After(since) {
			late = append(late, c.PatientID)
		}
	}
	return uniqueIDs(late), nil
}

// importedExportTypes are the types of the imported resources a default
// export holds: those the owner's FHIR sources hold, that the level
// exports (the Patient compartment but at system level) and that the
// owner's token reaches.
func (s *Service) importedExportTypes(ctx context.Context, actor *Actor, req ExportRequest) ([]string, error) {
	if req.Format == ExportOMH {
		return nil, nil
	}
	var sources []int64
	if !actor.IsSuperuser() {
		var err error
		if sources, err = s.readableSourceIDs(ctx, actor); err != nil {
			return nil, err
		}
		if len(sources) == 0 {
			return nil, nil
		}
	}
	all, err := s.store.ImportedResourceTypes(ctx, sources)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range all {
		ok, patient := s.exportSearches.ImportedType(t)
		if ok && (patient || req.Level == ExportSystem) && actor.AllowFHIR(InteractionSearch, t) == nil {
			out = append(out, t)
		}
	}
	return out, nil
}
