package mcp

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// What a client sees of a call that failed for no fault of its own. The
// full error goes to the gateway's log; the client never sees the
// service's address, a Go error or a stack (mcp-go would send a handler's
// error text as the JSON-RPC error message).
var (
	errServiceUnavailable = errors.New("the service is unavailable; try again shortly")
	errInternal           = errors.New("the gateway could not complete this call: an internal error, logged for its operator")
)

// callOutcome records, for the /mcp request that carries a call, that the
// service did not answer it: requireToken then answers the documented 503
// instead of what mcp-go wrote.
type callOutcome struct{ unavailable atomic.Bool }

type outcomeKey struct{}

func withOutcome(ctx context.Context) (context.Context, *callOutcome) {
	o := &callOutcome{}
	return context.WithValue(ctx, outcomeKey{}, o), o
}

// markUnavailable records an outage on the request's callOutcome, if it
// has one (the stdio transport has none).
func markUnavailable(ctx context.Context) {
	if o, ok := ctx.Value(outcomeKey{}).(*callOutcome); ok {
		o.unavailable.Store(true)
	}
}

// clientError returns the error a client may see for a tool's or
// resource's error, and logs what it hides. User-facing errors (tool
// errors, the service's 4xx explanations, resources not found) pass as
// they are.
func clientError(ctx context.Context, log *slog.Logger, call string, err error) error {
	var te *toolError
	var ae *apiError
	var se *serviceError
	switch {
	case err == nil, errors.As(err, &te), errors.As(err, &ae), errors.Is(err, server.ErrResourceNotFound):
		return err
	case errors.As(err, &se) && se.kind == failUnavailable:
		markUnavailable(ctx)
		log.Warn("a call failed: the service is unavailable", "call", call, "error", err)
		return errServiceUnavailable
	}
	log.Error("a call failed", "call", call, "error", err)
	return errInternal
}

// guard runs a tool's or resource's handler: a panic (logged with its
// stack) and a fault become errors that say nothing of the gateway's
// insides.
func guard[R any](ctx context.Context, log *slog.Logger, call string, run func() (R, error)) (res R, err error) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("a call panicked", "call", call, "panic", p, "stack", string(debug.Stack()))
			var none R
			res, err = none, errInternal
		}
	}()
	res, err = run()
	return res, clientError(ctx, log, call, err)
}

// guardTools is the tools' middleware (guard).
func guardTools(log *slog.Logger) server.ToolHandlerMiddleware {
	return func(next server.ToolHandlerFunc) server.ToolHandlerFunc {
		return func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return guard(ctx, log, "tool "+req.Params.Name, func() (*mcpgo.CallToolResult, error) { return next(ctx, req) })
		}
	}
}

// guardResources is the resource reads' middleware (guard).
func guardResources(log *slog.Logger) server.ResourceHandlerMiddleware {
	return func(next server.ResourceHandlerFunc) server.ResourceHandlerFunc {
		return func(ctx context.Context, req mcpgo.ReadResourceRequest) ([]mcpgo.ResourceContents, error) {
			return guard(ctx, log, "resource "+req.Params.URI, func() ([]mcpgo.ResourceContents, error) { return next(ctx, req) })
		}
	}
}

// heldResponse holds an /mcp answer until its handler returns, so that a
// call the service could not answer can still become a 503. An answer
// that streams (SSE: its first Flush) is released then and passes
// through from there on.
type heldResponse struct {
	w http.ResponseWriter

	mu       sync.Mutex
	header   http.Header
	status   int
	body     bytes.Buffer
	released bool
}

func newHeldResponse(w http.ResponseWriter) *heldResponse {
	return &heldResponse{w: w, header: http.Header{}}
}

func (h *heldResponse) Header() http.Header {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return h.w.Header()
	}
	return h.header
}

func (h *heldResponse) WriteHeader(status int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.released:
		h.w.WriteHeader(status)
	case h.status == 0:
		h.status = status
	}
}

func (h *heldResponse) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return h.w.Write(p)
	}
	if h.status == 0 {
		h.status = http.StatusOK
	}
	return h.body.Write(p)
}

// Flush releases what is held and flushes: a stream has begun.
func (h *heldResponse) Flush() {
	h.release()
	if f, ok := h.w.(http.Flusher); ok {
		f.Flush()
	}
}

// release writes what is held and lets everything after it through.
func (h *heldResponse) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return
	}
	h.released = true
	maps.Copy(h.w.Header(), h.header)
	if h.status != 0 {
		h.w.WriteHeader(h.status)
	}
	if h.body.Len() > 0 {
		_, _ = h.w.Write(h.body.Bytes())
	}
}

// streamed reports whether the answer was released before the handler
// returned.
func (h *heldResponse) streamed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.released
}
