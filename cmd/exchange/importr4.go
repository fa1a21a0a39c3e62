package main

import (
	"cmp"
	"context"
	"errors"

	"fmt"
	"log/slog"
	"os"
	"time"

	"golang.org/x/term"

	"exchange/bulkimport"
)

// errSomeFailed ends an import in which resources failed: exit status 1,
// after the summary.
var errSomeFailed = errors.New("some resources were not imported: the report says why")

// importCommand is `exchange import r4 [flags] FILE|DIR...`: the bulk R4
// import, a client of a running service's /fhir-import/R4.
func importCommand(ctx context.Context, s *settings, log *slog.Logger, io stdio, args []string) error {
	if len(args) == 0 || args[0] != "r4" {
		return usageError("import: want `import r4 [flags] FILE|DIR...`")
	}
	o := bulkimport.Options{Log: log, Progress: io.err, ProgressEvery: 10 * time.Second}
	fs := newFlags("import r4", io)
	fs.StringVar(&o.URL, "url", cmp.Or(io.getenv("EXCHANGE_URL"), fmt.Sprintf("http://127.0.0.1:%d", s.Port)), "the service (else EXCHANGE_URL)")
	fs.StringVar(&o.Token, "token", io.getenv("EXCHANGE_TOKEN"), "a bearer `TOKEN` (else EXCHANGE_TOKEN; \"exchange token create\" prints one)")
	fs.Int64Var(&o.Source, "source", 0, "the FHIR source id every resource goes to (or those --sources does not route)")
	fs.StringVar(&o.SourcesFile, "sources", "", "a `FILE` routing resources by patient: CSV lines \"Patient/p1,3\" or JSON {\"Patient/p1\": 3}")
	fs.IntVar(&o.Workers, "workers", 4, "batches in flight at once")
	fs.IntVar(&o.BatchSize, "batch", 100, "resources per request")
	fs.IntVar(&o.Retries, "retries", 5, "times a batch is sent again after a transient failure")
	fs.StringVar(&o.Report, "report", "r4-import-report.ndjson", "the report: one JSON line per warning or error (its checkpoint sits beside it)")
	fs.BoolVar(&o.Restart, "restart", false, "start over, ignoring the checkpoint of an interrupted run")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: exchange import r4 [flags] FILE|DIR...\n\nSends R4 NDJSON files, Bundles or directories of them to a running service's /fhir-import/R4.")
		fs.PrintDefaults()
	}
	var err error
	if o.Input, err = parseFlagsAndArgs(fs, args[1:]); err != nil {
		return err
	}
	switch {
	case len(o.Input) == 0:
		return usageError("import r4: name the R4 files or directories to import")
	case o.Workers < 1 || o.BatchSize < 1 || o.Retries < 0:
		return usageError("import r4: --workers and --batch are at least 1, --retries at least 0")
	case o.Retries == 0:
		o.Retries = -1 // none: Options reads 0 as its default
	}
	if f, ok := io.err.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		o.Terminal = true
	}
	sum, err := bulkimport.Run(ctx, o)
	if sum.Read == 0 && err != nil {
		return err
	}
	fmt.Fprintf(io.out, "R4 import: %d resources read: %d converted, %d converted with loss, %d failed, %d already stored",
		sum.Read, sum.Converted, sum.WithLoss, sum.Failed, sum.Duplicates)
	if sum.Skipped > 0 {
		fmt.Fprintf(io.out, ", %d answered by the interrupted run", sum.Skipped)
	}
	rate := float64(sum.Answered()) / max(sum.Elapsed.Seconds(), 0.001)
	fmt.Fprintf(io.out, ".\nTook %s (%.0f resources/s, %d batches sent again). Report: %s\n",
		sum.Elapsed.Round(time.Millisecond), rate, sum.Retries, o.Report)
	switch {
	case err != nil:
		return err
	case sum.Interrupted:
		return errors.New("interrupted: run the same command again to resume")
	case sum.Failed > 0:
		return errSomeFailed
	}
	return nil
}
