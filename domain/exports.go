package domain

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Bulk Data export (FHIR Bulk Data Access, $export): a client kicks off an
// export of a study (Group), of the patients it may read (Patient) or of
// everything (system); the export runs as a job in the background, writing
// NDJSON files, and the client polls the job's status until its manifest
// lists the files, which it then downloads. docs/bulk-export.md describes
// the whole mechanism; this file holds its rules:
//
//   - what each level exports, for whom, and that an export reads exactly
//     what its owner's searches would (the same scopes, the same consent
//     rule of a study search: exportPlan in exportrun.go);
//   - who may see, download and delete a job: its owner only, the user (or
//     organization) and client that kicked it off; anyone else is told it
//     does not exist;
//   - the job's states (ExportState) and the limits of the queue.

// ExportLevel is what an export covers.
type ExportLevel string

// The levels of $export.
const (
	ExportSystem  ExportLevel = "system"  // [base]/$export: everything the owner may read
	ExportPatient ExportLevel = "patient" // [base]/Patient/$export: the patients the owner may read
	ExportGroup   ExportLevel = "group"   // [base]/Group/{study}/$export: a study's patients, under its consent
)

// ExportState is where a job is in its life:
//
//	queued -> running -> completed | failed
//	   any -> deleted (its owner's DELETE, or the retention's end)
//
// A running job whose instance dies goes back to queued (resumed from its
// last finished part) or, past MaxExportAttempts, to failed. A deleted job
// is gone to its owner at once; its files and record are removed once no
// download of them runs.
type ExportState string

// The states of an export job.
const (
	ExportQueued    ExportState = "queued"
	ExportRunning   ExportState = "running"
	ExportCompleted ExportState = "completed"
	ExportFailed    ExportState = "failed"
	ExportDeleted   ExportState = "deleted"
)

// ExportFormat is the format of an export's files.
type ExportFormat string

// The output formats. FHIR NDJSON also answers to its spellings
// application/ndjson and ndjson (ParseExportFormat).
const (
	ExportFHIR ExportFormat = "application/fhir+ndjson"
	// ExportOMH writes one line per native Observation: its data point,
	// decoded, with the observation's id, patient, code and effective
	// time beside it, for a pandas DataFrame.
	ExportOMH ExportFormat = "application/x-omh+ndjson"
)

// ParseExportFormat reads _outputFormat: absent is FHIR NDJSON.
func ParseExportFormat(v string) (ExportFormat, error) {
	switch v {
	case "", "application/fhir+ndjson", "application/ndjson", "ndjson":
		return ExportFHIR, nil
	case string(ExportOMH):
		return ExportOMH, nil
	}
	return "", FieldErrorf("_outputFormat", "%q is not offered: application/fhir+ndjson (also application/ndjson, ndjson) or %s", v, ExportOMH)
}

// ExportRequest is what a kick-off asked, as read by the FHIR layer.
type ExportRequest struct {
	Level ExportLevel
	// GroupID is the study of a Group export.
	GroupID int64
	// Patients narrows a Patient export to these patients (the patient
	// parameter); nil: every patient the owner may read.
	Patients []int64
	// Types are the resource types asked for (_type); none: the level's.
	// StartExport sets them to those the export holds, and TypesAsked
	// when the client named them (else the imported resources the owner
	// reaches are added when the job runs).
	Types      []string
	TypesAsked bool
	// Since and Until bound the resources' lastUpdated (_since, _until).
	Since, Until *time.Time
	// TypeFilters are FHIR searches "Type?params" (_typeFilter): a
	// resource of a filtered type is exported when it matches one of them.
	TypeFilters []string
	// Elements keeps only these elements of each resource (_elements).
	Elements []string
	Format   ExportFormat
	// URL is the kick-off request as made: the manifest's request.
	URL string
	// Ignored are the parameters a lenient kick-off ignored: the manifest
	// names them in its error file.
	Ignored []string
}

// ExportOwner is who kicked an export off, and with which token: only the
// same user (or organization, for an organization's backend client)
// through the same client sees the job, and the job reads as that token
// would. The console's jobs have no client.
type ExportOwner struct {
	UserID       int64
	Organization int64
	ClientID     string
	// Scopes and Patient are the kick-off token's granted scopes and
	// patient context: the job never reads more than the token could.
	Scopes  []string
	Patient int64
}

// ExportPart is one search of an export: a type, its query, its type
// filters (ORed) and, when set, the patients it is narrowed to. A part is
// what a job resumes from: its files are committed together when it ends.
type ExportPart struct {
	Type     string
	Imported bool     // a search of the imported store
	Query    string   // url-encoded
	Filters  []string // url-encoded, ORed
	Patients []int64  // nil: no narrowing
}

// ExportOutput is one file of a finished part.
type ExportOutput struct {
	Type  string
	Name  string // the file's name in the job
	Count int64  // resources (lines)
	Bytes int64  // stored (gzip) size
	// Patients are those whose data the file holds (the audit trail of
	// its downloads names them).
	Patients []int64
}

// ExportJob is a bulk export and its state.
type ExportJob struct {
	ID              string
	State           ExportState
	Owner           ExportOwner
	Request         ExportRequest
	TransactionTime time.Time
	CreatedAt       time.Time
	StartedAt       time.Time // first claimed; zero while queued
	FinishedAt      time.Time
	// ExpiresAt is when a finished job's files go (EXPORT_RETENTION after
	// it finished).
	ExpiresAt time.Time
	// Parts are planned when the job first runs; PartsDone of them are
	// written, their files in Outputs.
	Parts     []ExportPart
	PartsDone int
	Outputs   []ExportOutput
	// Count is the resources of the part being written so far (progress).
	Count int64
	// Failure says why a failed job failed, in words for its owner, and
	// FailureCode classifies it (CodeInternal: a fault of ours, logged).
	Failure     string
	FailureCode Code
	Attempts    int // runs begun; a crash ends one
	// Version is the record's version, moved on by every change
	// (compare-and-set).
	Version int64
}

// The limits of the export queue.
const (
	// MaxExportAttempts is how many runs a job gets: an interrupted run is
	// resumed by the next, and after this many it fails.
	MaxExportAttempts = 3
	// MaxOwnerExports is how many unfinished jobs one owner may have.
	MaxOwnerExports = 3
)

// ExportLimits are the installation's export settings.
type ExportLimits struct {
	// Queue is how many unfinished jobs may wait or run in all
	// (EXPORT_QUEUE); beyond, a kick-off is CodeThrottled.
	Queue int
	// Retention is how long a finished job's files are kept
	// (EXPORT_RETENTION).
	Retention time.Duration
}

// DefaultExportLimits are the settings' defaults.
var DefaultExportLimits = ExportLimits{Queue: 20, Retention: 2 * time.Hour}

// ExportStore keeps export jobs. Writes of a job are a compare-and-set on
// its Version: CodeVersionMismatch when it moved on (another instance, or
// its owner's DELETE), CodeNotFound when it is gone.
type ExportStore interface {
	CreateExportJob(ctx context.Context, j *ExportJob) error
	ExportJob(ctx context.Context, id string) (*ExportJob, error)
	// CountExportJobs counts the unfinished (queued or running) jobs, of
	// one owner when owner is set.
	CountExportJobs(ctx context.Context, owner *ExportOwner) (int64, error)
	// UpdateExportJob writes j if the stored job is still at j.Version,
	// and moves j.Version on.
	UpdateExportJob(ctx context.Context, j *ExportJob) error
	// ClaimExportJob moves the oldest queued job created before
	// createdBefore to running under this process's instance lease, and
	// returns it; CodeNotFound when none waits.
	ClaimExportJob(ctx context.Context, createdBefore time.Time) (*ExportJob, error)
	// RequeueExportJobs hands back the running jobs of this process (mine)
	// or of processes whose lease lapsed: queued again, or failed past
	// MaxExportAttempts. It returns how many it moved.
	RequeueExportJobs(ctx context.Context, mine bool) (int, error)
	// ExportJobsToRemove returns deleted jobs, and finished jobs expired
	// by now, that no live download reads.
	ExportJobsToRemove(ctx context.Context, now time.Time) ([]ExportJob, error)
	// ReleaseExportJob gives up this process's hold on a job it stopped
	// running (deleted meanwhile), so that its files may be removed.
	ReleaseExportJob(ctx context.Context, id string) error
	// RemoveExportJob deletes the job's record (its files are gone).
	RemoveExportJob(ctx context.Context, id string) error
	// BeginExportDownload records that this process serves a download of
	// the job, if it is still completed; CodeNotFound otherwise. The
	// returned id ends it (EndExportDownload).
	BeginExportDownload(ctx context.Context, jobID string) (string, error)
	EndExportDownload(ctx context.Context, jobID, downloadID string) error
}

// ExportFiles keeps the files of export jobs (package repo: GridFS on
// MongoDB, the data directory with the embedded database).
type ExportFiles interface {
	// CreateExportFile starts a file of the job's part; its bytes become
	// readable whole when Commit returns, and never if it is aborted or the
	// process dies first.
	CreateExportFile(ctx context.Context, jobID string, part int, name string) (ExportFileWriter, error)
	// OpenExportFile opens a committed file; CodeNotFound if there is none.
	OpenExportFile(ctx context.Context, jobID, name string) (io.ReadCloser, error)
	// DeleteExportFiles removes the job's files of parts from on (0: all),
	// committed or not.
	DeleteExportFiles(ctx context.Context, jobID string, from int) error
}

// ExportFileWriter writes one export file.
type ExportFileWriter interface {
	io.Writer
	// Commit makes the file whole and readable, and returns its size.
	Commit() (int64, error)
	// Abort drops what was written.
	Abort()
}

// newExportID returns a job id: 128 random bits, so that ids say nothing
// and cannot be guessed (the owner check is what protects a job).
func newExportID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// StartExport kicks an export off as actor: it checks that the actor may
// export at the level and every type asked for, and queues the job.
// Returns CodeInvalid for a request that cannot run, CodeForbidden for
// what the actor or its token may not export, CodeNotFound for a study
// the actor may not read, CodeThrottled (with RetryAfter) when the queue
// or the owner's share of it is full.
func (s *Service) StartExport(ctx context.Context, actor *Actor, req ExportRequest, limits ExportLimits) (j *ExportJob, err error) {
	defer func() { s.auditExport(ctx, actor, AuditKindExport, req, j, err) }()
	if s.exportSearches == nil || s.exportFiles == nil {
		return nil, Errorf(CodeNotSupported, "bulk export is not configured on this server")
	}
	if err := s.checkExportRequest(ctx, actor, &req); err != nil {
		return nil, err
	}
	owner := ownerOf(actor)
	if n, err := s.store.CountExportJobs(ctx, &owner); err != nil {
		return nil, err
	} else if n >= MaxOwnerExports {
		return nil, &Error{Code: CodeThrottled, RetryAfter: time.Minute,
			Message: fmt.Sprintf("you have %d exports waiting or running, the most one client may have: wait for one to finish, or delete one", n)}
	}
	if n, err := s.store.CountExportJobs(ctx, nil); err != nil {
		return nil, err
	} else if n >= int64(limits.Queue) {
		return nil, &Error{Code: CodeThrottled, RetryAfter: time.Minute,
			Message: fmt.Sprintf("the export queue is full (%d exports waiting or running): try again later", n)}
	}
	now := s.Now()
	j = &ExportJob{ID: newExportID(), State: ExportQueued, Owner: owner, Request: req, TransactionTime: now, CreatedAt: now}
	if err := s.store.CreateExportJob(ctx, j); err != nil {
		return nil, err
	}
	s.wakeExports()
	return j, nil
}

func ownerOf(actor *Actor) ExportOwner {
	o := ExportOwner{UserID: actor.User.ID, Organization: actor.Organization, ClientID: actor.ClientID}
	if actor.access != nil {
		o.Patient, o.Scopes = actor.access.patient, slices.Clone(actor.access.scopes)
	}
	return o
}

// owns reports whether the actor is the job's owner: the same user, or
// the same organization's backend client, through the same client, with
// the same patient context and resource scopes that cover the job's (a
// token held to another patient, or narrower, does not reach its files).
func (o ExportOwner) owns(actor *Actor) bool {
	if o.UserID != actor.User.ID || o.Organization != actor.Organization || o.ClientID != actor.ClientID {
		return false
	}
	if actor.access == nil {
		return o.Patient == 0
	}
	if o.Patient != actor.access.patient || o.Scopes == nil {
		return false
	}
	return !slices.ContainsFunc(o.Scopes, func(s string) bool {
		rs, err := ParseScope(s)
		return err == nil && rs != nil && !ScopeAllowed(actor.access.scopes, s)
	})
}

// exportSearchParams are the kick-off parameters the FHIR layer reads into
// an ExportRequest; a type filter may not use those of searchControls.
var searchControls = []string{"_source", "_count", "_sort", "_summary", "_total", "_elements", "_include", "_revinclude", "_cursor", "_format", "_pretty", "_type"}

// checkExportRequest checks the request against the level's rules and the
// actor's reach, and fills in the types it exports.
func (s *Service) checkExportRequest(ctx context.Context, actor *Actor, req *ExportRequest) error {
	if req.Since != nil && req.Until != nil && !req.Since.Before(*req.Until) {
		return FieldErrorf("_until", "is not after _since")
	}
	if req.Since != nil && req.Since.After(s.Now()) {
		return FieldErrorf("_since", "is in the future")
	}
	switch req.Level {
	case ExportSystem:
		if !actor.IsSuperuser() && !actor.hasSystemScope() {
			return Errorf(CodeForbidden, "a system-level export is for superusers and for backend clients (system/ scopes); export a study (Group/{id}/$export) or your patients (Patient/$export)")
		}
	case ExportPatient:
		for _, id := range req.Patients {
			if _, err := s.readablePatient(ctx, actor, id); err != nil || !actor.reachesPatient(InteractionSearch, "Patient", id) {
				return FieldErrorf("patient", "Patient/%d is not a patient you may export", id)
			}
		}
	case ExportGroup:
		if _, err := s.readableStudy(ctx, actor, req.GroupID); err != nil {
			if IsCode(err, CodeNotFound) || IsCode(err, CodeForbidden) {
				return Errorf(CodeNotFound, "Group/%d does not exist", req.GroupID)
			}
			return err
		}
	default:
		return Errorf(CodeInvalid, "unknown export level %q", req.Level)
	}
	levelTypes := exportLevelTypes[req.Level]
	if req.Format == ExportOMH {
		levelTypes = []string{"Observation"}
	}
	asked := len(req.Types) > 0
	req.TypesAsked = asked
	if !asked {
		req.Types = levelTypes
	}
	var types []string
	for _, t := range req.Types {
		native := slices.Contains(levelTypes, t) || (req.Level == ExportSystem && t == "AuditEvent" && req.Format != ExportOMH)
		if t == "AuditEvent" && native && !actor.IsSuperuser() {
			return Errorf(CodeForbidden, "the audit trail is exported by superusers only")
		}
		if !native {
			if req.Format == ExportOMH {
				return FieldErrorf("_type", "%s: the %s format holds native Observations only", t, ExportOMH)
			}
			switch ok, patient := s.exportSearches.ImportedType(t); {
			case !ok:
				return FieldErrorf("_type", "%s is not a resource type this server exports", t)
			case req.Level != ExportSystem && !patient:
				return FieldErrorf("_type", "%s is not in the Patient compartment, which a %s export holds", t, req.Level)
			}
		}
		if err := actor.AllowFHIR(InteractionSearch, t); err != nil {
			if asked {
				return err
			}
			continue // the token does not reach the type: left out
		}
		if !slices.Contains(types, t) {
			types = append(types, t)
		}
	}
	if len(types) == 0 {
		return Errorf(CodeForbidden, "this token's scopes reach none of the types this export holds")
	}
	req.Types = types
	for _, f := range req.TypeFilters {
		t, query, _ := strings.Cut(f, "?")
		if !slices.Contains(types, t) && !(!asked && s.importedExportable(req, t)) {
			return FieldErrorf("_typeFilter", "%q filters %s, which this export does not hold", f, t)
		}
		values, err := url.ParseQuery(query)
		if err != nil {
			return FieldErrorf("_typeFilter", "%q is not Type?search-parameters", f)
		}
		for k := range values {
			if name, _, _ := strings.Cut(k, ":"); slices.Contains(searchControls, name) {
				return FieldErrorf("_typeFilter", "%q: %s shapes a search's answer, not which resources match", f, k)
			}
		}
		q, err := s.exportSearches.ExportSearch(t, s.partQuery(t, !slices.Contains(exportNativeTypes, t)), []url.Values{values})
		if err != nil {
			return FieldErrorf("_typeFilter", "%q: %s", f, ErrorMessage(err))
		}
		if len(q.Joins()) > 0 {
			return FieldErrorf("_typeFilter", "%q names patients, organizations or studies: the export's level says whose data it holds", f)
		}
	}
	return nil
}

// importedExportable reports whether a default export of the level holds
// imported resources of type t.
func (s *Service) importedExportable(req *ExportRequest, t string) bool {
	if req.Format == ExportOMH {
		return false
	}
	ok, patient := s.exportSearches.ImportedType(t)
	return ok && (patient || req.Level == ExportSystem)
}

// exportNativeTypes are the types of the native store and projections.
var exportNativeTypes = []string{"Patient", "Practitioner", "Organization", "Group", "Device", "Observation", "AuditEvent"}

// exportLevelTypes are the native types each level exports (besides the
// imported resources it reaches); AuditEvent only when asked by name.
var exportLevelTypes = map[ExportLevel][]string{
	ExportSystem:  {"Patient", "Practitioner", "Organization", "Group", "Device", "Observation"},
	ExportPatient: {"Patient", "Observation"},
	ExportGroup:   {"Patient", "Group", "Organization", "Device", "Observation"},
}

// hasSystemScope reports whether the actor's token carries a system/
// scope: a backend client's.
func (a *Actor) hasSystemScope() bool {
	return a.access != nil && slices.ContainsFunc(a.access.resources, func(rs ResourceScope) bool { return rs.System })
}

// ExportJobFor returns the job to its owner; anyone else, and a deleted
// job, CodeNotFound (as for a job that never existed).
func (s *Service) ExportJobFor(ctx context.Context, actor *Actor, id string) (*ExportJob, error) {
	j, err := s.store.ExportJob(ctx, id)
	if IsCode(err, CodeNotFound) || err == nil && (!j.Owner.owns(actor) || j.State == ExportDeleted) {
		return nil, Errorf(CodeNotFound, "export %s does not exist (deleted, expired, or never started)", id)
	}
	return j, err
}

// DeleteExport cancels a waiting or running job, or removes a finished
// one, for its owner: it is gone to them at once; its files go once no
// download reads them.
func (s *Service) DeleteExport(ctx context.Context, actor *Actor, id string) error {
	for {
		j, err := s.ExportJobFor(ctx, actor, id)
		if err != nil {
			return err
		}
		j.State = ExportDeleted
		err = s.store.UpdateExportJob(ctx, j)
		if !IsCode(err, CodeVersionMismatch) {
			if err == nil {
				_ = s.auditExportJob(ctx, actor, AuditDelete, AuditKindExport, j, "", nil) // done: a refusal changes nothing
			}
			return err
		}
	}
}

// ExportDownload is a file of an export being read: its gzip-compressed
// bytes, what it holds, and in which format. Close it when done: until
// then the file is not removed.
type ExportDownload struct {
	io.ReadCloser
	File   ExportOutput
	Format ExportFormat
	end    func()
	done   bool
}

// Close implements io.Closer; it ends the download's record.
func (d *ExportDownload) Close() error {
	err := d.ReadCloser.Close()
	if !d.done {
		d.done = true
		d.end()
	}
	return err
}

// OpenExportFile opens a file of a completed job for its owner, and
// records the download in the audit trail.
func (s *Service) OpenExportFile(ctx context.Context, actor *Actor, jobID, name string) (*ExportDownload, error) {
	j, err := s.ExportJobFor(ctx, actor, jobID)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(j.Outputs, func(o ExportOutput) bool { return o.Name == name })
	if j.State != ExportCompleted || i < 0 {
		return nil, Errorf(CodeNotFound, "export %s has no file %q", jobID, name)
	}
	download, err := s.store.BeginExportDownload(ctx, jobID)
	if err != nil {
		return nil, err
	}
	end := func() { _ = s.store.EndExportDownload(context.WithoutCancel(ctx), jobID, download) }
	f, err := s.exportFiles.OpenExportFile(ctx, jobID, name)
	if err != nil {
		end()
		return nil, err
	}
	// The file is patients' data: no download goes out unaudited.
	if err := s.auditExportJob(ctx, actor, AuditRead, AuditKindExportDownload, j, name, j.Outputs[i].Patients); err != nil {
		_ = f.Close()
		end()
		return nil, err
	}
	return &ExportDownload{ReadCloser: f, File: j.Outputs[i], Format: j.Request.Format, end: end}, nil
}

// auditExportJob records an event of a job (its completion, a download,
// its deletion): the job and file in its query, the types it holds, and
// the patients whose data it is, in as many events as it takes to name
// each (MaxAuditEntities a event). It returns the trail's refusal of an
// event (nil: each kept).
func (s *Service) auditExportJob(ctx context.Context, actor *Actor, action AuditAction, kind AuditKind, j *ExportJob, file string, patients []int64) error {
	if actor == nil || actor.isSystem() {
		return nil
	}
	query := url.Values{"job": {j.ID}}
	types := slices.Clone(j.Request.Types)
	if file != "" {
		query.Set("file", file)
		if i := slices.IndexFunc(j.Outputs, func(o ExportOutput) bool { return o.Name == file }); i >= 0 {
			types = []string{j.Outputs[i].Type}
		}
	}
	for first := true; first || len(patients) > 0; first = false {
		e := s.auditOf(ctx, actor, action, kind, nil)
		e.EntityTypes, e.Query = types, query.Encode()
		if j.Request.Level == ExportGroup {
			e.Entities = []string{ref("Group", j.Request.GroupID)}
		}
		n := min(len(patients), MaxAuditEntities)
		e.PatientIDs, patients = patients[:n], patients[n:]
		if err := s.auditor.Record(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

// auditExport records a kick-off: what was asked (the request's URL, its
// query kept) and, for a study, which. Its outcome is the refusal, if any.
func (s *Service) auditExport(ctx context.Context, actor *Actor, kind AuditKind, req ExportRequest, j *ExportJob, err error) {
	if actor == nil || actor.isSystem() {
		return
	}
	e := s.auditOf(ctx, actor, AuditExecute, kind, err)
	e.EntityTypes = slices.Clone(req.Types)
	if req.Level == ExportGroup {
		e.Entities = []string{ref("Group", req.GroupID)}
	}
	if _, query, ok := strings.Cut(req.URL, "?"); ok {
		e.Query = query
	}
	e.PatientIDs = boundedIDs(req.Patients)
	if err := s.auditor.Record(ctx, e); err != nil {
		s.log.Warn("the audit trail refused an export's event", "kind", kind, "error", err)
	}
}

// ExportProgress is a short account of a job's progress, for X-Progress.
func (j *ExportJob) ExportProgress() string {
	switch {
	case j.State == ExportQueued:
		return "queued"
	case len(j.Parts) == 0:
		return "planning"
	}
	var done int64
	for _, o := range j.Outputs {
		done += o.Count
	}
	part := min(j.PartsDone, len(j.Parts)-1)
	return fmt.Sprintf("part %d of %d (%s), %s resources written", j.PartsDone+1, len(j.Parts), j.Parts[part].Type, strconv.FormatInt(done+j.Count, 10))
}
