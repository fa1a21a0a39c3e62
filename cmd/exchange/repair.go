package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"exchange/repo"
)

// repairBudget bounds the repair at start-up: a store with more abandoned
// writes than that time allows is healed by the periodic sweep, while the
// service already serves.
const repairBudget = 10 * time.Second

// repair heals what interrupted writes left half done (repo.DB.Repair)
// and logs what it did, by counts: at start-up (exclusive when this
// process started the embedded database, so no other can be writing) and
// from the sweep.
func repair(ctx context.Context, a *app, log *slog.Logger, exclusive bool, when string) {
	rep, err := a.db.Repair(ctx, repo.RepairOptions{Exclusive: exclusive, Budget: repairBudget})
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			log.Warn("The repair of interrupted writes failed; it runs again at the next sweep.", "when", when, "error", err)
		}
		return
	}
	for _, e := range rep.Failed {
		log.Warn("An interrupted write could not be repaired; it is tried again at the next sweep.", "error", e)
	}
	repaired := total(rep.Repaired)
	if repaired == 0 && rep.Leases == 0 && rep.Left == 0 && len(rep.Failed) == 0 && when != "start-up" {
		return
	}
	log.Info("Repaired interrupted writes.", "when", when, "intents", rep.Intents, "repaired", repaired,
		"kinds", kinds(rep.Repaired), "running", rep.Running, "left", rep.Left, "failed", len(rep.Failed),
		"deadLeases", rep.Leases, "elapsed", rep.Elapsed.Round(time.Millisecond))
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// kinds lists counts by kind, in name order: "observations.create=2 ...".
func kinds(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// doctorCommand reports and repairs on demand what interrupted writes
// left: abandoned write intents (as at start-up), dead processes' leases,
// and identifier claims that no stored record owns (a pass over every
// claim, which start-up does not make).
func doctorCommand(ctx context.Context, s *settings, log *slog.Logger, io stdio, args []string) error {
	fs := newFlags("doctor", io)
	dryRun := fs.Bool("dry-run", false, "report only; change nothing")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	a, err := openApp(ctx, s, log, true)
	if err != nil {
		return err
	}
	defer a.Close()
	// With a database this command started, no server is running: every
	// intent is abandoned. Beside a running server, only those of dead
	// processes are.
	rep, err := a.db.Repair(ctx, repo.RepairOptions{Exclusive: a.embedded != nil, DryRun: *dryRun, Scan: true})
	if err != nil {
		return err
	}
	printDoctor(io.out, rep, *dryRun)
	if len(rep.Failed) > 0 {
		return fmt.Errorf("%d interrupted writes could not be repaired: %w", len(rep.Failed), rep.Failed[0])
	}
	return nil
}

func printDoctor(out io.Writer, rep repo.RepairReport, dryRun bool) {
	repaired, released, removed := "repaired", "released", "removed"
	if dryRun {
		repaired, released, removed = "to repair", "to release", "to remove"
	}
	fmt.Fprintf(out, "Write intents: %d; abandoned, %s: %d", rep.Intents, repaired, total(rep.Repaired))
	if len(rep.Repaired) > 0 {
		fmt.Fprintf(out, " (%s)", kinds(rep.Repaired))
	}
	fmt.Fprintf(out, "; of running writes: %d\n", rep.Running)
	for _, col := range slices.Sorted(maps.Keys(rep.Orphans)) {
		fmt.Fprintf(out, "Claims in %s that no stored record owns, %s: %d\n", col, released, rep.Orphans[col])
	}
	fmt.Fprintf(out, "Leases of processes that are gone, %s: %d\n", removed, rep.Leases)
	if total(rep.Repaired)+total(rep.Orphans)+rep.Leases == 0 && len(rep.Failed) == 0 {
		fmt.Fprintln(out, "Nothing to repair.")
	}
}
