package main

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"exchange/mcp"
	"exchange/telemetry"
)

// settings are the gateway's environment variables, parsed; mcp.New
// checks what they mean. The gateway settings table of docs/mcp-gateway.md documents
// each one.
type settings struct {
	ServiceURL       string
	ServicePublicURL string
	ClientID         string
	ClientSecret     string
	ResourceURL      string
	BrokerKey        string
	AllowedRedirects []string
	Addr             string
	RequireAudience  bool
	ApprovalLifetime time.Duration
	Metrics          telemetry.MetricsConfig
}

// defaultResourceURL is the reference deployment's public URL of the
// gateway (docker compose on localhost), kept as the specified fallback of
// MCP_RESOURCE_URL.
const defaultResourceURL = "http://localhost:8401"

// defaultAddr is where the gateway listens without MCP_HTTP_ADDR: loopback
// only, so a gateway started by hand is not reachable from the network
// until its operator says so (compose sets 0.0.0.0:8401).
const defaultAddr = "127.0.0.1:8401"

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
	var warning string
	if s.Addr, warning, err = listenAddr(getenv); err != nil {
		return nil, nil, err
	}
	if warning != "" {
		warnings = append(warnings, warning)
	}
	switch v := strings.ToLower(get(getenv, "MCP_REQUIRE_AUDIENCE", "false")); v {
	case "true", "1", "yes":
		s.RequireAudience = true
	case "false", "0", "no":
	default:
		return nil, nil, fmt.Errorf("MCP_REQUIRE_AUDIENCE: %q is not true or false", v)
	}
	lifetime := get(getenv, "MCP_APPROVAL_LIFETIME", mcp.DefaultApprovalLifetime.String())
	if s.ApprovalLifetime, err = time.ParseDuration(lifetime); err != nil || s.ApprovalLifetime < 0 {
		return nil, nil, fmt.Errorf("MCP_APPROVAL_LIFETIME: %q is not a duration such as 720h (0: never remember an approval)", lifetime)
	}
	if s.Metrics, err = telemetry.ParseMetricsConfig(getenv("METRICS_ADDR"), getenv("METRICS_TOKEN")); err != nil {
		return nil, nil, err
	}
	return s, warnings, nil
}

// listenAddr is the gateway's listening address: MCP_HTTP_ADDR (host:port),
// or the MCP_HTTP_PORT of earlier versions, which listened on every
// interface and still does, with a warning naming its replacement.
func listenAddr(getenv func(string) string) (addr, warning string, err error) {
	addr, port := get(getenv, "MCP_HTTP_ADDR", ""), get(getenv, "MCP_HTTP_PORT", "")
	name := "MCP_HTTP_ADDR"
	switch {
	case addr != "" && port != "":
		return "", "", fmt.Errorf("MCP_HTTP_PORT: set MCP_HTTP_ADDR only (MCP_HTTP_PORT is its older form)")
	case port != "":
		name, addr = "MCP_HTTP_PORT", ":"+port
		warning = "MCP_HTTP_PORT is deprecated: set MCP_HTTP_ADDR=0.0.0.0:" + port + " to keep listening on every interface, or leave it unset for " + defaultAddr
	case addr == "":
		addr = defaultAddr
	}
	_, p, err := net.SplitHostPort(addr)
	if n, perr := strconv.Atoi(p); err != nil || perr != nil || n < 0 || n > 65535 {
		return "", "", fmt.Errorf("%s: %q is not host:port with a port number 0-65535 (such as %s, or 0.0.0.0:8401 for every interface)", name, getenv(name), defaultAddr)
	}
	return addr, warning, nil
}
