package main

import (
	"fmt"
	"strconv"
	"strings"
)

// settings are the gateway's environment variables, parsed; mcp.New
// checks what they mean. The README's gateway settings table documents
// each one.
type settings struct {
	ServiceURL       string
	ServicePublicURL string
	ClientID         string
	ClientSecret     string
	ResourceURL      string
	BrokerKey        string
	AllowedRedirects []string
	Port             int
	RequireAudience  bool
}

// defaultResourceURL is the reference deployment's public URL of the
// gateway (docker compose on localhost), kept as the specified fallback of
// MCP_RESOURCE_URL.
const defaultResourceURL = "http://localhost:8401"

const defaultPort = 8401

func get(getenv func(string) string, name, def string) string {
	if v := strings.TrimSpace(getenv(name)); v != "" {
		return v
	}
	return def
}

// loadSettings reads the settings of serve. Errors name the setting that
// does not parse; warnings are things that work but are probably wrong.
func loadSettings(getenv func(string) string) (*settings, []string, error) {
	s := &settings{
		ServiceURL:       strings.TrimRight(get(getenv, "SERVICE_BASE_URL", ""), "/"),
		ServicePublicURL: strings.TrimRight(get(getenv, "SERVICE_PUBLIC_URL", ""), "/"),
		ClientID:         get(getenv, "SERVICE_CLIENT_ID", ""),
		ClientSecret:     get(getenv, "SERVICE_CLIENT_SECRET", ""),
		ResourceURL:      strings.TrimRight(get(getenv, "MCP_RESOURCE_URL", ""), "/"),
		BrokerKey:        getenv("MCP_BROKER_KEY"),
	}
	var warnings []string
	if s.ResourceURL == "" {
		s.ResourceURL = defaultResourceURL
		warnings = append(warnings, "MCP_RESOURCE_URL is not set: using "+defaultResourceURL+
			", the reference deployment's address. Any other deployment must set it to the gateway's public URL, or its OAuth metadata advertises the wrong host and clients cannot sign in")
	}
	for _, u := range strings.Split(getenv("MCP_ALLOWED_REDIRECTS"), ",") {
		if u = strings.TrimSpace(u); u != "" {
			s.AllowedRedirects = append(s.AllowedRedirects, u)
		}
	}
	var err error
	if s.Port, err = strconv.Atoi(get(getenv, "MCP_HTTP_PORT", strconv.Itoa(defaultPort))); err != nil || s.Port < 0 || s.Port > 65535 {
		return nil, nil, fmt.Errorf("MCP_HTTP_PORT: %q is not a port number (0-65535)", getenv("MCP_HTTP_PORT"))
	}
	switch v := strings.ToLower(get(getenv, "MCP_REQUIRE_AUDIENCE", "false")); v {
	case "true", "1", "yes":
		s.RequireAudience = true
	case "false", "0", "no":
	default:
		return nil, nil, fmt.Errorf("MCP_REQUIRE_AUDIENCE: %q is not true or false", v)
	}
	return s, warnings, nil
}
