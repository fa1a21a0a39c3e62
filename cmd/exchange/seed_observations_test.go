package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// seed --observations loads a month of readings that the service accepts
// (the official schemas, the patients' consents), and a second run adds
// none: the identifiers recognise what is stored.
func TestSeedObservations(t *testing.T) {
	standards := filepath.Join("..", "..", "standards")
	getenv := env(map[string]string{"DATA_DIR": t.TempDir(), "PORT": "0", "EMBEDDED_MONGO_ADDR": "127.0.0.1:0",
		"FHIR_PACKAGES_DIR": filepath.Join(standards, "fhir-packages"), "FHIR_XVER_PACKAGE_DIR": filepath.Join(standards, "fhir", "xver-r4-r5", "maps"),
		"OMH_SCHEMA_DIR": filepath.Join(standards, "omh", "schemas")})
	added := func() int {
		t.Helper()
		var out bytes.Buffer
		if err := run(context.Background(), []string{"seed", "--observations"}, getenv, nil, &out, io.Discard); err != nil {
			t.Fatalf("seed --observations: %v", err)
		}
		m := regexp.MustCompile(`Demo observations: (\d+) added`).FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("seed --observations says nothing of the observations:\n%s", out.String())
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	// Every series has a reading on every day before today.
	if n, least := added(), len(demoObservationSeries)*(demoObservationDays-1); n < least {
		t.Errorf("the first run added %d observations, want at least %d", n, least)
	}
	if n := added(); n > len(demoObservationSeries) { // at most today's readings that came due meanwhile
		t.Errorf("the second run added %d observations, want none", n)
	}
}

// The demo readings are spread over their range, not stuck on a few values.
func TestDemoObservationsVary(t *testing.T) {
	now := time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC)
	obs, err := demoObservations(now, map[string]int64{}, map[string]int64{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, o := range obs {
		if o.Codings[0].Code == "omh:heart-rate:2.0" {
			seen[string(regexp.MustCompile(`"value":\d+`).Find(o.Data))] = true
		}
	}
	if len(seen) < 15 {
		t.Errorf("the demo heart rates take %d distinct values over %d days, want at least 15", len(seen), demoObservationDays)
	}
	for _, o := range obs {
		if bytes.Contains(o.Data, []byte(now.Add(time.Hour).Format(time.DateOnly)+"T17:30")) {
			t.Errorf("a reading of this afternoon, still to come, was made: %s", o.Data)
		}
	}
}
