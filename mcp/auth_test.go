package mcp_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"exchange/handlers/handlerstest"
	"exchange/mcp"
)

// mcpStatus sends a ping to /mcp with a token ("" for none) and returns
// the answer's status, headers and JSON body.
func mcpStatus(t *testing.T, g *gateway, token string) (int, http.Header, map[string]any) {
	t.Helper()
	resp, body := handlerstest.SendTo(t, "POST", g.URL+"/mcp", token, `{"jsonrpc":"2.0","id":1,"method":"ping"}`,
		map[string]string{"Accept": "application/json, text/event-stream"})
	return resp.StatusCode, resp.Header, body
}

func TestUnauthorizedCarriesResourceMetadata(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(t, nil)
	metadata := `resource_metadata="` + g.URL + `/.well-known/oauth-protected-resource/mcp"`

	status, h, body := mcpStatus(t, g, "")
	if status != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer ") || !strings.Contains(h.Get("WWW-Authenticate"), metadata) {
		t.Errorf("no token: %d WWW-Authenticate %q", status, h.Get("WWW-Authenticate"))
	}
	if body["error"] == nil {
		t.Errorf("no token: body %v", body)
	}
	// A token the service does not know: the service rejects it.
	status, h, body = mcpStatus(t, g, "not-a-token-of-the-service")
	if status != http.StatusUnauthorized || !strings.Contains(h.Get("WWW-Authenticate"), `error="invalid_token"`) ||
		!strings.Contains(h.Get("WWW-Authenticate"), metadata) || body["error"] != "invalid_token" {
		t.Errorf("unknown token: %d WWW-Authenticate %q body %v", status, h.Get("WWW-Authenticate"), body)
	}
}

// closedPort returns a loopback URL where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// answering is a server that answers every request with one status,
// content type and body.
func answering(t *testing.T, status int, contentType, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestServiceFailuresAreNotUnauthorized: a service that cannot be asked is
// a 503 with Retry-After; a gateway that asks the wrong place or with the
// wrong credentials is a 500. Neither says WWW-Authenticate: the token may
// well be good.
func TestServiceFailuresAreNotUnauthorized(t *testing.T) {
	s := newStack(t)
	w := s.seed(t)
	token := s.userToken(t, w.managerA)
	for _, c := range []struct {
		name   string
		edit   func(*mcp.Config)
		status int
		code   string
	}{
		{"closed port", func(c *mcp.Config) { c.ServiceURL = closedPort(t) }, http.StatusServiceUnavailable, "temporarily_unavailable"},
		{"503", func(c *mcp.Config) {
			c.ServiceURL = answering(t, http.StatusServiceUnavailable, "text/plain", "down for maintenance")
		}, http.StatusServiceUnavailable, "temporarily_unavailable"},
		{"429", func(c *mcp.Config) {
			c.ServiceURL = answering(t, http.StatusTooManyRequests, "application/json", `{"detail": "slow down"}`)
		}, http.StatusServiceUnavailable, "temporarily_unavailable"},
		{"500", func(c *mcp.Config) {
			c.ServiceURL = answering(t, http.StatusInternalServerError, "application/json", `{"error": "server_error"}`)
		}, http.StatusServiceUnavailable, "temporarily_unavailable"},
		{"404 (a stale SERVICE_BASE_URL)", func(c *mcp.Config) {
			c.ServiceURL = answering(t, http.StatusNotFound, "text/html", "<h1>Not Found</h1>")
		}, http.StatusInternalServerError, "server_error"},
		{"not JSON", func(c *mcp.Config) {
			c.ServiceURL = answering(t, http.StatusOK, "text/html", "<html>a web site</html>")
		}, http.StatusInternalServerError, "server_error"},
		{"a path that is not the service", func(c *mcp.Config) { c.ServiceURL = s.env.URL + "/nothing-here" }, http.StatusInternalServerError, "server_error"},
		{"wrong client secret (invalid_client)", func(c *mcp.Config) { c.ClientSecret = "wrong-secret-0123456789abcdefghijklmnop" }, http.StatusInternalServerError, "server_error"},
		{"unknown client id (invalid_client)", func(c *mcp.Config) { c.ClientID = "no-such-client" }, http.StatusInternalServerError, "server_error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := s.startGateway(t, c.edit)
			status, h, body := mcpStatus(t, g, token)
			if status != c.status || body["error"] != c.code || body["error_description"] == "" {
				t.Fatalf("%d %v", status, body)
			}
			if h.Get("WWW-Authenticate") != "" {
				t.Errorf("WWW-Authenticate %q on a %d", h.Get("WWW-Authenticate"), status)
			}
			if got := h.Get("Retry-After"); (status == http.StatusServiceUnavailable) != (got != "") {
				t.Errorf("Retry-After %q on a %d", got, status)
			}
			if !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
				t.Errorf("Content-Type %q", h.Get("Content-Type"))
			}
		})
	}
}

func TestAudienceModes(t *testing.T) {
	s := newStack(t)
	w := s.seed(t)
	// A token for the same user issued to another client (the command
	// line's, as `exchange token create` makes).
	foreign := s.userToken(t, w.managerA)

	strict := s.startGateway(t, func(c *mcp.Config) { c.RequireAudience = true })
	_, brokered := strict.tokens(t, w.managerA)
	if status, _, body := mcpStatus(t, strict, brokered.AccessToken); status != http.StatusOK {
		t.Errorf("strict, a token issued to the gateway: %d %v", status, body)
	}
	status, h, body := mcpStatus(t, strict, foreign)
	if status != http.StatusUnauthorized || !strings.Contains(h.Get("WWW-Authenticate"), `error="invalid_token"`) ||
		!strings.Contains(body["error_description"].(string), "not issued for this gateway") {
		t.Errorf("strict, a token of another client: %d %q %v", status, h.Get("WWW-Authenticate"), body)
	}

	lenient := s.startGateway(t, nil)
	if status, _, body := mcpStatus(t, lenient, foreign); status != http.StatusOK {
		t.Errorf("lenient, a token of another client: %d %v", status, body)
	}
	// Without the client secret: userinfo alone.
	userinfoOnly := s.startGateway(t, func(c *mcp.Config) { c.ClientSecret = "" })
	if status, _, body := mcpStatus(t, userinfoOnly, foreign); status != http.StatusOK {
		t.Errorf("userinfo only, a good token: %d %v", status, body)
	}
	if status, _, _ := mcpStatus(t, userinfoOnly, "bogus"); status != http.StatusUnauthorized {
		t.Errorf("userinfo only, a bogus token: %d", status)
	}
}

// TestReady: /ready is 200 only when the service is ready and accepts
// the gateway's client credentials; otherwise 503 with the reason, which
// names settings and never the service's address. /health, liveness,
// answers 200 all the same.
func TestReady(t *testing.T) {
	s := newStack(t)
	down := closedPort(t)
	for _, c := range []struct {
		name                         string
		edit                         func(*mcp.Config)
		status                       int
		service, credentials, reason string
	}{
		{"up", nil, http.StatusOK, "ok", "accepted", ""},
		{"wrong client secret", func(c *mcp.Config) { c.ClientSecret = "wrong-secret-0123456789abcdefghijklmnop" },
			http.StatusServiceUnavailable, "ok", "refused", "SERVICE_CLIENT_SECRET"},
		{"unknown client id", func(c *mcp.Config) { c.ClientID = "no-such-client" },
			http.StatusServiceUnavailable, "ok", "refused", "SERVICE_CLIENT_ID"},
		{"no client secret", func(c *mcp.Config) { c.ClientSecret = "" }, http.StatusOK, "ok", "unchecked", ""},
		{"service down", func(c *mcp.Config) { c.ServiceURL = down }, http.StatusServiceUnavailable, "unreachable", "unknown", "SERVICE_BASE_URL"},
		{"service failing", func(c *mcp.Config) {
			c.ServiceURL = answering(t, http.StatusServiceUnavailable, "text/plain", "down for maintenance")
		}, http.StatusServiceUnavailable, "HTTP 503", "unknown", "HTTP 503"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var serviceURL string
			g := s.startGateway(t, func(cfg *mcp.Config) {
				if c.edit != nil {
					c.edit(cfg)
				}
				serviceURL = cfg.ServiceURL
			})
			if resp, body := getJSON(t, g.URL+"/health"); resp.StatusCode != http.StatusOK || body["status"] != "ok" {
				t.Errorf("health: %d %v", resp.StatusCode, body)
			}
			resp, body := getJSON(t, g.URL+"/ready")
			if resp.StatusCode != c.status || body["service"] != c.service || body["credentials"] != c.credentials {
				t.Fatalf("%d %v", resp.StatusCode, body)
			}
			if (c.status == http.StatusOK) != (body["status"] == "ok") || (c.status != http.StatusOK) != (body["status"] == "unhealthy") {
				t.Errorf("status %v on a %d", body["status"], resp.StatusCode)
			}
			reason, _ := body["reason"].(string)
			if !strings.Contains(reason, c.reason) || (c.reason == "") != (reason == "") {
				t.Errorf("reason %q, want %q", reason, c.reason)
			}
			if u, _ := url.Parse(serviceURL); strings.Contains(reason, u.Host) {
				t.Errorf("reason %q shows the service's address", reason)
			}
		})
	}
}

// countingProxy is a reverse proxy to the service that counts the requests
// to a path and can be switched to answer 503 to everything (an outage).
type countingProxy struct {
	URL    string
	hits   atomic.Int32
	down   atomic.Bool
	broken atomic.Bool // answers 200 with a body that is not JSON
}

func newCountingProxy(t *testing.T, s *stack, path string) *countingProxy {
	t.Helper()
	target, _ := url.Parse(s.env.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	p := &countingProxy{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == path {
			p.hits.Add(1)
		}
		switch {
		case p.down.Load():
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
		case p.broken.Load() && strings.HasPrefix(r.URL.Path, "/api/"):
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte("<html>not the API</html>"))
		default:
			rp.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

func TestReadyIsCached(t *testing.T) {
	s := newStack(t)
	proxy := newCountingProxy(t, s, "/o/introspect/")
	g := s.startGateway(t, func(c *mcp.Config) { c.ServiceURL = proxy.URL })
	for range 3 {
		if resp, body := getJSON(t, g.URL+"/ready"); resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %v", resp.StatusCode, body)
		}
	}
	if n := proxy.hits.Load(); n != 1 {
		t.Errorf("introspection asked %d times within 5 seconds, want 1", n)
	}
	proxy.down.Store(true)
	g.clock.Advance(6 * time.Second)
	if resp, body := getJSON(t, g.URL+"/ready"); resp.StatusCode != http.StatusServiceUnavailable || body["service"] != "HTTP 503" {
		t.Errorf("after the outage: %d %v", resp.StatusCode, body)
	}
}

// toolCall posts a tools/call to /mcp and returns the status, headers and
// body text.
func toolCall(t *testing.T, g *gateway, token, tool string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", g.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"`+tool+`","arguments":{}}}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(body)
}

// TestOutageDuringACachedTokenCall: the token was validated a moment ago,
// so the call reaches the tool, whose service is down. The answer is the
// documented 503 of an unavailable service, not a JSON-RPC error showing
// the service's address.
func TestOutageDuringACachedTokenCall(t *testing.T) {
	s := newStack(t)
	w := s.seed(t)
	proxy := newCountingProxy(t, s, "")
	g := s.startGateway(t, func(c *mcp.Config) { c.ServiceURL = proxy.URL })
	token := s.userToken(t, w.managerA)
	if status, _, body := toolCall(t, g, token, "count_studies"); status != http.StatusOK || !strings.Contains(body, `{\"count\":1}`) {
		t.Fatalf("before the outage: %d %s", status, body)
	}
	proxy.down.Store(true)
	status, h, body := toolCall(t, g, token, "count_studies")
	if status != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || h.Get("WWW-Authenticate") != "" ||
		!strings.HasPrefix(h.Get("Content-Type"), "application/json") || !strings.Contains(body, `"error":"temporarily_unavailable"`) {
		t.Fatalf("during the outage: %d %v %s", status, h, body)
	}
	if strings.Contains(body, strings.TrimPrefix(proxy.URL, "http://")) || strings.Contains(body, "jsonrpc") {
		t.Errorf("the outage answer shows the service's address or a JSON-RPC error: %s", body)
	}
	proxy.down.Store(false)
	if status, _, body := toolCall(t, g, token, "count_studies"); status != http.StatusOK {
		t.Errorf("after the outage: %d %s", status, body)
	}
}

// TestFaultsAreNotShown: a service answer the gateway cannot read is a
// fault: the client gets a JSON-RPC error that says so, without the
// service's address or Go's error text.
func TestFaultsAreNotShown(t *testing.T) {
	s := newStack(t)
	w := s.seed(t)
	proxy := newCountingProxy(t, s, "")
	g := s.startGateway(t, func(c *mcp.Config) { c.ServiceURL = proxy.URL })
	c := g.mcpClient(t, s.userToken(t, w.managerA))
	proxy.broken.Store(true)
	req := mcpgo.CallToolRequest{}
	req.Params.Name = "list_studies"
	_, err := c.CallTool(context.Background(), req)
	if err == nil || !strings.Contains(err.Error(), "internal error") {
		t.Fatalf("list_studies against an unreadable answer: %v", err)
	}
	for _, leak := range []string{strings.TrimPrefix(proxy.URL, "http://"), "invalid character", "/api/v1", "GET "} {
		if strings.Contains(err.Error(), leak) {
			t.Errorf("the error shows %q: %v", leak, err)
		}
	}
}
