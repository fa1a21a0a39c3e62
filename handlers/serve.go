package handlers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/valyala/fasthttp"

	"exchange/domain"
)

// Limits of what the HTTP server reads of a request before any route runs.
const (
	// bodyLimit bounds a request body (a batch Bundle of data points, an
	// R4 Bundle): beyond it the answer is 413 and the body is not read.
	bodyLimit = 64 << 20
	// readBufferSize bounds the request line and headers together: long
	// bearer tokens and cookies fit, a longer URL or header is 431.
	readBufferSize = 16 << 10
)

// Serve answers HTTP requests of the app on ln until the app shuts down.
// The connections remember the start of the request they are reading, so
// that a request the HTTP server refuses before any route runs (headers
// over readBufferSize, a malformed or oversized chunked body), whose path
// the server has already forgotten, is still answered in its surface's
// error format: an OperationOutcome on FHIR paths.
func Serve(app *fiber.App, ln net.Listener) error {
	return app.Listener(requestLineListener{ln})
}

// requestLineListener hands out connections that remember the beginning of
// the request line each request starts with.
type requestLineListener struct{ net.Listener }

func (l requestLineListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &requestLineConn{Conn: c, answered: true}, nil
}

// requestLineKept is how much of a request line a connection keeps: the
// method and enough of the path to tell its surface.
const requestLineKept = 128

// requestLineConn keeps the first bytes of the request being read: the
// first read after a response (or on a new connection) starts a request.
// The HTTP server reads and writes a connection from one goroutine, so it
// needs no lock. Interim responses (100 Continue) do not end a request.
// Pipelined requests (read ahead before the first is answered) keep the
// first one's line: their errors may take that request's format.
type requestLineConn struct {
	net.Conn
	line     []byte
	answered bool
}

func (c *requestLineConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.answered && n > 0 {
		c.line, c.answered = c.line[:0], false
	}
	if rest := requestLineKept - len(c.line); rest > 0 && bytes.IndexByte(c.line, '\n') < 0 {
		got := p[:n]
		if i := bytes.IndexByte(got, '\n'); i >= 0 {
			got = got[:i+1]
		}
		c.line = append(c.line, got[:min(len(got), rest)]...)
	}
	return n, err
}

func (c *requestLineConn) Write(p []byte) (int, error) {
	if !bytes.HasPrefix(p, []byte("HTTP/1.1 1")) {
		c.answered = true
	}
	return c.Conn.Write(p)
}

// requestPath returns the path of the request a connection is reading, as
// far as its line was kept: "" when unknown.
func requestPath(conn net.Conn) string {
	c, ok := conn.(*requestLineConn)
	if !ok {
		return ""
	}
	return pathOfRequestLine(c.line)
}

// pathOfRequestLine reads the path of a (possibly cut) request line,
// "GET /FHIR/R5/Observation?x=1 HTTP/1.1": the request target up to its
// query, in origin form or absolute form; "" when there is none.
func pathOfRequestLine(line []byte) string {
	_, rest, ok := bytes.Cut(line, []byte(" "))
	if !ok {
		return ""
	}
	target, _, _ := bytes.Cut(bytes.TrimRight(rest, "\r\n"), []byte(" "))
	if i := bytes.IndexAny(target, "?#"); i >= 0 {
		target = target[:i]
	}
	if bytes.HasPrefix(target, []byte("/")) {
		return string(target)
	}
	if u, err := url.Parse(string(target)); err == nil && u.IsAbs() && u.Path != "" {
		return u.Path
	}
	return ""
}

// readErrorHandler answers a request the HTTP server could not read, in
// place of Fiber's handler: the error worded by readError, rendered by
// handleError in the format of the request's surface.
func (s *server) readErrorHandler(app *fiber.App) func(*fasthttp.RequestCtx, error) {
	return func(fctx *fasthttp.RequestCtx, err error) {
		c := app.AcquireCtx(fctx)
		defer app.ReleaseCtx(c)
		// A request whose header could not be read, or whose body failed,
		// has been reset: its path is the connection's.
		if len(fctx.Request.Header.Host()) == 0 {
			if path := requestPath(fctx.Conn()); path != "" {
				c.Path(path)
			}
		}
		_ = s.handleError(c, readError(err))
	}
}

// readError words an error of reading a request. The server's own text is
// never sent: it quotes the request's header, credentials included.
func readError(err error) error {
	var small *fasthttp.ErrSmallBuffer
	var netErr net.Error
	switch {
	case errors.As(err, &small):
		return fiber.NewError(fiber.StatusRequestHeaderFieldsTooLarge,
			fmt.Sprintf("the request line and headers exceed %d KiB together: shorten the URL or the headers", readBufferSize>>10))
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return fiber.NewError(fiber.StatusRequestEntityTooLarge,
			fmt.Sprintf("the request body exceeds %d MiB: send large uploads in several requests", bodyLimit>>20))
	case errors.As(err, &netErr) && netErr.Timeout(), errors.Is(err, fasthttp.ErrTimeout):
		return fiber.NewError(fiber.StatusRequestTimeout, "the request was not received in time")
	default:
		return fiber.NewError(fiber.StatusBadRequest, "the request is not well-formed HTTP/1.1 (its request line, headers or body encoding)")
	}
}

// netHTTP serves a net/http handler (OAuth's, the console's, /metrics) on
// the app, with the request's origin in its context for the audit trail.
// Fiber's adaptor makes the *fasthttp.RequestCtx the request's context,
// which breaks context's contract: its Done is the server's channel,
// closed at shutdown, but its Err reads the server's channel anew, which
// Shutdown sets to nil when it returns. A context derived from it
// (context.WithTimeout in a handler, in fosite, in the database driver)
// watches the closed channel, then finds no error, and the context
// package panics ("missing cancel error"), taking the process down while
// SIGTERM drains it. The handler gets a context with the request's values
// (Fiber's locals) and without the server's cancellation, as Fiber
// handlers' UserContext: a request in flight at shutdown runs to its end
// within the shutdown grace.
func netHTTP(h http.Handler) fiber.Handler {
	return func(c *fiber.Ctx) error {
		origin := domain.OriginOf(c.UserContext())
		return adaptor.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := domain.WithOrigin(context.WithoutCancel(r.Context()), origin)
			h.ServeHTTP(w, r.WithContext(ctx))
		}))(c)
	}
}
