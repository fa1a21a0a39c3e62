package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"runtime/debug"
	"time"

	"exchange/console"
	"exchange/domain"
	"exchange/handlers"
	"exchange/repo"
)

// shutdownGrace is how long in-flight requests may take once SIGTERM came.
const shutdownGrace = 30 * time.Second

// sweepEvery is how often expired codes, tokens and throttle counters go.
const sweepEvery = time.Minute

func serveCommand(ctx context.Context, s *settings, log *slog.Logger, io stdio, args []string) error {
	if err := parseFlags(newFlags("serve", io), args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", s.Port))
	if err != nil {
		return fmt.Errorf("PORT %d: %w", s.Port, err)
	}
	a, err := openApp(ctx, s, log, false)
	if err != nil {
		ln.Close()
		return err
	}
	defer a.Close()
	if a.embedded != nil && !s.GoMemLimitSet {
		// FerretDB runs in this process: the limit makes the collector
		// work harder as the heap nears it, instead of letting the
		// decoded documents of a few searches double it.
		debug.SetMemoryLimit(embeddedMemoryLimit)
		log.Info("embedded database: memory limit set (GOMEMLIMIT)", "limitMiB", embeddedMemoryLimit>>20)
	}
	// Before serving: a retry of a request the last process died under
	// must find its half-done write repaired. Bounded by repairBudget.
	repair(ctx, a, log, a.embedded != nil, "start-up")
	metrics, stopMetrics, err := s.Metrics.Serve(a.metrics, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	metrics = mainPortMetrics(s, metrics, log)
	var capacity func() *domain.StoreCapacity // nil on MongoDB: nothing to say
	var size *repo.SizeWatch
	if a.embedded != nil {
		size = repo.NewSizeWatch(a.db, repo.EmbeddedComfortableObservations, log)
		capacity = size.Capacity
	}
	web := handlers.New(handlers.Config{Service: a.service, OAuth: a.oauth, Search: a.search, Schemas: a.schemas, Ping: a.db.Ping,
		Loaded: a.loaded, Capacity: capacity, Metrics: a.metrics, MetricsHandler: metrics, Logger: log, TrustedProxies: s.TrustedProxies,
		Exports: s.Exports,
		Console: console.New(console.Config{Service: a.service, OAuth: a.oauth, Search: a.search, Schemas: a.schemas,
			ObservationResource: handlers.ObservationResource, GatewayClientID: s.MCPClientID, Capacity: capacity, Logger: log,
			Exports: s.Exports})})

	background, stopBackground := context.WithCancel(ctx)
	defer stopBackground()
	go sweep(background, a, log)
	if size != nil {
		go watchEmbeddedSize(background, size, log)
	}
	if s.AuditRetention > 0 {
		go expireAuditEvents(background, a.db, s.AuditRetention, log)
	}
	exports := &domain.ExportRunner{Service: a.service, Encoder: handlers.ExportEncoder{}, Concurrency: s.ExportConcurrency,
		Limits: s.Exports, Log: log}
	exportsDone := make(chan struct{})
	go func() { exports.Run(background); close(exportsDone) }()
	defer func() { stopBackground(); <-exportsDone }() // running jobs handed back before the database closes
	if s.PatientAccessSyncInterval > 0 {
		go syncPatientAccess(background, a, s.PatientAccessSyncInterval, log)
	}

	served := make(chan error, 1)
	go func() { served <- handlers.Serve(web, ln) }()
	base := fmt.Sprintf("http://localhost:%d", ln.Addr().(*net.TCPAddr).Port)
	printBanner(ctx, a, io, base)

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: draining requests", "grace", shutdownGrace)
	if err := web.ShutdownWithTimeout(shutdownGrace); err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	// EHR pulls in the background stop; their runs are recorded
	// interrupted.
	pullsDone, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	a.service.Shutdown(pullsDone)
	cancel()
	log.Info("stopped")
	return nil
}

// sweep deletes expired OAuth records and throttle counters, and repairs
// the writes of processes that died (on MongoDB, other instances), until
// ctx ends.
func sweep(ctx context.Context, a *app, log *slog.Logger) {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if n, err := a.db.Sweep(ctx, now.UTC()); err != nil && !errors.Is(err, context.Canceled) {
				log.Warn("sweeping expired records failed", "error", err)
			} else if n > 0 {
				log.Debug("swept expired records", "count", n)
			}
			repair(ctx, a, log, false, "sweep")
		}
	}
}

// embeddedMemoryLimit is the Go memory limit of a server running the
// embedded database when GOMEMLIMIT is not set: a soft ceiling for the
// process, FerretDB included (see docs/operations.md, sizing).
const embeddedMemoryLimit = 512 << 20

// sizeCheckEvery is how often the embedded database's size is compared
// with what it serves comfortably: a count from its statistics, no scan.
const sizeCheckEvery = time.Minute

// watchEmbeddedSize checks the embedded database's size at start-up and
// every minute, so that the warning comes within a minute of the store
// crossing its comfortable size (repo.SizeWatch).
func watchEmbeddedSize(ctx context.Context, w *repo.SizeWatch, log *slog.Logger) {
	t := time.NewTicker(sizeCheckEvery)
	defer t.Stop()
	for {
		if err := w.Check(ctx, time.Now()); err != nil && ctx.Err() == nil {
			log.Warn("counting the embedded database's observations failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// auditExpiryEvery is how often audit events past AUDIT_RETENTION go.
const auditExpiryEvery = time.Hour

// expireAuditEvents deletes, every hour, the audit events older than the
// retention, in batches.
func expireAuditEvents(ctx context.Context, db *repo.DB, retention time.Duration, log *slog.Logger) {
	t := time.NewTicker(auditExpiryEvery)
	defer t.Stop()
	for {
		n, err := db.DeleteAuditEventsBefore(ctx, time.Now().Add(-retention))
		if err != nil && ctx.Err() == nil {
			log.Warn("deleting expired audit events failed", "error", err)
		} else if n > 0 {
			log.Info("expired audit events deleted", "count", n, "retention", retention)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// printBanner tells a new user where the service is, how to log in, and
// where analysts point mongosh.
func printBanner(ctx context.Context, a *app, io stdio, base string) {
	out := io.out
	fmt.Fprintf(out, "Clinical data exchange listening on %s\n", base)
	fmt.Fprintf(out, "  OpenID Connect discovery: %s/o/.well-known/openid-configuration\n", base)
	if a.embedded != nil {
		fmt.Fprintf(out, "  Database: embedded FerretDB (SQLite) in %s\n", filepath.Join(a.settings.DataDir, "db"))
		fmt.Fprintf(out, "  Analysts: mongosh %s%s\n", a.mongoURI, a.settings.MongoDatabase)
	} else {
		fmt.Fprintf(out, "  Database: MongoDB, database %q\n", a.settings.MongoDatabase)
	}
	if _, err := a.service.UserByEmail(ctx, demoSuperuserEmail); err == nil {
		fmt.Fprintf(out, "  Log in: %s/o/login/ as %s, password %q (demo data; see `exchange seed`)\n", base, demoSuperuserEmail, demoPassword)
		return
	}
	if n, err := a.service.CountUsers(ctx); err == nil && n == 0 {
		fmt.Fprintln(out, "  No users yet. Load the demo data with `go run ./cmd/exchange seed --observations`,")
		fmt.Fprintln(out, "  or create your own login with `go run ./cmd/exchange createsuperuser --email you@example.org`.")
		return
	}
	fmt.Fprintf(out, "  Log in: %s/o/login/\n", base)
}

// syncPatientAccess starts, every tenth of the interval, the pulls of the
// EHR connections that are due (PATIENT_ACCESS_SYNC_INTERVAL): those
// whose patients let the exchange keep them up to date, not pulled for
// the interval. Instances share the work: a connection's lock lets one
// pull it.
func syncPatientAccess(ctx context.Context, a *app, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(max(interval/10, time.Minute))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n, err := a.service.SyncDue(ctx, interval); err != nil && ctx.Err() == nil {
				log.Warn("starting the scheduled EHR pulls failed", "error", err)
			} else if n > 0 {
				log.Info("scheduled EHR pulls started", "count", n)
			}
		}
	}
}

// mainPortMetrics decides whether /metrics is served on the public port
// (h: its handler there; nil: it is not). Without METRICS_TOKEN it would
// be anyone's to read: with MONGODB_URI, the production settings, it is
// then not served at all; with the embedded database (a laptop, a demo)
// it is, and start-up says so.
func mainPortMetrics(s *settings, h http.Handler, log *slog.Logger) http.Handler {
	if h == nil || s.Metrics.Token != "" {
		return h
	}
	if s.MongoURI != "" {
		log.Warn("/metrics is not served: on the public port it needs METRICS_TOKEN, or set METRICS_ADDR to serve it on a private address")
		return nil
	}
	log.Warn("/metrics is public: anyone who reaches PORT reads the service's metrics; set METRICS_TOKEN or METRICS_ADDR before exposing it")
	return h
}
