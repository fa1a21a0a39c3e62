package repo

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"exchange/domain"
)

// byID sorts lists by id, the order every list of the admin API has.
var byID = bson.D{{Key: "_id", Value: 1}}

// withIn adds field ∈ values to the filter when values is not nil; an
// empty, non-nil list matches nothing, as domain queries promise.
func withIn(f bson.D, field string, values []int64) bson.D {
	if values == nil {
		return f
	}
	return append(f, bson.E{Key: field, Value: bson.M{"$in": values}})
}

// listPage decodes one page of the documents matching filter into out and
// returns how many match in all.
func (d *DB) listPage(ctx context.Context, col string, filter bson.D, sort bson.D, p domain.Page, out any) (int64, error) {
	if filter == nil {
		filter = bson.D{}
	}
	total, err := d.count(ctx, col, filter)
	if err != nil {
		return 0, err
	}
	opts := options.Find().SetSort(sort).SetSkip(p.Offset()).SetLimit(int64(p.Size))
	return total, d.findAll(ctx, col, filter, out, opts)
}

// mustMatch turns an update that matched nothing into CodeNotFound.
func mustMatch(matched int64, notFound string, args ...any) error {
	if matched == 0 {
		return domain.Errorf(domain.CodeNotFound, notFound, args...)
	}
	return nil
}

// deleteOne removes the document matching filter; CodeNotFound if none.
func (d *DB) deleteOne(ctx context.Context, col string, filter any, notFound string, args ...any) error {
	res, err := d.c(col).DeleteOne(ctx, filter)
	if err != nil {
		return err
	}
	return mustMatch(res.DeletedCount, notFound, args...)
}

// convert maps a slice of documents to domain values.
func convert[D, T any](docs []D, f func(D) T) []T {
	out := make([]T, len(docs))
	for i, x := range docs {
		out[i] = f(x)
	}
	return out
}

// nonNilIDs makes a nil list empty: for lookups by a list of ids, where
// no ids means no documents.
func nonNilIDs(ids []int64) []int64 {
	if ids == nil {
		return []int64{}
	}
	return ids
}

// idDoc is a document projected to its integer id.
type idDoc struct {
	ID int64 `bson:"_id"`
}

// nextVersion is the lastUpdated of a record replacing one last updated
// at old: now, or a millisecond after old if now is not later, so that
// every replace moves the version on.
func (d *DB) nextVersion(old time.Time) time.Time {
	next := d.nowMillis()
	if !next.After(old) {
		next = old.UTC().Add(time.Millisecond)
	}
	return next
}

// replaceVersion replaces the document id of col with doc if its
// lastUpdated is still old, the version the change was read from (doc
// carries the next one, nextVersion); CodeVersionMismatch, and nothing
// changed, if another change came first; CodeNotFound if it is gone. what
// and args name the record in those errors. On FerretDB the caller holds
// the record's stripe (see stripes).
func (d *DB) replaceVersion(ctx context.Context, col string, id any, old time.Time, doc any, what string, args ...any) error {
	res, err := d.c(col).ReplaceOne(ctx, bson.M{"_id": id, "lastUpdated": old.UTC()}, doc)
	if err != nil {
		return err
	}
	if res.MatchedCount > 0 {
		return nil
	}
	stored, err := d.exists(ctx, col, id)
	switch {
	case err != nil:
		return err
	case !stored:
		return domain.Errorf(domain.CodeNotFound, what+" does not exist", args...)
	}
	return domain.Errorf(domain.CodeVersionMismatch, what+" changed meanwhile", args...)
}

// replaceRecord is replaceVersion for the admin-edited records
// (organizations, studies, data sources), holding the id's stripe of
// recordWrites.
func (d *DB) replaceRecord(ctx context.Context, col string, id int64, old time.Time, doc any, what string) error {
	stripe := d.recordWrites.of(id)
	stripe.Lock()
	defer stripe.Unlock()
	return d.replaceVersion(ctx, col, id, old, doc, what+" %d", id)
}
