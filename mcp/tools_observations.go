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
	"golang.org/x/sync/errgroup"
)

// fhirObservation is the part of a native FHIR Observation the tools
// read: the Open mHealth data point is Base64 in valueAttachment.
type fhirObservation struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Code   struct {
		Coding []struct {
			System string `json:"system"`
			Code   string `json:"code"`
		} `json:"coding"`
	} `json:"code"`
	EffectiveDateTime string `json:"effectiveDateTime"`
	EffectivePeriod   *struct {
		Start string `json:"start,omitempty"`
		End   string `json:"end,omitempty"`
	} `json:"effectivePeriod"`
	Device struct {
		Reference string `json:"reference"`
	} `json:"device"`
	Identifier      []coded `json:"identifier"`
	ValueAttachment *struct {
		ContentType string `json:"contentType"`
		Data        []byte `json:"data"`
	} `json:"valueAttachment"`
}

// effective is the observation's time: an instant, or {start, end}.
func (o *fhirObservation) effective() any {
	if o.EffectiveDateTime != "" {
		return o.EffectiveDateTime
	}
	if o.EffectivePeriod != nil {
		return o.EffectivePeriod
	}
	return nil
}

func (o *fhirObservation) code() string {
	if len(o.Code.Coding) > 0 {
		return o.Code.Coding[0].Code
	}
	return ""
}

// dataPoint decodes the Open mHealth data point, nil if there is none.
func (o *fhirObservation) dataPoint() map[string]any {
	if o.ValueAttachment == nil || len(o.ValueAttachment.Data) == 0 {
		return nil
	}
	var dp map[string]any
	if json.Unmarshal(o.ValueAttachment.Data, &dp) != nil {
		return nil
	}
	return dp
}

// slim is an observation as a list row: its measurement without the time
// frame (effective says it once) or the header.
func (o *fhirObservation) slim() map[string]any {
	row := map[string]any{"id": o.ID, "code": o.code(), "effective": o.effective()}
	if body, ok := o.dataPoint()["body"].(map[string]any); ok {
		value := map[string]any{}
		for k, v := range body {
			if k != "effective_time_frame" {
				value[k] = v
			}
		}
		row["value"] = value
	}
	return row
}

// full is an observation with its whole data point.
func (o *fhirObservation) full() map[string]any {
	return map[string]any{"id": o.ID, "status": o.Status, "code": o.code(), "effective": o.effective(),
		"device": o.Device.Reference, "identifiers": nonNil(o.Identifier), "data_point": o.dataPoint()}
}

// windowArgs are the date window of the observation tools.
func windowArgs() []mcpgo.ToolOption {
	return []mcpgo.ToolOption{
		mcpgo.WithString("code", mcpgo.Description("Only this data type: an Open mHealth code such as omh:heart-rate:2.0 (see summarize_observations or get_study for the codes in use)"), mcpgo.MaxLength(200)),
		mcpgo.WithString("date_from", mcpgo.Description("Only observations on or after this date or date-time (YYYY-MM-DD or RFC 3339)"), mcpgo.MaxLength(40)),
		mcpgo.WithString("date_to", mcpgo.Description("Only observations on or before this date or date-time (YYYY-MM-DD or RFC 3339; a date includes its whole day)"), mcpgo.MaxLength(40)),
	}
}

// window adds the code and date window of the request to a search.
func window(req mcpgo.CallToolRequest, q url.Values) url.Values {
	if c := strings.TrimSpace(req.GetString("code", "")); c != "" {
		q.Set("code", c)
	}
	if from := strings.TrimSpace(req.GetString("date_from", "")); from != "" {
		q.Add("date", "ge"+from)
	}
	if to := strings.TrimSpace(req.GetString("date_to", "")); to != "" {
		q.Add("date", "le"+to)
	}
	return q
}

func listObservationsTool(a *api) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("list_observations", toolOptions(readOnly("List a patient's observations"), []mcpgo.ToolOption{
		mcpgo.WithDescription("A patient's observations (Open mHealth data points), newest first by default. slim rows: id, code, effective time, the measured values; full adds the whole data point, status, device and identifiers. Answers has_more and a next_cursor for the next page."),
		mcpgo.WithInteger("patient_id", mcpgo.Required(), mcpgo.Description("The patient's id"), mcpgo.Min(1)),
		mcpgo.WithString("order", mcpgo.Description("newest_first (default) or oldest_first, by effective time"), mcpgo.Enum("newest_first", "oldest_first"), mcpgo.DefaultString("newest_first")),
		mcpgo.WithInteger("limit", mcpgo.Description("Rows per page: min 1, max 100 (default 20)"), mcpgo.Min(1), mcpgo.Max(maxPageSize), mcpgo.DefaultNumber(20)),
		mcpgo.WithString("verbosity", mcpgo.Description("slim (default) or full"), mcpgo.Enum("slim", "full"), mcpgo.DefaultString("slim")),
		mcpgo.WithString("cursor", mcpgo.Description("next_cursor of the previous page, with the same patient_id; code, dates, order and limit are then those of the first page"), mcpgo.MaxLength(4096)),
	}, windowArgs())...)
	return tool, handle(func(ctx context.Context, req mcpgo.CallToolRequest) (any, error) {
		id, err := requireID(req, "patient_id")
		if err != nil {
			return nil, err
		}
		sort := "-date"
		if req.GetString("order", "newest_first") == "oldest_first" {
			sort = "date"
		}
		q := window(req, url.Values{"patient": {strconv.FormatInt(id, 10)}, "_sort": {sort}, "_count": {strconv.Itoa(req.GetInt("limit", 20))}})
		cursor := req.GetString("cursor", "")
		if cursor != "" {
			// The cursor's search is the first page's: its patient, not
			// patient_id, decides whose observations come back.
			cq, err := cursorQuery(cursor)
			if err != nil {
				return nil, err
			}
			if p := cq.Get("patient"); p != q.Get("patient") {
				return nil, toolErrorf("cursor continues the observations of patient %s, not of patient_id %d: give the patient_id of the first page", p, id)
			}
		}
		var b bundle
		if err := a.search(ctx, "Observation", q, cursor, &b); err != nil {
			return nil, err
		}
		full := req.GetString("verbosity", "slim") == "full"
		rows := []map[string]any{}
		for _, raw := range b.matches() {
			var o fhirObservation
			if err := json.Unmarshal(raw, &o); err != nil {
				return nil, fmt.Errorf("an Observation of the service's searchset: %w", err)
			}
			if full {
				rows = append(rows, o.full())
			} else {
				rows = append(rows, o.slim())
			}
		}
		out := pageResult("observations", rows, &b)
		out["patient_id"] = id
		return out, nil
	})
}

// maxCountedPatients bounds count_observations per_patient.
const maxCountedPatients = 100

func countObservationsTool(a *api) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("count_observations", toolOptions(readOnly("Count observations"), []mcpgo.ToolOption{
		mcpgo.WithDescription("Count observations (FHIR _summary=count) of one patient, or of a study: the data its enrolled patients consented to share with it. With per_patient, a study's count is also broken down by patient (at most 100 patients)."),
		mcpgo.WithInteger("patient_id", mcpgo.Description("Count this patient's observations (give patient_id or study_id)"), mcpgo.Min(1)),
		mcpgo.WithInteger("study_id", mcpgo.Description("Count the observations shared with this study (give patient_id or study_id)"), mcpgo.Min(1)),
		mcpgo.WithBoolean("per_patient", mcpgo.Description("With study_id: one count per enrolled patient as well"), mcpgo.DefaultBool(false)),
	}, windowArgs())...)
	return tool, handle(func(ctx context.Context, req mcpgo.CallToolRequest) (any, error) {
		patient, study := req.GetInt("patient_id", 0), req.GetInt("study_id", 0)
		if (patient > 0) == (study > 0) {
			return nil, toolErrorf("give exactly one of patient_id and study_id")
		}
		if patient > 0 {
			n, err := a.count(ctx, "Observation", window(req, url.Values{"patient": {strconv.Itoa(patient)}}))
			if err != nil {
				return nil, err
			}
			return map[string]any{"patient_id": patient, "count": n}, nil
		}
		inStudy := url.Values{"patient._has:Group:member:_id": {strconv.Itoa(study)}}
		total, err := a.count(ctx, "Observation", window(req, inStudy))
		if err != nil {
			return nil, err
		}
		out := map[string]any{"study_id": study, "count": total}
		if !req.GetBool("per_patient", false) {
			return out, nil
		}
		var enrolled listAnswer[patientAnswer]
		if err := a.get(ctx, fmt.Sprintf("/api/v1/studies/%d/patients", study), url.Values{"pageSize": {strconv.Itoa(maxCountedPatients)}}, &enrolled); err != nil {
			return nil, err
		}
		rows := make([]map[string]any, len(enrolled.Results))
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(4)
		for i, p := range enrolled.Results {
			g.Go(func() error {
				q := window(req, url.Values{"patient": {strconv.FormatInt(p.ID, 10)}, "patient._has:Group:member:_id": {strconv.Itoa(study)}})
				n, err := a.count(gctx, "Observation", q)
				rows[i] = map[string]any{"patient_id": p.ID, "name": p.row().Name, "count": n}
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return nil, err
		}
		out["per_patient"], out["patients_has_more"] = rows, enrolled.Next != nil
		return out, nil
	})
}

// scopeCodeAnswer is the admin API's scope code: a data type.
type scopeCodeAnswer struct {
	CodingSystem string `json:"codingSystem"`
	CodingCode   string `json:"codingCode"`
	Text         string `json:"text"`
}

func summarizeObservationsTool(a *api) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("summarize_observations", toolOptions(readOnly("Summary of a patient's data"), []mcpgo.ToolOption{
		mcpgo.WithDescription("A patient's observations per data type, in one pass of the service's database: count, earliest effective start and latest effective end, and per unit the min, max and mean of the data points with one numeric value (heart rate, glucose, steps; not blood pressure), optionally within a date window."),
		mcpgo.WithInteger("patient_id", mcpgo.Required(), mcpgo.Description("The patient's id"), mcpgo.Min(1)),
		mcpgo.WithString("date_from", mcpgo.Description("Only observations on or after this date or date-time (YYYY-MM-DD or RFC 3339)"), mcpgo.MaxLength(40)),
		mcpgo.WithString("date_to", mcpgo.Description("Only observations on or before this date or date-time"), mcpgo.MaxLength(40)),
	})...)
	return tool, handle(func(ctx context.Context, req mcpgo.CallToolRequest) (any, error) {
		id, err := requireID(req, "patient_id")
		if err != nil {
			return nil, err
		}
		var codes listAnswer[scopeCodeAnswer]
		if err := a.get(ctx, "/api/v1/scope_codes", url.Values{"pageSize": {"1000"}}, &codes); err != nil {
			return nil, err
		}
		stats, err := observationStats(ctx, a, window(req, url.Values{"patient": {strconv.FormatInt(id, 10)}}))
		if err != nil {
			return nil, err
		}
		text := map[string]string{}
		for _, c := range codes.Results {
			text[c.CodingCode] = c.Text
		}
		types := []map[string]any{}
		var total int64
		for _, c := range stats {
			total += c.Count
			t := map[string]any{"code": c.Code, "text": text[c.Code], "count": c.Count, "earliest": c.First, "latest": c.Last}
			if len(c.Values) > 0 {
				t["values"] = c.Values
			}
			types = append(types, t)
		}
		return map[string]any{"patient_id": id, "total": total, "types": types}, nil
	})
}
