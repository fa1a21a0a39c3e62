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
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Version   string `json:"version"`
	Title     string `json:"title"`
}

// listSchemas lists the official schemas the service validates data
// points against: Open mHealth's (namespace omh) and IEEE 1752's (ieee).
func (s *server) listSchemas(c *fiber.Ctx) error {
	if err := s.schemasInstalled(); err != nil {
		return err
	}
	return writeAll(c, s.schemas.Schemas(), func(i omh.SchemaInfo) schemaInfoJSON {
		return schemaInfoJSON{Namespace: i.Namespace, Name: i.Name, Version: i.Version, Title: i.Title}
	})
}

// getSchema answers one schema's JSON, as published: at
// /omh_schemas/{namespace}/{name}/{version}, or at /omh_schemas/{name}/{version}
// for an Open mHealth schema.
func (s *server) getSchema(c *fiber.Ctx) error {
	if err := s.schemasInstalled(); err != nil {
		return err
	}
	id := omh.SchemaID{Namespace: c.Params("namespace", omh.NamespaceOMH), Name: c.Params("name"), Version: c.Params("version")}
	data, err := s.schemas.Schema(id)
	if errors.Is(err, omh.ErrNoSchema) {
		return domain.Errorf(domain.CodeNotFound, "there is no schema %s", id.Code())
	}
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(data)
}
