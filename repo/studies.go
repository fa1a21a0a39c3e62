package repo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"exchange/domain"
)

// studyDoc is a document of the studies collection.
type studyDoc struct {
	ID             int64     `bson:"_id"`
	OrganizationID int64     `bson:"organizationId"`
	Name           string    `bson:"name"`
	Description    string    `bson:"description"`
	IconURL        string    `bson:"iconUrl"`
	LastUpdated    time.Time `bson:"lastUpdated"`
}

func (x studyDoc) study() domain.Study {
	return domain.Study{ID: x.ID, OrganizationID: x.OrganizationID, Name: x.Name, Description: x.Description, IconURL: x.IconURL, LastUpdated: x.LastUpdated.UTC()}
}

func toStudyDoc(s *domain.Study) studyDoc {
	return studyDoc{s.ID, s.OrganizationID, s.Name, s.Description, s.IconURL, s.LastUpdated}
}

// scopeCodeDoc is a document of the scope_codes collection.
type scopeCodeDoc struct {
	ID     int64  `bson:"_id"`
	System string `bson:"system"`
	Code   string `bson:"code"`
	Text   string `bson:"text"`
}

func (x scopeCodeDoc) scopeCode() domain.ScopeCode {
	return domain.ScopeCode{ID: x.ID, System: x.System, Code: x.Code, Text: x.Text}
}

// scopeRequestDoc is a document of study_scope_requests.
type scopeRequestDoc struct {
	StudyID     int64 `bson:"studyId"`
	ScopeCodeID int64 `bson:"scopeCodeId"`
}

// studyDataSourceDoc is a document of study_data_sources.
type studyDataSourceDoc struct {
	StudyID      int64 `bson:"studyId"`
	DataSourceID int64 `bson:"dataSourceId"`
}

// enrollmentDoc is a document of the enrollments collection.
type enrollmentDoc struct {
	StudyID     int64     `bson:"studyId"`
	PatientID   int64     `bson:"patientId"`
	LastUpdated time.Time `bson:"lastUpdated"`
}

// consentDoc is a document of the consents collection: one patient's answer
// for one scope code requested by one study.
type consentDoc struct {
	PatientID     int64     `bson:"patientId"`
	StudyID       int64     `bson:"studyId"`
	ScopeCodeID   int64     `bson:"scopeCodeId"`
	Consented     bool      `bson:"consented"`
	ConsentedTime time.Time `bson:"consentedTime"`
	LastUpdated   time.Time `bson:"lastUpdated"`
}

func (x consentDoc) consent() domain.Consent {
	return domain.Consent{PatientID: x.PatientID, StudyID: x.StudyID, ScopeCodeID: x.ScopeCodeID, Consented: x.Consented,
		ConsentedTime: x.ConsentedTime.UTC(), LastUpdated: x.LastUpdated.UTC()}
}

// CreateStudy implements domain.StudyStore.
func (d *DB) CreateStudy(ctx context.Context, s *domain.Study) error {
	id, err := d.nextID(ctx, colStudies)
	if err != nil {
		return err
	}
	s.ID, s.LastUpdated = id, d.nowMillis()
	_, err = d.c(colStudies).InsertOne(ctx, toStudyDoc(s))
	return err
}

// StudyByID implements domain.StudyStore.
func (d *DB) StudyByID(ctx context.Context, id int64) (*domain.Study, error) {
	var x studyDoc
	if err := d.findOne(ctx, colStudies, bson.M{"_id": id}, &x, fmt.Sprintf("study %d does not exist", id)); err != nil {
		return nil, err
	}
	s := x.study()
	return &s, nil
}

// StudyByName implements domain.StudyStore.
func (d *DB) StudyByName(ctx context.Context, organizationID int64, name string) (*domain.Study, error) {
	var x studyDoc
	err := d.findOne(ctx, colStudies, bson.M{"organizationId": organizationID, "name": name}, &x,
		fmt.Sprintf("organization %d has no study named %q", organizationID, name), options.FindOne().SetSort(byID))
	if err != nil {
		return nil, err
	}
	s := x.study()
	return &s, nil
}

// ListStudies implements domain.StudyStore.
func (d *DB) ListStudies(ctx context.Context, q domain.StudyQuery, p domain.Page) (domain.List[domain.Study], error) {
	filter := withIn(withIn(nil, "_id", q.IDs), "organizationId", q.OrganizationIDs)
	var docs []studyDoc
	total, err := d.listPage(ctx, colStudies, filter, byID, p, &docs)
	return domain.List[domain.Study]{Items: convert(docs, studyDoc.study), Total: total}, err
}

// UpdateStudy implements domain.StudyStore: a compare-and-set on the
// version old was read at (replaceVersion).
func (d *DB) UpdateStudy(ctx context.Context, old, s *domain.Study) error {
	s.LastUpdated = d.nextVersion(old.LastUpdated)
	return d.replaceRecord(ctx, colStudies, s.ID, old.LastUpdated, toStudyDoc(s), "study")
}

// DeleteStudy implements domain.StudyStore.
func (d *DB) DeleteStudy(ctx context.Context, id int64) error {
	return d.deleteOne(ctx, colStudies, bson.M{"_id": id}, "study %d does not exist", id)
}

// CreateScopeCode implements domain.StudyStore.
func (d *DB) CreateScopeCode(ctx context.Context, c *domain.ScopeCode) error {
	id, err := d.nextID(ctx, colScopeCodes)
	if err != nil {
		return err
	}
	c.ID = id
	return d.insertUnique(ctx, colScopeCodes, scopeCodeDoc{c.ID, c.System, c.Code, c.Text}, fmt.Sprintf("scope code %s|%s already exists", c.System, c.Code))
}

// ScopeCodeByID implements domain.StudyStore.
func (d *DB) ScopeCodeByID(ctx context.Context, id int64) (*domain.ScopeCode, error) {
	var x scopeCodeDoc
	if err := d.findOne(ctx, colScopeCodes, bson.M{"_id": id}, &x, fmt.Sprintf("scope code %d does not exist", id)); err != nil {
		return nil, err
	}
	c := x.scopeCode()
	return &c, nil
}

// ScopeCodeByCoding implements domain.StudyStore.
func (d *DB) ScopeCodeByCoding(ctx context.Context, system, code string) (*domain.ScopeCode, error) {
	var x scopeCodeDoc
	if err := d.findOne(ctx, colScopeCodes, bson.M{"system": system, "code": code}, &x, fmt.Sprintf("scope code %s|%s does not exist", system, code)); err != nil {
		return nil, err
	}
	c := x.scopeCode()
	return &c, nil
}

// ScopeCodesByIDs implements domain.StudyStore. The codes read once are
// answered from scopeCodeCache: every batch of observations asks for the
// codes its patient consented to, and on FerretDB a read costs as much
// CPU as several observations.
func (d *DB) ScopeCodesByIDs(ctx context.Context, ids []int64) ([]domain.ScopeCode, error) {
	out, missing := d.scopeCodes.lookup(ids)
	if len(missing) > 0 {
		var docs []scopeCodeDoc
		if err := d.findAll(ctx, colScopeCodes, withIn(nil, "_id", missing), &docs); err != nil {
			return nil, err
		}
		read := convert(docs, scopeCodeDoc.scopeCode)
		d.scopeCodes.add(read)
		out = append(out, read...)
	}
	slices.SortFunc(out, func(a, b domain.ScopeCode) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// scopeCodeCache keeps the scope codes read by id. A scope code is never
// changed or deleted once created (CreateScopeCode is its only write, and
// ids are never handed out twice), so the cached one is the stored one,
// in this process and any other on the same database; only codes found
// are kept, so it holds at most the stored ones. Drop, which lets ids
// start again, empties it.
type scopeCodeCache struct {
	mu   sync.RWMutex
	byID map[int64]domain.ScopeCode
}

// lookup returns the cached codes among ids (each once) and the ids not
// cached.
func (c *scopeCodeCache) lookup(ids []int64) (found []domain.ScopeCode, missing []int64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	found = make([]domain.ScopeCode, 0, len(ids)) // empty, not nil, as a read that finds none
	seen := make(map[int64]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		if sc, ok := c.byID[id]; ok {
			found = append(found, sc)
		} else {
			missing = append(missing, id)
		}
	}
	return found, missing
}

func (c *scopeCodeCache) add(codes []domain.ScopeCode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID == nil {
		c.byID = map[int64]domain.ScopeCode{}
	}
	for _, sc := range codes {
		c.byID[sc.ID] = sc
	}
}

// reset empties the cache.
func (c *scopeCodeCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byID = nil
}

// ListScopeCodes implements domain.StudyStore.
func (d *DB) ListScopeCodes(ctx context.Context, p domain.Page) (domain.List[domain.ScopeCode], error) {
	var docs []scopeCodeDoc
	total, err := d.listPage(ctx, colScopeCodes, nil, byID, p, &docs)
	return domain.List[domain.ScopeCode]{Items: convert(docs, scopeCodeDoc.scopeCode), Total: total}, err
}

// CreateScopeRequest implements domain.StudyStore.
func (d *DB) CreateScopeRequest(ctx context.Context, r domain.ScopeRequest) error {
	return d.insertUnique(ctx, colScopeRequests, scopeRequestDoc(r), fmt.Sprintf("study %d already requests scope code %d", r.StudyID, r.ScopeCodeID))
}

// ScopeRequests implements domain.StudyStore.
func (d *DB) ScopeRequests(ctx context.Context, studyIDs []int64) ([]domain.ScopeRequest, error) {
	var docs []scopeRequestDoc
	err := d.findAll(ctx, colScopeRequests, withIn(nil, "studyId", nonNilIDs(studyIDs)), &docs,
		options.Find().SetSort(bson.D{{Key: "studyId", Value: 1}, {Key: "scopeCodeId", Value: 1}}))
	return convert(docs, func(x scopeRequestDoc) domain.ScopeRequest { return domain.ScopeRequest(x) }), err
}

// DeleteScopeRequest implements domain.StudyStore.
func (d *DB) DeleteScopeRequest(ctx context.Context, r domain.ScopeRequest) error {
	return d.deleteOne(ctx, colScopeRequests, bson.M{"studyId": r.StudyID, "scopeCodeId": r.ScopeCodeID},
		"study %d does not request scope code %d", r.StudyID, r.ScopeCodeID)
}

// CreateStudyDataSource implements domain.StudyStore.
func (d *DB) CreateStudyDataSource(ctx context.Context, s domain.StudyDataSource) error {
	return d.insertUnique(ctx, colStudyDataSources, studyDataSourceDoc(s), fmt.Sprintf("study %d already has data source %d", s.StudyID, s.DataSourceID))
}

// StudyDataSources implements domain.StudyStore.
func (d *DB) StudyDataSources(ctx context.Context, q domain.StudyDataSourceQuery) ([]domain.StudyDataSource, error) {
	if q.StudyIDs == nil && q.DataSourceIDs == nil {
		return nil, errors.New("repo: StudyDataSources needs a query")
	}
	var docs []studyDataSourceDoc
	err := d.findAll(ctx, colStudyDataSources, withIn(withIn(nil, "studyId", q.StudyIDs), "dataSourceId", q.DataSourceIDs), &docs,
		options.Find().SetSort(bson.D{{Key: "studyId", Value: 1}, {Key: "dataSourceId", Value: 1}}))
	return convert(docs, func(x studyDataSourceDoc) domain.StudyDataSource { return domain.StudyDataSource(x) }), err
}

// DeleteStudyDataSource implements domain.StudyStore.
func (d *DB) DeleteStudyDataSource(ctx context.Context, s domain.StudyDataSource) error {
	return d.deleteOne(ctx, colStudyDataSources, bson.M{"studyId": s.StudyID, "dataSourceId": s.DataSourceID},
		"study %d has no data source %d", s.StudyID, s.DataSourceID)
}

// CreateEnrollments implements domain.StudyStore, under a write intent
// that a retry or the repair finishes; an enrollment that exists already
// is left as it is.
func (d *DB) CreateEnrollments(ctx context.Context, es []domain.Enrollment) error {
	now := d.nowMillis()
	in := &intentDoc{Kind: intentEnroll}
	for i := range es {
		es[i].LastUpdated = now
		in.Enrollments = append(in.Enrollments, enrollmentDoc{es[i].StudyID, es[i].PatientID, now})
		in.touch(es[i].PatientID, es[i].StudyID)
	}
	if err := d.openForward(ctx, in); err != nil {
		return err
	}
	err := d.insertEnrollments(ctx, in.Enrollments)
	return d.close(ctx, in, forwardEnd(err), err)
}

// repairEnrollments is the repair of an enrollment write cut short: its
// enrollments again, but those of the pairs a later write changed since.
func (d *DB) repairEnrollments(ctx context.Context, in *intentDoc) error {
	return d.insertEnrollments(ctx, slices.DeleteFunc(in.Enrollments, func(e enrollmentDoc) bool { return !in.current(e.PatientID, e.StudyID) }))
}

// insertEnrollments inserts enrollments; those that exist already are no
// error.
func (d *DB) insertEnrollments(ctx context.Context, docs []enrollmentDoc) error {
	return insertAllOrExisting(ctx, d.c(colEnrollments), docs)
}

// insertAllOrExisting inserts docs in one unordered insert, where a
// duplicate key means the document is there already.
func insertAllOrExisting[T any](ctx context.Context, col *mongo.Collection, docs []T) error {
	if len(docs) == 0 {
		return nil
	}
	all := make([]any, len(docs))
	for i, x := range docs {
		all[i] = x
	}
	for _, werr := range insertErrors(col.InsertMany(ctx, all, options.InsertMany().SetOrdered(false))) {
		if !isDuplicate(werr) {
			return werr
		}
	}
	return nil
}

// Enrollments implements domain.StudyStore.
func (d *DB) Enrollments(ctx context.Context, q domain.EnrollmentQuery) ([]domain.Enrollment, error) {
	if q.StudyIDs == nil && q.PatientIDs == nil {
		return nil, errors.New("repo: Enrollments needs a query")
	}
	var docs []enrollmentDoc
	err := d.findAll(ctx, colEnrollments, withIn(withIn(nil, "studyId", q.StudyIDs), "patientId", q.PatientIDs), &docs,
		options.Find().SetSort(bson.D{{Key: "studyId", Value: 1}, {Key: "patientId", Value: 1}}))
	return convert(docs, func(x enrollmentDoc) domain.Enrollment {
		return domain.Enrollment{StudyID: x.StudyID, PatientID: x.PatientID, LastUpdated: x.LastUpdated.UTC()}
	}), err
}

// DeleteEnrollments implements domain.StudyStore: the patients' answers
// to the study, then their enrollments, under a write intent that a retry
// or the repair finishes.
func (d *DB) DeleteEnrollments(ctx context.Context, studyID int64, patientIDs []int64) error {
	in := &intentDoc{Kind: intentUnenroll, StudyID: studyID, PatientIDs: patientIDs}
	for _, id := range patientIDs {
		in.touch(id, studyID)
	}
	if err := d.openForward(ctx, in); err != nil {
		return err
	}
	err := d.deleteEnrollments(ctx, studyID, patientIDs)
	return d.close(ctx, in, forwardEnd(err), err)
}

// repairUnenrollments is the repair of an enrollment delete cut short:
// the delete again, but of the pairs a later write changed since.
func (d *DB) repairUnenrollments(ctx context.Context, in *intentDoc) error {
	return d.deleteEnrollments(ctx, in.StudyID, slices.DeleteFunc(in.PatientIDs, func(id int64) bool { return !in.current(id, in.StudyID) }))
}

func (d *DB) deleteEnrollments(ctx context.Context, studyID int64, patientIDs []int64) error {
	filter := bson.M{"studyId": studyID, "patientId": bson.M{"$in": nonNilIDs(patientIDs)}}
	if _, err := d.c(colConsents).DeleteMany(ctx, filter); err != nil {
		return err
	}
	_, err := d.c(colEnrollments).DeleteMany(ctx, filter)
	return err
}

// consentOp is what a consent write does to its answers.
type consentOp string

const (
	consentsAnswer   consentOp = "answer"   // insert them; one that exists already stays
	consentsUpdate   consentOp = "update"   // set their answers and times
	consentsWithdraw consentOp = "withdraw" // delete them
)

// CreateConsents implements domain.StudyStore.
func (d *DB) CreateConsents(ctx context.Context, cs []domain.Consent) error {
	return d.consentWrite(ctx, consentsAnswer, cs)
}

// UpdateConsents implements domain.StudyStore.
func (d *DB) UpdateConsents(ctx context.Context, cs []domain.Consent) error {
	return d.consentWrite(ctx, consentsUpdate, cs)
}

// WithdrawConsents implements domain.StudyStore.
func (d *DB) WithdrawConsents(ctx context.Context, cs []domain.Consent) error {
	return d.consentWrite(ctx, consentsWithdraw, cs)
}

// consentWrite writes answers under a write intent that a retry or the
// repair finishes.
func (d *DB) consentWrite(ctx context.Context, op consentOp, cs []domain.Consent) error {
	now := d.nowMillis()
	in := &intentDoc{Kind: intentConsents, ConsentOp: op}
	for i := range cs {
		c := &cs[i]
		c.LastUpdated = now
		c.ConsentedTime = c.ConsentedTime.UTC().Truncate(time.Millisecond)
		in.Consents = append(in.Consents, consentDoc{c.PatientID, c.StudyID, c.ScopeCodeID, c.Consented, c.ConsentedTime, c.LastUpdated})
		in.touch(c.PatientID, c.StudyID)
	}
	if err := d.openForward(ctx, in); err != nil {
		return err
	}
	err := d.writeConsents(ctx, op, in.Consents)
	return d.close(ctx, in, forwardEnd(err), err)
}

// repairConsents is the repair of a consent write cut short: its answers
// again, but those of the pairs a later write changed since.
func (d *DB) repairConsents(ctx context.Context, in *intentDoc) error {
	return d.writeConsents(ctx, in.ConsentOp, slices.DeleteFunc(in.Consents, func(c consentDoc) bool { return !in.current(c.PatientID, c.StudyID) }))
}

// writeConsents applies a consent write; applying it again changes
// nothing more.
func (d *DB) writeConsents(ctx context.Context, op consentOp, docs []consentDoc) error {
	if op == consentsAnswer {
		return insertAllOrExisting(ctx, d.c(colConsents), docs)
	}
	for _, x := range docs {
		key := bson.M{"patientId": x.PatientID, "studyId": x.StudyID, "scopeCodeId": x.ScopeCodeID}
		var err error
		switch op {
		case consentsUpdate:
			_, err = d.c(colConsents).UpdateOne(ctx, key,
				bson.M{"$set": bson.M{"consented": x.Consented, "consentedTime": x.ConsentedTime, "lastUpdated": x.LastUpdated}})
		case consentsWithdraw:
			_, err = d.c(colConsents).DeleteOne(ctx, key)
		default:
			err = fmt.Errorf("unknown consent write %q", op)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func consentFilter(q domain.ConsentQuery) bson.D {
	return withIn(withIn(withIn(nil, "patientId", q.PatientIDs), "studyId", q.StudyIDs), "scopeCodeId", q.ScopeCodeIDs)
}

// Consents implements domain.StudyStore.
func (d *DB) Consents(ctx context.Context, q domain.ConsentQuery) ([]domain.Consent, error) {
	var docs []consentDoc
	err := d.findAll(ctx, colConsents, consentFilter(q), &docs,
		options.Find().SetSort(bson.D{{Key: "patientId", Value: 1}, {Key: "studyId", Value: 1}, {Key: "scopeCodeId", Value: 1}}))
	return convert(docs, consentDoc.consent), err
}

// DeleteConsents implements domain.StudyStore.
func (d *DB) DeleteConsents(ctx context.Context, q domain.ConsentQuery) error {
	f := consentFilter(q)
	if len(f) == 0 {
		return errors.New("repo: DeleteConsents needs a query")
	}
	_, err := d.c(colConsents).DeleteMany(ctx, f)
	return err
}
