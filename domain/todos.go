package domain

import (
	"context"
	"slices"
)

// Todos is what waits for the actor, on the console's home page.
type Todos struct {
	// PendingConsents are enrolled patients with scopes they have not
	// answered: for a practitioner, of the studies they read; for a
	// patient, their own.
	PendingConsents []PendingConsent
	// IdleDataSources are data sources of the studies the practitioner
	// reads from which no observation of the study's patients came yet.
	IdleDataSources []IdleDataSource
}

// PendingConsent is one enrolled patient with unanswered scopes of a study.
type PendingConsent struct {
	Study   StudyView
	Patient Patient
	Pending []ScopeCode
}

// IdleDataSource is a study's data source without data.
type IdleDataSource struct {
	Study      StudyView
	DataSource DataSource
}

// MaxTodoStudies bounds the studies the to-dos look at (the first by id):
// the home page of a superuser of a large installation stays cheap.
const MaxTodoStudies = 100

// Todos returns the actor's to-dos. Reads are per page of studies, not per
// patient: the studies, their scope requests, enrollments, answers and
// data source links, then the patients with something pending, and one
// lookup of data per study.
func (s *Service) Todos(ctx context.Context, actor *Actor) (*Todos, error) {
	out := &Todos{PendingConsents: []PendingConsent{}, IdleDataSources: []IdleDataSource{}}
	if actor.Patient != nil {
		overview, err := s.PatientConsents(ctx, actor, actor.Patient.ID)
		if err != nil {
			return nil, err
		}
		for _, sc := range overview.StudiesPendingConsent {
			out.PendingConsents = append(out.PendingConsents, PendingConsent{Study: sc.StudyView, Patient: *actor.Patient, Pending: sc.Pending})
		}
		return out, nil
	}
	if actor.User.Type != UserPractitioner {
		return out, nil
	}
	studies, err := s.ListStudies(ctx, actor, 0, Page{Number: 1, Size: MaxTodoStudies})
	if err != nil || len(studies.Items) == 0 {
		return out, err
	}
	ids := make([]int64, len(studies.Items))
	for i, st := range studies.Items {
		ids[i] = st.ID
	}
	reqs, err := s.store.ScopeRequests(ctx, ids)
	if err != nil {
		return nil, err
	}
	codes, err := s.store.ScopeCodesByIDs(ctx, idsOf(reqs, func(r ScopeRequest) int64 { return r.ScopeCodeID }))
	if err != nil {
		return nil, err
	}
	es, err := s.store.Enrollments(ctx, EnrollmentQuery{StudyIDs: ids})
	if err != nil {
		return nil, err
	}
	answers, err := s.store.Consents(ctx, ConsentQuery{StudyIDs: ids})
	if err != nil {
		return nil, err
	}
	answered := map[Consent]bool{}
	for _, a := range answers {
		answered[Consent{PatientID: a.PatientID, StudyID: a.StudyID, ScopeCodeID: a.ScopeCodeID}] = true
	}
	pending := map[Enrollment][]ScopeCode{}
	enrolled := map[int64][]int64{}
	for _, e := range es {
		enrolled[e.StudyID] = append(enrolled[e.StudyID], e.PatientID)
		for _, r := range reqs {
			if r.StudyID != e.StudyID || answered[Consent{PatientID: e.PatientID, StudyID: e.StudyID, ScopeCodeID: r.ScopeCodeID}] {
				continue
			}
			if i := slices.IndexFunc(codes, func(c ScopeCode) bool { return c.ID == r.ScopeCodeID }); i >= 0 {
				key := Enrollment{StudyID: e.StudyID, PatientID: e.PatientID}
				pending[key] = append(pending[key], codes[i])
			}
		}
	}
	var waiting []int64
	for e := range pending {
		waiting = append(waiting, e.PatientID)
	}
	patients, err := s.store.ListPatients(ctx, PatientQuery{IDs: uniqueIDs(waiting)}, everything)
	if err != nil {
		return nil, err
	}
	links, err := s.store.StudyDataSources(ctx, StudyDataSourceQuery{StudyIDs: ids})
	if err != nil {
		return nil, err
	}
	sources, err := s.store.DataSourcesByIDs(ctx, idsOf(links, func(l StudyDataSource) int64 { return l.DataSourceID }))
	if err != nil {
		return nil, err
	}
	for _, st := range studies.Items {
		for _, p := range patients.Items {
			if codes, ok := pending[Enrollment{StudyID: st.ID, PatientID: p.ID}]; ok {
				out.PendingConsents = append(out.PendingConsents, PendingConsent{Study: st, Patient: p, Pending: codes})
			}
		}
		var linked []int64
		for _, l := range links {
			if l.StudyID == st.ID {
				linked = append(linked, l.DataSourceID)
			}
		}
		if len(linked) == 0 {
			continue
		}
		withData := []int64{}
		if len(enrolled[st.ID]) > 0 {
			if withData, err = s.store.DataSourcesWithObservations(ctx, linked, enrolled[st.ID]); err != nil {
				return nil, err
			}
		}
		for _, d := range sources {
			if slices.Contains(linked, d.ID) && !slices.Contains(withData, d.ID) {
				out.IdleDataSources = append(out.IdleDataSources, IdleDataSource{Study: st, DataSource: d})
			}
		}
	}
	return out, nil
}
