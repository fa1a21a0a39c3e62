package handlers

import (
	"context"
	"net"
	"net/http"
	"testing"

	"github.com/gofiber/fiber/v2"
)

// TestNetHTTPContextAtShutdown: the context a net/http handler (OAuth,
// the console) gets keeps its contract across the server's shutdown, so
// that one derived from it cannot panic while SIGTERM drains the server:
// were its Done closed, its Err would say why. Through Fiber's adaptor
// alone, the request's context was the *fasthttp.RequestCtx, whose Done
// (the server's channel) is closed by Shutdown while its Err is nil once
// Shutdown returns. It keeps the request's values (Fiber's locals).
func TestNetHTTPContextAtShutdown(t *testing.T) {
	var ctx context.Context
	var done <-chan struct{}
	var local any
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(func(c *fiber.Ctx) error { c.Locals("local", "kept"); return c.Next() })
	app.All("/o/*", netHTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, done, local = r.Context(), r.Context().Done(), r.Context().Value("local")
	})))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- app.Listener(ln) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/o/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := app.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if local != "kept" {
		t.Errorf("the request's locals: %v", local)
	}
	select {
	case <-done:
		if ctx.Err() == nil {
			t.Fatal("after shutdown the request context's Done is closed and its Err nil: a context derived from it panics (missing cancel error)")
		}
	default:
	}
}
