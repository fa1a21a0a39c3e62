package console

import (
	"fmt"
	"net/http"
	"slices"

	"exchange/domain"
)

type studiesPage struct {
	Studies       []domain.StudyView
	Pager         pager
	Organizations []domain.Organization // where the user may create one
}

func (c *Console) studies(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.renderStudies(w, r, s, nil)
}

// renderStudies renders the list of studies and the form that creates
// one, refused or afresh.
func (c *Console) renderStudies(w http.ResponseWriter, r *http.Request, s *session, form *formState) error {
	ctx := r.Context()
	p := listPage(r)
	l, err := c.Service.ListStudies(ctx, s.actor, 0, p)
	if err != nil {
		return err
	}
	if err := domain.CheckPage(p, l.Total); err != nil {
		return err
	}
	page := studiesPage{Studies: l.Items, Pager: pagerOf(r, p, l.Total)}
	if page.Organizations, err = c.dataOrganizations(ctx, s.actor); err != nil {
		return err
	}
	c.renderForm(w, r, s, http.StatusOK, "studies.html", "Studies", "studies", page, form)
	return nil
}

// The forms of studies: creating one (a name taken in its organization
// is about the name), and editing one.
var (
	studyFields   = map[string]string{"name": "name", "description": "description", "organizationId": "organization", "organization": "organization"}
	newStudyForm  = formSpec{name: "new-study", fields: studyFields, unnamed: map[domain.Code]string{domain.CodeDuplicate: "name"}}
	editStudyForm = formSpec{name: "edit-study", fields: studyFields, unnamed: map[domain.Code]string{domain.CodeDuplicate: "name"}}
)

func (c *Console) createStudy(w http.ResponseWriter, r *http.Request, s *session) error {
	st, err := c.newStudy(r, s)
	if err != nil {
		return newStudyForm.refused(r, err, func(form *formState) error { return c.renderStudies(w, r, s, form) })
	}
	return seeOther(w, r, studyPath(st.ID), "created")
}

// newStudy creates the study the form describes.
func (c *Console) newStudy(r *http.Request, s *session) (*domain.Study, error) {
	org, err := formID(r, "organization")
	if err != nil {
		return nil, err
	}
	return c.Service.CreateStudy(r.Context(), s.actor, domain.NewStudy{OrganizationID: org,
		Name: r.PostFormValue("name"), Description: r.PostFormValue("description")})
}

func studyPath(id int64) string { return fmt.Sprintf("%sstudies/%d/", Prefix, id) }

type studyPage struct {
	Study       *domain.StudyView
	Manage      bool // the user may change the study
	Scopes      []domain.ScopeCode
	OtherScopes []domain.ScopeCode // scope codes it could request
	Sources     []domain.DataSource
	OtherSource []domain.DataSourceView
	Enrollment  *domain.StudyEnrollment
	Pager       pager
	Candidates  []domain.Patient // patients of the organization not enrolled
	// Unsaved is the edit the user sent that was not saved because the
	// study changed since the form was made: the page shows it beside the
	// current study, whose values the form holds, so the user makes the
	// change again on what is stored now.
	Unsaved *unsavedStudy
}

// unsavedStudy is an edit of a study that was not saved.
type unsavedStudy struct {
	Name, Description string
	Error             errorPage // why it was not saved
}

func (c *Console) study(w http.ResponseWriter, r *http.Request, s *session) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	return c.renderStudy(w, r, s, id, http.StatusOK, nil, nil)
}

// renderStudy renders a study's page, with an edit that was not saved
// for a change made meanwhile, or a form that was refused.
func (c *Console) renderStudy(w http.ResponseWriter, r *http.Request, s *session, id int64, status int, unsaved *unsavedStudy, form *formState) error {
	ctx := r.Context()
	st, err := c.Service.StudyByID(ctx, s.actor, id)
	if err != nil {
		return err
	}
	page := studyPage{Study: st, Manage: s.actor.CanManageDataIn(st.OrganizationID), Unsaved: unsaved}
	if page.Scopes, err = c.Service.StudyScopeRequests(ctx, s.actor, id); err != nil {
		return err
	}
	if page.Sources, err = c.Service.StudyDataSources(ctx, s.actor, id); err != nil {
		return err
	}
	if s.actor.CanReadOrganization(st.OrganizationID) {
		p := listPage(r)
		if page.Enrollment, err = c.Service.StudyEnrollment(ctx, s.actor, id, p); err != nil {
			return err
		}
		if err := domain.CheckPage(p, page.Enrollment.Patients.Total); err != nil {
			return err
		}
		page.Pager = pagerOf(r, p, page.Enrollment.Patients.Total)
	}
	if page.Manage {
		codes, err := c.Service.ListScopeCodes(ctx, domain.Page{Number: 1, Size: domain.MaxPageSize})
		if err != nil {
			return err
		}
		for _, sc := range codes.Items {
			if !slices.ContainsFunc(page.Scopes, func(x domain.ScopeCode) bool { return x.ID == sc.ID }) {
				page.OtherScopes = append(page.OtherScopes, sc)
			}
		}
		sources, err := c.Service.ListDataSources(ctx, domain.Page{Number: 1, Size: domain.MaxPageSize})
		if err != nil {
			return err
		}
		for _, d := range sources.Items {
			if !slices.ContainsFunc(page.Sources, func(x domain.DataSource) bool { return x.ID == d.ID }) {
				page.OtherSource = append(page.OtherSource, d)
			}
		}
		patients, err := c.Service.ListPatients(ctx, s.actor, domain.PatientFilter{OrganizationID: st.OrganizationID}, domain.Page{Number: 1, Size: domain.MaxPageSize})
		if err != nil {
			return err
		}
		enrolled, err := c.Service.ListPatients(ctx, s.actor, domain.PatientFilter{StudyID: id}, domain.Page{Number: 1, Size: domain.MaxPageSize})
		if err != nil {
			return err
		}
		for _, p := range patients.Items {
			if !slices.ContainsFunc(enrolled.Items, func(x domain.Patient) bool { return x.ID == p.ID }) {
				page.Candidates = append(page.Candidates, p)
			}
		}
	}
	c.renderForm(w, r, s, status, "study.html", st.Name, "studies", page, form)
	return nil
}

// updateStudy saves the edit form, made from the version of the study it
// names: if the study changed since, nothing is saved, and the page shows
// the current study with the edit beside it (409).
func (c *Console) updateStudy(w http.ResponseWriter, r *http.Request, s *session) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	from, err := formVersion(r)
	if err != nil {
		return err
	}
	name, description := r.PostFormValue("name"), r.PostFormValue("description")
	_, err = c.Service.UpdateStudy(r.Context(), s.actor, id, domain.StudyPatch{Name: &name, Description: &description, Unchanged: &from})
	if domain.IsCode(err, domain.CodeConflict) {
		// Changed meanwhile: the current study in the form, and what was
		// sent beside it, never written over text the user did not see.
		unsaved := &unsavedStudy{Name: name, Description: description, Error: errorOf(err)}
		return c.renderStudy(w, r, s, id, unsaved.Error.Status, unsaved, nil)
	}
	if err != nil {
		return editStudyForm.refused(r, err, func(form *formState) error { return c.renderStudy(w, r, s, id, http.StatusOK, nil, form) })
	}
	return seeOther(w, r, studyPath(id), "saved")
}

func (c *Console) addScope(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.studyChange(w, r, s, addScopeForm, "added", fromForm("scope"), func(study, scope int64) error {
		_, err := c.Service.AddScopeRequest(r.Context(), s.actor, study, domain.ScopeRef{ID: scope})
		return err
	})
}

func (c *Console) removeScope(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.studyChange(w, r, s, removeFromStudyForm, "removed", fromPath("scope"), func(study, scope int64) error {
		return c.Service.RemoveScopeRequest(r.Context(), s.actor, study, scope)
	})
}

func (c *Console) addStudySource(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.studyChange(w, r, s, addSourceForm, "added", fromForm("source"), func(study, source int64) error {
		_, err := c.Service.AddStudyDataSource(r.Context(), s.actor, study, source)
		return err
	})
}

func (c *Console) removeStudySource(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.studyChange(w, r, s, removeFromStudyForm, "removed", fromPath("source"), func(study, source int64) error {
		return c.Service.RemoveStudyDataSource(r.Context(), s.actor, study, source)
	})
}

func (c *Console) enroll(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.studyChange(w, r, s, enrollForm, "enrolled", fromForm("patient"), func(study, patient int64) error {
		return c.Service.EnrollPatients(r.Context(), s.actor, study, []int64{patient})
	})
}

func (c *Console) unenroll(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.studyChange(w, r, s, unenrollForm, "unenrolled", fromForm("patient"), func(study, patient int64) error {
		return c.Service.UnenrollPatients(r.Context(), s.actor, study, []int64{patient})
	})
}

// fromForm and fromPath read the id a study change acts on.
func fromForm(field string) func(*http.Request) (int64, error) {
	return func(r *http.Request) (int64, error) { return formID(r, field) }
}

func fromPath(name string) func(*http.Request) (int64, error) {
	return func(r *http.Request) (int64, error) { return pathID(r, name) }
}

// The forms of a study's page that change what it requests, collects
// from and enrolls: each a choice, whose refusal shows beside it.
var (
	addScopeForm        = formSpec{name: "add-scope", fields: map[string]string{"scope": "scope", "scopeCodeId": "scope"}, unnamed: map[domain.Code]string{domain.CodeDuplicate: "scope", domain.CodeNotFound: "scope"}}
	addSourceForm       = formSpec{name: "add-source", fields: map[string]string{"source": "source", "dataSourceId": "source"}, unnamed: map[domain.Code]string{domain.CodeDuplicate: "source", domain.CodeNotFound: "source"}}
	enrollForm          = formSpec{name: "enroll", fields: map[string]string{"patient": "patient", "patientIds": "patient"}, unnamed: map[domain.Code]string{domain.CodeDuplicate: "patient", domain.CodeNotFound: "patient"}}
	unenrollForm        = formSpec{name: "unenroll"}
	removeFromStudyForm = formSpec{name: "remove-from-study"}
)

// studyChange applies a change to the path's study with the id a form
// field or the path names, then returns to the study's page; a refused
// change shows that page with the reason beside its form.
func (c *Console) studyChange(w http.ResponseWriter, r *http.Request, s *session, spec formSpec, done string, target func(*http.Request) (int64, error), change func(study, id int64) error) error {
	study, err := pathID(r, "id")
	if err != nil {
		return err
	}
	id, err := target(r)
	if err == nil {
		err = change(study, id)
	}
	if err != nil {
		return spec.refused(r, err, func(form *formState) error { return c.renderStudy(w, r, s, study, http.StatusOK, nil, form) })
	}
	return seeOther(w, r, studyPath(study), done)
}
