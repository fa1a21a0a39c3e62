package repo

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"exchange/domain"
)

// SizeWatch follows how many observations the embedded database holds
// against what it serves comfortably. Check warns in the log when the
// count crosses the size (and once a day while it stays past it);
// Capacity says so to whoever shows it.
type SizeWatch struct {
	db          *DB
	comfortable int64
	log         *slog.Logger

	mu     sync.Mutex
	count  int64
	past   bool
	warned time.Time
}

// NewSizeWatch watches db against comfortable observations.
func NewSizeWatch(db *DB, comfortable int64, log *slog.Logger) *SizeWatch {
	return &SizeWatch{db: db, comfortable: comfortable, log: log}
}

// sizeWarnEvery is how often the warning repeats while the store stays
// past its size.
const sizeWarnEvery = 24 * time.Hour

// Check counts the observations (from the collection's statistics: no
// scan) and warns when the store is newly past its size, or a day after
// the last warning.
func (w *SizeWatch) Check(ctx context.Context, now time.Time) error {
	n, err := w.db.ObservationCount(ctx)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.count = n
	crossed := n > w.comfortable && !w.past
	w.past = n > w.comfortable
	if w.past && (crossed || now.Sub(w.warned) >= sizeWarnEvery) {
		w.warned = now
		w.log.Warn("the embedded database holds more observations than it searches comfortably: searches slow down with every one; "+
			"run the exchange on MongoDB (set MONGODB_URI, or docker compose up)",
			"observations", n, "comfortable", w.comfortable)
	}
	return nil
}

// Capacity is what the last Check found: nil while the store is within
// its size.
func (w *SizeWatch) Capacity() *domain.StoreCapacity {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.past {
		return nil
	}
	return &domain.StoreCapacity{Observations: w.count, Comfortable: w.comfortable}
}
