package repo

import (
	"context"
	"time"

	"exchange/domain"
)

// retryBusySearch is what a search refused for want of a slot asks the
// client to wait (Retry-After).
const retryBusySearch = 5 * time.Second

// searchSlot takes one of FerretDB's search slots for a search, waiting
// at most searchQueue; release gives it back. Without a bound it takes
// nothing. A search still waiting when the queue time is up is refused
// with CodeUnavailable (503 and Retry-After): the embedded database
// decodes every document of a collection for each search, and more at
// once only share the same cores and multiply the memory held.
func (d *DB) searchSlot(ctx context.Context) (release func(), err error) {
	if d.searches == nil {
		return func() {}, nil
	}
	free := func() { <-d.searches }
	select {
	case d.searches <- struct{}{}:
		return free, nil
	default:
	}
	start := time.Now()
	timer := time.NewTimer(d.searchQueue)
	defer timer.Stop()
	select {
	case d.searches <- struct{}{}:
		d.metrics.searchWaited(start, "admitted")
		return free, nil
	case <-timer.C:
		d.metrics.searchWaited(start, "refused")
		return nil, &domain.Error{Code: domain.CodeUnavailable, RetryAfter: retryBusySearch,
			Message: "the embedded database is busy with other searches; try again shortly (for more, run the exchange on MongoDB: MONGODB_URI)"}
	case <-ctx.Done():
		d.metrics.searchWaited(start, "abandoned")
		return nil, ctx.Err()
	}
}

// searchWaited counts a search that had to wait for a slot.
func (m *Metrics) searchWaited(start time.Time, outcome string) {
	if m == nil {
		return
	}
	m.searchWaits.WithLabelValues(outcome).Inc()
	m.searchWaitedSeconds.Observe(time.Since(start).Seconds())
}
