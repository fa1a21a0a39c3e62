package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"golang.org/x/sync/singleflight"
)

// api is what the tools call: the service's admin API and FHIR interface
// with the caller's token, and its cached CapabilityStatement.
type api struct {
	svc  *service
	caps *capabilities
}

// get sends GET path?query to the service as the caller.
func (a *api) get(ctx context.Context, path string, query url.Values, out any) error {
	return a.svc.get(ctx, tokenFrom(ctx), path, query, out)
}

// bundle is the part of a FHIR searchset Bundle the tools read.
type bundle struct {
	Total *int64 `json:"total"`
	Link  []struct {
		Relation string `json:"relation"`
		URL      string `json:"url"`
	} `json:"link"`
	Entry []struct {
		Resource json.RawMessage `json:"resource"`
		Search   struct {
			Mode string `json:"mode"`
		} `json:"search"`
	} `json:"entry"`
}

// matches returns the resources of the Bundle's match entries.
func (b *bundle) matches() []json.RawMessage {
	var out []json.RawMessage
	for _, e := range b.Entry {
		if e.Search.Mode == "" || e.Search.Mode == "match" {
			out = append(out, e.Resource)
		}
	}
	return out
}

// nextCursor is the tools' opaque paging cursor: the query of the
// Bundle's next link (whose _cursor the service signed), or "" on the last
// page.
func (b *bundle) nextCursor() string {
	for _, l := range b.Link {
		if l.Relation != "next" {
			continue
		}
		if u, err := url.Parse(l.URL); err == nil && u.RawQuery != "" {
			return base64.RawURLEncoding.EncodeToString([]byte(u.RawQuery))
		}
	}
	return ""
}

// cursorQuery returns the search a nextCursor continues: its query,
// _cursor included. A cursor that is not one is a tool error.
func cursorQuery(cursor string) (url.Values, error) {
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return nil, toolErrorf("cursor is not one this tool returned")
	}
	q, err := url.ParseQuery(string(raw))
	if err != nil || !q.Has("_cursor") {
		return nil, toolErrorf("cursor is not one this tool returned")
	}
	return q, nil
}

// search runs a FHIR search of the type as the caller. A cursor from an
// earlier page replaces params; otherwise every parameter name is first
// checked against the service's CapabilityStatement.
func (a *api) search(ctx context.Context, resourceType string, params url.Values, cursor string, out *bundle) error {
	path := "/FHIR/R5/" + resourceType
	if cursor != "" {
		q, err := cursorQuery(cursor)
		if err != nil {
			return err
		}
		return a.svc.get(ctx, tokenFrom(ctx), path, q, out)
	}
	if err := a.caps.check(ctx, resourceType, params); err != nil {
		return err
	}
	return a.svc.get(ctx, tokenFrom(ctx), path, params, out)
}

// count runs a _summary=count search and returns its total.
func (a *api) count(ctx context.Context, resourceType string, params url.Values) (int64, error) {
	q := url.Values{"_summary": {"count"}}
	for k, v := range params {
		q[k] = v
	}
	var b bundle
	if err := a.search(ctx, resourceType, q, "", &b); err != nil {
		return 0, err
	}
	if b.Total == nil {
		return 0, fmt.Errorf("the service's _summary=count Bundle of %s has no total", resourceType)
	}
	return *b.Total, nil
}

// capabilityTTL is how long the CapabilityStatement is trusted;
// capabilityRetry how long a failure to fetch it is, so a failing
// /metadata is not asked again on every search.
const (
	capabilityTTL   = 10 * time.Minute
	capabilityRetry = 30 * time.Second
)

// capabilityStatement is the part of the service's CapabilityStatement the
// gateway reads.
type capabilityStatement struct {
	FHIRVersion string `json:"fhirVersion"`
	Software    struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	} `json:"software"`
	Rest []struct {
		Resource []struct {
			Type        string `json:"type"`
			Interaction []struct {
				Code string `json:"code"`
			} `json:"interaction"`
			SearchParam []struct {
				Name          string `json:"name"`
				Type          string `json:"type"`
				Documentation string `json:"documentation"`
			} `json:"searchParam"`
		} `json:"resource"`
	} `json:"rest"`
}

// capabilities caches the service's CapabilityStatement
// (/FHIR/R5/metadata, public).
type capabilities struct {
	svc *service
	now func() time.Time
	log *slog.Logger

	fetches singleflight.Group // one fetch at a time, shared by the callers waiting for it

	mu      sync.Mutex
	fetched time.Time            // of the last answer; zero: none yet
	stmt    *capabilityStatement // nil: the service has no /metadata
	err     error                // the last fetch's failure
}

// statement returns the CapabilityStatement, nil when the service has
// none (404). Other failures are errors, cached for capabilityRetry.
// Concurrent callers share one fetch, which no lock is held across; a
// caller whose ctx ends stops waiting without cancelling it.
func (c *capabilities) statement(ctx context.Context) (*capabilityStatement, error) {
	c.mu.Lock()
	stmt, err, fetched := c.stmt, c.err, c.fetched
	c.mu.Unlock()
	ttl := capabilityTTL
	if err != nil {
		ttl = capabilityRetry
	}
	if !fetched.IsZero() && c.now().Sub(fetched) < ttl {
		return stmt, err
	}
	answer := c.fetches.DoChan("metadata", func() (any, error) {
		stmt, err := c.fetch(context.WithoutCancel(ctx))
		c.mu.Lock()
		defer c.mu.Unlock()
		c.stmt, c.err, c.fetched = stmt, err, c.now()
		return stmt, err
	})
	select {
	case r := <-answer:
		stmt, _ := r.Val.(*capabilityStatement)
		return stmt, r.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// fetch asks the service for its CapabilityStatement: nil without error
// when it has none (404).
func (c *capabilities) fetch(ctx context.Context) (*capabilityStatement, error) {
	var stmt capabilityStatement
	err := c.svc.get(ctx, "", "/FHIR/R5/metadata", nil, &stmt)
	var ae *apiError
	switch {
	case errors.As(err, &ae) && ae.status == http.StatusNotFound:
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &stmt, nil
}

// check returns a tool error naming the first parameter the service does
// not declare for the type. Without a CapabilityStatement (none, or not
// available now) the parameters go unchecked.
func (c *capabilities) check(ctx context.Context, resourceType string, params url.Values) error {
	stmt, err := c.statement(ctx)
	if err != nil {
		c.log.Warn("the CapabilityStatement is unavailable: search parameters go unchecked", "error", err)
		return nil
	}
	if stmt == nil {
		return nil
	}
	var declared []string
	found := false
	for _, rest := range stmt.Rest {
		for _, r := range rest.Resource {
			if r.Type == resourceType {
				found = true
				for _, p := range r.SearchParam {
					declared = append(declared, p.Name)
				}
			}
		}
	}
	if !found {
		return toolErrorf("the service does not offer %s searches", resourceType)
	}
	names := make([]string, 0, len(params))
	for name := range params {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		base := name
		if i := strings.LastIndex(name, ":"); i > 0 && !slices.Contains(declared, name) {
			base = name[:i] // a modifier: code:text
		}
		if !slices.Contains(declared, name) && !slices.Contains(declared, base) {
			return toolErrorf("the service does not support the search parameter %q on %s (its CapabilityStatement lists: %s)",
				name, resourceType, strings.Join(declared, ", "))
		}
	}
	return nil
}

// toolError is a failure the user (or the model) can act on: it becomes
// a tool result with isError, not a protocol error.
type toolError struct{ msg string }

func (e *toolError) Error() string { return e.msg }

func toolErrorf(format string, args ...any) error {
	return &toolError{fmt.Sprintf(format, args...)}
}

// maxResultBytes bounds one tool result: an assistant's context is small.
const maxResultBytes = 64 << 10

// toolFunc is a tool's logic: a result to encode as JSON, or an error.
type toolFunc func(ctx context.Context, req mcpgo.CallToolRequest) (any, error)

// handle adapts a toolFunc to mcp-go: user-actionable failures (tool
// errors, the service's 4xx answers) become error results, faults stay Go
// errors, which guardTools hides behind a JSON-RPC error (or, for an
// outage, requireToken behind a 503).
func handle(f toolFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
		out, err := f(ctx, req)
		var te *toolError
		var ae *apiError
		switch {
		case errors.As(err, &te):
			return mcpgo.NewToolResultError(te.msg), nil
		case errors.As(err, &ae):
			return mcpgo.NewToolResultError(ae.detail), nil
		case err != nil:
			return nil, err
		}
		data, err := json.Marshal(out)
		if err != nil {
			return nil, err
		}
		if len(data) > maxResultBytes {
			return mcpgo.NewToolResultError(fmt.Sprintf("the result (%d KiB) is larger than the %d KiB a tool may answer: narrow the request (a smaller limit, a shorter date window, slim verbosity)",
				len(data)>>10, maxResultBytes>>10)), nil
		}
		return mcpgo.NewToolResultText(string(data)), nil
	}
}

// listAnswer is an admin API list.
type listAnswer[T any] struct {
	Count   int64   `json:"count"`
	Next    *string `json:"next"`
	Results []T     `json:"results"`
}

// Arguments shared by several tools.
const maxPageSize = 100

func pageArgs(req mcpgo.CallToolRequest) (page, size int) {
	return req.GetInt("page", 1), req.GetInt("page_size", 20)
}

func withPaging() []mcpgo.ToolOption {
	return []mcpgo.ToolOption{
		mcpgo.WithInteger("page", mcpgo.Description("Page number, from 1 (default 1)"), mcpgo.Min(1), mcpgo.DefaultNumber(1)),
		mcpgo.WithInteger("page_size", mcpgo.Description("Rows per page: min 1, max 100 (default 20)"), mcpgo.Min(1), mcpgo.Max(maxPageSize), mcpgo.DefaultNumber(20)),
	}
}

func requireID(req mcpgo.CallToolRequest, name string) (int64, error) {
	v, err := req.RequireInt(name)
	if err != nil || v < 1 {
		return 0, toolErrorf("%s: a positive integer id is required", name)
	}
	return int64(v), nil
}

// readOnly marks every tool: the gateway never changes anything.
func readOnly(title string) []mcpgo.ToolOption {
	return []mcpgo.ToolOption{
		mcpgo.WithTitleAnnotation(title), mcpgo.WithReadOnlyHintAnnotation(true),
		mcpgo.WithDestructiveHintAnnotation(false), mcpgo.WithIdempotentHintAnnotation(true),
		mcpgo.WithOpenWorldHintAnnotation(false),
	}
}

func toolOptions(groups ...[]mcpgo.ToolOption) []mcpgo.ToolOption {
	var out []mcpgo.ToolOption
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}
