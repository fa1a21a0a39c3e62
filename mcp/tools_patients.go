package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// patientAnswer is the admin API's patient.
type patientAnswer struct {
	ID          int64    `json:"id"`
	NameFamily  string   `json:"nameFamily"`
	GivenNames  []string `json:"givenNames"`
	BirthDate   *string  `json:"birthDate"`
	Telecom     []coded  `json:"telecom"`
	Identifiers []coded  `json:"identifiers"`
	OrgIDs      []int64  `json:"organizationIds"`
}

type coded struct {
	System string `json:"system"`
	Value  string `json:"value"`
}

// patientRow is a patient in a list.
type patientRow struct {
	ID        int64  `json:"id"`
	Name      string `json:"name"`
	BirthDate string `json:"birth_date,omitempty"`
	Gender    string `json:"gender,omitempty"`
}

func (p patientAnswer) row() patientRow {
	r := patientRow{ID: p.ID, Name: strings.TrimSpace(strings.Join(p.GivenNames, " ") + " " + p.NameFamily)}
	if p.BirthDate != nil {
		r.BirthDate = *p.BirthDate
	}
	return r
}

// fhirPatient is the part of a FHIR Patient the tools read.
type fhirPatient struct {
	ID   string `json:"id"`
	Name []struct {
		Family string   `json:"family"`
		Given  []string `json:"given"`
	} `json:"name"`
	BirthDate string `json:"birthDate"`
	Gender    string `json:"gender"`
}

func (p fhirPatient) row() patientRow {
	id, _ := strconv.ParseInt(p.ID, 10, 64)
	r := patientRow{ID: id, BirthDate: p.BirthDate, Gender: p.Gender}
	if len(p.Name) > 0 {
		r.Name = strings.TrimSpace(strings.Join(p.Name[0].Given, " ") + " " + p.Name[0].Family)
	}
	return r
}

func searchPatientsTool(a *api) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("search_patients", toolOptions(readOnly("Search patients"), []mcpgo.ToolOption{
		mcpgo.WithDescription("Find patients the signed-in user may see by name, family name, given name or birth date (FHIR Patient search). Names match by prefix, ignoring case and accents. Without criteria it lists every visible patient. Answers slim rows, has_more and a next_cursor for the next page."),
		mcpgo.WithString("name", mcpgo.Description("Prefix of any part of the name"), mcpgo.MaxLength(100)),
		mcpgo.WithString("family", mcpgo.Description("Prefix of the family name"), mcpgo.MaxLength(100)),
		mcpgo.WithString("given", mcpgo.Description("Prefix of a given name"), mcpgo.MaxLength(100)),
		mcpgo.WithString("birthdate", mcpgo.Description("Birth date YYYY, YYYY-MM or YYYY-MM-DD, optionally with a FHIR prefix (ge1980, lt1990-06-01)"), mcpgo.MaxLength(20)),
		mcpgo.WithInteger("limit", mcpgo.Description("Rows per page: min 1, max 100 (default 20)"), mcpgo.Min(1), mcpgo.Max(maxPageSize), mcpgo.DefaultNumber(20)),
		mcpgo.WithString("cursor", mcpgo.Description("next_cursor of the previous page; the other arguments are then ignored"), mcpgo.MaxLength(4096)),
	})...)
	return tool, handle(func(ctx context.Context, req mcpgo.CallToolRequest) (any, error) {
		q := url.Values{"_count": {strconv.Itoa(req.GetInt("limit", 20))}, "_sort": {"_lastUpdated"}}
		for _, name := range []string{"name", "family", "given", "birthdate"} {
			if v := strings.TrimSpace(req.GetString(name, "")); v != "" {
				q.Set(name, v)
			}
		}
		var b bundle
		if err := a.search(ctx, "Patient", q, req.GetString("cursor", ""), &b); err != nil {
			return nil, err
		}
		rows := []patientRow{}
		for _, raw := range b.matches() {
			var p fhirPatient
			if err := json.Unmarshal(raw, &p); err != nil {
				return nil, fmt.Errorf("a Patient of the service's searchset: %w", err)
			}
			rows = append(rows, p.row())
		}
		return pageResult("patients", rows, &b), nil
	})
}

// pageResult is a page of a FHIR search: the rows, has_more and the
// cursor of the next page.
func pageResult[T any](name string, rows []T, b *bundle) map[string]any {
	out := map[string]any{"returned": len(rows), "has_more": false, name: rows}
	if c := b.nextCursor(); c != "" {
		out["has_more"], out["next_cursor"] = true, c
	}
	return out
}

func getPatientTool(a *api) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("get_patient", toolOptions(readOnly("Patient demographics"), []mcpgo.ToolOption{
		mcpgo.WithDescription("One patient's demographics: name, birth date, contact points, identifiers (such as medical record numbers) and organizations."),
		mcpgo.WithInteger("patient_id", mcpgo.Required(), mcpgo.Description("The patient's id (from search_patients or list_study_patients)"), mcpgo.Min(1)),
	})...)
	return tool, handle(func(ctx context.Context, req mcpgo.CallToolRequest) (any, error) {
		id, err := requireID(req, "patient_id")
		if err != nil {
			return nil, err
		}
		var p patientAnswer
		if err := a.get(ctx, fmt.Sprintf("/api/v1/patients/%d", id), nil, &p); err != nil {
			return nil, err
		}
		out := map[string]any{"id": p.ID, "family": p.NameFamily, "given": p.GivenNames, "birth_date": p.BirthDate,
			"telecom": nonNil(p.Telecom), "identifiers": nonNil(p.Identifiers), "organization_ids": nonNil(p.OrgIDs)}
		return out, nil
	})
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func patientDataRangeTool(a *api) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("patient_data_range", toolOptions(readOnly("Date range of a patient's data"), []mcpgo.ToolOption{
		mcpgo.WithDescription("How many observations a patient has and the dates of the earliest and the latest, optionally for one data type: where to point list_observations."),
		mcpgo.WithInteger("patient_id", mcpgo.Required(), mcpgo.Description("The patient's id"), mcpgo.Min(1)),
		mcpgo.WithString("code", mcpgo.Description("Only this data type, an Open mHealth code such as omh:heart-rate:2.0"), mcpgo.MaxLength(200)),
	})...)
	return tool, handle(func(ctx context.Context, req mcpgo.CallToolRequest) (any, error) {
		id, err := requireID(req, "patient_id")
		if err != nil {
			return nil, err
		}
		q := url.Values{"patient": {strconv.FormatInt(id, 10)}}
		if c := strings.TrimSpace(req.GetString("code", "")); c != "" {
			q.Set("code", c)
		}
		stats, err := observationStats(ctx, a, q)
		if err != nil {
			return nil, err
		}
		var count int64
		var earliest, latest any
		for _, c := range stats {
			count += c.Count
			if c.First != "" && (earliest == nil || c.First < earliest.(string)) {
				earliest = c.First
			}
			if c.Last != "" && (latest == nil || c.Last > latest.(string)) {
				latest = c.Last
			}
		}
		return map[string]any{"patient_id": id, "code": q.Get("code"), "observations": count, "earliest": earliest, "latest": latest}, nil
	})
}

// codeStats is one code of the service's Observation/$stats answer.
type codeStats struct {
	Code   string       `json:"code"`
	Count  int64        `json:"count"`
	First  string       `json:"earliest,omitempty"` // the earliest effective start
	Last   string       `json:"latest,omitempty"`   // the latest effective end
	Values []valueStats `json:"values,omitempty"`
}

// valueStats are the numeric values of one unit of a code.
type valueStats struct {
	Unit  string  `json:"unit"`
	Count int64   `json:"count"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
	Mean  float64 `json:"mean"`
}

// statsParameters is the Parameters resource of Observation/$stats.
type statsParameters struct {
	Parameter []statsPart `json:"parameter"`
}

type statsPart struct {
	Name           string      `json:"name"`
	ValueCode      string      `json:"valueCode"`
	ValueString    string      `json:"valueString"`
	ValueDateTime  string      `json:"valueDateTime"`
	ValueInteger64 string      `json:"valueInteger64"`
	ValueDecimal   float64     `json:"valueDecimal"`
	Part           []statsPart `json:"part"`
}

// observationStats summarizes a search of observations per code with the
// service's Observation/$stats: one pass of its database, whatever the
// number of codes.
func observationStats(ctx context.Context, a *api, q url.Values) ([]codeStats, error) {
	if err := a.caps.check(ctx, "Observation", q); err != nil {
		return nil, err
	}
	var p statsParameters
	if err := a.get(ctx, "/FHIR/R5/Observation/$stats", q, &p); err != nil {
		return nil, err
	}
	out := []codeStats{}
	for _, code := range p.Parameter {
		var c codeStats
		for _, part := range code.Part {
			switch part.Name {
			case "code":
				c.Code = part.ValueCode
			case "count":
				c.Count, _ = strconv.ParseInt(part.ValueInteger64, 10, 64)
			case "first":
				c.First = part.ValueDateTime
			case "last":
				c.Last = part.ValueDateTime
			case "value":
				c.Values = append(c.Values, valueStatsOf(part.Part))
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// valueStatsOf reads the parts of one "value" part of $stats.
func valueStatsOf(parts []statsPart) valueStats {
	var v valueStats
	for _, p := range parts {
		switch p.Name {
		case "unit":
			v.Unit = p.ValueString
		case "count":
			v.Count, _ = strconv.ParseInt(p.ValueInteger64, 10, 64)
		case "min":
			v.Min = p.ValueDecimal
		case "max":
			v.Max = p.ValueDecimal
		case "mean":
			v.Mean = p.ValueDecimal
		}
	}
	return v
}
