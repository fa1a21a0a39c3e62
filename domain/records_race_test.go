package domain_test

import (
	"context"
	"testing"
	"time"

	"exchange/domain"
	"exchange/repo"
	"exchange/repo/repotest"
)

// recordRace is the real store, with another request's change of an
// organization, a study, a data source, a user (read by id or email) or a
// patient made once, right after a use case reads one of the kind raced
// (a read of another kind, made first, would let the edit read the
// changed record and pass without racing): the second of two edits read
// from the same record.
type recordRace struct {
	*repo.DB
	raced  string // "organization", "study", "data source", "user" or "patient"
	change func()
}

func (s *recordRace) OrganizationByID(ctx context.Context, id int64) (*domain.Organization, error) {
	o, err := s.DB.OrganizationByID(ctx, id)
	s.changeOnce("organization")
	return o, err
}

func (s *recordRace) StudyByID(ctx context.Context, id int64) (*domain.Study, error) {
	st, err := s.DB.StudyByID(ctx, id)
	s.changeOnce("study")
	return st, err
}

func (s *recordRace) DataSourceByID(ctx context.Context, id int64) (*domain.DataSource, error) {
	d, err := s.DB.DataSourceByID(ctx, id)
	s.changeOnce("data source")
	return d, err
}

func (s *recordRace) UserByID(ctx context.Context, id int64) (*domain.User, error) {
	u, err := s.DB.UserByID(ctx, id)
	s.changeOnce("user")
	return u, err
}

func (s *recordRace) UserByEmail(ctx context.Context, email string) (*domain.User, error) {
	u, err := s.DB.UserByEmail(ctx, email)
	s.changeOnce("user")
	return u, err
}

func (s *recordRace) PatientByID(ctx context.Context, id int64) (*domain.Patient, error) {
	p, err := s.DB.PatientByID(ctx, id)
	s.changeOnce("patient")
	return p, err
}

func (s *recordRace) changeOnce(kind string) {
	if change := s.change; change != nil && kind == s.raced {
		s.change = nil
		change()
	}
}

// TestAdminEditsFromTheSameReadKeepBothFields: two edits of an
// organization, a study or a data source read the same record and change
// different fields; the one that stores second finds the record changed
// under it and applies its patch again, so both fields hold (before, it
// replaced the record with what it read, dropping the first's field).
func TestAdminEditsFromTheSameReadKeepBothFields(t *testing.T) {
	store := &recordRace{DB: repotest.NewDB(t)}
	svc := domain.NewService(domain.Config{Store: store})
	ctx, sys := context.Background(), domain.SystemActor()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	org, err := svc.CreateOrganization(ctx, sys, domain.NewOrganization{Name: "Clinic", Type: "prov"})
	must(err)
	study, err := svc.CreateStudy(ctx, sys, domain.NewStudy{OrganizationID: org.ID, Name: "Study"})
	must(err)
	source, err := svc.CreateDataSource(ctx, sys, domain.NewDataSource{Name: "Tracker", Type: domain.DataSourcePersonalDevice})
	must(err)
	// raced makes second, with first made right after second reads.
	raced := func(t *testing.T, kind string, first, second func() error) {
		t.Helper()
		store.raced = kind
		store.change = func() {
			if err := first(); err != nil {
				t.Error(err)
			}
		}
		if err := second(); err != nil {
			t.Fatal(err)
		}
		if store.change != nil {
			t.Fatalf("the edit read no %s", kind)
		}
	}

	t.Run("organization", func(t *testing.T) {
		name, kind := "Renamed clinic", domain.OrganizationType("dept")
		raced(t, "organization", func() error {
			_, err := svc.UpdateOrganization(ctx, sys, org.ID, domain.OrganizationPatch{Name: &name})
			return err
		}, func() error {
			_, err := svc.UpdateOrganization(ctx, sys, org.ID, domain.OrganizationPatch{Type: &kind})
			return err
		})
		got, err := store.DB.OrganizationByID(ctx, org.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Name != name || got.Type != kind {
			t.Errorf("organization: %q, %q; want %q, %q: an edit was lost", got.Name, got.Type, name, kind)
		}
	})
	t.Run("study", func(t *testing.T) {
		name, description := "Renamed study", "What the study is about"
		raced(t, "study", func() error {
			_, err := svc.UpdateStudy(ctx, sys, study.ID, domain.StudyPatch{Name: &name})
			return err
		}, func() error {
			_, err := svc.UpdateStudy(ctx, sys, study.ID, domain.StudyPatch{Description: &description})
			return err
		})
		got, err := store.DB.StudyByID(ctx, study.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Name != name || got.Description != description {
			t.Errorf("study: %q, %q; want %q, %q: an edit was lost", got.Name, got.Description, name, description)
		}
	})
	t.Run("data source", func(t *testing.T) {
		name, kind := "Renamed tracker", domain.DataSourceMedicalDevice
		raced(t, "data source", func() error {
			_, err := svc.UpdateDataSource(ctx, sys, source.ID, domain.DataSourcePatch{Name: &name})
			return err
		}, func() error {
			_, err := svc.UpdateDataSource(ctx, sys, source.ID, domain.DataSourcePatch{Type: &kind})
			return err
		})
		got, err := store.DB.DataSourceByID(ctx, source.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Name != name || got.Type != kind {
			t.Errorf("data source: %q, %q; want %q, %q: an edit was lost", got.Name, got.Type, name, kind)
		}
	})
}

// TestAChangeFromAnOldVersionIsNotRetriedIntoSuccess: an update of each
// record the admin API versions, made from the version it names (its
// If-Match), passes the check on its first read, then finds the record
// changed by another request before its write; read again, the record is
// no longer that version, so the update is refused (a Stale
// CodeConflict: the admin API's 412) rather than applied to a version its
// user never saw. The check is inside the use case's compare-and-set
// loop: made once before it (in a handler), the update would be applied.
func TestAChangeFromAnOldVersionIsNotRetriedIntoSuccess(t *testing.T) {
	store := &recordRace{DB: repotest.NewDB(t)}
	svc := domain.NewService(domain.Config{Store: store})
	ctx, sys := context.Background(), domain.SystemActor()
	org, err := svc.CreateOrganization(ctx, sys, domain.NewOrganization{Name: "Clinic", Type: "prov"})
	if err != nil {
		t.Fatal(err)
	}
	study, err := svc.CreateStudy(ctx, sys, domain.NewStudy{OrganizationID: org.ID, Name: "Study"})
	if err != nil {
		t.Fatal(err)
	}
	source, err := svc.CreateDataSource(ctx, sys, domain.NewDataSource{Name: "Tracker", Type: domain.DataSourcePersonalDevice})
	if err != nil {
		t.Fatal(err)
	}
	user, err := svc.CreateUser(ctx, domain.NewUser{Email: "doc@example.org", Type: domain.UserPractitioner, FirstName: "Doc"})
	if err != nil {
		t.Fatal(err)
	}
	patient, err := svc.CreatePatient(ctx, sys, domain.NewPatient{Email: "pat@example.org", FamilyName: "Doe", GivenNames: []string{"Jo"}, OrganizationIDs: []int64{org.ID}})
	if err != nil {
		t.Fatal(err)
	}
	// Each case changes one text of its record: theirs by the other
	// request, mine from the version before theirs. read returns the
	// stored text and version.
	theirs, mine := "Theirs", "Mine"
	for _, tc := range []struct {
		raced  string // the kind of record recordRace reads
		change func(text string, from *time.Time) error
		read   func() (string, time.Time, error)
	}{
		{"organization", func(text string, from *time.Time) error {
			_, err := svc.UpdateOrganization(ctx, sys, org.ID, domain.OrganizationPatch{Name: &text, Unchanged: from})
			return err
		}, func() (string, time.Time, error) {
			o, err := store.DB.OrganizationByID(ctx, org.ID)
			return o.Name, o.LastUpdated, err
		}},
		{"study", func(text string, from *time.Time) error {
			_, err := svc.UpdateStudy(ctx, sys, study.ID, domain.StudyPatch{Description: &text, Unchanged: from})
			return err
		}, func() (string, time.Time, error) {
			st, err := store.DB.StudyByID(ctx, study.ID)
			return st.Description, st.LastUpdated, err
		}},
		{"data source", func(text string, from *time.Time) error {
			_, err := svc.UpdateDataSource(ctx, sys, source.ID, domain.DataSourcePatch{Name: &text, Unchanged: from})
			return err
		}, func() (string, time.Time, error) {
			d, err := store.DB.DataSourceByID(ctx, source.ID)
			return d.Name, d.LastUpdated, err
		}},
		{"user", func(text string, from *time.Time) error {
			_, err := svc.UpdatePractitioner(ctx, sys, user.ID, domain.PractitionerPatch{LastName: &text, Unchanged: from})
			return err
		}, func() (string, time.Time, error) {
			u, err := store.DB.UserByID(ctx, user.ID)
			return u.LastName, u.LastUpdated, err
		}},
		// The user's status (/users/:id): mine deactivates the user,
		// theirs renames them.
		{"user", func(text string, from *time.Time) error {
			if text == mine {
				_, err := svc.SetUserActive(ctx, sys, user.ID, false, from)
				return err
			}
			_, err := svc.UpdatePractitioner(ctx, sys, user.ID, domain.PractitionerPatch{FirstName: &text})
			return err
		}, func() (string, time.Time, error) {
			u, err := store.DB.UserByID(ctx, user.ID)
			if err == nil && !u.IsActive {
				return mine, u.LastUpdated, nil
			}
			return u.FirstName, u.LastUpdated, err
		}},
		{"patient", func(text string, from *time.Time) error {
			_, err := svc.UpdatePatient(ctx, sys, patient.ID, domain.PatientPatch{FamilyName: &text, Unchanged: from})
			return err
		}, func() (string, time.Time, error) {
			p, err := store.DB.PatientByID(ctx, patient.ID)
			return p.FamilyName, p.LastUpdated, err
		}},
	} {
		_, from, err := tc.read()
		if err != nil {
			t.Fatal(err)
		}
		store.raced, store.change = tc.raced, func() {
			if err := tc.change(theirs, nil); err != nil {
				t.Error(err)
			}
		}
		if err := tc.change(mine, &from); !domain.IsStale(err) {
			t.Errorf("%s: the update from the old version: %v, want a stale-version conflict", tc.raced, err)
		}
		if store.change != nil {
			t.Fatalf("%s: the update read none", tc.raced)
		}
		if got, _, err := tc.read(); err != nil || got != theirs {
			t.Errorf("%s: %q, %v; want the other request's %q", tc.raced, got, err, theirs)
		}
	}
}
