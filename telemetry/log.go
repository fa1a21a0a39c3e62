package telemetry

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
)

// LogConfig is LOG_FORMAT and LOG_LEVEL, parsed.
type LogConfig struct {
	// JSON selects JSON lines; false: slog's key=value text.
	JSON  bool
	Level slog.Level
}

// ParseLogConfig reads LOG_FORMAT (json, the default, or text) and
// LOG_LEVEL (debug, info, the default, warn or error). The error names the
// setting at fault.
func ParseLogConfig(format, level string) (LogConfig, error) {
	c := LogConfig{JSON: true, Level: slog.LevelInfo}
	switch strings.ToLower(strings.TrimSpace(format)) {
	case "", "json":
	case "text":
		c.JSON = false
	default:
		return c, fmt.Errorf("LOG_FORMAT: %q is not json or text", format)
	}
	switch strings.ToLower(strings.TrimSpace(level)) {
	case "", "info":
	case "debug":
		c.Level = slog.LevelDebug
	case "warn", "warning":
		c.Level = slog.LevelWarn
	case "error":
		c.Level = slog.LevelError
	default:
		return c, fmt.Errorf("LOG_LEVEL: %q is not debug, info, warn or error", level)
	}
	return c, nil
}

// NewLogger returns a logger writing to w as configured. Attributes given
// to With cost nothing until a record at the level is written (see
// [Floor]).
func (c LogConfig) NewLogger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.Level}
	var h slog.Handler
	if c.JSON {
		h = slog.NewJSONHandler(w, opts)
	} else {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(Floor(h, c.Level))
}

// Floor returns a handler that drops records below min and defers the
// attributes and groups of With and WithGroup until a record passes.
// slog's built-in handlers format attributes as soon as With is called;
// FerretDB calls With for every SQL statement it runs, with the
// statement's arguments (whole documents), to log at debug level: through
// a TextHandler that cost 12% of ingest CPU although nothing was written.
func Floor(h slog.Handler, min slog.Leveler) slog.Handler {
	return &floor{base: h, min: min}
}

// floor is a handler with deferred attributes: base, then pending applied
// in order, materialized once, by the first record that passes.
type floor struct {
	base    slog.Handler
	min     slog.Leveler
	pending []deferred

	once  sync.Once
	built slog.Handler
}

// deferred is one With (attrs) or WithGroup (group) call.
type deferred struct {
	attrs []slog.Attr
	group string
}

func (h *floor) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min.Level() && h.base.Enabled(ctx, l)
}

func (h *floor) Handle(ctx context.Context, r slog.Record) error {
	h.once.Do(func() {
		h.built = h.base
		for _, d := range h.pending {
			if d.group != "" {
				h.built = h.built.WithGroup(d.group)
			} else {
				h.built = h.built.WithAttrs(d.attrs)
			}
		}
	})
	return h.built.Handle(ctx, r)
}

func (h *floor) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	return h.with(deferred{attrs: attrs})
}

func (h *floor) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return h.with(deferred{group: name})
}

func (h *floor) with(d deferred) *floor {
	return &floor{base: h.base, min: h.min, pending: append(slices.Clip(h.pending), d)}
}
