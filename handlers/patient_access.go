package handlers

import (
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"exchange/console"
	"exchange/domain"
)

// Patient access over the admin API: the brand picker (JupyterHealth
// Exchange's shape), the import of Brands Bundles and the client
// registrations (superusers), a patient's connections, and the records of
// pulls. docs/patient-access.md describes them.

// registerPatientAccess mounts the patient access routes on the admin API.
func (s *server) registerPatientAccess(api adminRoutes) {
	api.Get("/patient-access/brands", accepts("q", "state", "postal", "limit"), s.searchBrands)
	api.Post("/patient-access/brands", accepts("vendor"), s.importBrands)
	api.Get("/patient-access/clients", s.listEHRClients)
	api.Put("/patient-access/clients", s.setEHRClient)
	api.Post("/patient-access/connections", s.connectEHR)
	api.Patch("/patient-access/connections/:id", s.changeEHRConnection)
	api.Post("/patient-access/connections/:id/sync", s.syncEHRConnection)
	api.Delete("/patient-access/connections/:id", s.disconnectEHR)
	api.Get("/patients/:id/connections", s.patientConnections)
	api.Get("/patients/:id/imports", listOf(pathID("id"), s.service.PullRunsOfPatient, toPullRunJSON))
}

// brandJSON is a facility of the brand picker, as JupyterHealth Exchange
// answers it (snake_case), with the brand's id, which a connection names.
type brandJSON struct {
	FacilityName string `json:"facility_name"`
	AddressText  string `json:"address_text"`
	City         string `json:"city"`
	State        string `json:"state"`
	PostalCode   string `json:"postal_code"`
	BrandName    string `json:"brand_name"`
	BrandID      int64  `json:"brand_id"`
	FHIRBaseURL  string `json:"fhir_base_url"`
}

// searchBrands is GET /patient-access/brands?q=&state=&postal=&limit=:
// {"results": [...]}, sorted by brand then facility.
func (s *server) searchBrands(c *fiber.Ctx) error {
	limit := 0
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return domain.FieldErrorf("limit", "%q is not a number", v)
		}
		limit = n
	}
	found, err := s.service.SearchEHRFacilities(c.UserContext(), c.Query("q"), c.Query("state"), c.Query("postal"), limit)
	if err != nil {
		return err
	}
	out := make([]brandJSON, len(found))
	for i, f := range found {
		out[i] = brandJSON{f.Name, f.AddressText, f.City, f.State, f.PostalCode, f.BrandName, f.BrandID, f.FHIRBaseURL}
	}
	return c.JSON(fiber.Map{"results": out})
}

// importBrands is POST /patient-access/brands?vendor=: the body a SMART
// User-access Brands Bundle.
func (s *server) importBrands(c *fiber.Ctx) error {
	counts, err := s.service.ImportEHRBrands(c.UserContext(), actor(c), c.Body(), c.Query("vendor"))
	if err != nil {
		return err
	}
	skipped := counts.Skipped
	if skipped == nil {
		skipped = []string{}
	}
	return c.JSON(fiber.Map{"brands": counts.Brands, "brandsCreated": counts.BrandsCreated, "brandsUpdated": counts.BrandsUpdated,
		"facilities": counts.Facilities, "facilitiesCreated": counts.FacilitiesCreated, "skipped": skipped})
}

type ehrClientJSON struct {
	Brand       *int64    `json:"brand"`
	Vendor      *string   `json:"vendor"`
	ClientID    string    `json:"clientId"`
	HasSecret   bool      `json:"hasSecret"`
	Scopes      []string  `json:"scopes"`
	LastUpdated time.Time `json:"lastUpdated"`
}

func toEHRClientJSON(x domain.EHRClient) ehrClientJSON {
	out := ehrClientJSON{ClientID: x.ClientID, HasSecret: x.SealedSecret != nil, Scopes: x.Scopes, LastUpdated: x.LastUpdated}
	if x.BrandID != 0 {
		out.Brand = &x.BrandID
	} else {
		out.Vendor = &x.Vendor
	}
	if out.Scopes == nil {
		out.Scopes = []string{}
	}
	return out
}

func (s *server) listEHRClients(c *fiber.Ctx) error {
	clients, err := s.service.EHRClients(c.UserContext(), actor(c))
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"results": mapSlice(clients, toEHRClientJSON)})
}

// setEHRClient is PUT /patient-access/clients: the registration of a
// brand or a vendor. clientSecret left out keeps the stored one, "" makes
// the client public. The secret is never answered.
func (s *server) setEHRClient(c *fiber.Ctx) error {
	var in struct {
		Brand        int64    `json:"brand"`
		Vendor       string   `json:"vendor"`
		ClientID     string   `json:"clientId"`
		ClientSecret *string  `json:"clientSecret"`
		Scopes       []string `json:"scopes"`
	}
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	x, err := s.service.SetEHRClient(c.UserContext(), actor(c), domain.EHRClientChange{BrandID: in.Brand, Vendor: in.Vendor,
		ClientID: in.ClientID, Secret: in.ClientSecret, Scopes: in.Scopes})
	if err != nil {
		return err
	}
	return c.JSON(toEHRClientJSON(*x))
}

// connectEHR is POST /patient-access/connections {brand, keepUpdated}: a
// patient begins connecting their EHR. The answer's authorizeUrl is where
// their browser goes; the EHR sends it back to the console's callback,
// where the patient, signed in to the exchange, finishes it.
func (s *server) connectEHR(c *fiber.Ctx) error {
	var in struct {
		Brand       int64 `json:"brand"`
		KeepUpdated bool  `json:"keepUpdated"`
	}
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	if in.Brand == 0 {
		return domain.FieldErrorf("brand", "is required: the id of the brand picked (brand_id of the brand search)")
	}
	redirect := origin(c) + console.EHRCallbackPath
	to, err := s.service.StartEHRConnection(c.UserContext(), actor(c), in.Brand, redirect, in.KeepUpdated)
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(fiber.Map{"authorizeUrl": to, "redirectUri": redirect})
}

type ehrConnectionJSON struct {
	ID             int64      `json:"id"`
	Patient        int64      `json:"patient"`
	Brand          int64      `json:"brand"`
	FHIRBaseURL    string     `json:"fhirBaseUrl"`
	EHRPatientID   string     `json:"ehrPatientId"`
	FHIRSource     int64      `json:"fhirSource"`
	Status         string     `json:"status"`
	KeepUpdated    bool       `json:"keepUpdated"`
	Scope          string     `json:"scope"`
	LastRunAt      *time.Time `json:"lastRunAt"`
	LastCompleteAt *time.Time `json:"lastCompleteAt"`
	Created        time.Time  `json:"created"`
}

func optionalTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func toEHRConnectionJSON(x domain.EHRConnection) ehrConnectionJSON {
	return ehrConnectionJSON{x.ID, x.PatientID, x.BrandID, x.Issuer, x.EHRPatientID, x.SourceID, string(x.Status), x.SyncAllowed, x.Scope,
		optionalTime(x.LastRunAt), optionalTime(x.LastCompleteAt), x.CreatedAt}
}

func (s *server) patientConnections(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	cs, err := s.service.EHRConnectionsOfPatient(c.UserContext(), actor(c), id)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"results": mapSlice(cs, toEHRConnectionJSON)})
}

// changeEHRConnection is PATCH /patient-access/connections/:id
// {keepUpdated}: the patient lets the exchange keep the record up to date,
// or stops it.
func (s *server) changeEHRConnection(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	var in struct {
		KeepUpdated *bool `json:"keepUpdated"`
	}
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	if in.KeepUpdated == nil {
		return domain.FieldErrorf("keepUpdated", "is required")
	}
	x, err := s.service.SetEHRSync(c.UserContext(), actor(c), id, *in.KeepUpdated)
	if err != nil {
		return err
	}
	return c.JSON(toEHRConnectionJSON(*x))
}

// syncEHRConnection is POST /patient-access/connections/:id/sync: a pull
// now, 202 with its record (running); 409 while another runs.
func (s *server) syncEHRConnection(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	run, err := s.service.SyncEHRConnection(c.UserContext(), actor(c), id)
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusAccepted).JSON(toPullRunJSON(*run))
}

func (s *server) disconnectEHR(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	if err := s.service.DisconnectEHR(c.UserContext(), actor(c), id); err != nil {
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}

type pullTypeJSON struct {
	Type       string         `json:"type"`
	Fetched    int            `json:"fetched"`
	Stored     int            `json:"stored"`
	Duplicates int            `json:"duplicates"`
	Changed    int            `json:"changed"`
	Refused    int            `json:"refused"`
	Skipped    string         `json:"skipped,omitempty"`
	Reasons    []reasonJSON   `json:"reasons"`
	Dropped    map[string]int `json:"dropped"`
}

type reasonJSON struct {
	Reason string `json:"reason"`
	Count  int    `json:"count"`
}

type pullRunJSON struct {
	ID         int64          `json:"id"`
	Connection int64          `json:"connection"`
	Patient    int64          `json:"patient"`
	FHIRSource int64          `json:"fhirSource"`
	Brand      string         `json:"brandName"`
	EHR        string         `json:"fhirBaseUrl"`
	Trigger    string         `json:"trigger"`
	Since      *time.Time     `json:"since"`
	Started    time.Time      `json:"started"`
	Ended      *time.Time     `json:"ended"`
	Outcome    string         `json:"outcome"`
	Message    string         `json:"message,omitempty"`
	Types      []pullTypeJSON `json:"types"`
}

func toPullRunJSON(r domain.PullRun) pullRunJSON {
	out := pullRunJSON{ID: r.ID, Connection: r.ConnectionID, Patient: r.PatientID, FHIRSource: r.SourceID, Brand: r.BrandName, EHR: r.Issuer,
		Trigger: string(r.Trigger), Since: optionalTime(r.Since), Started: r.StartedAt, Ended: optionalTime(r.EndedAt),
		Outcome: string(r.Outcome), Message: r.Message, Types: []pullTypeJSON{}}
	for _, t := range r.Types {
		tj := pullTypeJSON{t.Type, t.Fetched, t.Stored, t.Duplicates, t.Changed, t.Refused, t.Skipped, []reasonJSON{}, t.Dropped}
		for _, reason := range t.Reasons {
			tj.Reasons = append(tj.Reasons, reasonJSON{reason.Reason, reason.Count})
		}
		if tj.Dropped == nil {
			tj.Dropped = map[string]int{}
		}
		out.Types = append(out.Types, tj)
	}
	return out
}
