package mcp_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"golang.org/x/oauth2"

	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/mcp"
	"exchange/oauth"
	"exchange/repo/repotest"
)

func TestMain(m *testing.M) { repotest.Main(m) }

// The gateway's confidential client at the service in tests.
const (
	gatewayClientID = "test-mcp-gateway"
	gatewaySecret   = "test-mcp-gateway-secret-0123456789abcdef"
	brokerKey       = "test-broker-key-0123456789abcdefghijklmnop"
)

// clientRedirect is the assistant client's redirect URI: loopback, where
// nothing listens (the test browser stops before following it).
const clientRedirect = "http://127.0.0.1:9/callback"

// stack is a running service with the gateway's client registered, and
// gateways in front of it.
type stack struct {
	env       *handlerstest.Env
	callbacks []string // of every gateway started
	// gatewayScopes are what the gateway's client is registered for:
	// oauth.GatewayScopes, as seed registers it; nil, every scope (a
	// deployment seed has not repaired).
	gatewayScopes []string
}

func newStack(t *testing.T) *stack {
	t.Helper()
	return &stack{env: handlerstest.Start(t), gatewayScopes: oauth.GatewayScopes}
}

// gateway is a running gateway.
type gateway struct {
	URL   string
	clock *handlerstest.Clock
}

// startGateway runs a gateway on a loopback port. The service base URL and
// the configuration can be changed by edit; its callback is registered at
// the service as the seeded client is (confidential, no consent page).
func (s *stack) startGateway(t *testing.T, edit func(*mcp.Config)) *gateway {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{URL: "http://" + ln.Addr().String(), clock: &handlerstest.Clock{}}
	cfg := mcp.Config{ServiceURL: s.env.URL, ClientID: gatewayClientID, ClientSecret: gatewaySecret,
		ResourceURL: g.URL, BrokerKey: brokerKey, ApprovalLifetime: mcp.DefaultApprovalLifetime, Now: g.clock.Now}
	if edit != nil {
		edit(&cfg)
	}
	// The seeded client of the service: one redirect per gateway.
	s.callbacks = append(s.callbacks, g.URL+"/oauth/callback")
	if _, err := s.env.OAuth.SaveClient(context.Background(), oauth.ClientRegistration{ID: gatewayClientID, Secret: gatewaySecret,
		Name: "MCP gateway", Type: domain.ClientConfidential, RedirectURIs: s.callbacks, SkipAuthorization: true, Scopes: s.gatewayScopes}); err != nil {
		t.Fatal(err)
	}
	gw, err := mcp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(gw.Handler())
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return g
}

// register is Dynamic Client Registration at the gateway.
func (g *gateway) register(t *testing.T, redirectURIs ...string) (int, map[string]any) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"redirect_uris": redirectURIs, "client_name": "test assistant",
		"token_endpoint_auth_method": "none", "grant_types": []string{"authorization_code", "refresh_token"}})
	resp, err := http.Post(g.URL+"/register", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// registerClient registers a client with clientRedirect and returns its id.
func (g *gateway) registerClient(t *testing.T) string {
	t.Helper()
	status, out := g.register(t, clientRedirect)
	if status != http.StatusCreated {
		t.Fatalf("register: %d %v", status, out)
	}
	return out["client_id"].(string)
}

// oauthConfig is the assistant client's OAuth configuration for the
// gateway (golang.org/x/oauth2, a public client).
func (g *gateway) oauthConfig(clientID string) *oauth2.Config {
	return &oauth2.Config{ClientID: clientID, RedirectURL: clientRedirect,
		Endpoint: oauth2.Endpoint{AuthURL: g.URL + "/authorize", TokenURL: g.URL + "/token", AuthStyle: oauth2.AuthStyleInParams}}
}

// newBrowser is a browser that stops at the first redirect to the
// assistant client.
func newBrowser(t *testing.T) *handlerstest.Browser {
	return handlerstest.NewBrowser(t, func(to *url.URL) bool { return strings.HasPrefix(to.String(), clientRedirect) })
}

// clientCallback returns the query of the redirect to the assistant client.
func clientCallback(t *testing.T, resp *http.Response, body string) url.Values {
	t.Helper()
	loc := resp.Header.Get("Location")
	if resp.StatusCode/100 != 3 || !strings.HasPrefix(loc, clientRedirect) {
		t.Fatalf("want a redirect to %s, got %d Location %q\n%s", clientRedirect, resp.StatusCode, loc, body)
	}
	u, _ := url.Parse(loc)
	return u.Query()
}

const clientState = "client-state-0123456789"

// stepper is a browser that follows no redirect: each step of a flow
// shows.
func stepper(t *testing.T) *handlerstest.Browser {
	return handlerstest.NewBrowser(t, func(*url.URL) bool { return true })
}

// approvalForm is the sealed request of an approval page's form, or ""
// when the page is not the gateway's approval page.
func approvalForm(page string) string {
	if !strings.Contains(page, `name="decision" value="allow"`) {
		return ""
	}
	m := regexp.MustCompile(`<input type="hidden" name="request" value="([^"]+)">`).FindStringSubmatch(page)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// allow opens an authorization URL in the browser, which must show the
// gateway's approval page, and clicks Allow. It returns the answer to the
// click and its body.
func allow(t *testing.T, b *handlerstest.Browser, authURL string) (*http.Response, string) {
	t.Helper()
	resp, page := b.Do("GET", authURL, nil)
	if resp.StatusCode != http.StatusOK || approvalForm(page) == "" {
		t.Fatalf("%s: want the approval page, got %d Location %q\n%s", authURL, resp.StatusCode, resp.Header.Get("Location"), page)
	}
	return b.Submit(page, url.Values{"decision": {"allow"}})
}

// signIn runs the browser part: the gateway's /authorize and its approval
// page, the service's login page, back through the gateway's callback to
// the client. It returns the gateway's authorization code.
func (g *gateway) signIn(t *testing.T, clientID, verifier, email string) string {
	t.Helper()
	cfg := g.oauthConfig(clientID)
	b := newBrowser(t)
	_, page := allow(t, b, cfg.AuthCodeURL(clientState, oauth2.S256ChallengeOption(verifier),
		oauth2.SetAuthURLParam("resource", g.URL+"/mcp")))
	resp, page := b.Login(page, email, handlerstest.Password)
	q := clientCallback(t, resp, page)
	if q.Get("state") != clientState || q.Get("code") == "" {
		t.Fatalf("callback query %v", q)
	}
	return q.Get("code")
}

// tokens runs the whole broker flow for a user: DCR, authorization, code
// exchange.
func (g *gateway) tokens(t *testing.T, email string) (*oauth2.Config, *oauth2.Token) {
	t.Helper()
	clientID := g.registerClient(t)
	verifier := oauth2.GenerateVerifier()
	code := g.signIn(t, clientID, verifier, email)
	cfg := g.oauthConfig(clientID)
	tok, err := cfg.Exchange(context.Background(), code, oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	return cfg, tok
}

// mcpClient is an MCP client (mcp-go's Streamable HTTP client) on the
// gateway's /mcp with a bearer token, initialized.
func (g *gateway) mcpClient(t *testing.T, token string) *client.Client {
	t.Helper()
	c, err := client.NewStreamableHttpClient(g.URL+"/mcp", transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	req := mcpgo.InitializeRequest{}
	req.Params.ProtocolVersion = mcpgo.LATEST_PROTOCOL_VERSION
	req.Params.ClientInfo = mcpgo.Implementation{Name: "gateway test", Version: "1"}
	if _, err := c.Initialize(ctx, req); err != nil {
		t.Fatal(err)
	}
	return c
}

// call calls a tool and returns its text, and whether it is a tool error.
// A protocol error fails the test.
func call(t *testing.T, c *client.Client, name string, args map[string]any) (string, bool) {
	t.Helper()
	req := mcpgo.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	res, err := c.CallTool(context.Background(), req)
	if err != nil {
		t.Fatalf("%s(%v): %v", name, args, err)
	}
	var text strings.Builder
	for _, content := range res.Content {
		if tc, ok := mcpgo.AsTextContent(content); ok {
			text.WriteString(tc.Text)
		}
	}
	return text.String(), res.IsError
}

// callJSON calls a tool that must succeed and decodes its JSON result.
func callJSON(t *testing.T, c *client.Client, name string, args map[string]any) map[string]any {
	t.Helper()
	text, isError := call(t, c, name, args)
	if isError {
		t.Fatalf("%s(%v): tool error: %s", name, args, text)
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(text), &out); err != nil {
		t.Fatalf("%s(%v): not a JSON object: %v\n%s", name, args, err, text)
	}
	return out
}

// world is the test data: two organizations, each with a manager, a
// study requesting heart rates, and a patient enrolled who consented, with
// observations.
type world struct {
	orgA, orgB          int64
	studyA, studyB      int64
	patientA, patientB  int64
	managerA, managerB  string // emails
	patientAEmail       string
	observationsA       int // heart rates of patient A
	observationsB       int
	firstA, lastA       string // effective times of patient A's first and last
	heartRateSystemCode string
}

const heartRate = "omh:heart-rate:2.0"

func (s *stack) seed(t *testing.T) *world {
	t.Helper()
	ctx := context.Background()
	svc := s.env.Service
	sys := domain.SystemActor()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	w := &world{managerA: "manager-a@example.org", managerB: "manager-b@example.org", patientAEmail: "patient-a@example.org",
		heartRateSystemCode: domain.SystemOpenMHealth + "|" + heartRate}
	scope, err := svc.EnsureScopeCode(ctx, domain.SystemOpenMHealth, heartRate, "Heart rate")
	must(err)
	watch, err := svc.CreateDataSource(ctx, sys, domain.NewDataSource{Name: "Watch", Type: domain.DataSourcePersonalDevice, SupportedScopeCodeIDs: []int64{scope.ID}})
	must(err)
	for i, sd := range []struct {
		org, manager, patient, family, given, study string
		dates                                       []string
	}{
		{"Cardiology", w.managerA, w.patientAEmail, "Nguyen", "Alice", "Heart study", []string{"2025-03-01T08:00:00Z", "2025-03-02T08:00:00Z", "2025-03-03T08:00:00Z"}},
		{"Sleep Clinic", w.managerB, "patient-b@example.org", "Okafor", "Robert", "Sleep study", []string{"2025-04-01T08:00:00Z"}},
	} {
		org, err := svc.CreateOrganization(ctx, sys, domain.NewOrganization{Name: sd.org, Type: "prov"})
		must(err)
		u, err := svc.CreateUser(ctx, domain.NewUser{Email: sd.manager, Password: handlerstest.Password, FirstName: "Mia", LastName: "Manager", Type: domain.UserPractitioner})
		must(err)
		must(svc.AddMember(ctx, sys, org.ID, u.ID, domain.RoleManager))
		study, err := svc.CreateStudy(ctx, sys, domain.NewStudy{OrganizationID: org.ID, Name: sd.study, Description: "A study of " + sd.org})
		must(err)
		must(svc.RequestScope(ctx, sys, study, scope.ID))
		_, err = svc.AddStudyDataSource(ctx, sys, study.ID, watch.ID)
		must(err)
		p, err := svc.CreatePatient(ctx, sys, domain.NewPatient{Email: sd.patient, Password: handlerstest.Password, FamilyName: sd.family,
			GivenNames: []string{sd.given}, BirthDate: "1980-01-02", OrganizationIDs: []int64{org.ID}})
		must(err)
		must(svc.Enroll(ctx, sys, study, p))
		yes := true
		must(svc.AnswerConsents(ctx, sys, p.ID, []domain.StudyScopeConsents{{StudyID: study.ID, Scopes: []domain.ScopeConsent{{System: domain.SystemOpenMHealth, Code: heartRate, Consented: &yes}}}}))
		token := s.env.Token(t, u.ID)
		for j, at := range sd.dates {
			uploadHeartRate(t, s.env, token, p.ID, watch.ID, fmt.Sprintf("hr-%d-%d", i, j), at, 60+j)
		}
		if i == 0 {
			w.orgA, w.studyA, w.patientA, w.observationsA = org.ID, study.ID, p.ID, len(sd.dates)
			w.firstA, w.lastA = sd.dates[0], sd.dates[len(sd.dates)-1]
		} else {
			w.orgB, w.studyB, w.patientB, w.observationsB = org.ID, study.ID, p.ID, len(sd.dates)
		}
	}
	return w
}

// uploadHeartRate creates a native Observation over FHIR.
func uploadHeartRate(t *testing.T, env *handlerstest.Env, token string, patient, device int64, id, at string, bpm int) {
	t.Helper()
	dp, _ := json.Marshal(map[string]any{
		"header": map[string]any{"id": id, "creation_date_time": at,
			"schema_id": map[string]string{"namespace": "omh", "name": "heart-rate", "version": "2.0"}},
		"body": map[string]any{"heart_rate": map[string]any{"value": bpm, "unit": "beats/min"},
			"effective_time_frame": map[string]string{"date_time": at}},
	})
	resp, out := env.Send(t, "POST", "/FHIR/R5/Observation", token, map[string]any{
		"resourceType": "Observation", "status": "final",
		"identifier":      []map[string]string{{"system": "urn:test", "value": id}},
		"code":            map[string]any{"coding": []map[string]string{{"system": domain.SystemOpenMHealth, "code": heartRate}}},
		"subject":         map[string]string{"reference": fmt.Sprintf("Patient/%d", patient)},
		"device":          map[string]string{"reference": fmt.Sprintf("Device/%d", device)},
		"valueAttachment": map[string]string{"contentType": "application/json", "data": base64.StdEncoding.EncodeToString(dp)},
	})
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload %s: %d %v", id, resp.StatusCode, out)
	}
}

// userToken is a service token for a user by email (as `exchange token
// create` issues: not issued to the gateway's client).
func (s *stack) userToken(t *testing.T, email string) string {
	t.Helper()
	u, err := s.env.Service.UserByEmail(context.Background(), email)
	if err != nil {
		t.Fatal(err)
	}
	return s.env.Token(t, u.ID)
}
