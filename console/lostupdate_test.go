package console_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/repo"
)

// openStudyForm opens the fixture's study page as c and returns its path
// and its edit form's fields as rendered.
func openStudyForm(t *testing.T, f *fixture, c *caller) (string, url.Values) {
	t.Helper()
	path := fmt.Sprintf("/console/studies/%d/", f.study.ID)
	resp, page := c.b.Do("GET", f.env.URL+path, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", path, resp.StatusCode)
	}
	return path, editForm(t, page)
}

// editForm reads the fields of a study page's edit form as a browser
// would send them (the version only if the form has one: a form without
// one is refused).
func editForm(t *testing.T, page string) url.Values {
	t.Helper()
	form := url.Values{}
	for field, re := range map[string]*regexp.Regexp{
		"name":        regexp.MustCompile(`id="edit-name" name="name" value="([^"]*)"`),
		"description": regexp.MustCompile(`(?s)id="edit-description" name="description" rows="2"[^>]*>(.*?)</textarea>`),
		"version":     regexp.MustCompile(`name="version" value="([^"]*)"`),
	} {
		m := re.FindStringSubmatch(page)
		if m == nil && field == "version" {
			continue
		}
		if m == nil {
			t.Fatalf("the study page has no %s field:\n%s", field, page)
		}
		form.Set(field, html.UnescapeString(m[1]))
	}
	return form
}

// TestStudyFormDoesNotOverwriteAnotherEdit: a manager opens the study's
// page; another changes the description; the first saves the form as it
// was shown. Nothing is written (before, the old description came back),
// and the answer is a 409 that says why, shows what the user sent beside
// a form of the current study. A version taken from another study does not
// pass the check, nor does a form without one.
func TestStudyFormDoesNotOverwriteAnotherEdit(t *testing.T) {
	f := newFixture(t)
	ctx, sys := context.Background(), domain.SystemActor()
	m := f.callers["manager"]
	path, form := openStudyForm(t, f, m)
	theirs := "Changed by another manager"
	if _, err := f.env.Service.UpdateStudy(ctx, sys, f.study.ID, domain.StudyPatch{Description: &theirs}); err != nil {
		t.Fatal(err)
	}
	form.Set("name", "Renamed by me")
	resp, body := m.post(f.env, path, form)
	if resp.StatusCode != http.StatusConflict {
		t.Errorf("POST %s from the page shown before the change: %d, want 409\n%.600s", path, resp.StatusCode, body)
	}
	for _, want := range []string{"changed by someone else since you opened it", "<dd>Renamed by me</dd>"} {
		if !strings.Contains(body, want) {
			t.Errorf("the answer lacks %q:\n%s", want, body)
		}
	}
	// Those who may not change the study learn nothing from a stale
	// version: the permission is checked first (403), no 409, no study.
	for _, name := range []string{"viewer", "outsider", "patient"} {
		if resp, body := f.callers[name].post(f.env, path, form); resp.StatusCode != http.StatusForbidden || strings.Contains(body, theirs) {
			t.Errorf("POST %s from the stale page as %s: %d, want 403 without the study\n%.600s", path, name, resp.StatusCode, body)
		}
	}
	st, err := f.env.Service.StudyByID(ctx, sys, f.study.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Description != theirs || st.Name != f.study.Name {
		t.Errorf("the study after the refused post: %q, %q; want %q, %q", st.Name, st.Description, f.study.Name, theirs)
	}

	other, err := f.env.Service.CreateStudy(ctx, sys, domain.NewStudy{OrganizationID: f.org.ID, Name: "Other"})
	if err != nil {
		t.Fatal(err)
	}
	if other.LastUpdated.Equal(st.LastUpdated) {
		t.Fatal("the two studies have the same version: the forged version would be the right one")
	}
	form.Set("version", other.LastUpdated.UTC().Format(time.RFC3339Nano))
	if resp, _ := m.post(f.env, path, form); resp.StatusCode != http.StatusConflict {
		t.Errorf("POST %s with the version of another study: %d, want 409", path, resp.StatusCode)
	}
	form.Del("version")
	if resp, _ := m.post(f.env, path, form); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("POST %s without a version: %d, want 400", path, resp.StatusCode)
	}
	if st, err := f.env.Service.StudyByID(ctx, sys, f.study.ID); err != nil || st.Name != f.study.Name || st.Description != theirs {
		t.Errorf("the study after the refused posts: %+v, %v", st, err)
	}

	// The answer's form holds the current study and version: the change
	// made again there is saved, with the other manager's description.
	form = editForm(t, body)
	if form.Get("description") != theirs {
		t.Errorf("the form of the 409 answer holds the description %q, want the current %q", form.Get("description"), theirs)
	}
	form.Set("name", "Renamed by me")
	if resp, body := m.post(f.env, path, form); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("POST %s from the 409 page: %d, want 303\n%.600s", path, resp.StatusCode, body)
	}
	if st, err := f.env.Service.StudyByID(ctx, sys, f.study.ID); err != nil || st.Name != "Renamed by me" || st.Description != theirs {
		t.Errorf("the study after the post from the current version: %+v, %v", st, err)
	}
}

// A study edit refused for what it holds (an empty name) answers the
// study page with the reason and what the user typed, not a bare error
// page that loses it; nothing is saved.
func TestStudyFormRefusedKeepsWhatWasTyped(t *testing.T) {
	f := newFixture(t)
	m := f.callers["manager"]
	path, form := openStudyForm(t, f, m)
	typed := "A description typed at length"
	form.Set("name", " ")
	form.Set("description", typed)
	resp, body := m.post(f.env, path, form)
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("POST %s with an empty name: %d, want 400\n%.600s", path, resp.StatusCode, body)
	}
	// The form holds what was typed, the reason beside the name.
	if sent := editForm(t, body); sent.Get("name") != " " || sent.Get("description") != typed || sent.Get("version") == "" {
		t.Errorf("the form after the refusal holds %v, want what was typed", sent)
	}
	if !besideField(body, "edit-name") {
		t.Errorf("the reason is not beside the name:\n%s", body)
	}
	if st, err := f.env.Service.StudyByID(context.Background(), domain.SystemActor(), f.study.ID); err != nil || st.Name != f.study.Name || st.Description == typed {
		t.Errorf("the study after the refused post: %+v, %v", st, err)
	}
}

// patientRace is the real store, with another request's change made once,
// right after the next read of a patient.
type patientRace struct {
	*repo.DB
	change atomic.Pointer[func()]
}

func (s *patientRace) PatientByID(ctx context.Context, id int64) (*domain.Patient, error) {
	p, err := s.DB.PatientByID(ctx, id)
	if change := s.change.Swap(nil); change != nil {
		(*change)()
	}
	return p, err
}

// TestIdentifierFormsKeepIdentifiersAddedMeanwhile: another request adds
// an identifier to the patient right after the identifier form's first
// read of the patient; both identifiers survive the add form, and the
// remove form removes only its own (before, the console wrote a list
// computed from its read, dropping the other request's identifier).
func TestIdentifierFormsKeepIdentifiersAddedMeanwhile(t *testing.T) {
	race := &patientRace{}
	f := newFixtureWith(t, handlerstest.Options{Store: func(db *repo.DB) domain.Store { race.DB = db; return race }})
	ctx, sys := context.Background(), domain.SystemActor()
	addMeanwhile := func(id domain.Identifier) {
		change := func() {
			p, err := race.DB.PatientByID(ctx, f.patient.ID)
			if err == nil {
				ids := append(slices.Clone(p.Identifiers), id)
				_, err = f.env.Service.UpdatePatient(ctx, sys, f.patient.ID, domain.PatientPatch{Identifiers: &ids})
			}
			if err != nil {
				t.Errorf("the other request's identifier %v: %v", id, err)
			}
		}
		race.change.Store(&change)
	}
	path := fmt.Sprintf("/console/patients/%d/identifiers", f.patient.ID)
	theirs, mine, later := domain.Identifier{System: "urn:other", Value: "A"}, domain.Identifier{System: "urn:mrn", Value: "B"}, domain.Identifier{System: "urn:other", Value: "C"}
	check := func(what string, want ...domain.Identifier) {
		t.Helper()
		if race.change.Load() != nil {
			t.Fatalf("%s: the form read no patient", what)
		}
		p, err := race.DB.PatientByID(ctx, f.patient.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range want {
			if !slices.Contains(p.Identifiers, id) {
				t.Errorf("%s: identifier %v is lost: %v", what, id, p.Identifiers)
			}
		}
		if len(p.Identifiers) != len(want) {
			t.Errorf("%s: identifiers %v, want %v", what, p.Identifiers, want)
		}
	}
	addMeanwhile(theirs)
	if resp, body := f.callers["member"].post(f.env, path, url.Values{"system": {mine.System}, "value": {mine.Value}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST %s: %d\n%.600s", path, resp.StatusCode, body)
	}
	check("add", theirs, mine)
	addMeanwhile(later)
	if resp, body := f.callers["member"].post(f.env, path+"/remove", url.Values{"system": {mine.System}, "value": {mine.Value}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST %s/remove: %d\n%.600s", path, resp.StatusCode, body)
	}
	check("remove", theirs, later)
}
