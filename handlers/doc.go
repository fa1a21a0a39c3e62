// Package handlers is the exchange's HTTP surface on Fiber: the routes of
// the admin API (/api/v1), the mounting of the OAuth endpoints (/o/), the
// bearer-token middleware that turns a request into a domain.Actor, and the
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
package handlers
