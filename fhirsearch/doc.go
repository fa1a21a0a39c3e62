// Package fhirsearch translates FHIR searches into MongoDB aggregation
// pipelines, the way FerretDB translates wire commands for its backends:
// a query string is first parsed into a typed Query (Parse), then the
// Query, narrowed to what the caller may see, is planned into one pipeline
// of $match, $sort, $limit and $project stages (Query.Plan).
//
// Design principles:
//
//   - One catalog (Catalog) lists every resource type served with its
//     interactions and search parameters: the configuration table, and
//     every other R5 resource type with the parameters R5 defines for it.
//     The CapabilityStatement is generated from it, the parser accepts
//     exactly what it lists, and the imported store's index follows it.
//   - Parsing is pure and total: any input gives a Query or a domain error
//     naming the parameter; nothing here touches the database.
//   - Joins (enrollment, consent, membership) are not translated: the
//     domain resolves them first and hands the plan id lists (domain.Scope).
//   - Everything that narrows the result is a $match the database can
//     answer from an index: equality fields first, then the sort field, then
//     ranges. Nothing is filtered in Go, and no page is reached with $skip:
//     the next page continues after a signed keyset cursor.
package fhirsearch
