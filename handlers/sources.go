package handlers

import (
	"github.com/gofiber/fiber/v2"

	"exchange/domain"
)

type dataSourceInJSON struct {
	Name                  *string  `json:"name"`
	Type                  *string  `json:"type"`
	SupportedScopeCodeIDs *[]int64 `json:"supportedScopeCodeIds"`
}

func (s *server) listDataSources(c *fiber.Ctx) error {
	p, err := pageOf(c)
	if err != nil {
		return err
	}
	l, err := s.service.ListDataSources(c.UserContext(), p)
	if err != nil {
		return err
	}
	return writeList(c, p, l, toDataSourceJSON)
}

func (s *server) createDataSource(c *fiber.Ctx) error {
	var in dataSourceInJSON
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	d, err := s.service.CreateDataSource(c.UserContext(), actor(c), domain.NewDataSource{
		Name: deref(in.Name), Type: domain.DataSourceType(deref(in.Type)), SupportedScopeCodeIDs: deref(in.SupportedScopeCodeIDs)})
	if err != nil {
		return err
	}
	return writeDataSource(c.Status(fiber.StatusCreated), *d)
}

func (s *server) getDataSource(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	d, err := s.service.DataSourceByID(c.UserContext(), id)
	if err != nil {
		return err
	}
	return writeDataSource(c, *d)
}

// updateDataSource applies a PATCH; with If-Match, only to the version it
// names (versions.go).
func (s *server) updateDataSource(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	version, err := ifMatchVersion(c)
	if err != nil {
		return err
	}
	var in dataSourceInJSON
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	patch := domain.DataSourcePatch{Name: in.Name, SupportedScopeCodeIDs: in.SupportedScopeCodeIDs, Unchanged: version}
	if in.Type != nil {
		t := domain.DataSourceType(*in.Type)
		patch.Type = &t
	}
	d, err := s.service.UpdateDataSource(c.UserContext(), actor(c), id, patch)
	if err != nil {
		return err
	}
	return writeDataSource(c, *d)
}

func (s *server) deleteDataSource(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	if err := s.service.DeleteDataSource(c.UserContext(), actor(c), id); err != nil {
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}

func (s *server) listScopeCodes(c *fiber.Ctx) error {
	p, err := pageOf(c)
	if err != nil {
		return err
	}
	l, err := s.service.ListScopeCodes(c.UserContext(), p)
	if err != nil {
		return err
	}
	return writeList(c, p, l, toScopeCodeJSON)
}

func (s *server) createScopeCode(c *fiber.Ctx) error {
	var in struct {
		CodingSystem string `json:"codingSystem"`
		CodingCode   string `json:"codingCode"`
		Text         string `json:"text"`
	}
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	code, err := s.service.CreateScopeCode(c.UserContext(), actor(c), in.CodingSystem, in.CodingCode, in.Text)
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(toScopeCodeJSON(*code))
}

// fhirSourceInJSON is the body that registers a FHIR source. The data
// source may be spelled data_source, as the endpoint was first specified,
// or dataSource.
type fhirSourceInJSON struct {
	Patient         int64  `json:"patient"`
	DataSource      *int64 `json:"dataSource"`
	DataSourceSnake *int64 `json:"data_source"`
	Label           string `json:"label"`
}

func (s *server) createFHIRSource(c *fiber.Ctx) error {
	var in fhirSourceInJSON
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	if in.DataSource != nil && in.DataSourceSnake != nil && *in.DataSource != *in.DataSourceSnake {
		return domain.FieldErrorf("dataSource", "dataSource and data_source disagree")
	}
	ds := deref(in.DataSource)
	if in.DataSourceSnake != nil {
		ds = *in.DataSourceSnake
	}
	src, err := s.service.CreateFHIRSource(c.UserContext(), actor(c), in.Patient, ds, in.Label)
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(fhirSourceJSONWith(s.service.SourceBase())(*src))
}

func (s *server) listFHIRSources(c *fiber.Ctx) error {
	p, err := pageOf(c)
	if err != nil {
		return err
	}
	l, err := s.service.ListFHIRSources(c.UserContext(), actor(c), p)
	if err != nil {
		return err
	}
	return writeList(c, p, l, fhirSourceJSONWith(s.service.SourceBase()))
}

func (s *server) deleteFHIRSource(c *fiber.Ctx) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	if err := s.service.DeleteFHIRSource(c.UserContext(), actor(c), id); err != nil {
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}
