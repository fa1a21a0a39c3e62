// Package domain owns the exchange's vocabulary: the entities (users,
// organizations, patients, studies, consents, data sources, FHIR sources,
// OAuth clients), the closed set of error codes every layer speaks, the
// permission model, and the use cases that change them.
//
// Design principles:
//
//   - Nothing here knows about HTTP, Fiber, fosite or MongoDB. Handlers call
//     the use cases on [Service]; the use cases reach storage only through the
//     [Store] interface, which the repo package implements.
//   - Every rule a request must pass (validation, uniqueness, who may do what)
//     is decided here, once, so the admin API, the FHIR API and the command
//     line behave the same.
//   - Errors are *[Error] values carrying one [Code]; the transport layers map
//     codes to statuses and never inspect messages.
//   - The use cases decide what the audit trail records (audit.go): every
//     read, search, write and import of patient data, consent change,
//     sign-in and token issue, refusals included, through the [Auditor]
//     port, which must not block.
package domain
