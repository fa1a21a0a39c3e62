package handlers

import (
	"github.com/gofiber/fiber/v2"

	"exchange/domain"
)

type studyInJSON struct {
	OrganizationID int64   `json:"organizationId"`
	Name           *string `json:"name"`
	Description    *string `json:"description"`
	IconURL        *string `json:"iconUrl"`
}

func (s *server) createStudy(c *fiber.Ctx) error {
	var in studyInJSON
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	st, err := s.service.CreateStudy(c.UserContext(), actor(c), domain.NewStudy{
		OrganizationID: in.OrganizationID, Name: deref(in.Name), Description: deref(in.Description), IconURL: deref(in.IconURL)})
	if err != nil {
		return err
	}
	view, err := s.service.StudyByID(c.UserContext(), actor(c), st.ID)
	if err != nil {
		return err
	}
	return writeStudy(c.Status(fiber.StatusCreated), *view)
}

// updateStudy applies a PATCH made from the version If-Match names, if
// any: when the study has changed since, nothing is written (412), so
// that two editors never silently write over each other.
func (s *server) updateStudy(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	version, err := ifMatchVersion(c)
	if err != nil {
		return err
	}
	var in studyInJSON
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	if in.OrganizationID != 0 {
		return domain.FieldErrorf("organizationId", "a study cannot move to another organization")
	}
	st, err := s.service.UpdateStudy(c.UserContext(), actor(c), id,
		domain.StudyPatch{Name: in.Name, Description: in.Description, IconURL: in.IconURL, Unchanged: version})
	if err != nil {
		return err
	}
	return writeStudy(c, *st)
}

func (s *server) deleteStudy(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	if err := s.service.DeleteStudy(c.UserContext(), actor(c), id); err != nil {
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}

// patientIDsJSON is the body of enrollment changes.
type patientIDsJSON struct {
	PatientIDs []int64 `json:"patientIds"`
}

func (s *server) enrollPatients(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	var in patientIDsJSON
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	if err := s.service.EnrollPatients(c.UserContext(), actor(c), id, in.PatientIDs); err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(fiber.Map{"studyId": id, "patientIds": in.PatientIDs})
}

func (s *server) unenrollPatients(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	var in patientIDsJSON
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	if err := s.service.UnenrollPatients(c.UserContext(), actor(c), id, in.PatientIDs); err != nil {
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}

func (s *server) scopeRequests(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	codes, err := s.service.StudyScopeRequests(c.UserContext(), actor(c), id)
	if err != nil {
		return err
	}
	return writeAll(c, codes, toScopeCodeJSON)
}

// scopeRefJSON names a scope code by id or by coding.
type scopeRefJSON struct {
	ScopeCodeID  int64  `json:"scopeCodeId"`
	CodingSystem string `json:"codingSystem"`
	CodingCode   string `json:"codingCode"`
}

func (s *server) addScopeRequest(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	var in scopeRefJSON
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	code, err := s.service.AddScopeRequest(c.UserContext(), actor(c), id, domain.ScopeRef{ID: in.ScopeCodeID, System: in.CodingSystem, Code: in.CodingCode})
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(toScopeCodeJSON(*code))
}

func (s *server) studyDataSources(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	sources, err := s.service.StudyDataSources(c.UserContext(), actor(c), id)
	if err != nil {
		return err
	}
	return writeAll(c, sources, toDataSourceSummaryJSON)
}

func (s *server) addStudyDataSource(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	var in struct {
		DataSourceID int64 `json:"dataSourceId"`
	}
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	if in.DataSourceID == 0 {
		return domain.FieldErrorf("dataSourceId", "is required")
	}
	ds, err := s.service.AddStudyDataSource(c.UserContext(), actor(c), id, in.DataSourceID)
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(toDataSourceSummaryJSON(*ds))
}
