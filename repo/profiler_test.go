package repo_test

import (
	"context"
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/repo"
	"exchange/repo/repotest"
)

// TestProfilerCountsWhatASearchExamined: on MongoDB the profiler sums the
// keys and documents the operations after a mark examined, and Stop puts
// its level back; the embedded FerretDB has none, and says so.
func TestProfilerCountsWhatASearchExamined(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	p, err := repo.StartProfiler(ctx, repotest.URI(), db.Name())
	if errors.Is(err, repo.ErrNoProfiler) {
		t.Skip("the embedded FerretDB has no profiler: run with " + repotest.TestMongoDBURI)
	}
	if err != nil {
		t.Fatal(err)
	}
	docs := make([]any, 30)
	for i := range docs {
		docs[i] = bson.M{"patientId": int64(i % 3)}
	}
	observations := repotest.Collection(t, db, "observations")
	if _, err := observations.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	mark, err := p.Mark(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := observations.CountDocuments(ctx, bson.M{"patientId": int64(1)}); err != nil || n != 10 {
		t.Fatalf("count: %d %v", n, err)
	}
	w, err := p.Since(ctx, mark)
	if err != nil {
		t.Fatal(err)
	}
	if w.Operations < 1 || w.KeysExamined+w.DocsExamined < 10 || len(w.PlanSummaries) == 0 {
		t.Errorf("a count over the collection: %+v", w)
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}
