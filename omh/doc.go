// Package omh owns data points, Open mHealth's and IEEE 1752's: their
// schema identifiers and the codes built from them (omh:heart-rate:2.0,
// ieee:sleep-episode:1.0), the two kinds of header, the registry of
// official schemas with validation against them, and the reading of a data
// point's effective time frame.
//
// Design principles:
//
//   - The schemas are the official files, read where scripts/setup put them
//     (OMH_SCHEMA_DIR, and the IEEE 1752 schemas in their upstream folders
//     beside it); nothing of them is copied here. OpenRegistry compiles
//     every one of them once, so that a broken or incomplete installation
//     fails at start-up, by name, never while a data point is checked.
//   - No reference accepts anything: references among the Open mHealth
//     schemas resolve by file name in their folder, the Open mHealth
//     schemas' references to https://w3id.org/ieee/ieee-1752-schema/<file>
//     and the IEEE schemas' references to each other resolve by file name
//     among the IEEE files, and any other reference fails the compilation.
//     A schema is the file it is read from, whatever its $id says.
//   - The schema library validates; a shortcut only answers sooner. An
//     accept check, read once from the library's compiled schemas,
//     accepts the data points it can tell the library accepts, without
//     the library's cost; every other one, and every rejection and its
//     message, is the library's (accept.go).
//   - A header is an Open mHealth header (id, creation_date_time) or an
//     IEEE 1752 header (uuid, source_creation_date_time), told apart by
//     those members and checked against its own schema; both carry the
//     schema_id that names the body's schema, in either namespace.
//   - Time frames, the same shapes in both namespaces, keep the payload's
//     own times and offsets for rendering; UTC instants are derived only
//     for indexing.
package omh
