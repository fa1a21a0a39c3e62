package repo

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"exchange/telemetry"
)

// Embedded is an in-process FerretDB with its SQLite backend: the database
// of a zero-configuration start and of the tests. It speaks the MongoDB wire
// protocol on a TCP address, so mongosh can connect to it too.
type Embedded struct {
	uri    string
	cancel context.CancelFunc
	done   chan struct{}
}

// StartEmbedded starts FerretDB keeping its SQLite files under dir and
// listening on addr (host:port; port 0 picks a free one). logger receives
// FerretDB's own log at error level and above.
func StartEmbedded(dir, addr string, logger *slog.Logger) (*Embedded, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create the embedded database directory: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	// FerretDB logs every refused command (endSessions, for one) as a
	// warning; only its errors concern us. Its debug records carry whole
	// documents (health data): they must never pass, and the attributes it
	// gives them must cost nothing (telemetry.Floor).
	quiet := slog.New(telemetry.Floor(logger.Handler(), slog.LevelError))
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: addr},
		Handler:   "sqlite",
		SQLiteURL: "file:" + filepath.ToSlash(abs) + "/?_pragma=" + url.QueryEscape(fmt.Sprintf("journal_size_limit(%d)", walLimit)),
		Logger:    quiet,
	})
	if err != nil {
		return nil, fmt.Errorf("start the embedded database on %s (is the address in use? set EMBEDDED_MONGO_ADDR): %w", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Embedded{cancel: cancel, done: make(chan struct{})}
	checkpointed := make(chan struct{})
	go func() {
		defer close(checkpointed)
		checkpointWALs(ctx, abs, logger)
	}()
	go func() {
		defer close(e.done)
		_ = f.Run(ctx)
		<-checkpointed
	}()
	e.uri = f.MongoDBURI()
	return e, nil
}

// walLimit bounds SQLite's write-ahead log once a checkpoint has copied
// it into the database: SQLite reuses the log file from its start but never
// shrinks it, so a log that grew while a long search held its snapshot
// (359 MB during one search while uploading) stayed that size. With the
// limit, the first write after the next complete checkpoint truncates it;
// checkpointWALs sees that such a checkpoint happens under sustained load.
var walLimit int64 = 64 << 20

// URI returns the mongodb:// address the embedded database listens on.
func (e *Embedded) URI() string { return e.uri }

// Stop closes the listener and the SQLite files, and waits until they are.
func (e *Embedded) Stop() {
	e.cancel()
	<-e.done
}

// RunningFerretDB reports whether a FerretDB answers at addr, such as the
// embedded database of a running `exchange serve` that a command can use
// instead of starting its own on the same files.
func RunningFerretDB(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://" + addr + "/").
		SetServerSelectionTimeout(time.Second).SetConnectTimeout(time.Second))
	if err != nil {
		return false
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	ok, err := isFerretDB(ctx, client)
	return err == nil && ok
}

// EmbeddedComfortableObservations is how many observations the embedded
// database holds while its searches stay under a second of CPU. FerretDB
// decodes every document a search's collection holds; scripts/bench-search
// measured 0.78 s of server CPU per search page at 2,500 observations,
// 1.53 s at 5,000 and about 17 s at 50,000 (2 cores, loaded machine).
const EmbeddedComfortableObservations = 2500

// ObservationCount returns about how many observations are stored: from
// the collection's statistics, which cost no scan on FerretDB (its count
// command decodes every document) nor on MongoDB.
func (d *DB) ObservationCount(ctx context.Context) (int64, error) {
	if !d.ferret {
		return d.c(colObservations).EstimatedDocumentCount(ctx)
	}
	var stats struct {
		Count int64 `bson:"count"`
	}
	err := d.db.RunCommand(ctx, bson.D{{Key: "collStats", Value: colObservations}}).Decode(&stats)
	return stats.Count, err
}
