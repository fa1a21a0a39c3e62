package domain

import (
	"context"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"time"
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

// StudyPatch changes a study; nil fields stay. A study never changes
// organization.
type StudyPatch struct {
	Name        *string
	Description *string
	IconURL     *string
	// Unchanged is the LastUpdated of the study the change was made from
	// (the version a form showed); nil: none. If the study changed since,
	// nothing is written: the change was made against text that is no
	// longer there, and writing it would put the old text back
	// (CodeConflict, Stale: see checkUnchanged). The console's study form
	// sends it, and the admin API's If-Match.
	Unchanged *time.Time
}

// StudyView is a study with its organization.
type StudyView struct {
	Study
	Organization Organization
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
	if err := validateStudy(st); err != nil {
		return nil, err
	}
	if _, err := s.store.OrganizationByID(ctx, st.OrganizationID); err != nil {
		return nil, AsFieldError(err, "organizationId")
	}
	if !actor.CanManageDataIn(st.OrganizationID) {
		return nil, Errorf(CodeForbidden, "you may not create studies in organization %d", st.OrganizationID)
	}
	if err := s.store.CreateStudy(ctx, st); err != nil {
		return nil, err
	}
	return st, nil
}

func validateStudy(st *Study) error {
	if st.Name == "" {
		return FieldErrorf("name", "is required")
	}
	if err := LimitName.Check("name", st.Name); err != nil {
		return err
	}
	if err := LimitDescription.Check("description", st.Description); err != nil {
		return err
	}
	if err := LimitURL.Check("iconUrl", st.IconURL); err != nil {
		return err
	}
	if st.IconURL != "" {
		if u, err := url.Parse(st.IconURL); err != nil || !u.IsAbs() || u.Host == "" {
			return FieldErrorf("iconUrl", "%q is not an absolute URL", st.IconURL)
		}
	}
	return nil
}

// StudyByName returns the study of that name in the organization.
func (s *Service) StudyByName(ctx context.Context, organizationID int64, name string) (*Study, error) {
	return s.store.StudyByName(ctx, organizationID, name)
}

// canReadStudy: readers of its organization, and its enrolled patients.
func (s *Service) canReadStudy(ctx context.Context, actor *Actor, st *Study) (bool, error) {
	if actor.CanReadOrganization(st.OrganizationID) {
		return true, nil
	}
	if actor.Patient == nil {
		return false, nil
	}
	es, err := s.store.Enrollments(ctx, EnrollmentQuery{StudyIDs: []int64{st.ID}, PatientIDs: []int64{actor.Patient.ID}})
	return len(es) > 0, err
}

// readableStudy returns a study the actor may read.
func (s *Service) readableStudy(ctx context.Context, actor *Actor, id int64) (*Study, error) {
	st, err := s.store.StudyByID(ctx, id)
	if err != nil {
		return nil, err
	}
	ok, err := s.canReadStudy(ctx, actor, st)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, Errorf(CodeForbidden, "you may not read study %d", id)
	}
	return st, nil
}

// managedStudy returns a study the actor may change: patient.manage_data
// in its organization.
func (s *Service) managedStudy(ctx context.Context, actor *Actor, id int64) (*Study, error) {
	st, err := s.store.StudyByID(ctx, id)
	if err != nil {
		return nil, err
	}
	if !actor.CanManageDataIn(st.OrganizationID) {
		return nil, Errorf(CodeForbidden, "you may not change study %d", id)
	}
	return st, nil
}

// StudyByID returns a study the actor may read with its organization.
func (s *Service) StudyByID(ctx context.Context, actor *Actor, id int64) (*StudyView, error) {
	st, err := s.readableStudy(ctx, actor, id)
	if err != nil {
		return nil, err
	}
	return s.studyView(ctx, st)
}

// studyView adds the study's organization.
func (s *Service) studyView(ctx context.Context, st *Study) (*StudyView, error) {
	views, err := s.studyViews(ctx, []Study{*st})
	if err != nil {
		return nil, err
	}
	return &views[0], nil
}

// studyViews adds each study's organization, read once for the page.
func (s *Service) studyViews(ctx context.Context, studies []Study) ([]StudyView, error) {
	ids := make([]int64, len(studies))
	for i, st := range studies {
		ids[i] = st.OrganizationID
	}
	found, err := s.store.OrganizationsByIDs(ctx, uniqueIDs(ids))
	if err != nil {
		return nil, err
	}
	orgs := map[int64]Organization{}
	for _, o := range found {
		orgs[o.ID] = o
	}
	out := make([]StudyView, len(studies))
	for i, st := range studies {
		o, ok := orgs[st.OrganizationID]
		if !ok {
			return nil, Errorf(CodeNotFound, "organization %d does not exist", st.OrganizationID)
		}
		out[i] = StudyView{Study: st, Organization: o}
	}
	return out, nil
}

// ListStudies lists the studies the actor may read (of their organizations;
// a patient's: those they are enrolled in), optionally of one organization.
func (s *Service) ListStudies(ctx context.Context, actor *Actor, organizationID int64, p Page) (List[StudyView], error) {
	q := StudyQuery{}
	switch {
	case actor.IsSuperuser():
	case actor.Patient != nil:
		es, err := s.store.Enrollments(ctx, EnrollmentQuery{PatientIDs: []int64{actor.Patient.ID}})
		if err != nil {
			return List[StudyView]{}, err
		}
		q.IDs = []int64{}
		for _, e := range es {
			q.IDs = append(q.IDs, e.StudyID)
		}
	default:
		q.OrganizationIDs = actor.OrganizationIDs()
	}
	if organizationID != 0 {
		if _, err := s.store.OrganizationByID(ctx, organizationID); err != nil {
			return List[StudyView]{}, err
		}
		if !actor.canSeeOrganization(organizationID) {
			return List[StudyView]{}, Errorf(CodeForbidden, "you may not read organization %d", organizationID)
		}
		q.OrganizationIDs = intersect(q.OrganizationIDs, []int64{organizationID})
	}
	studies, err := s.store.ListStudies(ctx, q, p)
	if err != nil {
		return List[StudyView]{}, err
	}
	views, err := s.studyViews(ctx, studies.Items)
	return List[StudyView]{Items: views, Total: studies.Total}, err
}

// UpdateStudy changes a study's name, description or icon. Updates of
// one study sent at once each keep their change (applyAgain). Returns
// CodeNotFound, CodeForbidden, CodeInvalid, and a Stale CodeConflict if
// in.Unchanged is not the stored version: checked only once the actor is
// known to be allowed to change the study, so that the refusal of one who
// is not tells nothing of its version.
func (s *Service) UpdateStudy(ctx context.Context, actor *Actor, id int64, in StudyPatch) (*StudyView, error) {
	st, err := applyAgain(func() (*Study, error) { return s.updateStudy(ctx, actor, id, in) }, "study %d", id)
	if err != nil {
		return nil, err
	}
	return s.studyView(ctx, st)
}

// updateStudy applies the patch to the stored record once.
func (s *Service) updateStudy(ctx context.Context, actor *Actor, id int64, in StudyPatch) (*Study, error) {
	st, err := s.managedStudy(ctx, actor, id)
	if err != nil {
		return nil, err
	}
	if err := checkUnchanged(in.Unchanged, st.LastUpdated, "study %d", id); err != nil {
		return nil, err
	}
	old := *st
	if in.Name != nil {
		st.Name = strings.TrimSpace(*in.Name)
	}
	if in.Description != nil {
		st.Description = strings.TrimSpace(*in.Description)
	}
	if in.IconURL != nil {
		st.IconURL = strings.TrimSpace(*in.IconURL)
	}
	if err := validateStudy(st); err != nil {
		return nil, err
	}
	if reflect.DeepEqual(*st, old) {
		return st, nil // nothing to change: no new version
	}
	return st, s.store.UpdateStudy(ctx, &old, st)
}

// DeleteStudy removes a study without enrolled patients (CodeConflict
// otherwise), with its scope requests and data source links.
func (s *Service) DeleteStudy(ctx context.Context, actor *Actor, id int64) error {
	st, err := s.managedStudy(ctx, actor, id)
	if err != nil {
		return err
	}
	es, err := s.store.Enrollments(ctx, EnrollmentQuery{StudyIDs: []int64{id}})
	if err != nil {
		return err
	}
	if len(es) > 0 {
		return Errorf(CodeConflict, "study %d has %d enrolled patients; remove them first", id, len(es))
	}
	// The links go first, so a retry completes an interrupted delete.
	reqs, err := s.store.ScopeRequests(ctx, []int64{id})
	if err != nil {
		return err
	}
	for _, r := range reqs {
		if err := s.store.DeleteScopeRequest(ctx, r); err != nil && !IsCode(err, CodeNotFound) {
			return err
		}
	}
	links, err := s.store.StudyDataSources(ctx, StudyDataSourceQuery{StudyIDs: []int64{id}})
	if err != nil {
		return err
	}
	for _, l := range links {
		if err := s.store.DeleteStudyDataSource(ctx, l); err != nil && !IsCode(err, CodeNotFound) {
			return err
		}
	}
	return s.store.DeleteStudy(ctx, st.ID)
}

// StudyPatients lists the patients enrolled in a study; for practitioners
// who may read its organization.
func (s *Service) StudyPatients(ctx context.Context, actor *Actor, studyID int64, p Page) (List[Patient], error) {
	st, err := s.store.StudyByID(ctx, studyID)
	if err != nil {
		return List[Patient]{}, err
	}
	if !actor.CanReadOrganization(st.OrganizationID) {
		return List[Patient]{}, Errorf(CodeForbidden, "you may not read the patients of study %d", studyID)
	}
	return s.ListPatients(ctx, actor, PatientFilter{StudyID: studyID}, p)
}

// checkPatientIDs checks a list of patient ids given in a request body.
func checkPatientIDs(ids []int64) error {
	if len(ids) == 0 {
		return FieldErrorf("patientIds", "give at least one patient id")
	}
	if err := CheckItems("patientIds", len(ids)); err != nil {
		return err
	}
	for i, id := range ids {
		if slices.Contains(ids[:i], id) {
			return FieldErrorf("patientIds", "patient %d is listed twice", id)
		}
	}
	return nil
}

// EnrollPatients enrolls patients in a study. Every patient must exist and
// belong to the study's organization, and none may be enrolled already
// (CodeDuplicate): all are enrolled, or none.
func (s *Service) EnrollPatients(ctx context.Context, actor *Actor, studyID int64, patientIDs []int64) error {
	st, err := s.managedStudy(ctx, actor, studyID)
	if err != nil {
		return err
	}
	if err := checkPatientIDs(patientIDs); err != nil {
		return err
	}
	for _, id := range patientIDs {
		p, err := s.readablePatient(ctx, actor, id) // one the actor may not read does not exist for them
		if err != nil {
			return AsFieldError(err, "patientIds")
		}
		if !slices.Contains(p.OrganizationIDs, st.OrganizationID) {
			return FieldErrorf("patientIds", "patient %d does not belong to organization %d of study %d", id, st.OrganizationID, studyID)
		}
	}
	enrolled, err := s.store.Enrollments(ctx, EnrollmentQuery{StudyIDs: []int64{studyID}, PatientIDs: patientIDs})
	if err != nil {
		return err
	}
	if len(enrolled) > 0 {
		return Errorf(CodeDuplicate, "patient %d is already enrolled in study %d", enrolled[0].PatientID, studyID)
	}
	es := make([]Enrollment, len(patientIDs))
	for i, id := range patientIDs {
		es[i] = Enrollment{StudyID: studyID, PatientID: id}
	}
	return s.store.CreateEnrollments(ctx, es)
}

// UnenrollPatients removes patients from a study, with their answers to its
// scope requests: all of them, or none. Every patient must be enrolled
// (CodeNotFound otherwise, before anything changes).
func (s *Service) UnenrollPatients(ctx context.Context, actor *Actor, studyID int64, patientIDs []int64) error {
	if _, err := s.managedStudy(ctx, actor, studyID); err != nil {
		return err
	}
	if err := checkPatientIDs(patientIDs); err != nil {
		return err
	}
	es, err := s.store.Enrollments(ctx, EnrollmentQuery{StudyIDs: []int64{studyID}, PatientIDs: patientIDs})
	if err != nil {
		return err
	}
	for _, id := range patientIDs {
		// A token held to another patient (Actor.ForAdminAPI) finds this
		// one enrolled nowhere.
		if actor.holdsOff(id) || !slices.ContainsFunc(es, func(e Enrollment) bool { return e.PatientID == id }) {
			return Errorf(CodeNotFound, "patient %d is not enrolled in study %d", id, studyID)
		}
	}
	return s.store.DeleteEnrollments(ctx, studyID, patientIDs)
}

// ScopeRef names a scope code by id or by coding.
type ScopeRef struct {
	ID     int64
	System string
	Code   string
}

// resolveScope finds the scope code a reference names.
func (s *Service) resolveScope(ctx context.Context, ref ScopeRef, field string) (*ScopeCode, error) {
	var c *ScopeCode
	var err error
	switch {
	case ref.ID != 0:
		c, err = s.store.ScopeCodeByID(ctx, ref.ID)
	case ref.System != "" && ref.Code != "":
		if err := LimitIdentifier.checkTexts("codingSystem", ref.System, "codingCode", ref.Code); err != nil {
			return nil, err
		}
		c, err = s.store.ScopeCodeByCoding(ctx, ref.System, ref.Code)
	default:
		return nil, FieldErrorf(field, "name a scope code by scopeCodeId, or by codingSystem and codingCode")
	}
	return c, AsFieldError(err, field)
}

// StudyScopeRequests returns the scope codes a study requests.
func (s *Service) StudyScopeRequests(ctx context.Context, actor *Actor, studyID int64) ([]ScopeCode, error) {
	if _, err := s.readableStudy(ctx, actor, studyID); err != nil {
		return nil, err
	}
	return s.requestedScopes(ctx, studyID)
}

func (s *Service) requestedScopes(ctx context.Context, studyID int64) ([]ScopeCode, error) {
	reqs, err := s.store.ScopeRequests(ctx, []int64{studyID})
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(reqs))
	for i, r := range reqs {
		ids[i] = r.ScopeCodeID
	}
	return s.store.ScopeCodesByIDs(ctx, ids)
}

// AddScopeRequest makes a study ask its patients for a scope code.
// Returns CodeDuplicate if it already does.
func (s *Service) AddScopeRequest(ctx context.Context, actor *Actor, studyID int64, ref ScopeRef) (*ScopeCode, error) {
	st, err := s.managedStudy(ctx, actor, studyID)
	if err != nil {
		return nil, err
	}
	c, err := s.resolveScope(ctx, ref, "scopeCodeId")
	if err != nil {
		return nil, err
	}
	return c, s.store.CreateScopeRequest(ctx, ScopeRequest{StudyID: st.ID, ScopeCodeID: c.ID})
}

// RequestScope makes the study ask its patients for the scope code (the
// seed's form of AddScopeRequest). Returns CodeDuplicate if it already does.
func (s *Service) RequestScope(ctx context.Context, actor *Actor, study *Study, scopeCodeID int64) error {
	_, err := s.AddScopeRequest(ctx, actor, study.ID, ScopeRef{ID: scopeCodeID})
	return err
}

// RemoveScopeRequest stops a study asking for a scope code and forgets the
// answers given to it.
func (s *Service) RemoveScopeRequest(ctx context.Context, actor *Actor, studyID, scopeCodeID int64) error {
	if _, err := s.managedStudy(ctx, actor, studyID); err != nil {
		return err
	}
	reqs, err := s.store.ScopeRequests(ctx, []int64{studyID})
	if err != nil {
		return err
	}
	if !slices.Contains(reqs, ScopeRequest{StudyID: studyID, ScopeCodeID: scopeCodeID}) {
		return Errorf(CodeNotFound, "study %d does not request scope code %d", studyID, scopeCodeID)
	}
	if err := s.store.DeleteConsents(ctx, ConsentQuery{StudyIDs: []int64{studyID}, ScopeCodeIDs: []int64{scopeCodeID}}); err != nil {
		return err
	}
	return s.store.DeleteScopeRequest(ctx, ScopeRequest{StudyID: studyID, ScopeCodeID: scopeCodeID})
}

// StudyDataSources returns the data sources a study collects from.
func (s *Service) StudyDataSources(ctx context.Context, actor *Actor, studyID int64) ([]DataSource, error) {
	if _, err := s.readableStudy(ctx, actor, studyID); err != nil {
		return nil, err
	}
	return s.dataSourcesOfStudy(ctx, studyID)
}

func (s *Service) dataSourcesOfStudy(ctx context.Context, studyID int64) ([]DataSource, error) {
	links, err := s.store.StudyDataSources(ctx, StudyDataSourceQuery{StudyIDs: []int64{studyID}})
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(links))
	for i, l := range links {
		ids[i] = l.DataSourceID
	}
	return s.store.DataSourcesByIDs(ctx, ids)
}

// AddStudyDataSource records that the study collects from the data source.
// Returns CodeDuplicate if it already does.
func (s *Service) AddStudyDataSource(ctx context.Context, actor *Actor, studyID, dataSourceID int64) (*DataSource, error) {
	st, err := s.managedStudy(ctx, actor, studyID)
	if err != nil {
		return nil, err
	}
	ds, err := s.store.DataSourceByID(ctx, dataSourceID)
	if err != nil {
		return nil, AsFieldError(err, "dataSourceId")
	}
	return ds, s.store.CreateStudyDataSource(ctx, StudyDataSource{StudyID: st.ID, DataSourceID: ds.ID})
}

// RemoveStudyDataSource stops a study collecting from a data source.
func (s *Service) RemoveStudyDataSource(ctx context.Context, actor *Actor, studyID, dataSourceID int64) error {
	if _, err := s.managedStudy(ctx, actor, studyID); err != nil {
		return err
	}
	return s.store.DeleteStudyDataSource(ctx, StudyDataSource{StudyID: studyID, DataSourceID: dataSourceID})
}

// Enroll puts one patient in the study (the seed's form of EnrollPatients).
// Returns CodeDuplicate if the patient is already enrolled.
func (s *Service) Enroll(ctx context.Context, actor *Actor, study *Study, p *Patient) error {
	return s.EnrollPatients(ctx, actor, study.ID, []int64{p.ID})
}

// ConsentState is a patient's answer to one scope a study requests.
type ConsentState string

// The consent states.
const (
	ConsentPending ConsentState = "pending"
	ConsentGiven   ConsentState = "given"
	ConsentRefused ConsentState = "refused"
)

// EnrolledPatient is a patient enrolled in a study with the state of each
// scope the study requests, in the order of the study's scope codes.
type EnrolledPatient struct {
	Patient Patient
	States  []ConsentState
}

// StudyEnrollment is a page of a study's enrolled patients with their
// consent states: what the study asks for and how each patient answered.
type StudyEnrollment struct {
	Scopes   []ScopeCode
	Patients List[EnrolledPatient]
}

// StudyEnrollment lists a page of the patients enrolled in a study with
// the state (pending, given, refused) of each scope it requests; for
// practitioners who may read its organization (as StudyPatients).
func (s *Service) StudyEnrollment(ctx context.Context, actor *Actor, studyID int64, p Page) (*StudyEnrollment, error) {
	patients, err := s.StudyPatients(ctx, actor, studyID, p)
	if err != nil {
		return nil, err
	}
	scopes, err := s.requestedScopes(ctx, studyID)
	if err != nil {
		return nil, err
	}
	ids := idsOf(patients.Items, func(p Patient) int64 { return p.ID })
	answers, err := s.store.Consents(ctx, ConsentQuery{PatientIDs: ids, StudyIDs: []int64{studyID}})
	if err != nil {
		return nil, err
	}
	out := &StudyEnrollment{Scopes: scopes, Patients: List[EnrolledPatient]{Total: patients.Total, Items: []EnrolledPatient{}}}
	for _, pt := range patients.Items {
		ep := EnrolledPatient{Patient: pt, States: make([]ConsentState, len(scopes))}
		for i, sc := range scopes {
			ep.States[i] = ConsentPending
			for _, a := range answers {
				if a.PatientID == pt.ID && a.ScopeCodeID == sc.ID {
					ep.States[i] = map[bool]ConsentState{true: ConsentGiven, false: ConsentRefused}[a.Consented]
				}
			}
		}
		out.Patients.Items = append(out.Patients.Items, ep)
	}
	return out, nil
}
