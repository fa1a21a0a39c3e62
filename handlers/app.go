package handlers

import (
	"context"
	"log/slog"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/gofiber/fiber/v2/middleware/recover"

	"exchange/domain"
	"exchange/oauth"
)

// Config holds what the HTTP layer serves.
type Config struct {
	Service *domain.Service
	OAuth   *oauth.Provider
	// Ping checks the database for /health.
	Ping   func(ctx context.Context) error
	Logger *slog.Logger
}

// server carries the dependencies of the route handlers.
type server struct {
	service *domain.Service
	oauth   *oauth.Provider
	ping    func(ctx context.Context) error
	log     *slog.Logger
}

// New returns the Fiber application with every route.
func New(c Config) *fiber.App {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	s := &server{service: c.Service, oauth: c.OAuth, ping: c.Ping, log: c.Logger}
	app := fiber.New(fiber.Config{
		AppName:               "exchange",
		CaseSensitive:         true,
		DisableStartupMessage: true,
		ErrorHandler:          s.handleError,
		BodyLimit:             64 << 20,
		ReadBufferSize:        16 << 10, // long bearer tokens and cookies
		ReadTimeout:           time.Minute,
		WriteTimeout:          5 * time.Minute,
		IdleTimeout:           2 * time.Minute,
	})
	app.Use(recover.New())
	app.Get("/health", s.health)
	app.All("/o/*", adaptor.HTTPHandler(c.OAuth.Handler()))

	api := app.Group("/api/v1", s.authenticate)
	api.Get("/users/profile", s.profile)
	api.Get("/oauth_clients", s.listClients)
	api.Post("/oauth_clients", s.createClient)
	return app
}

// health reports whether the service and its database answer.
func (s *server) health(c *fiber.Ctx) error {
	ctx, cancel := context.WithTimeout(c.UserContext(), 5*time.Second)
	defer cancel()
	if err := s.ping(ctx); err != nil {
		s.log.Warn("health check found the database unreachable", "error", err)
		return c.Status(fiber.StatusServiceUnavailable).JSON(fiber.Map{"status": "unavailable", "database": "unreachable"})
	}
	return c.JSON(fiber.Map{"status": "ok", "database": "ok"})
}
