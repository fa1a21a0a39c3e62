package repo_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"exchange/repo"
)

// TestEmbeddedWALIsTruncated: after a burst of writes, the first writes
// after the next checkpoint bring SQLite's write-ahead log back under its
// bound (SQLite alone keeps the file at its largest size: some 4 MB after
// any burst, hundreds when a long search held a snapshot meanwhile).
func TestEmbeddedWALIsTruncated(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 12 MB to a database of its own")
	}
	const limit = 512 << 10
	defer repo.SetWALLimit(limit)()
	dir := t.TempDir()
	e, err := repo.StartEmbedded(dir, "127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI(e.URI()))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(ctx)
	col := client.Database("wal").Collection("burst")
	blob := make([]byte, 16<<10)
	for range 8 {
		docs := make([]any, 100)
		for i := range docs {
			docs[i] = bson.M{"blob": blob}
		}
		if _, err := col.InsertMany(ctx, docs); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 { // a checkpoint completes, then a write restarts the log
		if _, err := col.InsertOne(ctx, bson.M{"small": 1}); err != nil {
			t.Fatal(err)
		}
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "*-wal"))
	if len(matches) == 0 {
		t.Fatalf("no write-ahead log in %s", dir)
	}
	for _, m := range matches {
		fi, err := os.Stat(m)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > 2*limit {
			t.Errorf("%s is %d bytes after the burst, want at most %d", filepath.Base(m), fi.Size(), 2*limit)
		}
	}
}
