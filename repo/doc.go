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
// FerretDB has no transactions, and MongoDB's are not relied on: a process
// may die (kill -9, power loss) between any two writes. Every write path
// is built so that the same request sent again after a crash ends in the
// state one successful request gives: nothing lost, nothing doubled, and
// no document left that refuses a later write forever. Four devices do it.
//
// Keys that identify what a request sends. A resend must be recognised as
// such. Imported resources take their _id from their unique key (a
// name-based UUID of source, type and upstream id, or, without an upstream
// id, a hash of the body sent), so their insert is one document that is
// either stored or not, and a resend is a duplicate of the stored one.
// Native observations claim their identifiers, or their content when they
// have none, in observation_identifiers, whose _id is a hash of the key.
// Imported updates and patches record a hash of the request that made the
// current version: the same request again is answered with that version
// rather than applied twice. Emails and sibling organization names are
// unique too.
//
// Write intents. A write of several documents first inserts one
// write_intents document that names what it is about to write (ids
// reserved, keys it claims, the enrollments or answers it writes; an
// observation write names only its ids, which each of its claims names as
// its owner), and deletes it after its last write. An intent that outlives
// its write marks a write cut short. Its repair rolls creates back (their
// claims, users and records, unless the final record is stored: then the
// create is complete) and rolls forward the changes that were checked in
// full before their first write (deletes, enrollments, consent answers,
// invitation redemptions): their repair applies them again, which changes
// nothing that is already done. A later enrollment or consent write marks
// the (patient, study) pairs it changes in the intents of earlier ones,
// whose repair then leaves those pairs alone: a withdrawn answer is not
// brought back by the repair of the write that gave it. A forward write
// that fails half way, however it fails, gives its intent up (giveUp) for
// the repair to finish, from its marks on (an update of many documents may
// mark some before it is refused): its caller is told it failed, and a
// retry finds it done. That repair marks its pairs again, in the intents
// of the writes that began before it (or in the same millisecond), since
// its own marks may have failed. A create, an identifier change or an observation batch that
// fails with a refusal undoes or settles what it wrote at once; one whose command
// failed with an unknown outcome (the connection lost, a timeout:
// outcomeUnknown) does not, since the server may still apply that command
// after the undo has read the store (a record replaced after its claims
// were settled, observations inserted after their claims were released). It
// leaves its intent, given up, to the repair, as a crash would. A write
// whose intent insert itself failed so stops there, having written nothing
// more, and puts a given-up copy of the intent in its place
// (giveUpUnrecorded), whose repair settles nothing: the insert, landing
// late with this process's live lease, would count as a write running for
// intentTimeout (an identifier change's intent is the patient's lock), and
// then be rolled forward.
//
// Leases. Every process that writes intents holds a service_instances
// document it renews every leaseRenew; an intent is abandoned when its
// process's lease is older than leaseTimeout or gone, when it is older
// than intentTimeout, leaseTimeout after its write returned without
// settling or without removing it (it gave the intent up: giveUp; a write
// that returned a network error may still land until then, as a dead
// process's may; a repair whose command failed so gives its intent back
// the same way), or, at the start of a process that started the embedded
// database itself, always (no other process can be writing).
// Only abandoned intents are repaired; the leases are what keeps one
// process from undoing the write another is still making (MongoDB with
// several instances, a command beside the server). A repair first adopts
// the intent: one compare-and-set moves it, as read, to the repairer's
// lease, so that of two processes that found it abandoned one repairs it,
// and a repair never acts on a state that a write begun after another
// repair ended the intent has moved on.
//
// Claims that point to their owner. A claim is taken over only when its
// owner is not stored and no intent of a running write holds its key (for
// an observation claim: no intent's ids include its owner);
// intents are checked before the owner, and a write deletes its intent
// only after its owner is stored, so a claim of a write in flight is never
// taken. A claim held by a stored owner refuses the new write with a
// duplicate that names the owner (domain.Error.Stored when the owner is
// what the request sends: "409 means stored").
//
// One writer of a patient's claims at a time. Updates of one patient may
// run at once, and their claims on one identifier are one document: a
// release by one update could take the claim another relies on. So an
// update that changes a patient's identifiers takes the patient's
// identifier lock, its intent, whose _id derives from the patient id (a
// second is a duplicate key), and holds it until it has settled its
// claims against the record as stored; other updates of the patient keep
// its identifiers by their compare-and-set (UpdatePatient says why this
// converges).
//
// Why this holds: every document is written by a single-document
// operation, which MongoDB and FerretDB make atomic; the state between two
// writes of a path is therefore always one of the prefixes of its write
// sequence, and for each prefix either the retry (which recognises what
// was stored by its keys and redoes the rest) or the repair of the intent
// (which exists from the first write that needs undoing or finishing)
// reaches the final state. The crash suite (cmd/exchange/crash_test.go)
// kills the service at every write of every path and checks it.
//
// Repair runs at start-up before the service answers (bounded by the
// number of intents, the writes in flight when a process died, and by a
// time budget), from the periodic sweep, when a write collides with an
// abandoned intent's claim, and on demand (exchange doctor), which also
// scans every claim for orphans left by versions before intents.
package repo
