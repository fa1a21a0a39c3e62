// Package omh owns Open mHealth data points: their schema identifiers and
// the codes built from them (omh:heart-rate:2.0), the registry of official
// schemas read from OMH_SCHEMA_DIR with validation against them, and the
// reading of a data point's effective time frame.
//
// Design principles:
//
//   - The schemas are the official files, read where scripts/setup put them
//     and compiled once each on first use; nothing of them is copied here.
//   - Schemas that reference the IEEE 1752 schemas by URL (w3id.org/ieee/...)
//     cannot resolve them here (no network, no copy): those references
//     accept any value, and the rest of the schema still applies. The time
//     frame, which matters for indexing, is read by this package itself.
//   - Time frames keep the payload's own times and offsets for rendering;
//     UTC instants are derived only for indexing.
package omh
