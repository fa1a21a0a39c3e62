package domain

import (
	"context"
	"errors"
	"slices"
	"strconv"
)

// The FHIR searches of the native store. A search's joins name patients,
// organizations or studies; each value is checked against what the actor
// may read and resolved into the ids the searched type relates to, so that
// the planner gets plain id lists. A patient the actor may not read
// resolves to nothing, as one that does not exist (an empty Bundle, never a
// 403 that would tell which patient ids exist); an organization or study
// the actor may not read is CodeForbidden (they are not health
// information: the admin API answers the same).

// joinTarget is what one join names, once checked. hidden are the
// patients it named that the actor may not read: they resolve to nothing,
// and the search's audit event records the attempt (auditSearch).
type joinTarget struct {
	patients, organizations, studies []int64
	hidden                           []int64
}

// namedPatients are the patients the joins of a search named (patient=,
// subject=, patient.identifier=): those the actor may read, and those
// hidden from them. The search's audit event records both
// (Service.auditSearch): a search about a patient reads their data,
// whatever it returned (a count, an empty page, a study or device list).
type namedPatients struct {
	readable, hidden []int64
}

// add notes the patients a resolved join named.
func (n *namedPatients) add(t joinTarget) {
	n.readable = append(n.readable, t.patients...)
	n.hidden = append(n.hidden, t.hidden...)
}

// resolveJoin checks the values of a join of q against the actor's reach.
// Values that name nothing resolve to nothing, and so do patients the
// actor may not read (readablePatient) and, for a token held to its
// patient context, other patients (Actor.reachesPatient).
func (s *Service) resolveJoin(ctx context.Context, actor *Actor, q Search, j Join) (joinTarget, error) {
	var t joinTarget
	switch j.Kind {
	case JoinPatient, JoinPatientIdentifier:
		ids := j.IDs
		for _, ident := range j.Identifiers {
			found, err := s.store.PatientIDs(ctx, PatientQuery{Identifier: &ident})
			if err != nil {
				return t, err
			}
			ids = append(ids, found...)
		}
		t.patients = []int64{}
		for _, id := range ids {
			_, err := s.readablePatient(ctx, actor, id)
			if err == nil && !actor.reachesPatient(q.Interaction(), q.ResourceType(), id) {
				err = concealed(patientNotFound(id))
			}
			if errors.As(err, new(*concealedError)) {
				t.hidden = append(t.hidden, id)
			}
			if IsCode(err, CodeNotFound) {
				continue
			}
			if err != nil {
				return t, err
			}
			t.patients = append(t.patients, id)
		}
	case JoinPatientOrganization:
		t.organizations = []int64{}
		for _, id := range j.IDs {
			if _, err := s.store.OrganizationByID(ctx, id); IsCode(err, CodeNotFound) {
				continue
			} else if err != nil {
				return t, err
			}
			if !actor.canSeeOrganization(id) {
				return t, Errorf(CodeForbidden, "%s: you may not read organization %d", j.Kind, id)
			}
			t.organizations = append(t.organizations, id)
		}
	case JoinStudy, JoinPatientStudy:
		t.studies = []int64{}
		for _, id := range j.IDs {
			st, err := s.store.StudyByID(ctx, id)
			if IsCode(err, CodeNotFound) {
				continue
			}
			if err != nil {
				return t, err
			}
			ok, err := s.canReadStudy(ctx, actor, st)
			if err != nil {
				return t, err
			}
			if !ok {
				return t, Errorf(CodeForbidden, "%s: you may not read study %d", j.Kind, id)
			}
			t.studies = append(t.studies, id)
		}
	}
	return t, nil
}

// enrolled returns the patients enrolled in the studies.
func (s *Service) enrolled(ctx context.Context, studies []int64) ([]int64, error) {
	es, err := s.store.Enrollments(ctx, EnrollmentQuery{StudyIDs: nonNil(studies)})
	if err != nil {
		return nil, err
	}
	return idsOf(es, func(e Enrollment) int64 { return e.PatientID }), nil
}

func nonNil(ids []int64) []int64 {
	if ids == nil {
		return []int64{}
	}
	return ids
}

// uniqueIDs returns the distinct ids, sorted; never nil (an empty set
// matches nothing, where nil would mean no filter).
func uniqueIDs(ids []int64) []int64 {
	return nonNil(sortedUnique(ids))
}

// sortedUnique returns the distinct ids sorted, in a copy (one allocation,
// where slices.Sorted grows its result a few times), or nil for none.
func sortedUnique(ids []int64) []int64 {
	if len(ids) == 0 {
		return nil
	}
	out := slices.Clone(ids)
	slices.Sort(out)
	return slices.Compact(out)
}

// idsOf returns the distinct ids of items, sorted; never nil.
func idsOf[T any](items []T, id func(T) int64) []int64 {
	out := make([]int64, len(items))
	for i, x := range items {
		out[i] = id(x)
	}
	return uniqueIDs(out)
}

// readablePatientIDs returns the patients the actor may read: nil for a
// superuser (any).
func (s *Service) readablePatientIDs(ctx context.Context, actor *Actor) ([]int64, error) {
	if actor.IsSuperuser() {
		return nil, nil
	}
	return s.store.PatientIDs(ctx, actor.readablePatients())
}

// patientScope resolves joins into the patients a search of observations
// or patients may return, and for study joins, the native codes each
// patient consented to share with those studies. named are the patients
// the joins named (namedPatients).
func (s *Service) patientScope(ctx context.Context, actor *Actor, q Search) (scope Scope, named namedPatients, err error) {
	ids, err := s.readablePatientIDs(ctx, actor)
	if err != nil {
		return Scope{}, named, err
	}
	for _, j := range q.Joins() {
		t, err := s.resolveJoin(ctx, actor, q, j)
		if err != nil {
			return Scope{}, named, err
		}
		named.add(t)
		var these []int64
		switch {
		case t.patients != nil:
			these = t.patients
		case t.organizations != nil:
			if these, err = s.store.PatientIDs(ctx, PatientQuery{OrganizationIDs: t.organizations}); err != nil {
				return Scope{}, named, err
			}
		case t.studies != nil:
			if these, err = s.enrolled(ctx, t.studies); err != nil {
				return Scope{}, named, err
			}
			if scope.Codes == nil {
				scope.Codes = map[int64][]string{}
			}
			consented, err := s.consentedCodesOf(ctx, these, t.studies)
			if err != nil {
				return Scope{}, named, err
			}
			for _, p := range these {
				codes := consented[p]
				if prev, ok := scope.Codes[p]; ok { // several study joins: all must allow
					codes = intersectStrings(prev, codes)
				}
				scope.Codes[p] = codes
			}
		}
		ids = intersect(ids, these)
	}
	scope.PatientIDs = ids
	return scope, named, nil
}

// ReadFHIR reads a native record or projection for the FHIR API. The
// token must allow reads of the type (CodeForbidden before anything is
// read, whether the record exists or not); read applies the permission
// model; and when the token's scopes narrow reads (a patient context,
// search constraints) the record must be one they reach. That is decided
// by the search for its id, so that reads and searches always agree. A
// record out of the token's reach, and one read does not find (which
// includes patient data the actor may not read), are answered alike,
// "<type>/<id> does not exist", as the imported store answers
// (ResourceByID): a token must not learn which ids exist beyond its reach.
func ReadFHIR[T any](ctx context.Context, s *Service, actor *Actor, resourceType string, id int64, read func(context.Context, *Actor, int64) (*T, error)) (*T, error) {
	if err := actor.AllowFHIR(InteractionRead, resourceType); err != nil {
		return nil, err
	}
	ref := resourceType + "/" + strconv.FormatInt(id, 10)
	missing := Errorf(CodeNotFound, "%s does not exist", ref)
	r, err := read(ctx, actor, id)
	if IsCode(err, CodeNotFound) {
		return nil, missing
	}
	if err != nil {
		return nil, err
	}
	if err := s.withinReach(ctx, actor, resourceType, strconv.FormatInt(id, 10)); err != nil {
		// read recorded the record's read; the answer is this refusal.
		s.audit(ctx, actor, AuditRead, AuditKindRead, err, resourceType, []string{ref}, nil)
		if IsCode(err, CodeForbidden) {
			return nil, missing
		}
		return nil, err
	}
	return r, nil
}

// withinReach decides whether the actor's token reaches resourceType/id
// for a read: at once when its scopes do not narrow reads of the type,
// else by running the search for that id under them. CodeForbidden when
// the record is out of reach.
func (s *Service) withinReach(ctx context.Context, actor *Actor, resourceType, id string) error {
	if _, narrowed, err := actor.reach(InteractionRead, resourceType); err != nil || !narrowed {
		return err
	}
	if s.searches == nil {
		return errors.New("a read under narrowing scopes needs the service's IDSearches")
	}
	q, err := s.searches.ByID(resourceType, id)
	if err != nil {
		return err
	}
	search := nativeFound[resourceType]
	if q.Store().Kind == StoreImported {
		search = found((*Service).SearchResources)
	}
	reached := false
	if search != nil {
		if reached, err = search(s, ctx, actor, q); err != nil {
			return err
		}
	}
	if !reached {
		return Errorf(CodeForbidden, "this token's scopes do not reach %s/%s", resourceType, id)
	}
	return nil
}

// foundFunc reports whether a search finds anything.
type foundFunc func(s *Service, ctx context.Context, actor *Actor, q Search) (bool, error)

// found adapts a search of the service to foundFunc.
func found[T any](search func(*Service, context.Context, *Actor, Search) (SearchResult[T], error)) foundFunc {
	return func(s *Service, ctx context.Context, actor *Actor, q Search) (bool, error) {
		res, err := search(s, ctx, actor, q)
		return len(res.Items) > 0, err
	}
}

// nativeFound are the searches of the native store by FHIR type.
var nativeFound = map[string]foundFunc{
	"Observation":  found((*Service).SearchObservations),
	"Patient":      found((*Service).SearchPatients),
	"Practitioner": found((*Service).SearchPractitioners),
	"Organization": found((*Service).SearchOrganizations),
	"Group":        found((*Service).SearchGroups),
	"Device":       found((*Service).SearchDevices),
	"AuditEvent":   found((*Service).SearchAuditEvents),
}

// ofPatient is what a patient/ scope reaches of observations and imported
// resources: the patient's.
func ofPatient(p int64) (Reach, error) { return Reach{PatientIDs: []int64{p}}, nil }

// reachOf resolves what the actor's token reaches of q's type, one
// alternative per scope that allows q's interaction: nil when the token
// does not narrow it. patientReach says what a patient/ scope reaches of
// the type for the token's patient context. CodeForbidden when no scope
// allows the interaction at all.
func (s *Service) reachOf(actor *Actor, q Search, patientReach func(patient int64) (Reach, error)) ([]Reach, error) {
	terms, narrowed, err := actor.reach(q.Interaction(), q.ResourceType())
	if err != nil || !narrowed {
		return nil, err
	}
	out := make([]Reach, 0, len(terms))
	for _, rs := range terms {
		r := Reach{Constraints: rs.Constraints}
		if rs.Patient {
			// Without a patient context, patient/ scopes reach nothing.
			pr := Reach{PatientIDs: []int64{}, IDs: []int64{}}
			if p := actor.access.patient; p != 0 {
				if pr, err = patientReach(p); err != nil {
					return nil, err
				}
			}
			r.PatientIDs, r.IDs = pr.PatientIDs, pr.IDs
		}
		out = append(out, r)
	}
	return out, nil
}

// intersectStrings returns the members of a that b has too, in a's order.
func intersectStrings(a, b []string) []string {
	in := make(map[string]bool, len(b))
	for _, x := range b {
		in[x] = true
	}
	out := []string{}
	for _, x := range a {
		if in[x] {
			out = append(out, x)
		}
	}
	return out
}

// SearchObservations runs a search of native observations within what the
// actor may read: their own for a patient, their organizations' patients'
// for a practitioner; a study join limits each patient to the scopes they
// consented to share with the study.
func (s *Service) SearchObservations(ctx context.Context, actor *Actor, q Search) (res SearchResult[Observation], err error) {
	var named namedPatients
	defer func() {
		err = s.auditSearch(ctx, actor, q, err, idsOf(res.Items, func(o Observation) int64 { return o.PatientID }), named)
	}()
	plan, named, err := s.observationPlan(ctx, actor, q, nil)
	if err != nil {
		return SearchResult[Observation]{}, err
	}
	return s.store.SearchObservations(ctx, plan)
}

// observationPlan plans SearchObservations (and an export's part of
// observations: the same rule), narrowed to patients when they are set.
// named are the patients the search named (namedPatients).
func (s *Service) observationPlan(ctx context.Context, actor *Actor, q Search, patients []int64) (plan *SearchPlan, named namedPatients, err error) {
	reach, err := s.reachOf(actor, q, ofPatient)
	if err != nil {
		return nil, named, err
	}
	scope, named, err := s.patientScope(ctx, actor, q)
	if err != nil {
		return nil, named, err
	}
	scope.PatientIDs = intersect(scope.PatientIDs, patients)
	plan, err = q.Plan(scope.within(reach))
	return plan, named, err
}

// SearchPatients runs a search of the Patient projection.
func (s *Service) SearchPatients(ctx context.Context, actor *Actor, q Search) (res SearchResult[Patient], err error) {
	var named namedPatients
	defer func() {
		err = s.auditSearch(ctx, actor, q, err, idsOf(res.Items, func(p Patient) int64 { return p.ID }), named)
	}()
	plan, named, err := s.patientPlan(ctx, actor, q, nil)
	if err != nil {
		return SearchResult[Patient]{}, err
	}
	return s.store.SearchPatients(ctx, plan)
}

// patientPlan plans SearchPatients, narrowed to patients when set (see
// observationPlan).
func (s *Service) patientPlan(ctx context.Context, actor *Actor, q Search, patients []int64) (plan *SearchPlan, named namedPatients, err error) {
	reach, err := s.reachOf(actor, q, func(p int64) (Reach, error) { return Reach{IDs: []int64{p}}, nil })
	if err != nil {
		return nil, named, err
	}
	scope, named, err := s.patientScope(ctx, actor, q)
	if err != nil {
		return nil, named, err
	}
	plan, err = q.Plan(Scope{IDs: intersect(scope.PatientIDs, patients)}.within(reach))
	return plan, named, err
}

// relatedScope resolves the joins of a projection other than Patient: each
// join names patients, organizations or studies, which relate maps to the
// type's ids; the results of several joins are intersected, and with
// readable ids (nil: any). The token's patient context reaches what relate
// maps the patient to.
func (s *Service) relatedScope(ctx context.Context, actor *Actor, q Search, readable []int64, named *namedPatients,
	relate func(joinTarget) ([]int64, error)) (Scope, error) {
	reach, err := s.reachOf(actor, q, func(p int64) (Reach, error) {
		ids, err := relate(joinTarget{patients: []int64{p}})
		return Reach{IDs: ids}, err
	})
	if err != nil {
		return Scope{}, err
	}
	ids := readable
	for _, j := range q.Joins() {
		t, err := s.resolveJoin(ctx, actor, q, j)
		if err != nil {
			return Scope{}, err
		}
		if named != nil {
			named.add(t)
		}
		these, err := relate(t)
		if err != nil {
			return Scope{}, err
		}
		ids = intersect(ids, these)
	}
	return Scope{IDs: ids}.within(reach), nil
}

// auditRelated records a search of a projection other than Patient
// (Practitioner, Organization, Group, Device) when its joins named
// patients: it read what relates to them (their studies, devices,
// practitioners, organizations), which the patients' trail shows. A
// search that names no patient is about no one's data: not recorded.
func (s *Service) auditRelated(ctx context.Context, actor *Actor, q Search, err error, named namedPatients) error {
	if len(named.readable)+len(named.hidden) == 0 && !slices.ContainsFunc(q.Joins(), func(j Join) bool {
		return j.Kind == JoinPatient || j.Kind == JoinPatientIdentifier
	}) {
		return err
	}
	return s.auditSearch(ctx, actor, q, err, nil, named)
}

// organizationsOf returns the organizations a join target relates to: the
// patients' organizations, the organizations themselves, the studies'
// organizations.
func (s *Service) organizationsOf(ctx context.Context, t joinTarget) ([]int64, error) {
	out := slices.Clone(t.organizations)
	for _, id := range t.patients {
		p, err := s.store.PatientByID(ctx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, p.OrganizationIDs...)
	}
	for _, id := range t.studies {
		st, err := s.store.StudyByID(ctx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, st.OrganizationID)
	}
	return uniqueIDs(out), nil
}

// studiesOf returns the studies a join target relates to: the patients'
// studies (enrolled), the organizations' studies, the studies themselves.
func (s *Service) studiesOf(ctx context.Context, t joinTarget) ([]int64, error) {
	out := slices.Clone(nonNil(t.studies))
	if len(t.patients) > 0 {
		es, err := s.store.Enrollments(ctx, EnrollmentQuery{PatientIDs: t.patients})
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			out = append(out, e.StudyID)
		}
	}
	if len(t.organizations) > 0 {
		l, err := s.store.ListStudies(ctx, StudyQuery{OrganizationIDs: t.organizations}, everything)
		if err != nil {
			return nil, err
		}
		for _, st := range l.Items {
			out = append(out, st.ID)
		}
	}
	return uniqueIDs(out), nil
}

// membersOf returns the practitioners who are members of the organizations.
func (s *Service) membersOf(ctx context.Context, orgs []int64) ([]int64, error) {
	ms, err := s.store.MembershipsOfOrganizations(ctx, nonNil(orgs), everything)
	if err != nil {
		return nil, err
	}
	return idsOf(ms.Items, func(m Membership) int64 { return m.UserID }), nil
}

// SearchPractitioners runs a search of the Practitioner projection: the
// practitioners of the study's organization, of the patient's
// organizations, of the organization; within the members of the actor's
// organizations (a patient's: of their organizations).
func (s *Service) SearchPractitioners(ctx context.Context, actor *Actor, q Search) (_ SearchResult[User], err error) {
	var named namedPatients
	defer func() { err = s.auditRelated(ctx, actor, q, err, named) }()
	plan, err := s.practitionerPlan(ctx, actor, q, &named)
	if err != nil {
		return SearchResult[User]{}, err
	}
	return s.store.SearchUsers(ctx, plan)
}

// practitionerPlan plans SearchPractitioners.
func (s *Service) practitionerPlan(ctx context.Context, actor *Actor, q Search, named *namedPatients) (*SearchPlan, error) {
	var readable []int64
	if !actor.IsSuperuser() {
		var err error
		if readable, err = s.membersOf(ctx, actor.readableOrganizationIDs()); err != nil {
			return nil, err
		}
		if actor.User.Type == UserPractitioner {
			readable = append(readable, actor.User.ID)
		}
	}
	scope, err := s.relatedScope(ctx, actor, q, readable, named, func(t joinTarget) ([]int64, error) {
		orgs, err := s.organizationsOf(ctx, t)
		if err != nil {
			return nil, err
		}
		return s.membersOf(ctx, orgs)
	})
	if err != nil {
		return nil, err
	}
	return q.Plan(scope)
}

// PractitionerProjection returns a practitioner as the Practitioner
// projection shows them, to whom SearchPractitioners finds them: a
// superuser, the practitioner themselves, and whoever reads one of their
// organizations (a patient: belongs to it). The admin API's
// PractitionerByID shows practitioners to colleagues only.
func (s *Service) PractitionerProjection(ctx context.Context, actor *Actor, id int64) (*User, error) {
	u, err := s.store.UserByID(ctx, id)
	if err == nil && u.Type != UserPractitioner {
		err = Errorf(CodeNotFound, "Practitioner/%d does not exist", id)
	}
	if err != nil {
		return nil, err
	}
	if actor.IsSuperuser() || actor.User.ID == id {
		return u, nil
	}
	ms, err := s.store.MembershipsOfUsers(ctx, []int64{id})
	if err != nil {
		return nil, err
	}
	readable := actor.readableOrganizationIDs()
	if slices.ContainsFunc(ms, func(m Membership) bool { return slices.Contains(readable, m.OrganizationID) }) {
		return u, nil
	}
	return nil, Errorf(CodeForbidden, "you may not read Practitioner/%d", id)
}

// SearchOrganizations runs a search of the Organization projection: the
// study's organization, the patient's organizations, the organization
// itself; within the organizations the actor may see.
func (s *Service) SearchOrganizations(ctx context.Context, actor *Actor, q Search) (_ SearchResult[Organization], err error) {
	var named namedPatients
	defer func() { err = s.auditRelated(ctx, actor, q, err, named) }()
	plan, err := s.organizationPlan(ctx, actor, q, &named)
	if err != nil {
		return SearchResult[Organization]{}, err
	}
	return s.store.SearchOrganizations(ctx, plan)
}

// organizationPlan plans SearchOrganizations.
func (s *Service) organizationPlan(ctx context.Context, actor *Actor, q Search, named *namedPatients) (*SearchPlan, error) {
	scope, err := s.relatedScope(ctx, actor, q, actor.readableOrganizationIDs(), named, func(t joinTarget) ([]int64, error) {
		return s.organizationsOf(ctx, t)
	})
	if err != nil {
		return nil, err
	}
	return q.Plan(scope)
}

// GroupView is a study as FHIR shows it: with its organization and the
// number of enrolled patients.
type GroupView struct {
	StudyView
	Members int
}

// readableStudyIDs returns the studies the actor may read (nil: any).
func (s *Service) readableStudyIDs(ctx context.Context, actor *Actor) ([]int64, error) {
	switch {
	case actor.IsSuperuser():
		return nil, nil
	case actor.Patient != nil:
		return s.studiesOf(ctx, joinTarget{patients: []int64{actor.Patient.ID}})
	case actor.User.Type == UserPatient:
		return []int64{}, nil
	default:
		return s.studiesOf(ctx, joinTarget{organizations: nonNil(actor.OrganizationIDs())})
	}
}

// SearchGroups runs a search of the Group projection: the study, the
// patient's studies, the organization's studies; within the studies the
// actor may read.
func (s *Service) SearchGroups(ctx context.Context, actor *Actor, q Search) (_ SearchResult[GroupView], err error) {
	var named namedPatients
	defer func() { err = s.auditRelated(ctx, actor, q, err, named) }()
	plan, err := s.groupPlan(ctx, actor, q, &named)
	if err != nil {
		return SearchResult[GroupView]{}, err
	}
	res, err := s.store.SearchStudies(ctx, plan)
	if err != nil {
		return SearchResult[GroupView]{}, err
	}
	groups, err := s.groupViews(ctx, res.Items)
	return SearchResult[GroupView]{Items: groups, More: res.More, Total: res.Total}, err
}

// groupPlan plans SearchGroups.
func (s *Service) groupPlan(ctx context.Context, actor *Actor, q Search, named *namedPatients) (*SearchPlan, error) {
	readable, err := s.readableStudyIDs(ctx, actor)
	if err != nil {
		return nil, err
	}
	scope, err := s.relatedScope(ctx, actor, q, readable, named, func(t joinTarget) ([]int64, error) {
		return s.studiesOf(ctx, t)
	})
	if err != nil {
		return nil, err
	}
	return q.Plan(scope)
}

func (s *Service) groupViews(ctx context.Context, studies []Study) ([]GroupView, error) {
	views, err := s.studyViews(ctx, studies)
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(views))
	for i, v := range views {
		ids[i] = v.ID
	}
	es, err := s.store.Enrollments(ctx, EnrollmentQuery{StudyIDs: ids}) // one read for the page
	if err != nil {
		return nil, err
	}
	members := map[int64]int{}
	for _, e := range es {
		members[e.StudyID]++
	}
	out := make([]GroupView, len(views))
	for i, v := range views {
		out[i] = GroupView{StudyView: v, Members: members[v.ID]}
	}
	return out, nil
}

// GroupByID returns a study the actor may read, as FHIR shows it.
func (s *Service) GroupByID(ctx context.Context, actor *Actor, id int64) (*GroupView, error) {
	st, err := s.readableStudy(ctx, actor, id)
	if err != nil {
		return nil, err
	}
	views, err := s.groupViews(ctx, []Study{*st})
	if err != nil {
		return nil, err
	}
	return &views[0], nil
}

// SearchDevices runs a search of the Device projection: the study's data
// sources, those of the patient's studies, those of the organization's
// studies. The catalogue of data sources is readable by all.
func (s *Service) SearchDevices(ctx context.Context, actor *Actor, q Search) (_ SearchResult[DataSource], err error) {
	var named namedPatients
	defer func() { err = s.auditRelated(ctx, actor, q, err, named) }()
	plan, err := s.devicePlan(ctx, actor, q, &named)
	if err != nil {
		return SearchResult[DataSource]{}, err
	}
	return s.store.SearchDataSources(ctx, plan)
}

// devicePlan plans SearchDevices.
func (s *Service) devicePlan(ctx context.Context, actor *Actor, q Search, named *namedPatients) (*SearchPlan, error) {
	scope, err := s.relatedScope(ctx, actor, q, nil, named, func(t joinTarget) ([]int64, error) {
		studies, err := s.studiesOf(ctx, t)
		if err != nil {
			return nil, err
		}
		links, err := s.store.StudyDataSources(ctx, StudyDataSourceQuery{StudyIDs: nonNil(studies)})
		if err != nil {
			return nil, err
		}
		return idsOf(links, func(l StudyDataSource) int64 { return l.DataSourceID }), nil
	})
	if err != nil {
		return nil, err
	}
	return q.Plan(scope)
}
