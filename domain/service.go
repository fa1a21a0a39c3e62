package domain

import (
	"context"
	"crypto/rand"
	"log/slog"
	"strings"
	"time"

	"exchange/omh"
)

// SchemaValidator checks a data point (Open mHealth or IEEE 1752 header)
// against the official schemas; *omh.Registry is one. It returns an
// *omh.ValidationError when the data point does not conform.
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
	store      Store
	schemas    SchemaValidator
	sourceBase string
	validator  ResourceValidator
	indexer    ResourceIndexer
	converter  R4Converter
	searches   IDSearches
	// maxDataPoint bounds one data point, in bytes (MAX_DATA_POINT_BYTES).
	maxDataPoint int
	auditor      Auditor
	mailer       Mailer // nil: no delivery channel
	now          func() time.Time
	log          *slog.Logger
	signIns      keyLocks // sign-in attempts in progress, by account and address
	throttleKey  []byte   // the HMAC key of the sign-in throttle's account keys
	// Bulk export: the searches and files of jobs, and the wake-up of this
	// process's ExportRunner when a job is queued here.
	exportSearches ExportSearches
	exportFiles    ExportFiles
	exportWake     chan struct{}
	// fileProviders are IDENTITY_PROVIDERS_FILE's identity providers.
	fileProviders []IdentityProvider
	// seal seals what the exchange keeps secret at rest: the client
	// secrets of the other identity providers, EHR client secrets and
	// patients' EHR tokens (SecretsKey).
	seal *sealer
	patientAccess
}

// Config is what a Service is made of.
type Config struct {
	Store Store
	// Schemas validates data points; nil: structure only.
	Schemas SchemaValidator
	// SourceBase is FHIR_SOURCE_BASE: FHIR source n is SourceBase/n.
	SourceBase string
	// Validator and Indexer check and index imported resources; without
	// them (the FHIR packages are not installed) the imported store is
	// read-only.
	Validator ResourceValidator
	Indexer   ResourceIndexer
	// Converter converts R4 resources for /fhir-import/R4; nil: the R4
	// maps are not installed and imports are refused.
	Converter R4Converter
	// Searches makes the searches of reads under tokens whose scopes
	// narrow them; nil: such reads fail (every token without narrowing
	// scopes works).
	Searches IDSearches
	// MaxDataPointBytes bounds the size of one data point, decoded from its
	// Base64 (MAX_DATA_POINT_BYTES); 0 means DefaultMaxDataPointBytes.
	MaxDataPointBytes int
	// Auditor keeps the audit trail; nil: nothing is recorded (tests that
	// do not look at it).
	Auditor Auditor
	// Mailer delivers invitations and notices to patients' email
	// addresses; nil: there is no delivery channel (invitations.go).
	Mailer Mailer
	// Now is the clock; nil means time.Now. Tests inject a clock to step
	// over expiry without sleeping.
	Now func() time.Time
	// Logger receives security events (refused sign-ins); nil means
	// slog.Default().
	Logger *slog.Logger
	// EHR is the exchange's client of patients' EHRs (patient access);
	// nil: patient access is not offered. Its tokens and client secrets
	// are sealed with SecretsKey.
	EHR EHR
	// PullLimits bound patient access pulls; zero fields take
	// DefaultPullLimits'.
	PullLimits PullLimits
	// ThrottleKey is the HMAC key that names an account in the sign-in
	// throttle's records and log lines (newLoginKeys), derived from
	// SECRET_KEY for this one purpose, so that every instance sharing the
	// database counts an account's failures together. nil: a random key
	// of this service, whose counts no other instance shares (tests).
	ThrottleKey []byte
	// ExportSearches and ExportFiles serve bulk exports; without them
	// $export is not offered (CodeNotSupported).
	ExportSearches ExportSearches
	ExportFiles    ExportFiles
	// IdentityProviders are those of IDENTITY_PROVIDERS_FILE, normalized
	// (IdentityProvider.Normalize); read-only.
	IdentityProviders []IdentityProvider
	// SecretsKey (32 bytes, derived from SECRET_KEY) seals the client
	// secrets of identity providers configured through the admin API and
	// of the exchange's EHR registrations, and patients' EHR tokens. nil:
	// a random key of this service (tests).
	SecretsKey []byte
}

// NewService returns a Service as configured.
func NewService(c Config) *Service {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Schemas == nil {
		c.Schemas = StructureOnly{}
	}
	if c.MaxDataPointBytes <= 0 {
		c.MaxDataPointBytes = DefaultMaxDataPointBytes
	}
	if c.Auditor == nil {
		c.Auditor = noAudit{}
	}
	if c.ThrottleKey == nil {
		c.ThrottleKey = make([]byte, 32)
		_, _ = rand.Read(c.ThrottleKey) // never fails (crypto/rand)
	}
	if c.SecretsKey == nil {
		c.SecretsKey = make([]byte, 32)
		_, _ = rand.Read(c.SecretsKey) // never fails (crypto/rand)
	}
	for i := range c.IdentityProviders {
		c.IdentityProviders[i].FromFile = true
	}
	s := &Service{store: c.Store, schemas: c.Schemas, sourceBase: strings.TrimRight(c.SourceBase, "/"),
		validator: c.Validator, indexer: c.Indexer, converter: c.Converter, searches: c.Searches, maxDataPoint: c.MaxDataPointBytes,
		auditor: c.Auditor, mailer: c.Mailer, now: c.Now, log: c.Logger, throttleKey: c.ThrottleKey,
		fileProviders: c.IdentityProviders, seal: newSealer(c.SecretsKey),
		exportSearches: c.ExportSearches, exportFiles: c.ExportFiles, exportWake: make(chan struct{}, 1)}
	s.ehr, s.limits = c.EHR, c.PullLimits.withDefaults()
	s.background, s.stop = context.WithCancel(context.Background())
	return s
}

// wakeExports tells this process's ExportRunner that a job is queued.
func (s *Service) wakeExports() {
	select {
	case s.exportWake <- struct{}{}:
	default:
	}
}

// Now returns the service clock's time in UTC.
func (s *Service) Now() time.Time { return s.now().UTC() }

// SourceBase returns FHIR_SOURCE_BASE, under which FHIR sources are named.
func (s *Service) SourceBase() string { return s.sourceBase }
