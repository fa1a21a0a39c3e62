package mcp

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// The admin API's study, as the tools read it.
type studyAnswer struct {
	ID           int64  `json:"id"`
	Name         string `json:"name"`
	Description  string `json:"description"`
	Organization struct {
		ID   int64  `json:"id"`
		Name string `json:"name"`
	} `json:"organization"`
}

// studyRow is a study in a list: the description cut short.
type studyRow struct {
	ID             int64  `json:"id"`
	Name           string `json:"name"`
	Organization   string `json:"organization"`
	OrganizationID int64  `json:"organization_id"`
	Description    string `json:"description,omitempty"`
}

func toStudyRow(s studyAnswer) studyRow {
	return studyRow{ID: s.ID, Name: s.Name, Organization: s.Organization.Name, OrganizationID: s.Organization.ID, Description: shorten(s.Description, 200)}
}

// shorten cuts s to at most n runes, marking the cut.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func countStudiesTool(a *api) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("count_studies", toolOptions(readOnly("Count studies"), []mcpgo.ToolOption{
		mcpgo.WithDescription("Count the research studies the signed-in user can see (a practitioner: those of their organizations; a patient: those they are enrolled in)."),
	})...)
	return tool, handle(func(ctx context.Context, _ mcpgo.CallToolRequest) (any, error) {
		var l listAnswer[studyAnswer]
		if err := a.get(ctx, "/api/v1/studies", url.Values{"pageSize": {"1"}}, &l); err != nil {
			return nil, err
		}
		return map[string]int64{"count": l.Count}, nil
	})
}

func listStudiesTool(a *api) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("list_studies", toolOptions(readOnly("List studies"), []mcpgo.ToolOption{
		mcpgo.WithDescription("List the research studies the signed-in user can see, a page at a time: id, name, organization, a short description. Use get_study for one study's details."),
		mcpgo.WithInteger("organization_id", mcpgo.Description("Only the studies of this organization (id)"), mcpgo.Min(1)),
	}, withPaging())...)
	return tool, handle(func(ctx context.Context, req mcpgo.CallToolRequest) (any, error) {
		page, size := pageArgs(req)
		q := url.Values{"page": {strconv.Itoa(page)}, "pageSize": {strconv.Itoa(size)}}
		if org := req.GetInt("organization_id", 0); org > 0 {
			q.Set("organizationId", strconv.Itoa(org))
		}
		var l listAnswer[studyAnswer]
		if err := a.get(ctx, "/api/v1/studies", q, &l); err != nil {
			return nil, err
		}
		rows := make([]studyRow, 0, len(l.Results))
		for _, s := range l.Results {
			rows = append(rows, toStudyRow(s))
		}
		return map[string]any{"total": l.Count, "page": page, "has_more": l.Next != nil, "studies": rows}, nil
	})
}

func getStudyTool(a *api) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("get_study", toolOptions(readOnly("Study details"), []mcpgo.ToolOption{
		mcpgo.WithDescription("One study's metadata: name, description, organization, the data types (scope codes) it requests, the data sources it collects from, and how many patients are enrolled."),
		mcpgo.WithInteger("study_id", mcpgo.Required(), mcpgo.Description("The study's id (from list_studies)"), mcpgo.Min(1)),
	})...)
	return tool, handle(func(ctx context.Context, req mcpgo.CallToolRequest) (any, error) {
		id, err := requireID(req, "study_id")
		if err != nil {
			return nil, err
		}
		base := fmt.Sprintf("/api/v1/studies/%d", id)
		var s studyAnswer
		if err := a.get(ctx, base, nil, &s); err != nil {
			return nil, err
		}
		var scopes listAnswer[scopeCodeAnswer]
		if err := a.get(ctx, base+"/scope_requests", nil, &scopes); err != nil {
			return nil, err
		}
		var sources listAnswer[struct {
			ID   int64  `json:"id"`
			Name string `json:"name"`
			Type string `json:"type"`
		}]
		if err := a.get(ctx, base+"/data_sources", nil, &sources); err != nil {
			return nil, err
		}
		var patients listAnswer[patientAnswer]
		if err := a.get(ctx, base+"/patients", url.Values{"pageSize": {"1"}}, &patients); err != nil {
			return nil, err
		}
		requested := make([]map[string]string, 0, len(scopes.Results))
		for _, c := range scopes.Results {
			requested = append(requested, map[string]string{"code": c.CodingCode, "text": c.Text})
		}
		return map[string]any{
			"id": s.ID, "name": s.Name, "description": s.Description,
			"organization":     map[string]any{"id": s.Organization.ID, "name": s.Organization.Name},
			"requested_scopes": requested, "data_sources": sources.Results, "enrolled_patients": patients.Count,
		}, nil
	})
}

func listStudyPatientsTool(a *api) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("list_study_patients", toolOptions(readOnly("Patients of a study"), []mcpgo.ToolOption{
		mcpgo.WithDescription("The patients enrolled in a study, a page at a time: id, name, birth date."),
		mcpgo.WithInteger("study_id", mcpgo.Required(), mcpgo.Description("The study's id (from list_studies)"), mcpgo.Min(1)),
	}, withPaging())...)
	return tool, handle(func(ctx context.Context, req mcpgo.CallToolRequest) (any, error) {
		id, err := requireID(req, "study_id")
		if err != nil {
			return nil, err
		}
		page, size := pageArgs(req)
		var l listAnswer[patientAnswer]
		q := url.Values{"page": {strconv.Itoa(page)}, "pageSize": {strconv.Itoa(size)}}
		if err := a.get(ctx, fmt.Sprintf("/api/v1/studies/%d/patients", id), q, &l); err != nil {
			return nil, err
		}
		rows := make([]patientRow, 0, len(l.Results))
		for _, p := range l.Results {
			rows = append(rows, p.row())
		}
		return map[string]any{"study_id": id, "total": l.Count, "page": page, "has_more": l.Next != nil, "patients": rows}, nil
	})
}
