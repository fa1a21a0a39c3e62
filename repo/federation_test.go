package repo_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"exchange/domain"
	"exchange/repo/repotest"
)

// TestPendingSignInIsTakenOnce: of callers (instances) taking a sign-in
// in progress at once, one gets it; an expired one is nobody's, whether
// the sweeper reached it or not; a sign-in is accepted for a user once.
func TestPendingSignInIsTakenOnce(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	if err := db.CreatePendingSignIn(ctx, &domain.PendingSignIn{ID: "s1", Provider: "uni", Browser: "b", ExpiresAt: now.Add(10 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	var got atomic.Int32
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			if p, err := db.TakePendingSignIn(ctx, "s1", now); err == nil && p.Provider == "uni" {
				got.Add(1)
			} else if !domain.IsCode(err, domain.CodeNotFound) {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got.Load() != 1 {
		t.Fatalf("taken %d times", got.Load())
	}

	if err := db.CreatePendingSignIn(ctx, &domain.PendingSignIn{ID: "s2", Provider: "campus", ExpiresAt: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int32
	for user := range int64(6) {
		wg.Go(func() {
			if err := db.AcceptPendingSignIn(ctx, "s2", user+1, now, now); err == nil {
				accepted.Add(1)
			} else if !domain.IsCode(err, domain.CodeNotFound) {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if accepted.Load() != 1 {
		t.Errorf("accepted %d times", accepted.Load())
	}
	later := now.Add(2 * time.Minute)
	if _, err := db.PendingSignIn(ctx, "s2", later); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("an expired sign-in was read: %v", err)
	}
	if _, err := db.TakePendingSignIn(ctx, "s2", later); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("an expired sign-in was taken: %v", err)
	}
}

// TestAssertionIsUsedOnce: a SAML assertion id is accepted once across
// callers sharing the database, until its record expires.
func TestAssertionIsUsedOnce(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	var accepted atomic.Int32
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			err := db.UseAssertion(ctx, "https://idp.example\n_a1", now.Add(5*time.Minute), now)
			switch {
			case err == nil:
				accepted.Add(1)
			case !domain.IsCode(err, domain.CodeDuplicate):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if accepted.Load() != 1 {
		t.Fatalf("accepted %d times", accepted.Load())
	}
	// Past its time (an assertion that old is refused for its age), its
	// record no longer stands in the way, swept or not.
	if err := db.UseAssertion(ctx, "https://idp.example\n_a1", now.Add(20*time.Minute), now.Add(10*time.Minute)); err != nil {
		t.Errorf("after expiry: %v", err)
	}
	if n, err := db.Sweep(ctx, now.Add(time.Hour)); err != nil || n < 1 {
		t.Errorf("sweep: %d %v", n, err)
	}
}
