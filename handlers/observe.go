package handlers

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"exchange/domain"
	"exchange/telemetry"
)

// observe is the one middleware every request passes first (after
// withProxies, which it reads the client's address through). It gives the
// request its id (a valid X-Request-Id from the client, else a new one,
// echoed in the response), puts the request's origin in the context for
// the audit trail, renders the error of the handlers below it, and when
// the request is answered counts it and logs one line: request id,
// method, route template, status, duration, and the acting user's and
// client's ids. Never the path's values, the query, a body, a header or a
// cookie: they may hold names, health data or secrets.
func (s *server) observe(c *fiber.Ctx) error {
	start := time.Now()
	// Cloned: Fiber's strings share the request's buffer, reused by the
	// next request, and the audit trail keeps the id beyond this one.
	id := strings.Clone(telemetry.RequestID(c.Get(telemetry.RequestIDHeader)))
	c.Set(telemetry.RequestIDHeader, id)
	address := proxies(c).ClientAddress(c.Context().RemoteAddr().String(), requestHeader(c)).String()
	c.SetUserContext(domain.WithOrigin(c.UserContext(), domain.Origin{RequestID: id, Address: address}))
	if err := c.Next(); err != nil {
		if err := s.handleError(c, err); err != nil {
			_ = c.SendStatus(fiber.StatusInternalServerError)
		}
	}
	status, route, took := c.Response().StatusCode(), c.Route().Path, time.Since(start)
	s.metrics.http.Observe(route, telemetry.Method(c.Method()), status, took)
	var who []slog.Attr
	if a, ok := c.Locals(actorKey).(*domain.Actor); ok {
		who = append(who, slog.Int64("user", a.User.ID))
		if a.ClientID != "" {
			who = append(who, slog.String("client", a.ClientID))
		}
	}
	telemetry.LogRequest(context.Background(), s.log, probes[route], id, c.Method(), route, status, took, who...)
	return nil
}

// probes are the routes load balancers and scrapers call every few
// seconds: logged at debug level only.
var probes = map[string]bool{"/health": true, "/ready": true, "/metrics": true}

// requestID is the id observe gave the request.
func requestID(c *fiber.Ctx) string {
	return string(c.Response().Header.Peek(telemetry.RequestIDHeader))
}
