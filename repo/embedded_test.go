package repo_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

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

// TestEmbeddedWALIsCheckpointedUnderLoad: with writes going on and
// overlapping scans always holding a snapshot, SQLite's own checkpoints
// never complete and its log grows for as long as the load lasts (1 GB in
// three minutes, measured); the exchange's truncating checkpoint brings it
// back under its bound while the load still runs.
func TestEmbeddedWALIsCheckpointedUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("loads a database of its own for up to 20 s")
	}
	const limit = 1 << 20
	defer repo.SetWALLimit(limit)()
	defer repo.SetWALCheckEvery(200 * time.Millisecond)()
	dir := t.TempDir()
	e, err := repo.StartEmbedded(dir, "127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(e.URI()))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	db := client.Database("wal")
	blob := make([]byte, 2<<10)
	docs := make([]any, 10)
	for i := range docs {
		docs[i] = bson.M{"n": i}
	}
	if _, err := db.Collection("searched").InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// Searches of 600 ms (an open cursor holds its snapshot), three at
	// once, started 200 ms apart: one is always reading.
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(r) * 200 * time.Millisecond)
			for ctx.Err() == nil {
				cur, err := db.Collection("searched").Find(ctx, bson.M{}, options.Find().SetBatchSize(1))
				if err != nil {
					return
				}
				cur.Next(ctx)
				time.Sleep(600 * time.Millisecond)
				_ = cur.Close(context.Background())
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		batch := make([]any, 50)
		for i := range batch {
			batch[i] = bson.M{"blob": blob}
		}
		for ctx.Err() == nil {
			if _, err := db.Collection("written").InsertMany(ctx, batch); err != nil && ctx.Err() == nil {
				t.Error(err)
				return
			}
		}
	}()
	wal := filepath.Join(dir, "wal.sqlite-wal")
	var grown, largest int64
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		fi, err := os.Stat(wal)
		if err != nil {
			continue
		}
		largest = max(largest, fi.Size())
		if fi.Size() > 4*limit {
			grown = fi.Size()
		} else if grown > 0 {
			t.Logf("the log was %d bytes, then %d while the load went on", grown, fi.Size())
			return
		}
	}
	t.Errorf("under load the write-ahead log was never brought back under %d bytes once past %d: it grew to %d", limit, 4*limit, largest)
}
