package repo

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"exchange/domain"
)

// The collections. Their documents are described in docs/document-model.md.
const (
	colCounters           = "counters"
	colUsers              = "users"
	colOrganizations      = "organizations"
	colMemberships        = "memberships"
	colPatients           = "patients"
	colPatientIdentifiers = "patient_identifiers"
	colStudies            = "studies"
	colEnrollments        = "enrollments"
	colScopeCodes         = "scope_codes"
	colScopeRequests      = "study_scope_requests"
	colConsents           = "consents"
	colDataSources        = "data_sources"
	colStudyDataSources   = "study_data_sources"
	colFHIRSources        = "fhir_sources"
	colOAuthClients       = "oauth_clients"
	colOAuthTokens        = "oauth_tokens"
	colLoginThrottle      = "login_throttle"
	colLoginSessions      = "sessions"
	colIDBlocks           = "id_blocks"
	colInstances          = "service_instances"
	colExportJobs         = "export_jobs"
)

// faultMonitor, when set, watches every command the driver sends; only
// the crash suite's build (-tags crashtest) sets it.
var faultMonitor *event.CommandMonitor

// DB is the exchange's database. It is safe for concurrent use.
type DB struct {
	client  *mongo.Client
	db      *mongo.Database
	now     func() time.Time
	metrics *Metrics
	ferret  bool // the server is FerretDB (the embedded database, or another)
	// searches bounds the searches FerretDB runs at once (nil: no bound).
	searches    chan struct{}
	searchQueue time.Duration
	lease       *lease  // this process's, taken by its first write intent
	held        heldIDs // the ids of the batch writers' blocks not yet handed out
	scopeCodes  scopeCodeCache
	// patientWrites serialize the compare-and-set of a patient record
	// (replacePatient), by patient id. An update that changes identifiers
	// holds its stripe from its lock to its end (UpdatePatient), so that
	// this process's changes of one patient's identifiers queue instead
	// of refusing each other.
	patientWrites stripes
	// resourceWrites serialize the compare-and-set writes of an imported
	// resource (ReplaceResource, DeleteResource), by id.
	resourceWrites stripes
	// recordWrites serialize the compare-and-set of an organization, a
	// study, a data source (replaceRecord) or an OAuth client
	// (UpdateOAuthClient), by id: records of different collections with
	// one id share a stripe, which only queues them.
	recordWrites stripes
	// userWrites serialize the compare-and-set of a user (setUser), by
	// id.
	userWrites stripes
	// adopting serializes, within this process, the compare-and-set by
	// which a repair adopts an abandoned intent (moveIntent), for the
	// reason stripes give.
	adopting sync.Mutex
}

var _ domain.Store = (*DB)(nil)

// stripes serialize, within this process, the compare-and-set writes of
// one document, by stripes of its id: FerretDB applies an update's (or a
// delete's) filter and its write as two steps, so two writes in flight at
// once could both pass the filter. On MongoDB the filter alone is atomic,
// across processes too.
type stripes [32]sync.Mutex

// of returns the mutex of the stripe of an integer id.
func (s *stripes) of(id int64) *sync.Mutex { return &s[uint64(id)%uint64(len(s))] }

// ofString returns the mutex of the stripe of a string id.
func (s *stripes) ofString(id string) *sync.Mutex {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return &s[h.Sum64()%uint64(len(s))]
}

// Options tune a DB; the zero value is a plain connection.
type Options struct {
	// Metrics counts the database's operations; nil: none.
	Metrics *Metrics
	// SearchSlots bounds how many searches run at once on FerretDB, which
	// decodes every document of a collection for each one: beyond it they
	// queue. 0: no bound. MongoDB is never bounded.
	SearchSlots int
	// SearchQueue is how long a search waits for a slot before it is
	// refused with domain.CodeUnavailable.
	SearchQueue time.Duration
	// Monitor also watches every command the driver sends, beside
	// Metrics: how a test counts the round trips a request makes.
	Monitor *event.CommandMonitor
}

// Open connects to the MongoDB server at uri and uses the named database.
// It pings the server so that a wrong address fails here, not on the first
// request.
func Open(ctx context.Context, uri, database string) (*DB, error) {
	return OpenWith(ctx, uri, database, Options{})
}

// OpenWith is Open with options.
func OpenWith(ctx context.Context, uri, database string, o Options) (*DB, error) {
	opts := options.Client().ApplyURI(uri).SetAppName("exchange")
	if m := composeMonitors(o.Metrics.monitor(), o.Monitor, faultMonitor); m != nil {
		opts.SetMonitor(m)
	}
	client, err := mongo.Connect(opts)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", redactURI(uri), err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := client.Ping(pingCtx, nil); err != nil {
		_ = client.Disconnect(context.Background())
		return nil, fmt.Errorf("reach MongoDB at %s: %w", redactURI(uri), err)
	}
	d := &DB{client: client, db: client.Database(database), now: time.Now, metrics: o.Metrics, searchQueue: o.SearchQueue, lease: newLease()}
	if d.ferret, err = isFerretDB(pingCtx, client); err != nil {
		_ = client.Disconnect(context.Background())
		return nil, fmt.Errorf("ask %s what it is: %w", redactURI(uri), err)
	}
	if d.ferret && o.SearchSlots > 0 {
		d.searches = make(chan struct{}, o.SearchSlots)
	}
	return d, nil
}

// IsFerretDB reports whether the server is FerretDB rather than MongoDB.
func (d *DB) IsFerretDB() bool { return d.ferret }

// isFerretDB asks the server's buildInfo, where FerretDB names itself.
func isFerretDB(ctx context.Context, client *mongo.Client) (bool, error) {
	var info bson.M
	if err := client.Database("admin").RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info); err != nil {
		return false, err
	}
	_, ok := info["ferretdbVersion"]
	return ok, nil
}

// Close gives up the instance lease and disconnects from the server.
func (d *DB) Close(ctx context.Context) error {
	d.release(ctx)
	return d.client.Disconnect(ctx)
}

// Name returns the database name.
func (d *DB) Name() string { return d.db.Name() }

// Drop deletes the whole database; Migrate must run again before use.
func (d *DB) Drop(ctx context.Context) error {
	d.scopeCodes.reset()
	return d.db.Drop(ctx)
}

func (d *DB) c(name string) *mongo.Collection { return d.db.Collection(name) }

// nowMillis returns the current time at the precision BSON dates keep, so a
// value handed back to the caller equals the value read later.
func (d *DB) nowMillis() time.Time { return d.now().UTC().Truncate(time.Millisecond) }

// isDuplicate reports a unique-index violation: 11000 from MongoDB and from
// FerretDB inserts.
func isDuplicate(err error) bool { return mongo.IsDuplicateKeyError(err) }

// mapErr turns driver errors into domain errors at the boundary: no
// documents is CodeNotFound with the given message, a duplicate key is
// CodeDuplicate. Other errors are wrapped as internal.
func mapErr(err error, notFound string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, mongo.ErrNoDocuments):
		return domain.Errorf(domain.CodeNotFound, "%s", notFound)
	case isDuplicate(err):
		return domain.Errorf(domain.CodeDuplicate, "%s", "already exists")
	default:
		return err
	}
}

// findOne decodes the first document matching filter into out.
func (d *DB) findOne(ctx context.Context, col string, filter any, out any, notFound string, opts ...options.Lister[options.FindOneOptions]) error {
	return mapErr(d.c(col).FindOne(ctx, filter, opts...).Decode(out), notFound)
}

// findAll decodes every document matching filter into out (a pointer to a slice).
func (d *DB) findAll(ctx context.Context, col string, filter any, out any, opts ...options.Lister[options.FindOptions]) error {
	cur, err := d.c(col).Find(ctx, filter, opts...)
	if err != nil {
		return err
	}
	return cur.All(ctx, out)
}

// insertUnique inserts doc and reports a duplicate key as CodeDuplicate with
// the given message.
func (d *DB) insertUnique(ctx context.Context, col string, doc any, duplicate string) error {
	_, err := d.c(col).InsertOne(ctx, doc)
	if isDuplicate(err) {
		return domain.Errorf(domain.CodeDuplicate, "%s", duplicate)
	}
	return err
}

var uriCredentials = regexp.MustCompile(`://[^@/]*@`)

// redactURI hides the credentials of a connection string for messages.
func redactURI(uri string) string { return uriCredentials.ReplaceAllString(uri, "://***@") }

// Ping checks that the server answers.
func (d *DB) Ping(ctx context.Context) error { return d.client.Ping(ctx, nil) }
