package repo_test

import (
	"context"
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
	t.Run("organization", func(t *testing.T) {
		old, err := db.OrganizationByID(ctx, org.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := raceEdits(t, old, func(c *domain.Organization, i int) {
			c.Name = old.Name + string(rune('A'+i))
			if i == 0 {
				c.Name, c.Type = old.Name, "dept" // another field
			}
		}, func(o *domain.Organization) error { return db.UpdateOrganization(ctx, old, o) })
		got, err := db.OrganizationByID(ctx, org.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Name != want.Name || got.Type != want.Type || !got.LastUpdated.After(old.LastUpdated) {
			t.Errorf("stored %+v, want the edit that stored, %+v, at a later version than %v", got, want, old.LastUpdated)
		}
	})
	t.Run("study", func(t *testing.T) {
		old, err := db.StudyByID(ctx, study.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := raceEdits(t, old, func(c *domain.Study, i int) {
			c.Name = old.Name + string(rune('A'+i))
			if i == 0 {
				c.Name, c.Description = old.Name, "About" // another field
			}
		}, func(s *domain.Study) error { return db.UpdateStudy(ctx, old, s) })
		got, err := db.StudyByID(ctx, study.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Name != want.Name || got.Description != want.Description || !got.LastUpdated.After(old.LastUpdated) {
			t.Errorf("stored %+v, want the edit that stored, %+v, at a later version than %v", got, want, old.LastUpdated)
		}
	})
	t.Run("data source", func(t *testing.T) {
		old, err := db.DataSourceByID(ctx, source.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := raceEdits(t, old, func(c *domain.DataSource, i int) {
			c.Name = old.Name + string(rune('A'+i))
			if i == 0 {
				c.Name, c.Type = old.Name, domain.DataSourceMedicalDevice // another field
			}
		}, func(s *domain.DataSource) error { return db.UpdateDataSource(ctx, old, s) })
		got, err := db.DataSourceByID(ctx, source.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Name != want.Name || got.Type != want.Type || !got.LastUpdated.After(old.LastUpdated) {
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
		want := raceEdits(t, old, func(c *domain.OAuthClient, i int) {
			c.SecretHash = old.SecretHash + string(rune('A'+i)) // a rotation
			if i == 0 {
				c.SecretHash, c.Name = old.SecretHash, "Renamed app" // a seed's registration
			}
		}, func(c *domain.OAuthClient) error { return db.UpdateOAuthClient(ctx, old, c) })
		got, err := db.OAuthClient(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Name != want.Name || got.SecretHash != want.SecretHash || !got.LastUpdated.After(old.LastUpdated) {
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

// raceEdits stores four edits of old at once by update, each old changed
// by edit(i), and returns the one that stored; it fails the test unless
// exactly one stored and every other was refused as a version mismatch.
func raceEdits[T any](t *testing.T, old *T, edit func(c *T, i int), update func(*T) error) T {
	t.Helper()
	changes := make([]T, 4)
	for i := range changes {
		changes[i] = *old
		edit(&changes[i], i)
	}
	return changes[repotest.OneWins(t, len(changes), func(i int) error { return update(&changes[i]) }, domain.CodeVersionMismatch)]
}
