package console

import (
	"net/http"
	"slices"
	"strconv"

	"exchange/domain"
)

// EHRCallbackPath is where a patient's EHR sends the browser back after
// the patient signed in and approved a connection: the patient, signed
// in to the exchange (the same patient who began it), finishes it here.
// Every EHR client registration of the exchange lists {origin}/this.
const EHRCallbackPath = "/console/records/callback"

// recordsPage is "My connected records": the patient's connections with
// their last pulls, and the brand picker.
type recordsPage struct {
	Patient     *domain.Patient
	Connections []connectionView
	// Own says the page is the patient's (who may connect, pull and
	// disconnect); a practitioner reads it.
	Own bool
	// Search is the brand picker's query and its results.
	Q, State   string
	Searched   bool
	Facilities []domain.EHRFacility
}

// connectionView is a connection and its recent pulls.
type connectionView struct {
	domain.EHRConnection
	BrandName string
	Runs      []domain.PullRun
}

// records is the patient's own page of connected records.
func (c *Console) records(w http.ResponseWriter, r *http.Request, s *session) error {
	if s.actor.Patient == nil {
		return domain.Errorf(domain.CodeForbidden, "only patients connect their records: a patient's connected records are on their page")
	}
	page, err := c.recordsOf(r, s, s.actor.Patient.ID)
	if err != nil {
		return err
	}
	page.Q, page.State = r.URL.Query().Get("q"), r.URL.Query().Get("state")
	if page.Q != "" || page.State != "" {
		page.Searched = true
		if page.Facilities, err = c.Service.SearchEHRFacilities(r.Context(), page.Q, page.State, "", domain.DefaultBrandLimit); err != nil {
			return err
		}
	}
	c.render(w, r, s, http.StatusOK, "records.html", "My connected records", "records", page)
	return nil
}

// patientRecords is a patient's connected records as study staff read
// them: per connection, the last pulls, their counts and failures.
func (c *Console) patientRecords(w http.ResponseWriter, r *http.Request, s *session) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	page, err := c.recordsOf(r, s, id)
	if err != nil {
		return err
	}
	c.render(w, r, s, http.StatusOK, "records.html", "Connected records of "+patientName(*page.Patient), "patients", page)
	return nil
}

// runsShown is how many pulls of a connection the page shows.
const runsShown = 5

func (c *Console) recordsOf(r *http.Request, s *session, patientID int64) (*recordsPage, error) {
	ctx := r.Context()
	p, err := c.Service.PatientByID(ctx, s.actor, patientID)
	if err != nil {
		return nil, err
	}
	conns, err := c.Service.EHRConnectionsOfPatient(ctx, s.actor, patientID)
	if err != nil {
		return nil, err
	}
	runs, err := c.Service.PullRunsOfPatient(ctx, s.actor, patientID, domain.Page{Number: 1, Size: 100})
	if err != nil {
		return nil, err
	}
	page := &recordsPage{Patient: p, Own: s.actor.Patient != nil && s.actor.Patient.ID == patientID}
	for _, conn := range conns {
		v := connectionView{EHRConnection: conn, BrandName: conn.Issuer}
		if b, err := c.Service.EHRBrandByID(ctx, conn.BrandID); err == nil {
			v.BrandName = b.Name
		}
		for _, run := range runs.Items {
			if run.ConnectionID == conn.ID && len(v.Runs) < runsShown {
				v.Runs = append(v.Runs, run)
			}
		}
		page.Connections = append(page.Connections, v)
	}
	return page, nil
}

// connectPage is the step between the brand picked and the EHR: what
// will happen, and the link there (a link, not a redirect of the form:
// the console's form-action policy keeps forms on the exchange).
type connectPage struct {
	Brand        *domain.EHRBrand
	AuthorizeURL string
	KeepUpdated  bool
}

// connect begins a connection to the brand the form names.
func (c *Console) connect(w http.ResponseWriter, r *http.Request, s *session) error {
	brand, err := formID(r, "brand")
	if err != nil {
		return err
	}
	keep := r.PostFormValue("keepUpdated") == "on"
	to, err := c.Service.StartEHRConnection(r.Context(), s.actor, brand, c.OAuth.Origin(r)+EHRCallbackPath, keep)
	if err != nil {
		return err
	}
	b, err := c.Service.EHRBrandByID(r.Context(), brand)
	if err != nil {
		return err
	}
	c.render(w, r, s, http.StatusOK, "connect.html", "Connect "+b.Name, "records", connectPage{Brand: b, AuthorizeURL: to, KeepUpdated: keep})
	return nil
}

// ehrCallback finishes a connection where the EHR sent the browser back.
func (c *Console) ehrCallback(w http.ResponseWriter, r *http.Request, s *session) error {
	q := r.URL.Query()
	if _, err := c.Service.FinishEHRConnection(r.Context(), s.actor, q.Get("state"), q.Get("code"), q.Get("error")); err != nil {
		return err
	}
	return seeOther(w, r, "/console/records/", "connected")
}

// connectionForm runs a form on one connection of the path.
func (c *Console) connectionForm(act func(r *http.Request, s *session, id int64) error, done string) handler {
	return func(w http.ResponseWriter, r *http.Request, s *session) error {
		id, err := pathID(r, "id")
		if err != nil {
			return err
		}
		if err := act(r, s, id); err != nil {
			return err
		}
		return seeOther(w, r, "/console/records/", done)
	}
}

func (c *Console) syncRecords(r *http.Request, s *session, id int64) error {
	_, err := c.Service.SyncEHRConnection(r.Context(), s.actor, id)
	return err
}

func (c *Console) disconnectRecords(r *http.Request, s *session, id int64) error {
	return c.Service.DisconnectEHR(r.Context(), s.actor, id)
}

func (c *Console) keepRecordsUpdated(r *http.Request, s *session, id int64) error {
	keep, err := strconv.ParseBool(r.PostFormValue("keepUpdated"))
	if err != nil {
		return domain.FieldErrorf("keepUpdated", "is true or false")
	}
	_, err = c.Service.SetEHRSync(r.Context(), s.actor, id, keep)
	return err
}

// runTotals sums a run's types, for its summary line.
func runTotals(r domain.PullRun) domain.PullTotals { return r.Totals() }

// failedTypes are the types of a run that were skipped or had refusals.
func failedTypes(r domain.PullRun) []domain.PullTypeResult {
	return slices.DeleteFunc(slices.Clone(r.Types), func(t domain.PullTypeResult) bool { return t.Skipped == "" && t.Refused == 0 })
}
