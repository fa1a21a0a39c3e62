package domain

import "time"

// UserType says whether a user logs in as a patient or as a practitioner.
type UserType string

// The user types.
const (
	UserPatient      UserType = "patient"
	UserPractitioner UserType = "practitioner"
)

// User is an account that can log in. Patients and practitioners are both
// users; a patient user has exactly one Patient record.
type User struct {
	ID           int64
	Email        string // lower case, unique
	PasswordHash string // argon2id, PHC string format; empty: cannot log in with a password
	Type         UserType
	FirstName    string
	LastName     string
	IsSuperuser  bool // acts as super_user in every organization
	IsStaff      bool // may register OAuth clients
	IsActive     bool
	DateJoined   time.Time
	LastUpdated  time.Time
	// CredentialsChangedAt is when the password last changed or the user
	// was deactivated: sessions and tokens from sign-ins before are void.
	CredentialsChangedAt time.Time
	// Identifier is a practitioner's id at the EHR, the id of the
	// Practitioner their EHR's ID tokens name as fhirUser: how a token
	// exchange finds them (ExchangedPractitioner). Not unique: a token
	// naming an identifier two practitioners share is refused. Only
	// superusers set it.
	Identifier string
	// InvitationAcceptedAt is when an app redeemed an invitation of this
	// (patient) user; zero: never, or not since their login was replaced.
	InvitationAcceptedAt time.Time
}

// HasLogin reports whether the user has taken their account in hand: they
// chose a password, or an app redeemed an invitation of theirs. An
// invitation for a user with a login would hand it to whoever redeems the
// invitation, so none is issued or redeemed then (invitations.go).
func (u *User) HasLogin() bool { return u.PasswordHash != "" || !u.InvitationAcceptedAt.IsZero() }

// UserChange names the fields of a user one use case changes; a nil
// field is left as stored (Store.ChangeUser).
type UserChange struct {
	FirstName, LastName            *string
	Identifier                     *string
	PasswordHash                   *string
	IsActive, IsSuperuser, IsStaff *bool
	CredentialsChangedAt           *time.Time
	InvitationAcceptedAt           *time.Time // the zero time: none
	// From is the LastUpdated of the user the change was made from: it
	// is applied only if the stored user is still that version
	// (CodeVersionMismatch otherwise). Nil: to whichever version is
	// stored.
	From *time.Time
}

// StillSignedIn reports whether a login session or token that comes from a
// sign-in at authTime still stands: the user is active, and neither has
// their password changed nor were they deactivated since. Stored times
// keep milliseconds, so a sign-in within the millisecond of a change is
// void. Checking this on every use, not only ending the credentials at the
// change, voids those that a sign-in racing the change creates after.
func (u *User) StillSignedIn(authTime time.Time) bool {
	return u.IsActive && authTime.Truncate(time.Millisecond).After(u.CredentialsChangedAt)
}

// Role is a practitioner's role in one organization. The empty role is a
// membership without a role: it gives reads, never writes.
type Role string

// The roles. RoleSuperUser is never stored: a superuser holds it everywhere.
const (
	RoleNone      Role = ""
	RoleViewer    Role = "viewer"
	RoleMember    Role = "member"
	RoleManager   Role = "manager"
	RoleSuperUser Role = "super_user"
)

// OrganizationType is a code of the FHIR organization-type value set.
type OrganizationType string

// OrganizationTypes lists the codes of http://terminology.hl7.org/CodeSystem/organization-type.
var OrganizationTypes = []OrganizationType{"prov", "dept", "team", "govt", "ins", "pay", "edu", "reli", "crs", "cg", "bus", "other"}

// Organization is a node of the organization tree; PartOf is 0 for a
// top-level organization.
type Organization struct {
	ID          int64
	Name        string
	Type        OrganizationType
	PartOf      int64
	LastUpdated time.Time
}

// Membership places a practitioner user in an organization with a role.
type Membership struct {
	OrganizationID int64
	UserID         int64
	Role           Role
	LastUpdated    time.Time
}

// Identifier is a business identifier: a value unique within its system.
type Identifier struct {
	System string
	Value  string
}

// ContactPoint is a FHIR ContactPoint reduced to what patients carry.
type ContactPoint struct {
	System string // email | phone
	Value  string
}

// Patient is the clinical record of a patient user.
type Patient struct {
	ID              int64
	UserID          int64
	FamilyName      string
	GivenNames      []string
	BirthDate       string // YYYY-MM-DD, or empty
	Telecom         []ContactPoint
	Identifiers     []Identifier // each (system, value) unique across patients
	OrganizationIDs []int64
	LastUpdated     time.Time
}

// Study belongs to one organization; patients are enrolled in it and asked to
// consent to the scopes it requests.
type Study struct {
	ID             int64
	OrganizationID int64
	Name           string
	Description    string
	IconURL        string
	LastUpdated    time.Time
}

// Enrollment puts a patient in a study.
type Enrollment struct {
	StudyID     int64
	PatientID   int64
	LastUpdated time.Time
}

// ScopeCode is a kind of data a study may request and a patient may consent
// to share: one coding, for instance https://w3id.org/openmhealth|omh:heart-rate:2.0.
type ScopeCode struct {
	ID     int64
	System string
	Code   string
	Text   string
}

// ScopeRequest records that a study asks for one scope code.
type ScopeRequest struct {
	StudyID     int64
	ScopeCodeID int64
}

// Consent is a patient's answer for one scope code requested by one study.
// A requested scope without a Consent is pending.
type Consent struct {
	PatientID     int64
	StudyID       int64
	ScopeCodeID   int64
	Consented     bool
	ConsentedTime time.Time
	LastUpdated   time.Time
}

// DataSourceType says what kind of thing produces the data.
type DataSourceType string

// The data source types.
const (
	DataSourcePersonalDevice DataSourceType = "personal_device"
	DataSourceMedicalDevice  DataSourceType = "medical_device"
	DataSourcePatientApp     DataSourceType = "patient_app"
)

// DataSource is a device or app that produces observations (FHIR Device).
type DataSource struct {
	ID                    int64
	Name                  string
	Type                  DataSourceType
	SupportedScopeCodeIDs []int64
	LastUpdated           time.Time
}

// StudyDataSource records that a study collects data from a data source.
type StudyDataSource struct {
	StudyID      int64
	DataSourceID int64
}

// FHIRSource is an upstream system that sends FHIR resources on behalf of
// one patient; imported resources are tied to it.
type FHIRSource struct {
	ID           int64
	PatientID    int64
	DataSourceID int64 // 0 when none
	Label        string
	// FHIRBase is the upstream system's FHIR base URL, when known (a
	// patient's EHR connection): references under it are references
	// between the source's resources. "" when not known.
	FHIRBase    string
	LastUpdated time.Time
}
