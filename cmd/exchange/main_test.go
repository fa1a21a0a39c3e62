package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"exchange/fhirdefs"
	"exchange/oauth"
)

// env returns a getenv over the map.
func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestSettingsDefaults(t *testing.T) {
	s, err := loadSettings(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if s.Port != 8000 || s.MongoURI != "" || s.MongoDatabase != "exchange" || s.DataDir != "data" ||
		s.EmbeddedMongoAddr != "127.0.0.1:27017" || s.PatientCodeTTL != 7*24*time.Hour ||
		s.MCPRedirectURI != defaultMCPRedirectURI || s.PatientChallenge != s256(s.PatientVerifier) ||
		s.SessionLifetime != 12*time.Hour || s.SessionIdle != 30*time.Minute || s.TrustedProxies.Trusts(netip.MustParseAddr("127.0.0.1")) ||
		s.MaxDataPointBytes != 1<<20 {
		t.Errorf("defaults: %+v", s)
	}
	s, err = loadSettings(env(map[string]string{"TRUSTED_PROXIES": "10.0.0.0/8, 127.0.0.1", "LOGIN_SESSION_LIFETIME": "1d", "LOGIN_SESSION_IDLE_TIMEOUT": "15m"}))
	if err != nil || !s.TrustedProxies.Trusts(netip.MustParseAddr("10.2.3.4")) || !s.TrustedProxies.Trusts(netip.MustParseAddr("127.0.0.1")) ||
		s.TrustedProxies.Trusts(netip.MustParseAddr("127.0.0.2")) || s.SessionLifetime != 24*time.Hour || s.SessionIdle != 15*time.Minute {
		t.Errorf("proxies and sessions: %+v %v", s, err)
	}
	s, err = loadSettings(env(map[string]string{"PATIENT_AUTHORIZATION_CODE_TTL": "36h", "FHIR_SOURCE_BASE": "https://x.example.org/src/",
		"MAX_DATA_POINT_BYTES": "4096"}))
	if err != nil || s.PatientCodeTTL != 36*time.Hour || s.FHIRSourceBase != "https://x.example.org/src" || s.MaxDataPointBytes != 4096 {
		t.Errorf("TTL and base: %+v %v", s, err)
	}
	// Operations: JSON logs at info, metrics on the main port, the audit trail kept for ever, two search
	// slots of the embedded database for 10 s; and each set.
	if s, _ := loadSettings(env(nil)); !s.Log.JSON || s.Log.Level != slog.LevelInfo || s.Metrics.Addr != "" || s.AuditRetention != 0 ||
		s.AuditBuffer != 10000 || s.EmbeddedSearchSlots != 2 || s.EmbeddedSearchQueue != 10*time.Second || s.GoMemLimitSet {
		t.Errorf("operations defaults: %+v", s)
	}
	s, err = loadSettings(env(map[string]string{"LOG_FORMAT": "text", "LOG_LEVEL": "debug", "METRICS_ADDR": ":9090", "METRICS_TOKEN": "a-metrics-token-0123",
		"AUDIT_RETENTION": "2190d", "AUDIT_BUFFER": "50", "EMBEDDED_SEARCH_SLOTS": "4", "EMBEDDED_SEARCH_QUEUE": "30s", "GOMEMLIMIT": "1GiB"}))
	if err != nil || s.Log.JSON || s.Log.Level != slog.LevelDebug || s.Metrics.Addr != ":9090" || s.Metrics.Token != "a-metrics-token-0123" ||
		s.AuditRetention != 2190*24*time.Hour || s.AuditBuffer != 50 || s.EmbeddedSearchSlots != 4 || s.EmbeddedSearchQueue != 30*time.Second || !s.GoMemLimitSet {
		t.Errorf("operations settings: %+v %v", s, err)
	}
}

func TestBadSettingsStopStartUpWithOneLine(t *testing.T) {
	verifier := strings.Repeat("v", 43)
	for _, tc := range []struct{ name, value string }{
		{"PORT", "eighty"},
		{"PORT", "70000"},
		{"MONGODB_URI", "postgres://localhost"},
		{"MONGODB_DATABASE", "my.db"},
		{"SECRET_KEY", "short"},
		{"OIDC_RSA_PRIVATE_KEY", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----"},
		{"PATIENT_AUTHORIZATION_CODE_CHALLENGE", "not-the-challenge"},
		{"PATIENT_AUTHORIZATION_CODE_VERIFIER", "too short"},
		{"PATIENT_AUTHORIZATION_CODE_VERIFIER", verifier}, // valid, but no longer matches the default challenge
		{"PATIENT_AUTHORIZATION_CODE_TTL", "forever"},
		{"PATIENT_AUTHORIZATION_CODE_TTL", "-1h"},
		{"MCP_OAUTH_CLIENT_ID", "gateway"}, // without its secret
		{"MCP_OAUTH_REDIRECT_URI", "callback"},
		{"EMBEDDED_MONGO_ADDR", "27017"},
		{"FHIR_SOURCE_BASE", "ftp://x.example.org"},
		{"OMH_SCHEMA_DIR", "/nonexistent/schemas"},
		{"OMH_IEEE_SCHEMA_DIR", "/nonexistent/ieee-1752"},
		{"FHIR_XVER_PACKAGE_DIR", "/nonexistent/maps"},
		{"TRUSTED_PROXIES", "proxy.example.org"},
		{"TRUSTED_PROXIES", "10.0.0.0/40"},
		{"LOGIN_SESSION_LIFETIME", "forever"},
		{"LOGIN_SESSION_IDLE_TIMEOUT", "10s"},
		{"FHIR_XVER_CONCEPTMAPS_DIR", "/nonexistent/conceptmaps"},
		{"FHIR_XVER_TRANSLATE_CODES", "sometimes"},
		{"MAX_DATA_POINT_BYTES", "1MiB"},
		{"MAX_DATA_POINT_BYTES", "0"},
		{"LOG_FORMAT", "xml"},
		{"LOG_LEVEL", "loud"},
		{"METRICS_ADDR", "9090"},
		{"METRICS_TOKEN", "short"},
		{"AUDIT_RETENTION", "forever"},
		{"AUDIT_RETENTION", "-1d"},
		{"AUDIT_BUFFER", "0"},
		{"EMBEDDED_SEARCH_SLOTS", "many"},
		{"EMBEDDED_SEARCH_QUEUE", "0"},
		{"IDENTITY_PROVIDERS_FILE", "/nonexistent/providers.json"},
		{"IDENTITY_PROVIDERS_FILE", badProvidersFile(t)},
		{"PASSWORD_SIGN_IN", "maybe"},
		{"TOKEN_EXCHANGE_TRUSTED_ISSUERS", "http://ehr.example.org"},
		{"TOKEN_EXCHANGE_TRUSTED_ISSUERS", "https://ehr.example.org"}, // without its audience
		{"PUBLIC_URL", "exchange.example.org"},
		{"PUBLIC_URL", "https://exchange.example.org/console"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), nil, env(map[string]string{tc.name: tc.value, "DATA_DIR": t.TempDir()}), nil, &stdout, &stderr)
		if err == nil {
			t.Errorf("%s=%q: started", tc.name, tc.value)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, tc.name) || strings.Contains(msg, "\n") {
			t.Errorf("%s=%q: error %q should be one line naming the setting", tc.name, tc.value, msg)
		}
	}
	// Emailed links need the service's public URL: a request's Host would
	// send them wherever the request's sender chose.
	mail := map[string]string{"SMTP_URL": "smtp://127.0.0.1:2525", "SMTP_FROM": "exchange@example.org"}
	if _, err := loadSettings(env(mail)); err == nil || !strings.Contains(err.Error(), "PUBLIC_URL") {
		t.Errorf("SMTP_URL without PUBLIC_URL: %v", err)
	}
	mail["PUBLIC_URL"] = "https://exchange.example.org/"
	if s, err := loadSettings(env(mail)); err != nil || s.PublicURL != "https://exchange.example.org" {
		t.Errorf("SMTP_URL with PUBLIC_URL: %v, %+v", err, s)
	}
	// A matching pair of one's own is accepted.
	if _, err := loadSettings(env(map[string]string{"PATIENT_AUTHORIZATION_CODE_VERIFIER": verifier, "PATIENT_AUTHORIZATION_CODE_CHALLENGE": s256(verifier)})); err != nil {
		t.Errorf("matching PKCE pair: %v", err)
	}
}

// The Open mHealth schemas reference IEEE 1752 schemas: without them the
// server does not start (it would accept anything where they apply), and
// says which setting to fix.
func TestIEEESchemasRequired(t *testing.T) {
	err := run(context.Background(), nil, env(map[string]string{"DATA_DIR": t.TempDir(), "PORT": "0", "EMBEDDED_MONGO_ADDR": "127.0.0.1:0",
		"OMH_SCHEMA_DIR": filepath.Join("..", "..", "standards", "omh", "schemas"), "OMH_IEEE_SCHEMA_DIR": t.TempDir()}), nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "OMH_IEEE_SCHEMA_DIR") || strings.Contains(err.Error(), "\n") {
		t.Errorf("started without the IEEE 1752 schemas, or said so unclearly: %v", err)
	}
}

// The R4 import translates codes by the official ConceptMaps, found
// beside the maps; FHIR_XVER_TRANSLATE_CODES=false passes them through.
func TestTranslateCodesSetting(t *testing.T) {
	standards := filepath.Join("..", "..", "standards")
	r5, _, err := fhirdefs.OpenR5(filepath.Join(standards, "fhir-packages"))
	if err != nil {
		t.Fatalf("%v (run scripts/setup first)", err)
	}
	for _, c := range []struct {
		translate, status string
		translated        int
	}{{"", "completed", 1}, {"true", "completed", 1}, {"false", "finished", 0}} {
		s, err := loadSettings(env(map[string]string{"FHIR_XVER_TRANSLATE_CODES": c.translate,
			"FHIR_PACKAGES_DIR": filepath.Join(standards, "fhir-packages"), "FHIR_XVER_PACKAGE_DIR": filepath.Join(standards, "fhir", "xver-r4-r5", "maps")}))
		if err != nil {
			t.Fatal(err)
		}
		im, err := openImporter(s, r5, slog.New(slog.DiscardHandler))
		if err != nil || im == nil {
			t.Fatalf("%q: %v %v", c.translate, im, err)
		}
		conv, err := im.ConvertR4(map[string]any{"resourceType": "Encounter", "status": "finished", "class": map[string]any{"code": "AMB"}}, nil)
		if err != nil || !strings.Contains(string(conv.Body), `"status":"`+c.status+`"`) || len(conv.Translated) != c.translated {
			t.Errorf("FHIR_XVER_TRANSLATE_CODES=%q: %s %v %v", c.translate, conv.Body, conv.Translated, err)
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	err := run(context.Background(), []string{"frobnicate"}, env(nil), nil, io.Discard, io.Discard)
	if !errors.As(err, new(usageError)) {
		t.Errorf("unknown command: %v", err)
	}
	err = run(context.Background(), []string{"seed", "--bogus"}, env(nil), nil, io.Discard, io.Discard)
	if !errors.As(err, new(usageError)) {
		t.Errorf("unknown flag: %v", err)
	}
}

// programVars are the settings of the program over a data directory, on
// free ports, with the standards of the worktree.
func programVars(dataDir string) map[string]string {
	standards := filepath.Join("..", "..", "standards")
	return map[string]string{"DATA_DIR": dataDir, "PORT": "0", "EMBEDDED_MONGO_ADDR": "127.0.0.1:0",
		"FHIR_PACKAGES_DIR": filepath.Join(standards, "fhir-packages"), "FHIR_XVER_PACKAGE_DIR": filepath.Join(standards, "fhir", "xver-r4-r5", "maps"),
		"OMH_SCHEMA_DIR": filepath.Join(standards, "omh", "schemas")}
}

// TestSeedRepairsTheGatewayClient: seed registers the MCP gateway's client
// for its read-only scopes only, and narrows a registration made before
// for every scope (trusted, as earlier versions of seed made it).
func TestSeedRepairsTheGatewayClient(t *testing.T) {
	vars := programVars(t.TempDir())
	vars["MCP_OAUTH_CLIENT_ID"], vars["MCP_OAUTH_CLIENT_SECRET"] = "gateway", "gateway-secret-0123456789abcdefghijklmnop"
	vars["MCP_OAUTH_REDIRECT_URI"] = "https://mcp.example.org/oauth/callback"
	ctx := context.Background()
	scopesOf := func() string {
		t.Helper()
		var out bytes.Buffer
		if err := run(ctx, []string{"clients", "list"}, env(vars), nil, &out, io.Discard); err != nil {
			t.Fatalf("clients list: %v", err)
		}
		m := regexp.MustCompile(`(?m)^gateway\s.*?https://mcp\.example\.org/oauth/callback\s+(.*)$`).FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("clients list has no gateway client:\n%s", out.String())
		}
		return strings.TrimSpace(m[1])
	}
	if err := run(ctx, []string{"clients", "register", "--id", "gateway", "--name", "MCP gateway", "--trusted", "--secret", vars["MCP_OAUTH_CLIENT_SECRET"],
		"--redirect-uri", vars["MCP_OAUTH_REDIRECT_URI"]}, env(vars), nil, io.Discard, io.Discard); err != nil {
		t.Fatalf("clients register: %v", err)
	}
	if got := scopesOf(); !strings.Contains(got, "user/*.cruds") {
		t.Fatalf("the registration before seed: %q", got)
	}
	if err := run(ctx, []string{"seed"}, env(vars), nil, io.Discard, io.Discard); err != nil {
		t.Fatalf("seed: %v", err)
	}
	if got, want := scopesOf(), strings.Join(oauth.GatewayScopes, " "); got != want {
		t.Errorf("the gateway's client after seed allows %q, want %q", got, want)
	}
}

// The whole program, as a user runs it: seed, a token for a script, then
// the server on a free port over the same data directory, shut down by
// its context as by SIGTERM.
func TestProgram(t *testing.T) {
	dataDir := t.TempDir()
	vars := programVars(dataDir)
	getenv := env(vars)
	ctx := context.Background()

	var out bytes.Buffer
	if err := run(ctx, []string{"seed"}, getenv, nil, &out, io.Discard); err != nil {
		t.Fatalf("seed: %v", err)
	}
	if !strings.Contains(out.String(), demoSuperuserEmail) || !strings.Contains(out.String(), demoPassword) {
		t.Errorf("seed output lacks the demo logins:\n%s", out.String())
	}
	// Seeding again changes nothing and does not fail.
	if err := run(ctx, []string{"seed"}, getenv, nil, io.Discard, io.Discard); err != nil {
		t.Fatalf("second seed: %v", err)
	}
	out.Reset()
	if err := run(ctx, []string{"token", "create", "--email", "alice@example.org", "--ttl", "1h"}, getenv, nil, &out, io.Discard); err != nil {
		t.Fatalf("token create: %v", err)
	}
	token := strings.TrimSpace(out.String())
	out.Reset()
	if err := run(ctx, []string{"token", "create", "--email", demoSuperuserEmail}, getenv, nil, &out, io.Discard); err != nil {
		t.Fatalf("token create: %v", err)
	}
	adminToken := strings.TrimSpace(out.String())
	// Changing a password revokes the user's tokens.
	out.Reset()
	if err := run(ctx, []string{"token", "create", "--email", "bob@example.org"}, getenv, nil, &out, io.Discard); err != nil {
		t.Fatalf("token create: %v", err)
	}
	bobToken := strings.TrimSpace(out.String())
	out.Reset()
	if err := run(ctx, []string{"changepassword", "--email", "bob@example.org", "--password", "short"}, getenv, nil, io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "password") {
		t.Errorf("changepassword to a short password: %v", err)
	}
	if err := run(ctx, []string{"changepassword", "--password", "a new password 123"}, getenv, nil, io.Discard, io.Discard); !errors.As(err, new(usageError)) {
		t.Errorf("changepassword without --email: %v", err)
	}
	if err := run(ctx, []string{"changepassword", "--email", "bob@example.org"}, getenv, strings.NewReader("a new password 123\n"), &out, io.Discard); err != nil ||
		!strings.Contains(out.String(), "Password of bob@example.org changed") {
		t.Fatalf("changepassword: %v\n%s", err, out.String())
	}
	// The demo patients have logins: an invitation would take one over, so
	// it needs --replace-login (the first invitation below).
	if err := run(ctx, []string{"invitation", "--patient-id", "3"}, getenv, nil, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "replace") {
		t.Errorf("an invitation of a patient with a login: %v", err)
	}
	// An invitation link is absolute: a console invitation's on the
	// service's URL (--url, else EXCHANGE_URL, else localhost:PORT), an
	// app's its redirect URI.
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--client-id", oauth.ConsoleClientID, "--replace-login"}, nil, `^http://localhost:0/console/invitation/\?code=[^&\s]+\n$`},
		{[]string{"--client-id", oauth.ConsoleClientID, "--url", "https://exchange.example.org/"}, nil, `^https://exchange\.example\.org/console/invitation/\?code=[^&\s]+\n$`},
		{[]string{"--client-id", oauth.ConsoleClientID}, map[string]string{"EXCHANGE_URL": "https://ex.example.org"}, `^https://ex\.example\.org/console/invitation/\?code=`},
		{nil, nil, `^https?://[^/]+/.*[?&]code=`},
	} {
		out.Reset()
		withURL := maps.Clone(vars)
		maps.Copy(withURL, tc.env)
		args := append([]string{"invitation", "--patient-id", "3"}, tc.args...)
		if err := run(ctx, args, env(withURL), nil, &out, io.Discard); err != nil || !regexp.MustCompile(tc.want).MatchString(out.String()) {
			t.Errorf("%v: %v %q, want %s", args, err, out.String(), tc.want)
		}
	}
	for _, bad := range []string{"localhost:8000", "https://ex.example.org/app", "ftp://ex.example.org", "https://ex.example.org?x=1"} {
		if err := run(ctx, []string{"invitation", "--patient-id", "3", "--client-id", oauth.ConsoleClientID, "--url", bad}, getenv, nil, io.Discard, io.Discard); !errors.As(err, new(usageError)) {
			t.Errorf("invitation --url %q: %v, want a usage error", bad, err)
		}
	}
	for _, name := range []string{"secret_key", "oidc_rsa_private_key.pem"} {
		fi, err := os.Stat(filepath.Join(dataDir, name))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", name, fi, err)
		}
	}

	serveCtx, stop := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(serveCtx, nil, getenv, nil, pw, io.Discard)
		pw.Close()
	}()
	lines := bufio.NewScanner(pr)
	var banner []string
	base := ""
	for base == "" && lines.Scan() {
		banner = append(banner, lines.Text())
		if m := regexp.MustCompile(`listening on (http://localhost:\d+)`).FindStringSubmatch(lines.Text()); m != nil {
			base = m[1]
		}
	}
	for i := 0; i < 4 && lines.Scan(); i++ {
		banner = append(banner, lines.Text())
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	text := strings.Join(banner, "\n")
	if base == "" || !regexp.MustCompile(`mongosh mongodb://127\.0\.0\.1:\d+/exchange`).MatchString(text) || !strings.Contains(text, "/o/login/ as "+demoSuperuserEmail) {
		t.Fatalf("banner:\n%s", text)
	}

	resp, err := http.Get(base + "/health")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("health: %v %v", resp, err)
	}
	resp.Body.Close()
	// The token printed before the server started works: the keys were kept.
	req, _ := http.NewRequest("GET", base+"/api/v1/users/profile", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var profile map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&profile)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || profile["email"] != "alice@example.org" || profile["patient"] == nil {
		t.Fatalf("profile: %d %v", resp.StatusCode, profile)
	}
	req.Header.Set("Authorization", "Bearer "+bobToken)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the token of a user whose password changed: %d, want 401", resp.StatusCode)
	}

	// The bulk import, as scripts/import-r4 runs it: flags after the
	// file, the token from the environment, a summary and a report.
	input := filepath.Join(dataDir, "r4.ndjson")
	if err := os.WriteFile(input, []byte(`{"resourceType":"Patient","id":"u1","gender":"male"}
{"resourceType":"Encounter","id":"u2","status":"in-progress","class":{"code":"AMB"},"diagnosis":[{"condition":{"reference":"Condition/c1"},"rank":1}]}
{"resourceType":"Media","id":"u3","status":"completed","content":{"contentType":"image/png"}}
{"resourceType":"Patient","id":"u4","name":null}
{"resourceType":"Observation","id":"u5","status":"final","code":{"text":"x"},"valueQuantity":{"value":1e999999}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(dataDir, "report.ndjson")
	importEnv := env(map[string]string{"DATA_DIR": dataDir, "EXCHANGE_URL": base, "EXCHANGE_TOKEN": adminToken})
	out.Reset()
	err = run(ctx, []string{"import", "r4", input, "--source", "1", "--report", report}, importEnv, nil, &out, io.Discard)
	if !errors.Is(err, errSomeFailed) || !strings.Contains(out.String(), "5 resources read: 1 converted, 1 converted with loss, 3 failed, 0 already stored") {
		t.Errorf("import r4: %v\n%s", err, out.String())
	}
	if data, err := os.ReadFile(report); err != nil || strings.Count(string(data), "\n") != 4 ||
		!strings.Contains(string(data), "Patient.name") || !strings.Contains(string(data), "Observation.valueQuantity.value") {
		t.Errorf("report: %q %v", data, err) // the null and the overflow refused, each at its path
	}
	for _, args := range [][]string{{"import"}, {"import", "r4"}, {"import", "r4", input, "--workers"}, {"import", "r4", input, "--workers", "0"}, {"import", "r4", input, "--retries", "-1"}} {
		if err := run(ctx, args, importEnv, nil, io.Discard, io.Discard); !errors.As(err, new(usageError)) {
			t.Errorf("%v: %v", args, err)
		}
	}

	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v after shutdown", err)
		}
	case <-time.After(shutdownGrace + 10*time.Second):
		t.Fatal("serve did not stop")
	}
	if _, err := http.Get(base + "/health"); err == nil {
		t.Error("the server still answers after shutdown")
	}
}

func TestKeptFileIsCreatedOnceAndKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret")
	calls := 0
	gen := func() ([]byte, error) { calls++; return []byte("value-" + string(rune('0'+calls))), nil }
	first, err := keptFile(path, gen)
	if err != nil {
		t.Fatal(err)
	}
	second, err := keptFile(path, gen)
	if err != nil || string(first) != string(second) || calls != 1 {
		t.Errorf("kept %q then %q after %d generations, %v", first, second, calls, err)
	}
}

// badProvidersFile writes an IDENTITY_PROVIDERS_FILE whose provider has
// an http issuer.
func badProvidersFile(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "providers.json")
	if err := os.WriteFile(path, []byte(`[{"id": "uni", "kind": "oidc", "name": "Uni", "issuer": "http://login.uni.example", "clientId": "x"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestSignInSettings(t *testing.T) {
	s, err := loadSettings(env(nil))
	if err != nil || !s.PasswordSignIn || len(s.IdentityProviders) != 0 || len(s.TokenExchange.TrustedIssuers) != 0 {
		t.Fatalf("defaults: %+v %v", s, err)
	}
	path := filepath.Join(t.TempDir(), "providers.json")
	if err := os.WriteFile(path, []byte(`[{"id": "uni", "kind": "oidc", "name": "Uni", "issuer": "https://login.uni.example", "clientId": "x", "clientSecret": "y"},
  {"id": "campus", "kind": "saml", "name": "Campus", "metadataUrl": "https://idp.campus.example/metadata", "firstSignIn": "create"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = loadSettings(env(map[string]string{"IDENTITY_PROVIDERS_FILE": path, "PASSWORD_SIGN_IN": "false",
		"TOKEN_EXCHANGE_TRUSTED_ISSUERS": "https://ehr.example.org/, http://127.0.0.1:8080", "TOKEN_EXCHANGE_AUDIENCE": "smart-app"}))
	if err != nil || s.PasswordSignIn || len(s.IdentityProviders) != 2 || s.IdentityProviders[0].FirstSignIn != "invited" ||
		s.IdentityProviders[1].FirstSignIn != "create" || len(s.TokenExchange.TrustedIssuers) != 2 || s.TokenExchange.Audience != "smart-app" {
		t.Fatalf("set: %+v %v", s, err)
	}
}
