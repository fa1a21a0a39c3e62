package repo_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/repo"
	"exchange/repo/repotest"
)

// TestSizeWatchWarnsWhenTheStoreCrossesItsSize: the warning comes at the
// first check past the size, not only at start-up or a day later, once
// (until a day has passed); Capacity says so from then on.
func TestSizeWatchWarnsWhenTheStoreCrossesItsSize(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	var logged bytes.Buffer
	w := repo.NewSizeWatch(db, 3, slog.New(slog.NewTextHandler(&logged, nil)))
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	insert := func(n int) {
		docs := make([]any, n)
		for i := range docs {
			docs[i] = bson.M{"patientId": int64(1)}
		}
		if _, err := repotest.Collection(t, db, "observations").InsertMany(ctx, docs); err != nil {
			t.Fatal(err)
		}
	}
	insert(2)
	if err := w.Check(ctx, now); err != nil || w.Capacity() != nil || logged.Len() > 0 {
		t.Fatalf("within the size: err %v, capacity %v, log %q", err, w.Capacity(), logged.String())
	}
	insert(2)
	if err := w.Check(ctx, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if c := w.Capacity(); c == nil || c.Observations != 4 || c.Comfortable != 3 {
		t.Fatalf("past the size: capacity %+v", c)
	}
	if strings.Count(logged.String(), "more observations than it searches comfortably") != 1 {
		t.Fatalf("log after crossing: %q", logged.String())
	}
	if err := w.Check(ctx, now.Add(2*time.Minute)); err != nil || strings.Count(logged.String(), "comfortably") != 1 {
		t.Errorf("warned again within the day: %v %q", err, logged.String())
	}
	if err := w.Check(ctx, now.Add(25*time.Hour)); err != nil || strings.Count(logged.String(), "comfortably") != 2 {
		t.Errorf("not warned a day later: %v %q", err, logged.String())
	}
}
