package domain

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/uuid"

	"exchange/fhirdefs"
)

// The imported store keeps FHIR resources other than native Observations,
// each tied to the FHIR source (an upstream system of one patient) that
// sent it. A resource is kept as sent, with provenance stamped on it:
//
//   - id: a UUID the service assigns; the source's own id moves into an
//     identifier with the system {FHIR_SOURCE_BASE}/<source id>/id (types
//     without identifier keep it beside the resource only), so that ids
//     beyond FHIR's 64 characters import (up to 1,000: checkUpstreamID);
//   - meta.versionId, meta.lastUpdated, and meta.source = the FHIR
//     source's canonical URI {FHIR_SOURCE_BASE}/<source id>.
//
// A source sends one resource of a type under one upstream id: a second
// create is CodeDuplicate, never a refresh. Every write is validated
// against FHIR R5 and re-indexed for search before anything is stored.
//
// Every write is one document, and converges when sent again after a
// timeout or crash: a create's id derives from its unique key, so the
// resend is a duplicate that names the stored resource; an update or
// patch identical to the one that made the current version is answered
// with that version, not applied again.

// SourceHeader is the request header that names the FHIR source of a
// write; it wins over meta.source.
const SourceHeader = "X-SERVICE-FHIR-Source-ID"

// ResourceValidator checks resources against FHIR R5; *fhirdefs.Validator
// is one.
type ResourceValidator interface {
	// ValidateSpacedBase64 checks a resource decoded with
	// json.Decoder.UseNumber: no issues when it is valid, but for its
	// base64Binary values with whitespace among their characters, whose
	// paths it returns, to be stored without it
	// (fhirdefs.CompactBase64). An error is a fault of the definitions,
	// not of the resource.
	ValidateSpacedBase64(resource map[string]any) (issues []fhirdefs.Issue, spaced []string, err error)
	// ElementMax returns the maximum cardinality of a resource type's
	// top-level element (-1: unbounded); false when the type has none.
	ElementMax(resourceType, element string) (max int, ok bool)
}

// ResourceIndexer extracts the search index of a resource;
// *fhirsearch.Catalog is one.
type ResourceIndexer interface {
	// Keeps reports whether the imported store keeps the type.
	Keeps(resourceType string) bool
	Index(resourceType string, resource map[string]any) ResourceIndex
	// AddUpstreamReferences adds to an index the upstream form of each
	// reference a rewrite made (upstreamReferences), so that a search by
	// either form finds the resource.
	AddUpstreamReferences(idx *ResourceIndex, refs []UpstreamReference)
}

// UpstreamReference is a reference between the resources of one FHIR
// source as the imported store holds it (Patient/<uuid>) and as the
// source wrote it (Patient/<upstream id>).
type UpstreamReference struct {
	Stored, Upstream string
}

// Resource is a resource of the imported store.
type Resource struct {
	ID       string // a UUID
	Type     string
	SourceID int64
	// SourcePatientID is the patient of the FHIR source: whose data the
	// resource is, for permissions and the patient search parameter.
	SourcePatientID int64
	// UpstreamID is the id the source gave the resource; "" when none.
	UpstreamID string
	// UniqueKey is what no two resources share: source, type and upstream
	// id, or, for a resource sent without one, source, type and a hash of
	// the body sent, so that the same resource sent twice is stored once.
	// The ID derives from it (resourceID).
	UniqueKey string
	// LastWrite is a hash of the request that made this version (a
	// create, update or patch): the same request sent again is known, and
	// answered with this version instead of being applied twice.
	LastWrite   string
	VersionID   int64
	LastUpdated time.Time // milliseconds, as meta.lastUpdated shows it
	// JSON is the resource as stored and served, byte for byte.
	JSON []byte
	// Object is JSON decoded (numbers as json.Number), for the store's
	// parsed copy; set on writes only.
	Object map[string]any
	Index  ResourceIndex
}

// ResourceStore keeps the imported store.
type ResourceStore interface {
	// CreateResources stores new resources, each on its own: it returns
	// one error per resource (nil when stored), CodeDuplicate when its
	// unique key is taken, naming the stored resource (Stored when it was
	// made by the same request).
	CreateResources(ctx context.Context, rs []*Resource) []error
	// ResourceByID returns a resource of a type; CodeNotFound when none.
	ResourceByID(ctx context.Context, resourceType, id string) (*Resource, error)
	// ReplaceResource stores r in place of the version before it
	// (r.VersionID-1): CodeVersionMismatch when another change came
	// first, CodeNotFound when the resource is gone.
	ReplaceResource(ctx context.Context, r *Resource) error
	// DeleteResource removes a version of a resource, with the errors of
	// ReplaceResource.
	DeleteResource(ctx context.Context, resourceType, id string, version int64) error
	SearchResources(ctx context.Context, plan *SearchPlan) (SearchResult[Resource], error)
	// SourceHoldsResources reports whether any resource is tied to the
	// FHIR source.
	SourceHoldsResources(ctx context.Context, sourceID int64) (bool, error)
	// ResourceTypeCounts returns how many resources of each type the FHIR
	// source holds, by type name.
	ResourceTypeCounts(ctx context.Context, sourceID int64) ([]ResourceTypeCount, error)
}

// ResourceTypeCount is how many imported resources of one type there are.
type ResourceTypeCount struct {
	Type  string
	Count int64
}

// SourceResourceTypes returns how many resources of each type a FHIR
// source the actor may read holds (CodeForbidden otherwise): what to list.
func (s *Service) SourceResourceTypes(ctx context.Context, actor *Actor, sourceID int64) ([]ResourceTypeCount, error) {
	if _, err := s.FHIRSourceByID(ctx, actor, sourceID); err != nil {
		return nil, err
	}
	return s.store.ResourceTypeCounts(ctx, sourceID)
}

// ResourceWrite is a create or replacement of an imported resource, as the
// FHIR layer received it.
type ResourceWrite struct {
	Type string // the type the URL names
	Body []byte
	// Source is the SourceHeader header; "" when absent.
	Source string
	// IfMatch is the version an update expects; 0: any.
	IfMatch int64
	// parsed is Body's members when the service wrote Body itself
	// (R4Conversion.Write); nil: parseResource reads them.
	parsed jsonObject
}

// PatchFormat is the media type of a patch.
type PatchFormat int

// The patch formats.
const (
	JSONPatch  PatchFormat = iota // RFC 6902, application/json-patch+json
	MergePatch                    // RFC 7396, application/merge-patch+json
)

var resourceIDPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// IsResourceID reports whether an id is one the imported store assigns.
func IsResourceID(id string) bool { return resourceIDPattern.MatchString(id) }

// resourceIDSpace is the UUID namespace of imported resources' ids.
var resourceIDSpace = uuid.MustParse("6f1d3c2a-8e4b-4f0a-9c57-2b1e0d9a7f31")

// resourceID is the id of the imported resource with a unique key: a
// name-based UUID (version 5), so that a create sent again gets the id
// of the resource it stored.
func resourceID(uniqueKey string) string {
	return uuid.NewSHA1(resourceIDSpace, []byte(uniqueKey)).String()
}

// upstreamKey is the unique key of the resource a source sends of a type
// under an upstream id: from it comes its id, so that another resource of
// the source can refer to it before it is stored (upstreamReferences).
func upstreamKey(sourceID int64, resourceType, upstreamID string) string {
	return fmt.Sprintf("%d|%s|%s", sourceID, resourceType, upstreamID)
}

// writeKey is a hash of a write request: what it does, to which resource
// (id, "" for a create) and its body.
func writeKey(op, resourceType, id string, body []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00", op, resourceType, id)
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// ParseID reads the id of a native record (an observation, a patient, an
// organization, ...) as the service writes it: a positive decimal integer
// without sign, leading zeros or spaces. An id names one record under one
// spelling only: "+1", "01", "1.0", " 1" and "0x1" name nothing, neither
// in a URL nor in a reference.
func ParseID(s string) (int64, bool) {
	if s == "" || s[0] < '1' || s[0] > '9' {
		return 0, false
	}
	id, err := strconv.ParseInt(s, 10, 64) // base 10: digits only, no "_"
	return id, err == nil
}

// SourceURI is the canonical URI of a FHIR source under base
// (FHIR_SOURCE_BASE).
func SourceURI(base string, id int64) string { return base + "/" + strconv.FormatInt(id, 10) }

// ParseSourceURI reads a FHIR source's canonical URI: exactly
// {base}/<id>, the id written as SourceURI writes it.
func ParseSourceURI(base, uri string) (int64, bool) {
	rest, ok := strings.CutPrefix(uri, base+"/")
	if !ok {
		return 0, false
	}
	return ParseID(rest)
}

// upstreamIDSystem is the identifier system of the ids a source gave.
func (s *Service) upstreamIDSystem(sourceID int64) string {
	return SourceURI(s.sourceBase, sourceID) + "/id"
}

// importedWrites says why the imported store takes no writes, if it
// does not.
func (s *Service) importedWrites() error {
	if s.validator == nil || s.indexer == nil {
		return Errorf(CodeNotSupported, "the imported store takes no writes: the FHIR R5 packages are not installed (run scripts/setup)")
	}
	return nil
}

// ResourceOutcome is the result of one create of a batch.
type ResourceOutcome struct {
	Resource *Resource
	Err      error
}

// CreateResource stores a new resource in the imported store, under the
// FHIR source the write names (the header, else meta.source), which the
// actor must be able to write to.
func (s *Service) CreateResource(ctx context.Context, actor *Actor, w ResourceWrite) (*Resource, error) {
	out := s.CreateResources(ctx, actor, []ResourceWrite{w})[0]
	return out.Resource, out.Err
}

// CreateResources creates resources each on its own, as CreateResource
// does: an entry that breaks a rule gets its error and writes nothing, the
// others are stored together. The sources are checked once per batch.
func (s *Service) CreateResources(ctx context.Context, actor *Actor, ws []ResourceWrite) (out []ResourceOutcome) {
	defer func() { s.auditResourceWrites(ctx, actor, out) }()
	out = make([]ResourceOutcome, len(ws))
	if err := s.importedWrites(); err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	sources := map[int64]sourceCheck{}
	var valid []*Resource
	var where []int
	for i, w := range ws {
		r, err := s.newResource(ctx, actor, w, sources)
		if err != nil {
			out[i].Err = err
			continue
		}
		valid = append(valid, r)
		where = append(where, i)
	}
	if len(valid) == 0 {
		return out
	}
	for k, err := range s.store.CreateResources(ctx, valid) {
		i, r := where[k], valid[k]
		if err != nil {
			out[i].Err = err
			continue
		}
		out[i].Resource = r
	}
	return out
}

// auditResourceWrites records a batch of creates (auditBatch).
func (s *Service) auditResourceWrites(ctx context.Context, actor *Actor, out []ResourceOutcome) {
	var refs []string
	var stored []int64
	var refusal error
	for _, o := range out {
		if o.Err != nil {
			refusal = cmp.Or(refusal, o.Err)
			continue
		}
		refs = append(refs, o.Resource.Type+"/"+o.Resource.ID)
		stored = append(stored, o.Resource.SourcePatientID)
	}
	s.auditBatch(ctx, actor, "", refs, stored, refusal, nil)
}

// sourceCheck caches, within one batch, whether the actor may write to a
// FHIR source.
type sourceCheck struct {
	source *FHIRSource
	err    error
}

// newResource checks one create and builds the resource it stores.
func (s *Service) newResource(ctx context.Context, actor *Actor, w ResourceWrite, sources map[int64]sourceCheck) (*Resource, error) {
	if err := actor.AllowFHIR(InteractionCreate, w.Type); err != nil {
		return nil, err
	}
	o, err := s.parseResource(w)
	if err != nil {
		return nil, err
	}
	sourceID, err := s.namedSource(w.Source, o, w.Type)
	if err != nil {
		return nil, err
	}
	check, seen := sources[sourceID]
	if !seen {
		check.source, check.err = s.writableSource(ctx, actor, sourceID)
		sources[sourceID] = check
	}
	if check.err != nil {
		return nil, check.err
	}
	src := check.source
	if err := actor.allowWrite(InteractionCreate, w.Type, src.PatientID); err != nil {
		return nil, err
	}
	r := &Resource{Type: w.Type, SourceID: src.ID, SourcePatientID: src.PatientID, VersionID: 1, LastWrite: writeKey("create", w.Type, "", w.Body)}
	if raw, ok := o.get("id"); ok {
		if err := json.Unmarshal(raw, &r.UpstreamID); err != nil {
			return nil, FieldErrorf(w.Type+".id", "is a string")
		}
		if err := checkUpstreamID(w.Type+".id", r.UpstreamID); err != nil {
			return nil, err
		}
	}
	r.UniqueKey = fmt.Sprintf("%d|%s|#%s", src.ID, r.Type, r.LastWrite)
	if r.UpstreamID != "" {
		r.UniqueKey = upstreamKey(src.ID, r.Type, r.UpstreamID)
	}
	r.ID = resourceID(r.UniqueKey)
	if err := s.stamp(r, o); err != nil {
		return nil, err
	}
	return r, nil
}

// checkUpstreamID holds the id a source gave a resource to what the
// imported store can keep as an identifier value. FHIR ids
// ([A-Za-z0-9\-.]{1,64}) are the common case, but upstream systems use
// longer ids and other characters (':', '/', '_'), and those import too:
// the id moves into an identifier, whose value is a FHIR string. What is
// refused, naming the field: an empty id, control characters (NUL, tabs,
// line breaks), surrounding whitespace, and more than an identifier's
// 1,000 characters.
func checkUpstreamID(field, id string) error {
	if err := LimitIdentifier.Check(field, id); err != nil {
		return err
	}
	switch {
	case id == "":
		return FieldErrorf(field, "is empty: leave it out, or give the id the source knows the resource by")
	case strings.ContainsFunc(id, unicode.IsControl):
		return FieldErrorf(field, "holds a control character (NUL, a tab, a line break): it cannot be kept as an identifier value")
	case id != strings.TrimSpace(id):
		return FieldErrorf(field, "has surrounding whitespace")
	}
	return nil
}

// parseResource reads a written body: a JSON object of the type the URL
// names, of a type the imported store keeps.
func (s *Service) parseResource(w ResourceWrite) (jsonObject, error) {
	if !s.indexer.Keeps(w.Type) {
		return nil, Errorf(CodeNotSupported, "%s is not a resource type the imported store keeps", w.Type)
	}
	o := slices.Clone(w.parsed) // stamp sets members: the conversion's stay as they are
	if o == nil {
		var err error
		if o, err = parseJSONObject(w.Body); err != nil {
			return nil, Errorf(CodeInvalid, "the body is not a FHIR resource: %v", err)
		}
	}
	var rt string
	if raw, ok := o.get("resourceType"); !ok || json.Unmarshal(raw, &rt) != nil || rt != w.Type {
		return nil, FieldErrorf("resourceType", "the body is a %s, not a %s as the URL says", strings.Trim(string(raw), `"`), w.Type)
	}
	return o, nil
}

// sourceHeaderID reads the FHIR source id a SourceHeader value names,
// surrounding spaces ignored: 0 when it is blank, CodeInvalid (on the
// header) when it is not a positive integer.
func sourceHeaderID(header string) (int64, error) {
	h := strings.TrimSpace(header)
	if h == "" {
		return 0, nil
	}
	id, ok := ParseID(h)
	if !ok {
		return 0, FieldErrorf(SourceHeader, "%q is not a FHIR source id", h)
	}
	return id, nil
}

// namedSource reads the FHIR source a write names: the header wins over
// meta.source.
func (s *Service) namedSource(header string, o jsonObject, resourceType string) (int64, error) {
	if id, err := sourceHeaderID(header); err != nil || id != 0 {
		return id, err
	}
	if id, ok := s.sourceInMeta(o); ok {
		return id, nil
	}
	return 0, &Error{Code: CodeInvalid, Field: resourceType + ".meta.source",
		Message: fmt.Sprintf("name the FHIR source of the resource: the %s header, or meta.source = %s/<id>", SourceHeader, s.sourceBase)}
}

// sourceInMeta reads a FHIR source's URI in meta.source.
func (s *Service) sourceInMeta(o jsonObject) (int64, bool) {
	raw, ok := o.get("meta")
	if !ok {
		return 0, false
	}
	var meta struct {
		Source string `json:"source"`
	}
	if json.Unmarshal(raw, &meta) != nil {
		return 0, false
	}
	return ParseSourceURI(s.sourceBase, meta.Source)
}

// writableSource returns a FHIR source the actor may write to. A source
// that does not exist, or whose patient the actor may not read or the
// token does not reach (Actor.outsideContext), is bad input, not a missing
// page; alike.
func (s *Service) writableSource(ctx context.Context, actor *Actor, id int64) (*FHIRSource, error) {
	src, err := s.FHIRSourceByID(ctx, actor, id)
	if err == nil && actor.outsideContext(src.PatientID) {
		err = concealed(Errorf(CodeNotFound, "FHIR source %d does not exist", id))
	}
	if IsCode(err, CodeNotFound) {
		return nil, Errorf(CodeInvalid, "FHIR source %d does not exist", id)
	}
	if err != nil {
		return nil, err
	}
	p, err := s.store.PatientByID(ctx, src.PatientID)
	if err != nil {
		return nil, err
	}
	if !actor.CanWritePatientData(p) {
		return nil, Errorf(CodeForbidden, "you may not write to FHIR source %d", id)
	}
	return src, nil
}

// stamp completes r from the sent resource: id, meta and the upstream
// identifier written in; then validated against R5 and indexed. Nothing
// is stored when the stamped resource is not valid.
func (s *Service) stamp(r *Resource, o jsonObject) error {
	r.LastUpdated = s.Now().Truncate(time.Millisecond)
	o.set("id", mustJSON(r.ID))
	meta := jsonObject{}
	if raw, ok := o.get("meta"); ok {
		var err error
		if meta, err = parseJSONObject(raw); err != nil {
			return FieldErrorf(r.Type+".meta", "is an object")
		}
	}
	meta.set("versionId", mustJSON(strconv.FormatInt(r.VersionID, 10)))
	meta.set("lastUpdated", mustJSON(r.LastUpdated.Format("2006-01-02T15:04:05.000Z07:00")))
	meta.set("source", mustJSON(SourceURI(s.sourceBase, r.SourceID)))
	o.set("meta", meta.marshal("versionId", "lastUpdated", "source"))
	if max, ok := s.validator.ElementMax(r.Type, "identifier"); ok && r.UpstreamID != "" {
		s.stampUpstreamID(r, &o, max == 1)
	}
	r.JSON = o.marshal("resourceType", "id", "meta")
	// Decoded strictly: the members below the top level are the sender's
	// text as it came (parseJSONObject checks the top level only), and a
	// member named twice deeper in, or invalid UTF-8, would be validated
	// and indexed as a map settles it but stored and served as sent.
	var err error
	if r.Object, err = DecodeJSON(r.JSON); err != nil {
		return Errorf(CodeInvalid, "the body is not a FHIR resource: %v", err)
	}
	issues, spaced, err := s.validator.ValidateSpacedBase64(r.Object)
	if err != nil {
		return err
	}
	if len(issues) > 0 {
		return InvalidResource(r.Type, "R5", issues)
	}
	if len(spaced) > 0 {
		if err := r.compactBase64(spaced); err != nil {
			return err
		}
	}
	r.Index = s.indexer.Index(r.Type, r.Object)
	if refs := s.upstreamKeys(r); len(refs) > 0 {
		s.indexer.AddUpstreamReferences(&r.Index, refs)
	}
	return nil
}

// upstreamKeys finds the references of r that upstreamReferences wrote:
// a reference Type/<id> whose identifier, in the id system of r's
// source, is the upstream id that id derives from. Only such a pair is
// taken (the id is checked, not trusted), wherever in the resource it
// is, and after any later update too.
func (s *Service) upstreamKeys(r *Resource) []UpstreamReference {
	system := s.upstreamIDSystem(r.SourceID)
	if !bytes.Contains(r.JSON, []byte(`"reference"`)) || !bytes.Contains(r.JSON, []byte(system)) {
		return nil
	}
	var out []UpstreamReference
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case []any:
			for _, item := range v {
				walk(item)
			}
		case map[string]any:
			if ref, ok := v["reference"].(string); ok {
				ident, _ := v["identifier"].(map[string]any)
				upstream, _ := ident["value"].(string)
				typ, id, found := strings.Cut(ref, "/")
				if found && ident["system"] == system && upstream != "" && id == resourceID(upstreamKey(r.SourceID, typ, upstream)) {
					out = append(out, UpstreamReference{Stored: ref, Upstream: typ + "/" + upstream})
				}
			}
			for _, child := range v {
				walk(child)
			}
		}
	}
	walk(r.Object)
	return out
}

// compactBase64 stores the base64Binary values at the paths given
// without their whitespace: the same bytes, in R5's format, as the R4
// import converts them (the one rule of both: Base64 with whitespace is
// taken, and kept without). Everything else of the resource stays as sent.
func (r *Resource) compactBase64(paths []string) error {
	for _, path := range paths {
		start, end, ok := jsonValueAt(r.JSON, path)
		var s string
		if !ok || json.Unmarshal(r.JSON[start:end], &s) != nil {
			return fmt.Errorf("the base64Binary at %s of %s is not where validation found it", path, r.Type)
		}
		r.JSON = slices.Concat(r.JSON[:start], mustJSON(fhirdefs.CompactBase64(s)), r.JSON[end:])
	}
	var err error
	r.Object, err = DecodeJSON(r.JSON)
	return err
}

// stampUpstreamID writes the upstream id as the resource's identifier of
// the source's id system, in place of any identifier of that system. Where
// the type has a single identifier (Ingredient, ObservationDefinition, ...)
// one the source sent of another system is kept, and the upstream id only
// beside the resource. An identifier of the wrong JSON kind is left for
// validation to refuse.
func (s *Service) stampUpstreamID(r *Resource, o *jsonObject, single bool) {
	system := s.upstreamIDSystem(r.SourceID)
	upstream := mustJSON(map[string]string{"system": system, "value": r.UpstreamID})
	if single {
		var ident struct {
			System string `json:"system"`
		}
		if raw, ok := o.get("identifier"); !ok || (json.Unmarshal(raw, &ident) == nil && ident.System == system) {
			o.set("identifier", upstream)
		}
		return
	}
	var ids []json.RawMessage
	if raw, ok := o.get("identifier"); ok && json.Unmarshal(raw, &ids) != nil {
		return
	}
	kept := ids[:0]
	for _, id := range ids {
		var ident struct {
			System string `json:"system"`
		}
		if json.Unmarshal(id, &ident) == nil && ident.System == system {
			continue
		}
		kept = append(kept, id)
	}
	kept = append(kept, upstream)
	o.set("identifier", mustJSON(kept))
}

// InvalidResource is the error of a resource that breaks a FHIR release
// ("R5", or "R4" for the R4 import's input): CodeInvalid on the first
// problem's path, one detail per problem. issues is not empty.
func InvalidResource(resourceType, release string, issues []fhirdefs.Issue) *Error {
	e := &Error{Code: CodeInvalid, Field: issues[0].Expression,
		Message: fmt.Sprintf("the %s is not valid FHIR %s: %s", resourceType, release, issues[0])}
	if len(issues) > 1 {
		e.Message += fmt.Sprintf(" (and %d more problems)", len(issues)-1)
	}
	for _, is := range issues {
		e.Details = append(e.Details, Detail{Field: is.Expression, Message: is.Message})
	}
	return e
}

// ResourceByID returns an imported resource the actor may read: one of a
// FHIR source of a patient the actor may read, which the token's scopes
// reach. Others are CodeNotFound, as if they did not exist; a token that
// reads no resource of the type at all is CodeForbidden. The read is
// audited, a refused one too.
func (s *Service) ResourceByID(ctx context.Context, actor *Actor, resourceType, id string) (*Resource, error) {
	r, err := s.reachableResource(ctx, actor, resourceType, id)
	err = s.audit(ctx, actor, AuditRead, AuditKindRead, err, resourceType, []string{resourceType + "/" + id}, resourcePatients(r))
	if err != nil {
		return nil, err
	}
	return r, nil
}

// reachableResource is ResourceByID before the audit: the resource, when
// found, comes back with a refusal too, so that its patient sees the
// attempt.
func (s *Service) reachableResource(ctx context.Context, actor *Actor, resourceType, id string) (*Resource, error) {
	if err := actor.AllowFHIR(InteractionRead, resourceType); err != nil {
		return nil, err
	}
	r, err := s.resourceByID(ctx, actor, resourceType, id)
	if err != nil {
		return nil, err
	}
	if err := s.withinReach(ctx, actor, resourceType, id); IsCode(err, CodeForbidden) {
		return r, Errorf(CodeNotFound, "%s/%s does not exist", resourceType, id)
	} else if err != nil {
		return r, err
	}
	return r, nil
}

// resourcePatients is the patient of a resource, if any.
func resourcePatients(r *Resource) []int64 {
	if r == nil {
		return nil
	}
	return []int64{r.SourcePatientID}
}

// resourceByID returns an imported resource the permission model lets the
// actor read, whatever the token's scopes.
func (s *Service) resourceByID(ctx context.Context, actor *Actor, resourceType, id string) (*Resource, error) {
	missing := Errorf(CodeNotFound, "%s/%s does not exist", resourceType, id)
	if !IsResourceID(id) {
		return nil, missing
	}
	r, err := s.store.ResourceByID(ctx, resourceType, id)
	if err != nil {
		return nil, err
	}
	if actor.IsSuperuser() {
		return r, nil
	}
	p, err := s.store.PatientByID(ctx, r.SourcePatientID)
	if IsCode(err, CodeNotFound) || (err == nil && !actor.CanReadPatient(p)) {
		return nil, missing
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}

// writableResource returns a resource the actor may change with the
// interaction (update or delete), at the version the change expects (0:
// any). replay says that the current version was made by the write with
// the key given (a retry of it, which expected the version before).
func (s *Service) writableResource(ctx context.Context, actor *Actor, i Interactions, resourceType, id string, ifMatch int64, key string) (r *Resource, replay bool, err error) {
	if err := actor.AllowFHIR(i, resourceType); err != nil {
		return nil, false, err
	}
	r, err = s.resourceByID(ctx, actor, resourceType, id)
	if err != nil {
		return nil, false, err
	}
	if err := actor.allowWrite(i, resourceType, r.SourcePatientID); err != nil {
		return nil, false, err
	}
	if _, err := s.writableSource(ctx, actor, r.SourceID); err != nil {
		return nil, false, err
	}
	if key != "" && r.LastWrite == key && (ifMatch == 0 || ifMatch == r.VersionID || ifMatch == r.VersionID-1) {
		return r, true, nil
	}
	if ifMatch != 0 && ifMatch != r.VersionID {
		return nil, false, Errorf(CodeVersionMismatch, "%s/%s is at version %d, not %d", resourceType, id, r.VersionID, ifMatch)
	}
	return r, false, nil
}

// UpdateResource replaces an imported resource (PUT). The body carries
// the resource's id; it stays with its FHIR source and upstream id. A body
// that holds what the current version holds answers that version and
// stores nothing: no new version for a repeated PUT. The same update sent
// again (a retry) is answered with the version it made.
func (s *Service) UpdateResource(ctx context.Context, actor *Actor, id string, w ResourceWrite) (r *Resource, err error) {
	defer func() { err = s.auditResourceChange(ctx, actor, AuditUpdate, w.Type, id, r, err) }()
	if err := s.importedWrites(); err != nil {
		return nil, err
	}
	o, err := s.parseResource(w)
	if err != nil {
		return nil, err
	}
	key := writeKey("update", w.Type, id, w.Body)
	current, replay, err := s.writableResource(ctx, actor, InteractionUpdate, w.Type, id, w.IfMatch, key)
	if err != nil || replay {
		return current, err
	}
	return s.replace(ctx, current, o, w, key)
}

// replace stores o as the next version of current, made by the write
// with the key given.
func (s *Service) replace(ctx context.Context, current *Resource, o jsonObject, w ResourceWrite, key string) (*Resource, error) {
	var bodyID string
	if raw, ok := o.get("id"); !ok || json.Unmarshal(raw, &bodyID) != nil || bodyID != current.ID {
		return nil, FieldErrorf(w.Type+".id", "must be %s, the id of the resource replaced", current.ID)
	}
	named := current.SourceID
	if w.Source != "" {
		var err error
		if named, err = s.namedSource(w.Source, o, w.Type); err != nil {
			return nil, err
		}
	} else if id, ok := s.sourceInMeta(o); ok {
		named = id
	}
	if named != current.SourceID {
		return nil, Errorf(CodeInvalid, "%s/%s stays with FHIR source %d: it cannot move to FHIR source %d", w.Type, current.ID, current.SourceID, named)
	}
	next := *current
	next.VersionID++
	next.LastWrite = key
	if err := s.stamp(&next, o); err != nil {
		return nil, err
	}
	if same, err := sameContent(current, &next); err != nil || same {
		return current, err
	}
	if err := s.store.ReplaceResource(ctx, &next); err != nil {
		return nil, err
	}
	return &next, nil
}

// sameContent reports whether the next version of a resource would hold
// what the current one holds: every element but meta.versionId and
// meta.lastUpdated, compared as JSON values (members in any order, numbers
// as written). A write that changes nothing then makes no new version.
func sameContent(current, next *Resource) (bool, error) {
	var was map[string]any
	dec := json.NewDecoder(bytes.NewReader(current.JSON))
	dec.UseNumber()
	if err := dec.Decode(&was); err != nil {
		return false, fmt.Errorf("stored %s/%s: %w", current.Type, current.ID, err)
	}
	return reflect.DeepEqual(withoutVersion(was), withoutVersion(next.Object)), nil
}

// withoutVersion is a resource without meta.versionId and
// meta.lastUpdated; the maps given are not changed.
func withoutVersion(resource map[string]any) map[string]any {
	out := maps.Clone(resource)
	if meta, ok := out["meta"].(map[string]any); ok {
		meta = maps.Clone(meta)
		delete(meta, "versionId")
		delete(meta, "lastUpdated")
		out["meta"] = meta
	}
	return out
}

// PatchResource changes an imported resource with a JSON Patch or a JSON
// merge patch; the result is validated like a replacement. A patch that
// changes nothing ([], a merge patch of what is there) answers the
// current version and stores nothing. The same patch sent again right
// after (a retry) is answered with the version it made, not applied twice.
func (s *Service) PatchResource(ctx context.Context, actor *Actor, resourceType, id string, format PatchFormat, patch []byte, ifMatch int64) (r *Resource, err error) {
	defer func() { err = s.auditResourceChange(ctx, actor, AuditUpdate, resourceType, id, r, err) }()
	if err := s.importedWrites(); err != nil {
		return nil, err
	}
	key := writeKey(fmt.Sprintf("patch %d", format), resourceType, id, patch)
	current, replay, err := s.writableResource(ctx, actor, InteractionUpdate, resourceType, id, ifMatch, key)
	if err != nil || replay {
		return current, err
	}
	var patched []byte
	switch format {
	case MergePatch:
		if !json.Valid(patch) {
			return nil, Errorf(CodeInvalid, "the merge patch is not JSON")
		}
		if patched, err = jsonpatch.MergePatch(current.JSON, patch); err != nil {
			return nil, Errorf(CodeInvalid, "the merge patch does not apply: %v", err)
		}
	default:
		if p := bytes.TrimSpace(patch); len(p) == 0 || p[0] != '[' {
			return nil, Errorf(CodeInvalid, "a JSON Patch is a JSON array of operations (RFC 6902); [] changes nothing")
		}
		ops, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			return nil, Errorf(CodeInvalid, "the JSON Patch is malformed: %v", err)
		}
		if patched, err = ops.Apply(current.JSON); err != nil {
			return nil, Errorf(CodeUnprocessable, "the JSON Patch does not apply to %s/%s: %v", resourceType, id, err)
		}
	}
	w := ResourceWrite{Type: resourceType, Body: patched}
	o, err := s.parseResource(w)
	if err != nil {
		return nil, err
	}
	return s.replace(ctx, current, o, w, key)
}

// DeleteResource removes an imported resource. Deleting one that is not
// there succeeds and changes nothing, whether it was deleted before (by a
// request whose answer was lost: its retry answers as it did), never
// stored, or is out of the actor's sight (who learns nothing from the
// answer). FHIR R5 says so of the delete interaction (http.html#delete):
// on a resource already deleted, or one that does not exist at all, the
// server should answer 200 or 204. An If-Match does not stop it either:
// the state the conditional delete asked for holds (RFC 9110 13.1.1 lets
// a server answer 2xx when the requested change has already happened).
// A resource that is there at another version than If-Match names is
// refused with CodeVersionMismatch. The audit trail records such a delete
// as one that found nothing (CodeNotFound), not as a delete: an outsider's
// DELETE of a resource out of their sight deleted nothing.
func (s *Service) DeleteResource(ctx context.Context, actor *Actor, resourceType, id string, ifMatch int64) error {
	r, _, err := s.writableResource(ctx, actor, InteractionDelete, resourceType, id, ifMatch, "")
	if err == nil {
		err = s.store.DeleteResource(ctx, resourceType, id, r.VersionID)
	}
	err = s.auditResourceChange(ctx, actor, AuditDelete, resourceType, id, r, err)
	if IsCode(err, CodeNotFound) {
		return nil // not there (any more): nothing to do
	}
	return err
}

// auditResourceChange records an update or delete of an imported
// resource; r, when known, names its patient.
func (s *Service) auditResourceChange(ctx context.Context, actor *Actor, action AuditAction, resourceType, id string, r *Resource, err error) error {
	return s.audit(ctx, actor, action, changeKind(action), err, resourceType, []string{resourceType + "/" + id}, resourcePatients(r))
}

// SearchResources runs a search of the imported store, within the FHIR
// sources the actor may read: all of them, or the one _source names
// (CodeForbidden when the actor may not read it). patient= selects the
// resources of the patient's sources and those referring to the patient.
func (s *Service) SearchResources(ctx context.Context, actor *Actor, q Search) (res SearchResult[Resource], err error) {
	var named namedPatients
	defer func() {
		err = s.auditSearch(ctx, actor, q, err, idsOf(res.Items, func(r Resource) int64 { return r.SourcePatientID }), named)
	}()
	plan, named, err := s.resourcePlan(ctx, actor, q, nil)
	if err != nil || plan == nil {
		return s.emptySearch(q, err)
	}
	return s.store.SearchResources(ctx, plan)
}

// resourcePlan plans SearchResources, narrowed to patients when set (see
// observationPlan). A nil plan without an error: the search finds nothing
// (its source is one the actor may not read, or it names no store).
func (s *Service) resourcePlan(ctx context.Context, actor *Actor, q Search, patients []int64) (plan *SearchPlan, named namedPatients, err error) {
	reach, err := s.reachOf(actor, q, ofPatient)
	if err != nil {
		return nil, named, err
	}
	sel := q.Store()
	scope := Scope{}
	switch {
	case sel.Kind != StoreImported:
		return nil, named, nil
	case sel.SourceID != 0:
		_, err := s.FHIRSourceByID(ctx, actor, sel.SourceID)
		if IsCode(err, CodeNotFound) {
			return nil, named, nil
		}
		if err != nil {
			return nil, named, err
		}
		scope.SourceIDs = []int64{sel.SourceID}
	case !actor.IsSuperuser():
		if scope.SourceIDs, err = s.readableSourceIDs(ctx, actor); err != nil {
			return nil, named, err
		}
	}
	for _, j := range q.Joins() {
		t, err := s.resolveJoin(ctx, actor, q, j)
		if err != nil {
			return nil, named, err
		}
		named.add(t)
		scope.PatientIDs = intersect(scope.PatientIDs, t.patients)
	}
	scope.PatientIDs = intersect(scope.PatientIDs, patients)
	plan, err = q.Plan(scope.within(reach))
	return plan, named, err
}

// readableSourceIDs returns the FHIR sources the actor may read (a
// non-superuser: never nil).
func (s *Service) readableSourceIDs(ctx context.Context, actor *Actor) ([]int64, error) {
	sources, err := s.ListFHIRSources(ctx, actor, everything)
	if err != nil {
		return nil, err
	}
	ids := []int64{}
	for _, src := range sources.Items {
		ids = append(ids, src.ID)
	}
	return ids, nil
}

// emptySearch answers a search that can find nothing without asking the
// store: a total of 0 when one is wanted; or the error that ended it.
func (s *Service) emptySearch(q Search, cause error) (SearchResult[Resource], error) {
	if cause != nil {
		return SearchResult[Resource]{}, cause
	}
	plan, err := q.Plan(Scope{})
	if err != nil {
		return SearchResult[Resource]{}, err
	}
	var res SearchResult[Resource]
	if plan.Filter != nil {
		var zero int64
		res.Total = &zero
	}
	return res, nil
}
