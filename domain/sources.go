package domain

import (
	"context"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"time"
)

// NewDataSource is the input of CreateDataSource.
type NewDataSource struct {
	Name                  string
	Type                  DataSourceType
	SupportedScopeCodeIDs []int64
}

// DataSourcePatch changes a data source; nil fields stay.
type DataSourcePatch struct {
	Name                  *string
	Type                  *DataSourceType
	SupportedScopeCodeIDs *[]int64
	// Unchanged is the LastUpdated of the data source the change was
	// made from (the admin API's If-Match); nil: none (checkUnchanged).
	Unchanged *time.Time
}

// DataSourceView is a data source with its supported scope codes.
type DataSourceView struct {
	DataSource
	SupportedScopes []ScopeCode
}

var dataSourceTypes = []DataSourceType{DataSourcePersonalDevice, DataSourceMedicalDevice, DataSourcePatientApp}

func (s *Service) validateDataSource(ctx context.Context, d *DataSource) error {
	if d.Name == "" {
		return FieldErrorf("name", "is required")
	}
	if err := LimitName.Check("name", d.Name); err != nil {
		return err
	}
	if err := CheckItems("supportedScopeCodeIds", len(d.SupportedScopeCodeIDs)); err != nil {
		return err
	}
	if !slices.Contains(dataSourceTypes, d.Type) {
		return FieldErrorf("type", "%q is not a data source type (personal_device, medical_device, patient_app)", d.Type)
	}
	d.SupportedScopeCodeIDs = uniqueIDs(d.SupportedScopeCodeIDs)
	codes, err := s.store.ScopeCodesByIDs(ctx, d.SupportedScopeCodeIDs)
	if err != nil {
		return err
	}
	if len(codes) != len(d.SupportedScopeCodeIDs) {
		for _, id := range d.SupportedScopeCodeIDs {
			if !slices.ContainsFunc(codes, func(c ScopeCode) bool { return c.ID == id }) {
				return FieldErrorf("supportedScopeCodeIds", "scope code %d does not exist", id)
			}
		}
	}
	return nil
}

func requireSuperuser(actor *Actor, what string) error {
	if !actor.IsSuperuser() {
		return Errorf(CodeForbidden, "only a superuser may %s", what)
	}
	return nil
}

// CreateDataSource stores a data source; superusers only.
func (s *Service) CreateDataSource(ctx context.Context, actor *Actor, in NewDataSource) (*DataSourceView, error) {
	if err := requireSuperuser(actor, "create data sources"); err != nil {
		return nil, err
	}
	d := &DataSource{Name: strings.TrimSpace(in.Name), Type: in.Type, SupportedScopeCodeIDs: in.SupportedScopeCodeIDs}
	if err := s.validateDataSource(ctx, d); err != nil {
		return nil, err
	}
	if err := s.store.CreateDataSource(ctx, d); err != nil {
		return nil, err
	}
	return s.dataSourceView(ctx, d)
}

func (s *Service) dataSourceView(ctx context.Context, d *DataSource) (*DataSourceView, error) {
	views, err := s.dataSourceViews(ctx, []DataSource{*d})
	if err != nil {
		return nil, err
	}
	return &views[0], nil
}

// dataSourceViews adds the supported scope codes to data sources, in one
// read whatever their number (a page of the catalogue).
func (s *Service) dataSourceViews(ctx context.Context, ds []DataSource) ([]DataSourceView, error) {
	var ids []int64
	for _, d := range ds {
		ids = append(ids, d.SupportedScopeCodeIDs...)
	}
	codes, err := s.store.ScopeCodesByIDs(ctx, uniqueIDs(ids))
	if err != nil {
		return nil, err
	}
	out := make([]DataSourceView, len(ds))
	for i, d := range ds {
		out[i] = DataSourceView{DataSource: d, SupportedScopes: []ScopeCode{}}
		for _, c := range codes {
			if slices.Contains(d.SupportedScopeCodeIDs, c.ID) {
				out[i].SupportedScopes = append(out[i].SupportedScopes, c)
			}
		}
	}
	return out, nil
}

// DataSourceByID returns a data source; every authenticated user may read
// the catalogue.
func (s *Service) DataSourceByID(ctx context.Context, id int64) (*DataSourceView, error) {
	d, err := s.store.DataSourceByID(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.dataSourceView(ctx, d)
}

// DeviceByID is a data source as the Device projection shows it: the
// catalogue is readable by every user, patients included, so the actor
// is not consulted. Unlike DataSourceByID it reads no scope codes.
func (s *Service) DeviceByID(ctx context.Context, _ *Actor, id int64) (*DataSource, error) {
	return s.store.DataSourceByID(ctx, id)
}

// DataSourceByName returns the data source of that name.
func (s *Service) DataSourceByName(ctx context.Context, name string) (*DataSource, error) {
	return s.store.DataSourceByName(ctx, name)
}

// ListDataSources lists the catalogue of data sources.
func (s *Service) ListDataSources(ctx context.Context, p Page) (List[DataSourceView], error) {
	l, err := s.store.ListDataSources(ctx, p)
	if err != nil {
		return List[DataSourceView]{}, err
	}
	items, err := s.dataSourceViews(ctx, l.Items)
	if err != nil {
		return List[DataSourceView]{}, err
	}
	return List[DataSourceView]{Total: l.Total, Items: items}, nil
}

// UpdateDataSource changes a data source; superusers only. Updates of
// one data source sent at once each keep their change (applyAgain).
// Returns CodeForbidden, CodeNotFound, CodeInvalid, and a Stale
// CodeConflict if in.Unchanged is not the stored version.
func (s *Service) UpdateDataSource(ctx context.Context, actor *Actor, id int64, in DataSourcePatch) (*DataSourceView, error) {
	if err := requireSuperuser(actor, "change data sources"); err != nil {
		return nil, err
	}
	d, err := applyAgain(func() (*DataSource, error) { return s.updateDataSource(ctx, id, in) }, "data source %d", id)
	if err != nil {
		return nil, err
	}
	return s.dataSourceView(ctx, d)
}

// updateDataSource applies the patch to the stored record once.
func (s *Service) updateDataSource(ctx context.Context, id int64, in DataSourcePatch) (*DataSource, error) {
	d, err := s.store.DataSourceByID(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := checkUnchanged(in.Unchanged, d.LastUpdated, "data source %d", id); err != nil {
		return nil, err
	}
	old := *d
	if in.Name != nil {
		d.Name = strings.TrimSpace(*in.Name)
	}
	if in.Type != nil {
		d.Type = *in.Type
	}
	if in.SupportedScopeCodeIDs != nil {
		d.SupportedScopeCodeIDs = *in.SupportedScopeCodeIDs
	}
	if err := s.validateDataSource(ctx, d); err != nil {
		return nil, err
	}
	if reflect.DeepEqual(*d, old) {
		return d, nil // nothing to change: no new version
	}
	return d, s.store.UpdateDataSource(ctx, &old, d)
}

// DeleteDataSource removes a data source no study, no FHIR source and no
// observation uses (CodeConflict otherwise); superusers only.
func (s *Service) DeleteDataSource(ctx context.Context, actor *Actor, id int64) error {
	if err := requireSuperuser(actor, "delete data sources"); err != nil {
		return err
	}
	if _, err := s.store.DataSourceByID(ctx, id); err != nil {
		return err
	}
	links, err := s.store.StudyDataSources(ctx, StudyDataSourceQuery{DataSourceIDs: []int64{id}})
	if err != nil {
		return err
	}
	sources, err := s.store.ListFHIRSources(ctx, FHIRSourceQuery{DataSourceIDs: []int64{id}}, Page{Number: 1, Size: 1})
	if err != nil {
		return err
	}
	if len(links) > 0 || sources.Total > 0 {
		return Errorf(CodeConflict, "data source %d is used by %d studies and %d FHIR sources", id, len(links), sources.Total)
	}
	// Observations name their data source as their Device: it stays while
	// any does. (Check, then delete: FerretDB has no transactions; an
	// upload in between is the narrow race left.)
	holds, err := s.store.DataSourceHoldsObservations(ctx, id)
	if err != nil {
		return err
	}
	if holds {
		return Errorf(CodeConflict, "data source %d is the Device of stored observations", id)
	}
	return s.store.DeleteDataSource(ctx, id)
}

// ListScopeCodes lists the scope codes.
func (s *Service) ListScopeCodes(ctx context.Context, p Page) (List[ScopeCode], error) {
	return s.store.ListScopeCodes(ctx, p)
}

// CreateScopeCode adds a scope code; superusers only. Returns CodeDuplicate
// if the coding exists.
func (s *Service) CreateScopeCode(ctx context.Context, actor *Actor, system, code, text string) (*ScopeCode, error) {
	if err := requireSuperuser(actor, "create scope codes"); err != nil {
		return nil, err
	}
	c := &ScopeCode{System: strings.TrimSpace(system), Code: strings.TrimSpace(code), Text: strings.TrimSpace(text)}
	if err := validateScopeCode(c); err != nil {
		return nil, err
	}
	if err := s.store.CreateScopeCode(ctx, c); err != nil {
		return nil, err
	}
	return c, nil
}

func validateScopeCode(c *ScopeCode) error {
	if err := LimitIdentifier.checkTexts("codingSystem", c.System, "codingCode", c.Code); err != nil {
		return err
	}
	if err := LimitName.Check("text", c.Text); err != nil {
		return err
	}
	if u, err := url.Parse(c.System); err != nil || !u.IsAbs() {
		return FieldErrorf("codingSystem", "%q is not an absolute URI", c.System)
	}
	if c.Code == "" {
		return FieldErrorf("codingCode", "is required")
	}
	return nil
}

// EnsureScopeCode returns the scope code for (system, code), creating it
// with text when it does not exist yet (the seed's form of CreateScopeCode).
func (s *Service) EnsureScopeCode(ctx context.Context, system, code, text string) (*ScopeCode, error) {
	c, err := s.store.ScopeCodeByCoding(ctx, system, code)
	if !IsCode(err, CodeNotFound) {
		return c, err
	}
	c, err = s.CreateScopeCode(ctx, SystemActor(), system, code, text)
	if IsCode(err, CodeDuplicate) { // created concurrently
		return s.store.ScopeCodeByCoding(ctx, system, code)
	}
	return c, err
}

// CreateFHIRSource registers an upstream FHIR system for a patient: the
// calling patient when patientID is 0, else a patient whose data the actor
// may write.
func (s *Service) CreateFHIRSource(ctx context.Context, actor *Actor, patientID, dataSourceID int64, label string) (*FHIRSource, error) {
	if patientID == 0 {
		if actor.Patient == nil {
			return nil, FieldErrorf("patient", "is required: you are not a patient")
		}
		patientID = actor.Patient.ID
	}
	p, err := s.readablePatient(ctx, actor, patientID)
	if err != nil {
		return nil, AsFieldError(err, "patient")
	}
	if !actor.CanWritePatientData(p) {
		return nil, Errorf(CodeForbidden, "you may not add FHIR sources for patient %d", p.ID)
	}
	src := &FHIRSource{PatientID: p.ID, DataSourceID: dataSourceID, Label: strings.TrimSpace(label)}
	if src.Label == "" {
		return nil, FieldErrorf("label", "is required")
	}
	if err := LimitName.Check("label", src.Label); err != nil {
		return nil, err
	}
	if dataSourceID != 0 {
		if _, err := s.store.DataSourceByID(ctx, dataSourceID); err != nil {
			return nil, AsFieldError(err, "dataSource")
		}
	}
	if err := s.store.CreateFHIRSource(ctx, src); err != nil {
		return nil, err
	}
	return src, nil
}

// FHIRSourceByLabel returns the patient's FHIR source with that label.
func (s *Service) FHIRSourceByLabel(ctx context.Context, patientID int64, label string) (*FHIRSource, error) {
	return s.store.FHIRSourceByLabel(ctx, patientID, label)
}

// FHIRSourceByID returns a FHIR source whose patient the actor may read.
// Returns CodeNotFound, for a source of a patient the actor may not read
// too: it tells who is a patient.
func (s *Service) FHIRSourceByID(ctx context.Context, actor *Actor, id int64) (*FHIRSource, error) {
	src, err := s.store.FHIRSourceByID(ctx, id)
	if err != nil {
		return nil, err
	}
	if _, err := s.readablePatient(ctx, actor, src.PatientID); IsCode(err, CodeNotFound) {
		return nil, concealed(Errorf(CodeNotFound, "FHIR source %d does not exist", id))
	} else if err != nil {
		return nil, err
	}
	return src, nil
}

// ListFHIRSources lists the FHIR sources of the patients the actor may read.
func (s *Service) ListFHIRSources(ctx context.Context, actor *Actor, p Page) (List[FHIRSource], error) {
	q := FHIRSourceQuery{}
	if !actor.IsSuperuser() {
		ids, err := s.store.PatientIDs(ctx, actor.readablePatients())
		if err != nil {
			return List[FHIRSource]{}, err
		}
		q.PatientIDs = ids
	}
	return s.store.ListFHIRSources(ctx, q, p)
}

// FHIRSourcesOfPatient lists the FHIR sources of a patient the actor may
// read (CodeNotFound otherwise, as for a patient that does not exist).
func (s *Service) FHIRSourcesOfPatient(ctx context.Context, actor *Actor, patientID int64, p Page) (List[FHIRSource], error) {
	if _, err := s.PatientByID(ctx, actor, patientID); err != nil {
		return List[FHIRSource]{}, err
	}
	return s.store.ListFHIRSources(ctx, FHIRSourceQuery{PatientIDs: []int64{patientID}}, p)
}

// DeleteFHIRSource removes a FHIR source; the actor must be able to write
// its patient's data.
func (s *Service) DeleteFHIRSource(ctx context.Context, actor *Actor, id int64) error {
	src, err := s.FHIRSourceByID(ctx, actor, id)
	if err != nil {
		return err
	}
	p, err := s.store.PatientByID(ctx, src.PatientID)
	if err != nil {
		return err
	}
	if !actor.CanWritePatientData(p) {
		return Errorf(CodeForbidden, "you may not delete FHIR source %d", id)
	}
	holds, err := s.store.SourceHoldsResources(ctx, id)
	if err != nil {
		return err
	}
	if holds {
		return Errorf(CodeConflict, "FHIR source %d holds imported resources: delete them first", id)
	}
	return s.store.DeleteFHIRSource(ctx, id)
}
