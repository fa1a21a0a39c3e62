// Package handlerstest runs the whole exchange for tests: the real Fiber
// application on a loopback port, over a fresh embedded database, with a
// clock the test can move.
package handlerstest

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"exchange/console"
	"exchange/converter"
	"exchange/domain"
	"exchange/fhirdefs"
	"exchange/fhirdefs/fhirdefstest"
	"exchange/fhirsearch"
	"exchange/handlers"
	"exchange/oauth"
	"exchange/omh"
	"exchange/omh/omhtest"
	"exchange/repo"
	"exchange/repo/repotest"

	"exchange/telemetry"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// Clock is a test clock: the wall clock moved by an offset, or, once
// stopped, a fixed time that only Advance moves.
type Clock struct {
	mu      sync.Mutex
	offset  time.Duration
	stopped bool
	at      time.Time
}

// Now returns the wall clock plus the offset, or the stopped time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return c.at
	}
	return time.Now().Add(c.offset)
}

// Advance moves the clock by d (negative: back).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
	c.at = c.at.Add(d)
}

// Stop holds the clock at its current time, so that a test sees exactly
// the delays it steps over.
func (c *Clock) Stop() {
	now := c.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped, c.at = true, now
}

// PatientVerifier is the PKCE verifier of patient authorization codes in
// tests; PatientChallenge is its S256 challenge.
const (
	PatientVerifier  = "test-patient-verifier-0123456789-abcdefghijklmnop"
	PatientChallenge = "P_rK5XfZl2x4_xRfIpNBsj5aeDLH1cBktgWFdcF1uDg"
)

// PatientCodeTTL is the lifetime of patient authorization codes in tests.
const PatientCodeTTL = 7 * 24 * time.Hour

// SourceBase is FHIR_SOURCE_BASE in tests: FHIR source n is SourceBase/n.
const SourceBase = "https://exchange.example.org/fhir-source"

// Env is a running exchange.
type Env struct {
	URL     string // http://127.0.0.1:port
	DB      *repo.DB
	Service *domain.Service
	OAuth   *oauth.Provider
	Clock   *Clock
	// Routes are the app's routes, "METHOD /path/:param", for sweeps of
	// every endpoint.
	Routes []string
	Audit  *repo.AuditLog // with Options.Audit
	// Size watches the store's size with Options.ComfortableObservations:
	// its Check is the test's to call.
	Size *repo.SizeWatch
}

var (
	keyOnce sync.Once
	key     *rsa.PrivateKey
)

// standardsDir is the folder a setting names, or its place under the
// repository's standards/ (where scripts/setup prepares it).
func standardsDir(setting string, under ...string) string {
	if dir := os.Getenv(setting); dir != "" {
		return dir
	}
	return filepath.Join(append([]string{RepoRoot(), "standards"}, under...)...)
}

// Schemas returns the official Open mHealth and IEEE 1752 schemas (see
// omhtest.Registry).
func Schemas(t testing.TB) *omh.Registry { return omhtest.Registry(t) }

// r5 is the R5 validator and indexer, opened once per test binary.
var r5 = sync.OnceValues(func() (*r5Model, error) {
	dir := fhirdefstest.PackagesDir()
	defs, validator, err := fhirdefs.OpenR5(dir)
	if err != nil {
		return nil, err
	}
	catalog, err := fhirsearch.NewCatalog(defs)
	if err != nil {
		return nil, err
	}
	r4, err := fhirdefs.OpenR4(dir)
	if err != nil {
		return nil, err
	}
	engine, err := converter.Compile(converter.Options{R4: r4, R5: defs,
		MapsDir:        standardsDir("FHIR_XVER_PACKAGE_DIR", "fhir", "xver-r4-r5", "maps"),
		ConceptMapsDir: standardsDir("FHIR_XVER_CONCEPTMAPS_DIR", "fhir", "xver-r4-r5", "conceptmaps")})
	if err != nil {
		return nil, err
	}
	importer := converter.NewImporter(engine)
	return &r5Model{validator, catalog, importer}, nil
})

type r5Model struct {
	validator *fhirdefs.Validator
	catalog   *fhirsearch.Catalog
	importer  *converter.Importer
}

// R5 returns the FHIR R5 validator and the catalog of served types (the
// search indexer of the imported store): FHIR_PACKAGES_DIR, or
// standards/fhir-packages of the repository.
func R5(t testing.TB) (*fhirdefs.Validator, *fhirsearch.Catalog) {
	t.Helper()
	m := r5Models(t)
	return m.validator, m.catalog
}

// r5Models returns the definitions-driven parts, the R4 importer included
// (FHIR_XVER_PACKAGE_DIR, or the repository's standards folder).
func r5Models(t testing.TB) *r5Model {
	t.Helper()
	m, err := r5()
	if err != nil {
		t.Fatalf("%v: run scripts/setup first", err)
	}
	return m
}

// RepoRoot returns the directory of go.mod above the working directory.
func RepoRoot() string {
	dir, _ := os.Getwd()
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "."
		}
		dir = parent
	}
}

// signingKey returns one RSA key for the whole test binary: generating one
// per test would cost more than the test.
func signingKey(t testing.TB) *rsa.PrivateKey {
	keyOnce.Do(func() {
		pemBytes, err := oauth.GenerateRSAPrivateKeyPEM()
		if err != nil {
			t.Fatal(err)
		}
		if key, err = oauth.ParseRSAPrivateKey(pemBytes); err != nil {
			t.Fatal(err)
		}
	})
	return key
}

// Options are the settings a test may change; the zero value is the
// service's defaults.
type Options struct {
	// TrustedProxies is TRUSTED_PROXIES (the test's requests come from
	// 127.0.0.1).
	TrustedProxies string
	// SessionLifetime and SessionIdleTimeout are LOGIN_SESSION_LIFETIME and
	// LOGIN_SESSION_IDLE_TIMEOUT; zero: the defaults.
	SessionLifetime, SessionIdleTimeout time.Duration
	// Logger receives the service's logs; nil: warnings and errors to
	// stderr (a line per request would drown the test's).
	Logger *slog.Logger
	// DB opens the database (search slots, metrics).
	DB repo.Options
	// Audit records the audit trail with a real repo.AuditLog (Env.Audit).
	Audit bool
	// Metrics receives the series and is served at /metrics, behind
	// MetricsToken when set; nil: a registry the test cannot see.
	Metrics      *prometheus.Registry
	MetricsToken string
	// Ping and Loaded answer /ready; nil Ping: the database's.
	Ping   func(context.Context) error
	Loaded map[string]bool
	// Store wraps the database the domain service uses (a test that
	// makes another request's change at a chosen read); nil: the database.
	Store func(*repo.DB) domain.Store
	// Exports runs an export runner beside the server; nil: $export
	// queues jobs that nothing runs.
	Exports *Exports
	// Database is the database to serve, shared with another Env (two
	// instances); nil: a new one named after the test.
	Database *repo.DB
	// IdentityProviders are IDENTITY_PROVIDERS_FILE's; PasswordSignInOff
	// is PASSWORD_SIGN_IN=false; TokenExchange is
	// TOKEN_EXCHANGE_TRUSTED_ISSUERS and TOKEN_EXCHANGE_AUDIENCE.
	IdentityProviders []domain.IdentityProvider
	PasswordSignInOff bool
	TokenExchange     oauth.TokenExchangeConfig
	// EHR is the exchange's client of patients' EHRs (patient access);
	// nil: patient access is not offered. PullLimits bound its pulls.
	EHR        domain.EHR
	PullLimits domain.PullLimits
	// ComfortableObservations, when not 0, gives the store the size the
	// embedded database has: /ready and the console's home page say when
	// Env.Size found it past that many observations.
	ComfortableObservations int64
	// Mailer is the delivery channel of invitations (StartMailServer's);
	// nil: none.
	Mailer domain.Mailer
	// PublicURL is PUBLIC_URL: the origin invitation links are made on.
	PublicURL string
	// Auditor wraps the audit trail the service records to (Audit's; nil
	// without Audit): a test that makes the trail refuse events. nil: the
	// trail as it is.
	Auditor func(domain.Auditor) domain.Auditor
}

// Exports are the settings of a test's bulk export runner.
type Exports struct {
	// GridFS keeps the files in the database (as on MongoDB); else in a
	// directory of the test (as with the embedded database).
	GridFS bool
	Limits domain.ExportLimits
	// Settle and FileResources are the runner's (domain.ExportRunner);
	// zero: 50 ms, and its default.
	Settle        time.Duration
	FileResources int
}

// Start runs the exchange over a new database named after the test, and
// stops it when the test ends. The package's TestMain must call
// repotest.Main.
func Start(t testing.TB) *Env { return StartWith(t, Options{}) }

// StartWith is Start with settings.
func StartWith(t testing.TB, o Options) *Env {
	t.Helper()
	proxies, err := oauth.ParseTrustedProxies(o.TrustedProxies)
	if err != nil {
		t.Fatal(err)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	db := o.Database
	if db == nil {
		db = repotest.NewDBWith(t, o.DB)
	}
	clock := &Clock{}
	validator, catalog := R5(t)
	search := fhirsearch.NewTranslator(catalog, []byte("test cursor key"), SourceBase, clock.Now)
	f := &faults{}
	log := slog.New(f.logHandler(o.Logger.Handler()))
	var audit *repo.AuditLog
	var auditor domain.Auditor
	if o.Audit {
		audit = db.NewAuditLog(log, 1000)
		auditor = audit
		t.Cleanup(func() { _ = audit.Close(context.Background()) })
	}
	if o.Auditor != nil {
		auditor = o.Auditor(auditor)
	}
	var store domain.Store = db
	if o.Store != nil {
		store = o.Store(db)
	}
	exportFiles, err := repo.NewDirExportFiles(filepath.Join(t.TempDir(), "exports"))
	if err != nil {
		t.Fatal(err)
	}
	if o.Exports != nil && o.Exports.GridFS {
		exportFiles = db.ExportFilesInGridFS()
	}
	svc := domain.NewService(domain.Config{Store: store, Schemas: Schemas(t), SourceBase: SourceBase,
		Validator: validator, Indexer: catalog, Converter: r5Models(t).importer, Searches: search, Auditor: auditor, Now: clock.Now, Logger: log,
		ExportSearches: search, ExportFiles: exportFiles, IdentityProviders: o.IdentityProviders, EHR: o.EHR, PullLimits: o.PullLimits,
		Mailer: o.Mailer})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		svc.Shutdown(ctx)
	})
	provider, err := oauth.New(oauth.Config{
		Store: db, Users: svc, SecretKey: []byte(secretKey),
		SigningKey: signingKey(t), PatientCodeChallenge: PatientChallenge, PatientCodeTTL: PatientCodeTTL, Now: clock.Now,
		Logger: log, TrustedProxies: proxies, SessionLifetime: o.SessionLifetime, SessionIdleTimeout: o.SessionIdleTimeout,
		ResourceTypes: catalog.TypeNames(), PasswordSignInOff: o.PasswordSignInOff, TokenExchange: o.TokenExchange,
		PublicURL: o.PublicURL,
	})
	if err != nil {
		t.Fatal(err)
	}
	if o.Ping == nil {
		o.Ping = db.Ping
	}
	var limits domain.ExportLimits
	if o.Exports != nil {
		limits = o.Exports.Limits
	}
	var size *repo.SizeWatch
	var capacity func() *domain.StoreCapacity
	if o.ComfortableObservations != 0 {
		size = repo.NewSizeWatch(db, o.ComfortableObservations, log)
		capacity = size.Capacity
	}
	config := handlers.Config{Service: svc, OAuth: provider, Ping: o.Ping, Loaded: o.Loaded, Capacity: capacity, Schemas: Schemas(t), Logger: log,
		TrustedProxies: proxies, Search: search, Exports: limits,
		Console: console.New(console.Config{Service: svc, OAuth: provider, Search: search, Schemas: Schemas(t),
			ObservationResource: handlers.ObservationResource, GatewayClientID: GatewayClientID, Capacity: capacity, Logger: log, Exports: limits})}
	if o.Metrics != nil {
		config.Metrics, config.MetricsHandler = o.Metrics, telemetry.MetricsHandler(o.Metrics, o.MetricsToken)
	}
	app := handlers.New(config)
	f.watch(app.Server())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = handlers.Serve(app, ln) }()
	stopExports := func() {}
	if o.Exports != nil {
		runner := &domain.ExportRunner{Service: svc, Encoder: handlers.ExportEncoder{}, Limits: limits, Settle: o.Exports.Settle,
			FileResources: o.Exports.FileResources, Poll: 50 * time.Millisecond, Log: log}
		if runner.Settle == 0 {
			runner.Settle = 50 * time.Millisecond
		}
		if runner.Limits == (domain.ExportLimits{}) {
			runner.Limits = domain.DefaultExportLimits
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { runner.Run(ctx); close(done) }()
		stopExports = func() { cancel(); <-done }
	}
	t.Cleanup(func() {
		stopExports()
		_ = app.ShutdownWithTimeout(5 * time.Second)
		if seen := f.all(); len(seen) > 0 {
			t.Errorf("the exchange had %d faults (5xx answers or error logs), which no input may cause: %s", len(seen), strings.Join(seen, "; "))
		}
	})
	var routes []string
	for _, r := range app.GetRoutes(true) {
		if route := r.Method + " " + r.Path; !slices.Contains(routes, route) {
			routes = append(routes, route)
		}
	}
	return &Env{URL: "http://" + ln.Addr().String(), DB: db, Service: svc, OAuth: provider, Clock: clock, Routes: routes, Audit: audit, Size: size}
}

// secretKey is SECRET_KEY in tests.
const secretKey = "test-secret-key-0123456789abcdefghijklmnop"

// GatewayClientID is the MCP gateway's client id the console is told of.
const GatewayClientID = "test-mcp-gateway"

// Password is the password of the users the helpers create.
const Password = "correct horse battery staple"

// Practitioner creates a practitioner user.
func (e *Env) Practitioner(t testing.TB, email string, superuser bool) *domain.User {
	t.Helper()
	u, err := e.Service.CreateUser(context.Background(), domain.NewUser{Email: email, Password: Password,
		FirstName: "Pat", LastName: "Practitioner", Type: domain.UserPractitioner, IsSuperuser: superuser})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// Patient creates an organization and a patient in it, with a login
// (the password Password).
func (e *Env) Patient(t testing.TB, email string) *domain.Patient {
	t.Helper()
	return e.newPatient(t, email, Password)
}

// Invitee creates an organization and a patient in it without a login:
// one who may be invited (domain.Service.Invite).
func (e *Env) Invitee(t testing.TB, email string) *domain.Patient {
	t.Helper()
	return e.newPatient(t, email, "")
}

func (e *Env) newPatient(t testing.TB, email, password string) *domain.Patient {
	t.Helper()
	ctx := context.Background()
	org, err := e.Service.OrganizationByName(ctx, "Test Organization", 0)
	if domain.IsCode(err, domain.CodeNotFound) {
		org, err = e.Service.CreateOrganization(ctx, domain.SystemActor(), domain.NewOrganization{Name: "Test Organization", Type: "prov"})
	}
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Service.CreatePatient(ctx, domain.SystemActor(), domain.NewPatient{Email: email, Password: password,
		FamilyName: "Doe", GivenNames: []string{"Jo"}, BirthDate: "1980-01-02", OrganizationIDs: []int64{org.ID}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Client registers an OAuth client.
func (e *Env) Client(t testing.TB, reg oauth.ClientRegistration) (*domain.OAuthClient, string) {
	t.Helper()
	c, secret, err := e.OAuth.RegisterClient(context.Background(), reg)
	if err != nil {
		t.Fatal(err)
	}
	return c, secret
}

// AddBareObservations stores n bare observation documents (no content a
// search reads) straight into the database, then has Size check the
// store: for tests of what the service says past its comfortable size.
func (e *Env) AddBareObservations(t testing.TB, n int) {
	t.Helper()
	docs := make([]any, n)
	for i := range docs {
		docs[i] = bson.M{"patientId": int64(1)}
	}
	ctx := context.Background()
	if _, err := repotest.Collection(t, e.DB, "observations").InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	if err := e.Size.Check(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// GetJSON sends GET path (relative to the server) with a bearer token when
// one is given, and decodes the JSON object it answers.
func (e *Env) GetJSON(t testing.TB, path, token string) (*http.Response, map[string]any) {
	t.Helper()
	return e.Send(t, "GET", path, token, nil)
}

// Token returns a one-hour bearer token for the user.
func (e *Env) Token(t testing.TB, userID int64) string {
	t.Helper()
	token, _, err := e.OAuth.IssueAccessToken(context.Background(), userID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// Send sends a request with a JSON body (nil: none; a string is sent as
// is) and a bearer token, and decodes the JSON object it answers.
func (e *Env) Send(t testing.TB, method, path, token string, body any) (*http.Response, map[string]any) {
	t.Helper()
	return SendTo(t, method, e.URL+path, token, body, nil)
}

// SendTo is Send to an absolute URL (another server, such as the MCP
// gateway in front of the exchange) with extra headers, which override
// the Content-Type and Authorization Send sets. The answer's body is
// closed.
func SendTo(t testing.TB, method, rawURL, token string, body any, header map[string]string) (*http.Response, map[string]any) {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, rawURL, r)
	if err != nil {
		t.Fatal(err)
	}
	if r != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if host, ok := header["Host"]; ok {
		req.Host = host // what a client that names another host sends
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp, out
}

// faults records what a running exchange does that only a fault of ours
// may cause: answers with a 5xx status other than 503, and error-level log lines (a batch
// entry that failed with 500 inside a 200 batch-response logs one). Every
// test that starts the exchange fails on one, so that every test of bad
// input is also a check of "4xx, never 5xx".
type faults struct {
	mu   sync.Mutex
	seen []string
}

func (f *faults) add(what string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.seen) < 20 {
		f.seen = append(f.seen, what)
	}
}

func (f *faults) all() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.seen)
}

// watch records the 5xx answers of the server: those of its routes and
// those of its error handler, which answers requests it cannot read.
func (f *faults) watch(srv *fasthttp.Server) {
	handle, fail := srv.Handler, srv.ErrorHandler
	record := func(ctx *fasthttp.RequestCtx) {
		// 503 is a designed answer (not ready, or busy: try again later),
		// which tests provoke; every other 5xx is a fault.
		if status := ctx.Response.StatusCode(); status >= 500 && status != fasthttp.StatusServiceUnavailable {
			f.add(fmt.Sprintf("%d for %s %s", status, ctx.Method(), ctx.Path()))
		}
	}
	srv.Handler = func(ctx *fasthttp.RequestCtx) { handle(ctx); record(ctx) }
	srv.ErrorHandler = func(ctx *fasthttp.RequestCtx, err error) { fail(ctx, err); record(ctx) }
}

// logHandler passes log records on to next, and records error-level ones.
func (f *faults) logHandler(next slog.Handler) slog.Handler { return faultLog{next, f} }

type faultLog struct {
	slog.Handler
	f *faults
}

func (h faultLog) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelError || h.Handler.Enabled(ctx, l)
}

func (h faultLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		h.f.add("logged " + r.Message)
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h faultLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	return faultLog{h.Handler.WithAttrs(attrs), h.f}
}

func (h faultLog) WithGroup(name string) slog.Handler {
	return faultLog{h.Handler.WithGroup(name), h.f}
}

// GetText sends GET with a bearer token (none: empty) and returns the
// status and the body as text.
func GetText(t testing.TB, rawURL, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// LogBuffer is a log destination a running server writes while the test
// reads it.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is what was written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// JSONLines decodes what was written so far, one JSON object a line.
func (l *LogBuffer) JSONLines(t testing.TB) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}
