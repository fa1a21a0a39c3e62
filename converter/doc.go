// Package converter turns FHIR R4 resources into R5 by running the
// official HL7 cross-version StructureMaps (FHIR Mapping Language, the
// `*4to5.fml` files of hl7.fhir.uv.xver) and reports what the conversion
// lost.
//
// It owns three steps, each in its own file:
//
//   - parse.go reads FML text into maps, groups and rules (the syntax
//     tree), with no knowledge of FHIR types;
//   - compile.go joins every map into one group namespace (the official
//     maps import each other with the wildcard `*4to5`), applies local
//     patches, resolves `uses` aliases to type names, group calls and
//     `extends` to groups, and indexes the `<<type+>>` default groups by
//     source type and the `<<types>>` groups by (source, target) type
//     pair: once, at start-up;
//   - run.go executes a compiled group over JSON trees, typing the R4
//     source by the R4B definitions (hl7.fhir.r4b.core 4.3.0) and the R5
//     target by hl7.fhir.r5.core 5.0.0, through package fhirdefs;
//   - convert.go converts one resource and reports its losses, and r4.go
//     is the domain's R4Converter: Google's R4 parser checks the input
//     first.
//
// Design principles:
//
//   - A simple rule `src.a -> tgt.b` dispatches on the pair (source type,
//     target type): the `<<types>>` group of that pair, else the source
//     type's `<<type+>>` group. That is what carries an R4 Reference into
//     an R5 CodeableReference's `reference`, and a CodeableConcept into
//     its `concept`.
//   - A rule that cannot run (an unknown element, a type with no group, an
//     unsupported condition or FHIRPath transform) is skipped for that
//     source item, never failing the conversion; what it would have
//     carried shows up in the data-loss report instead (convert.go).
//   - Values are carried as they were sent: decimals keep their digits.
//     Primitive extensions (`_x` siblings) are not carried, and
//     `translate()` passes codes through unchanged.
package converter
