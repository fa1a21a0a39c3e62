package mcp

import (
	"context"
	"strings"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

func capabilitiesTool(a *api) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("get_capabilities", toolOptions(readOnly("FHIR capabilities"), []mcpgo.ToolOption{
		mcpgo.WithDescription("What the service's FHIR R5 interface offers, from its CapabilityStatement. Without resource_type: each resource type with its interactions and search parameter names. With resource_type: that type's search parameters with their types and meanings."),
		mcpgo.WithString("resource_type", mcpgo.Description("A FHIR resource type such as Observation or Patient"), mcpgo.Pattern(`^[A-Z][A-Za-z]{1,63}$`)),
	})...)
	return tool, handle(func(ctx context.Context, req mcpgo.CallToolRequest) (any, error) {
		stmt, err := a.caps.statement(ctx)
		if err != nil {
			return nil, err
		}
		if stmt == nil {
			return nil, toolErrorf("the service publishes no CapabilityStatement (/FHIR/R5/metadata)")
		}
		only := strings.TrimSpace(req.GetString("resource_type", ""))
		var types []map[string]any
		for _, rest := range stmt.Rest {
			for _, r := range rest.Resource {
				interactions := make([]string, 0, len(r.Interaction))
				for _, i := range r.Interaction {
					interactions = append(interactions, i.Code)
				}
				switch {
				case only == "":
					names := make([]string, 0, len(r.SearchParam))
					for _, p := range r.SearchParam {
						names = append(names, p.Name)
					}
					types = append(types, map[string]any{"type": r.Type, "interactions": interactions, "search_params": names})
				case r.Type == only:
					params := make([]map[string]string, 0, len(r.SearchParam))
					for _, p := range r.SearchParam {
						params = append(params, map[string]string{"name": p.Name, "type": p.Type, "documentation": shorten(p.Documentation, 300)})
					}
					return map[string]any{"type": r.Type, "interactions": interactions, "search_params": params}, nil
				}
			}
		}
		if only != "" {
			return nil, toolErrorf("the service offers no FHIR resource type %q (get_capabilities without resource_type lists them)", only)
		}
		return map[string]any{"fhir_version": stmt.FHIRVersion, "software": stmt.Software.Name + " " + stmt.Software.Version, "resource_types": types}, nil
	})
}
