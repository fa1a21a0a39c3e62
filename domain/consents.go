package domain

import (
	"context"
	"slices"
	"strconv"
	"time"
)

// ConsentOverview is everything about a patient's consents: what they
// consented to across studies, and per enrolled study what is pending and
// what was answered.
type ConsentOverview struct {
	Patient                     Patient
	ConsolidatedConsentedScopes []ScopeCode
	StudiesPendingConsent       []StudyConsents // studies with at least one unanswered scope
	Studies                     []StudyConsents // studies with at least one answer
}

// StudyConsents is one enrolled study with its pending scopes or answers.
type StudyConsents struct {
	StudyView
	DataSources []DataSource
	Pending     []ScopeCode
	Answers     []ScopeAnswer
}

// ScopeAnswer is a patient's answer for one scope code.
type ScopeAnswer struct {
	Code          ScopeCode
	Consented     bool
	ConsentedTime time.Time
}

// StudyScopeConsents is the input of the consent writes: answers to one
// study's requested scopes.
type StudyScopeConsents struct {
	StudyID int64
	Scopes  []ScopeConsent
}

// ScopeConsent is one answer; Consented is nil when removing it.
type ScopeConsent struct {
	System    string
	Code      string
	Consented *bool
}

// PatientConsents returns the consent overview of a patient. Readers: the
// patient, a superuser, any member of one of the patient's organizations.
func (s *Service) PatientConsents(ctx context.Context, actor *Actor, patientID int64) (_ *ConsentOverview, err error) {
	defer func() { err = s.auditConsents(ctx, actor, AuditRead, patientID, err) }()
	p, err := s.readablePatient(ctx, actor, patientID)
	if err != nil {
		return nil, err
	}
	es, err := s.store.Enrollments(ctx, EnrollmentQuery{PatientIDs: []int64{patientID}})
	if err != nil {
		return nil, err
	}
	answers, err := s.store.Consents(ctx, ConsentQuery{PatientIDs: []int64{patientID}})
	if err != nil {
		return nil, err
	}
	out := &ConsentOverview{Patient: *p, ConsolidatedConsentedScopes: []ScopeCode{}, StudiesPendingConsent: []StudyConsents{}, Studies: []StudyConsents{}}
	for _, e := range es {
		st, err := s.store.StudyByID(ctx, e.StudyID)
		if IsCode(err, CodeNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		views, err := s.studyViews(ctx, []Study{*st})
		if err != nil {
			return nil, err
		}
		sources, err := s.dataSourcesOfStudy(ctx, st.ID)
		if err != nil {
			return nil, err
		}
		requested, err := s.requestedScopes(ctx, st.ID)
		if err != nil {
			return nil, err
		}
		sc := StudyConsents{StudyView: views[0], DataSources: sources, Pending: []ScopeCode{}, Answers: []ScopeAnswer{}}
		for _, code := range requested {
			i := slices.IndexFunc(answers, func(a Consent) bool { return a.StudyID == st.ID && a.ScopeCodeID == code.ID })
			if i < 0 {
				sc.Pending = append(sc.Pending, code)
				continue
			}
			sc.Answers = append(sc.Answers, ScopeAnswer{Code: code, Consented: answers[i].Consented, ConsentedTime: answers[i].ConsentedTime})
			if answers[i].Consented && !slices.ContainsFunc(out.ConsolidatedConsentedScopes, func(c ScopeCode) bool { return c.ID == code.ID }) {
				out.ConsolidatedConsentedScopes = append(out.ConsolidatedConsentedScopes, code)
			}
		}
		if len(sc.Pending) > 0 {
			out.StudiesPendingConsent = append(out.StudiesPendingConsent, sc)
		}
		if len(sc.Answers) > 0 {
			out.Studies = append(out.Studies, sc)
		}
	}
	return out, nil
}

// checkConsentWrites validates a consent write before anything changes:
// every study exists and the patient is enrolled in it, the actor may
// answer for it, every scope is one the study requests, listed once, with
// an answer when answers are wanted. existing says whether each answer must
// already exist (update, delete: CodeNotFound) or must not (create:
// CodeDuplicate).
func (s *Service) checkConsentWrites(ctx context.Context, actor *Actor, patientID int64, in []StudyScopeConsents, wantAnswer, existing bool) ([]Consent, error) {
	p, err := s.readablePatient(ctx, actor, patientID)
	if err != nil {
		return nil, err
	}
	if len(in) == 0 {
		return nil, FieldErrorf("studyScopeConsents", "give at least one study")
	}
	if err := CheckItems("studyScopeConsents", len(in)); err != nil {
		return nil, err
	}
	now := s.Now()
	var out []Consent
	for i, sc := range in {
		field := "studyScopeConsents[" + strconv.Itoa(i) + "]"
		st, err := s.store.StudyByID(ctx, sc.StudyID)
		if err != nil {
			return nil, AsFieldError(err, field+".studyId")
		}
		if !actor.isPatient(p) && !actor.CanManageDataIn(st.OrganizationID) {
			return nil, Errorf(CodeForbidden, "you may not answer consents of study %d for patient %d", st.ID, patientID)
		}
		es, err := s.store.Enrollments(ctx, EnrollmentQuery{StudyIDs: []int64{st.ID}, PatientIDs: []int64{patientID}})
		if err != nil {
			return nil, err
		}
		if len(es) == 0 {
			return nil, FieldErrorf(field+".studyId", "patient %d is not enrolled in study %d", patientID, st.ID)
		}
		requested, err := s.requestedScopes(ctx, st.ID)
		if err != nil {
			return nil, err
		}
		if len(sc.Scopes) == 0 {
			return nil, FieldErrorf(field+".scopeConsents", "give at least one scope")
		}
		if err := CheckItems(field+".scopeConsents", len(sc.Scopes)); err != nil {
			return nil, err
		}
		answered, err := s.store.Consents(ctx, ConsentQuery{PatientIDs: []int64{patientID}, StudyIDs: []int64{st.ID}})
		if err != nil {
			return nil, err
		}
		for j, ans := range sc.Scopes {
			f := field + ".scopeConsents[" + strconv.Itoa(j) + "]"
			if err := LimitIdentifier.checkTexts(f+".codingSystem", ans.System, f+".codingCode", ans.Code); err != nil {
				return nil, err
			}
			k := slices.IndexFunc(requested, func(c ScopeCode) bool { return c.System == ans.System && c.Code == ans.Code })
			if k < 0 {
				return nil, FieldErrorf(f, "study %d does not request scope %s|%s", st.ID, ans.System, ans.Code)
			}
			if wantAnswer && ans.Consented == nil {
				return nil, FieldErrorf(f+".consented", "is required (true or false)")
			}
			c := Consent{PatientID: patientID, StudyID: st.ID, ScopeCodeID: requested[k].ID, ConsentedTime: now}
			if ans.Consented != nil {
				c.Consented = *ans.Consented
			}
			if slices.ContainsFunc(out, func(o Consent) bool { return o.StudyID == c.StudyID && o.ScopeCodeID == c.ScopeCodeID }) {
				return nil, FieldErrorf(f, "scope %s|%s of study %d is listed twice", ans.System, ans.Code, st.ID)
			}
			has := slices.ContainsFunc(answered, func(a Consent) bool { return a.ScopeCodeID == c.ScopeCodeID })
			switch {
			case existing && !has:
				return nil, Errorf(CodeNotFound, "patient %d has not answered scope %s|%s of study %d", patientID, ans.System, ans.Code, st.ID)
			case !existing && has:
				return nil, Errorf(CodeDuplicate, "patient %d has already answered scope %s|%s of study %d", patientID, ans.System, ans.Code, st.ID)
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// AnswerConsents records a patient's first answers to requested scopes:
// all of them, or none (CodeDuplicate when one was answered already).
// Writers: the patient, a superuser, a manager or member of the study's
// organization.
func (s *Service) AnswerConsents(ctx context.Context, actor *Actor, patientID int64, in []StudyScopeConsents) (err error) {
	defer func() { err = s.auditConsents(ctx, actor, AuditCreate, patientID, err) }()
	cs, err := s.checkConsentWrites(ctx, actor, patientID, in, true, false)
	if err != nil {
		return err
	}
	return s.store.CreateConsents(ctx, cs)
}

// UpdateConsents changes existing answers (CodeNotFound if one is missing):
// all of them, or none.
func (s *Service) UpdateConsents(ctx context.Context, actor *Actor, patientID int64, in []StudyScopeConsents) (err error) {
	defer func() { err = s.auditConsents(ctx, actor, AuditUpdate, patientID, err) }()
	cs, err := s.checkConsentWrites(ctx, actor, patientID, in, true, true)
	if err != nil {
		return err
	}
	return s.store.UpdateConsents(ctx, cs)
}

// WithdrawConsents removes answers, which makes the scopes pending again
// (CodeNotFound if one is missing): all of them, or none.
func (s *Service) WithdrawConsents(ctx context.Context, actor *Actor, patientID int64, in []StudyScopeConsents) (err error) {
	defer func() { err = s.auditConsents(ctx, actor, AuditDelete, patientID, err) }()
	cs, err := s.checkConsentWrites(ctx, actor, patientID, in, false, true)
	if err != nil {
		return err
	}
	return s.store.WithdrawConsents(ctx, cs)
}

// auditConsents records a read or change of a patient's consents.
func (s *Service) auditConsents(ctx context.Context, actor *Actor, action AuditAction, patientID int64, err error) error {
	kind := AuditKindRead
	if action != AuditRead {
		kind = changeKind(action)
	}
	return s.audit(ctx, actor, action, kind, err, "Consent", nil, []int64{patientID})
}
