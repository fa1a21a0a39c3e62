package repo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"exchange/domain"
	"exchange/fhirsearch"
	"exchange/omh"
)

const (
	colObservations          = "observations"
	colObservationIdentifier = "observation_identifiers"
)

// observationDoc is a document of the observations collection. The field
// names are those fhirsearch's configuration table searches.
type observationDoc struct {
	ID           int64           `bson:"_id"`
	PatientID    int64           `bson:"patientId"`
	DataSourceID int64           `bson:"dataSourceId"`
	Status       string          `bson:"status"`
	Code         string          `bson:"code"` // the native code, omh:heart-rate:2.0
	Codings      []codingDoc     `bson:"codings"`
	CodeTokens   []string        `bson:"codeTokens"` // every form of a token search that matches (fhirsearch.TokenKeys)
	Identifiers  []codedValueDoc `bson:"identifiers"`
	IDTokens     []string        `bson:"identifierTokens"`
	ContentType  string          `bson:"contentType"`
	Payload      []byte          `bson:"payload"`       // the data point, byte for byte
	OMH          bson.D          `bson:"omh,omitempty"` // the data point decoded, for analysts; never read back
	Effective    *effectiveDoc   `bson:"effective"`
	Start        *time.Time      `bson:"effectiveStart"`
	End          *time.Time      `bson:"effectiveEnd"`
	SortAsc      time.Time       `bson:"sortAsc"`  // effectiveStart, or the largest date when none
	SortDesc     time.Time       `bson:"sortDesc"` // effectiveStart, or the smallest date when none
	LastUpdated  time.Time       `bson:"lastUpdated"`
	LastUpdateUS int64           `bson:"lastUpdatedMicros"` // microseconds since 1970: BSON dates keep milliseconds
}

type codingDoc struct {
	System  string `bson:"system"`
	Code    string `bson:"code"`
	Display string `bson:"display,omitempty"`
}

// effectiveDoc is effective[x] as FHIR shows it, in the payload's offsets.
type effectiveDoc struct {
	DateTime string `bson:"dateTime,omitempty"`
	Start    string `bson:"start,omitempty"`
	End      string `bson:"end,omitempty"`
}

// observationIdentifierDoc claims one identifier for one observation.
type observationIdentifierDoc struct {
	System        string    `bson:"system"`
	Value         string    `bson:"value"`
	ObservationID int64     `bson:"observationId"`
	ClaimedAt     time.Time `bson:"claimedAt"`
}

// codeTokens lists the token keys of an observation's codings. A native
// code answers under both native systems: they are interchangeable.
func codeTokens(codings []domain.Coding) []string {
	var keys []string
	add := func(ks ...string) {
		for _, k := range ks {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	for _, c := range codings {
		if domain.IsNativeSystem(c.System) {
			add(fhirsearch.TokenKeys(domain.SystemOpenMHealth, c.Code)...)
			add(fhirsearch.TokenKeys(domain.SystemIEEE1752, c.Code)...)
		} else {
			add(fhirsearch.TokenKeys(c.System, c.Code)...)
		}
	}
	return keys
}

func identifierTokens(ids []domain.Identifier) []string {
	keys := []string{}
	for _, id := range ids {
		keys = append(keys, fhirsearch.TokenKeys(id.System, id.Value)...)
	}
	return keys
}

func (x observationDoc) observation() domain.Observation {
	o := domain.Observation{ID: x.ID, PatientID: x.PatientID, DataSourceID: x.DataSourceID, Status: x.Status, Code: x.Code,
		ContentType: x.ContentType, Payload: x.Payload, LastUpdated: time.UnixMicro(x.LastUpdateUS).UTC()}
	for _, c := range x.Codings {
		o.Codings = append(o.Codings, domain.Coding{System: c.System, Code: c.Code, Display: c.Display})
	}
	for _, id := range x.Identifiers {
		o.Identifiers = append(o.Identifiers, domain.Identifier{System: id.System, Value: id.Value})
	}
	if x.Effective != nil && x.Start != nil && x.End != nil {
		o.Effective = &omh.TimeFrame{Start: x.Start.UTC(), End: x.End.UTC(), DateTime: x.Effective.DateTime,
			PeriodStart: x.Effective.Start, PeriodEnd: x.Effective.End}
	}
	return o
}

// bsonDocument turns decoded JSON into a BSON document with sorted keys:
// integers that fit become int64, other numbers doubles.
func bsonDocument(m map[string]any) bson.D {
	if m == nil {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	d := make(bson.D, len(keys))
	for i, k := range keys {
		d[i] = bson.E{Key: k, Value: bsonValue(m[k])}
	}
	return d
}

func bsonValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		return bsonDocument(v)
	case []any:
		a := make(bson.A, len(v))
		for i, x := range v {
			a[i] = bsonValue(x)
		}
		return a
	case json.Number:
		if n, err := v.Int64(); err == nil {
			return n
		}
		f, _ := v.Float64() // finite: omh.Parse refused the rest
		if math.IsInf(f, 0) {
			return nil
		}
		return f
	}
	return v
}

// identifierClaims are the observation_identifiers documents that claim
// the observation's identifiers.
func identifierClaims(o *domain.Observation) []observationIdentifierDoc {
	out := make([]observationIdentifierDoc, len(o.Identifiers))
	for i, id := range o.Identifiers {
		out[i] = observationIdentifierDoc{id.System, id.Value, o.ID, o.LastUpdated.Truncate(time.Millisecond)}
	}
	return out
}

// ObservationDocuments are the documents CreateObservations inserts for
// an observation whose ID and LastUpdated are set: the observation and its
// identifier claims. Benchmarks insert them with the raw driver to
// compare against the service.
func ObservationDocuments(o *domain.Observation) (doc bson.Raw, claims []any, err error) {
	for _, c := range identifierClaims(o) {
		claims = append(claims, c)
	}
	doc, err = observationBSON(o)
	return doc, claims, err
}

// CreateObservations implements domain.ObservationStore. It reserves the
// batch's ids at once, claims every identifier in one unordered insert
// (the unique index refuses taken ones) and inserts the observations that
// kept all their claims in one unordered insert. Every path ends by
// releasing the claims of the observations known not to be stored. When an
// insert fails as a whole (not document by document), the claims of the
// whole batch count as unsure and are released with the rest; stored
// observations are then looked up, so that only the undecided entries fail.
func (d *DB) CreateObservations(ctx context.Context, obs []*domain.Observation) []error {
	errs := make([]error, len(obs))
	first, err := d.nextIDs(ctx, colObservations, len(obs))
	if err != nil {
		return failAll(errs, err)
	}
	now := d.now().UTC().Truncate(time.Microsecond)
	var claims []any
	var claimOwner []int
	for i, o := range obs {
		o.ID, o.LastUpdated = first+int64(i), now
		for _, c := range identifierClaims(o) {
			claims = append(claims, c)
			claimOwner = append(claimOwner, i)
		}
	}
	if len(claims) > 0 {
		for idx, werr := range insertErrors(d.c(colObservationIdentifier).InsertMany(ctx, claims, options.InsertMany().SetOrdered(false))) {
			if idx < 0 {
				// Which claims were written is unknown: store nothing, and
				// release whatever was claimed below.
				failAll(errs, werr)
				continue
			}
			i := claimOwner[idx]
			if errs[i] == nil {
				if isDuplicate(werr) {
					id := claims[idx].(observationIdentifierDoc)
					errs[i] = domain.Errorf(domain.CodeDuplicate, "identifier %s|%s belongs to another observation", id.System, id.Value)
				} else {
					errs[i] = werr
				}
			}
		}
	}
	var docs []any
	var docOwner []int
	for i, o := range obs {
		if errs[i] != nil {
			continue
		}
		doc, err := observationBSON(o)
		if err != nil {
			errs[i] = err
			continue
		}
		docs = append(docs, doc)
		docOwner = append(docOwner, i)
	}
	// maybeStored marks the failed entries that may have been stored all
	// the same: their claims stay.
	maybeStored := make([]bool, len(obs))
	if len(docs) > 0 {
		werrs := insertErrors(d.c(colObservations).InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)))
		for idx, werr := range werrs {
			if idx >= 0 {
				errs[docOwner[idx]] = werr
			}
		}
		if werr, ok := werrs[-1]; ok {
			d.settleInserted(ctx, obs, docOwner, errs, maybeStored, werr)
		}
	}
	var release []int64
	var released []int
	for i, o := range obs {
		if errs[i] != nil && !maybeStored[i] && len(o.Identifiers) > 0 {
			release = append(release, o.ID)
			released = append(released, i)
		}
	}
	if len(release) > 0 {
		if _, err := d.c(colObservationIdentifier).DeleteMany(context.WithoutCancel(ctx), bson.M{"observationId": bson.M{"$in": release}}); err != nil {
			for _, i := range released {
				errs[i] = fmt.Errorf("%w (and releasing its identifier claims failed: %v)", errs[i], err)
			}
		}
	}
	return errs
}

// settleInserted decides the entries of an insert of observations that
// failed as a whole, some of whose documents may be stored: a stored one
// succeeded, a missing one fails with cause. If the lookup fails, the
// undecided entries fail and are marked maybeStored.
func (d *DB) settleInserted(ctx context.Context, obs []*domain.Observation, owners []int, errs []error, maybeStored []bool, cause error) {
	ids := make([]int64, len(owners))
	for k, i := range owners {
		ids[k] = obs[i].ID
	}
	var found []idDoc
	err := d.findAll(context.WithoutCancel(ctx), colObservations, bson.M{"_id": bson.M{"$in": ids}}, &found,
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	stored := make(map[int64]bool, len(found))
	for _, x := range found {
		stored[x.ID] = true
	}
	for _, i := range owners {
		switch {
		case errs[i] != nil: // refused on its own
		case err != nil:
			errs[i] = fmt.Errorf("%w (and whether it was stored is unknown: %v)", cause, err)
			maybeStored[i] = true
		case !stored[obs[i].ID]:
			errs[i] = cause
		}
	}
}

// insertErrors maps the outcome of an unordered InsertMany to the failed
// indexes; index -1 holds an error that is not about one document.
func insertErrors(_ *mongo.InsertManyResult, err error) map[int]error {
	if err == nil {
		return nil
	}
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
		return map[int]error{-1: err}
	}
	out := map[int]error{}
	for _, we := range bwe.WriteErrors {
		out[we.Index] = mongo.WriteException{WriteErrors: []mongo.WriteError{we.WriteError}}
	}
	return out
}

func failAll(errs []error, err error) []error {
	for i := range errs {
		if errs[i] == nil {
			errs[i] = err
		}
	}
	return errs
}

// ObservationByID implements domain.ObservationStore.
func (d *DB) ObservationByID(ctx context.Context, id int64) (*domain.Observation, error) {
	var x observationDoc
	err := d.findOne(ctx, colObservations, bson.M{"_id": id}, &x, fmt.Sprintf("Observation/%d does not exist", id),
		options.FindOne().SetProjection(bson.M{"omh": 0}))
	if err != nil {
		return nil, err
	}
	o := x.observation()
	return &o, nil
}

// PatientHoldsObservations implements domain.ObservationStore: one
// lookup on the patient_id index, limited to one document.
func (d *DB) PatientHoldsObservations(ctx context.Context, patientID int64) (bool, error) {
	return d.anyObservation(ctx, "patientId", patientID)
}

// DataSourceHoldsObservations implements domain.ObservationStore: one
// lookup on the dataSource index.
func (d *DB) DataSourceHoldsObservations(ctx context.Context, dataSourceID int64) (bool, error) {
	return d.anyObservation(ctx, "dataSourceId", dataSourceID)
}

// anyObservation reports whether an observation has field = id.
func (d *DB) anyObservation(ctx context.Context, field string, id int64) (bool, error) {
	err := d.c(colObservations).FindOne(ctx, bson.D{{Key: field, Value: id}},
		options.FindOne().SetProjection(bson.D{{Key: "_id", Value: 1}})).Err()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return false, nil
	}
	return err == nil, err
}

// runSearch runs a plan: the page (one more entry than asked, to tell
// whether another page follows) and the count when the plan has a filter.
// Documents are decoded into D, then converted.
func runSearch[D, T any](ctx context.Context, d *DB, plan *domain.SearchPlan, conv func(D) T) (domain.SearchResult[T], error) {
	return runSearchRaw(ctx, d, plan, func(raw bson.Raw) (T, error) {
		var x D
		err := bson.Unmarshal(raw, &x)
		return conv(x), err
	})
}

// runSearchRaw is runSearch with a decoder of its own; each document it
// hands over is a copy, which the decoded value may share.
func runSearchRaw[T any](ctx context.Context, d *DB, plan *domain.SearchPlan, decode func(bson.Raw) (T, error)) (domain.SearchResult[T], error) {
	res := domain.SearchResult[T]{Items: []T{}}
	release, err := d.searchSlot(ctx)
	if err != nil {
		return res, err
	}
	defer release()
	if plan.Pipeline != nil {
		cur, err := d.c(plan.Collection).Aggregate(ctx, plan.Pipeline)
		if err != nil {
			return res, err
		}
		defer cur.Close(context.WithoutCancel(ctx))
		for cur.Next(ctx) {
			item, err := decode(slices.Clone(cur.Current))
			if err != nil {
				return res, err
			}
			res.Items = append(res.Items, item)
		}
		if err := cur.Err(); err != nil {
			return res, err
		}
		if len(res.Items) > plan.PageSize {
			res.Items, res.More = res.Items[:plan.PageSize], true
		}
	}
	if plan.Filter != nil {
		n, err := d.c(plan.Collection).CountDocuments(ctx, plan.Filter)
		if err != nil {
			return res, err
		}
		res.Total = &n
	}
	return res, nil
}

// SearchObservations implements domain.ObservationStore.
func (d *DB) SearchObservations(ctx context.Context, plan *domain.SearchPlan) (domain.SearchResult[domain.Observation], error) {
	return runSearchRaw(ctx, d, plan, observationFromBSON)
}

// SearchPatients implements domain.ProjectionStore.
func (d *DB) SearchPatients(ctx context.Context, plan *domain.SearchPlan) (domain.SearchResult[domain.Patient], error) {
	return runSearch(ctx, d, plan, patientDoc.patient)
}

// SearchUsers implements domain.ProjectionStore.
func (d *DB) SearchUsers(ctx context.Context, plan *domain.SearchPlan) (domain.SearchResult[domain.User], error) {
	return runSearch(ctx, d, plan, func(x userDoc) domain.User { return *x.user() })
}

// SearchOrganizations implements domain.ProjectionStore.
func (d *DB) SearchOrganizations(ctx context.Context, plan *domain.SearchPlan) (domain.SearchResult[domain.Organization], error) {
	return runSearch(ctx, d, plan, organizationDoc.organization)
}

// SearchStudies implements domain.ProjectionStore.
func (d *DB) SearchStudies(ctx context.Context, plan *domain.SearchPlan) (domain.SearchResult[domain.Study], error) {
	return runSearch(ctx, d, plan, studyDoc.study)
}

// SearchDataSources implements domain.ProjectionStore.
func (d *DB) SearchDataSources(ctx context.Context, plan *domain.SearchPlan) (domain.SearchResult[domain.DataSource], error) {
	return runSearch(ctx, d, plan, dataSourceDoc.dataSource)
}

// ObservationCodes implements domain.ObservationStore: a distinct over the
// patient's observations (the patient_* indexes narrow it on MongoDB).
func (d *DB) ObservationCodes(ctx context.Context, patientID int64) ([]string, error) {
	var codes []string
	if err := d.c(colObservations).Distinct(ctx, "code", bson.D{{Key: "patientId", Value: patientID}}).Decode(&codes); err != nil {
		return nil, err
	}
	slices.Sort(codes)
	return codes, nil
}

// DataSourcesWithObservations implements domain.ObservationStore: a
// distinct of dataSourceId over the patients' observations from those
// data sources.
func (d *DB) DataSourcesWithObservations(ctx context.Context, dataSourceIDs, patientIDs []int64) ([]int64, error) {
	filter := bson.D{{Key: "patientId", Value: bson.M{"$in": patientIDs}}, {Key: "dataSourceId", Value: bson.M{"$in": dataSourceIDs}}}
	var ids []int64
	if err := d.c(colObservations).Distinct(ctx, "dataSourceId", filter).Decode(&ids); err != nil {
		return nil, err
	}
	slices.Sort(ids)
	return ids, nil
}
