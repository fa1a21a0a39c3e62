package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestLoadStudy runs exchange load-study as an operator does, tiny (one
// patient, one day), against the whole program over the embedded
// database: the study is set up through the admin API, the patient's EHR
// record goes through the R4 import and a day of readings through FHIR
// batches, and every search answers and is measured; a second run over
// the kept study runs chosen searches only, twice.
func TestLoadStudy(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 1,732 observations and an EHR record to a server of its own")
	}
	dataDir := t.TempDir()
	vars := programVars(dataDir)
	ctx := context.Background()
	if err := run(ctx, []string{"seed"}, env(vars), nil, io.Discard, io.Discard); err != nil {
		t.Fatalf("seed: %v", err)
	}
	var out bytes.Buffer
	if err := run(ctx, []string{"token", "create", "--email", demoSuperuserEmail}, env(vars), nil, &out, io.Discard); err != nil {
		t.Fatalf("token create: %v", err)
	}
	token := strings.TrimSpace(out.String())

	serveCtx, stop := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(serveCtx, nil, env(vars), nil, pw, io.Discard)
		pw.Close()
	}()
	defer func() {
		stop()
		select {
		case <-done:
		case <-time.After(shutdownGrace + 10*time.Second):
			t.Error("serve did not stop")
		}
	}()
	lines := bufio.NewScanner(pr)
	base := ""
	for base == "" && lines.Scan() {
		if m := regexp.MustCompile(`listening on (http://localhost:\d+)`).FindStringSubmatch(lines.Text()); m != nil {
			base = m[1]
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if base == "" {
		t.Fatal("the server did not start")
	}

	state := filepath.Join(dataDir, "study.json")
	client := map[string]string{"EXCHANGE_URL": base, "EXCHANGE_TOKEN": token}
	synthea := filepath.Join("..", "..", "..", "shared", "fhir", "synthea-r4-10-patients")
	out.Reset()
	var progress bytes.Buffer
	if err := run(ctx, []string{"load-study", "--patients", "1", "--days", "1", "--synthea", synthea, "--state", state, "--name", "Tiny study"},
		env(client), nil, &out, &progress); err != nil {
		t.Fatalf("load-study: %v\n%s\n%s", err, out.String(), progress.String())
	}
	text := out.String()
	t.Log(text)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`EHR records: \d+ R4 resources of 1 patient .*: \d+ converted, \d+ with loss, 0 failed; server CPU`),
		regexp.MustCompile(`Observations: 1732 in 2 batches of up to 1000 .*: 1732 created, 0 already stored, 0 refused; server CPU \d`),
		regexp.MustCompile(`\(two reads of /metrics\)`),
		regexp.MustCompile(`keys and docs examined: n/a on the embedded database`),
		regexp.MustCompile(`server memory \(RSS\) after a search: at most \d+ MiB; its memory limit \(GOMEMLIMIT\): \d+ MiB`),
	} {
		if !want.MatchString(text) {
			t.Errorf("the output lacks %s", want)
		}
	}
	// Every search answered, with what a user would see.
	answers := map[string]string{
		"glucose-day": "50 entries", "glucose-day-next": "50 entries", "heart-rate-newest": "50 entries",
		"study-blood-pressure": "2 entries", "patient-count": "total 1732", "study-patients": "1 of 1",
		"ehr-conditions": "entries", "ehr-encounters-newest": "entries", "my-heart-rate-hour": "60 entries",
		"my-latest-glucose": "12 entries", "my-steps": "1 entries", "console-study-data": "page of",
		"console-day-data": "page of", "mcp-summarize": "; 5 codes", "mcp-data-range": "1 codes",
		"mcp-list": "20 entries", "mcp-study-count": "total 1732",
	}
	if len(answers) != len(studySearches) {
		t.Errorf("the test knows %d searches' answers, the command makes %d", len(answers), len(studySearches))
	}
	for name, answer := range answers {
		row := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(name) + `\s+(.*?)\s+\d+\.\d{3}\s+\d+\.\d{3}\s+(\d+%|n/a)\s+n/a\s+n/a\s*$`).FindStringSubmatch(text)
		if row == nil || !strings.Contains(row[1], answer) {
			t.Errorf("search %s: row %q, want an answer with %q", name, row, answer)
		}
	}

	// Over the kept study: only the searches asked for, as often as asked.
	out.Reset()
	if err := run(ctx, []string{"load-study", "--searches-only", "--state", state, "--only", "^(study-patients|ehr-conditions)$", "--repeat", "2"},
		env(client), nil, &out, io.Discard); err != nil {
		t.Fatalf("load-study --searches-only: %v\n%s", err, out.String())
	}
	if rows := regexp.MustCompile(`(?m)^\s*(study-patients|ehr-conditions)\s.*\d\.\d{3} \(\d+\.\d{3}-\d+\.\d{3}\)`).FindAllStringSubmatch(out.String(), -1); len(rows) != 2 ||
		strings.Contains(out.String(), "glucose-day") {
		t.Errorf("--only study-patients and ehr-conditions, --repeat 2: %d rows with a range, want those 2 only:\n%s", len(rows), out.String())
	}
	for _, args := range [][]string{{"load-study"}, {"load-study", "--patients", "0"}, {"load-study", "--searches-only"}, {"load-study", "--only", "("}} {
		withToken := client
		if len(args) == 1 {
			withToken = map[string]string{"EXCHANGE_URL": base}
		}
		if err := run(ctx, args, env(withToken), nil, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "load-study") {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}
