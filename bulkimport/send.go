package bulkimport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// sourceHeader names the FHIR source of an import (domain.SourceHeader;
// this package speaks HTTP only, so it does not import the domain).
const sourceHeader = "X-SERVICE-FHIR-Source-ID"

// client posts batches to the service's import endpoint.
type client struct {
	base    string // http://host:port, no trailing slash
	token   string
	http    *http.Client
	retries int // transient failures retried per batch
	// backoff is the wait before retry n (from 1); the server's
	// Retry-After, when it sends one, wins.
	backoff func(n int) time.Duration
	// onRetry hears of every retry, for the run's counts.
	onRetry func(err error)
}

// issue is one OperationOutcome issue, as the report keeps it.
type issue struct {
	Severity    string   `json:"severity"`
	Code        string   `json:"code"`
	Diagnostics string   `json:"diagnostics,omitempty"`
	Expression  []string `json:"expression,omitempty"`
}

type operationOutcome struct {
	Issue []issue `json:"issue"`
}

// answer is the service's answer to one resource.
type answer struct {
	status string // "201 Created", "409 Conflict", ...
	code   int
	// stored is the Type/id of the stored resource: created (201), or
	// stored already (a 409 that names it, once verify read it).
	stored string
	issues []issue
}

// requestError is a request the service refused as a whole.
type requestError struct {
	code   int
	status string
	issue  string // the OperationOutcome's issue code, when it sent one
	detail string
}

func (e *requestError) Error() string {
	if e.detail == "" {
		return "the service answered " + e.status
	}
	return fmt.Sprintf("the service answered %s: %s", e.status, e.detail)
}

// transient says whether a failure may go away when sent again: the
// service unavailable, or an internal error of the moment.
func transient(err error) bool {
	re, ok := errors.AsType[*requestError](err)
	return unavailable(err) || ok && re.code == http.StatusInternalServerError
}

// importUnavailable says whether the service refused a request because it
// does not import at all (its maps are not installed): every batch would
// be refused alike.
func importUnavailable(err error) bool {
	re, ok := errors.AsType[*requestError](err)
	return ok && re.issue == "not-supported"
}

// unavailable says whether a failure is the service's, not the batch's:
// unreachable, overloaded, or a gateway in between failing. When retries
// do not mend it, the run stops (to be resumed) rather than fail every
// batch that follows.
func unavailable(err error) bool {
	re, ok := errors.AsType[*requestError](err)
	if !ok {
		return !errors.Is(err, context.Canceled) && !errors.Is(err, errBadAnswer)
	}
	switch re.code {
	case http.StatusRequestTimeout, http.StatusTooManyRequests,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// errBadAnswer is a 200 whose body is not the batch-response asked for:
// not something sending again would mend.
var errBadAnswer = errors.New("the service's answer is not a batch-response Bundle")

// retryAfter is the wait a 429 or 503 asks for.
type retryAfter struct {
	error
	wait time.Duration
}

func (e retryAfter) Unwrap() error { return e.error }

// importBatch sends one batch and returns one answer per record, in
// order. Transient failures are retried; giving up returns the last one.
// ctx ends the waits between retries; sendCtx ends requests in flight.
func (c *client) importBatch(ctx, sendCtx context.Context, b *batch) ([]answer, error) {
	body := bundleOf(b.records)
	for attempt := 0; ; attempt++ {
		answers, err := c.post(sendCtx, b, body)
		if err == nil || !transient(err) || attempt == c.retries {
			return answers, err
		}
		if c.onRetry != nil {
			c.onRetry(err)
		}
		wait := c.backoff(attempt + 1)
		if ra, ok := errors.AsType[retryAfter](err); ok && ra.wait > 0 {
			wait = ra.wait
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// backoff doubles from half a second up to 30 s, with jitter so that
// workers do not retry in step.
func backoff(n int) time.Duration {
	d := min(500*time.Millisecond<<min(n-1, 6), 30*time.Second) // the shift capped: no overflow however many retries
	return d/2 + rand.N(d/2+1)
}

// bundleOf is the batch Bundle of the records: each one a create, its
// JSON as read.
func bundleOf(records []*record) []byte {
	var b bytes.Buffer
	b.WriteString(`{"resourceType":"Bundle","type":"batch","entry":[`)
	for i, r := range records {
		if i > 0 {
			b.WriteByte(',')
		}
		url, _ := json.Marshal(r.resourceType)
		b.WriteString(`{"request":{"method":"POST","url":`)
		b.Write(url)
		b.WriteString(`},"resource":`)
		b.Write(r.body)
		b.WriteByte('}')
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

func (c *client) post(ctx context.Context, b *batch, body []byte) ([]answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/fhir-import/R4", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/fhir+json")
	req.Header.Set("Accept", "application/fhir+json")
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set(sourceHeader, strconv.FormatInt(b.source, 10))
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		err := refusal(resp, data)
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
			secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			return nil, retryAfter{err, time.Duration(secs) * time.Second}
		}
		return nil, err
	}
	var out struct {
		ResourceType string `json:"resourceType"`
		Entry        []struct {
			Resource *struct {
				ResourceType string `json:"resourceType"`
				ID           string `json:"id"`
			} `json:"resource"`
			Response struct {
				Status   string            `json:"status"`
				Location string            `json:"location"`
				Outcome  *operationOutcome `json:"outcome"`
			} `json:"response"`
		} `json:"entry"`
	}
	if err := json.Unmarshal(data, &out); err != nil || out.ResourceType != "Bundle" || len(out.Entry) != len(b.records) {
		return nil, fmt.Errorf("%w of %d entries", errBadAnswer, len(b.records))
	}
	answers := make([]answer, len(out.Entry))
	for i, e := range out.Entry {
		a := answer{status: e.Response.Status}
		a.code, _ = strconv.Atoi(strings.Fields(e.Response.Status + " 0")[0])
		if e.Response.Outcome != nil {
			a.issues = e.Response.Outcome.Issue
		}
		switch {
		case e.Resource != nil:
			a.stored = e.Resource.ResourceType + "/" + e.Resource.ID
		case a.code == http.StatusConflict:
			// Type/id[/_history/n]: what is stored already, if it is this.
			parts := strings.Split(e.Response.Location, "/")
			if len(parts) >= 2 && parts[0] != "" && parts[1] != "" {
				a.stored = parts[0] + "/" + parts[1]
			}
		}
		answers[i] = a
	}
	return answers, nil
}

// verify checks the 409 answers that name a stored resource by reading it
// back (GET): only a duplicate the service shows counts as done. A 409
// that names nothing (the resource clashes with another), or whose
// resource the service refuses to show (403, 404, ...), is a failure with
// the reason. An error means the service could not be asked: no answer,
// 401, or a read it could not answer for the moment (408, 429, 5xx),
// which says nothing of the resource, so the run stops and resumes with
// the batch rather than report stored resources as failed.
func (c *client) verify(ctx context.Context, answers []answer) error {
	for i := range answers {
		a := &answers[i]
		if a.code != http.StatusConflict {
			continue
		}
		if a.stored == "" {
			a.issues = append(a.issues, issue{Severity: "error", Code: "duplicate",
				Diagnostics: "the service refused it as a duplicate of another resource: not stored"})
			continue
		}
		status, err := c.status(ctx, "/FHIR/R5/"+a.stored)
		switch {
		case err != nil:
			return err
		case status == http.StatusUnauthorized:
			return &requestError{code: status, status: "401 Unauthorized"}
		case status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500:
			// Not a *requestError: unavailable, whatever the status.
			return fmt.Errorf("reading back %s: the service answered %d", a.stored, status)
		case status != http.StatusOK:
			a.issues = append(a.issues, issue{Severity: "error", Code: "not-found",
				Diagnostics: fmt.Sprintf("the service answered 409 naming %s, which reads %d: not counted as stored", a.stored, status)})
			a.stored = ""
		}
	}
	return nil
}

// status is the status of a GET of path.
func (c *client) status(ctx context.Context, path string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/fhir+json")
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// refusal reads a whole-request error: its OperationOutcome's first
// diagnostics, or the admin API's detail.
func refusal(resp *http.Response, data []byte) *requestError {
	var body struct {
		Detail string  `json:"detail"`
		Issue  []issue `json:"issue"`
	}
	_ = json.Unmarshal(data, &body)
	re := &requestError{code: resp.StatusCode, status: resp.Status, detail: body.Detail}
	if len(body.Issue) > 0 {
		re.issue, re.detail = body.Issue[0].Code, body.Issue[0].Diagnostics
	}
	return re
}

// check asks the service who the token is, and about the --source when
// one is given, so that a wrong address, token or source stops the run
// before it reads anything.
func (c *client) check(ctx context.Context, source int64) (string, error) {
	var profile struct {
		Email string `json:"email"`
	}
	if err := c.getJSON(ctx, "/api/v1/users/profile", &profile); err != nil {
		return "", err
	}
	if source != 0 {
		if err := c.getJSON(ctx, "/api/v1/fhir_sources/"+strconv.FormatInt(source, 10), nil); err != nil {
			return "", fmt.Errorf("FHIR source %d: %w", source, err)
		}
	}
	return profile.Email, nil
}

func (c *client) getJSON(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the service at %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return refusal(resp, data)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}
