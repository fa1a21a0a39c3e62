package repo

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"exchange/domain"
)

// dataSourceDoc is a document of the data_sources collection.
type dataSourceDoc struct {
	ID                    int64     `bson:"_id"`
	Name                  string    `bson:"name"`
	Type                  string    `bson:"type"`
	SupportedScopeCodeIDs []int64   `bson:"supportedScopeCodeIds"`
	LastUpdated           time.Time `bson:"lastUpdated"`
}

// fhirSourceDoc is a document of the fhir_sources collection;
// dataSourceId is null when the source names no data source.
type fhirSourceDoc struct {
	ID           int64     `bson:"_id"`
	PatientID    int64     `bson:"patientId"`
	DataSourceID *int64    `bson:"dataSourceId"`
	Label        string    `bson:"label"`
	LastUpdated  time.Time `bson:"lastUpdated"`
}

// CreateDataSource implements domain.DataSourceStore.
func (d *DB) CreateDataSource(ctx context.Context, s *domain.DataSource) error {
	id, err := d.nextID(ctx, colDataSources)
	if err != nil {
		return err
	}
	s.ID, s.LastUpdated = id, d.nowMillis()
	scopes := s.SupportedScopeCodeIDs
	if scopes == nil {
		scopes = []int64{}
	}
	_, err = d.c(colDataSources).InsertOne(ctx, dataSourceDoc{s.ID, s.Name, string(s.Type), scopes, s.LastUpdated})
	return err
}

// DataSourceByName implements domain.DataSourceStore.
func (d *DB) DataSourceByName(ctx context.Context, name string) (*domain.DataSource, error) {
	var x dataSourceDoc
	err := d.findOne(ctx, colDataSources, bson.M{"name": name}, &x, fmt.Sprintf("no data source is named %q", name),
		options.FindOne().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, err
	}
	return &domain.DataSource{ID: x.ID, Name: x.Name, Type: domain.DataSourceType(x.Type), SupportedScopeCodeIDs: x.SupportedScopeCodeIDs, LastUpdated: x.LastUpdated.UTC()}, nil
}

// CreateFHIRSource implements domain.FHIRSourceStore.
func (d *DB) CreateFHIRSource(ctx context.Context, s *domain.FHIRSource) error {
	id, err := d.nextID(ctx, colFHIRSources)
	if err != nil {
		return err
	}
	s.ID, s.LastUpdated = id, d.nowMillis()
	_, err = d.c(colFHIRSources).InsertOne(ctx, fhirSourceDoc{s.ID, s.PatientID, optionalID(s.DataSourceID), s.Label, s.LastUpdated})
	return err
}

// FHIRSourceByLabel implements domain.FHIRSourceStore.
func (d *DB) FHIRSourceByLabel(ctx context.Context, patientID int64, label string) (*domain.FHIRSource, error) {
	var x fhirSourceDoc
	err := d.findOne(ctx, colFHIRSources, bson.M{"patientId": patientID, "label": label}, &x,
		fmt.Sprintf("patient %d has no FHIR source labelled %q", patientID, label), options.FindOne().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, err
	}
	s := &domain.FHIRSource{ID: x.ID, PatientID: x.PatientID, Label: x.Label, LastUpdated: x.LastUpdated.UTC()}
	if x.DataSourceID != nil {
		s.DataSourceID = *x.DataSourceID
	}
	return s, nil
}
