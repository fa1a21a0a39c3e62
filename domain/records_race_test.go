package domain_test

import (
	"context"
	"testing"

	"exchange/domain"
	"exchange/repo"
	"exchange/repo/repotest"
)

// recordRace is the real store, with another request's change of an
// organization, a study or a data source made once, right after a use
// case reads one of the kind raced (a read of another kind, made first,
// would let the edit read the changed record and pass without racing):
// the second of two edits read from the same record.
type recordRace struct {
	*repo.DB
	raced  string // "organization", "study" or "data source"
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

// TestStudyChangeFromAnOldVersionIsNotRetriedIntoSuccess: an update made
// from the version it names passes the check on its first read, then
// finds the study changed by another request before its write; read
// again, the study is no longer that version, so the update is refused
// (a Stale CodeConflict: the admin API's 412) rather than applied to a
// version its user never saw.
func TestStudyChangeFromAnOldVersionIsNotRetriedIntoSuccess(t *testing.T) {
	store := &recordRace{DB: repotest.NewDB(t), raced: "study"}
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
	theirs, mine := "Their description", "My description"
	store.change = func() {
		if _, err := svc.UpdateStudy(ctx, sys, study.ID, domain.StudyPatch{Description: &theirs}); err != nil {
			t.Error(err)
		}
	}
	from := study.LastUpdated
	_, err = svc.UpdateStudy(ctx, sys, study.ID, domain.StudyPatch{Description: &mine, Unchanged: &from})
	if !domain.IsStale(err) {
		t.Errorf("the update from the old version: %v, want a stale-version conflict", err)
	}
	if store.change != nil {
		t.Fatal("the update read no study")
	}
	if got, err := store.DB.StudyByID(ctx, study.ID); err != nil || got.Description != theirs {
		t.Errorf("the study: %+v, %v; want the other request's description", got, err)
	}
}
