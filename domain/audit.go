package domain

import (
	"cmp"
	"context"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The audit trail answers "who did what to whose data": every read,
// search, create, update, delete and import of patient data, every consent
// change, sign-in and token issue becomes an AuditEvent. The use cases
// decide what is recorded (they know the patients concerned); an Auditor
// keeps it, off the request path. FHIR shows the events as read-only R5
// AuditEvents, to superusers, and to a patient about themselves.
//
// A patient reads the events about them redacted (AuditEvent.ownView): an
// event records everything its act touched (a search names every patient
// of its page, and its query), and a patient may learn only what concerns
// them. Superusers read the events whole; practitioners read none.

// AuditAction is what was done, as FHIR's AuditEvent.action codes it.
type AuditAction string

// The actions (http://hl7.org/fhir/audit-event-action).
const (
	AuditCreate  AuditAction = "C"
	AuditRead    AuditAction = "R"
	AuditUpdate  AuditAction = "U"
	AuditDelete  AuditAction = "D"
	AuditExecute AuditAction = "E" // searches, sign-ins, token issues
)

// AuditKind is the event's code: a FHIR RESTful interaction, or one of
// the exchange's own events.
type AuditKind string

// The kinds of events. The RESTful ones are codes of
// http://hl7.org/fhir/restful-interaction; the others of AuditSystem.
const (
	AuditKindRead   AuditKind = "read"
	AuditKindSearch AuditKind = "search-type"
	AuditKindCreate AuditKind = "create"
	AuditKindUpdate AuditKind = "update"
	AuditKindDelete AuditKind = "delete"
	AuditKindImport AuditKind = "import"       // an R4 import
	AuditKindSignIn AuditKind = "sign-in"      // a password login
	AuditKindToken  AuditKind = "token-issued" // an OAuth token endpoint answer
	// A bulk export's kick-off (or deletion), its completion and each
	// download of one of its files.
	AuditKindExport         AuditKind = "bulk-export"
	AuditKindExportComplete AuditKind = "bulk-export-completed"
	AuditKindExportDownload AuditKind = "bulk-export-download"
	// AuditKindConnect: a patient's EHR connection made (C) or ended (D).
	AuditKindConnect AuditKind = "ehr-connection"
	// AuditKindPull: a pull of a patient's record from their EHR.
	AuditKindPull AuditKind = "ehr-pull"
	// An invitation issued for a patient, and a patient's login replaced
	// (Service.Invite).
	AuditKindInvitation    AuditKind = "invitation"
	AuditKindLoginReplaced AuditKind = "login-replaced"
)

// AuditSystem is the code system of the exchange's own kinds of events.
const AuditSystem = "https://w3id.org/exchange/audit-event"

// MaxAuditEntities bounds the entities and patients one event names: a
// search names those of its page (at most a page), a batch those it wrote.
const MaxAuditEntities = 1000

// AuditEvent is one entry of the audit trail.
type AuditEvent struct {
	ID       int64 // given by the store
	Recorded time.Time
	Action   AuditAction
	Kind     AuditKind
	// Outcome is the error code of a refused or failed attempt; "" when it
	// succeeded.
	Outcome Code
	// UserID is who acted; 0 for a sign-in of an unknown account. Agent is
	// their FHIR reference: Practitioner/<user id>, or Patient/<patient id>
	// for a patient user.
	UserID int64
	Agent  string
	// ClientID is the OAuth client the request came through; "" for the
	// console, commands and sign-ins.
	ClientID string
	// IdentityProvider is who vouched for the user of a sign-in or token
	// issue that did not check a password here: the id of the identity
	// provider of a federated sign-in, or the issuer of an EHR's ID token
	// exchanged for a token; "" otherwise.
	IdentityProvider string
	// RequestID and Address are where the request came from (its
	// X-Request-Id and the client's network address).
	RequestID string
	Address   string
	// EntityTypes are the types of what was acted on ("Observation",
	// "Consent"); Entities their references ("Observation/12"), at most
	// MaxAuditEntities.
	EntityTypes []string
	Entities    []string
	// Query is a search's query string as fhirsearch.Query.String gives
	// it: without the page cursor, _format and _pretty (_count stays).
	Query string
	// PatientIDs are the patients whose data it was: for a search, those
	// of the page it answered.
	PatientIDs []int64
	// Redacted says that the reader sees less than was recorded: a
	// patient's own view of an event that touched others (ownView).
	Redacted bool
}

// redactedValue stands in a patient's own view of a query for each value
// that does not name them.
const redactedValue = "(redacted)"

// queryParamsNamingNoOne are the search parameters whose values say what
// was searched (codes, dates, the answer's shape and page size), never whom: a
// patient's own view of a query keeps them. A modifier or a chain
// (code:text, patient.name) makes another parameter, which is redacted.
var queryParamsNamingNoOne = map[string]bool{"code": true, "category": true, "status": true, "date": true,
	"_lastUpdated": true, "_sort": true, "_count": true, "_summary": true, "_elements": true, "_total": true}

// ownView returns the event as the patient sees it: of the patients it
// names, only them; of its entities, all when it concerns them alone,
// else only their own Patient record (which entity was whose is not
// recorded); of its query, the parameters, with each value that neither
// names them nor belongs to queryParamsNamingNoOne replaced by
// "(redacted)". Who acted stays: who touched their data is what the trail
// owes them. Redacted is set when anything was left out.
func (e AuditEvent) ownView(patient int64) AuditEvent {
	own := "Patient/" + strconv.FormatInt(patient, 10)
	out := e
	out.PatientIDs = nil
	if slices.Contains(e.PatientIDs, patient) {
		out.PatientIDs = []int64{patient}
	}
	if len(e.PatientIDs) > 1 || !slices.Contains(e.PatientIDs, patient) {
		out.Entities = nil
		if slices.Contains(e.Entities, own) {
			out.Entities = []string{own}
		}
	}
	out.Query = ownQuery(e.Query, patient)
	out.Redacted = len(out.PatientIDs) != len(e.PatientIDs) || len(out.Entities) != len(e.Entities) || out.Query != e.Query
	return out
}

// ownQuery redacts a recorded query (url-encoded) for a patient's own
// view (see ownView). A query that does not parse is redacted whole.
func ownQuery(query string, patient int64) string {
	if query == "" {
		return ""
	}
	values, err := url.ParseQuery(query)
	if err != nil {
		return redactedValue
	}
	id := strconv.FormatInt(patient, 10)
	namesThem := func(v string) bool {
		return v == id || v == "Patient/"+id || strings.HasSuffix(v, "/Patient/"+id)
	}
	for name, vs := range values {
		if queryParamsNamingNoOne[name] {
			continue
		}
		for i, v := range vs {
			parts := strings.Split(v, ",")
			for j, part := range parts {
				if !namesThem(part) {
					parts[j] = redactedValue
				}
			}
			vs[i] = strings.Join(parts, ",")
		}
	}
	return values.Encode()
}

// Auditor keeps the audit trail. Record keeps an event or says it cannot:
// an event about patient data is never dropped, so Record may make the
// request wait (bounded), and its error (CodeUnavailable) means the
// request must not answer as if the act had been recorded. An
// implementation may rate-limit what anyone can produce without signing
// in (failed sign-ins), saying so (a metric and a log line), never
// silently.
type Auditor interface {
	Record(ctx context.Context, e AuditEvent) error
}

// noAudit is the Auditor of a Service configured without one (tests that
// do not look at the trail).
type noAudit struct{}

func (noAudit) Record(context.Context, AuditEvent) error { return nil }

// Origin is where a request came from, as the transport saw it: the
// audit trail records it with each event.
type Origin struct {
	RequestID string
	Address   string
}

type originKey struct{}

// WithOrigin returns ctx carrying the request's origin.
func WithOrigin(ctx context.Context, o Origin) context.Context {
	return context.WithValue(ctx, originKey{}, o)
}

// OriginOf returns the origin ctx carries; zero when none.
func OriginOf(ctx context.Context) Origin {
	o, _ := ctx.Value(originKey{}).(Origin)
	return o
}

// auditOf starts the event of an actor's act: who, through which client,
// from where, when, and how it ended.
func (s *Service) auditOf(ctx context.Context, actor *Actor, action AuditAction, kind AuditKind, err error) AuditEvent {
	o := OriginOf(ctx)
	e := AuditEvent{Recorded: s.Now(), Action: action, Kind: kind, Outcome: auditOutcome(err),
		RequestID: o.RequestID, Address: o.Address}
	if actor != nil {
		e.UserID, e.Agent, e.ClientID = actor.User.ID, actor.reference(), actor.ClientID
	}
	return e
}

// reference is the actor's FHIR reference: Patient/<id> for a patient
// user with a record, Organization/<id> for a backend client acting for
// an organization, else Practitioner/<user id>; "" for the system.
func (a *Actor) reference() string {
	switch {
	case a.Organization != 0:
		return "Organization/" + strconv.FormatInt(a.Organization, 10)
	case a.User.ID == 0:
		return ""
	case a.Patient != nil:
		return "Patient/" + strconv.FormatInt(a.Patient.ID, 10)
	default:
		return "Practitioner/" + strconv.FormatInt(a.User.ID, 10)
	}
}

// audit records the event of an actor's act on entities (references,
// Type/id) of entityType ("": the types of the references), concerning
// patients. System actors (commands, seed) are operators at the console
// of the database: not recorded.
// It returns unaudited(err, the trail's answer): the act's outcome, or
// the trail's refusal of a success.
func (s *Service) audit(ctx context.Context, actor *Actor, action AuditAction, kind AuditKind, err error, entityType string, refs []string, patients []int64) error {
	return unaudited(err, s.record(ctx, actor, action, kind, err, entityType, refs, patients))
}

// record is audit, returning only the trail's refusal (nil: kept).
func (s *Service) record(ctx context.Context, actor *Actor, action AuditAction, kind AuditKind, err error, entityType string, refs []string, patients []int64) error {
	if actor != nil && actor.isSystem() {
		return nil
	}
	e := s.auditOf(ctx, actor, action, kind, err)
	e.Entities = refs[:min(len(refs), MaxAuditEntities)]
	if entityType != "" {
		// Cloned: the caller's string may share a buffer it reuses (Fiber's
		// path parameters), and the Auditor keeps the event.
		e.EntityTypes = []string{strings.Clone(entityType)}
	}
	for _, ref := range e.Entities {
		if t, _, _ := strings.Cut(ref, "/"); !slices.Contains(e.EntityTypes, t) {
			e.EntityTypes = append(e.EntityTypes, t)
		}
	}
	e.PatientIDs = boundedIDs(patients)
	return s.auditor.Record(ctx, e)
}

// auditBatch records a batch of creates as two events: what was stored,
// and what was refused, with the first refusal's code and the patients
// the refused entries named, so each patient sees the attempt. It returns
// the trail's refusal of either (nil: both kept).
func (s *Service) auditBatch(ctx context.Context, actor *Actor, entityType string, stored []string, storedPatients []int64, refusal error, refusedPatients []int64) error {
	var failed error
	if len(stored) > 0 {
		failed = s.record(ctx, actor, AuditCreate, AuditKindCreate, nil, entityType, stored, storedPatients)
	}
	if refusal != nil {
		failed = cmp.Or(failed, s.record(ctx, actor, AuditCreate, AuditKindCreate, refusal, entityType, nil, refusedPatients))
	}
	return failed
}

// changeKind is the RESTful interaction of a change.
func changeKind(action AuditAction) AuditKind {
	switch action {
	case AuditCreate:
		return AuditKindCreate
	case AuditDelete:
		return AuditKindDelete
	default:
		return AuditKindUpdate
	}
}

// auditSearch records a search of a type and the patients whose data its
// page held. A search that named patients the actor may not read (hidden)
// answered as if they did not exist; the attempt on them is an event of
// its own, refused (concealed), naming them alone, as a read of one is:
// the actor's own trail (ownView) must show the same events whether those
// patients exist or not, so what the search returned is still recorded as
// a success of its page's patients (when there were any: a success that
// names no one is for superusers only, who read the refused event whole).
func (s *Service) auditSearch(ctx context.Context, actor *Actor, q Search, err error, patients []int64, named namedPatients) error {
	// A search that answers a read (a token's reach of one id) is part of
	// the read, which records itself (ReadFHIR, ResourceByID).
	if (actor != nil && actor.isSystem()) || q.Interaction() == InteractionRead {
		return err
	}
	// The patients it named were read, whatever the page held (a count,
	// an empty page).
	patients = append(patients, named.readable...)
	if err == nil && len(named.hidden) > 0 {
		err := s.recordSearch(ctx, actor, q, concealed(Errorf(CodeNotFound, "the search named patients the actor may not read")), named.hidden)
		if err != nil || len(patients) == 0 {
			return err
		}
	}
	if err != nil {
		// Refused: the patients it named, so each can see the attempt.
		for _, j := range q.Joins() {
			if j.Kind == JoinPatient {
				patients = append(patients, j.IDs...)
			}
		}
	}
	return unaudited(err, s.recordSearch(ctx, actor, q, err, patients))
}

// recordSearch records one event of a search (auditSearch), naming the
// patients.
func (s *Service) recordSearch(ctx context.Context, actor *Actor, q Search, err error, patients []int64) error {
	e := s.auditOf(ctx, actor, AuditExecute, AuditKindSearch, err)
	e.EntityTypes = []string{q.ResourceType()}
	e.Query = q.String()
	e.PatientIDs = boundedIDs(patients)
	return s.auditor.Record(ctx, e)
}

// unaudited is the outcome of an act whose event the trail could not
// keep (auditErr): the act's own error when it failed, else auditErr, so
// that no answer about patient data goes out unaudited (a read is
// withheld; the 503 tells the caller to try again).
func unaudited(actErr, auditErr error) error {
	if actErr != nil {
		return actErr
	}
	return auditErr
}

// boundedIDs returns the distinct ids, sorted, at most MaxAuditEntities.
func boundedIDs(ids []int64) []int64 {
	ids = sortedUnique(ids)
	return ids[:min(len(ids), MaxAuditEntities)]
}

// ref is the reference Type/id of a native entity.
func ref(entityType string, id int64) string {
	return entityType + "/" + strconv.FormatInt(id, 10)
}

// auditSignIn records a password sign-in. A refused one names the account
// when it exists, so its owner sees the attempt; never the email typed.
func (s *Service) auditSignIn(ctx context.Context, email string, u *User, err error) {
	if u == nil && !IsCode(err, CodeInternal) {
		u, _ = s.store.UserByEmail(ctx, strings.ToLower(strings.TrimSpace(email)))
	}
	s.auditUserEvent(ctx, u, AuditKindSignIn, "", "", err)
}

// TokenIssued records that the token endpoint issued tokens to a client
// for a user (a sign-in's code redeemed, or a refresh).
func (s *Service) TokenIssued(ctx context.Context, userID int64, clientID string) {
	u, err := s.store.UserByID(ctx, userID)
	if err != nil {
		u = &User{ID: userID}
	}
	s.auditUserEvent(ctx, u, AuditKindToken, clientID, "", nil)
}

// auditUserEvent records an event of a user's account (nil: unknown):
// a patient user's events are about their own record. via is the
// identity provider that vouched for the user, if one did.
func (s *Service) auditUserEvent(ctx context.Context, u *User, kind AuditKind, clientID, via string, err error) {
	actor := &Actor{ClientID: clientID}
	if u != nil {
		actor.User = *u
		if u.Type == UserPatient {
			actor.Patient, _ = s.store.PatientByUserID(ctx, u.ID)
		}
	}
	e := s.auditOf(ctx, actor, AuditExecute, kind, err)
	e.IdentityProvider = via
	if actor.Patient != nil {
		e.PatientIDs = []int64{actor.Patient.ID}
	}
	s.auditor.Record(ctx, e)
}

// auditReach is the patients whose events the actor may read: nil for a
// superuser (all), the patient's own for a patient user. Others read no
// audit trail (CodeForbidden).
func auditReach(actor *Actor) ([]int64, error) {
	switch {
	case actor.IsSuperuser():
		return nil, nil
	case actor.Patient != nil:
		return []int64{actor.Patient.ID}, nil
	}
	return nil, Errorf(CodeForbidden, "the audit trail is for superusers, and for patients about themselves")
}

// auditViewer is the patient whose own view of the trail (ownView) the
// actor reads with interaction i: a patient user's record; or the patient
// context of a token that reaches AuditEvents through patient/ scopes
// only (a superuser's app launched for one patient reads as that patient
// would). own is false for the whole view: a superuser with full access
// or a user/ scope.
func auditViewer(actor *Actor, i Interactions) (patient int64, own bool) {
	if actor.Patient != nil {
		return actor.Patient.ID, true
	}
	// A narrowing token has at least one scope that reaches AuditEvents; a
	// user/ one among them (with constraints: the others do not narrow)
	// gives the whole view, as far as its constraints reach.
	terms, narrowed, err := actor.reach(i, "AuditEvent")
	if err != nil || !narrowed || slices.ContainsFunc(terms, func(rs ResourceScope) bool { return !rs.Patient }) {
		return 0, false
	}
	return actor.access.patient, true
}

// viewedBy returns the events as the actor may see them (auditViewer).
func viewedBy(actor *Actor, i Interactions, events []AuditEvent) []AuditEvent {
	patient, own := auditViewer(actor, i)
	return ownViews(patient, own, events)
}

// ownViews returns the events as the patient's own views when own, else
// as they are.
func ownViews(patient int64, own bool, events []AuditEvent) []AuditEvent {
	if !own {
		return events
	}
	out := make([]AuditEvent, len(events))
	for k, e := range events {
		out[k] = e.ownView(patient)
	}
	return out
}

// SearchAuditEvents runs a search of the audit trail within the actor's
// reach (auditReach) and the token's scopes (a patient/ scope: the events
// about its patient); patient= narrows it to patients the actor may read.
// Reading the trail is not itself recorded.
func (s *Service) SearchAuditEvents(ctx context.Context, actor *Actor, q Search) (SearchResult[AuditEvent], error) {
	plan, viewer, own, err := s.auditPlan(ctx, actor, q)
	if err != nil {
		return SearchResult[AuditEvent]{}, err
	}
	res, err := s.store.SearchAuditEvents(ctx, plan)
	res.Items = ownViews(viewer, own, res.Items)
	return res, err
}

// auditPlan plans SearchAuditEvents: the plan, and whose own view of the
// events it finds the actor reads (ownViews).
func (s *Service) auditPlan(ctx context.Context, actor *Actor, q Search) (plan *SearchPlan, viewer int64, own bool, err error) {
	ids, err := auditReach(actor)
	if err != nil {
		return nil, 0, false, err
	}
	viewer, own = auditViewer(actor, q.Interaction())
	if own {
		// An own view finds the events by its patient alone: patient= may
		// narrow them to others they touched (a superuser's token may read
		// any patient) only to none, else the filter would tell which
		// events the view redacts touched whom.
		ids = intersect(ids, []int64{viewer})
	}
	reach, err := s.reachOf(actor, q, ofPatient)
	if err != nil {
		return nil, 0, false, err
	}
	for _, j := range q.Joins() {
		t, err := s.resolveJoin(ctx, actor, q, j)
		if err != nil {
			return nil, 0, false, err
		}
		ids = intersect(ids, t.patients)
	}
	plan, err = q.Plan(Scope{PatientIDs: ids}.within(reach))
	return plan, viewer, own, err
}

// AuditEventByID returns an event of the audit trail within the actor's
// reach: a patient reads the events about themselves (CodeForbidden for
// others), redacted to their own view (auditViewer).
func (s *Service) AuditEventByID(ctx context.Context, actor *Actor, id int64) (*AuditEvent, error) {
	reach, err := auditReach(actor)
	if err != nil {
		return nil, err
	}
	e, err := s.store.AuditEventByID(ctx, id)
	if err != nil {
		return nil, err
	}
	if reach != nil && !slices.ContainsFunc(reach, func(p int64) bool { return slices.Contains(e.PatientIDs, p) }) {
		return nil, Errorf(CodeForbidden, "you may not read AuditEvent/%d: it is not about you", id)
	}
	return &viewedBy(actor, InteractionRead, []AuditEvent{*e})[0], nil
}
