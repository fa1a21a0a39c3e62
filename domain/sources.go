package domain

import (
	"context"
	"slices"
	"strings"
)

// NewDataSource is the input of CreateDataSource.
type NewDataSource struct {
	Name                  string
	Type                  DataSourceType
	SupportedScopeCodeIDs []int64
}

// CreateDataSource stores a data source; superusers only.
func (s *Service) CreateDataSource(ctx context.Context, actor *Actor, in NewDataSource) (*DataSource, error) {
	if !actor.IsSuperuser() {
		return nil, Errorf(CodeForbidden, "only a superuser may create data sources")
	}
	d := &DataSource{Name: strings.TrimSpace(in.Name), Type: in.Type, SupportedScopeCodeIDs: in.SupportedScopeCodeIDs}
	if d.Name == "" {
		return nil, FieldErrorf("name", "is required")
	}
	if !slices.Contains([]DataSourceType{DataSourcePersonalDevice, DataSourceMedicalDevice, DataSourcePatientApp}, d.Type) {
		return nil, FieldErrorf("type", "%q is not a data source type (personal_device, medical_device, patient_app)", d.Type)
	}
	if err := s.store.CreateDataSource(ctx, d); err != nil {
		return nil, err
	}
	return d, nil
}

// DataSourceByName returns the data source of that name.
func (s *Service) DataSourceByName(ctx context.Context, name string) (*DataSource, error) {
	return s.store.DataSourceByName(ctx, name)
}

// CreateFHIRSource registers an upstream FHIR system for a patient; the actor
// must be able to write the patient's data.
func (s *Service) CreateFHIRSource(ctx context.Context, actor *Actor, p *Patient, dataSourceID int64, label string) (*FHIRSource, error) {
	if !actor.CanWritePatientData(p) {
		return nil, Errorf(CodeForbidden, "you may not add FHIR sources for patient %d", p.ID)
	}
	src := &FHIRSource{PatientID: p.ID, DataSourceID: dataSourceID, Label: strings.TrimSpace(label)}
	if err := s.store.CreateFHIRSource(ctx, src); err != nil {
		return nil, err
	}
	return src, nil
}

// FHIRSourceByLabel returns the patient's FHIR source with that label.
func (s *Service) FHIRSourceByLabel(ctx context.Context, patientID int64, label string) (*FHIRSource, error) {
	return s.store.FHIRSourceByLabel(ctx, patientID, label)
}
