// Command gateway is the MCP gateway of the clinical data exchange: it lets
// assistant clients query the exchange as the user who signed in.
//
//	gateway [serve]       MCP over Streamable HTTP at /mcp, with the OAuth broker (the default)
//	gateway stdio         MCP over stdin/stdout with a token from `exchange token create`
//	gateway healthcheck   exit 0 when the local gateway is live (/health) and ready (/ready), for containers
//
// Settings come from environment variables; see docs/mcp-gateway.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"exchange/mcp"
	"exchange/telemetry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		if errors.As(err, new(usageError)) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError is a command line the program cannot make sense of.
type usageError string

func (e usageError) Error() string { return string(e) }

const usage = `usage: gateway [serve | stdio | healthcheck | help]

  serve        MCP over Streamable HTTP at /mcp with the OAuth broker (default)
  stdio        MCP over stdin/stdout, acting with SERVICE_ACCESS_TOKEN
  healthcheck  exit 0 if the gateway on MCP_HTTP_ADDR is live (/health) and ready (/ready)`

// run is the whole program: settings come through getenv and output goes
// to the given streams, so tests run it as users do.
func run(ctx context.Context, args []string, getenv func(string) string, in io.Reader, out, errOut io.Writer) error {
	name := "serve"
	if len(args) > 0 {
		name = args[0]
	}
	if len(args) > 1 {
		return usageError(fmt.Sprintf("unexpected argument %q\n%s", args[1], usage))
	}
	logs, err := telemetry.ParseLogConfig(getenv("LOG_FORMAT"), getenv("LOG_LEVEL"))
	if err != nil {
		return err
	}
	log := logs.NewLogger(errOut)
	switch name {
	case "serve":
		s, warnings, err := loadSettings(getenv)
		if err != nil {
			return err
		}
		for _, w := range warnings {
			log.Warn(w)
		}
		return serve(ctx, s, log)
	case "stdio":
		return stdio(ctx, getenv, in, out, log)
	case "healthcheck":
		return healthcheck(ctx, getenv)
	case "help", "-h", "--help":
		fmt.Fprintln(out, usage)
		return nil
	}
	return usageError(fmt.Sprintf("unknown command %q\n%s", name, usage))
}

// serve runs the HTTP gateway until ctx ends, then drains requests.
func serve(ctx context.Context, s *settings, log *slog.Logger) error {
	reg := telemetry.NewRegistry()
	metrics, stopMetrics, err := s.Metrics.Serve(reg, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	if metrics != nil && s.Metrics.Token == "" {
		log.Warn("/metrics is public: anyone who reaches MCP_HTTP_ADDR reads the gateway's metrics; set METRICS_TOKEN or METRICS_ADDR before exposing it")
	}
	g, err := mcp.New(mcp.Config{
		ServiceURL: s.ServiceURL, ServiceBrowserURL: s.ServicePublicURL,
		ClientID: s.ClientID, ClientSecret: s.ClientSecret,
		ResourceURL: s.ResourceURL, BrokerKey: s.BrokerKey, AllowedRedirects: s.AllowedRedirects,
		RequireAudience: s.RequireAudience, ApprovalLifetime: s.ApprovalLifetime, Log: log, Metrics: reg, MetricsHandler: metrics,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("MCP_HTTP_ADDR: %w", err)
	}
	srv := &http.Server{Handler: g.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	log.Info("gateway listening", "addr", ln.Addr().String(), "mcp", s.ResourceURL+"/mcp", "service", s.ServiceURL,
		"introspection", s.ClientSecret != "", "require_audience", s.RequireAudience)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	log.Info("gateway stopping")
	drain, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(drain)
}

// stdio serves the tools over stdin/stdout with one token for every call.
func stdio(ctx context.Context, getenv func(string) string, in io.Reader, out io.Writer, log *slog.Logger) error {
	base, token := get(getenv, "SERVICE_BASE_URL", ""), get(getenv, "SERVICE_ACCESS_TOKEN", "")
	if token == "" {
		return errors.New("SERVICE_ACCESS_TOKEN: required for stdio (a token from `exchange token create --email ...`)")
	}
	tools, err := mcp.NewToolServer(base, nil, log)
	if err != nil {
		return err
	}
	s := server.NewStdioServer(tools)
	s.SetErrorLogger(slog.NewLogLogger(log.Handler(), slog.LevelError))
	s.SetContextFunc(func(ctx context.Context) context.Context { return mcp.WithToken(ctx, token) })
	err = s.Listen(ctx, in, out)
	if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// healthcheck probes the local gateway's /health (it answers) and /ready
// (the exchange is ready and accepts the gateway's credentials): on its
// loopback address when it listens on every interface.
func healthcheck(ctx context.Context, getenv func(string) string) error {
	addr, _, err := listenAddr(getenv)
	if err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, path := range []string{"/health", "/ready"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+path, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s answered %d: %s", path, resp.StatusCode, strings.TrimSpace(string(body)))
		}
	}
	return nil
}
