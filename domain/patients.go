package domain

import (
	"context"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode"
)

// NewPatient is the input of CreatePatient: the patient's login and record.
type NewPatient struct {
	Email           string
	Password        string // optional: patients usually log in through an invitation link
	FamilyName      string
	GivenNames      []string
	BirthDate       string // YYYY-MM-DD
	Phone           string
	Identifiers     []Identifier
	OrganizationIDs []int64
}

// CreatePatient creates a patient user and the patient record. The actor
// must be able to manage data in every organization named. Returns
// CodeInvalid, CodeForbidden, or CodeDuplicate (email or identifier taken);
// on any error nothing is left behind.
func (s *Service) CreatePatient(ctx context.Context, actor *Actor, in NewPatient) (created *Patient, err error) {
	defer func() { err = s.auditPatientChange(ctx, actor, AuditCreate, created, err) }()
	p := &Patient{
		FamilyName:      strings.TrimSpace(in.FamilyName),
		GivenNames:      trimAll(in.GivenNames),
		BirthDate:       strings.TrimSpace(in.BirthDate),
		OrganizationIDs: uniqueIDs(in.OrganizationIDs),
	}
	email, err := NormalizeEmail("email", in.Email)
	if err != nil {
		return nil, err
	}
	p.Telecom = []ContactPoint{{System: "email", Value: email}}
	if phone := strings.TrimSpace(in.Phone); phone != "" {
		p.Telecom = append(p.Telecom, ContactPoint{System: "phone", Value: phone})
	}
	if err := s.validatePatient(ctx, p, in.Identifiers); err != nil {
		return nil, err
	}
	for _, id := range p.OrganizationIDs {
		if !actor.CanManageDataIn(id) {
			return nil, Errorf(CodeForbidden, "you may not add patients to organization %d", id)
		}
	}
	p.Identifiers = in.Identifiers
	given, family := loginNames(p)
	u, err := s.newUser(NewUser{Email: email, Password: in.Password, FirstName: given, LastName: family, Type: UserPatient})
	if err != nil {
		return nil, err
	}
	if err := s.store.CreatePatient(ctx, u, p); err != nil {
		return nil, err
	}
	return p, nil
}

// PatientByID returns a patient the actor may read. Returns CodeNotFound,
// for a patient the actor may not read too (readablePatient). The read is
// audited, a refused one too.
func (s *Service) PatientByID(ctx context.Context, actor *Actor, id int64) (*Patient, error) {
	p, err := s.readablePatient(ctx, actor, id)
	if err = s.audit(ctx, actor, AuditRead, AuditKindRead, err, "Patient", []string{ref("Patient", id)}, []int64{id}); err != nil {
		return nil, err
	}
	return p, nil
}

// readablePatient is PatientByID without the audit, for the use cases
// that read the patient on the way to what they record. A patient the
// actor may not read is answered exactly as one that does not exist
// (patientNotFound): that someone is a patient of a clinic is health
// information, so no answer, status or message may tell an id that exists
// from one that does not (the audit trail does: concealed). A use case that then needs more than reading
// (a write) refuses with CodeForbidden only a patient the actor can see.
func (s *Service) readablePatient(ctx context.Context, actor *Actor, id int64) (*Patient, error) {
	p, err := s.store.PatientByID(ctx, id)
	if IsCode(err, CodeNotFound) {
		return nil, patientNotFound(id)
	}
	if err == nil && !actor.CanReadPatient(p) {
		return nil, concealed(patientNotFound(id))
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// patientNotFound is the answer about a patient id that does not exist or
// that the actor may not read: one answer for both.
func patientNotFound(id int64) *Error {
	return Errorf(CodeNotFound, "patient %d does not exist", id)
}

// PatientByUserID returns the patient record of a patient user.
func (s *Service) PatientByUserID(ctx context.Context, userID int64) (*Patient, error) {
	return s.store.PatientByUserID(ctx, userID)
}

// PatientFilter narrows a patient list; zero fields do not filter.
type PatientFilter struct {
	ID             int64
	OrganizationID int64
	StudyID        int64
	// Identifier selects the patient with this identifier; with an
	// empty System, those with this value in any system.
	Identifier *Identifier
	Name       string // prefix of a family or given name, any case or accents
}

// readablePatients returns the query part that limits patients to those
// the actor may read.
func (a *Actor) readablePatients() PatientQuery {
	if a.heldTo != 0 {
		q := a.withoutHold().readablePatients()
		q.IDs = intersect(q.IDs, []int64{a.heldTo})
		return q
	}
	switch {
	case a.IsSuperuser():
		return PatientQuery{}
	case a.Patient != nil:
		return PatientQuery{IDs: []int64{a.Patient.ID}}
	case a.User.Type == UserPatient:
		return PatientQuery{IDs: []int64{}}
	default:
		return PatientQuery{OrganizationIDs: a.OrganizationIDs()}
	}
}

// ListPatients lists the patients the actor may read that pass the filter.
// Filtering on an organization or study the actor may not read is
// CodeForbidden; on one that does not exist, CodeInvalid.
func (s *Service) ListPatients(ctx context.Context, actor *Actor, f PatientFilter, p Page) (l List[Patient], err error) {
	defer func() {
		err = s.audit(ctx, actor, AuditExecute, AuditKindSearch, err, "Patient", nil, idsOf(l.Items, func(p Patient) int64 { return p.ID }))
	}()
	q, err := s.patientQuery(ctx, actor, f)
	if err != nil {
		return List[Patient]{}, err
	}
	return s.store.ListPatients(ctx, q, p)
}

// PatientsByEmail finds the patient whose login has this email (any
// case), as JupyterHealth Exchange's global lookup does, among the
// patients the actor may read: a list of one or none. A patient out of
// the actor's sight is not found, exactly as an email nobody has (see
// readablePatient), and so is a practitioner's email. CodeInvalid for a
// malformed email.
func (s *Service) PatientsByEmail(ctx context.Context, actor *Actor, email string) (found []Patient, err error) {
	defer func() {
		err = s.audit(ctx, actor, AuditExecute, AuditKindSearch, err, "Patient", nil, idsOf(found, func(p Patient) int64 { return p.ID }))
	}()
	if email, err = NormalizeEmail("email", email); err != nil {
		return nil, err
	}
	found = []Patient{}
	u, err := s.store.UserByEmail(ctx, email)
	// userID 0 (no patient's login has the email) is looked up all the
	// same: finding nobody then takes the two reads that finding a patient
	// out of sight takes, so that not even the time tells them apart.
	var userID int64
	switch {
	case err == nil && u.Type == UserPatient:
		userID = u.ID
	case err != nil && !IsCode(err, CodeNotFound):
		return nil, err
	}
	p, err := s.store.PatientByUserID(ctx, userID)
	if IsCode(err, CodeNotFound) || (err == nil && (userID == 0 || !actor.CanReadPatient(p))) {
		return found, nil
	}
	if err != nil {
		return nil, err
	}
	return append(found, *p), nil
}

// auditPatientChange records a create, update or delete of a patient's
// record (p: the patient, when known).
func (s *Service) auditPatientChange(ctx context.Context, actor *Actor, action AuditAction, p *Patient, err error) error {
	var refs []string
	var patients []int64
	if p != nil {
		refs, patients = []string{ref("Patient", p.ID)}, []int64{p.ID}
	}
	return s.audit(ctx, actor, action, changeKind(action), err, "Patient", refs, patients)
}

// patientQuery combines the actor's reach with a filter.
func (s *Service) patientQuery(ctx context.Context, actor *Actor, f PatientFilter) (PatientQuery, error) {
	q := actor.readablePatients()
	if f.OrganizationID != 0 {
		if _, err := s.store.OrganizationByID(ctx, f.OrganizationID); err != nil {
			return q, AsFieldError(err, "organizationId")
		}
		if !actor.CanReadOrganization(f.OrganizationID) && actor.Patient == nil {
			return q, Errorf(CodeForbidden, "you may not read organization %d", f.OrganizationID)
		}
		q.OrganizationIDs = intersect(q.OrganizationIDs, []int64{f.OrganizationID})
	}
	if f.StudyID != 0 {
		study, err := s.store.StudyByID(ctx, f.StudyID)
		if err != nil {
			return q, AsFieldError(err, "studyId")
		}
		if !actor.CanReadOrganization(study.OrganizationID) && actor.Patient == nil {
			return q, Errorf(CodeForbidden, "you may not read study %d", f.StudyID)
		}
		es, err := s.store.Enrollments(ctx, EnrollmentQuery{StudyIDs: []int64{f.StudyID}})
		if err != nil {
			return q, err
		}
		ids := make([]int64, len(es))
		for i, e := range es {
			ids[i] = e.PatientID
		}
		q.IDs = intersect(q.IDs, ids)
	}
	if f.ID != 0 {
		q.IDs = intersect(q.IDs, []int64{f.ID})
	}
	q.Identifier = f.Identifier
	q.NamePrefix = SearchKey(f.Name)
	return q, nil
}

// intersect combines two id filters, where nil means "any".
func intersect(a, b []int64) []int64 {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	in := make(map[int64]bool, len(b))
	for _, id := range b {
		in[id] = true
	}
	out := []int64{}
	for _, id := range a {
		if in[id] {
			out = append(out, id)
		}
	}
	return out
}

// AsFieldError turns a not-found reference given in a filter or body into
// an invalid field: the request, not the addressed resource, is wrong.
func AsFieldError(err error, field string) error {
	if IsCode(err, CodeNotFound) {
		return FieldErrorf(field, "%s", ErrorMessage(err))
	}
	return err
}

// PatientPatch changes a patient; nil fields stay.
type PatientPatch struct {
	FamilyName *string
	GivenNames *[]string
	// GivenName is the given names as one string (JupyterHealth
	// Exchange's nameGiven), for when GivenNames is nil: split at spaces
	// (GivenNamesOf), unless it reads as the record's names do already
	// (Patient.GivenName), which then stay as they are, so that a client
	// sending back a patient as it read it changes nothing.
	GivenName       *string
	BirthDate       *string
	Phone           *string // empty: remove the phone number
	Identifiers     *[]Identifier
	OrganizationIDs *[]int64
	// AddIdentifiers and RemoveIdentifiers change the identifiers the
	// update reads (after Identifiers, if set), inside its compare-and-set:
	// an identifier another request adds meanwhile stays, as it would not
	// if the caller sent a whole list computed from an earlier read. See
	// changeIdentifiers for one already there, or absent, or in both.
	AddIdentifiers    []Identifier
	RemoveIdentifiers []Identifier
	// Unchanged is the LastUpdated of the patient the change was made
	// from (the admin API's If-Match); nil: none. If the patient changed
	// since, nothing is written, even of fields the other change did not
	// touch: the caller asked for the stricter rule (checkUnchanged).
	Unchanged *time.Time
}

// UpdatePatient changes a patient's record. Writing needs the right to
// write the patient's data; moving the patient into or out of an
// organization needs patient.manage_data there.
//
// Updates of one patient may run at once: each applies its patch to the
// record it read, and the store keeps it only if the record is still that
// one; the update that lost reads the record again and applies its patch
// there, so that neither drops the other's fields. Returns CodeConflict if
// other updates keep coming first, or if another request (on another
// instance) is changing the patient's identifiers; a Stale CodeConflict
// if in.Unchanged is not the stored version, checked once the actor may
// make the change (as UpdateStudy).
func (s *Service) UpdatePatient(ctx context.Context, actor *Actor, id int64, in PatientPatch) (_ *Patient, err error) {
	defer func() { err = s.auditPatientChange(ctx, actor, AuditUpdate, &Patient{ID: id}, err) }()
	return applyAgain(func() (*Patient, error) { return s.updatePatient(ctx, actor, id, in) }, "patient %d", id)
}

// changeIdentifiers removes from ids, the identifiers of patient id the
// update read, those remove names, then appends those add names. A removal
// of one ids lacks changes nothing: what it asks for holds (another request
// may have removed it first). An addition of one ids holds, or an
// identifier both added and removed, is refused (CodeInvalid, naming it):
// the caller believed the record other than it is, or asked for two
// outcomes at once.
func changeIdentifiers(ids, add, remove []Identifier, id int64) ([]Identifier, error) {
	if len(add) == 0 && len(remove) == 0 {
		return ids, nil
	}
	for i, x := range add {
		if slices.Contains(remove, x) {
			return nil, FieldErrorf(fmt.Sprintf("addIdentifiers[%d]", i), "%s|%s is also removed; send one of the two", x.System, x.Value)
		}
		if slices.Contains(ids, x) {
			return nil, FieldErrorf(fmt.Sprintf("addIdentifiers[%d]", i), "%s|%s is already an identifier of patient %d", x.System, x.Value, id)
		}
	}
	kept := slices.DeleteFunc(slices.Clone(ids), func(x Identifier) bool { return slices.Contains(remove, x) })
	return append(kept, add...), nil
}

// updatePatient applies the patch to the stored record once.
func (s *Service) updatePatient(ctx context.Context, actor *Actor, id int64, in PatientPatch) (*Patient, error) {
	old, err := s.readablePatient(ctx, actor, id)
	if err != nil {
		return nil, err
	}
	if !actor.CanWritePatientData(old) {
		return nil, Errorf(CodeForbidden, "you may not change patient %d", id)
	}
	var orgs []int64
	if in.OrganizationIDs != nil {
		orgs = uniqueIDs(*in.OrganizationIDs)
		for _, org := range symmetricDifference(old.OrganizationIDs, orgs) {
			if !actor.CanManageDataIn(org) {
				return nil, Errorf(CodeForbidden, "you may not move patients into or out of organization %d", org)
			}
		}
	}
	if err := checkUnchanged(in.Unchanged, old.LastUpdated, "patient %d", id); err != nil {
		return nil, err
	}
	p := *old
	if in.FamilyName != nil {
		p.FamilyName = strings.TrimSpace(*in.FamilyName)
	}
	if in.GivenNames != nil {
		p.GivenNames = trimAll(*in.GivenNames)
	} else if in.GivenName != nil && *in.GivenName != p.GivenName() {
		p.GivenNames = GivenNamesOf(*in.GivenName)
	}
	if in.BirthDate != nil {
		p.BirthDate = strings.TrimSpace(*in.BirthDate)
	}
	if in.Phone != nil {
		p.Telecom = slices.DeleteFunc(slices.Clone(p.Telecom), func(c ContactPoint) bool { return c.System == "phone" })
		if phone := strings.TrimSpace(*in.Phone); phone != "" {
			p.Telecom = append(p.Telecom, ContactPoint{System: "phone", Value: phone})
		}
	}
	identifiers := p.Identifiers
	if in.Identifiers != nil {
		identifiers = *in.Identifiers
	}
	if identifiers, err = changeIdentifiers(identifiers, in.AddIdentifiers, in.RemoveIdentifiers, id); err != nil {
		return nil, err
	}
	if in.OrganizationIDs != nil {
		p.OrganizationIDs = orgs
		if err := s.checkNotEnrolledIn(ctx, id, missingIDs(old.OrganizationIDs, p.OrganizationIDs)); err != nil {
			return nil, err
		}
	}
	if err := s.validatePatient(ctx, &p, identifiers); err != nil {
		return nil, err
	}
	p.Identifiers = identifiers
	unchanged := reflect.DeepEqual(p, *old) // no new version
	if !unchanged {
		if err := s.store.UpdatePatient(ctx, old, &p); err != nil {
			return nil, err
		}
	}
	if in.FamilyName != nil || in.GivenNames != nil || in.GivenName != nil {
		// The login carries the record's names (the profile shows them).
		// It follows the record, so a retry of the same change brings it in
		// line if this write fails. Only the names are written: the rest of
		// the user may be changing meanwhile (an invitation accepted).
		given, family := loginNames(&p)
		if _, err := s.store.ChangeUser(ctx, p.UserID, UserChange{FirstName: &given, LastName: &family}); err != nil {
			return nil, err
		}
	}
	if unchanged {
		return old, nil
	}
	return &p, nil
}

// loginNames returns the first and last name of a patient's login: the
// first given name and the family name of the record.
func loginNames(p *Patient) (first, last string) {
	if len(p.GivenNames) > 0 {
		first = p.GivenNames[0]
	}
	return first, p.FamilyName
}

// checkNotEnrolledIn refuses to take a patient out of organizations whose
// studies they are enrolled in: enrollment needs the study's organization.
func (s *Service) checkNotEnrolledIn(ctx context.Context, patientID int64, orgs []int64) error {
	if len(orgs) == 0 {
		return nil
	}
	es, err := s.store.Enrollments(ctx, EnrollmentQuery{PatientIDs: []int64{patientID}})
	if err != nil {
		return err
	}
	for _, e := range es {
		st, err := s.store.StudyByID(ctx, e.StudyID)
		if err != nil && !IsCode(err, CodeNotFound) {
			return err
		}
		if err == nil && slices.Contains(orgs, st.OrganizationID) {
			return Errorf(CodeConflict, "patient %d is enrolled in study %d of organization %d; remove the enrollment first", patientID, st.ID, st.OrganizationID)
		}
	}
	return nil
}

// missingIDs returns the ids of a that b lacks.
func missingIDs(a, b []int64) []int64 {
	var out []int64
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

func symmetricDifference(a, b []int64) []int64 {
	return append(missingIDs(a, b), missingIDs(b, a)...)
}

// CanManagePatient reports whether the actor may manage the patient (delete
// them, invite them): a superuser, or a practitioner with patient.manage_data
// in one of the patient's organizations; not the patient.
func (a *Actor) CanManagePatient(p *Patient) bool {
	if a.holdsOff(p.ID) {
		return false
	}
	return a.IsSuperuser() || slices.ContainsFunc(p.OrganizationIDs, a.CanManageDataIn)
}

// DeletePatient removes a patient, their enrollments, consents and login.
// A patient with FHIR sources or native observations is kept
// (CodeConflict): their data would lose its owner. Needs a practitioner
// who manages the patient's data.
func (s *Service) DeletePatient(ctx context.Context, actor *Actor, id int64) (err error) {
	defer func() { err = s.auditPatientChange(ctx, actor, AuditDelete, &Patient{ID: id}, err) }()
	p, err := s.readablePatient(ctx, actor, id)
	if err != nil {
		return err
	}
	if !actor.CanManagePatient(p) {
		return Errorf(CodeForbidden, "you may not delete patient %d", id)
	}
	sources, err := s.store.ListFHIRSources(ctx, FHIRSourceQuery{PatientIDs: []int64{id}}, Page{Number: 1, Size: 1})
	if err != nil {
		return err
	}
	if sources.Total > 0 {
		return Errorf(CodeConflict, "patient %d has %d FHIR sources; delete them first", id, sources.Total)
	}
	holds, err := s.store.PatientHoldsObservations(ctx, id)
	if err != nil {
		return err
	}
	if holds {
		return Errorf(CodeConflict, "patient %d has observations; their data would lose its owner", id)
	}
	return s.store.DeletePatient(ctx, p)
}

// PatientForInvitation returns the patient if the actor may invite them
// (issue their authorization link): a practitioner who manages their data.
func (s *Service) PatientForInvitation(ctx context.Context, actor *Actor, id int64) (*Patient, error) {
	p, err := s.readablePatient(ctx, actor, id)
	if err != nil {
		return nil, err
	}
	if !actor.CanManagePatient(p) {
		return nil, Errorf(CodeForbidden, "you may not invite patient %d", id)
	}
	return p, nil
}

func (s *Service) validatePatient(ctx context.Context, p *Patient, identifiers []Identifier) error {
	if p.FamilyName == "" {
		return FieldErrorf("nameFamily", "is required")
	}
	if len(p.GivenNames) == 0 {
		return FieldErrorf("nameGiven", "is required")
	}
	if err := LimitName.Check("nameFamily", p.FamilyName); err != nil {
		return err
	}
	if err := LimitName.CheckAll("nameGiven", p.GivenNames); err != nil {
		return err
	}
	for _, t := range p.Telecom {
		if err := LimitIdentifier.Check(t.System, t.Value); err != nil { // the phone number (the email is checked as one)
			return err
		}
	}
	if p.BirthDate != "" {
		d, err := time.Parse(time.DateOnly, p.BirthDate)
		if err != nil {
			return FieldErrorf("birthDate", "%q is not a date (YYYY-MM-DD)", p.BirthDate)
		}
		if d.After(s.Now()) {
			return FieldErrorf("birthDate", "%s is in the future", p.BirthDate)
		}
	}
	if err := ValidateIdentifiers("identifiers", identifiers); err != nil {
		return err
	}
	if len(p.OrganizationIDs) == 0 {
		return FieldErrorf("organizationIds", "a patient belongs to at least one organization")
	}
	if err := CheckItems("organizationIds", len(p.OrganizationIDs)); err != nil {
		return err
	}
	for _, id := range p.OrganizationIDs {
		if _, err := s.store.OrganizationByID(ctx, id); err != nil {
			if IsCode(err, CodeNotFound) {
				return FieldErrorf("organizationIds", "organization %d does not exist", id)
			}
			return err
		}
	}
	return nil
}

// ValidateIdentifiers checks that each identifier has an absolute URI system
// and a value, and that none is repeated.
func ValidateIdentifiers(field string, ids []Identifier) error {
	if err := CheckItems(field, len(ids)); err != nil {
		return err
	}
	// Every upload checks its identifiers: the path of an item is only
	// made for an error, and a repeat is found among the items before it
	// (MaxListItems bounds them) rather than in a map.
	for i, id := range ids {
		f := func() string { return fmt.Sprintf("%s[%d]", field, i) }
		if len(id.System) > LimitIdentifier.Max || len(id.Value) > LimitIdentifier.Max || strings.IndexByte(id.System, 0) >= 0 || strings.IndexByte(id.Value, 0) >= 0 {
			if err := LimitIdentifier.checkTexts(f()+".system", id.System, f()+".value", id.Value); err != nil {
				return err
			}
		}
		if !IsAbsoluteURI(id.System) {
			return FieldErrorf(f()+".system", "%q is not an absolute URI", id.System)
		}
		if strings.TrimSpace(id.Value) == "" || id.Value != strings.TrimSpace(id.Value) {
			return FieldErrorf(f()+".value", "must be non-empty without surrounding spaces")
		}
		if slices.Contains(ids[:i], id) {
			return FieldErrorf(f(), "%s|%s is repeated", id.System, id.Value)
		}
	}
	return nil
}

// IsAbsoluteURI reports whether s is an absolute URI that FHIR's uri type
// allows: Go's parser lets whitespace through, FHIR does not.
func IsAbsoluteURI(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.IsAbs() && !strings.ContainsFunc(s, isFHIRSpace)
}

// IsFHIRCode reports whether s is a valid FHIR code: not empty, no
// surrounding whitespace, only single spaces inside.
func IsFHIRCode(s string) bool {
	if s == "" || s[0] == ' ' || s[len(s)-1] == ' ' || strings.Contains(s, "  ") {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool { return r != ' ' && isFHIRSpace(r) })
}

// isFHIRSpace is whitespace as the \s of FHIR's patterns means it.
func isFHIRSpace(r rune) bool { return unicode.IsSpace(r) || r == '\ufeff' }

// GivenName is the patient's given names as one string, separated by a
// space: JupyterHealth Exchange's nameGiven, which holds one string.
func (p *Patient) GivenName() string { return strings.Join(p.GivenNames, " ") }

// GivenNamesOf reads given names written as one string (GivenName): one
// name between each run of spaces.
func GivenNamesOf(s string) []string { return strings.Fields(s) }

// Contact returns the first contact point of the system ("email",
// "phone"), or "".
func (p *Patient) Contact(system string) string {
	for _, t := range p.Telecom {
		if t.System == system {
			return t.Value
		}
	}
	return ""
}

func trimAll(ss []string) []string {
	var out []string
	for _, s := range ss {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
