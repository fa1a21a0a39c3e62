// Package converter turns FHIR R4 resources into R5 by running the
// official HL7 cross-version StructureMaps (FHIR Mapping Language, the
// `*4to5.fml` files of hl7.fhir.uv.xver) with their ConceptMaps, and
// reports what the conversion lost.
//
// It owns these steps, each in its own file:
//
//   - parse.go reads FML text into maps, groups and rules (the syntax
//     tree), with no knowledge of FHIR types;
//   - compile.go joins every map into one group namespace (the official
//     maps import each other with the wildcard `*4to5`), applies local
//     patches, resolves `uses` aliases to type names, group calls and
//     `extends` to groups, each translate() to its ConceptMap
//     (conceptmaps.go), and indexes the `<<type+>>` default groups by
//     source type and the `<<types>>` groups by (source, target) type
//     pair: once, at start-up;
//   - run.go executes a compiled group over JSON trees: its rules, their
//     sources, conditions and targets; source.go types the R4 source by
//     R4's own definitions (4.0.1, the StructureDefinitions the maps were
//     written against) and target.go builds the R5 target, typed by
//     hl7.fhir.r5.core 5.0.0, through package fhirdefs; typing.go tables
//     each definition's elements by name, once per engine, so that typing
//     a member while a conversion runs is a map read, not a search of
//     the definitions, and each element a rule names remembers the
//     element it found last (elemRef), so that the read is mostly a
//     pointer comparison; the groups that only copy a primitive's value
//     (the maps' string, code, date, ... groups) are marked at Compile,
//     and such a copy of a primitive without id or extensions is made
//     without running them (valueCopy: TestValueCopies and
//     FuzzValueCopies compare it with the groups run); the values a
//     conversion builds are allocated in blocks;
//   - write.go writes the R5 JSON and records which R4 values it carried;
//   - convert.go converts one resource and reports its losses;
//     verify.go checks, once per type, that its map reads only elements
//     R4 defines; and r4.go is the domain's R4Converter: the input is
//     validated against R4's definitions first (fhirdefs.NewR4Validator).
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
//     carried shows up in the data-loss report instead.
//   - The loss report is exact: every R4 scalar is known by where it sits
//     (its object, member and index), each R5 value written remembers the
//     R4 scalar a rule carried it from, and an R4 scalar no written value
//     came from is dropped, whatever text survives elsewhere. A subtree
//     dropped whole is reported as one path.
//   - Values are carried as they were sent: decimals keep their digits.
//     A primitive's `_x` sibling (its id and extensions) travels with it
//     through every rule that copies, renames or translates it, arrays
//     aligned by index, and is dropped only with its primitive (or where
//     R5 JSON has no place for it, by fhirdefs' one rule that the
//     validator applies too: ids, canonicals that name their targets, an
//     array item without a value).
//   - translate() applies the official ConceptMaps: an `equivalent`
//     target, else the first other than `not-related-to`; a code the map
//     does not translate passes through unchanged (R5 validation
//     decides). Without ConceptMaps every code passes through.
//   - An element R5 requires that the R4 resource cannot give (Coverage
//     kind, Condition clinicalStatus) is written with no value and FHIR's
//     data-absent-reason extension (`unsupported`), and reported at its
//     place in the resource imported (Claim.contained.kind for the kind
//     of a contained Coverage, as the loss report names places); a
//     required canonical, which R5 JSON cannot mark so, stays missing and
//     R5 validation refuses the resource.
package converter
