package domain

import "time"

// Service carries out the use cases. It is safe for concurrent use.
type Service struct {
	store Store
	now   func() time.Time
}

// NewService returns a Service over the store. now is the clock; nil means
// time.Now. Tests inject a clock to step over expiry without sleeping.
func NewService(store Store, now func() time.Time) *Service {
	if now == nil {
		now = time.Now
	}
	return &Service{store: store, now: now}
}

// Now returns the service clock's time in UTC.
func (s *Service) Now() time.Time { return s.now().UTC() }
