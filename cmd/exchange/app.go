package main

import (
	"context"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"exchange/converter"
	"exchange/domain"
	"exchange/fhirdefs"
	"exchange/fhirsearch"
	"exchange/oauth"
	"exchange/omh"
	"exchange/repo"
	"exchange/smartclient"
	"exchange/telemetry"
)

// app is the assembled service: the database and the layers over it.
type app struct {
	settings *settings
	log      *slog.Logger
	embedded *repo.Embedded // nil when MONGODB_URI is set or a running server's database is used
	mongoURI string         // where the data lives, for analysts' mongosh
	db       *repo.DB
	indexes  int // indexes created at start-up
	service  *domain.Service
	oauth    *oauth.Provider
	schemas  *omh.Registry // nil when OMH_SCHEMA_DIR holds no schemas
	search   *fhirsearch.Translator
	// catalog is the resource types served: with the R5 package, every
	// type it defines but those excluded; without, the configured ones.
	catalog *fhirsearch.Catalog
	// The server's alone (nil for commands): its metrics, its audit
	// trail's writer, and what /ready reports as loaded.
	metrics *prometheus.Registry
	audit   *repo.AuditLog
	loaded  map[string]bool
}

// openApp connects to the database (starting the embedded one when no
// MONGODB_URI is set), creates the indexes and assembles the layers. A
// command (not the server) may share the embedded database of a server that
// is already running instead of opening the same files twice.
func openApp(ctx context.Context, s *settings, log *slog.Logger, command bool) (*app, error) {
	secret, rsaPEM, err := loadSecrets(s)
	if err != nil {
		return nil, err
	}
	signingKey, err := oauth.ParseRSAPrivateKey(rsaPEM)
	if err != nil {
		return nil, fmt.Errorf("OIDC signing key: %w", err)
	}
	a := &app{settings: s, log: log, mongoURI: s.MongoURI}
	switch {
	case s.MongoURI != "":
	case command && repo.RunningFerretDB(ctx, s.EmbeddedMongoAddr):
		a.mongoURI = "mongodb://" + s.EmbeddedMongoAddr + "/"
	default:
		if a.embedded, err = repo.StartEmbedded(filepath.Join(s.DataDir, "db"), s.EmbeddedMongoAddr, log); err != nil {
			return nil, err
		}
		a.mongoURI = a.embedded.URI()
	}
	var opts repo.Options
	if !command {
		a.metrics = telemetry.NewRegistry()
		opts = repo.Options{Metrics: repo.NewMetrics(a.metrics), SearchSlots: s.EmbeddedSearchSlots, SearchQueue: s.EmbeddedSearchQueue}
	}
	if a.db, err = repo.OpenWith(ctx, a.mongoURI, s.MongoDatabase, opts); err != nil {
		a.Close()
		return nil, err
	}
	if a.indexes, err = a.db.Migrate(ctx); err != nil {
		a.Close()
		return nil, err
	}
	// Patients whose app redeemed an invitation before redemptions were
	// recorded have a login: no invitation may take it over.
	if n, err := a.db.MarkRedeemedInvitations(ctx, time.Now()); err != nil {
		a.Close()
		return nil, err
	} else if n > 0 {
		log.Info("patients whose app redeemed an invitation marked as having a login", "patients", n)
	}
	config := domain.Config{Store: a.db, SourceBase: s.FHIRSourceBase, Logger: log, MaxDataPointBytes: s.MaxDataPointBytes,
		IdentityProviders: s.IdentityProviders}
	if s.Mailer != nil {
		config.Mailer = s.Mailer
	}
	// The models (schemas, R5 definitions, R4 maps: ~0.6 s) serve requests;
	// the administration commands write none of what they check. Their
	// actor is the system, which the audit trail does not record.
	if !command {
		if err := a.openModels(&config); err != nil {
			a.Close()
			return nil, err
		}
		a.loaded = map[string]bool{"indexes": true, "omh-schemas": config.Schemas != nil,
			"r5-definitions": config.Validator != nil, "r4-maps": config.Converter != nil}
		a.audit = a.db.NewAuditLog(log, s.AuditBuffer)
		config.Auditor = a.audit
	}
	cursorKey, err := hkdf.Key(sha256.New, secret, nil, "exchange search cursor", 32)
	if err != nil {
		a.Close()
		return nil, err
	}
	// Every instance derives the same key, so they count an account's
	// failed sign-ins together.
	if config.ThrottleKey, err = hkdf.Key(sha256.New, secret, nil, "exchange sign-in throttle", 32); err != nil {
		a.Close()
		return nil, err
	}
	// Every instance opens the secrets that any of them sealed: identity
	// providers' and EHR registrations' client secrets, EHR tokens (the
	// name of the derivation stays: secrets sealed under it stay readable).
	if config.SecretsKey, err = hkdf.Key(sha256.New, secret, nil, "exchange identity provider secrets", 32); err != nil {
		a.Close()
		return nil, err
	}
	if a.catalog == nil { // an administration command, or no R5 package
		if a.catalog, err = fhirsearch.NewCatalog(nil); err != nil {
			a.Close()
			return nil, err
		}
	}
	a.search = fhirsearch.NewTranslator(a.catalog, cursorKey, s.FHIRSourceBase, nil)
	config.Searches = a.search
	if !command {
		config.ExportSearches = a.search
		if config.ExportFiles, err = a.exportFiles(); err != nil {
			a.Close()
			return nil, err
		}
	}
	// Patient access: the exchange as a SMART client of patients' EHRs.
	config.EHR = smartclient.New()
	a.service = domain.NewService(config)
	a.oauth, err = oauth.New(oauth.Config{
		Store: a.db, Users: a.service, SecretKey: secret, SigningKey: signingKey,
		PatientCodeChallenge: s.PatientChallenge, PatientCodeTTL: s.PatientCodeTTL, Logger: log, Metrics: a.registerer(),
		TrustedProxies: s.TrustedProxies, SessionLifetime: s.SessionLifetime, SessionIdleTimeout: s.SessionIdle,
		ResourceTypes: a.catalog.TypeNames(), PasswordSignInOff: !s.PasswordSignIn, TokenExchange: s.TokenExchange,
		PublicURL: s.PublicURL,
	})
	if err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// openModels loads what checks and converts requests: the Open mHealth and
// IEEE 1752 schemas (every one compiled now), the R5 definitions
// (validation and search indexes) and the R4 maps. Missing standards data
// is a warning (scripts/setup); a schema or map that does not compile, or
// Open mHealth schemas without the IEEE 1752 schemas they reference, an
// error.
func (a *app) openModels(config *domain.Config) error {
	s, log := a.settings, a.log
	var err error
	a.schemas, err = omh.OpenRegistry(s.OMHSchemaDir, s.OMHIEEESchemaDir)
	switch {
	case errors.Is(err, omh.ErrNotInstalled):
		a.schemas = nil
		log.Warn("Open mHealth schemas are not installed: data points are checked for structure only; run scripts/setup", "error", err)
	case err != nil:
		// Installed but incomplete (the IEEE 1752 schemas they reference
		// are missing) or broken: checking data points against part of a
		// schema would accept what the schema refuses.
		return err
	default:
		config.Schemas = a.schemas
	}
	defs, validator, err := fhirdefs.OpenR5(s.FHIRPackagesDir)
	if err != nil {
		log.Warn("FHIR R5 packages are not installed: the imported store is read-only; run scripts/setup", "error", err)
		return nil
	}
	if a.catalog, err = fhirsearch.NewCatalog(defs); err != nil {
		return err
	}
	config.Validator, config.Indexer = validator, a.catalog
	config.Converter, err = openImporter(s, defs, log)
	return err
}

// exportFiles is where bulk exports keep their files: in GridFS on
// MongoDB, where several instances serve one database and each must read
// every job's files; under DATA_DIR with the embedded database, which one
// process serves, and whose in-memory sorts GridFS downloads would pay
// for (repo/exportfiles.go).
func (a *app) exportFiles() (domain.ExportFiles, error) {
	if a.embedded == nil {
		return a.db.ExportFilesInGridFS(), nil
	}
	return repo.NewDirExportFiles(filepath.Join(a.settings.DataDir, "exports"))
}

// registerer is where the server's layers register their series; nil
// for commands.
func (a *app) registerer() prometheus.Registerer {
	if a.metrics == nil {
		return nil
	}
	return a.metrics
}

// Close writes the audit events still queued, disconnects, and stops the
// embedded database, if any.
func (a *app) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if a.audit != nil {
		if err := a.audit.Close(ctx); err != nil {
			a.log.Error("closing the audit trail", "error", err)
		}
	}
	if a.db != nil {
		_ = a.db.Close(ctx)
	}
	if a.embedded != nil {
		a.embedded.Stop()
	}
}

// loadSecrets returns SECRET_KEY and the RSA signing key, generating each on
// first start and keeping it under DATA_DIR (mode 0600) when not set.
func loadSecrets(s *settings) (secret, rsaPEM []byte, err error) {
	if err := os.MkdirAll(s.DataDir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("DATA_DIR: %w", err)
	}
	secret = []byte(s.SecretKey)
	if s.SecretKey == "" {
		if secret, err = keptFile(filepath.Join(s.DataDir, "secret_key"), func() ([]byte, error) {
			b := make([]byte, 32)
			_, err := rand.Read(b)
			return []byte(hex.EncodeToString(b)), err
		}); err != nil {
			return nil, nil, err
		}
		secret = []byte(strings.TrimSpace(string(secret)))
	}
	rsaPEM = []byte(s.RSAPrivateKeyPEM)
	if s.RSAPrivateKeyPEM == "" {
		if rsaPEM, err = keptFile(filepath.Join(s.DataDir, "oidc_rsa_private_key.pem"), oauth.GenerateRSAPrivateKeyPEM); err != nil {
			return nil, nil, err
		}
	}
	return secret, rsaPEM, nil
}

// keptFile returns the content of path, creating it with generate first
// when it does not exist. The file appears whole (written aside, then
// linked into place), so two processes starting together agree on one value.
func keptFile(path string, generate func() ([]byte, error)) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return b, err
	}
	if b, err = generate(); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	if err := os.Link(tmp.Name(), path); errors.Is(err, fs.ErrExist) {
		return os.ReadFile(path)
	} else if err != nil {
		return nil, err
	}
	return b, nil
}

// openImporter compiles the official R4 -> R5 maps for /fhir-import/R4,
// once, and logs what it built. Without the maps, their ConceptMaps (when
// codes are translated) or the R4 definitions the import is unavailable
// (a warning); a map or ConceptMap that does not compile stops start-up.
func openImporter(s *settings, r5 *fhirdefs.Package, log *slog.Logger) (domain.R4Converter, error) {
	conceptMaps := ""
	if s.XverTranslateCodes {
		conceptMaps = s.XverConceptMapDir
	}
	r4, err := fhirdefs.OpenR4(s.FHIRPackagesDir)
	for _, dir := range []string{s.XverPackageDir, conceptMaps} {
		if err == nil && dir != "" {
			_, err = os.Stat(dir)
		}
	}
	if err != nil {
		log.Warn("R4 import is unavailable: the R4 -> R5 maps, their ConceptMaps or the R4 definitions are not installed; run scripts/setup", "error", err)
		return nil, nil
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	engine, err := converter.Compile(converter.Options{MapsDir: s.XverPackageDir, PatchesDir: s.XverPatchesDir,
		ConceptMapsDir: conceptMaps, R4: r4, R5: r5, Log: log})
	if err != nil {
		return nil, fmt.Errorf("R4 import: %w", err)
	}
	runtime.ReadMemStats(&after)
	log.Info("R4 import maps compiled", "maps", engine.Describe(), "heapMB", float64(after.HeapAlloc-min(before.HeapAlloc, after.HeapAlloc))/(1<<20))
	return converter.NewImporter(engine), nil
}
