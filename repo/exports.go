package repo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"exchange/domain"
)

// Bulk export jobs (domain.ExportStore) and the streams their parts read
// (domain.ExportStreams).
//
// A job is one document of export_jobs. Every change the domain makes is
// a compare-and-set on its version; the claim that runs it and the hand
// back of a dead instance's job are too. A running job names the instance
// lease of the process running it (the leases of write intents,
// intents.go): when that lease lapses the job is handed back, to be
// resumed by any instance. A download in progress is an entry of the
// job's downloads, naming the lease of the process serving it: the job's
// files are removed only when no live download is left.

type exportJobDoc struct {
	ID              string            `bson:"_id"`
	State           string            `bson:"state"`
	Owner           exportOwnerDoc    `bson:"owner"`
	Request         exportRequestDoc  `bson:"request"`
	TransactionTime time.Time         `bson:"transactionTime"`
	CreatedAt       time.Time         `bson:"createdAt"`
	StartedAt       time.Time         `bson:"startedAt,omitempty"`
	FinishedAt      time.Time         `bson:"finishedAt,omitempty"`
	ExpiresAt       time.Time         `bson:"expiresAt,omitempty"`
	Parts           []exportPartDoc   `bson:"parts"`
	Planned         bool              `bson:"planned"`
	PartsDone       int               `bson:"partsDone"`
	Outputs         []exportOutputDoc `bson:"outputs"`
	Count           int64             `bson:"count"`
	Failure         string            `bson:"failure,omitempty"`
	FailureCode     string            `bson:"failureCode,omitempty"`
	Attempts        int               `bson:"attempts"`
	Version         int64             `bson:"version"`
	// Instance is the lease of the process running the job; "" when none.
	Instance  string              `bson:"instance"`
	Downloads []exportDownloadDoc `bson:"downloads"`
}

type exportOwnerDoc struct {
	UserID       int64    `bson:"userId"`
	Organization int64    `bson:"organizationId"`
	ClientID     string   `bson:"clientId"`
	Scopes       []string `bson:"scopes"`
	Patient      int64    `bson:"patient"`
}

type exportRequestDoc struct {
	Level       string     `bson:"level"`
	GroupID     int64      `bson:"groupId,omitempty"`
	Patients    []int64    `bson:"patients,omitempty"`
	Types       []string   `bson:"types"`
	TypesAsked  bool       `bson:"typesAsked"`
	Since       *time.Time `bson:"since,omitempty"`
	Until       *time.Time `bson:"until,omitempty"`
	TypeFilters []string   `bson:"typeFilters,omitempty"`
	Elements    []string   `bson:"elements,omitempty"`
	Format      string     `bson:"format"`
	URL         string     `bson:"url"`
	Ignored     []string   `bson:"ignored,omitempty"`
}

type exportPartDoc struct {
	Type     string   `bson:"type"`
	Imported bool     `bson:"imported"`
	Query    string   `bson:"query"`
	Filters  []string `bson:"filters,omitempty"`
	Patients []int64  `bson:"patients,omitempty"`
	Narrowed bool     `bson:"narrowed"` // Patients is set (an empty list narrows to nobody)
}

type exportOutputDoc struct {
	Type     string  `bson:"type"`
	Name     string  `bson:"name"`
	Count    int64   `bson:"count"`
	Bytes    int64   `bson:"bytes"`
	Patients []int64 `bson:"patients"`
}

type exportDownloadDoc struct {
	ID       string    `bson:"id"`
	Instance string    `bson:"instance"`
	At       time.Time `bson:"at"`
}

func toExportJobDoc(j *domain.ExportJob) exportJobDoc {
	r := j.Request
	x := exportJobDoc{ID: j.ID, State: string(j.State), TransactionTime: j.TransactionTime, CreatedAt: j.CreatedAt, StartedAt: j.StartedAt,
		FinishedAt: j.FinishedAt, ExpiresAt: j.ExpiresAt, Planned: j.Parts != nil, PartsDone: j.PartsDone, Count: j.Count,
		Failure: j.Failure, FailureCode: string(j.FailureCode), Attempts: j.Attempts, Version: j.Version,
		Owner: exportOwnerDoc{UserID: j.Owner.UserID, Organization: j.Owner.Organization, ClientID: j.Owner.ClientID,
			Scopes: nonNil(j.Owner.Scopes), Patient: j.Owner.Patient},
		Request: exportRequestDoc{Level: string(r.Level), GroupID: r.GroupID, Patients: r.Patients, Types: nonNil(r.Types), TypesAsked: r.TypesAsked,
			Since: r.Since, Until: r.Until, TypeFilters: r.TypeFilters, Elements: r.Elements, Format: string(r.Format), URL: r.URL, Ignored: r.Ignored},
		Parts: []exportPartDoc{}, Outputs: []exportOutputDoc{}, Downloads: []exportDownloadDoc{}}
	for _, p := range j.Parts {
		x.Parts = append(x.Parts, exportPartDoc{Type: p.Type, Imported: p.Imported, Query: p.Query, Filters: p.Filters,
			Patients: p.Patients, Narrowed: p.Patients != nil})
	}
	for _, o := range j.Outputs {
		x.Outputs = append(x.Outputs, exportOutputDoc{Type: o.Type, Name: o.Name, Count: o.Count, Bytes: o.Bytes, Patients: nonNilIDs(o.Patients)})
	}
	return x
}

func (x *exportJobDoc) job() *domain.ExportJob {
	r := x.Request
	j := &domain.ExportJob{ID: x.ID, State: domain.ExportState(x.State), TransactionTime: x.TransactionTime.UTC(), CreatedAt: x.CreatedAt.UTC(),
		StartedAt: utcOrZero(x.StartedAt), FinishedAt: utcOrZero(x.FinishedAt), ExpiresAt: utcOrZero(x.ExpiresAt),
		PartsDone: x.PartsDone, Count: x.Count, Failure: x.Failure, FailureCode: domain.Code(x.FailureCode), Attempts: x.Attempts, Version: x.Version,
		Owner: domain.ExportOwner{UserID: x.Owner.UserID, Organization: x.Owner.Organization, ClientID: x.Owner.ClientID,
			Scopes: x.Owner.Scopes, Patient: x.Owner.Patient},
		Request: domain.ExportRequest{Level: domain.ExportLevel(r.Level), GroupID: r.GroupID, Patients: r.Patients, Types: r.Types,
			TypesAsked: r.TypesAsked, Since: utcPtr(r.Since), Until: utcPtr(r.Until), TypeFilters: r.TypeFilters, Elements: r.Elements,
			Format: domain.ExportFormat(r.Format), URL: r.URL, Ignored: r.Ignored}}
	if len(j.Owner.Scopes) == 0 {
		j.Owner.Scopes = nil
	}
	if x.Planned {
		j.Parts = []domain.ExportPart{}
	}
	for _, p := range x.Parts {
		part := domain.ExportPart{Type: p.Type, Imported: p.Imported, Query: p.Query, Filters: p.Filters, Patients: p.Patients}
		if p.Narrowed && part.Patients == nil {
			part.Patients = []int64{}
		}
		j.Parts = append(j.Parts, part)
	}
	for _, o := range x.Outputs {
		j.Outputs = append(j.Outputs, domain.ExportOutput{Type: o.Type, Name: o.Name, Count: o.Count, Bytes: o.Bytes, Patients: o.Patients})
	}
	return j
}

func utcOrZero(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// unfinished are the states of jobs that hold a place in the queue.
var unfinished = bson.A{string(domain.ExportQueued), string(domain.ExportRunning)}

// CreateExportJob implements domain.ExportStore.
func (d *DB) CreateExportJob(ctx context.Context, j *domain.ExportJob) error {
	j.Version = 1
	return d.insertUnique(ctx, colExportJobs, toExportJobDoc(j), "export "+j.ID+" exists")
}

// ExportJob implements domain.ExportStore.
func (d *DB) ExportJob(ctx context.Context, id string) (*domain.ExportJob, error) {
	var x exportJobDoc
	if err := d.findOne(ctx, colExportJobs, bson.M{"_id": id}, &x, "export "+id+" does not exist"); err != nil {
		return nil, err
	}
	return x.job(), nil
}

// CountExportJobs implements domain.ExportStore.
func (d *DB) CountExportJobs(ctx context.Context, owner *domain.ExportOwner) (int64, error) {
	filter := bson.D{{Key: "state", Value: bson.M{"$in": unfinished}}}
	if owner != nil {
		filter = append(filter, bson.E{Key: "owner.userId", Value: owner.UserID}, bson.E{Key: "owner.organizationId", Value: owner.Organization},
			bson.E{Key: "owner.clientId", Value: owner.ClientID})
	}
	return d.c(colExportJobs).CountDocuments(ctx, filter)
}

// UpdateExportJob implements domain.ExportStore: the domain's fields are
// set if the version is j's, which moves on; the instance running it and
// its downloads are left as they are.
func (d *DB) UpdateExportJob(ctx context.Context, j *domain.ExportJob) error {
	stripe := d.recordWrites.ofString(j.ID)
	stripe.Lock()
	defer stripe.Unlock()
	x := toExportJobDoc(j)
	x.Version = j.Version + 1
	set := bson.M{"state": x.State, "parts": x.Parts, "planned": x.Planned, "partsDone": x.PartsDone, "outputs": x.Outputs,
		"count": x.Count, "failure": x.Failure, "failureCode": x.FailureCode, "version": x.Version}
	unset := bson.M{}
	for name, t := range map[string]time.Time{"startedAt": x.StartedAt, "finishedAt": x.FinishedAt, "expiresAt": x.ExpiresAt} {
		if t.IsZero() {
			unset[name] = ""
		} else {
			set[name] = t
		}
	}
	update := bson.M{"$set": set}
	if len(unset) > 0 {
		update["$unset"] = unset
	}
	res, err := d.c(colExportJobs).UpdateOne(ctx, bson.M{"_id": j.ID, "version": j.Version}, update)
	if err != nil {
		return err
	}
	if res.MatchedCount == 0 {
		if ok, err := d.exists(ctx, colExportJobs, j.ID); err != nil {
			return err
		} else if !ok {
			return domain.Errorf(domain.CodeNotFound, "export %s does not exist", j.ID)
		}
		return domain.Errorf(domain.CodeVersionMismatch, "export %s changed meanwhile", j.ID)
	}
	j.Version = x.Version
	return nil
}

// ClaimExportJob implements domain.ExportStore: a compare-and-set of a
// queued job to running under this process's lease, which it takes
// first; the oldest job that another instance does not take first.
func (d *DB) ClaimExportJob(ctx context.Context, createdBefore time.Time) (*domain.ExportJob, error) {
	var queued []exportJobDoc
	if err := d.findAll(ctx, colExportJobs, bson.M{"state": domain.ExportQueued, "createdAt": bson.M{"$lte": createdBefore.UTC()}}, &queued,
		options.Find().SetSort(bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}}).SetLimit(10)); err != nil {
		return nil, err
	}
	if len(queued) == 0 {
		return nil, domain.Errorf(domain.CodeNotFound, "no export waits")
	}
	if err := d.hold(ctx); err != nil {
		return nil, err
	}
	for i := range queued {
		x := &queued[i]
		moved, err := d.moveExportJob(ctx, x, bson.M{"state": domain.ExportRunning, "instance": d.lease.id, "attempts": x.Attempts + 1})
		if err != nil {
			return nil, err
		}
		if moved {
			x.State, x.Instance, x.Attempts = string(domain.ExportRunning), d.lease.id, x.Attempts+1
			return x.job(), nil
		}
	}
	return nil, domain.Errorf(domain.CodeNotFound, "no export waits")
}

// moveExportJob sets fields of the job as read (x) if it is still at x's
// version, moving the version on; whether it did.
func (d *DB) moveExportJob(ctx context.Context, x *exportJobDoc, set bson.M) (bool, error) {
	stripe := d.recordWrites.ofString(x.ID)
	stripe.Lock()
	defer stripe.Unlock()
	set["version"] = x.Version + 1
	res, err := d.c(colExportJobs).UpdateOne(ctx, bson.M{"_id": x.ID, "version": x.Version, "state": x.State}, bson.M{"$set": set})
	if err != nil || res.MatchedCount == 0 {
		return false, err
	}
	x.Version++
	return true, nil
}

// RequeueExportJobs implements domain.ExportStore. A job handed back by
// its own process closing gets its attempt back; one whose process died
// does not (so a job that kills its process fails after
// domain.MaxExportAttempts runs).
func (d *DB) RequeueExportJobs(ctx context.Context, mine bool) (int, error) {
	var running []exportJobDoc
	if err := d.findAll(ctx, colExportJobs, bson.M{"state": domain.ExportRunning}, &running); err != nil {
		return 0, err
	}
	now, n := d.now(), 0
	for i := range running {
		x := &running[i]
		attempts := x.Attempts
		switch {
		case x.Instance == d.lease.id:
			if !mine {
				continue
			}
			attempts--
		case mine:
			continue
		default:
			lapsed, err := d.leaseLapsed(ctx, x.Instance, now)
			if err != nil {
				return n, err
			}
			if !lapsed {
				continue
			}
		}
		moved, err := d.moveExportJob(ctx, x, bson.M{"state": domain.ExportQueued, "instance": "", "attempts": attempts})
		if err != nil {
			return n, err
		}
		if moved {
			n++
		}
	}
	return n, nil
}

// ExportJobsToRemove implements domain.ExportStore: finished jobs past
// their expiry are first moved to deleted, after which no download of
// them begins; then every deleted job whose downloads are all gone (ended,
// or of processes that died) is returned.
func (d *DB) ExportJobsToRemove(ctx context.Context, now time.Time) ([]domain.ExportJob, error) {
	var expired []exportJobDoc
	if err := d.findAll(ctx, colExportJobs, bson.M{"state": bson.M{"$in": bson.A{string(domain.ExportCompleted), string(domain.ExportFailed)}},
		"expiresAt": bson.M{"$lte": now.UTC()}}, &expired); err != nil {
		return nil, err
	}
	for i := range expired {
		if _, err := d.moveExportJob(ctx, &expired[i], bson.M{"state": domain.ExportDeleted}); err != nil {
			return nil, err
		}
	}
	var deleted []exportJobDoc
	if err := d.findAll(ctx, colExportJobs, bson.M{"state": domain.ExportDeleted}, &deleted); err != nil {
		return nil, err
	}
	var out []domain.ExportJob
	for i := range deleted {
		x := &deleted[i]
		if x.Instance != "" && x.FinishedAt.IsZero() {
			// Deleted while it ran: its process stops at its next progress
			// write and releases it (ReleaseExportJob), or dies. A job
			// that finished keeps the instance that ran it, which holds
			// nothing any more.
			if lapsed, err := d.leaseLapsed(ctx, x.Instance, now); err != nil || !lapsed {
				continue
			}
		}
		live := false
		for _, dl := range x.Downloads {
			lapsed, err := d.leaseLapsed(ctx, dl.Instance, now)
			if err != nil {
				return nil, err
			}
			if dl.Instance == d.lease.id || !lapsed {
				live = true
				break
			}
		}
		if !live {
			out = append(out, *x.job())
		}
	}
	return out, nil
}

// ReleaseExportJob implements domain.ExportStore.
func (d *DB) ReleaseExportJob(ctx context.Context, id string) error {
	stripe := d.recordWrites.ofString(id)
	stripe.Lock()
	defer stripe.Unlock()
	_, err := d.c(colExportJobs).UpdateOne(ctx, bson.M{"_id": id, "instance": d.lease.id}, bson.M{"$set": bson.M{"instance": ""}})
	return err
}

// RemoveExportJob implements domain.ExportStore.
func (d *DB) RemoveExportJob(ctx context.Context, id string) error {
	_, err := d.c(colExportJobs).DeleteOne(ctx, bson.M{"_id": id, "state": domain.ExportDeleted})
	return err
}

// BeginExportDownload implements domain.ExportStore.
func (d *DB) BeginExportDownload(ctx context.Context, jobID string) (string, error) {
	if err := d.hold(ctx); err != nil {
		return "", err
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	dl := exportDownloadDoc{ID: hex.EncodeToString(b), Instance: d.lease.id, At: d.nowMillis()}
	stripe := d.recordWrites.ofString(jobID)
	stripe.Lock()
	defer stripe.Unlock()
	res, err := d.c(colExportJobs).UpdateOne(ctx, bson.M{"_id": jobID, "state": domain.ExportCompleted, "expiresAt": bson.M{"$gt": d.now().UTC()}},
		bson.M{"$push": bson.M{"downloads": dl}})
	if err != nil {
		return "", err
	}
	if res.MatchedCount == 0 {
		return "", domain.Errorf(domain.CodeNotFound, "export %s does not exist (deleted, expired, or never started)", jobID)
	}
	return dl.ID, nil
}

// EndExportDownload implements domain.ExportStore: the download's entry
// is pulled as it is stored, whole (FerretDB's $pull matches values, not
// conditions).
func (d *DB) EndExportDownload(ctx context.Context, jobID, downloadID string) error {
	stripe := d.recordWrites.ofString(jobID)
	stripe.Lock()
	defer stripe.Unlock()
	var x exportJobDoc
	err := d.findOne(ctx, colExportJobs, bson.M{"_id": jobID}, &x, "export "+jobID+" does not exist")
	if domain.IsCode(err, domain.CodeNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, dl := range x.Downloads {
		if dl.ID == downloadID {
			dl.At = dl.At.UTC()
			_, err = d.c(colExportJobs).UpdateOne(ctx, bson.M{"_id": jobID}, bson.M{"$pull": bson.M{"downloads": dl}})
			return err
		}
	}
	return nil
}

// streamBatch is how many records a stream hands over at once: enough to
// spread the callback's cost, few enough that a batch of observations is
// some hundred KiB.
const streamBatch = 256

// runStream runs an export's plan (its pipeline streams: no sort, no
// limit) and hands its records to each in batches, decoded by a reader
// made for each batch.
func runStream[T any](ctx context.Context, d *DB, plan *domain.SearchPlan, reader func() func(bson.Raw) (T, error), each func([]T) error) error {
	if plan.Pipeline == nil {
		return nil
	}
	cur, err := d.c(plan.Collection).Aggregate(ctx, plan.Pipeline, options.Aggregate().SetBatchSize(streamBatch))
	if err != nil {
		return err
	}
	defer cur.Close(context.WithoutCancel(ctx))
	batch := make([]T, 0, streamBatch)
	decode := reader()
	for cur.Next(ctx) {
		item, err := decode(cur.Current)
		if err != nil {
			return err
		}
		if batch = append(batch, item); len(batch) == streamBatch {
			if err := each(batch); err != nil {
				return err
			}
			batch, decode = batch[:0], reader()
			clear(batch[:cap(batch)])
		}
	}
	if err := cur.Err(); err != nil {
		return err
	}
	if len(batch) > 0 {
		return each(batch)
	}
	return nil
}

// unmarshalled decodes documents into D and converts them.
func unmarshalled[D, T any](conv func(D) T) func() func(bson.Raw) (T, error) {
	return func() func(bson.Raw) (T, error) {
		return func(raw bson.Raw) (T, error) {
			var x D
			err := bson.Unmarshal(slices.Clone(raw), &x)
			return conv(x), err
		}
	}
}

// StreamObservations implements domain.ExportStreams.
func (d *DB) StreamObservations(ctx context.Context, plan *domain.SearchPlan, each func([]domain.Observation) error) error {
	return runStream(ctx, d, plan, func() func(bson.Raw) (domain.Observation, error) { return newObservationPage(streamBatch).read }, each)
}

// StreamPatients implements domain.ExportStreams.
func (d *DB) StreamPatients(ctx context.Context, plan *domain.SearchPlan, each func([]domain.Patient) error) error {
	return runStream(ctx, d, plan, unmarshalled(patientDoc.patient), each)
}

// StreamUsers implements domain.ExportStreams.
func (d *DB) StreamUsers(ctx context.Context, plan *domain.SearchPlan, each func([]domain.User) error) error {
	return runStream(ctx, d, plan, unmarshalled(func(x userDoc) domain.User { return *x.user() }), each)
}

// StreamOrganizations implements domain.ExportStreams.
func (d *DB) StreamOrganizations(ctx context.Context, plan *domain.SearchPlan, each func([]domain.Organization) error) error {
	return runStream(ctx, d, plan, unmarshalled(organizationDoc.organization), each)
}

// StreamStudies implements domain.ExportStreams.
func (d *DB) StreamStudies(ctx context.Context, plan *domain.SearchPlan, each func([]domain.Study) error) error {
	return runStream(ctx, d, plan, unmarshalled(studyDoc.study), each)
}

// StreamDataSources implements domain.ExportStreams.
func (d *DB) StreamDataSources(ctx context.Context, plan *domain.SearchPlan, each func([]domain.DataSource) error) error {
	return runStream(ctx, d, plan, unmarshalled(dataSourceDoc.dataSource), each)
}

// StreamResources implements domain.ExportStreams.
func (d *DB) StreamResources(ctx context.Context, plan *domain.SearchPlan, each func([]domain.Resource) error) error {
	return runStream(ctx, d, plan, unmarshalled(resourceDoc.resource), each)
}

// StreamAuditEvents implements domain.ExportStreams.
func (d *DB) StreamAuditEvents(ctx context.Context, plan *domain.SearchPlan, each func([]domain.AuditEvent) error) error {
	return runStream(ctx, d, plan, unmarshalled(auditDoc.event), each)
}

// ImportedResourceTypes implements domain.ExportStreams: a distinct of the
// type over the sources' resources (the source index narrows it).
func (d *DB) ImportedResourceTypes(ctx context.Context, sourceIDs []int64) ([]string, error) {
	filter := bson.D{}
	if sourceIDs != nil {
		filter = bson.D{{Key: "sourceId", Value: bson.M{"$in": sourceIDs}}}
	}
	var types []string
	if err := d.c(colResources).Distinct(ctx, "resourceType", filter).Decode(&types); err != nil {
		return nil, fmt.Errorf("imported resource types: %w", err)
	}
	slices.Sort(types)
	return types, nil
}
