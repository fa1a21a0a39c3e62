package console

import (
	"io"
	"net/http"

	"github.com/klauspost/compress/gzip"

	"exchange/domain"
)

// Bulk exports from the console: a study's data (as its Group/$export),
// or one patient's record (Patient/$export), kicked off by the signed-in
// user, who then follows the job on its page and downloads its files. The
// jobs are the FHIR API's (domain/exports.go), owned by the user with no
// client: only they see them, in the console.

// exportsPrefix is where a job's page lives.
const exportsPrefix = Prefix + "exports/"

// exportStudy kicks off the export of a study the user may read.
func (c *Console) exportStudy(w http.ResponseWriter, r *http.Request, s *session) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	return c.startExport(w, r, s, domain.ExportRequest{Level: domain.ExportGroup, GroupID: id})
}

// exportPatient kicks off the export of one patient's record: the
// patient's own, or one the user may read (a patient out of sight answers
// as one that does not exist).
func (c *Console) exportPatient(w http.ResponseWriter, r *http.Request, s *session) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	if _, err := c.Service.PatientByID(r.Context(), s.actor, id); err != nil {
		return err
	}
	return c.startExport(w, r, s, domain.ExportRequest{Level: domain.ExportPatient, Patients: []int64{id}})
}

func (c *Console) startExport(w http.ResponseWriter, r *http.Request, s *session, req domain.ExportRequest) error {
	req.Format = domain.ExportFHIR
	req.URL = "console:" + r.URL.Path
	limits := c.Exports
	if limits == (domain.ExportLimits{}) {
		limits = domain.DefaultExportLimits
	}
	j, err := c.Service.StartExport(r.Context(), s.actor, req, limits)
	if err != nil {
		return err
	}
	return seeOther(w, r, exportsPrefix+j.ID+"/", "")
}

// exportPage is the data of a job's page.
type exportPage struct {
	Job *domain.ExportJob
	// Running: the page reloads itself until the job ends.
	Running bool
}

// exportJob shows a job of the user: its progress, its files, or why it
// failed.
func (c *Console) exportJob(w http.ResponseWriter, r *http.Request, s *session) error {
	j, err := c.Service.ExportJobFor(r.Context(), s.actor, r.PathValue("job"))
	if err != nil {
		return err
	}
	page := exportPage{Job: j, Running: j.State == domain.ExportQueued || j.State == domain.ExportRunning}
	c.render(w, r, s, http.StatusOK, "export.html", "Export", "", page)
	return nil
}

// exportFile downloads a file of a completed job, uncompressed.
func (c *Console) exportFile(w http.ResponseWriter, r *http.Request, s *session) error {
	f, err := c.Service.OpenExportFile(r.Context(), s.actor, r.PathValue("job"), r.PathValue("file"))
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	defer zr.Close()
	h := w.Header()
	h.Set("Content-Type", string(f.Format))
	h.Set("Content-Disposition", `attachment; filename="`+f.File.Name+`"`)
	h.Set("Cache-Control", "no-store")
	_, _ = io.Copy(w, zr) // begun: a failure now can only cut the answer short
	return nil
}

// deleteExport removes a job of the user, and its files.
func (c *Console) deleteExport(w http.ResponseWriter, r *http.Request, s *session) error {
	if err := c.Service.DeleteExport(r.Context(), s.actor, r.PathValue("job")); err != nil {
		return err
	}
	return seeOther(w, r, Prefix, "exportDeleted")
}
