package repo_test

import (
	"context"
	"reflect"
	"testing"

	"exchange/domain"
	"exchange/repo"
	"exchange/repo/repotest"
)

// TestScopeCodesByIDsReadsEachCodeOnce: scope codes are never changed
// once created, so each is read from the database once and then answered
// from memory, as the read would answer it: sorted by id, each once, only
// the codes that exist. An id not found is asked again (it may be created
// since), and a Drop forgets what was read.
func TestScopeCodesByIDsReadsEachCodeOnce(t *testing.T) {
	var commands repotest.Commands
	db := repotest.NewDBWith(t, repo.Options{Monitor: commands.Monitor()})
	ctx := context.Background()
	create := func(code string) domain.ScopeCode {
		t.Helper()
		sc := domain.ScopeCode{System: domain.SystemOpenMHealth, Code: code, Text: code}
		if err := db.CreateScopeCode(ctx, &sc); err != nil {
			t.Fatal(err)
		}
		return sc
	}
	read := func(ids ...int64) ([]domain.ScopeCode, int) {
		t.Helper()
		before := commands.Snapshot()
		got, err := db.ScopeCodesByIDs(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		return got, commands.Since(before)["scope_codes find"]
	}
	hr, steps := create("omh:heart-rate:2.0"), create("omh:step-count:2.0")
	want := []domain.ScopeCode{hr, steps}
	if got, finds := read(steps.ID, hr.ID, steps.ID, 999); !reflect.DeepEqual(got, want) || finds != 1 {
		t.Fatalf("first read: %v with %d finds, want %v with 1", got, finds, want)
	}
	if got, finds := read(hr.ID, steps.ID, hr.ID); !reflect.DeepEqual(got, want) || finds != 0 {
		t.Fatalf("second read: %v with %d finds, want %v with none", got, finds, want)
	}
	if got, finds := read(); got == nil || len(got) != 0 || finds != 0 {
		t.Fatalf("no ids: %#v with %d finds, want an empty list and no find", got, finds)
	}
	sleep := create("omh:sleep-duration:2.0")
	if got, finds := read(sleep.ID, hr.ID); !reflect.DeepEqual(got, []domain.ScopeCode{hr, sleep}) || finds != 1 {
		t.Fatalf("a code created since: %v with %d finds", got, finds)
	}

	if err := db.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	other := create("omh:body-weight:2.0") // the first id again
	if got, _ := read(other.ID); !reflect.DeepEqual(got, []domain.ScopeCode{other}) || other.ID != hr.ID {
		t.Fatalf("after a drop: %v, want %v (id %d)", got, other, hr.ID)
	}
}
