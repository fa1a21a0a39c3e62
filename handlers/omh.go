package handlers

import (
	"errors"

	"github.com/gofiber/fiber/v2"

	"exchange/domain"
	"exchange/omh"
)

// schemasInstalled refuses the schema endpoints when the service started
// without the OMH schemas.
func (s *server) schemasInstalled() error {
	if s.schemas == nil {
		return domain.Errorf(domain.CodeNotSupported, "the Open mHealth schemas are not installed on this server (scripts/setup, OMH_SCHEMA_DIR)")
	}
	return nil
}

type schemaInfoJSON struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Title   string `json:"title"`
}

// listSchemas lists the official Open mHealth schemas the service
// validates data points against.
func (s *server) listSchemas(c *fiber.Ctx) error {
	if err := s.schemasInstalled(); err != nil {
		return err
	}
	return writeAll(c, s.schemas.Schemas(), func(i omh.SchemaInfo) schemaInfoJSON {
		return schemaInfoJSON{Name: i.Name, Version: i.Version, Title: i.Title}
	})
}

// getSchema answers one schema's JSON, as published.
func (s *server) getSchema(c *fiber.Ctx) error {
	if err := s.schemasInstalled(); err != nil {
		return err
	}
	data, err := s.schemas.Schema(c.Params("name"), c.Params("version"))
	if errors.Is(err, omh.ErrNoSchema) {
		return domain.Errorf(domain.CodeNotFound, "there is no Open mHealth schema %s %s", c.Params("name"), c.Params("version"))
	}
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(data)
}
