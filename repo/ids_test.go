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

// TestBatchesShareAnIDBlock: the batches of observations one process
// writes take their ids from one claimed block, consecutive within each
// batch and following each other (before, every batch claimed a block of
// its own: three round trips); two instances writing batches at once
// never share an id.
func TestBatchesShareAnIDBlock(t *testing.T) {
	first := repotest.NewDB(t)
	second := repotest.OtherInstance(t, first)
	ctx := context.Background()
	batch := func(db *repo.DB, run string, n int) []int64 {
		obs := make([]*domain.Observation, n)
		for i := range obs {
			obs[i] = &domain.Observation{PatientID: 1, DataSourceID: 1, Status: "final", Code: "omh:heart-rate:2.0",
				Codings:     []domain.Coding{{System: domain.SystemOpenMHealth, Code: "omh:heart-rate:2.0"}},
				Identifiers: []domain.Identifier{{System: "urn:test", Value: fmt.Sprintf("%s-%d", run, i)}},
				ContentType: "application/json", Payload: []byte(`{}`)}
		}
		ids := make([]int64, n)
		for i, err := range db.CreateObservations(ctx, obs) {
			if err != nil {
				t.Fatalf("%s: %v", run, err)
			}
			ids[i] = obs[i].ID
		}
		return ids
	}
	a, b := batch(first, "a", 3), batch(first, "b", 2)
	if a[0]+1 != a[1] || a[1]+1 != a[2] || b[0] != a[2]+1 || b[1] != b[0]+1 {
		t.Errorf("ids %v then %v, want consecutive", a, b)
	}
	blocks := repotest.Collection(t, first, "id_blocks")
	if n, _ := blocks.CountDocuments(ctx, bson.D{{Key: "sequence", Value: "observations"}}); n != 1 {
		t.Errorf("two batches claimed %d id blocks, want 1", n)
	}

	var mu sync.Mutex
	seen := map[int64]bool{}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db := []*repo.DB{first, second}[w%2]
			for i := range 3 {
				ids := batch(db, fmt.Sprintf("w%d.%d", w, i), 5)
				mu.Lock()
				for _, id := range ids {
					if seen[id] {
						t.Errorf("id %d given twice", id)
					}
					seen[id] = true
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}
