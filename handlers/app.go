package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/prometheus/client_golang/prometheus"

	"exchange/domain"
	"exchange/fhirsearch"
	"exchange/oauth"
	"exchange/omh"
)

// Config holds what the HTTP layer serves.
type Config struct {
	Service *domain.Service
	OAuth   *oauth.Provider
	// Search parses FHIR searches and signs their page cursors.
	Search *fhirsearch.Translator
	// Schemas are the Open mHealth schemas offered to clients; nil when not
	// installed.
	Schemas *omh.Registry
	// Ping checks the database for /ready.
	Ping func(ctx context.Context) error
	// Loaded says, for /ready, what start-up ensured or loaded ("indexes",
	// "omh-schemas", "r5-definitions", "r4-maps") and whether it is in
	// place.
	Loaded map[string]bool
	// Capacity says, for /ready, whether the store is past the size it
	// serves comfortably; nil: it has no such size (MongoDB).
	Capacity func() *domain.StoreCapacity
	// Metrics receives the HTTP layer's series; nil: a registry of its own
	// (tests).
	Metrics prometheus.Registerer
	// MetricsHandler serves /metrics on this port; nil: not here
	// (METRICS_ADDR serves it elsewhere).
	MetricsHandler http.Handler
	Logger         *slog.Logger
	// TrustedProxies are the peers whose X-Forwarded-Proto and
	// X-Forwarded-Host give the origin of absolute URLs (the OAuth
	// provider's setting).
	TrustedProxies oauth.TrustedProxies
	// Console is the web console served under /console/ (package
	// console); nil: not served.
	Console http.Handler
	// Exports are the bulk export settings (EXPORT_QUEUE,
	// EXPORT_RETENTION); zero: domain.DefaultExportLimits.
	Exports domain.ExportLimits
}

// server carries the dependencies of the route handlers.
type server struct {
	service  *domain.Service
	oauth    *oauth.Provider
	search   *fhirsearch.Translator
	catalog  *fhirsearch.Catalog // the types served: search's
	schemas  *omh.Registry
	ping     func(ctx context.Context) error
	capacity func() *domain.StoreCapacity
	loaded   map[string]bool
	log      *slog.Logger
	metrics  *metrics
	native   map[string]nativeType // by FHIR type
	proxies  oauth.TrustedProxies
	// capabilityResources are the CapabilityStatement's resource entries,
	// rendered on first use.
	capabilityResources func() (json.RawMessage, error)
	exportLimits        domain.ExportLimits
	polls               polls // of export jobs' status, for 429
}

// New returns the Fiber application with every route.
func New(c Config) *fiber.App {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = prometheus.NewRegistry()
	}
	s := &server{service: c.Service, oauth: c.OAuth, search: c.Search, catalog: c.Search.Catalog(), schemas: c.Schemas, ping: c.Ping, capacity: c.Capacity,
		loaded: c.Loaded, log: c.Logger, metrics: newMetrics(c.Metrics, c.Search.Catalog()), proxies: c.TrustedProxies}
	s.native = s.nativeTypes()
	if s.exportLimits = c.Exports; s.exportLimits == (domain.ExportLimits{}) {
		s.exportLimits = domain.DefaultExportLimits
	}
	s.capabilityResources = sync.OnceValues(func() (json.RawMessage, error) { return capabilityResources(s.catalog) })
	app := fiber.New(fiber.Config{
		AppName:               "exchange",
		CaseSensitive:         true,
		DisableStartupMessage: true,
		ErrorHandler:          s.handleError,
		BodyLimit:             bodyLimit,
		ReadBufferSize:        readBufferSize,
		// No route takes form uploads: a multipart body is read as the JSON
		// it is not, and refused in the route's own format.
		DisablePreParseMultipartForm: true,
		ReadTimeout:                  time.Minute,
		WriteTimeout:                 5 * time.Minute,
		IdleTimeout:                  2 * time.Minute,
		JSONEncoder:                  marshalJSON,
	})
	app.Server().ErrorHandler = s.readErrorHandler(app)
	app.Use(s.withProxies, s.observe, recover.New())
	app.Get("/health", s.health)
	app.Get("/ready", s.ready)
	if c.MetricsHandler != nil {
		app.Get("/metrics", netHTTP(c.MetricsHandler))
	}
	app.All("/o/*", netHTTP(c.OAuth.Handler()))
	if c.Console != nil {
		console := netHTTP(c.Console)
		app.All("/console", console)
		app.All("/console/*", console)
	}
	s.registerExportFiles(app, fhirCanonical)
	s.registerExportFiles(app, fhirAlias)
	s.registerFHIR(app, fhirCanonical)
	s.registerFHIR(app, fhirAlias)
	s.registerImport(app)

	api := adminRoutes{app.Group("/api/v1", s.authenticate, s.adminScope)}
	api.Get("/users/profile", s.profile)
	api.Get("/users", accepts("email"), s.listUsers)
	api.Patch("/users/:id", s.updateUser)

	api.Get("/organizations", accepts("partOf"), s.listOrganizations)
	api.Post("/organizations", s.createOrganization)
	api.Get("/organizations/:id", s.getOrganization)
	api.Patch("/organizations/:id", s.updateOrganization)
	api.Delete("/organizations/:id", s.deleteOrganization)
	api.Get("/organizations/:id/tree", s.getOrganization)
	api.Get("/organizations/:id/users", listOf(pathID("id"), s.service.Members, toMemberJSON))
	api.Post("/organizations/:id/users", s.addMember)
	api.Patch("/organizations/:id/users/:userId", s.changeMember)
	api.Delete("/organizations/:id/users/:userId", unlink("userId", s.service.RemoveMember))
	api.Get("/organizations/:id/studies", listOf(pathID("id"), s.service.ListStudies, toStudyJSON))

	api.Get("/practitioners", accepts("organizationId"), listOf(queryIDOf("organizationId"), s.service.ListPractitioners, toPractitionerJSON))
	api.Post("/practitioners", s.createPractitioner)
	api.Get("/practitioners/:id", readWith(s.service.PractitionerByID, writePractitioner))
	api.Patch("/practitioners/:id", s.updatePractitioner)

	api.Get("/patients", accepts(patientFilters...), s.listPatients)
	api.Post("/patients", s.createPatient)
	api.Get("/patients/global_lookup", accepts("email"), s.lookupPatients)
	api.Get("/patients/:id", readWith(s.service.PatientByID, s.writePatient))
	api.Patch("/patients/:id", s.updatePatient)
	api.Delete("/patients/:id", s.deletePatient)
	api.Post("/patients/:id/invitation", s.invitePatient)
	api.Get("/patients/:id/invitations", s.listInvitations)
	api.Delete("/patients/:id/invitations/:invitationId", s.cancelInvitation)
	api.Post("/patients/:id/invitations/:invitationId/reissue", s.reissueInvitation)
	api.Get("/patients/:id/consents", s.getConsents)
	api.Post("/patients/:id/consents", s.writeConsents(fiber.StatusCreated, s.service.AnswerConsents))
	api.Patch("/patients/:id/consents", s.writeConsents(fiber.StatusOK, s.service.UpdateConsents))
	api.Delete("/patients/:id/consents", s.writeConsents(fiber.StatusNoContent, s.service.WithdrawConsents))

	api.Get("/studies", accepts("organizationId"), listOf(queryIDOf("organizationId"), s.service.ListStudies, toStudyJSON))
	api.Post("/studies", s.createStudy)
	api.Get("/studies/:id", readWith(s.service.StudyByID, writeStudy))
	api.Patch("/studies/:id", s.updateStudy)
	api.Delete("/studies/:id", s.deleteStudy)
	api.Get("/studies/:id/patients", listWith(pathID("id"), s.service.StudyPatients, s.writePatients))
	api.Post("/studies/:id/patients", s.enrollPatients)
	api.Delete("/studies/:id/patients", s.unenrollPatients)
	api.Get("/studies/:id/scope_requests", s.scopeRequests)
	api.Post("/studies/:id/scope_requests", s.addScopeRequest)
	api.Delete("/studies/:id/scope_requests/:scopeCodeId", unlink("scopeCodeId", s.service.RemoveScopeRequest))
	api.Get("/studies/:id/data_sources", s.studyDataSources)
	api.Post("/studies/:id/data_sources", s.addStudyDataSource)
	api.Delete("/studies/:id/data_sources/:dataSourceId", unlink("dataSourceId", s.service.RemoveStudyDataSource))

	api.Get("/data_sources", s.listDataSources)
	api.Post("/data_sources", s.createDataSource)
	api.Get("/data_sources/:id", s.getDataSource)
	api.Patch("/data_sources/:id", s.updateDataSource)
	api.Delete("/data_sources/:id", s.deleteDataSource)
	api.Get("/scope_codes", s.listScopeCodes)
	api.Post("/scope_codes", s.createScopeCode)

	api.Get("/fhir_sources", s.listFHIRSources)
	api.Post("/fhir_sources", s.createFHIRSource)
	api.Get("/fhir_sources/:id", readOf(s.service.FHIRSourceByID, fhirSourceJSONWith(s.service.SourceBase())))
	api.Delete("/fhir_sources/:id", s.deleteFHIRSource)
	s.registerPatientAccess(api)

	api.Get("/omh_schemas", s.listSchemas)
	api.Get("/omh_schemas/:name/:version", s.getSchema)
	api.Get("/omh_schemas/:namespace/:name/:version", s.getSchema)

	api.Get("/oauth_clients", s.listClients)
	api.Post("/oauth_clients", s.createClient)

	api.Get("/identity_providers", s.listIdentityProviders)
	api.Post("/identity_providers", s.createIdentityProvider)
	api.Get("/identity_providers/:id", s.getIdentityProvider)
	api.Patch("/identity_providers/:id", s.updateIdentityProvider)
	api.Delete("/identity_providers/:id", s.deleteIdentityProvider)
	api.Get("/identity_providers/:id/invitations", s.listIdentityInvitations)
	api.Post("/identity_providers/:id/invitations", s.inviteToIdentityProvider)
	api.Delete("/identity_providers/:id/invitations/:email", s.cancelIdentityInvitation)
	return app
}

// health is liveness: the process answers. It asks nothing of the
// database, so an outage there does not get healthy processes restarted.
func (s *server) health(c *fiber.Ctx) error {
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.JSON(fiber.Map{"status": "ok"})
}

// readyTimeout bounds /ready's ping of the database.
const readyTimeout = 3 * time.Second

// ready is readiness: the database answers a ping within readyTimeout,
// and what start-up ensures (indexes) and loads (the standards data) is in
// place. 503 names what is not.
func (s *server) ready(c *fiber.Ctx) error {
	ctx, cancel := context.WithTimeout(c.UserContext(), readyTimeout)
	defer cancel()
	report := fiber.Map{"status": "ready", "database": "ok"}
	status := fiber.StatusOK
	if err := s.ping(ctx); err != nil {
		s.log.Warn("readiness check found the database unreachable", "error", err)
		report["database"], status = "unreachable", fiber.StatusServiceUnavailable
	}
	for name, ok := range s.loaded {
		report[name] = "ok"
		if !ok {
			report[name], status = "missing", fiber.StatusServiceUnavailable
		}
	}
	if s.capacity != nil && s.capacity() != nil {
		// Still ready: it serves, ever slower. No count: /ready is public.
		report["embeddedDatabase"] = "past its comfortable size: searches slow down with every observation; move to MongoDB (MONGODB_URI)"
	}
	if status != fiber.StatusOK {
		report["status"] = "unavailable"
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.Status(status).JSON(report)
}

// marshalJSON encodes like encoding/json without escaping <, > and & (URLs
// in list links stay readable). Values that write their own JSON
// (jsonAppender: the Bundles of searches and uploads) write the same bytes
// faster.
func marshalJSON(v any) ([]byte, error) {
	if a, ok := v.(jsonAppender); ok {
		return a.appendJSON(nil), nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
