package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/oauth2"
)

// apiClient calls a running exchange's public API as one user: its HTTP
// client carries that user's token (or login session).
type apiClient struct {
	base string // http://host:port
	http *http.Client
}

// bearerClient is an apiClient whose requests carry the tokens of ts,
// refreshed as they expire.
func bearerClient(ctx context.Context, base string, ts oauth2.TokenSource) *apiClient {
	return &apiClient{base: base, http: oauth2.NewClient(ctx, ts)}
}

// apiError is an answer other than 2xx.
type apiError struct {
	method, path string
	status       int
	body         string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s %s: %d %s", e.method, e.path, e.status, e.body)
}

// transientStatus is an answer a request may be sent again after.
func transientStatus(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusBadGateway ||
		status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout
}

// send sends a request with a JSON body (none when body is nil) and
// decodes a JSON answer into out (when not nil). A transient failure
// (no answer, 429, 502, 503, 504) is sent again up to four times, when
// sending again is safe: any request the service refused unread (429),
// and otherwise all but a POST outside FHIR (a create sent again after
// a lost answer would make a second one, or be refused as a duplicate;
// FHIR batches carry identifiers, so a resent one answers 409 stored).
func (c *apiClient) send(ctx context.Context, method, path string, body, out any) error {
	var data []byte
	if raw, ok := body.([]byte); ok {
		data = raw
	} else if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return err
		}
	}
	for attempt := 0; ; attempt++ {
		err := c.sendOnce(ctx, method, path, data, body != nil, out)
		var refused *apiError
		if err == nil || ctx.Err() != nil || attempt == 4 || (errors.As(err, &refused) && !transientStatus(refused.status)) {
			return err
		}
		resendable := method != "POST" || strings.HasPrefix(path, "/FHIR/") || (refused != nil && refused.status == http.StatusTooManyRequests)
		if !resendable {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second << attempt):
		}
	}
}

func (c *apiClient) sendOnce(ctx context.Context, method, path string, data []byte, hasBody bool, out any) error {
	var reader io.Reader
	if hasBody {
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, reader)
	if err != nil {
		return err
	}
	if hasBody {
		req.Header.Set("Content-Type", "application/json")
		if strings.HasPrefix(path, "/FHIR/") {
			req.Header.Set("Content-Type", "application/fhir+json")
		}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return &apiError{method, path, resp.StatusCode, firstKiB(resp.Body)}
	}
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// get fetches a path and returns the answer's status, content type and
// body, whatever the status: what a measured search needs.
func (c *apiClient) get(ctx context.Context, path string) (int, string, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return 0, "", nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), body, err
}

// randomSecret is a password or state value: 24 random bytes, URL-safe.
func randomSecret() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// oauthEndpoint is the exchange's authorization server for a client.
func oauthEndpoint(base, clientID, secret, redirect string) *oauth2.Config {
	style := oauth2.AuthStyleInHeader
	if secret == "" {
		style = oauth2.AuthStyleInParams
	}
	return &oauth2.Config{ClientID: clientID, ClientSecret: secret, RedirectURL: redirect, Scopes: []string{"openid"},
		Endpoint: oauth2.Endpoint{AuthURL: base + "/o/authorize/", TokenURL: base + "/o/token/", AuthStyle: style}}
}

// patientToken is what a patient's app holds after its invitation: the
// patient's invitation link for the app (issued by admin, a superuser's
// client), redeemed with the reference PKCE verifier. The searches sign
// the patient's app in again after the upload did: the superuser replaces
// the login the first invitation gave, as an invitation never takes one
// over silently.
func patientToken(ctx context.Context, admin *apiClient, app *oauth2.Config, verifier string, patientID int64) (oauth2.TokenSource, error) {
	var invitation struct {
		Link string `json:"invitationLink"`
	}
	if err := admin.send(ctx, "POST", fmt.Sprintf("/api/v1/patients/%d/invitation", patientID),
		map[string]any{"clientId": app.ClientID, "replaceLogin": true}, &invitation); err != nil {
		return nil, err
	}
	link, err := url.Parse(invitation.Link)
	if err != nil || link.Query().Get("code") == "" {
		return nil, fmt.Errorf("patient %d's invitation link has no code: %q", patientID, invitation.Link)
	}
	tok, err := app.Exchange(ctx, link.Query().Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		return nil, fmt.Errorf("redeem patient %d's invitation: %w", patientID, err)
	}
	return app.TokenSource(ctx, tok), nil
}

var (
	csrfInput = regexp.MustCompile(`name="csrf_token" value="([^"]*)"`)
	nextInput = regexp.MustCompile(`name="next" value="([^"]*)"`)
)

// signIn signs a practitioner in as a browser does, through the login page
// of the authorization endpoint of a trusted client (no consent page), and
// returns the browser, whose login session the console's pages take, and
// the token the client gets for it.
func signIn(ctx context.Context, base string, client *oauth2.Config, email, password string) (*apiClient, oauth2.TokenSource, error) {
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), client.RedirectURL) {
			return http.ErrUseLastResponse // the code, for the client
		}
		return nil
	}}
	pages := &apiClient{base: base, http: browser}
	verifier, state := oauth2.GenerateVerifier(), randomSecret()
	status, _, page, err := pages.get(ctx, strings.TrimPrefix(client.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier)), base))
	if err != nil {
		return nil, nil, err
	}
	csrf, next := csrfInput.FindSubmatch(page), nextInput.FindSubmatch(page)
	if status != http.StatusOK || csrf == nil || next == nil {
		return nil, nil, fmt.Errorf("the authorization endpoint answered %d without a login form", status)
	}
	form := url.Values{"csrf_token": {html.UnescapeString(string(csrf[1]))}, "next": {html.UnescapeString(string(next[1]))},
		"email": {email}, "password": {password}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/o/login/", strings.NewReader(form.Encode()))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := browser.Do(req)
	if err != nil {
		return nil, nil, err
	}
	resp.Body.Close()
	to, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || resp.StatusCode/100 != 3 || to.Query().Get("state") != state || to.Query().Get("code") == "" {
		return nil, nil, fmt.Errorf("signing %s in: answered %d, not a redirect to %s with a code", email, resp.StatusCode, client.RedirectURL)
	}
	tok, err := client.Exchange(ctx, to.Query().Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		return nil, nil, fmt.Errorf("signing %s in: %w", email, err)
	}
	return pages, client.TokenSource(ctx, tok), nil
}

// serverMetrics reads the service's /metrics.
type serverMetrics struct {
	url, token string
}

// metricsSample is what /metrics says of the process at one moment.
type metricsSample struct {
	CPU       float64 // process_cpu_seconds_total
	GC        float64 // the runtime's estimate of the GC's CPU seconds
	Busy      float64 // the runtime's estimate of all busy CPU seconds (total - idle)
	RSS       float64 // bytes
	MemLimit  float64 // GOMEMLIMIT, bytes
	HaveGCCPU bool    // the service exports the GC's CPU (this version does)
}

func (m serverMetrics) read(ctx context.Context) (metricsSample, error) {
	var s metricsSample
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.url, nil)
	if err != nil {
		return s, err
	}
	if m.token != "" {
		req.Header.Set("Authorization", "Bearer "+m.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("%s answered %d: give the service's METRICS_TOKEN with --metrics-token, or its METRICS_ADDR with --metrics-url", m.url, resp.StatusCode)
	}
	var total, idle float64
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		name, value, ok := strings.Cut(lines.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		switch name {
		case "process_cpu_seconds_total":
			s.CPU = v
		case "process_resident_memory_bytes":
			s.RSS = v
		case "go_gc_gomemlimit_bytes":
			s.MemLimit = v
		case "go_cpu_classes_gc_total_cpu_seconds_total":
			s.GC, s.HaveGCCPU = v, true
		case "go_cpu_classes_total_cpu_seconds_total":
			total = v
		case "go_cpu_classes_idle_cpu_seconds_total":
			idle = v
		}
	}
	s.Busy = total - idle
	return s, lines.Err()
}
