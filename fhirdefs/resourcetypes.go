package fhirdefs

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// ResourceTypes returns the concrete resource types the package defines,
// sorted: the codes of its resource-types value set, which lists exactly
// the types its StructureDefinitions of kind resource define, abstract
// ones (Resource, DomainResource, CanonicalResource, ...) left out. One
// small file is read, where telling resource definitions from data types
// and profiles would read every StructureDefinition (50 MB in R5).
func (p *Package) ResourceTypes() ([]string, error) {
	var vs struct {
		ResourceType string `json:"resourceType"`
		Compose      struct {
			Include []struct {
				System  string `json:"system"`
				Concept []struct {
					Code string `json:"code"`
				} `json:"concept"`
			} `json:"include"`
		} `json:"compose"`
	}
	if err := p.readJSON("ValueSet-resource-types.json", &vs); err != nil {
		return nil, err
	}
	if vs.ResourceType != "ValueSet" {
		return nil, fmt.Errorf("ValueSet-resource-types.json is not a ValueSet")
	}
	var types []string
	for _, inc := range vs.Compose.Include {
		for _, c := range inc.Concept {
			if !typeName.MatchString(c.Code) {
				return nil, fmt.Errorf("ValueSet-resource-types.json: %q is not a type name", c.Code)
			}
			types = append(types, c.Code)
		}
	}
	if len(types) == 0 {
		return nil, fmt.Errorf("ValueSet-resource-types.json lists no resource type")
	}
	slices.Sort(types)
	return slices.Compact(types), nil
}

// PatientCompartment returns, per resource type, the search parameters
// that put a resource in a patient's compartment (Claim: patient, payee),
// from the package's CompartmentDefinition-patient. Types outside the
// compartment are absent.
func (p *Package) PatientCompartment() (map[string][]string, error) {
	var cd struct {
		ResourceType string `json:"resourceType"`
		Code         string `json:"code"`
		Resource     []struct {
			Code  string   `json:"code"`
			Param []string `json:"param"`
		} `json:"resource"`
	}
	if err := p.readJSON("CompartmentDefinition-patient.json", &cd); err != nil {
		return nil, err
	}
	if cd.ResourceType != "CompartmentDefinition" || cd.Code != "Patient" {
		return nil, fmt.Errorf("CompartmentDefinition-patient.json is not the Patient compartment")
	}
	out := map[string][]string{}
	for _, r := range cd.Resource {
		if len(r.Param) > 0 {
			out[r.Code] = r.Param
		}
	}
	return out, nil
}

// readJSON decodes one file of the package.
func (p *Package) readJSON(name string, v any) error {
	data, err := os.ReadFile(filepath.Join(p.dir, name))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
