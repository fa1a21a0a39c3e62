package domain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"mime"
	"slices"
	"strings"
	"time"

	"exchange/omh"
)

// Coding is a FHIR Coding.
type Coding struct {
	System  string
	Code    string
	Display string
}

// Observation is a native observation: an Open mHealth (or IEEE 1752) data
// point, kept byte for byte, with the FHIR elements around it.
type Observation struct {
	ID           int64
	PatientID    int64
	DataSourceID int64
	Status       string
	// Codings are all the codings sent; exactly one is native.
	Codings []Coding
	// Code is the native code, such as omh:heart-rate:2.0.
	Code        string
	Identifiers []Identifier
	ContentType string
	// Payload is the data point exactly as uploaded.
	Payload []byte
	// DataPoint is the payload decoded, stored beside it for analysts; set
	// on create only.
	DataPoint map[string]any
	// Effective is the data point's time frame; nil when it has none.
	Effective *omh.TimeFrame
	// LastUpdated keeps microseconds.
	LastUpdated time.Time
}

// Body returns the body of the observation's data point as stored: the
// payload read by omh.Decode, not checked again against the rules of an
// upload (a data point stored before a rule changed still reads); nil
// when the payload holds no body object.
func (o *Observation) Body() map[string]any {
	doc, err := omh.Decode(o.Payload)
	if err != nil {
		return nil
	}
	body, _ := doc["body"].(map[string]any)
	return body
}

// NewObservation is one Observation to create, as the FHIR layer read it.
type NewObservation struct {
	Subject     string // Patient/<id>
	Device      string // Device/<data source id>
	Status      string
	Codings     []Coding
	Identifiers []Identifier
	ContentType string
	Data        []byte // the attachment's data, decoded from Base64
	// Effective is the effective[x] the request gave, if any. The data
	// point's time frame decides effective[x]: one that disagrees with it
	// is refused, not dropped.
	Effective *EffectiveClaim
}

// EffectiveClaim is an effective[x] given with a native Observation:
// Element names its form (effectiveDateTime, effectiveInstant or
// effectivePeriod); DateTime is set for the first two, Start and End for a
// period.
type EffectiveClaim struct {
	Element    string
	DateTime   string
	Start, End string
}

// DefaultMaxDataPointBytes is the default bound of one data point: 1 MiB
// of JSON, decoded from its Base64. A request keeps its own bound (a batch
// holds many data points).
const DefaultMaxDataPointBytes = 1 << 20

// CheckDataPointSize refuses a data point of size bytes (decoded from its
// Base64) over the bound MAX_DATA_POINT_BYTES sets: CodeTooLong, on the
// attachment. The FHIR layer asks before decoding the Base64, so that an
// oversized data point costs no more memory than its request.
func (s *Service) CheckDataPointSize(size int) error {
	if size <= s.maxDataPoint {
		return nil
	}
	const field = "Observation.valueAttachment.data"
	return &Error{Code: CodeTooLong, Field: field,
		Message: fmt.Sprintf("%s: the data point is %d bytes; one data point is at most %d bytes (MAX_DATA_POINT_BYTES)", field, size, s.maxDataPoint)}
}

// ObservationStatuses is FHIR's observation-status value set.
var ObservationStatuses = []string{"registered", "preliminary", "final", "amended", "corrected", "cancelled", "entered-in-error", "unknown"}

// IsNativeSystem reports whether a coding system is Open mHealth or IEEE
// 1752, the two systems of the native store.
func IsNativeSystem(system string) bool {
	return system == SystemOpenMHealth || system == SystemIEEE1752
}

// NativeSystem is the coding system of the native codes of a schema
// namespace: IEEE 1752's for omh.NamespaceIEEE, else Open mHealth's.
func NativeSystem(namespace string) string {
	if namespace == omh.NamespaceIEEE {
		return SystemIEEE1752
	}
	return SystemOpenMHealth
}

// CreatesNative is the rule that routes a create to its store: a create
// of an Observation one of whose code.coding is of Open mHealth or IEEE
// 1752 (IsNativeSystem) goes to the native store, and every other create
// to the imported store, under a FHIR source. systems yields the systems
// of the resource's codings; it is called only for an Observation, so
// that a caller reads a body only when its type may go native.
func CreatesNative(resourceType string, systems iter.Seq[string]) bool {
	if resourceType != "Observation" {
		return false
	}
	for system := range systems {
		if IsNativeSystem(system) {
			return true
		}
	}
	return false
}

// CodingSystems yields the systems of the codings of a resource's code,
// as its JSON holds them, for CreatesNative. It reads only code.coding, so
// that a malformed body still goes where its code says and gets that
// store's errors; a body that does not read so yields none.
func CodingSystems(body []byte) iter.Seq[string] {
	return func(yield func(string) bool) {
		var probe struct {
			Code struct {
				Coding []json.RawMessage `json:"coding"`
			} `json:"code"`
		}
		if json.Unmarshal(body, &probe) != nil {
			return
		}
		for _, raw := range probe.Code.Coding {
			var coding struct {
				System string `json:"system"`
			}
			if json.Unmarshal(raw, &coding) == nil && !yield(coding.System) {
				return
			}
		}
	}
}

// ObservationOutcome is the result of one entry of a batch create.
type ObservationOutcome struct {
	Observation *Observation
	Err         error
}

// ObservationStore keeps native observations.
type ObservationStore interface {
	// CreateObservations stores observations, each with its identifiers
	// claimed first, and assigns their ids and LastUpdated. It returns one
	// error per observation (nil on success); an observation whose
	// identifier is taken gets CodeDuplicate and nothing of it is stored.
	CreateObservations(ctx context.Context, obs []*Observation) []error
	ObservationByID(ctx context.Context, id int64) (*Observation, error)
	SearchObservations(ctx context.Context, plan *SearchPlan) (SearchResult[Observation], error)
	// ObservationStats summarizes the observations plan.Filter selects,
	// per code, in one pass.
	ObservationStats(ctx context.Context, plan *SearchPlan) (ObservationSummary, error)
	// PatientHoldsObservations reports whether any observation belongs to
	// the patient.
	PatientHoldsObservations(ctx context.Context, patientID int64) (bool, error)
	// DataSourceHoldsObservations reports whether any observation came
	// from the data source (its FHIR Device).
	DataSourceHoldsObservations(ctx context.Context, dataSourceID int64) (bool, error)
	// ObservationCodes returns the distinct native codes of the patient's
	// observations, sorted.
	ObservationCodes(ctx context.Context, patientID int64) ([]string, error)
	// DataSourcesWithObservations returns, among dataSourceIDs, those that
	// are the Device of an observation of one of the patients, sorted.
	DataSourcesWithObservations(ctx context.Context, dataSourceIDs, patientIDs []int64) ([]int64, error)
}

// writerCheck caches, within one batch, what the rules of a create need to
// know about each patient: whether the actor may write their data, and the
// native codes they consented to share.
type writerCheck struct {
	err       error
	consented []string
}

// CreateObservations creates native observations, each on its own: an
// entry that breaks a rule gets its error and writes nothing, the others
// are stored. The rules: the subject is Patient/<id> and the actor may
// write that patient's data (CodeForbidden), who consented to the
// observation's scope in at least one study (CodeForbidden); the device is
// Device/<data source id>; exactly one coding is native, of the form
// namespace:name:version; the attachment is an application/json data point,
// with an Open mHealth or an IEEE 1752 header, whose header.schema_id agrees
// with that code, that passes the data point schema of its header's kind
// and whose body passes the official schema the code names
// (CodeUnprocessable); the data point's time frame reads (an interval that
// ends before it starts or a negative duration is CodeUnprocessable, named
// by its path in the data point) and an effective[x] given agrees with it
// (CodeUnprocessable); identifiers are unique across
// observations (CodeDuplicate); the data point is at most
// MAX_DATA_POINT_BYTES (CodeTooLong). Unknown patients and devices are
// CodeNotFound.
func (s *Service) CreateObservations(ctx context.Context, actor *Actor, in []NewObservation) []ObservationOutcome {
	out := make([]ObservationOutcome, len(in))
	patients := map[int64]*writerCheck{}
	devices := map[int64]error{}
	var valid []*Observation
	var where []int
	for i, n := range in {
		o, err := s.checkObservation(ctx, actor, n, patients, devices)
		if err != nil {
			out[i].Err = err
			continue
		}
		valid = append(valid, o)
		where = append(where, i)
	}
	if len(valid) > 0 {
		errs := s.store.CreateObservations(ctx, valid)
		for k, o := range valid {
			if errs[k] != nil {
				out[where[k]].Err = errs[k]
			} else {
				out[where[k]].Observation = o
			}
		}
	}
	s.auditObservationWrites(ctx, actor, in, out)
	return out
}

// auditObservationWrites records a batch of creates (auditBatch); a
// refused entry names the patient of its subject.
func (s *Service) auditObservationWrites(ctx context.Context, actor *Actor, in []NewObservation, out []ObservationOutcome) {
	var refs []string
	var stored, refused []int64
	var refusal error
	for i, o := range out {
		if o.Err == nil {
			refs = append(refs, ref("Observation", o.Observation.ID))
			stored = append(stored, o.Observation.PatientID)
			continue
		}
		if refusal == nil {
			refusal = o.Err
		}
		if id, err := referenceID("subject", in[i].Subject, "Patient"); err == nil {
			refused = append(refused, id)
		}
	}
	s.auditBatch(ctx, actor, "Observation", refs, stored, refusal, refused)
}

func (s *Service) checkObservation(ctx context.Context, actor *Actor, n NewObservation, patients map[int64]*writerCheck, devices map[int64]error) (*Observation, error) {
	if err := actor.AllowFHIR(InteractionCreate, "Observation"); err != nil {
		return nil, err
	}
	patientID, err := referenceID("subject", n.Subject, "Patient")
	if err != nil {
		return nil, err
	}
	if err := actor.allowWrite(InteractionCreate, "Observation", patientID); err != nil {
		return nil, err
	}
	deviceID, err := referenceID("device", n.Device, "Device")
	if err != nil {
		return nil, err
	}
	if !slices.Contains(ObservationStatuses, n.Status) {
		return nil, FieldErrorf("Observation.status", "%q is not an observation status (%s)", n.Status, strings.Join(ObservationStatuses, ", "))
	}
	code, err := nativeCode(n.Codings)
	if err != nil {
		return nil, err
	}
	if err := ValidateIdentifiers("Observation.identifier", n.Identifiers); err != nil {
		return nil, err
	}
	if !isJSONMediaType(n.ContentType) {
		return nil, FieldErrorf("Observation.valueAttachment.contentType", "must be application/json, not %q", n.ContentType)
	}
	if len(n.Data) == 0 {
		return nil, FieldErrorf("Observation.valueAttachment.data", "is required: the Base64 of an Open mHealth data point")
	}
	if err := s.CheckDataPointSize(len(n.Data)); err != nil {
		return nil, err
	}
	dp, err := omh.Parse(n.Data)
	if err != nil {
		return nil, &Error{Code: CodeUnprocessable, Field: "Observation.valueAttachment.data", Message: "Observation.valueAttachment.data: " + err.Error()}
	}
	if dp.Schema.Code() != code {
		return nil, &Error{Code: CodeUnprocessable, Field: "Observation.valueAttachment.data",
			Message: fmt.Sprintf("Observation.valueAttachment.data: header.schema_id is %s, but the code is %s", dp.Schema.Code(), code)}
	}
	if err := s.schemas.Validate(dp); err != nil {
		var ve *omh.ValidationError
		if errors.As(err, &ve) {
			return nil, dataPointError(ve)
		}
		return nil, err
	}
	tf, err := omh.EffectiveTimeFrame(dp.Body)
	if err != nil {
		const field = "Observation.valueAttachment.data"
		return nil, &Error{Code: CodeUnprocessable, Field: field, Message: field + ": " + err.Error()}
	}
	if err := effectiveAgrees(n.Effective, tf); err != nil {
		return nil, err
	}
	check, ok := patients[patientID]
	if !ok {
		check = s.writerCheck(ctx, actor, patientID)
		patients[patientID] = check
	}
	if check.err != nil {
		return nil, check.err
	}
	if !slices.Contains(check.consented, code) {
		return nil, Errorf(CodeForbidden, "patient %d has not consented to share %s with any study", patientID, code)
	}
	devErr, ok := devices[deviceID]
	if !ok {
		_, devErr = s.store.DataSourceByID(ctx, deviceID)
		if IsCode(devErr, CodeNotFound) {
			devErr = &Error{Code: CodeNotFound, Field: "Observation.device", Message: fmt.Sprintf("Observation.device: Device/%d does not exist", deviceID)}
		}
		devices[deviceID] = devErr
	}
	if devErr != nil {
		return nil, devErr
	}
	return &Observation{PatientID: patientID, DataSourceID: deviceID, Status: n.Status, Codings: n.Codings, Code: code,
		Identifiers: n.Identifiers, ContentType: n.ContentType, Payload: n.Data, DataPoint: dp.Document, Effective: tf}, nil
}

// isJSONMediaType reports whether a content type is application/json, with
// or without parameters. Clients send exactly that, which needs no parsing
// (parsing allocates its parameters' map on every upload).
func isJSONMediaType(contentType string) bool {
	if contentType == "application/json" {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/json"
}

// dataPointError refuses a data point that fails its schemas: one issue
// per problem, each saying where in the data point it is.
func dataPointError(ve *omh.ValidationError) error {
	const field = "Observation.valueAttachment.data"
	details := make([]Detail, len(ve.Problems))
	for i, p := range ve.Problems {
		details[i] = Detail{Field: field, Message: fmt.Sprintf("%s: the data point does not conform to %s: %s", field, ve.Schema, p)}
	}
	return &Error{Code: CodeUnprocessable, Field: field, Message: field + ": " + ve.Error(), Details: details}
}

// effectiveAgrees checks an effective[x] the request gave against the data
// point's time frame, from which effective[x] comes: the same form (an
// instant for effectiveDateTime and effectiveInstant, a period for
// effectivePeriod) and the same instants, in any UTC offset.
func effectiveAgrees(claim *EffectiveClaim, tf *omh.TimeFrame) error {
	if claim == nil {
		return nil
	}
	same := func(s string, t time.Time) bool {
		v, err := omh.ParseDateTime(s)
		return err == nil && v.Equal(t)
	}
	field := "Observation." + claim.Element
	switch {
	case tf == nil:
		return &Error{Code: CodeUnprocessable, Field: field, Message: field + ": the data point has no time frame, so the Observation has no effective[x]; leave it out"}
	case claim.Element == "effectivePeriod" && !tf.IsInstant() && same(claim.Start, tf.Start) && same(claim.End, tf.End),
		claim.Element != "effectivePeriod" && tf.IsInstant() && same(claim.DateTime, tf.Start):
		return nil
	}
	frame := "the instant " + tf.DateTime
	if !tf.IsInstant() {
		frame = "the period " + tf.PeriodStart + " to " + tf.PeriodEnd
	}
	return &Error{Code: CodeUnprocessable, Field: field, Message: field + ": disagrees with the data point's time frame, " + frame + ", from which effective[x] comes; leave it out or make it agree"}
}

// writerCheck loads what the create rules need of a patient. A patient
// writing their own data is the actor's record, which the request read
// already (ActorOf): read once, as a request reads its user once.
func (s *Service) writerCheck(ctx context.Context, actor *Actor, patientID int64) *writerCheck {
	p, err := actor.Patient, error(nil)
	if p == nil || p.ID != patientID {
		p, err = s.readablePatient(ctx, actor, patientID) // one the actor may not read is one that does not exist
	}
	if IsCode(err, CodeNotFound) {
		return &writerCheck{err: &Error{Code: CodeNotFound, Field: "Observation.subject", Message: fmt.Sprintf("Observation.subject: Patient/%d does not exist", patientID)}}
	}
	if err != nil {
		return &writerCheck{err: err}
	}
	if !actor.CanWritePatientData(p) {
		return &writerCheck{err: Errorf(CodeForbidden, "you may not write the data of patient %d", patientID)}
	}
	codes, err := s.consentedCodes(ctx, patientID, nil)
	if err != nil {
		return &writerCheck{err: err}
	}
	return &writerCheck{consented: codes}
}

// consentedCodes returns the native codes a patient consented to share,
// with the given studies (nil: any).
func (s *Service) consentedCodes(ctx context.Context, patientID int64, studyIDs []int64) ([]string, error) {
	codes, err := s.consentedCodesOf(ctx, []int64{patientID}, studyIDs)
	return codes[patientID], err
}

// consentedCodesOf returns the native codes each patient consented to
// share with the given studies (nil: any), in scope code id order: one
// query for the answers, one for their scope codes. Every patient has an
// entry, empty (not nil) when they consented to nothing native.
func (s *Service) consentedCodesOf(ctx context.Context, patientIDs, studyIDs []int64) (map[int64][]string, error) {
	out := make(map[int64][]string, len(patientIDs))
	for _, p := range patientIDs {
		out[p] = []string{}
	}
	if len(patientIDs) == 0 {
		return out, nil
	}
	answers, err := s.store.Consents(ctx, ConsentQuery{PatientIDs: patientIDs, StudyIDs: studyIDs})
	if err != nil {
		return nil, err
	}
	consented := map[int64]map[int64]bool{} // patient -> scope code ids
	var ids []int64
	seen := map[int64]bool{}
	for _, a := range answers {
		if !a.Consented {
			continue
		}
		if consented[a.PatientID] == nil {
			consented[a.PatientID] = map[int64]bool{}
		}
		consented[a.PatientID][a.ScopeCodeID] = true
		if !seen[a.ScopeCodeID] {
			seen[a.ScopeCodeID] = true
			ids = append(ids, a.ScopeCodeID)
		}
	}
	if len(ids) == 0 {
		return out, nil
	}
	codes, err := s.store.ScopeCodesByIDs(ctx, ids)
	if err != nil {
		return nil, err
	}
	for _, c := range codes {
		if !IsNativeSystem(c.System) {
			continue
		}
		for p, scopes := range consented {
			if scopes[c.ID] {
				out[p] = append(out[p], c.Code)
			}
		}
	}
	return out, nil
}

// referenceID reads Type/<id> from a reference.
func referenceID(field, ref, resourceType string) (int64, error) {
	rest, ok := strings.CutPrefix(ref, resourceType+"/")
	if ref == "" {
		return 0, FieldErrorf("Observation."+field, "is required: %s/<id>", resourceType)
	}
	id, valid := ParseID(rest)
	if !ok || !valid {
		return 0, FieldErrorf("Observation."+field, "%q is not a reference to a %s (%s/<id>)", ref, resourceType, resourceType)
	}
	return id, nil
}

// nativeCode returns the one native code of an observation's codings.
func nativeCode(codings []Coding) (string, error) {
	natives, native := 0, Coding{}
	for i, c := range codings {
		if c.System == "" || c.Code == "" {
			return "", FieldErrorf(fmt.Sprintf("Observation.code.coding[%d]", i), "needs a system and a code")
		}
		// The native systems are absolute URIs (TestNativeSystemsAreAbsolute):
		// every upload names one, and parsing it cost allocations.
		if !IsNativeSystem(c.System) && !IsAbsoluteURI(c.System) {
			return "", FieldErrorf(fmt.Sprintf("Observation.code.coding[%d].system", i), "%q is not an absolute URI", c.System)
		}
		if !IsFHIRCode(c.Code) {
			return "", FieldErrorf(fmt.Sprintf("Observation.code.coding[%d].code", i), "%q is not a FHIR code: no surrounding whitespace, single spaces inside", c.Code)
		}
		if IsNativeSystem(c.System) {
			natives, native = natives+1, c
		}
	}
	if natives != 1 {
		return "", FieldErrorf("Observation.code.coding", "exactly one coding must be on %s or %s, not %d", SystemOpenMHealth, SystemIEEE1752, natives)
	}
	if _, err := omh.ParseCode(native.Code); err != nil {
		return "", FieldErrorf("Observation.code.coding", "%v", err)
	}
	return native.Code, nil // = the parsed id's Code(), without building it
}

// ObservationByID returns a native observation the actor may read. Returns
// CodeNotFound, for one of a patient the actor may not read too. The read
// is audited, a refused one too.
func (s *Service) ObservationByID(ctx context.Context, actor *Actor, id int64) (*Observation, error) {
	o, err := s.store.ObservationByID(ctx, id)
	if err != nil {
		s.audit(ctx, actor, AuditRead, AuditKindRead, err, "Observation", []string{ref("Observation", id)}, nil)
		return nil, err
	}
	if _, err = s.readablePatient(ctx, actor, o.PatientID); IsCode(err, CodeNotFound) {
		// The data of a patient the actor may not read is not there for them.
		err = concealed(Errorf(CodeNotFound, "Observation/%d does not exist", id))
	}
	err = s.audit(ctx, actor, AuditRead, AuditKindRead, err, "Observation", []string{ref("Observation", id)}, []int64{o.PatientID})
	if err != nil {
		return nil, err
	}
	return o, nil
}

// CodeObservations is one native code's share of a patient's observations.
type CodeObservations struct {
	Code         string
	Observations []Observation
	// More says that the search's page size cut the list: more
	// observations of the code match.
	More bool
}

// ObservationsByCode runs a search of one patient's native observations
// once per code the patient has observations of, and returns the pages in
// code order: a patient's data grouped by kind, for charts. The search
// names one patient (patient=) and may name a study
// (patient._has:Group:member:_id=): then only the codes the patient
// consented to share with the study are searched, exactly as a FHIR study
// search limits them (none when the patient is not enrolled). Its other
// parameters (dates, sort, page size) apply to each code. Returns
// CodeInvalid unless the search names exactly one patient, and
// CodeForbidden when the actor may not read the study; a patient the actor
// may not read has no data for them, as one that does not exist.
func (s *Service) ObservationsByCode(ctx context.Context, actor *Actor, q Search) ([]CodeObservations, error) {
	joins := q.Joins()
	if !slices.ContainsFunc(joins, func(j Join) bool { return j.Kind == JoinPatient && len(j.IDs) == 1 && len(j.Identifiers) == 0 }) {
		return nil, FieldErrorf("patient", "name exactly one patient")
	}
	scope, _, err := s.patientScope(ctx, actor, q)
	if err != nil {
		return nil, err
	}
	if len(scope.PatientIDs) != 1 {
		return []CodeObservations{}, nil // an unknown patient, or one outside the study
	}
	patientID := scope.PatientIDs[0]
	codes, err := s.store.ObservationCodes(ctx, patientID)
	if err != nil {
		return nil, err
	}
	if scope.Codes != nil {
		codes = intersectStrings(codes, scope.Codes[patientID])
	}
	out := make([]CodeObservations, 0, len(codes))
	for _, code := range codes {
		plan, err := q.Plan(Scope{PatientIDs: scope.PatientIDs, Codes: map[int64][]string{patientID: {code}}})
		if err != nil {
			return nil, err
		}
		res, err := s.store.SearchObservations(ctx, plan)
		if err != nil {
			return nil, err
		}
		out = append(out, CodeObservations{Code: code, Observations: res.Items, More: res.More})
	}
	return out, nil
}
