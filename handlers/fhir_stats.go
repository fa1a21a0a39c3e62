package handlers

import (
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
)

// statsOperation is Observation/$stats in the CapabilityStatement.
var statsOperation = fiber.Map{"name": "stats", "definition": "https://w3id.org/exchange/OperationDefinition/Observation-stats",
	"documentation": "GET Observation/$stats?<search parameters>: per code of the native Observations the search selects (its whole result): " +
		"count, first (earliest effective start) and last (latest effective end), and per unit the count, min, max and mean of the data points " +
		"with one numeric value. One pass of the database; the reach, patients and consent of the same search."}

// observationStats answers Observation/$stats: a Parameters resource with
// one "code" parameter per code, its parts as statsOperation says (counts
// are integer64, which FHIR's JSON writes as strings).
func (s *server) observationStats(c *fiber.Ctx) error {
	values, err := queryValues(c)
	if err != nil {
		return err
	}
	values.Set("_summary", "count") // the whole result, no page
	q, err := s.search.Parse("Observation", values, prefers(c, "handling=strict"))
	if err != nil {
		return err
	}
	sum, err := s.service.ObservationStats(c.UserContext(), actor(c), q)
	if err != nil {
		return err
	}
	params := []fiber.Map{}
	for _, cs := range sum.Codes {
		parts := []fiber.Map{{"name": "code", "valueCode": cs.Code}, {"name": "count", "valueInteger64": strconv.FormatInt(cs.Count, 10)}}
		if cs.First != nil {
			parts = append(parts, fiber.Map{"name": "first", "valueDateTime": cs.First.Format(time.RFC3339Nano)})
		}
		if cs.Last != nil {
			parts = append(parts, fiber.Map{"name": "last", "valueDateTime": cs.Last.Format(time.RFC3339Nano)})
		}
		for _, v := range cs.Values {
			parts = append(parts, fiber.Map{"name": "value", "part": []fiber.Map{
				{"name": "unit", "valueString": v.Unit}, {"name": "count", "valueInteger64": strconv.FormatInt(v.Count, 10)},
				{"name": "min", "valueDecimal": v.Min}, {"name": "max", "valueDecimal": v.Max}, {"name": "mean", "valueDecimal": v.Mean()},
			}})
		}
		params = append(params, fiber.Map{"name": "code", "part": parts})
	}
	return writeFHIR(c, fiber.StatusOK, fiber.Map{"resourceType": "Parameters", "parameter": params})
}
