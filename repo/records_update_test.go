package repo_test

import (
	"context"
	"sync"
	"testing"

	"exchange/domain"
	"exchange/repo/repotest"
)

// TestAdminRecordUpdatesAreCompareAndSet: edits of an organization, a
// study, a data source or an OAuth client read from the same record and sent at once,
// each changing its own field: one stores, every other is refused
// (CodeVersionMismatch, which the use case turns into applying the patch
// again, or a 409) and changes nothing, so the stored record is the one
// edit that stored. Before, each replaced the record by _id and the last
// dropped the others' fields. On the embedded store this needs the
// record's stripe: FerretDB's filter and write are two steps.
func TestAdminRecordUpdatesAreCompareAndSet(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	org := &domain.Organization{Name: "Clinic", Type: "prov"}
	if err := db.CreateOrganization(ctx, org); err != nil {
		t.Fatal(err)
	}
	study := &domain.Study{OrganizationID: org.ID, Name: "Study"}
	if err := db.CreateStudy(ctx, study); err != nil {
		t.Fatal(err)
	}
	source := &domain.DataSource{Name: "Tracker", Type: domain.DataSourcePersonalDevice}
	if err := db.CreateDataSource(ctx, source); err != nil {
		t.Fatal(err)
	}
	const edits = 4
	t.Run("organization", func(t *testing.T) {
		old, err := db.OrganizationByID(ctx, org.ID)
		if err != nil {
			t.Fatal(err)
		}
		changes := make([]domain.Organization, edits)
		for i := range changes {
			changes[i] = *old
			changes[i].Name = old.Name + string(rune('A'+i))
		}
		changes[0].Name, changes[0].Type = old.Name, "dept" // another field
		won := race(t, changes, func(o *domain.Organization) error { return db.UpdateOrganization(ctx, old, o) })
		got, err := db.OrganizationByID(ctx, org.ID)
		if err != nil {
			t.Fatal(err)
		}
		if want := changes[won]; got.Name != want.Name || got.Type != want.Type || !got.LastUpdated.After(old.LastUpdated) {
			t.Errorf("stored %+v, want the edit that stored, %+v, at a later version than %v", got, want, old.LastUpdated)
		}
	})
	t.Run("study", func(t *testing.T) {
		old, err := db.StudyByID(ctx, study.ID)
		if err != nil {
			t.Fatal(err)
		}
		changes := make([]domain.Study, edits)
		for i := range changes {
			changes[i] = *old
			changes[i].Name = old.Name + string(rune('A'+i))
		}
		changes[0].Name, changes[0].Description = old.Name, "About" // another field
		won := race(t, changes, func(s *domain.Study) error { return db.UpdateStudy(ctx, old, s) })
		got, err := db.StudyByID(ctx, study.ID)
		if err != nil {
			t.Fatal(err)
		}
		if want := changes[won]; got.Name != want.Name || got.Description != want.Description || !got.LastUpdated.After(old.LastUpdated) {
			t.Errorf("stored %+v, want the edit that stored, %+v, at a later version than %v", got, want, old.LastUpdated)
		}
	})
	t.Run("data source", func(t *testing.T) {
		old, err := db.DataSourceByID(ctx, source.ID)
		if err != nil {
			t.Fatal(err)
		}
		changes := make([]domain.DataSource, edits)
		for i := range changes {
			changes[i] = *old
			changes[i].Name = old.Name + string(rune('A'+i))
		}
		changes[0].Name, changes[0].Type = old.Name, domain.DataSourceMedicalDevice // another field
		won := race(t, changes, func(s *domain.DataSource) error { return db.UpdateDataSource(ctx, old, s) })
		got, err := db.DataSourceByID(ctx, source.ID)
		if err != nil {
			t.Fatal(err)
		}
		if want := changes[won]; got.Name != want.Name || got.Type != want.Type || !got.LastUpdated.After(old.LastUpdated) {
			t.Errorf("stored %+v, want the edit that stored, %+v, at a later version than %v", got, want, old.LastUpdated)
		}
	})
	t.Run("OAuth client", func(t *testing.T) {
		c := &domain.OAuthClient{ID: "app", Name: "App", Type: domain.ClientConfidential, SecretHash: "hash0",
			RedirectURIs: []string{"https://app.example.org/cb"}}
		if err := db.CreateOAuthClient(ctx, c); err != nil {
			t.Fatal(err)
		}
		old, err := db.OAuthClient(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		changes := make([]domain.OAuthClient, edits)
		for i := range changes {
			changes[i] = *old
			changes[i].SecretHash = old.SecretHash + string(rune('A'+i)) // a rotation
		}
		changes[0].SecretHash, changes[0].Name = old.SecretHash, "Renamed app" // a seed's registration
		won := race(t, changes, func(c *domain.OAuthClient) error { return db.UpdateOAuthClient(ctx, old, c) })
		got, err := db.OAuthClient(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if want := changes[won]; got.Name != want.Name || got.SecretHash != want.SecretHash || !got.LastUpdated.After(old.LastUpdated) {
			t.Errorf("stored %+v, want the edit that stored, %+v, at a later version than %v", got, want, old.LastUpdated)
		}
	})
	t.Run("gone", func(t *testing.T) {
		gone := *study
		gone.ID = study.ID + 1000
		if err := db.UpdateStudy(ctx, study, &gone); !domain.IsCode(err, domain.CodeNotFound) {
			t.Errorf("an update of a study that does not exist: %v, want not-found", err)
		}
	})
}

// race stores every change at once by update and returns the index of
// the one that stored; it fails the test unless exactly one stored and
// every other was refused as a version mismatch.
func race[T any](t *testing.T, changes []T, update func(*T) error) int {
	t.Helper()
	errs := make([]error, len(changes))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range changes {
		wg.Go(func() {
			<-start
			errs[i] = update(&changes[i])
		})
	}
	close(start)
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won < 0:
			won = i
		case err == nil:
			t.Errorf("edits %d and %d from the same read both stored", won, i)
		case !domain.IsCode(err, domain.CodeVersionMismatch):
			t.Errorf("edit %d: %v, want version-mismatch", i, err)
		}
	}
	if won < 0 {
		t.Fatal("no edit stored")
	}
	return won
}
