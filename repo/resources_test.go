package repo_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"exchange/domain"
	"exchange/repo/repotest"
)

// TestResourceWritesAreCompareAndSet: updates and deletes of an imported
// resource sent at once, all from the same version, are accepted once: the
// others are refused (CodeVersionMismatch, or not found after the
// delete) instead of each replacing the version the first made. FerretDB
// applies a filter and its write as two steps, so without serializing
// them several pass the filter.
func TestResourceWritesAreCompareAndSet(t *testing.T) {
	db := repotest.NewDB(t)
	ctx := context.Background()
	for round := range 10 {
		id := fmt.Sprintf("00000000-0000-4000-8000-%012d", round)
		r := &domain.Resource{ID: id, Type: "Basic", SourceID: 1, UniqueKey: "key-" + id, VersionID: 1,
			LastUpdated: time.Now().UTC().Truncate(time.Millisecond), JSON: []byte(`{}`), Object: map[string]any{}}
		if errs := db.CreateResources(ctx, []*domain.Resource{r}); errs[0] != nil {
			t.Fatal(errs[0])
		}
		var accepted atomic.Int32
		start := make(chan struct{})
		var wg sync.WaitGroup
		for writer := range 8 {
			wg.Go(func() {
				next := *r
				next.VersionID, next.JSON = 2, fmt.Appendf(nil, `{"writer":%d}`, writer)
				<-start
				var err error
				if writer%2 == 0 {
					err = db.ReplaceResource(ctx, &next)
				} else {
					err = db.DeleteResource(ctx, r.Type, r.ID, 1)
				}
				switch {
				case err == nil:
					accepted.Add(1)
				case !domain.IsCode(err, domain.CodeVersionMismatch) && !domain.IsCode(err, domain.CodeNotFound):
					t.Errorf("round %d, writer %d: %v", round, writer, err)
				}
			})
		}
		close(start)
		wg.Wait()
		if n := accepted.Load(); n != 1 {
			t.Errorf("round %d: %d writes from version 1 accepted, want 1", round, n)
		}
	}
}
