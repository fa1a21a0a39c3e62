package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// schemaInfo is an entry of the service's /api/v1/omh_schemas.
type schemaInfo struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Version   string `json:"version"`
	Title     string `json:"title,omitempty"`
}

// The namespaces of the service's schemas (Open mHealth, IEEE 1752), and
// the names and versions of schemas, checked before they go into a URL
// path.
var (
	schemaNamespaces     = []string{"omh", "ieee"}
	schemaNamePattern    = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,99}$`)
	schemaVersionPattern = regexp.MustCompile(`^[0-9]{1,4}(\.[0-9]{1,4}){0,2}$`)
)

func listSchemasTool(a *api) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("list_omh_schemas", toolOptions(readOnly("List Open mHealth and IEEE 1752 schemas"), []mcpgo.ToolOption{
		mcpgo.WithDescription("The JSON Schemas the service validates data points against, Open mHealth's (namespace omh) and IEEE 1752's (namespace ieee): namespace, name, version, title. A data point's schema_id is namespace:name:version. Each is also the MCP resource {namespace}-schema://{name}/{version}."),
		mcpgo.WithString("contains", mcpgo.Description("Only schemas whose name or title contains this text (case-insensitive)"), mcpgo.MaxLength(100)),
		mcpgo.WithString("namespace", mcpgo.Description("Only the schemas of this namespace: omh (Open mHealth) or ieee (IEEE 1752)"), mcpgo.Enum(schemaNamespaces...)),
	})...)
	return tool, handle(func(ctx context.Context, req mcpgo.CallToolRequest) (any, error) {
		schemas, err := listSchemas(ctx, a)
		if err != nil {
			return nil, err
		}
		part := strings.ToLower(strings.TrimSpace(req.GetString("contains", "")))
		ns := req.GetString("namespace", "")
		schemas = slices.DeleteFunc(schemas, func(s schemaInfo) bool {
			return (ns != "" && s.Namespace != ns) || !strings.Contains(strings.ToLower(s.Name+" "+s.Title), part)
		})
		return map[string]any{"count": len(schemas), "schemas": schemas}, nil
	})
}

func listSchemas(ctx context.Context, a *api) ([]schemaInfo, error) {
	var l listAnswer[schemaInfo]
	if err := a.get(ctx, "/api/v1/omh_schemas", nil, &l); err != nil {
		return nil, err
	}
	return nonNil(l.Results), nil
}

// fetchSchema returns a schema's JSON as the service publishes it.
func fetchSchema(ctx context.Context, a *api, namespace, name, version string) (json.RawMessage, error) {
	if !slices.Contains(schemaNamespaces, namespace) {
		return nil, toolErrorf("namespace must be omh or ieee")
	}
	if !schemaNamePattern.MatchString(name) || !schemaVersionPattern.MatchString(version) {
		return nil, toolErrorf("name must look like heart-rate and version like 2.0")
	}
	var schema json.RawMessage
	if err := a.get(ctx, fmt.Sprintf("/api/v1/omh_schemas/%s/%s/%s", namespace, url.PathEscape(name), url.PathEscape(version)), nil, &schema); err != nil {
		return nil, err
	}
	return schema, nil
}

func getSchemaTool(a *api) (mcpgo.Tool, server.ToolHandlerFunc) {
	tool := mcpgo.NewTool("get_omh_schema", toolOptions(readOnly("Fetch an Open mHealth or IEEE 1752 schema"), []mcpgo.ToolOption{
		mcpgo.WithDescription("One JSON Schema by namespace, name and version, as the service publishes it: what a data point of that type must contain."),
		mcpgo.WithString("namespace", mcpgo.Description("omh (Open mHealth, the default) or ieee (IEEE 1752)"), mcpgo.Enum(schemaNamespaces...), mcpgo.DefaultString("omh")),
		mcpgo.WithString("name", mcpgo.Required(), mcpgo.Description("Schema name without namespace, such as heart-rate"), mcpgo.MaxLength(100)),
		mcpgo.WithString("version", mcpgo.Required(), mcpgo.Description("Schema version, such as 2.0"), mcpgo.MaxLength(14)),
	})...)
	return tool, handle(func(ctx context.Context, req mcpgo.CallToolRequest) (any, error) {
		return fetchSchema(ctx, a, req.GetString("namespace", "omh"), req.GetString("name", ""), req.GetString("version", ""))
	})
}

// schemaResourceTemplate offers every schema of a namespace as a resource,
// {namespace}-schema://{name}/{version}.
func schemaResourceTemplate(a *api, namespace, title string) (mcpgo.ResourceTemplate, server.ResourceTemplateHandlerFunc) {
	scheme := namespace + "-schema"
	tmpl := mcpgo.NewResourceTemplate(scheme+"://{name}/{version}", title+" schema",
		mcpgo.WithTemplateDescription("An "+title+" JSON Schema the service validates data points against (list them with list_omh_schemas)"),
		mcpgo.WithTemplateMIMEType("application/schema+json"))
	return tmpl, func(ctx context.Context, req mcpgo.ReadResourceRequest) ([]mcpgo.ResourceContents, error) {
		u, err := url.Parse(req.Params.URI)
		if err != nil || u.Scheme != scheme {
			return nil, fmt.Errorf("%q is not a %s://{name}/{version} URI: %w", req.Params.URI, scheme, server.ErrResourceNotFound)
		}
		schema, err := fetchSchema(ctx, a, namespace, u.Host, strings.Trim(u.Path, "/"))
		var te *toolError
		var ae *apiError
		switch {
		case errors.As(err, &te):
			return nil, fmt.Errorf("%s: %s: %w", req.Params.URI, te.msg, server.ErrResourceNotFound)
		case errors.As(err, &ae) && ae.status == http.StatusNotFound:
			return nil, fmt.Errorf("%s: %s: %w", req.Params.URI, ae.detail, server.ErrResourceNotFound)
		case err != nil:
			return nil, err
		}
		return []mcpgo.ResourceContents{mcpgo.TextResourceContents{URI: req.Params.URI, MIMEType: "application/schema+json", Text: string(schema)}}, nil
	}
}
