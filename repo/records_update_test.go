package repo_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"exchange/domain"
	"exchange/repo"
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

// TestEveryChangeOfAUserMovesItsVersion: a user's lastUpdated is its
// version (the admin API's ETag of a practitioner or a user): every
// change moves it on by a millisecond at least, also when the clock has
// not moved since the last one (here it never moves), and a change made
// from a version the user has left is refused and writes nothing. Before,
// each change set lastUpdated to the clock's time: two versions of one
// millisecond shared a tag, and an If-Match from the first passed on the
// second.
func TestEveryChangeOfAUserMovesItsVersion(t *testing.T) {
	db := repotest.NewDB(t)
	at := time.Now().UTC().Truncate(time.Millisecond)
	repo.SetClock(db, func() time.Time { return at })
	ctx := context.Background()
	u := &domain.User{Email: "pat@example.org", Type: domain.UserPatient, IsActive: true}
	if err := db.CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	stored := func() *domain.User {
		t.Helper()
		got, err := db.UserByID(ctx, u.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	versions := []time.Time{u.LastUpdated}
	changed := func(what string, version time.Time, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		last := versions[len(versions)-1]
		if got := stored().LastUpdated; !version.After(last) || !got.Equal(version) {
			t.Errorf("%s: version %v (stored %v), want one after %v", what, version, got, last)
		}
		versions = append(versions, version)
	}
	first, last := "Pat", "Doe"
	v, err := db.ChangeUser(ctx, u.ID, domain.UserChange{FirstName: &first})
	changed("a rename", v, err)
	v, err = db.ChangeUser(ctx, u.ID, domain.UserChange{LastName: &last})
	changed("another rename in the same millisecond", v, err)
	code := &domain.OAuthToken{Kind: domain.TokenAuthorizeCode, Signature: "invitation", UserID: u.ID, Active: true, Invitation: true,
		IssuedAt: at, ExpiresAt: at.Add(time.Hour)}
	if err := db.CreateOAuthToken(ctx, code); err != nil {
		t.Fatal(err)
	}
	err = db.RedeemInvitation(ctx, &domain.InvitationRedemption{Signature: code.Signature, UserID: u.ID, PasswordHash: "hash", At: at})
	changed("an invitation's redemption", stored().LastUpdated, err)

	before := stored()
	stale, other := versions[len(versions)-2], "Jo"
	if _, err := db.ChangeUser(ctx, u.ID, domain.UserChange{FirstName: &other, From: &stale}); !domain.IsCode(err, domain.CodeVersionMismatch) {
		t.Errorf("a change from version %v, the stored being %v: %v, want a version mismatch", stale, before.LastUpdated, err)
	}
	if after := stored(); *after != *before {
		t.Errorf("the refused change wrote the user: %+v, was %+v", after, before)
	}
	v, err = db.ChangeUser(ctx, u.ID, domain.UserChange{FirstName: &other, From: &before.LastUpdated})
	changed("a change from the stored version", v, err)

	// Changes of different fields sent at once each keep theirs, at a
	// version of their own.
	active, staff := false, true
	changes := []domain.UserChange{{FirstName: &first}, {LastName: &other}, {IsActive: &active}, {IsStaff: &staff}}
	got := make([]time.Time, len(changes))
	var wg sync.WaitGroup
	for i, ch := range changes {
		wg.Go(func() {
			var err error
			if got[i], err = db.ChangeUser(ctx, u.ID, ch); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	final := stored()
	if final.FirstName != first || final.LastName != other || final.IsActive || !final.IsStaff {
		t.Errorf("after changes at once: %+v, a change was lost", final)
	}
	slices.SortFunc(got, time.Time.Compare)
	if !got[0].After(versions[len(versions)-1]) || !final.LastUpdated.Equal(got[len(got)-1]) ||
		len(slices.CompactFunc(slices.Clone(got), time.Time.Equal)) != len(got) {
		t.Errorf("versions of changes at once: %v, stored %v; want distinct ones after %v", got, final.LastUpdated, versions[len(versions)-1])
	}
}
