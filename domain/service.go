package domain

import (
	"time"

	"exchange/omh"
)

// SchemaValidator checks an Open mHealth data point against its official
// schema; *omh.Registry is one. It returns an *omh.ValidationError when the
// data point does not conform.
type SchemaValidator interface {
	Validate(dp *omh.DataPoint) error
}

// StructureOnly accepts every data point that parsed: the validator of a
// service started without the OMH schemas (scripts/setup not run), which
// says so at start-up.
type StructureOnly struct{}

// Validate implements SchemaValidator.
func (StructureOnly) Validate(*omh.DataPoint) error { return nil }

// Service carries out the use cases. It is safe for concurrent use.
type Service struct {
	store        Store
	observations ObservationStore
	schemas      SchemaValidator
	now          func() time.Time
}

// NewService returns a Service over the store. schemas validates Open
// mHealth payloads (nil: structure only). now is the clock; nil means
// time.Now. Tests inject a clock to step over expiry without sleeping.
func NewService(store Store, schemas SchemaValidator, now func() time.Time) *Service {
	if now == nil {
		now = time.Now
	}
	if schemas == nil {
		schemas = StructureOnly{}
	}
	return &Service{store: store, observations: store, schemas: schemas, now: now}
}

// Now returns the service clock's time in UTC.
func (s *Service) Now() time.Time { return s.now().UTC() }
