// Package handlers is the exchange's HTTP surface on Fiber: the routes of
// the admin API (/api/v1) and the FHIR interface, the mounting of the
// OAuth endpoints (/o/), the bearer-token middleware that turns a request
// into a domain.Actor, the one request middleware of operations (observe:
// request ids, the request's origin for the audit trail, a log line and
// the request series per request), /health, /ready and /metrics, and the
// single error handler that renders every failure.
//
// Design principles:
//
//   - Handlers decode, call one use case of domain.Service, and encode. They
//     hold no business rules: validation and permissions live in domain.
//   - Errors travel as domain errors to one Fiber ErrorHandler, which renders
//     an OperationOutcome on FHIR paths and {"detail": ...} elsewhere. Only
//     unexpected errors (500) are logged in full; their text never reaches
//     the client.
//   - Logs and metric labels carry route templates and internal ids, never
//     the path's values, queries, bodies, headers or cookies.
package handlers
