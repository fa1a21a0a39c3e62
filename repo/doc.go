// Package repo is the exchange's storage on MongoDB: it implements
// domain.Store and the OAuth storage of package oauth, creates the indexes,
// and starts the embedded FerretDB that stands in for MongoDB when no
// MONGODB_URI is configured.
//
// Design principles:
//
//   - One collection per entity, documents in camelCase with BSON dates, so
//     analysts can read them from the Mongo shell (the README documents them).
//   - Native entities have integer ids claimed in blocks (ids.go): a unique
//     insert, since FerretDB's $inc is not atomic.
//   - Uniqueness is enforced by unique indexes on scalar, always-present keys
//     and checked by inserts: FerretDB reports a duplicate from an update as
//     code 1, not 11000. Identifiers that must be unique across owners get one
//     document each in their own collection, inserted before the owner.
//   - There are no transactions (FerretDB has none): multi-document writes are
//     ordered so that a failure removes what was written before it.
//   - Driver errors are mapped at this boundary: no documents becomes
//     domain.CodeNotFound, a duplicate key domain.CodeDuplicate.
//   - The audit trail is written by AuditLog off the request path, in
//     batches; a lost event is counted and logged, never silent.
//   - Every driver command is timed (Metrics, a CommandMonitor that
//     composes with other watchers); on FerretDB, searches take one of a
//     few slots, so that a busy embedded database answers 503 instead of
//     drowning.
//   - Nothing here knows about HTTP.
package repo
