package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// failure is how a call to the service went wrong, as the gateway must
// report it: the kinds map onto 401, 503 and 500 at /mcp.
type failure int

const (
	// failRejected: the service answered and refused the token.
	failRejected failure = iota + 1
	// failUnavailable: no answer, 429 or 5xx; worth retrying later.
	failUnavailable
	// failMisconfigured: an answer the gateway cannot be talking to the
	// right service with the right credentials about (404, not JSON,
	// invalid_client); retrying will not help until an operator acts.
	failMisconfigured
)

// serviceError is a failed call to the service's OAuth endpoints.
type serviceError struct {
	kind   failure
	op     string // "introspection", "userinfo", "token"
	status int    // HTTP status, 0 without an answer
	code   string // the OAuth error code of the answer, if any
	detail string
}

func (e *serviceError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "service %s", e.op)
	if e.status != 0 {
		fmt.Fprintf(&b, ": HTTP %d", e.status)
	}
	if e.code != "" {
		fmt.Fprintf(&b, " %s", e.code)
	}
	if e.detail != "" {
		fmt.Fprintf(&b, ": %s", e.detail)
	}
	return b.String()
}

func failureOf(err error) failure {
	var se *serviceError
	if errors.As(err, &se) {
		return se.kind
	}
	return failUnavailable
}

// service talks to the exchange: its OAuth endpoints as the gateway's
// confidential client, its admin API and FHIR interface with the user's
// token.
type service struct {
	base         string // SERVICE_BASE_URL without a trailing slash
	clientID     string
	clientSecret string // empty: a public client; introspection unavailable
	redirectURI  string // {MCP_RESOURCE_URL}/oauth/callback
	http         *http.Client
}

// maxServiceBody bounds what the gateway reads of one answer.
const maxServiceBody = 8 << 20

// oauthErrorBody is an OAuth error answer (RFC 6749 5.2).
type oauthErrorBody struct {
	Error       string `json:"error"`
	Description string `json:"error_description"`
}

// postForm sends an OAuth request (HTTP Basic as the gateway's client when
// basic is set) and decodes a 200 answer into out. Anything else is a
// *serviceError classified for the caller.
func (s *service) postForm(ctx context.Context, op, path string, form url.Values, basic bool, out any) error {
	if !basic {
		form.Set("client_id", s.clientID)
	}
	ctx, cancel := context.WithTimeout(ctx, serviceTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		return &serviceError{kind: failMisconfigured, op: op, detail: err.Error()}
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if basic {
		// RFC 6749 2.3.1: the credentials are form-encoded inside Basic.
		req.SetBasicAuth(url.QueryEscape(s.clientID), url.QueryEscape(s.clientSecret))
	}
	return s.do(req, op, out)
}

// do sends an OAuth request and classifies its answer.
func (s *service) do(req *http.Request, op string, out any) error {
	resp, err := s.http.Do(req)
	if err != nil {
		return &serviceError{kind: failUnavailable, op: op, detail: err.Error()}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxServiceBody))
	if err != nil {
		return &serviceError{kind: failUnavailable, op: op, status: resp.StatusCode, detail: err.Error()}
	}
	se := &serviceError{op: op, status: resp.StatusCode}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		se.kind = failUnavailable
		return se
	case !isJSON(resp.Header.Get("Content-Type")) || !json.Valid(body):
		se.kind, se.detail = failMisconfigured, "the answer is not JSON: is SERVICE_BASE_URL the exchange?"
		return se
	case resp.StatusCode == http.StatusOK:
		if err := json.Unmarshal(body, out); err != nil {
			se.kind, se.detail = failMisconfigured, "unexpected answer: "+err.Error()
			return se
		}
		return nil
	}
	var oe oauthErrorBody
	_ = json.Unmarshal(body, &oe)
	se.code, se.detail = oe.Error, oe.Description
	switch {
	// Introspection authenticates the gateway, not the token (an unknown
	// token is active: false): a refusal there is about the gateway.
	case oe.Error == "invalid_client" || (op == "introspection" && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden)):
		se.kind, se.detail = failMisconfigured, "the service refused the gateway's client credentials (SERVICE_CLIENT_ID, SERVICE_CLIENT_SECRET)"
	case resp.StatusCode == http.StatusNotFound:
		se.kind, se.detail = failMisconfigured, "no such endpoint: is SERVICE_BASE_URL the exchange?"
	default:
		se.kind = failRejected
	}
	return se
}

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// introspection is the part of an RFC 7662 answer the gateway reads.
type introspection struct {
	Active   bool     `json:"active"`
	ClientID string   `json:"client_id"`
	Audience audience `json:"aud"`
	Expires  int64    `json:"exp"`
	Scope    string   `json:"scope"`
}

// audience is the aud member: one string or several.
type audience []string

func (a *audience) UnmarshalJSON(data []byte) error {
	var one string
	if json.Unmarshal(data, &one) == nil {
		*a = audience{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(data, &many); err != nil {
		return err
	}
	*a = many
	return nil
}

func (s *service) introspect(ctx context.Context, token string) (*introspection, error) {
	var out introspection
	err := s.postForm(ctx, "introspection", "/o/introspect/", url.Values{"token": {token}, "token_type_hint": {"access_token"}}, true, &out)
	return &out, err
}

// userinfo asks the service whom the token belongs to, which it answers
// only for a valid token: a 401 or 403 is failRejected, an answer without
// sub failMisconfigured.
func (s *service) userinfo(ctx context.Context, token string) error {
	ctx, cancel := context.WithTimeout(ctx, serviceTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/o/userinfo/", nil)
	if err != nil {
		return &serviceError{kind: failMisconfigured, op: "userinfo", detail: err.Error()}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	var out struct {
		Subject string `json:"sub"`
	}
	if err := s.do(req, "userinfo", &out); err != nil {
		return err
	}
	if out.Subject == "" {
		return &serviceError{kind: failMisconfigured, op: "userinfo", status: http.StatusOK, detail: "the answer has no sub"}
	}
	return nil
}

// tokenResponse is the service's token endpoint answer.
type tokenResponse struct {
	AccessToken  string `json:"access_token"`
	ExpiresIn    int64  `json:"expires_in"`
	RefreshToken string `json:"refresh_token"`
	Scope        string `json:"scope"`
}

// token calls the service's token endpoint as the gateway's client.
func (s *service) token(ctx context.Context, form url.Values) (*tokenResponse, error) {
	var out tokenResponse
	if err := s.postForm(ctx, "token", "/o/token/", form, s.clientSecret != "", &out); err != nil {
		return nil, err
	}
	if out.AccessToken == "" {
		return nil, &serviceError{kind: failMisconfigured, op: "token", status: http.StatusOK, detail: "the answer has no access_token"}
	}
	return &out, nil
}

// serviceTimeout bounds each call to the service.
const serviceTimeout = 20 * time.Second

// apiError is a failed admin API or FHIR request: 4xx answers the user
// can act on become tool errors, the rest are faults.
type apiError struct {
	status int
	detail string
}

func (e *apiError) Error() string { return e.detail }

// get sends GET path?query with the user's token and decodes the JSON
// answer into out. 4xx answers are *apiError with the service's own
// explanation; no answer, 429 and 5xx a *serviceError of kind
// failUnavailable; anything else that fails is a plain error.
func (s *service) get(ctx context.Context, token, path string, query url.Values, out any) error {
	u := s.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	return s.getURL(ctx, token, u, out)
}

func (s *service) getURL(ctx context.Context, token, u string, out any) error {
	ctx, cancel := context.WithTimeout(ctx, serviceTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Accept", "application/json")
	op := "GET " + req.URL.Path // never the query: it may hold names a user searched for
	resp, err := s.http.Do(req)
	if err != nil {
		return &serviceError{kind: failUnavailable, op: op, detail: transportCause(err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxServiceBody))
	if err != nil {
		return &serviceError{kind: failUnavailable, op: op, status: resp.StatusCode, detail: transportCause(err)}
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		if err := json.Unmarshal(body, out); err != nil {
			return fmt.Errorf("%s: the answer is not the JSON expected: %w", op, err)
		}
		return nil
	case resp.StatusCode == http.StatusUnauthorized:
		return &apiError{resp.StatusCode, "the service no longer accepts this sign-in (expired or revoked): sign in again"}
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return &serviceError{kind: failUnavailable, op: op, status: resp.StatusCode}
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return &apiError{resp.StatusCode, explain(resp.StatusCode, body)}
	default:
		return fmt.Errorf("%s: the service answered HTTP %d", op, resp.StatusCode)
	}
}

// transportCause is what went wrong in a request to the service, without
// the request's URL (and so its query) that *url.Error adds.
func transportCause(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// explain turns an admin API ({"detail"}) or FHIR (OperationOutcome)
// error answer into one sentence.
func explain(status int, body []byte) string {
	var answer struct {
		Detail string `json:"detail"`
		Issue  []struct {
			Diagnostics string `json:"diagnostics"`
			Details     struct {
				Text string `json:"text"`
			} `json:"details"`
		} `json:"issue"`
	}
	_ = json.Unmarshal(body, &answer)
	var parts []string
	if answer.Detail != "" {
		parts = append(parts, answer.Detail)
	}
	for _, i := range answer.Issue {
		switch {
		case i.Diagnostics != "":
			parts = append(parts, i.Diagnostics)
		case i.Details.Text != "":
			parts = append(parts, i.Details.Text)
		}
	}
	prefix := map[int]string{
		http.StatusBadRequest: "the service refused the request", http.StatusForbidden: "not allowed for this user",
		http.StatusNotFound: "not found",
	}[status]
	if prefix == "" {
		prefix = fmt.Sprintf("the service answered HTTP %d", status)
	}
	if len(parts) == 0 {
		return prefix
	}
	return prefix + ": " + strings.Join(parts, "; ")
}
