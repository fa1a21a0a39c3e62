// Package telemetry is how the exchange and its MCP gateway report on
// themselves to operators: structured logs (log/slog), Prometheus metrics
// (client_golang) and request ids. Both programs and the layers that log
// or count share it; it knows nothing of the exchange's domain.
//
// Design principles:
//
//   - Logs are one line per event, JSON by default (LOG_FORMAT), with
//     internal ids only: never bodies, health data, tokens, codes,
//     passwords, cookies, names or emails. Callers choose the fields; this
//     package makes them cost nothing below the level that is logged.
//   - Metrics are registered on a registry each program owns (never the
//     global one), with bounded label sets: route templates, status
//     classes, codes from closed lists.
//   - /metrics is served by [MetricsHandler], behind a bearer token when
//     one is configured.
package telemetry
