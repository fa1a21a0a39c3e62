package repo

import (
	"context"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
)

// The search runners: every search of the FHIR API and of the admin
// API's lists runs a plan (domain.SearchPlan, made by fhirsearch) through
// runSearch, under one of the embedded database's search slots.

// runSearch runs a plan: the page (one more entry than asked, to tell
// whether another page follows) and the count when the plan has a filter.
// Documents are decoded into D, then converted.
func runSearch[D, T any](ctx context.Context, d *DB, plan *domain.SearchPlan, conv func(D) T) (domain.SearchResult[T], error) {
	return runSearchRaw(ctx, d, plan, func(raw bson.Raw) (T, error) {
		var x D
		err := bson.Unmarshal(slices.Clone(raw), &x)
		return conv(x), err
	})
}

// pageHint is the number of items a page's buffers are first made for:
// a page of the default size or of 50 without growing them, a page of
// 1,000 (the largest) by growing them a few times, and a page far shorter
// than its size without holding much.
const pageHint = 101

// runSearchRaw is runSearch with a decoder of its own; each document it
// hands over is the cursor's buffer, valid until the next document: the
// decoder copies what it keeps.
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
		res.Items = make([]T, 0, min(plan.PageSize+1, pageHint))
		for cur.Next(ctx) {
			item, err := decode(cur.Current)
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
		n, err := d.count(ctx, plan.Collection, plan.Filter)
		if err != nil {
			return res, err
		}
		res.Total = &n
	}
	return res, nil
}

// count returns how many documents of col match filter. On MongoDB it is
// CountDocuments, which an index answers where it can. FerretDB runs
// CountDocuments' $group by holding every matching document, decoded, until
// the last one is read: a study's count over 52,000 observations of the
// embedded database took 700 MiB and spent two thirds of its CPU in the
// garbage collector. FerretDB's count command reads the same documents one
// at a time, so there the count takes no more memory than a page.
func (d *DB) count(ctx context.Context, col string, filter any) (int64, error) {
	if !d.ferret {
		return d.c(col).CountDocuments(ctx, filter)
	}
	var res struct {
		N int64 `bson:"n"`
	}
	err := d.db.RunCommand(ctx, bson.D{{Key: "count", Value: col}, {Key: "query", Value: filter}}).Decode(&res)
	return res.N, err
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
