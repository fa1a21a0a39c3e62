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

func (x dataSourceDoc) dataSource() domain.DataSource {
	return domain.DataSource{ID: x.ID, Name: x.Name, Type: domain.DataSourceType(x.Type), SupportedScopeCodeIDs: x.SupportedScopeCodeIDs, LastUpdated: x.LastUpdated.UTC()}
}

func toDataSourceDoc(s *domain.DataSource) dataSourceDoc {
	return dataSourceDoc{s.ID, s.Name, string(s.Type), nonNilIDs(s.SupportedScopeCodeIDs), s.LastUpdated}
}

// fhirSourceDoc is a document of the fhir_sources collection;
// dataSourceId is null when the source names no data source.
type fhirSourceDoc struct {
	ID           int64     `bson:"_id"`
	PatientID    int64     `bson:"patientId"`
	DataSourceID *int64    `bson:"dataSourceId"`
	Label        string    `bson:"label"`
	FHIRBase     string    `bson:"fhirBase,omitempty"` // the upstream FHIR base, when known
	LastUpdated  time.Time `bson:"lastUpdated"`
}

func (x fhirSourceDoc) fhirSource() domain.FHIRSource {
	s := domain.FHIRSource{ID: x.ID, PatientID: x.PatientID, Label: x.Label, FHIRBase: x.FHIRBase, LastUpdated: x.LastUpdated.UTC()}
	if x.DataSourceID != nil {
		s.DataSourceID = *x.DataSourceID
	}
	return s
}

// CreateDataSource implements domain.DataSourceStore.
func (d *DB) CreateDataSource(ctx context.Context, s *domain.DataSource) error {
	id, err := d.nextID(ctx, colDataSources)
	if err != nil {
		return err
	}
	s.ID, s.LastUpdated = id, d.nowMillis()
	_, err = d.c(colDataSources).InsertOne(ctx, toDataSourceDoc(s))
	return err
}

// DataSourceByID implements domain.DataSourceStore.
func (d *DB) DataSourceByID(ctx context.Context, id int64) (*domain.DataSource, error) {
	var x dataSourceDoc
	if err := d.findOne(ctx, colDataSources, bson.M{"_id": id}, &x, fmt.Sprintf("data source %d does not exist", id)); err != nil {
		return nil, err
	}
	s := x.dataSource()
	return &s, nil
}

// DataSourceByName implements domain.DataSourceStore.
func (d *DB) DataSourceByName(ctx context.Context, name string) (*domain.DataSource, error) {
	var x dataSourceDoc
	err := d.findOne(ctx, colDataSources, bson.M{"name": name}, &x, fmt.Sprintf("no data source is named %q", name),
		options.FindOne().SetSort(byID))
	if err != nil {
		return nil, err
	}
	s := x.dataSource()
	return &s, nil
}

// DataSourcesByIDs implements domain.DataSourceStore.
func (d *DB) DataSourcesByIDs(ctx context.Context, ids []int64) ([]domain.DataSource, error) {
	var docs []dataSourceDoc
	if err := d.findAll(ctx, colDataSources, withIn(nil, "_id", nonNilIDs(ids)), &docs, options.Find().SetSort(byID)); err != nil {
		return nil, err
	}
	return convert(docs, dataSourceDoc.dataSource), nil
}

// ListDataSources implements domain.DataSourceStore.
func (d *DB) ListDataSources(ctx context.Context, p domain.Page) (domain.List[domain.DataSource], error) {
	var docs []dataSourceDoc
	total, err := d.listPage(ctx, colDataSources, nil, byID, p, &docs)
	return domain.List[domain.DataSource]{Items: convert(docs, dataSourceDoc.dataSource), Total: total}, err
}

// UpdateDataSource implements domain.DataSourceStore: a compare-and-set
// on the version old was read at (replaceVersion).
func (d *DB) UpdateDataSource(ctx context.Context, old, s *domain.DataSource) error {
	s.LastUpdated = d.nextVersion(old.LastUpdated)
	return d.replaceRecord(ctx, colDataSources, s.ID, old.LastUpdated, toDataSourceDoc(s), "data source")
}

// DeleteDataSource implements domain.DataSourceStore.
func (d *DB) DeleteDataSource(ctx context.Context, id int64) error {
	return d.deleteOne(ctx, colDataSources, bson.M{"_id": id}, "data source %d does not exist", id)
}

// CreateFHIRSource implements domain.FHIRSourceStore.
func (d *DB) CreateFHIRSource(ctx context.Context, s *domain.FHIRSource) error {
	id, err := d.nextID(ctx, colFHIRSources)
	if err != nil {
		return err
	}
	s.ID, s.LastUpdated = id, d.nowMillis()
	_, err = d.c(colFHIRSources).InsertOne(ctx, fhirSourceDoc{s.ID, s.PatientID, optionalID(s.DataSourceID), s.Label, s.FHIRBase, s.LastUpdated})
	return err
}

// FHIRSourceByID implements domain.FHIRSourceStore.
func (d *DB) FHIRSourceByID(ctx context.Context, id int64) (*domain.FHIRSource, error) {
	var x fhirSourceDoc
	if err := d.findOne(ctx, colFHIRSources, bson.M{"_id": id}, &x, fmt.Sprintf("FHIR source %d does not exist", id)); err != nil {
		return nil, err
	}
	s := x.fhirSource()
	return &s, nil
}

// FHIRSourceByLabel implements domain.FHIRSourceStore.
func (d *DB) FHIRSourceByLabel(ctx context.Context, patientID int64, label string) (*domain.FHIRSource, error) {
	var x fhirSourceDoc
	err := d.findOne(ctx, colFHIRSources, bson.M{"patientId": patientID, "label": label}, &x,
		fmt.Sprintf("patient %d has no FHIR source labelled %q", patientID, label), options.FindOne().SetSort(byID))
	if err != nil {
		return nil, err
	}
	s := x.fhirSource()
	return &s, nil
}

// ListFHIRSources implements domain.FHIRSourceStore.
func (d *DB) ListFHIRSources(ctx context.Context, q domain.FHIRSourceQuery, p domain.Page) (domain.List[domain.FHIRSource], error) {
	var docs []fhirSourceDoc
	filter := withIn(withIn(nil, "patientId", q.PatientIDs), "dataSourceId", q.DataSourceIDs)
	total, err := d.listPage(ctx, colFHIRSources, filter, byID, p, &docs)
	return domain.List[domain.FHIRSource]{Items: convert(docs, fhirSourceDoc.fhirSource), Total: total}, err
}

// DeleteFHIRSource implements domain.FHIRSourceStore.
func (d *DB) DeleteFHIRSource(ctx context.Context, id int64) error {
	return d.deleteOne(ctx, colFHIRSources, bson.M{"_id": id}, "FHIR source %d does not exist", id)
}
