package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"exchange/console"
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
	web := handlers.New(handlers.Config{Service: a.service, OAuth: a.oauth, Search: a.search, Schemas: a.schemas, Ping: a.db.Ping, Logger: log,
		TrustedProxies: s.TrustedProxies,
		Console: console.New(console.Config{Service: a.service, OAuth: a.oauth, Search: a.search, Schemas: a.schemas,
			ObservationResource: handlers.ObservationResource, GatewayClientID: s.MCPClientID, Logger: log})})

	sweepCtx, stopSweeping := context.WithCancel(ctx)
	defer stopSweeping()
	go sweep(sweepCtx, a.db, log)

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
	log.Info("stopped")
	return nil
}

// sweep deletes expired OAuth records and throttle counters until ctx ends.
func sweep(ctx context.Context, db *repo.DB, log *slog.Logger) {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if n, err := db.Sweep(ctx, now.UTC()); err != nil && !errors.Is(err, context.Canceled) {
				log.Warn("sweeping expired records failed", "error", err)
			} else if n > 0 {
				log.Debug("swept expired records", "count", n)
			}
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
		fmt.Fprintln(out, "  No users yet. Load the demo data with `go run ./cmd/exchange seed`,")
		fmt.Fprintln(out, "  or create your own login with `go run ./cmd/exchange createsuperuser --email you@example.org`.")
		return
	}
	fmt.Fprintf(out, "  Log in: %s/o/login/\n", base)
}
