package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/mcp"
	"exchange/oauth"
	"exchange/repo/repotest"
)

func TestMain(m *testing.M) { repotest.Main(m) }

// env is a getenv over a map.
func env(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

func goodVars() map[string]string {
	return map[string]string{
		"SERVICE_BASE_URL": "http://127.0.0.1:1", "SERVICE_CLIENT_ID": "gw",
		"SERVICE_CLIENT_SECRET": "gateway-secret-0123456789abcdefghijkl",
		"MCP_RESOURCE_URL":      "https://mcp.example.org", "MCP_BROKER_KEY": strings.Repeat("k", 32),
	}
}

func TestSettingsRefusedAtStartUp(t *testing.T) {
	for _, c := range []struct {
		name, value, want string
	}{
		{"MCP_BROKER_KEY", strings.Repeat("k", 31), "MCP_BROKER_KEY: required, at least 32 characters"},
		{"MCP_BROKER_KEY", "", "MCP_BROKER_KEY"},
		{"SERVICE_BASE_URL", "", "SERVICE_BASE_URL: required"},
		{"SERVICE_BASE_URL", "ftp://service", "SERVICE_BASE_URL"},
		{"SERVICE_CLIENT_ID", "", "SERVICE_CLIENT_ID: required"},
		{"MCP_HTTP_PORT", "eighty", "MCP_HTTP_PORT"},
		{"MCP_HTTP_ADDR", "8401", "MCP_HTTP_ADDR"},
		{"MCP_HTTP_ADDR", "127.0.0.1:http", "MCP_HTTP_ADDR"},
		{"MCP_HTTP_ADDR", "127.0.0.1:70000", "MCP_HTTP_ADDR"},
		{"MCP_APPROVAL_LIFETIME", "30d", "MCP_APPROVAL_LIFETIME"},
		{"MCP_APPROVAL_LIFETIME", "-1h", "MCP_APPROVAL_LIFETIME"},
		{"MCP_REQUIRE_AUDIENCE", "maybe", "MCP_REQUIRE_AUDIENCE"},
		{"MCP_ALLOWED_REDIRECTS", "https://ok.example/cb,https://bad.example/cb#frag", "MCP_ALLOWED_REDIRECTS"},
	} {
		vars := goodVars()
		vars[c.name] = c.value
		var stderr bytes.Buffer
		err := run(context.Background(), nil, env(vars), nil, io.Discard, &stderr)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s=%q: %v, want %q", c.name, c.value, err, c.want)
		}
	}
	vars := goodVars()
	vars["MCP_REQUIRE_AUDIENCE"] = "true"
	delete(vars, "SERVICE_CLIENT_SECRET")
	err := run(context.Background(), nil, env(vars), nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "MCP_REQUIRE_AUDIENCE=true needs SERVICE_CLIENT_SECRET") {
		t.Errorf("audience required without a secret: %v", err)
	}
	if err := run(context.Background(), []string{"frobnicate"}, env(vars), nil, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Errorf("unknown command: %v", err)
	}
	vars = goodVars()
	vars["MCP_HTTP_ADDR"], vars["MCP_HTTP_PORT"] = "127.0.0.1:8401", "8401"
	if err := run(context.Background(), nil, env(vars), nil, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "set MCP_HTTP_ADDR only") {
		t.Errorf("both MCP_HTTP_ADDR and MCP_HTTP_PORT: %v", err)
	}
}

// TestListenAddress: loopback unless told otherwise; the MCP_HTTP_PORT of
// earlier versions keeps its meaning (every interface) with a warning.
func TestListenAddress(t *testing.T) {
	for _, c := range []struct {
		vars    map[string]string
		addr    string
		warning string
	}{
		{nil, "127.0.0.1:8401", ""},
		{map[string]string{"MCP_HTTP_ADDR": "0.0.0.0:8401"}, "0.0.0.0:8401", ""},
		{map[string]string{"MCP_HTTP_ADDR": "[::1]:9000"}, "[::1]:9000", ""},
		{map[string]string{"MCP_HTTP_PORT": "9000"}, ":9000", "MCP_HTTP_PORT is deprecated: set MCP_HTTP_ADDR=0.0.0.0:9000"},
	} {
		vars := goodVars()
		for k, v := range c.vars {
			vars[k] = v
		}
		s, warnings, err := loadSettings(env(vars))
		if err != nil {
			t.Fatalf("%v: %v", c.vars, err)
		}
		if s.Addr != c.addr || (c.warning == "") != (len(warnings) == 0) || (c.warning != "" && !strings.Contains(strings.Join(warnings, "\n"), c.warning)) {
			t.Errorf("%v: addr %q warnings %q, want %q %q", c.vars, s.Addr, warnings, c.addr, c.warning)
		}
		if s.ApprovalLifetime != mcp.DefaultApprovalLifetime {
			t.Errorf("MCP_APPROVAL_LIFETIME default %v", s.ApprovalLifetime)
		}
	}
	vars := goodVars()
	vars["MCP_APPROVAL_LIFETIME"] = "0"
	if s, _, err := loadSettings(env(vars)); err != nil || s.ApprovalLifetime != 0 {
		t.Errorf("MCP_APPROVAL_LIFETIME=0: %v %v", s, err)
	}
}

var listening = regexp.MustCompile(`msg="gateway listening" addr=\S*:(\d+)`)

// TestServeWarnsAboutTheResourceURLFallback starts the program as users
// do, without MCP_RESOURCE_URL: it warns, serves, advertises the reference
// address and stops on cancel. Without METRICS_TOKEN it warns that
// /metrics is public too.
func TestServeWarnsAboutTheResourceURLFallback(t *testing.T) {
	svc := handlerstest.Start(t)
	vars := goodVars()
	vars["SERVICE_BASE_URL"], vars["MCP_HTTP_ADDR"] = svc.URL, "127.0.0.1:0"
	// The gateway's client at the service, so /health finds its
	// credentials accepted.
	if _, err := svc.OAuth.SaveClient(context.Background(), oauth.ClientRegistration{ID: vars["SERVICE_CLIENT_ID"], Secret: vars["SERVICE_CLIENT_SECRET"],
		Name: "MCP gateway", Type: domain.ClientConfidential, RedirectURIs: []string{defaultResourceURL + "/oauth/callback"}, SkipAuthorization: true,
		Scopes: oauth.GatewayScopes}); err != nil {
		t.Fatal(err)
	}
	delete(vars, "MCP_RESOURCE_URL")
	port, logs := serveForTest(t, vars)
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "MCP_RESOURCE_URL is not set: using http://localhost:8401") {
		t.Errorf("no start-up warning about MCP_RESOURCE_URL:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "/metrics is public") {
		t.Errorf("no start-up warning about /metrics served without METRICS_TOKEN:\n%s", logs.String())
	}
	resp, err := http.Get("http://127.0.0.1:" + port + "/.well-known/oauth-protected-resource")
	if err != nil {
		t.Fatal(err)
	}
	var prm map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&prm)
	resp.Body.Close()
	if prm["resource"] != "http://localhost:8401/mcp" {
		t.Errorf("resource %v", prm["resource"])
	}
	if err := healthcheck(context.Background(), env(map[string]string{"MCP_HTTP_ADDR": "0.0.0.0:" + port})); err != nil {
		t.Errorf("healthcheck: %v", err)
	}
	if !strings.Contains(logs.String(), `addr=127.0.0.1:`+port) {
		t.Errorf("the gateway does not listen on loopback only:\n%s", logs.String())
	}
}

// serveForTest runs the program's serve command with the settings, as users
// start it, until the test ends, and returns the port it listens on and
// its logs (text).
func serveForTest(t *testing.T, vars map[string]string) (string, *handlerstest.LogBuffer) {
	t.Helper()
	vars["LOG_FORMAT"] = "text" // what the patterns read
	ctx, cancel := context.WithCancel(context.Background())
	logs := &handlerstest.LogBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"serve"}, env(vars), nil, io.Discard, logs) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve returned %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("serve did not stop")
		}
	})
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := listening.FindStringSubmatch(logs.String()); m != nil {
			return m[1], logs
		}
	}
	t.Fatalf("no listening line:\n%s", logs.String())
	return "", nil
}

// TestServedGatewayBindsFlowsToTheBrowser: the program as served answers
// the service's return only in the browser that approved the flow; the
// link it forwards to, opened anywhere else, ends on an error page.
func TestServedGatewayBindsFlowsToTheBrowser(t *testing.T) {
	svc := handlerstest.Start(t)
	vars := goodVars()
	vars["SERVICE_BASE_URL"], vars["MCP_HTTP_ADDR"] = svc.URL, "127.0.0.1:0"
	port, _ := serveForTest(t, vars)
	base := "http://127.0.0.1:" + port
	const redirect = "https://assistant.example/cb"
	resp, reg := handlerstest.SendTo(t, "POST", base+"/register", "", map[string]any{"redirect_uris": []string{redirect}}, nil)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("register: %d %v", resp.StatusCode, reg)
	}
	q := url.Values{"client_id": {reg["client_id"].(string)}, "redirect_uri": {redirect}, "response_type": {"code"}, "state": {"client-state"},
		"code_challenge": {oauth2.S256ChallengeFromVerifier(oauth2.GenerateVerifier())}, "code_challenge_method": {"S256"}}
	approver := handlerstest.NewBrowser(t, func(*url.URL) bool { return true })
	_, page := approver.Do("GET", base+"/authorize?"+q.Encode(), nil)
	_, form := handlerstest.Form(t, page) // posted to the gateway as served, not to its public URL
	form.Set("decision", "allow")
	resp, _ = approver.Do("POST", base+"/authorize", form)
	to, _ := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || !strings.HasPrefix(to.String(), svc.URL+"/o/authorize/") {
		t.Fatalf("allow: %d to %s", resp.StatusCode, to)
	}
	// The service's return, as it would come: in another browser, refused
	// and sent nowhere; in the approver's, on to the client.
	back := base + "/oauth/callback?" + url.Values{"state": {to.Query().Get("state")}, "code": {"service-code"}}.Encode()
	if resp, page := handlerstest.NewBrowser(t, func(*url.URL) bool { return true }).Do("GET", back, nil); resp.StatusCode != http.StatusForbidden ||
		resp.Header.Get("Location") != "" || !strings.Contains(page, "not started in this browser") {
		t.Errorf("another browser: %d Location %q\n%s", resp.StatusCode, resp.Header.Get("Location"), page)
	}
	if resp, _ := approver.Do("GET", back, nil); resp.StatusCode != http.StatusFound || !strings.HasPrefix(resp.Header.Get("Location"), redirect+"?code=") {
		t.Errorf("the approver's browser: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// TestStdio speaks MCP over the stdio transport with a service token.
func TestStdio(t *testing.T) {
	svc := handlerstest.Start(t)
	user := svc.Practitioner(t, "doc@example.org", true)
	token := svc.Token(t, user.ID)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"stdio"}, env(map[string]string{"SERVICE_BASE_URL": svc.URL, "SERVICE_ACCESS_TOKEN": token}), inR, outW, io.Discard)
		outW.Close()
	}()
	lines := bufio.NewScanner(outR)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	exchange := func(request string) map[string]any {
		t.Helper()
		if _, err := io.WriteString(inW, request+"\n"); err != nil {
			t.Fatal(err)
		}
		if !lines.Scan() {
			t.Fatalf("no answer to %s: %v", request, lines.Err())
		}
		var answer map[string]any
		if err := json.Unmarshal(lines.Bytes(), &answer); err != nil {
			t.Fatalf("%v: %s", err, lines.Text())
		}
		return answer
	}
	hello := exchange(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}`)
	if hello["result"] == nil {
		t.Fatalf("initialize: %v", hello)
	}
	if _, err := io.WriteString(inW, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	answer := exchange(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"count_studies","arguments":{}}}`)
	result, _ := answer["result"].(map[string]any)
	content, _ := result["content"].([]any)
	if len(content) != 1 || result["isError"] == true || content[0].(map[string]any)["text"] != `{"count":0}` {
		t.Fatalf("count_studies over stdio: %v", answer)
	}
	inW.Close()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("stdio did not stop")
	}
	if err := run(context.Background(), []string{"stdio"}, env(map[string]string{"SERVICE_BASE_URL": svc.URL}), nil, io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "SERVICE_ACCESS_TOKEN") {
		t.Errorf("stdio without a token: %v", err)
	}
}
