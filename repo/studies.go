package repo

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
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

// scopeCodeDoc is a document of the scope_codes collection.
type scopeCodeDoc struct {
	ID     int64  `bson:"_id"`
	System string `bson:"system"`
	Code   string `bson:"code"`
	Text   string `bson:"text"`
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

// CreateStudy implements domain.StudyStore.
func (d *DB) CreateStudy(ctx context.Context, s *domain.Study) error {
	id, err := d.nextID(ctx, colStudies)
	if err != nil {
		return err
	}
	s.ID, s.LastUpdated = id, d.nowMillis()
	_, err = d.c(colStudies).InsertOne(ctx, studyDoc{s.ID, s.OrganizationID, s.Name, s.Description, s.IconURL, s.LastUpdated})
	return err
}

// StudyByName implements domain.StudyStore.
func (d *DB) StudyByName(ctx context.Context, organizationID int64, name string) (*domain.Study, error) {
	var x studyDoc
	err := d.findOne(ctx, colStudies, bson.M{"organizationId": organizationID, "name": name}, &x,
		fmt.Sprintf("organization %d has no study named %q", organizationID, name), options.FindOne().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, err
	}
	return &domain.Study{ID: x.ID, OrganizationID: x.OrganizationID, Name: x.Name, Description: x.Description, IconURL: x.IconURL, LastUpdated: x.LastUpdated.UTC()}, nil
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

// ScopeCodeByCoding implements domain.StudyStore.
func (d *DB) ScopeCodeByCoding(ctx context.Context, system, code string) (*domain.ScopeCode, error) {
	var x scopeCodeDoc
	if err := d.findOne(ctx, colScopeCodes, bson.M{"system": system, "code": code}, &x, fmt.Sprintf("scope code %s|%s does not exist", system, code)); err != nil {
		return nil, err
	}
	return &domain.ScopeCode{ID: x.ID, System: x.System, Code: x.Code, Text: x.Text}, nil
}

// CreateScopeRequest implements domain.StudyStore.
func (d *DB) CreateScopeRequest(ctx context.Context, r domain.ScopeRequest) error {
	return d.insertUnique(ctx, colScopeRequests, scopeRequestDoc(r), fmt.Sprintf("study %d already requests scope code %d", r.StudyID, r.ScopeCodeID))
}

// CreateStudyDataSource implements domain.StudyStore.
func (d *DB) CreateStudyDataSource(ctx context.Context, s domain.StudyDataSource) error {
	return d.insertUnique(ctx, colStudyDataSources, studyDataSourceDoc(s), fmt.Sprintf("study %d already has data source %d", s.StudyID, s.DataSourceID))
}

// CreateEnrollment implements domain.StudyStore.
func (d *DB) CreateEnrollment(ctx context.Context, e *domain.Enrollment) error {
	e.LastUpdated = d.nowMillis()
	return d.insertUnique(ctx, colEnrollments, enrollmentDoc{e.StudyID, e.PatientID, e.LastUpdated},
		fmt.Sprintf("patient %d is already enrolled in study %d", e.PatientID, e.StudyID))
}

// CreateConsent implements domain.StudyStore.
func (d *DB) CreateConsent(ctx context.Context, c *domain.Consent) error {
	c.LastUpdated = d.nowMillis()
	c.ConsentedTime = c.ConsentedTime.UTC().Truncate(time.Millisecond)
	return d.insertUnique(ctx, colConsents, consentDoc{c.PatientID, c.StudyID, c.ScopeCodeID, c.Consented, c.ConsentedTime, c.LastUpdated},
		fmt.Sprintf("patient %d has already answered scope code %d of study %d", c.PatientID, c.ScopeCodeID, c.StudyID))
}
