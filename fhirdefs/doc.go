// Package fhirdefs reads FHIR definitions from the official npm packages
// (hl7.fhir.r5.core, hl7.fhir.r5.expansions, and R4's definitions from
// hl7.fhir.r4.examples) and validates resources against them: the R5
// gate every imported resource passes before it is stored.
//
// Design principles:
//
//   - The definitions are the packages' own StructureDefinitions (their
//     snapshots) and ValueSet expansions, read where scripts/setup put
//     them and loaded on first use of each type or value set; nothing of
//     them is copied into this repository.
//   - Validation checks what the definitions state structurally: the
//     resource type, every element known for its type (choice elements
//     by their type suffix), JSON kinds and primitive formats (the
//     packages' regular expressions), cardinality, and codes of required
//     bindings whose value sets the expansions package enumerates. The
//     FHIRPath invariants (ele-1, obs-6, ...) are not evaluated. The R4
//     import's check (NewR4Validator) adds the resource types each
//     literal reference may name.
//   - Validation is on the request path of every imported write: each
//     definition path's elements, JSON keys, types and rules are tabled
//     once per validator, an object is read by its own keys, and a path
//     string is made only for an issue.
//   - What the official R5 JSON Schema (openapi/fhir.schema.json) refuses
//     is refused, so that a stored resource passes other R5 tools: a
//     primitive extension sibling (_name) is taken only where the schema
//     has one (not beside ids, Narrative.div, targeted canonicals or
//     complex elements; TestExtensionSiblingsFollowTheR5Schema compares
//     every element). The one difference is FHIR JSON's null that aligns
//     a repeating primitive's extensions, which the schema cannot express.
//     Package fhirdefstest gives tests that schema as a second opinion.
//   - Every problem is an Issue with the FHIRPath of the element at
//     fault; a resource is valid when there are none.
package fhirdefs
