package domain

import (
	"context"
	"time"
)

// Store is everything the use cases need from storage. Package repo
// implements it on MongoDB. Unless a method says otherwise, a lookup by key
// returns CodeNotFound when nothing matches, and a create returns
// CodeDuplicate when a unique key is already taken (nothing is written then).
// Creates assign ID and LastUpdated on the value they are given.
type Store interface {
	UserStore
	OrganizationStore
	PatientStore
	StudyStore
	DataSourceStore
	FHIRSourceStore
	LoginThrottle
}

// UserStore keeps users. Emails are unique, compared in lower case.
type UserStore interface {
	CreateUser(ctx context.Context, u *User) error
	UserByID(ctx context.Context, id int64) (*User, error)
	UserByEmail(ctx context.Context, email string) (*User, error)
	// UpdateUser replaces the stored user with the same ID.
	UpdateUser(ctx context.Context, u *User) error
	// DeleteUser removes the user; deleting a missing user is not an error.
	DeleteUser(ctx context.Context, id int64) error
	CountUsers(ctx context.Context) (int64, error)
}

// OrganizationStore keeps organizations and practitioner memberships.
type OrganizationStore interface {
	CreateOrganization(ctx context.Context, o *Organization) error
	OrganizationByID(ctx context.Context, id int64) (*Organization, error)
	// OrganizationByName returns the organization with that name under
	// partOf (0: top level); the first created wins if there are several.
	OrganizationByName(ctx context.Context, name string, partOf int64) (*Organization, error)
	// CreateMembership adds a user to an organization; CodeDuplicate if the
	// user is already a member.
	CreateMembership(ctx context.Context, m *Membership) error
	// MembershipsOfUser returns every membership of the user, in
	// organization id order.
	MembershipsOfUser(ctx context.Context, userID int64) ([]Membership, error)
}

// PatientStore keeps patients, with their identifiers unique across patients.
type PatientStore interface {
	// CreatePatient stores the patient; CodeDuplicate if the user already has
	// a patient record or if one of the identifiers belongs to another patient.
	CreatePatient(ctx context.Context, p *Patient) error
	PatientByID(ctx context.Context, id int64) (*Patient, error)
	PatientByUserID(ctx context.Context, userID int64) (*Patient, error)
}

// StudyStore keeps studies, their scope requests and data sources, the
// enrollments and the consents.
type StudyStore interface {
	CreateStudy(ctx context.Context, s *Study) error
	// StudyByName returns the study of that name in the organization.
	StudyByName(ctx context.Context, organizationID int64, name string) (*Study, error)
	CreateScopeCode(ctx context.Context, c *ScopeCode) error
	ScopeCodeByCoding(ctx context.Context, system, code string) (*ScopeCode, error)
	CreateScopeRequest(ctx context.Context, r ScopeRequest) error
	CreateStudyDataSource(ctx context.Context, s StudyDataSource) error
	CreateEnrollment(ctx context.Context, e *Enrollment) error
	CreateConsent(ctx context.Context, c *Consent) error
}

// DataSourceStore keeps data sources.
type DataSourceStore interface {
	CreateDataSource(ctx context.Context, d *DataSource) error
	DataSourceByName(ctx context.Context, name string) (*DataSource, error)
}

// FHIRSourceStore keeps FHIR sources.
type FHIRSourceStore interface {
	CreateFHIRSource(ctx context.Context, s *FHIRSource) error
	// FHIRSourceByLabel returns the patient's FHIR source with that label.
	FHIRSourceByLabel(ctx context.Context, patientID int64, label string) (*FHIRSource, error)
}

// LoginThrottle counts failed logins in fixed windows. A key names what is
// counted, such as an account or a client address.
type LoginThrottle interface {
	// LoginFailures returns the failures counted for key in the window that
	// starts at windowStart.
	LoginFailures(ctx context.Context, key string, windowStart time.Time) (int, error)
	// RecordLoginFailure adds one failure for key in the window that starts at
	// windowStart; the count is forgotten after expires.
	RecordLoginFailure(ctx context.Context, key string, windowStart, expires time.Time) error
}
