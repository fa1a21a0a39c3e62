package domain

// Queries select entities for lists. A nil id list does not filter; an
// empty, non-nil one matches nothing (the actor may read none).

// UserQuery selects users.
type UserQuery struct {
	IDs           []int64
	EmailContains string // case-insensitive
	Type          UserType
}

// OrganizationQuery selects organizations.
type OrganizationQuery struct {
	IDs    []int64
	PartOf *int64 // 0: top level
}

// PatientQuery selects patients.
type PatientQuery struct {
	IDs             []int64
	OrganizationIDs []int64 // patients in at least one of them
	Identifier      *Identifier
	NamePrefix      string // a prefix of a family or given name, in SearchKey form
}

// StudyQuery selects studies.
type StudyQuery struct {
	IDs             []int64
	OrganizationIDs []int64
}

// EnrollmentQuery selects enrollments.
type EnrollmentQuery struct {
	StudyIDs   []int64
	PatientIDs []int64
}

// ConsentQuery selects consent answers.
type ConsentQuery struct {
	PatientIDs   []int64
	StudyIDs     []int64
	ScopeCodeIDs []int64
}

// StudyDataSourceQuery selects the links of studies and data sources.
type StudyDataSourceQuery struct {
	StudyIDs      []int64
	DataSourceIDs []int64
}

// FHIRSourceQuery selects FHIR sources.
type FHIRSourceQuery struct {
	PatientIDs    []int64
	DataSourceIDs []int64
}
