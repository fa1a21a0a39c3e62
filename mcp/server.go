package mcp

import (
	"log/slog"
	"net/http"
	"strings"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Version is the gateway's version in the MCP handshake.
const Version = "0.1.0"

// toolConstructors builds every tool, in the order clients list them:
// studies, patients, observations, schemas, capabilities.
var toolConstructors = []func(*api) (mcpgo.Tool, server.ToolHandlerFunc){
	countStudiesTool, listStudiesTool, getStudyTool, listStudyPatientsTool,
	searchPatientsTool, getPatientTool, patientDataRangeTool,
	listObservationsTool, countObservationsTool, summarizeObservationsTool,
	listSchemasTool, getSchemaTool,
	capabilitiesTool,
}

const instructions = `Tools over a clinical data exchange, acting as the signed-in user: they see exactly what the service lets that user see.
Start with list_studies or search_patients; patient_data_range or summarize_observations tell where a patient's data lies before list_observations fetches it.
Results are compact and paged: follow has_more with next_cursor (FHIR searches) or page (lists).`

// newToolServer is the MCP server with every tool over the service. Tool
// calls act with the token WithToken put in their context.
func newToolServer(svc *service, now func() time.Time, log *slog.Logger, outer ...server.ToolHandlerMiddleware) *server.MCPServer {
	a := &api{svc: svc, caps: &capabilities{svc: svc, now: now, log: log}}
	opts := []server.ServerOption{
		server.WithInstructions(instructions),
		server.WithToolCapabilities(false),
		server.WithResourceCapabilities(false, false),
		server.WithInputSchemaValidation(),
		server.WithStrictInputSchemaDefault(),
	}
	// The first middleware is the outermost: outer ones (the metrics) see
	// what guard made of a call.
	for _, m := range outer {
		opts = append(opts, server.WithToolHandlerMiddleware(m))
	}
	opts = append(opts, server.WithToolHandlerMiddleware(guardTools(log)), server.WithResourceHandlerMiddleware(guardResources(log)))
	s := server.NewMCPServer("exchange-mcp-gateway", Version, opts...)
	for _, build := range toolConstructors {
		s.AddTool(build(a))
	}
	s.AddResourceTemplate(schemaResourceTemplate(a, "omh", "Open mHealth"))
	s.AddResourceTemplate(schemaResourceTemplate(a, "ieee", "IEEE 1752"))
	return s
}

// NewToolServer is the MCP server of the stdio transport: every tool over
// the service at serviceURL, acting with the token WithToken puts in each
// call's context.
func NewToolServer(serviceURL string, httpClient *http.Client, log *slog.Logger) (*server.MCPServer, error) {
	if err := checkBaseURL("SERVICE_BASE_URL", serviceURL); err != nil {
		return nil, err
	}
	if httpClient == nil {
		httpClient = &http.Client{Timeout: serviceTimeout}
	}
	svc := &service{base: strings.TrimRight(serviceURL, "/"), http: httpClient}
	return newToolServer(svc, time.Now, logger(log)), nil
}
