// Package bulkimport loads R4 files into a running exchange: it is the
// client behind `exchange import r4` (scripts/import-r4), and talks to the
// service only through its public endpoint POST /fhir-import/R4.
//
// Design principles:
//
//   - Streaming, flat memory. Input (NDJSON files, Bundles, or directories of
//     them) is read one resource at a time, Bundles entry by entry; at most
//     a fixed number of resources wait in batches, however large the input.
//   - Nothing is decided here that the service decides. Conversion, data
//     loss, validation and duplicates are the endpoint's answers; this
//     package only routes each resource to a FHIR source, batches, retries
//     what failed in transit, and records every answer.
//   - Resumable. Every answer lands in the report; a checkpoint beside it
//     records how far the input is answered without gaps, so running the
//     same command again skips that prefix; whatever was in flight is sent
//     again. The service recognises a resource it stored already (by its
//     upstream id, or, without one, by its content) and answers 409 naming
//     it; the importer reads that resource back before it counts the
//     entry as done. A 409 that names nothing is a refusal, not a success.
//     Resources without an id are named in the report by a content hash.
package bulkimport
