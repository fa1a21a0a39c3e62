package repo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"exchange/domain"
)

// colResources is the imported store: every type in one collection, so
// that a search is one $match whatever the type (fhirsearch plans on it).
const colResources = "resources"

// resourceDoc is a document of the resources collection.
type resourceDoc struct {
	ID              string    `bson:"_id"` // a UUID
	ResourceType    string    `bson:"resourceType"`
	SourceID        int64     `bson:"sourceId"`
	SourcePatientID int64     `bson:"sourcePatientId"`
	UpstreamID      string    `bson:"upstreamId,omitempty"`
	UniqueKey       string    `bson:"uniqueKey"`           // sourceId|type|upstreamId, or sourceId|type|#hash of the body without one
	LastWrite       string    `bson:"lastWrite,omitempty"` // hash of the request that made this version
	VersionID       int64     `bson:"versionId"`
	LastUpdated     time.Time `bson:"lastUpdated"`
	// JSON is the resource as served, byte for byte: decimals keep their
	// precision there, not in Resource.
	JSON string `bson:"json"`
	// Resource is JSON decoded, for analysts; never read back.
	Resource bson.D `bson:"resource,omitempty"`
	// Search holds "param|key" strings (fhirsearch.Catalog.Index): one multikey
	// index answers every token, string and reference parameter.
	Search  []string                 `bson:"search"`
	Dates   map[string]spanDoc       `bson:"dates,omitempty"`
	Numbers map[string]numberSpanDoc `bson:"numbers,omitempty"`
	// SortAsc and SortDesc are the start of the date parameter, or the
	// largest (smallest) date when the resource has none: undated
	// resources sort last both ways.
	SortAsc  time.Time `bson:"sortAsc"`
	SortDesc time.Time `bson:"sortDesc"`
}

// spanDoc is the [start, end] of a date parameter: two scalars a range
// query compares, where an array of ranges would need $elemMatch.
type spanDoc struct {
	Start time.Time `bson:"start"`
	End   time.Time `bson:"end"`
}

// numberSpanDoc is the [low, high] of a number or quantity parameter, as
// spanDoc is of a date.
type numberSpanDoc struct {
	Low  float64 `bson:"low"`
	High float64 `bson:"high"`
}

func newResourceDoc(r *domain.Resource) *resourceDoc {
	doc := &resourceDoc{ID: r.ID, ResourceType: r.Type, SourceID: r.SourceID, SourcePatientID: r.SourcePatientID,
		UpstreamID: r.UpstreamID, UniqueKey: r.UniqueKey, LastWrite: r.LastWrite, VersionID: r.VersionID, LastUpdated: r.LastUpdated,
		JSON: string(r.JSON), Resource: bsonDocument(r.Object), Search: r.Index.Keys,
		SortAsc: domain.SortLastAscending, SortDesc: domain.SortLastDescending}
	if doc.Search == nil {
		doc.Search = []string{}
	}
	if len(r.Index.Dates) > 0 {
		doc.Dates = map[string]spanDoc{}
		for param, span := range r.Index.Dates {
			doc.Dates[param] = spanDoc{Start: span.Start, End: span.End}
		}
	}
	if len(r.Index.Numbers) > 0 {
		doc.Numbers = map[string]numberSpanDoc{}
		for param, span := range r.Index.Numbers {
			doc.Numbers[param] = numberSpanDoc{Low: span.Low, High: span.High}
		}
	}
	if r.Index.SortDate != nil {
		doc.SortAsc, doc.SortDesc = *r.Index.SortDate, *r.Index.SortDate
	}
	return doc
}

func (doc resourceDoc) resource() domain.Resource {
	r := domain.Resource{ID: doc.ID, Type: doc.ResourceType, SourceID: doc.SourceID, SourcePatientID: doc.SourcePatientID,
		UpstreamID: doc.UpstreamID, UniqueKey: doc.UniqueKey, LastWrite: doc.LastWrite, VersionID: doc.VersionID, LastUpdated: doc.LastUpdated.UTC(),
		JSON: []byte(doc.JSON), Index: domain.ResourceIndex{Keys: doc.Search}}
	if !doc.SortAsc.Equal(domain.SortLastAscending) {
		date := doc.SortAsc.UTC()
		r.Index.SortDate = &date
	}
	return r
}

// withoutParsedCopy leaves out what reads never use.
var withoutParsedCopy = bson.D{{Key: "resource", Value: 0}}

// CreateResources implements domain.ResourceStore: one unordered insert,
// whose unique indexes (the _id, which derives from the unique key, and
// uniqueKey itself for resources stored before ids did) refuse what is
// already stored. Each resource is one document: a crash stores it or
// not, and the retry finds it.
func (d *DB) CreateResources(ctx context.Context, rs []*domain.Resource) []error {
	errs := make([]error, len(rs))
	docs := make([]any, len(rs))
	for i, r := range rs {
		docs[i] = newResourceDoc(r)
	}
	var taken []int // indexes into rs
	for idx, werr := range insertErrors(d.c(colResources).InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))) {
		if idx < 0 {
			return failAll(errs, werr)
		}
		if isDuplicate(werr) {
			taken = append(taken, idx)
		}
		errs[idx] = werr
	}
	if len(taken) > 0 {
		d.nameStored(ctx, rs, taken, errs)
	}
	return errs
}

// nameStored gives each resource refused as taken its duplicate error,
// naming the resource stored under its unique key: Stored when that one
// was made by the same create. The stored ones are read in one query (two
// when some were stored before ids derived from the key): on FerretDB any
// lookup reads the whole collection, so one per resource would not do.
func (d *DB) nameStored(ctx context.Context, rs []*domain.Resource, taken []int, errs []error) {
	byKey := map[string]resourceDoc{}
	read := func(field string, values []string) error {
		var found []resourceDoc
		err := d.findAll(ctx, colResources, bson.M{field: bson.M{"$in": values}}, &found,
			options.Find().SetProjection(bson.M{"_id": 1, "uniqueKey": 1, "lastWrite": 1}))
		for _, x := range found {
			byKey[x.UniqueKey] = x
		}
		return err
	}
	ids := make([]string, len(taken))
	for k, i := range taken {
		ids[k] = rs[i].ID
	}
	err := read("_id", ids)
	var legacy []string
	for _, i := range taken {
		if _, ok := byKey[rs[i].UniqueKey]; !ok {
			legacy = append(legacy, rs[i].UniqueKey)
		}
	}
	if err == nil && len(legacy) > 0 {
		err = read("uniqueKey", legacy)
	}
	for _, i := range taken {
		r := rs[i]
		x, ok := byKey[r.UniqueKey]
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("find the %s stored under %s: %w", r.Type, r.UniqueKey, err)
		case !ok:
			errs[i] = domain.Errorf(domain.CodeConflict, "the %s stored under the same key changed meanwhile; send it again", r.Type)
		default:
			errs[i] = duplicateResource(r, x)
		}
	}
}

// duplicateResource is the error of r, refused because x holds its
// unique key.
func duplicateResource(r *domain.Resource, x resourceDoc) error {
	ref := r.Type + "/" + x.ID
	switch {
	case r.UpstreamID == "":
		return &domain.Error{Code: domain.CodeDuplicate, Stored: ref,
			Message: fmt.Sprintf("FHIR source %d already sent this %s: it is stored as %s", r.SourceID, r.Type, ref)}
	case x.LastWrite == r.LastWrite || x.LastWrite == "": // "": stored before writes were keyed; as the same
		return &domain.Error{Code: domain.CodeDuplicate, Stored: ref,
			Message: fmt.Sprintf("FHIR source %d already sent %s/%s: it is stored as %s", r.SourceID, r.Type, r.UpstreamID, ref)}
	}
	return domain.Errorf(domain.CodeDuplicate, "FHIR source %d already sent %s/%s, and the stored version is not this one: it is %s; update it with PUT",
		r.SourceID, r.Type, r.UpstreamID, ref)
}

// ResourceByID implements domain.ResourceStore. It looks the id up alone
// and checks the type after: FerretDB finds an _id without reading every
// document only when the filter is that _id.
func (d *DB) ResourceByID(ctx context.Context, resourceType, id string) (*domain.Resource, error) {
	var doc resourceDoc
	missing := resourceType + "/" + id + " does not exist"
	err := d.findOne(ctx, colResources, bson.D{{Key: "_id", Value: id}}, &doc, missing, options.FindOne().SetProjection(withoutParsedCopy))
	if err != nil {
		return nil, err
	}
	if doc.ResourceType != resourceType {
		return nil, domain.Errorf(domain.CodeNotFound, "%s", missing)
	}
	r := doc.resource()
	return &r, nil
}

// ReplaceResource implements domain.ResourceStore: the replacement is
// conditional on the version it follows, so that of two concurrent
// updates one fails instead of silently undoing the other (within this
// process, under the resource's stripe: FerretDB's filter is no atomic
// step).
func (d *DB) ReplaceResource(ctx context.Context, r *domain.Resource) error {
	stripe := d.resourceWrites.ofString(r.ID)
	stripe.Lock()
	defer stripe.Unlock()
	res, err := d.c(colResources).ReplaceOne(ctx, versionFilter(r.Type, r.ID, r.VersionID-1), newResourceDoc(r))
	if err != nil {
		return err
	}
	if res.MatchedCount == 0 {
		return d.versionError(ctx, r.Type, r.ID, r.VersionID-1)
	}
	return nil
}

// DeleteResource implements domain.ResourceStore: conditional on the
// version, as ReplaceResource.
func (d *DB) DeleteResource(ctx context.Context, resourceType, id string, version int64) error {
	stripe := d.resourceWrites.ofString(id)
	stripe.Lock()
	defer stripe.Unlock()
	res, err := d.c(colResources).DeleteOne(ctx, versionFilter(resourceType, id, version))
	if err != nil {
		return err
	}
	if res.DeletedCount == 0 {
		return d.versionError(ctx, resourceType, id, version)
	}
	return nil
}

func versionFilter(resourceType, id string, version int64) bson.D {
	return bson.D{{Key: "_id", Value: id}, {Key: "resourceType", Value: resourceType}, {Key: "versionId", Value: version}}
}

// versionError tells why a write conditional on a version matched
// nothing: the resource is gone, or it moved on.
func (d *DB) versionError(ctx context.Context, resourceType, id string, version int64) error {
	current, err := d.ResourceByID(ctx, resourceType, id)
	if err != nil {
		return err
	}
	return domain.Errorf(domain.CodeVersionMismatch, "%s/%s changed meanwhile: it is at version %d, not %d", resourceType, id, current.VersionID, version)
}

// SearchResources implements domain.ResourceStore.
func (d *DB) SearchResources(ctx context.Context, plan *domain.SearchPlan) (domain.SearchResult[domain.Resource], error) {
	return runSearch(ctx, d, plan, resourceDoc.resource)
}

// SourceHoldsResources implements domain.ResourceStore.
func (d *DB) SourceHoldsResources(ctx context.Context, sourceID int64) (bool, error) {
	err := d.c(colResources).FindOne(ctx, bson.D{{Key: "sourceId", Value: sourceID}},
		options.FindOne().SetProjection(bson.D{{Key: "_id", Value: 1}})).Err()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return false, nil
	}
	return err == nil, err
}

// ResourceTypeCounts implements domain.ResourceStore: one $group over the
// source's resources (the source index), counted with $sum, which FerretDB
// supports.
func (d *DB) ResourceTypeCounts(ctx context.Context, sourceID int64) ([]domain.ResourceTypeCount, error) {
	cur, err := d.c(colResources).Aggregate(ctx, bson.A{
		bson.D{{Key: "$match", Value: bson.D{{Key: "sourceId", Value: sourceID}}}},
		bson.D{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$resourceType"}, {Key: "count", Value: bson.D{{Key: "$sum", Value: 1}}}}}},
		bson.D{{Key: "$sort", Value: bson.D{{Key: "_id", Value: 1}}}},
	})
	if err != nil {
		return nil, err
	}
	var rows []struct {
		Type  string `bson:"_id"`
		Count int64  `bson:"count"`
	}
	if err := cur.All(ctx, &rows); err != nil {
		return nil, err
	}
	out := make([]domain.ResourceTypeCount, len(rows))
	for i, r := range rows {
		out[i] = domain.ResourceTypeCount{Type: r.Type, Count: r.Count}
	}
	return out, nil
}
