package telemetry_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"exchange/telemetry"
)

func TestParseLogConfig(t *testing.T) {
	for _, tc := range []struct {
		format, level string
		json          bool
		want          slog.Level
		err           string
	}{
		{"", "", true, slog.LevelInfo, ""},
		{"text", "DEBUG", false, slog.LevelDebug, ""},
		{"json", "warn", true, slog.LevelWarn, ""},
		{" JSON ", "error", true, slog.LevelError, ""},
		{"xml", "", true, 0, "LOG_FORMAT"},
		{"", "verbose", true, 0, "LOG_LEVEL"},
	} {
		c, err := telemetry.ParseLogConfig(tc.format, tc.level)
		if tc.err != "" {
			if err == nil || !strings.HasPrefix(err.Error(), tc.err+":") {
				t.Errorf("%q/%q: error %v, want one naming %s", tc.format, tc.level, err, tc.err)
			}
			continue
		}
		if err != nil || c.JSON != tc.json || c.Level != tc.want {
			t.Errorf("%q/%q: %+v, %v; want json=%v level=%v", tc.format, tc.level, c, err, tc.json, tc.want)
		}
	}
}

// TestFloorWritesWhatPasses: records at and above the floor are written
// with every attribute and group given on the way; those below are not.
func TestFloorWritesWhatPasses(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(telemetry.Floor(slog.NewJSONHandler(&buf, nil), slog.LevelWarn))
	l := log.With("a", 1).WithGroup("g").With("b", 2)
	l.Info("dropped", "c", 3)
	l.Warn("kept", "c", 3)
	l.Error("again", "c", 4)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("wrote %d lines, want 2:\n%s", len(lines), buf.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatal(err)
	}
	g, _ := rec["g"].(map[string]any)
	if rec["msg"] != "kept" || rec["a"] != 1.0 || g["b"] != 2.0 || g["c"] != 3.0 {
		t.Errorf("first line %s lost attributes", lines[0])
	}
}

// attrsSeen counts the attributes a handler was asked to format.
type attrsSeen struct {
	slog.Handler
	n *int
}

func (h attrsSeen) WithAttrs(as []slog.Attr) slog.Handler {
	*h.n += len(as)
	return attrsSeen{h.Handler.WithAttrs(as), h.n}
}

// TestFloorDefersAttributes: With below the floor never reaches the
// handler that formats: FerretDB's per-statement attributes cost nothing.
func TestFloorDefersAttributes(t *testing.T) {
	var buf bytes.Buffer
	seen := 0
	log := slog.New(telemetry.Floor(attrsSeen{slog.NewTextHandler(&buf, nil), &seen}, slog.LevelError))
	for range 10 {
		log.With("args", []any{"a document"}).Debug(">>> SELECT")
	}
	if seen != 0 || buf.Len() != 0 {
		t.Errorf("the handler formatted %d attributes and wrote %q for records below the floor", seen, buf.String())
	}
	log.With("args", "x").Error("failed")
	if seen != 1 {
		t.Errorf("the handler got %d attributes for the one record written, want 1", seen)
	}
}

// BenchmarkStatementLogging is what FerretDB does for every SQL statement
// (fsql.DB.QueryContext): With(args), then a debug record, twice, with the
// logger's floor at error. "text" is the TextHandler the embedded database
// logged through before (repo's levelFloor passed With straight to it);
// "floor" is Floor over the same handler.
func BenchmarkStatementLogging(b *testing.B) {
	doc := []any{`{"$s":{"p":{"_id":{"t":"int"},"omh":{"t":"object"}}},"_id":42,"omh":{"body":{"heart_rate":{"unit":"beats/min","value":72}}}}`}
	for _, bc := range []struct {
		name string
		h    slog.Handler
	}{
		{"text", slog.NewTextHandler(discard{}, &slog.HandlerOptions{Level: slog.LevelError})},
		{"floor", telemetry.Floor(slog.NewTextHandler(discard{}, nil), slog.LevelError)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			log := slog.New(bc.h)
			b.ReportAllocs()
			for b.Loop() {
				fields := []any{slog.Any("args", doc)}
				log.With(fields...).Debug(">>> SELECT _ferretdb_sjson FROM t")
				fields = append(fields, slog.Duration("time", 1000), slog.Any("error", nil))
				log.With(fields...).Debug("<<< SELECT _ferretdb_sjson FROM t")
			}
		})
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
