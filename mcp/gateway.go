package mcp

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/server"
	"github.com/prometheus/client_golang/prometheus"
)

// Config is what the gateway needs; cmd/gateway fills it from the
// environment (docs/mcp-gateway.md's settings table names each variable).
type Config struct {
	// ServiceURL is where the gateway reaches the exchange
	// (SERVICE_BASE_URL).
	ServiceURL string
	// ServiceBrowserURL is where users' browsers reach the exchange's
	// login page (SERVICE_PUBLIC_URL); empty: ServiceURL.
	ServiceBrowserURL string
	// ClientID and ClientSecret are the gateway's confidential client at
	// the exchange. Without a secret the gateway cannot introspect and
	// validates tokens with userinfo alone.
	ClientID, ClientSecret string
	// ResourceURL is the gateway's own public URL (MCP_RESOURCE_URL),
	// without a trailing slash: the issuer of its OAuth metadata; the MCP
	// endpoint is ResourceURL/mcp.
	ResourceURL string
	// BrokerKey keys the sealed blobs (MCP_BROKER_KEY, at least
	// MinBrokerKeyLength characters).
	BrokerKey string
	// AllowedRedirects are redirect URIs clients may register beyond https
	// and loopback http ones (MCP_ALLOWED_REDIRECTS).
	AllowedRedirects []string
	// RequireAudience refuses tokens that introspection does not show as
	// issued to ClientID (MCP_REQUIRE_AUDIENCE); needs ClientSecret.
	RequireAudience bool
	// ApprovalLifetime is how long a browser remembers that its user
	// allowed a client and redirect URI on the approval page
	// (MCP_APPROVAL_LIFETIME, DefaultApprovalLifetime); zero: never, the
	// page asks every time.
	ApprovalLifetime time.Duration

	HTTPClient *http.Client     // calls to the exchange; nil: a client with timeouts
	Now        func() time.Time // nil: time.Now; tests move it
	Log        *slog.Logger     // nil: silent
	// Metrics receives the gateway's series; nil: a registry of its own.
	Metrics prometheus.Registerer
	// MetricsHandler serves /metrics on the gateway's port; nil: not here
	// (METRICS_ADDR serves it elsewhere).
	MetricsHandler http.Handler
}

// Gateway is the MCP gateway: the OAuth broker, token validation and the
// Streamable HTTP MCP endpoint, as one http.Handler.
type Gateway struct {
	cfg         Config
	issuer      string // ResourceURL
	resource    string // ResourceURL/mcp: the protected resource
	metadataURL string // its RFC 9728 metadata
	callbackURL string // ResourceURL/oauth/callback, registered at the exchange
	browserURL  string // the exchange's origin as browsers see it
	seal        *sealer
	cookies     cookieSettings // of the approval page and the flow binding
	svc         *service
	health      *healthCheck
	validator   *validator
	tools       *server.MCPServer
	log         *slog.Logger
	metrics     *metrics
}

// New checks the configuration and builds the gateway. Errors name the
// setting at fault.
func New(cfg Config) (*Gateway, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: serviceTimeout}
	}
	if cfg.Metrics == nil {
		cfg.Metrics = prometheus.NewRegistry()
	}
	m := newMetrics(cfg.Metrics)
	// The calls to the exchange are timed and carry the request id.
	client := *cfg.HTTPClient
	client.Transport = upstream{next: cmp.Or[http.RoundTripper](client.Transport, http.DefaultTransport), m: m}
	cfg.HTTPClient = &client
	if err := checkBaseURL("SERVICE_BASE_URL", cfg.ServiceURL); err != nil {
		return nil, err
	}
	if cfg.ServiceBrowserURL == "" {
		cfg.ServiceBrowserURL = cfg.ServiceURL
	}
	if err := checkBaseURL("SERVICE_PUBLIC_URL", cfg.ServiceBrowserURL); err != nil {
		return nil, err
	}
	if err := checkBaseURL("MCP_RESOURCE_URL", cfg.ResourceURL); err != nil {
		return nil, err
	}
	if cfg.ClientID == "" {
		return nil, errors.New("SERVICE_CLIENT_ID: required (the gateway's confidential client at the exchange: MCP_OAUTH_CLIENT_ID there)")
	}
	if cfg.RequireAudience && cfg.ClientSecret == "" {
		return nil, errors.New("MCP_REQUIRE_AUDIENCE=true needs SERVICE_CLIENT_SECRET: only the confidential client can introspect tokens to confirm their audience")
	}
	for _, u := range cfg.AllowedRedirects {
		if p, err := url.Parse(u); err != nil || p.Scheme == "" || p.Fragment != "" {
			return nil, fmt.Errorf("MCP_ALLOWED_REDIRECTS: %q is not an absolute URI without a fragment", u)
		}
	}
	seal, err := newSealer(cfg.BrokerKey, cfg.Now)
	if err != nil {
		return nil, err
	}
	issuer := strings.TrimRight(cfg.ResourceURL, "/")
	svc := &service{base: strings.TrimRight(cfg.ServiceURL, "/"), clientID: cfg.ClientID, clientSecret: cfg.ClientSecret,
		redirectURI: issuer + callbackPath, http: cfg.HTTPClient}
	g := &Gateway{
		cfg: cfg, issuer: issuer, resource: issuer + "/mcp",
		metadataURL: issuer + "/.well-known/oauth-protected-resource/mcp",
		callbackURL: svc.redirectURI, browserURL: strings.TrimRight(cfg.ServiceBrowserURL, "/"),
		seal: seal, cookies: newCookieSettings(issuer), svc: svc, log: logger(cfg.Log), metrics: m,
		validator: &validator{svc: svc, requireAudience: cfg.RequireAudience, now: cfg.Now, cache: map[[32]byte]time.Time{}},
	}
	g.health = &healthCheck{svc: svc, now: cfg.Now}
	g.tools = newToolServer(svc, cfg.Now, g.log, m.countTools())
	return g, nil
}

// checkBaseURL checks the setting name: an http(s) URL without query or
// fragment.
func checkBaseURL(name, raw string) error {
	u, err := url.Parse(raw)
	if raw == "" {
		return fmt.Errorf("%s: required (%s)", name, baseURLs[name])
	}
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%s: %q is not an http(s) URL without query or fragment", name, raw)
	}
	return nil
}

// baseURLs says what each base URL setting is, for the error when it is
// missing.
var baseURLs = map[string]string{
	"SERVICE_BASE_URL":   "where the gateway reaches the exchange, such as http://localhost:8000",
	"SERVICE_PUBLIC_URL": "where browsers reach the exchange's login page",
	"MCP_RESOURCE_URL":   "the gateway's public URL, such as https://mcp.example.org",
}

// The paths of the browser's endpoints.
const (
	authorizePath = "/authorize"      // the approval page, whose cookies are scoped to it on plain http
	callbackPath  = "/oauth/callback" // where the service returns the browser
)

// Handler serves everything the gateway answers.
func (g *Gateway) Handler() http.Handler {
	// Decisions on the approval page come from the page itself: a post from
	// another site is refused by its Sec-Fetch-Site or Origin, before the
	// CSRF cookie is even looked at.
	sameOrigin := http.NewCrossOriginProtection()
	if u, err := url.Parse(g.issuer); err == nil {
		_ = sameOrigin.AddTrustedOrigin(u.Scheme + "://" + u.Host) // the public origin, when a proxy changes Host
	}
	sameOrigin.SetDenyHandler(http.HandlerFunc(crossOriginRefused))

	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", serveLive)
	mux.HandleFunc("GET /ready", g.serveReady)
	if g.cfg.MetricsHandler != nil {
		mux.Handle("GET /metrics", g.cfg.MetricsHandler)
	}
	mux.HandleFunc("GET /.well-known/oauth-protected-resource", g.protectedResourceMetadata)
	mux.HandleFunc("GET /.well-known/oauth-protected-resource/mcp", g.protectedResourceMetadata)
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", g.authorizationServerMetadata)
	mux.HandleFunc("POST /register", g.register)
	mux.HandleFunc("GET "+authorizePath, g.authorize)
	mux.Handle("POST "+authorizePath, sameOrigin.Handler(http.HandlerFunc(g.decide)))
	mux.HandleFunc("GET "+callbackPath, g.callback)
	mux.HandleFunc("POST /token", g.token)
	// Stateless: every request stands alone, so any gateway replica can
	// answer it and a restart loses nothing.
	mux.Handle("/mcp", g.requireToken(server.NewStreamableHTTPServer(g.tools,
		server.WithStateLess(true), server.WithStreamableHTTPLogger(g.log))))
	return g.observe(mux)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
