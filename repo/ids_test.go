package repo_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
	"exchange/repo"
	"exchange/repo/repotest"
)

// TestIDsAreUniqueAcrossInstances creates organizations from many
// goroutines through two connections to one database, as two instances of
// the service do: every create gets its own id and every write lands.
// FerretDB's $inc is a read and a write that concurrent callers
// interleave: counting ids with it gave duplicates and failed inserts.
func TestIDsAreUniqueAcrossInstances(t *testing.T) {
	first := repotest.NewDB(t)
	ctx := context.Background()
	second := repotest.OtherInstance(t, first)
	const workers, each = 8, 15
	var mu sync.Mutex
	ids := map[int64]string{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db := []*repo.DB{first, second}[w%2]
			for i := range each {
				o := &domain.Organization{Name: fmt.Sprintf("org %d.%d", w, i), Type: "prov"}
				if err := db.CreateOrganization(ctx, o); err != nil {
					t.Errorf("create %s: %v", o.Name, err)
					continue
				}
				mu.Lock()
				if other, dup := ids[o.ID]; dup {
					t.Errorf("id %d given to %s and %s", o.ID, other, o.Name)
				}
				ids[o.ID] = o.Name
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	n, err := repotest.Collection(t, first, "organizations").CountDocuments(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	if n != workers*each || len(ids) != workers*each {
		t.Errorf("stored %d organizations with %d distinct ids, want %d", n, len(ids), workers*each)
	}
}

// TestSweepKeepsTheBlocksClaimsWalk: blocks behind the hint go once old;
// the hint's own block and any after it stay, whatever their age.
func TestSweepKeepsTheBlocksClaimsWalk(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	for range 3 {
		if err := db.CreateOrganization(ctx, &domain.Organization{Name: "o", Type: "prov"}); err != nil {
			t.Fatal(err)
		}
	}
	blocks := repotest.Collection(t, db, "id_blocks")
	if _, err := db.Sweep(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if n, _ := blocks.CountDocuments(ctx, bson.D{}); n != 3 {
		t.Fatalf("a sweep within a day left %d blocks, want 3", n)
	}
	if _, err := db.Sweep(ctx, time.Now().Add(48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	var left []struct {
		ID string `bson:"_id"`
	}
	cur, err := blocks.Find(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cur.All(ctx, &left); err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].ID != "organizations@3" {
		t.Errorf("after two days the blocks left are %v, want the hint's own, organizations@3", left)
	}
	o := &domain.Organization{Name: "next", Type: "prov"}
	if err := db.CreateOrganization(ctx, o); err != nil || o.ID != 4 {
		t.Errorf("the next organization got id %d, err %v; want 4", o.ID, err)
	}
}
