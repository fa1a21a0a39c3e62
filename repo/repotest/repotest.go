// Package repotest gives tests a real database: one embedded FerretDB per
// test binary, or the MongoDB server TEST_MONGODB_URI names, and a fresh,
// migrated database per test, named after the test, dropped when the test
// passes and kept for inspection when it fails.
//
// On a server of TEST_MONGODB_URI, which other packages' tests use at the
// same time, every database of a test binary starts with a prefix of its
// own, and the binary drops its databases when it ends (those of failed
// tests too when everything else passed; else it names them).
package repotest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"regexp"
	"slices"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"exchange/domain"
	"exchange/repo"
)

var (
	uri string
	// prefix starts the names of this binary's databases on a shared
	// server; empty on its own embedded one.
	prefix string
)

// TestMongoDBURI is the setting that runs the tests against a MongoDB
// server instead of an embedded FerretDB.
const TestMongoDBURI = "TEST_MONGODB_URI"

// Main runs the package's tests with an embedded FerretDB, or on the server
// of TEST_MONGODB_URI when it is set; call it from TestMain. The embedded
// database's files live in a temporary directory removed at the end.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if uri = os.Getenv(TestMongoDBURI); uri != "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		prefix = "t" + hex.EncodeToString(b[:]) + "_"
		code := m.Run()
		if err := dropOwnDatabases(code == 0); err != nil {
			fmt.Fprintln(os.Stderr, "repotest:", err)
			return 1
		}
		return code
	}
	dir, err := os.MkdirTemp("", "exchange-test-db-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	e, err := repo.StartEmbedded(dir, "127.0.0.1:0", slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer e.Stop()
	uri = e.URI()
	return m.Run()
}

// URI returns the address of the package's embedded database.
func URI() string {
	if uri == "" {
		panic("repotest: call repotest.Main from TestMain first")
	}
	return uri
}

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9_]+`)

// DatabaseName returns a valid database name derived from a test name (at
// most 49 characters, well within MongoDB's 63).
func DatabaseName(testName string) string {
	name := unsafeName.ReplaceAllString(testName, "_")
	if len(name) > 40 {
		sum := sha256.Sum256([]byte(testName))
		name = name[:30] + "_" + hex.EncodeToString(sum[:4])
	}
	return prefix + name
}

// dropOwnDatabases drops the databases of this binary on the shared
// server: all of them when the tests passed; else it keeps them (the
// failed tests' are named in their output) and says how to drop them.
func dropOwnDatabases(passed bool) error {
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		return err
	}
	defer func() { _ = client.Disconnect(ctx) }()
	names, err := client.ListDatabaseNames(ctx, bson.D{{Key: "name", Value: bson.D{{Key: "$regex", Value: "^" + prefix}}}})
	if err != nil {
		return err
	}
	if !passed && len(names) > 0 {
		fmt.Fprintf(os.Stderr, "repotest: kept %d databases named %s* on %s for inspection\n", len(names), prefix, redacted(uri))
		return nil
	}
	for _, name := range names {
		if err := client.Database(name).Drop(ctx); err != nil {
			return err
		}
	}
	return nil
}

var credentials = regexp.MustCompile(`://[^@/]*@`)

// redacted hides the credentials of a connection string.
func redacted(uri string) string { return credentials.ReplaceAllString(uri, "://***@") }

// IsFerretDB reports whether the tests run on FerretDB (the embedded one,
// or a FerretDB server as TEST_MONGODB_URI), which answers some commands
// (explain, collection statistics) its own way.
func IsFerretDB(t testing.TB) bool {
	t.Helper()
	var info bson.M
	if err := sharedClient(t).Database("admin").RunCommand(context.Background(), bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info); err != nil {
		t.Fatal(err)
	}
	_, ok := info["ferretdbVersion"]
	return ok
}

// NewDB returns a migrated database named after the test. It is dropped
// when the test passes and kept when it fails.
func NewDB(t testing.TB) *repo.DB { return NewDBWith(t, repo.Options{}) }

// NewDBWith is NewDB with options.
func NewDBWith(t testing.TB, o repo.Options) *repo.DB {
	t.Helper()
	ctx := context.Background()
	db, err := repo.OpenWith(ctx, URI(), DatabaseName(t.Name()), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Drop(ctx); err != nil { // a previous failed run may have kept it
		t.Fatal(err)
	}
	if _, err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			_ = db.Drop(ctx)
		} else {
			t.Logf("kept database %s at %s for inspection", db.Name(), redacted(URI()))
		}
		_ = db.Close(ctx)
	})
	return db
}

// OtherInstance opens db's database again, as a second instance of the
// service on the same database would; it is closed when the test ends.
func OtherInstance(t testing.TB, db *repo.DB) *repo.DB {
	t.Helper()
	ctx := context.Background()
	other, err := repo.Open(ctx, URI(), db.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close(ctx) })
	return other
}

var (
	clientOnce sync.Once
	client     *mongo.Client
	clientErr  error
)

// sharedClient is one driver client of the package's database for the
// helpers below (a test's repo.DB keeps its own unexported).
func sharedClient(t testing.TB) *mongo.Client {
	t.Helper()
	clientOnce.Do(func() {
		client, clientErr = mongo.Connect(options.Client().ApplyURI(URI()))
	})
	if clientErr != nil {
		t.Fatal(clientErr)
	}
	return client
}

// Collection is a collection of db, for tests that read what the service
// stored directly.
func Collection(t testing.TB, db *repo.DB, name string) *mongo.Collection {
	t.Helper()
	return sharedClient(t).Database(db.Name()).Collection(name)
}

// IndexKeys returns the key fields of every index of a collection, in
// index order: what a test checks the planner's $match against.
func IndexKeys(t testing.TB, db *repo.DB, collection string) [][]string {
	t.Helper()
	cur, err := Collection(t, db, collection).Indexes().List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var specs []struct {
		Key bson.D `bson:"key"`
	}
	if err := cur.All(context.Background(), &specs); err != nil {
		t.Fatal(err)
	}
	out := make([][]string, len(specs))
	for i, s := range specs {
		for _, e := range s.Key {
			out[i] = append(out[i], e.Key)
		}
	}
	return out
}

// Snapshot returns every document of the database, collection by
// collection in _id order, as extended JSON: what a test compares to show
// that a refused write changed nothing. OAuth tokens and login throttle
// counters are left out, since authenticating a request may touch them;
// so are the audit trail, which records refusals too (and the counter of
// its ids, which its writer raises off the request path), the id blocks,
// which a write claims before a later step refuses it, and the instance
// leases, which the process renews on its own.
func Snapshot(t testing.TB, db *repo.DB) map[string][]string {
	t.Helper()
	ctx := context.Background()
	d := sharedClient(t).Database(db.Name())
	names, err := d.ListCollectionNames(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, name := range names {
		if slices.Contains([]string{"oauth_tokens", "login_throttle", "audit_events", "id_blocks", "service_instances"}, name) {
			continue
		}
		cur, err := d.Collection(name).Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
		if err != nil {
			t.Fatal(err)
		}
		var docs []bson.Raw
		if err := cur.All(ctx, &docs); err != nil {
			t.Fatal(err)
		}
		for _, doc := range docs {
			if id, ok := doc.Lookup("_id").StringValueOK(); ok && name == "counters" && id == "audit_events" {
				continue
			}
			out[name] = append(out[name], doc.String())
		}
	}
	return out
}

// Operations counts the database commands of one kind on a collection
// ("users", "find") that repo.Metrics registered on reg has watched: what
// a test compares before and after a call to show how often it reads.
func Operations(t testing.TB, reg prometheus.Gatherer, collection, operation string) int {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "exchange_db_operation_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["collection"] == collection && labels["operation"] == operation {
				return int(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

// Commands counts the commands the driver sends, by collection and
// command name ("observations insert"), from a CommandMonitor given to
// repo.Options.Monitor: what a test compares before and after a request
// to pin the database round trips it makes. It is safe for concurrent
// use.
type Commands struct {
	mu   sync.Mutex
	seen map[string]int
}

// Monitor is the CommandMonitor that counts into c.
func (c *Commands) Monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		name := e.CommandName
		if name == "getMore" {
			name += " " + e.Command.Lookup("collection").StringValue()
		} else if elems, err := e.Command.Elements(); err == nil && len(elems) > 0 {
			if col, ok := elems[0].Value().StringValueOK(); ok {
				name = col + " " + name
			}
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.seen == nil {
			c.seen = map[string]int{}
		}
		c.seen[name]++
	}}
}

// Since returns the commands counted since before (a Snapshot), by
// "collection command"; leaves out those of leave (such as the lease
// renewal "service_instances update", which a timer sends).
func (c *Commands) Since(before map[string]int, leave ...string) map[string]int {
	out := map[string]int{}
	for k, n := range c.Snapshot() {
		if d := n - before[k]; d != 0 && !slices.Contains(leave, k) {
			out[k] = d
		}
	}
	return out
}

// Snapshot returns the counts so far.
func (c *Commands) Snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.seen)
}

// OneWins runs attempt(0) ... attempt(n-1) at once and returns the index
// of the one that succeeded; it fails the test unless exactly one did and
// every other failed with one of the codes of losers (a race of writes
// that one may win: compare-and-set edits, redemptions of one code,
// creates of one identifier).
func OneWins(t testing.TB, n int, attempt func(i int) error, losers ...domain.Code) int {
	t.Helper()
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = attempt(i)
		})
	}
	close(start)
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won < 0:
			won = i
		case err == nil:
			t.Errorf("attempts %d and %d both succeeded", won, i)
		case !slices.ContainsFunc(losers, func(c domain.Code) bool { return domain.IsCode(err, c) }):
			t.Errorf("attempt %d: %v, want one of %v", i, err, losers)
		}
	}
	if won < 0 {
		t.Fatalf("no attempt succeeded: %v", errs)
	}
	return won
}
