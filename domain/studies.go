package domain

import (
	"context"
	"net/url"
	"strings"
)

// The coding systems of native observations. Open mHealth and IEEE 1752
// codes are interchangeable for routing, consent and search.
const (
	SystemOpenMHealth = "https://w3id.org/openmhealth"
	SystemIEEE1752    = "https://w3id.org/ieee1752"
)

// NewStudy is the input of CreateStudy.
type NewStudy struct {
	OrganizationID int64
	Name           string
	Description    string
	IconURL        string
}

// CreateStudy stores a study of one organization; the actor must manage data
// in it. Returns CodeInvalid, CodeForbidden.
func (s *Service) CreateStudy(ctx context.Context, actor *Actor, in NewStudy) (*Study, error) {
	st := &Study{
		OrganizationID: in.OrganizationID,
		Name:           strings.TrimSpace(in.Name),
		Description:    strings.TrimSpace(in.Description),
		IconURL:        strings.TrimSpace(in.IconURL),
	}
	if st.Name == "" {
		return nil, FieldErrorf("name", "is required")
	}
	if st.IconURL != "" {
		if u, err := url.Parse(st.IconURL); err != nil || !u.IsAbs() {
			return nil, FieldErrorf("iconUrl", "%q is not an absolute URL", st.IconURL)
		}
	}
	if _, err := s.store.OrganizationByID(ctx, st.OrganizationID); err != nil {
		if IsCode(err, CodeNotFound) {
			return nil, FieldErrorf("organization", "organization %d does not exist", st.OrganizationID)
		}
		return nil, err
	}
	if !actor.CanManageDataIn(st.OrganizationID) {
		return nil, Errorf(CodeForbidden, "you may not create studies in organization %d", st.OrganizationID)
	}
	if err := s.store.CreateStudy(ctx, st); err != nil {
		return nil, err
	}
	return st, nil
}

// StudyByName returns the study of that name in the organization.
func (s *Service) StudyByName(ctx context.Context, organizationID int64, name string) (*Study, error) {
	return s.store.StudyByName(ctx, organizationID, name)
}

// EnsureScopeCode returns the scope code for (system, code), creating it
// with text when it does not exist yet.
func (s *Service) EnsureScopeCode(ctx context.Context, system, code, text string) (*ScopeCode, error) {
	if u, err := url.Parse(system); err != nil || !u.IsAbs() {
		return nil, FieldErrorf("codingSystem", "%q is not an absolute URI", system)
	}
	if strings.TrimSpace(code) == "" {
		return nil, FieldErrorf("codingCode", "is required")
	}
	c, err := s.store.ScopeCodeByCoding(ctx, system, code)
	if !IsCode(err, CodeNotFound) {
		return c, err
	}
	c = &ScopeCode{System: system, Code: code, Text: strings.TrimSpace(text)}
	if err := s.store.CreateScopeCode(ctx, c); err != nil {
		if IsCode(err, CodeDuplicate) { // created concurrently
			return s.store.ScopeCodeByCoding(ctx, system, code)
		}
		return nil, err
	}
	return c, nil
}

// RequestScope makes the study ask its patients for the scope code.
// Returns CodeDuplicate if it already does.
func (s *Service) RequestScope(ctx context.Context, actor *Actor, study *Study, scopeCodeID int64) error {
	if !actor.CanManageDataIn(study.OrganizationID) {
		return Errorf(CodeForbidden, "you may not change study %d", study.ID)
	}
	return s.store.CreateScopeRequest(ctx, ScopeRequest{StudyID: study.ID, ScopeCodeID: scopeCodeID})
}

// AddStudyDataSource records that the study collects from the data source.
// Returns CodeDuplicate if it already does.
func (s *Service) AddStudyDataSource(ctx context.Context, actor *Actor, study *Study, dataSourceID int64) error {
	if !actor.CanManageDataIn(study.OrganizationID) {
		return Errorf(CodeForbidden, "you may not change study %d", study.ID)
	}
	return s.store.CreateStudyDataSource(ctx, StudyDataSource{StudyID: study.ID, DataSourceID: dataSourceID})
}

// Enroll puts the patient in the study. The actor must manage data in the
// study's organization, which must be one of the patient's. Returns
// CodeDuplicate if the patient is already enrolled.
func (s *Service) Enroll(ctx context.Context, actor *Actor, study *Study, p *Patient) error {
	if !actor.CanManageDataIn(study.OrganizationID) {
		return Errorf(CodeForbidden, "you may not enroll patients in study %d", study.ID)
	}
	return s.store.CreateEnrollment(ctx, &Enrollment{StudyID: study.ID, PatientID: p.ID})
}

// RecordConsent stores the patient's answer for a scope code of a study.
// Returns CodeDuplicate if the scope was already answered.
func (s *Service) RecordConsent(ctx context.Context, actor *Actor, study *Study, p *Patient, scopeCodeID int64, consented bool) error {
	if !actor.isPatient(p) && !actor.CanManageDataIn(study.OrganizationID) {
		return Errorf(CodeForbidden, "you may not answer consents for patient %d", p.ID)
	}
	now := s.Now()
	return s.store.CreateConsent(ctx, &Consent{PatientID: p.ID, StudyID: study.ID, ScopeCodeID: scopeCodeID, Consented: consented, ConsentedTime: now})
}
