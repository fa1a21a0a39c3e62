package domain

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// R4Converter converts FHIR R4 resources to R5 (package converter runs
// the official HL7 StructureMaps).
type R4Converter interface {
	// ConvertR4 checks one R4 resource, decoded by DecodeJSON and its id
	// already removed, and converts it; refs, when not nil, rewrites the
	// literal references it writes. Returns CodeNotSupported for a type
	// it does not convert and CodeInvalid for input that is not valid R4.
	ConvertR4(resource map[string]any, refs ReferenceRewriter) (*R4Conversion, error)
	// MapSet names the maps it runs, for every import outcome.
	MapSet() string
}

// ReferenceRewriter maps a literal reference an upstream source wrote,
// read as [base/]type/id (type already the R5 type's name, base "" for a
// relative reference), to the reference the imported store holds and the
// identifier system that keeps the upstream id; false leaves it as
// written.
type ReferenceRewriter func(base, resourceType, id string) (stored, system string, ok bool)

// R4Conversion is a converted resource.
type R4Conversion struct {
	Type string // the R5 type
	// Body is the R5 JSON, ready for the create path: the upstream id is
	// back in `id`, where the create path takes it from.
	Body []byte
	// Dropped are the R4 paths whose values the R5 output lost.
	Dropped []string
	// Translated are the R4 codes the official ConceptMaps renamed.
	Translated []CodeTranslation
	// Absent are the R5 paths of the elements R5 requires that the R4
	// resource could not give, sent with a data-absent-reason extension.
	Absent []string
	// Native is set for an Observation of an Open mHealth or IEEE coding:
	// it becomes the source's patient's and takes the native create path.
	Native bool
	// object is Body's members, as ConvertR4 built them (Write).
	object jsonObject
}

// Write is the create of the converted resource in the imported store
// under source. It hands the create path the members ConvertR4 wrote Body
// from, so that Body is not read again: they are what parseJSONObject
// would read from it, since Body is the converter's JSON, which is compact
// and names no member twice (TestR4Examples checks both over every
// official example), with the id compacted and the members ConvertR4 sets
// written compact by encoding/json (FuzzConversionWrite).
func (c *R4Conversion) Write(source string) ResourceWrite {
	return ResourceWrite{Type: c.Type, Body: c.Body, Source: source, parsed: c.object}
}

// Losses sums what conversions dropped: the operators' one line per
// import, where a line per value drowned the log (a Synthea sample of
// 7,000 resources dropped 2,000 values, each line alike), and a run
// record's per type summary.
type Losses struct {
	Resources int            // conversions that dropped anything
	Values    int            // paths dropped, over all of them
	Paths     map[string]int // how many conversions dropped each path
}

// CountLosses sums the drops of conversions (nil entries: failed before
// converting).
func CountLosses(convs []*R4Conversion) Losses {
	var l Losses
	for _, c := range convs {
		if c != nil {
			l.Add(c.Dropped)
		}
	}
	return l
}

// Add counts one conversion's dropped paths.
func (l *Losses) Add(dropped []string) {
	if len(dropped) == 0 {
		return
	}
	if l.Paths == nil {
		l.Paths = map[string]int{}
	}
	l.Resources++
	l.Values += len(dropped)
	for _, p := range dropped {
		l.Paths[p]++
	}
}

// String lists the paths, most dropped first: "Encounter.reasonCode=696
// Organization.telecom=43". Paths are element names, never values.
func (l Losses) String() string {
	paths := slices.Collect(maps.Keys(l.Paths))
	slices.SortFunc(paths, func(a, b string) int {
		return cmp.Or(cmp.Compare(l.Paths[b], l.Paths[a]), strings.Compare(a, b))
	})
	var b strings.Builder
	for i, p := range paths {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", p, l.Paths[p])
	}
	return b.String()
}

// CodeTranslation is an R4 code that an R4 -> R5 ConceptMap translated.
type CodeTranslation struct {
	Path       string // the R4 path (Encounter.status)
	From, To   string // the R4 and R5 codes
	ConceptMap string // the ConceptMap's canonical URL
}

// ImportSource is the FHIR source an R4 import writes to, named by the
// SourceHeader value: 400 when it is missing or unknown, 403 when the
// actor may not write to it.
func (s *Service) ImportSource(ctx context.Context, actor *Actor, header string) (src *FHIRSource, err error) {
	defer func() {
		var patients []int64
		if src != nil {
			patients = []int64{src.PatientID}
		}
		err = s.audit(ctx, actor, AuditCreate, AuditKindImport, err, "", nil, patients)
	}()
	if s.converter == nil {
		return nil, Errorf(CodeNotSupported, "R4 import is not available: the R4 -> R5 maps or the FHIR packages are not installed (run scripts/setup)")
	}
	id, err := sourceHeaderID(header)
	if err != nil {
		return nil, err
	}
	if id == 0 {
		return nil, FieldErrorf(SourceHeader, "the %s header names the FHIR source of the import; it is required", SourceHeader)
	}
	return s.writableSource(ctx, actor, id)
}

// MapSet names the R4 -> R5 maps imports run ("" without them).
func (s *Service) MapSet() string {
	if s.converter == nil {
		return ""
	}
	return s.converter.MapSet()
}

// ConvertR4 converts one R4 resource of an import into src. The upstream
// id is moved out before the R4 check (an R4 id has at most 64
// characters; upstream systems' ids may not) and handed to the create
// path, which keeps it as an identifier namespaced by the source. A
// native-coded Observation becomes the source's patient's. wantType, when
// set, is the type the request URL names.
func (s *Service) ConvertR4(src *FHIRSource, body []byte, wantType string) (*R4Conversion, error) {
	if s.converter == nil {
		return nil, Errorf(CodeNotSupported, "R4 import is not available: the R4 -> R5 maps or the FHIR packages are not installed (run scripts/setup)")
	}
	// Read strictly: a member named twice (at any depth), invalid UTF-8
	// or anything after the object is refused, not settled by a map. The
	// tree decoded is the one the converter checks and converts.
	in, err := DecodeJSON(body)
	if err != nil {
		return nil, Errorf(CodeInvalid, "the R4 resource is not valid JSON: %v", err)
	}
	if in == nil {
		return nil, Errorf(CodeInvalid, "the R4 resource is null, not a JSON object")
	}
	rt, _ := in["resourceType"].(string)
	if rt == "" {
		return nil, FieldErrorf("resourceType", "the R4 resource has no resourceType")
	}
	if wantType != "" && rt != wantType {
		return nil, FieldErrorf(rt+".resourceType", "is %s, but the URL names %s", rt, wantType)
	}
	id, hasID := in["id"]
	delete(in, "id")
	refs := s.upstreamReferences(src)
	if code, ok := in["code"]; ok && CreatesNative(rt, CodingSystems(mustJSON(map[string]any{"code": code}))) {
		refs = nil // its subject and device become the source's patient and data source below
	}
	conv, err := s.converter.ConvertR4(in, refs)
	if err != nil {
		return nil, err
	}
	obj := validJSONObject(conv.Body) // the converter's own JSON
	if hasID {
		// The id as the create path reads it: its value re-encoded, which
		// may escape differently from what was sent but reads the same
		// (an id not a string is refused there, by its field).
		obj.set("id", mustJSON(id))
	}
	if code, ok := obj.get("code"); ok && CreatesNative(conv.Type, CodingSystems(append(append([]byte(`{"code":`), code...), '}'))) {
		conv.Native = true
		obj.set("subject", mustJSON(map[string]string{"reference": "Patient/" + strconv.FormatInt(src.PatientID, 10)}))
		if src.DataSourceID != 0 {
			obj.set("device", mustJSON(map[string]string{"reference": "Device/" + strconv.FormatInt(src.DataSourceID, 10)}))
		}
	}
	conv.object = obj.ordered("resourceType", "id")
	conv.Body = conv.object.encode()
	return conv, nil
}

// upstreamReferences rewrites the references between the resources of one
// FHIR source: Type/id, relative or under the source's FHIR base (when it
// has one), of a type the imported store keeps, becomes Type/<the id the
// resource with that upstream id has in the source>, whether it is stored
// yet or not (the id derives from its unique key), with the upstream id
// kept as the reference's identifier in the source's id system. Search
// finds such a reference by either form (upstreamKeys).
func (s *Service) upstreamReferences(src *FHIRSource) ReferenceRewriter {
	system := s.upstreamIDSystem(src.ID)
	return func(base, resourceType, id string) (string, string, bool) {
		if base != "" && (src.FHIRBase == "" || strings.TrimSuffix(base, "/") != strings.TrimSuffix(src.FHIRBase, "/")) {
			return "", "", false
		}
		if s.indexer == nil || !s.indexer.Keeps(resourceType) || checkUpstreamID("", id) != nil {
			return "", "", false
		}
		return resourceType + "/" + resourceID(upstreamKey(src.ID, resourceType, id)), system, true
	}
}
