package mcp_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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

func TestHealth(t *testing.T) {
	s := newStack(t)
	up := s.startGateway(t, nil)
	down := s.startGateway(t, func(c *mcp.Config) { c.ServiceURL = closedPort(t) })
	for g, want := range map[*gateway]string{up: "ok", down: "unreachable"} {
		resp, body := getJSON(t, g.URL+"/health")
		if resp.StatusCode != http.StatusOK || body["status"] != "ok" || body["service"] != want {
			t.Errorf("health: %d %v, want service %s", resp.StatusCode, body, want)
		}
	}
}
