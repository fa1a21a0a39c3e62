package domain

import (
	"context"
	"time"
)

// Store is everything the use cases need from storage. Package repo
// implements it on MongoDB. Unless a method says otherwise, a lookup by key
// returns CodeNotFound when nothing matches, a create returns CodeDuplicate
// when a unique key is already taken (nothing is written then), and an
// update or delete of something missing returns CodeNotFound. Creates assign
// ID and LastUpdated on the value they are given; updates assign
// LastUpdated. Lists are ordered by id.
type Store interface {
	UserStore
	OrganizationStore
	PatientStore
	StudyStore
	DataSourceStore
	FHIRSourceStore
	ObservationStore
	ProjectionStore
	ResourceStore
	LoginThrottle
	CredentialStore
	InvitationStore
	AuditStore
	ExportStore
	ExportStreams
	FederationStore
	EHRBrandStore
	EHRConnectionStore
	PullRunStore
}

// AuditStore reads the audit trail (an Auditor writes it).
type AuditStore interface {
	AuditEventByID(ctx context.Context, id int64) (*AuditEvent, error)
	SearchAuditEvents(ctx context.Context, plan *SearchPlan) (SearchResult[AuditEvent], error)
}

// ProjectionStore runs searches over the admin collections that FHIR shows
// as read-only projections (Patient, Practitioner, Organization, Group,
// Device).
type ProjectionStore interface {
	SearchPatients(ctx context.Context, plan *SearchPlan) (SearchResult[Patient], error)
	SearchUsers(ctx context.Context, plan *SearchPlan) (SearchResult[User], error)
	SearchOrganizations(ctx context.Context, plan *SearchPlan) (SearchResult[Organization], error)
	SearchStudies(ctx context.Context, plan *SearchPlan) (SearchResult[Study], error)
	SearchDataSources(ctx context.Context, plan *SearchPlan) (SearchResult[DataSource], error)
}

// UserStore keeps users. Emails are unique, compared in lower case.
type UserStore interface {
	CreateUser(ctx context.Context, u *User) error
	UserByID(ctx context.Context, id int64) (*User, error)
	UserByEmail(ctx context.Context, email string) (*User, error)
	// UsersByIDs returns the users that exist among ids, in id order.
	UsersByIDs(ctx context.Context, ids []int64) ([]User, error)
	ListUsers(ctx context.Context, q UserQuery, p Page) (List[User], error)
	// CreatePractitioner stores a practitioner user and their membership
	// (its UserID set to the new user), both or neither; CodeDuplicate if
	// the email is taken.
	CreatePractitioner(ctx context.Context, u *User, m *Membership) error
	// ChangeUser writes the fields of ch that are set, and nothing else
	// of the user, and returns the user's new lastUpdated (a millisecond
	// at least after the one it replaces: the user's version). A use
	// case never writes back a user it read: a password change, a
	// deactivation and a rename running at once each keep their change
	// (a deactivation is not undone by a password reset that read the
	// user before it). CodeNotFound if there is no such user;
	// CodeVersionMismatch, and nothing written, if ch.From is not the
	// stored version; CodeConflict if other changes keep coming first.
	ChangeUser(ctx context.Context, id int64, ch UserChange) (time.Time, error)
	CountUsers(ctx context.Context) (int64, error)
}

// OrganizationStore keeps organizations and practitioner memberships.
type OrganizationStore interface {
	CreateOrganization(ctx context.Context, o *Organization) error
	OrganizationByID(ctx context.Context, id int64) (*Organization, error)
	// OrganizationsByIDs returns the organizations that exist among ids,
	// in id order.
	OrganizationsByIDs(ctx context.Context, ids []int64) ([]Organization, error)
	// OrganizationByName returns the organization with that name under
	// partOf (0: top level); the first created wins if there are several.
	OrganizationByName(ctx context.Context, name string, partOf int64) (*Organization, error)
	ListOrganizations(ctx context.Context, q OrganizationQuery, p Page) (List[Organization], error)
	// AllOrganizations returns every organization: the tree is small.
	AllOrganizations(ctx context.Context) ([]Organization, error)
	// OrganizationsPartOf returns the organizations directly under any of
	// ids (their partOf is one of them), in id order; none for no ids.
	OrganizationsPartOf(ctx context.Context, ids []int64) ([]Organization, error)
	// UpdateOrganization replaces the stored organization old with o (same
	// ID); CodeVersionMismatch, and nothing changed, if the stored record
	// is no longer old (another update came first).
	UpdateOrganization(ctx context.Context, old, o *Organization) error
	// DeleteOrganization removes the organization and its memberships.
	DeleteOrganization(ctx context.Context, id int64) error

	// CreateMembership adds a user to an organization; CodeDuplicate if the
	// user is already a member.
	CreateMembership(ctx context.Context, m *Membership) error
	Membership(ctx context.Context, organizationID, userID int64) (*Membership, error)
	// MembershipsOfUsers returns every membership of the users, by user
	// then organization id.
	MembershipsOfUsers(ctx context.Context, userIDs []int64) ([]Membership, error)
	// MembershipsOfOrganizations returns the memberships of the
	// organizations, by organization then user id.
	MembershipsOfOrganizations(ctx context.Context, organizationIDs []int64, p Page) (List[Membership], error)
	UpdateMembership(ctx context.Context, m *Membership) error
	DeleteMembership(ctx context.Context, organizationID, userID int64) error
}

// PatientStore keeps patients, with their identifiers unique across patients.
type PatientStore interface {
	// CreatePatient stores the patient's user and record (p.UserID set to
	// the new user), both or neither; CodeDuplicate if the email is taken
	// (Field "email") or one of the identifiers belongs to another patient.
	CreatePatient(ctx context.Context, u *User, p *Patient) error
	PatientByID(ctx context.Context, id int64) (*Patient, error)
	PatientByUserID(ctx context.Context, userID int64) (*Patient, error)
	ListPatients(ctx context.Context, q PatientQuery, p Page) (List[Patient], error)
	// PatientIDs returns the ids of every patient the query selects, in
	// order: how joins reach other collections' queries as id lists.
	PatientIDs(ctx context.Context, q PatientQuery) ([]int64, error)
	// UpdatePatient replaces the stored patient old with p (same ID). New
	// identifiers are claimed before the record changes and dropped ones
	// released after, so no identifier is ever unowned or doubly owned;
	// CodeDuplicate if a new identifier belongs to another patient;
	// CodeVersionMismatch, and nothing changed, if the stored record is no
	// longer old (another update came first); CodeConflict, and nothing
	// changed, if another request is changing the patient's identifiers
	// (changes of one patient's identifiers run one at a time).
	UpdatePatient(ctx context.Context, old, p *Patient) error
	// DeletePatient removes the patient's answers, enrollments, user,
	// record and identifiers; a retry finishes an interrupted delete.
	DeletePatient(ctx context.Context, p *Patient) error
}

// StudyStore keeps studies, their scope requests and data sources, the
// enrollments and the consents.
type StudyStore interface {
	CreateStudy(ctx context.Context, s *Study) error
	StudyByID(ctx context.Context, id int64) (*Study, error)
	// StudyByName returns the study of that name in the organization.
	StudyByName(ctx context.Context, organizationID int64, name string) (*Study, error)
	ListStudies(ctx context.Context, q StudyQuery, p Page) (List[Study], error)
	// UpdateStudy replaces the stored study old with s, as
	// UpdateOrganization does.
	UpdateStudy(ctx context.Context, old, s *Study) error
	DeleteStudy(ctx context.Context, id int64) error

	CreateScopeCode(ctx context.Context, c *ScopeCode) error
	ScopeCodeByID(ctx context.Context, id int64) (*ScopeCode, error)
	ScopeCodeByCoding(ctx context.Context, system, code string) (*ScopeCode, error)
	// ScopeCodesByIDs returns the scope codes that exist among ids.
	ScopeCodesByIDs(ctx context.Context, ids []int64) ([]ScopeCode, error)
	ListScopeCodes(ctx context.Context, p Page) (List[ScopeCode], error)

	CreateScopeRequest(ctx context.Context, r ScopeRequest) error
	// ScopeRequests returns the scope requests of the studies.
	ScopeRequests(ctx context.Context, studyIDs []int64) ([]ScopeRequest, error)
	DeleteScopeRequest(ctx context.Context, r ScopeRequest) error

	CreateStudyDataSource(ctx context.Context, s StudyDataSource) error
	StudyDataSources(ctx context.Context, q StudyDataSourceQuery) ([]StudyDataSource, error)
	DeleteStudyDataSource(ctx context.Context, s StudyDataSource) error

	// The writes of several enrollments or answers below happen all, or
	// not yet: a failed one is finished by its retry or by the store's
	// repair. What is already as asked is left alone (no CodeDuplicate,
	// no CodeNotFound): the callers check before.

	// CreateEnrollments enrolls patients (assigning LastUpdated).
	CreateEnrollments(ctx context.Context, es []Enrollment) error
	Enrollments(ctx context.Context, q EnrollmentQuery) ([]Enrollment, error)
	// DeleteEnrollments removes the patients' enrollments in the study and
	// their answers to its scope requests.
	DeleteEnrollments(ctx context.Context, studyID int64, patientIDs []int64) error

	// CreateConsents stores first answers (assigning LastUpdated).
	CreateConsents(ctx context.Context, cs []Consent) error
	Consents(ctx context.Context, q ConsentQuery) ([]Consent, error)
	// UpdateConsents changes answers and their times.
	UpdateConsents(ctx context.Context, cs []Consent) error
	// WithdrawConsents removes answers.
	WithdrawConsents(ctx context.Context, cs []Consent) error
	// DeleteConsents removes every answer the query selects (at least one
	// of its lists must be set).
	DeleteConsents(ctx context.Context, q ConsentQuery) error
}

// DataSourceStore keeps data sources.
type DataSourceStore interface {
	CreateDataSource(ctx context.Context, d *DataSource) error
	DataSourceByID(ctx context.Context, id int64) (*DataSource, error)
	DataSourceByName(ctx context.Context, name string) (*DataSource, error)
	// DataSourcesByIDs returns the data sources that exist among ids.
	DataSourcesByIDs(ctx context.Context, ids []int64) ([]DataSource, error)
	ListDataSources(ctx context.Context, p Page) (List[DataSource], error)
	// UpdateDataSource replaces the stored data source old with d, as
	// UpdateOrganization does.
	UpdateDataSource(ctx context.Context, old, d *DataSource) error
	DeleteDataSource(ctx context.Context, id int64) error
}

// FHIRSourceStore keeps FHIR sources.
type FHIRSourceStore interface {
	CreateFHIRSource(ctx context.Context, s *FHIRSource) error
	FHIRSourceByID(ctx context.Context, id int64) (*FHIRSource, error)
	// FHIRSourceByLabel returns the patient's FHIR source with that label.
	FHIRSourceByLabel(ctx context.Context, patientID int64, label string) (*FHIRSource, error)
	ListFHIRSources(ctx context.Context, q FHIRSourceQuery, p Page) (List[FHIRSource], error)
	DeleteFHIRSource(ctx context.Context, id int64) error
}

// LoginThrottle keeps the counts behind sign-in throttling. A key names
// what is counted (an account, a client address, both); now is the
// caller's clock, against which records expire.
type LoginThrottle interface {
	// LoginFailures returns the failures counted for key and when the last
	// was; none once the count is forgotten.
	LoginFailures(ctx context.Context, key string, now time.Time) (n int, last time.Time, err error)
	// RecordLoginFailure counts a failure for key at now, to be forgotten
	// at forgetAt unless another comes first. A forgotten count starts
	// again from one. Instances may record the same key at once: on MongoDB
	// no failure is lost.
	RecordLoginFailure(ctx context.Context, key string, now, forgetAt time.Time) error
	// ForgetLoginFailures drops the count of key; none is not an error.
	ForgetLoginFailures(ctx context.Context, key string) error
	// RememberLogin marks key known until then; KnownLogin tells.
	RememberLogin(ctx context.Context, key string, until time.Time) error
	KnownLogin(ctx context.Context, key string, now time.Time) (bool, error)
	// SpendLoginProof records key as spent until then, once: false when
	// it was spent already (a replayed proof of work), on every instance.
	SpendLoginProof(ctx context.Context, key string, until time.Time) (bool, error)
}

// InvitationStore keeps the redemptions of invitation codes
// (Service.AcceptInvitation): each uses a code once and sets its patient's
// password, and converges after a crash between its writes.
type InvitationStore interface {
	// RedeemInvitation records the redemption, uses its code, sets the
	// password of its user if the user is an active patient whose
	// password did not change after r.At, then ends the user's login
	// sessions and revokes their OAuth tokens. Returns CodeNotFound, and
	// changes nothing more, when the code is not active (used, cancelled,
	// revoked) or the user is no such patient. Cut short by a crash, the
	// repair completes it; ID is set.
	RedeemInvitation(ctx context.Context, r *InvitationRedemption) error
	// InvitationRedemptions returns the redemptions of the code that are
	// recorded and not finished: cut short, or running.
	InvitationRedemptions(ctx context.Context, signature string) ([]InvitationRedemption, error)
	// FinishInvitationRedemption completes a redemption InvitationRedemptions
	// returned, as the repair would; CodeNotFound when it finished
	// meanwhile or cannot finish (another redemption used the code).
	FinishInvitationRedemption(ctx context.Context, r *InvitationRedemption) error
}

// CredentialStore ends what lets a user act without typing their password
// again: login sessions and OAuth grants.
type CredentialStore interface {
	// DeleteLoginSessionsOfUser ends every login session of the user; none
	// is not an error.
	DeleteLoginSessionsOfUser(ctx context.Context, userID int64) error
	// DeactivateOAuthTokensOfUser revokes every authorization code, access
	// and refresh token issued for the user; none is not an error.
	DeactivateOAuthTokensOfUser(ctx context.Context, userID int64) error
}
