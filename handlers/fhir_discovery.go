package handlers

import (
	"encoding/json"
	"slices"

	"github.com/gofiber/fiber/v2"

	"exchange/fhirsearch"
	"exchange/oauth"
)

// capabilityDate is the CapabilityStatement's date: the date of this
// statement's last change, stable between requests and restarts.
const capabilityDate = "2026-11-22"

// softwareVersion names this build in the CapabilityStatement.
const softwareVersion = "0.5.0"

// importedOnlyExtension marks a search parameter that applies only when
// _source selects the imported store.
const importedOnlyExtension = "https://w3id.org/openmhealth/exchange/StructureDefinition/imported-store-only"

// discoveryHeaders are those of both discovery documents: cacheable for an
// hour, varying on the proxy headers their URLs come from.
func discoveryHeaders(c *fiber.Ctx) {
	c.Set(fiber.HeaderCacheControl, "public, max-age=3600")
	c.Set(fiber.HeaderVary, oauth.VaryForwarded)
}

// capabilityResources renders the CapabilityStatement's resource entries,
// one per type of the catalog with its interactions and search
// parameters: the bulk of the document (some 150 types), the same for
// every request, so rendered once.
func capabilityResources(catalog *fhirsearch.Catalog) (json.RawMessage, error) {
	var resources []fiber.Map
	for _, r := range catalog.Resources() {
		var interactions []fiber.Map
		for _, i := range r.Interactions {
			interactions = append(interactions, fiber.Map{"code": i})
		}
		var params []fiber.Map
		for _, p := range r.AllParams() {
			param := fiber.Map{"name": p.Name, "type": string(p.Type), "documentation": p.Doc}
			if p.Definition != "" {
				param["definition"] = p.Definition
			}
			if p.ImportedOnly() {
				param["documentation"] = "Imported store only (_source). " + p.Doc
				param["extension"] = []fiber.Map{{"url": importedOnlyExtension, "valueBoolean": true}}
			}
			params = append(params, param)
		}
		entry := fiber.Map{"type": r.Type, "documentation": r.Doc, "interaction": interactions, "searchParam": params}
		var operations []fiber.Map
		if r.Type == "Observation" {
			operations = append(operations, statsOperation)
		}
		if op, ok := bulkExportOperations[r.Type]; ok {
			operations = append(operations, fiber.Map{"name": "export", "definition": op})
		}
		if operations != nil {
			entry["operation"] = operations
		}
		if slices.Contains(r.Interactions, "update") {
			// If-Match is honoured; a PUT never creates (ids are assigned).
			entry["versioning"], entry["updateCreate"] = "versioned-update", false
		}
		resources = append(resources, entry)
	}
	return marshalJSON(resources)
}

// The Bulk Data Access definitions this server implements: the
// CapabilityStatement it instantiates, and the $export operations at the
// system level and on Patient and Group.
const (
	bulkDataCapabilities = "http://hl7.org/fhir/uv/bulkdata/CapabilityStatement/bulk-data"
	bulkDataExport       = "http://hl7.org/fhir/uv/bulkdata/OperationDefinition/export"
)

var bulkExportOperations = map[string]string{
	"Patient": "http://hl7.org/fhir/uv/bulkdata/OperationDefinition/patient-export",
	"Group":   "http://hl7.org/fhir/uv/bulkdata/OperationDefinition/group-export",
}

// capabilityStatement describes the FHIR interface, generated from
// fhirsearch's catalog. It needs no token.
func (s *server) capabilityStatement(c *fiber.Ctx) error {
	resources, err := s.capabilityResources()
	if err != nil {
		return err
	}
	base := origin(c)
	issuer := base + "/o"
	discoveryHeaders(c)
	return writeFHIR(c, fiber.StatusOK, fiber.Map{
		"resourceType":   "CapabilityStatement",
		"id":             "exchange",
		"url":            base + fhirCanonical + "/metadata",
		"name":           "ClinicalDataExchange",
		"title":          "Clinical data exchange",
		"status":         "active",
		"date":           capabilityDate,
		"publisher":      "Clinical data exchange",
		"description":    "Open mHealth data points shared under per-study consent, served as FHIR R5.",
		"kind":           "instance",
		"instantiates":   []string{bulkDataCapabilities},
		"software":       fiber.Map{"name": "exchange", "version": softwareVersion},
		"implementation": fiber.Map{"description": "Clinical data exchange", "url": base + fhirCanonical},
		"fhirVersion":    "5.0.0",
		"format":         []string{"json"},
		"patchFormat":    []string{"application/json-patch+json", "application/merge-patch+json"},
		"rest": []fiber.Map{{
			"mode": "server",
			"security": fiber.Map{
				"cors": true,
				"service": []fiber.Map{{"coding": []fiber.Map{{
					"system": "http://terminology.hl7.org/CodeSystem/restful-security-service", "code": "SMART-on-FHIR"}}}},
				"extension": []fiber.Map{{
					"url": "http://fhir-registry.smarthealthit.org/StructureDefinition/oauth-uris",
					"extension": []fiber.Map{
						{"url": "authorize", "valueUri": issuer + "/authorize/"},
						{"url": "token", "valueUri": issuer + "/token/"},
						{"url": "introspect", "valueUri": issuer + "/introspect/"},
						{"url": "revoke", "valueUri": issuer + "/revoke_token/"},
					},
				}},
			},
			"resource":    resources,
			"interaction": []fiber.Map{{"code": "batch"}},
			"operation":   []fiber.Map{{"name": "export", "definition": bulkDataExport}},
		}},
	})
}

// smartConfiguration is the SMART App Launch discovery document. It needs
// no token.
func (s *server) smartConfiguration(c *fiber.Ctx) error {
	meta := oauth.Metadata(origin(c) + "/o")
	discoveryHeaders(c)
	return c.Status(fiber.StatusOK).JSON(fiber.Map{
		"issuer":                                           meta["issuer"],
		"jwks_uri":                                         meta["jwks_uri"],
		"authorization_endpoint":                           meta["authorization_endpoint"],
		"token_endpoint":                                   meta["token_endpoint"],
		"introspection_endpoint":                           meta["introspection_endpoint"],
		"revocation_endpoint":                              meta["revocation_endpoint"],
		"userinfo_endpoint":                                meta["userinfo_endpoint"],
		"grant_types_supported":                            meta["grant_types_supported"],
		"response_types_supported":                         meta["response_types_supported"],
		"code_challenge_methods_supported":                 []string{"S256"},
		"scopes_supported":                                 meta["scopes_supported"],
		"token_endpoint_auth_methods_supported":            meta["token_endpoint_auth_methods_supported"],
		"token_endpoint_auth_signing_alg_values_supported": meta["token_endpoint_auth_signing_alg_values_supported"],
		"capabilities": []string{"launch-standalone", "context-standalone-patient", "client-public", "client-confidential-symmetric",
			"client-confidential-asymmetric", "sso-openid-connect", "permission-patient", "permission-user", "permission-v2", "permission-offline"},
	}, mediaJSON)
}
