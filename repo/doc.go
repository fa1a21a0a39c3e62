// Package repo is the exchange's storage on MongoDB: it implements
// domain.Store and the OAuth storage of package oauth, creates the indexes,
// and starts the embedded FerretDB that stands in for MongoDB when no
// MONGODB_URI is configured.
//
// Design principles:
//
//   - One collection per entity, documents in camelCase with BSON dates, so
//     analysts can read them from the Mongo shell (docs/document-model.md documents them).
//   - Native entities have integer ids claimed in blocks (ids.go): a unique
//     insert, since FerretDB's $inc is not atomic.
//   - Uniqueness is enforced by unique indexes on scalar, always-present keys
//     and checked by inserts: FerretDB reports a duplicate from an update as
//     code 1, not 11000. Identifiers that must be unique across owners get one
//     document each in their own collection (a claim), inserted before the
//     owner; each claim names its owner.
//   - Driver errors are mapped at this boundary: no documents becomes
//     domain.CodeNotFound, a duplicate key domain.CodeDuplicate.
//   - On FerretDB every lookup reads the whole collection, found or not:
//     what a write needs to read about many documents it reads in one
//     query, not one per document.
//   - Scope codes, which are never changed once created, are read once
//     per process (scopeCodeCache); everything else is read from the
//     database each time, so that what another process wrote is seen.
//   - The audit trail is written by AuditLog off the request path, in
//     batches; a lost event is counted and logged, never silent.
//   - Every driver command is timed (Metrics, a CommandMonitor that
//     composes with other watchers); on FerretDB, searches take one of a
//     few slots, so that a busy embedded database answers 503 instead of
//     drowning.
//   - Nothing here knows about HTTP.
//
// # Writes converge without transactions
//
// A process may die between any two writes, and no transaction is relied
// on: a write of several documents opens a write intent first, and
// whatever a crash leaves is finished or undone by the retry (which
// recognises what was stored by its keys) or by the repair of the intent.
// intents.go holds the intent and its lifecycle, leases.go which process
// holds what, repair.go when an intent is abandoned and how it is
// repaired; each kind's write and repair sit side by side in the file of
// its collection. docs/durability.md tables every kind (write order, what
// a crash leaves, its repair) and why this converges.
package repo
