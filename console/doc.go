// Package console is the exchange's web console for practitioners and
// patients, served at /console/ on the exchange's own origin.
//
// It owns the console's pages (server-rendered html/template), its small
// stylesheet and script (embedded with go:embed: no build step, no CDN,
// nothing fetched at run time), the charts of patients' observations
// (SVG drawn with gonum.org/v1/plot), the QR codes of invitation links
// (github.com/skip2/go-qrcode, drawn as SVG), the downloads of the data a
// page shows (FHIR NDJSON and CSV), and the acceptance of console
// invitations, where a patient chooses a password.
//
// Design principles:
//
//   - No rule lives here. Every read and write is a domain use case, acting
//     as the user of the exchange's login session (oauth.SessionUser) with
//     the same domain.Actor, so the user's whole permission model and not a
//     token's scopes. A control the user may not use is not shown (the
//     domain's predicates decide), and forcing it answers what the admin
//     API answers: the domain error, rendered with httpstatus.Of.
//   - Observations are read through the same FHIR search translator and
//     domain search as /FHIR/R5 (a study view is the FHIR study search),
//     and data points are decoded with package omh.
//   - Plain net/http: the exchange's Fiber application mounts the handler,
//     as it mounts /o/, and tests drive it through the real stack.
//   - Strict Content-Security-Policy: scripts and styles only from the
//     console's own files, no inline script or style attribute (charts are
//     rewritten to SVG presentation attributes), no framing; every form
//     carries the origin's CSRF token; pages are never cached.
//   - No lost updates: a form that posts every field of a record carries
//     the version it showed (formVersion), which the domain checks against
//     the record it changes; a form that adds to or removes from a list
//     sends that operation, not a list computed from its own read.
package console
