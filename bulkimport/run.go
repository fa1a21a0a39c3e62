package bulkimport

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Options is one run.
type Options struct {
	URL   string   // the service, e.g. http://127.0.0.1:8000
	Token string   // a bearer token of a user who may write to the sources
	Input []string // NDJSON files, Bundles or single resources, directories of them

	// Source is the FHIR source of every resource, or of those the
	// SourcesFile does not route; at least one of the two is needed.
	Source int64
	// SourcesFile maps upstream patient references to FHIR sources (see
	// readSources); each resource goes to the source of its patient.
	SourcesFile string

	Workers   int // batches in flight at once (default 4)
	BatchSize int // resources per request (default 100)
	// BatchBytes caps a request's size (default 1 MiB; a larger resource
	// goes alone).
	BatchBytes int
	Retries    int // sends of a batch after a transient failure (default 5; negative: none)

	// Report is the file that receives every warning and error, one JSON
	// line per resource; the checkpoint is kept at Report + ".checkpoint".
	Report string
	// Restart ignores the checkpoint of an interrupted run.
	Restart bool

	// Progress receives the progress display: a bar when Terminal, else a
	// line every ProgressEvery (0: none).
	Progress      io.Writer
	Terminal      bool
	ProgressEvery time.Duration

	Log    *slog.Logger
	Client *http.Client // default: one with a 5-minute timeout per request
	// Backoff is the wait before retry n (default: from 0.5 s doubling to
	// 30 s, with jitter).
	Backoff func(n int) time.Duration
	// Grace is how long requests in flight may finish after ctx ends
	// (default 30 s).
	Grace time.Duration
}

func (o *Options) defaults() error {
	if o.URL == "" {
		return errors.New("no service address: pass --url or set EXCHANGE_URL")
	}
	if o.Token == "" {
		return errors.New("no token: pass --token or set EXCHANGE_TOKEN (`exchange token create --email ...` prints one)")
	}
	if o.Source == 0 && o.SourcesFile == "" {
		return errors.New("no FHIR source: pass --source ID, or --sources FILE to route by patient")
	}
	if o.Source < 0 {
		return fmt.Errorf("--source %d is not a FHIR source id", o.Source)
	}
	if o.Report == "" {
		return errors.New("no report file: pass --report")
	}
	o.URL = strings.TrimRight(o.URL, "/")
	o.Workers = cmp.Or(max(o.Workers, 0), 4)
	o.BatchSize = cmp.Or(max(o.BatchSize, 0), 100)
	o.BatchBytes = cmp.Or(max(o.BatchBytes, 0), 1<<20)
	switch {
	case o.Retries == 0:
		o.Retries = 5
	case o.Retries < 0:
		o.Retries = 0
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 5 * time.Minute}
	}
	if o.Backoff == nil {
		o.Backoff = backoff
	}
	o.Grace = cmp.Or(o.Grace, 30*time.Second)
	return nil
}

// ErrUnauthorized: the service refused the token; nothing more can be sent.
var ErrUnauthorized = errors.New("the service refused the token (401): create a new one with `exchange token create`")

// batch is up to BatchSize resources of one FHIR source, sent together.
type batch struct {
	source   int64
	records  []*record
	bytes    int
	first    int64 // seq of its first record
	answered bool  // the ledger has its answers (guarded by the ledger)
}

// Run imports the input and returns what it did. It stops early when ctx
// ends (Ctrl-C): requests in flight may finish (Options.Grace), the rest
// is left for the same command to resume. An error means the run could
// not go on (bad options, token refused, service unreachable); resources
// that failed are in the Summary and the report, not in the error.
func Run(ctx context.Context, o Options) (Summary, error) {
	r, err := prepare(ctx, &o)
	if err != nil {
		return Summary{}, err
	}
	return r.execute(ctx)
}

// importRun is a prepared run: its input listed, its routing read, the
// service checked, the checkpoint of an interrupted run looked up.
type importRun struct {
	o        *Options
	inputs   []inputFile
	router   *router
	client   *client
	ledger   *ledger
	resumeAt int64 // records before it were answered by an earlier run
}

func prepare(ctx context.Context, o *Options) (*importRun, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	r := &importRun{o: o, router: &router{fallback: o.Source}}
	var err error
	var skipped []string
	if r.inputs, skipped, err = listInputs(o.Input, o.Report); err != nil {
		return nil, err
	}
	for _, path := range skipped {
		o.Log.Info("Skipping the export's log: it holds events, not resources.", "file", path)
	}
	// routing names how resources are routed, for the checkpoint: a
	// resumed run must route as the interrupted one did.
	routing := fmt.Sprintf("source=%d", o.Source)
	if o.SourcesFile != "" {
		var digest string
		if r.router.byPatient, digest, err = readSources(o.SourcesFile); err != nil {
			return nil, err
		}
		routing += " sources=" + digest
	}
	r.client = &client{base: o.URL, token: o.Token, http: o.Client, retries: o.Retries, backoff: o.Backoff}
	who, err := r.client.check(ctx, o.Source)
	if isUnauthorized(err) {
		return nil, ErrUnauthorized
	}
	if err != nil {
		return nil, err
	}
	cpPath := o.Report + ".checkpoint"
	previous, err := loadCheckpoint(cpPath)
	if err != nil {
		return nil, err
	}
	switch {
	case previous == nil:
	case o.Restart:
		o.Log.Info("Starting over: --restart ignores the checkpoint of an earlier run.", "checkpoint", cpPath)
	case !previous.matches(r.inputs, routing):
		o.Log.Warn("Starting over: the input files or the routing changed since the interrupted run.", "checkpoint", cpPath)
	default:
		r.resumeAt = previous.Done
		o.Log.Info("Resuming an interrupted run: its first resources are answered.", "answered", r.resumeAt, "checkpoint", cpPath)
	}
	var total int64
	for _, f := range r.inputs {
		total += f.Size
	}
	r.ledger = &ledger{started: time.Now(), cpPath: cpPath, cp: checkpoint{Inputs: r.inputs, Routing: routing},
		progress: newProgress(o.Progress, o.Terminal, total, o.ProgressEvery)}
	// Until the reader passes the earlier run's mark, the checkpoint keeps
	// it: a run stopped while skipping must not move it back.
	r.ledger.nextSeq = r.resumeAt
	if err := r.ledger.openReport(o.Report, r.resumeAt > 0); err != nil {
		return nil, err
	}
	o.Log.Info("Importing R4 resources.", "service", o.URL, "user", who, "files", len(r.inputs), "bytes", total,
		"workers", o.Workers, "report", o.Report)
	return r, nil
}

// execute reads and sends. Reading stops when ctx ends or the run breaks
// down; requests in flight get Options.Grace more.
func (r *importRun) execute(ctx context.Context) (Summary, error) {
	o, l := r.o, r.ledger
	readCtx, stopReading := context.WithCancelCause(ctx)
	defer stopReading(nil)
	sendCtx, stopSending := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSending()
	go func() {
		select {
		case <-readCtx.Done():
			time.AfterFunc(o.Grace, stopSending)
		case <-sendCtx.Done():
		}
	}()
	r.client.onRetry = func(err error) {
		l.retried()
		o.Log.Warn("Sending a batch again.", "error", err)
	}

	batches := make(chan *batch, o.Workers)
	var workers sync.WaitGroup
	for range o.Workers {
		workers.Go(func() {
			for b := range batches {
				if readCtx.Err() != nil {
					continue // stopped: left unanswered, for the resumed run
				}
				answers, err := r.client.importBatch(readCtx, sendCtx, b)
				if err == nil {
					err = r.client.verify(sendCtx, answers)
				}
				switch {
				case err == nil:
					l.answered(b, answers)
				case errors.Is(err, context.Canceled):
					// Interrupted in flight: left unanswered.
				case isUnauthorized(err):
					stopReading(ErrUnauthorized)
				case importUnavailable(err):
					stopReading(err)
				case unavailable(err):
					stopReading(fmt.Errorf("the service at %s stopped answering (%v): run the same command again to resume", o.URL, err))
				default:
					l.failed(b, err)
				}
			}
		})
	}
	readErr := r.readAll(readCtx, batches)
	close(batches)
	workers.Wait()
	stopSending()

	var fatal error
	switch cause := context.Cause(readCtx); {
	case cause != nil && ctx.Err() == nil:
		fatal = cause // the run broke down; else the caller stopped it
	case readErr != nil && cause == nil && l.broken() == nil:
		fatal = readErr // an input file could not be read
	}
	summary, err := l.close(readErr == nil && l.allAnswered())
	return summary, errors.Join(fatal, err)
}

func isUnauthorized(err error) bool {
	re, ok := errors.AsType[*requestError](err)
	return ok && re.code == http.StatusUnauthorized
}

// readAll reads every file, skips the records an earlier run answered,
// routes the rest and hands them out in batches. It returns ctx's error
// when stopped.
func (run *importRun) readAll(ctx context.Context, out chan<- *batch) error {
	o, l := run.o, run.ledger
	b := &batcher{size: o.BatchSize, bytes: o.BatchBytes, open: map[int64]*batch{},
		pendingCap: o.BatchSize * o.Workers, pendingBytesCap: o.BatchBytes * o.Workers}
	send := func(x *batch) error {
		select {
		case out <- x:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var seq int64
	for _, f := range run.inputs {
		err := readFile(ctx, f, func(r *record) error {
			if err := l.broken(); err != nil {
				return err
			}
			r.seq = seq
			seq++
			if r.seq < run.resumeAt {
				l.skipped(r)
				return nil
			}
			if r.err == nil {
				r.err = run.router.route(r)
			}
			if r.err != nil {
				l.read(r, nil, false)
				return nil
			}
			into, opened := b.add(r)
			l.read(r, into, opened)
			for _, full := range b.ready() {
				if err := send(full); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			if ctx.Err() == nil && l.broken() == nil {
				err = fmt.Errorf("%s: %w", f.Path, err)
			}
			return err
		}
	}
	for _, rest := range b.drain() {
		if err := send(rest); err != nil {
			return err
		}
	}
	return l.broken()
}

// batcher groups records by FHIR source. A batch goes out when full; when
// more than pendingCap records, or pendingBytesCap bytes, wait across
// sources (many patients, each with a few resources; large resources),
// the oldest batch goes out early, so memory stays bounded whatever the
// input.
type batcher struct {
	size, bytes     int
	pendingCap      int // records waiting, at most
	pendingBytesCap int // their bytes, at most
	pending         int
	pendingBytes    int
	open            map[int64]*batch
	full            []*batch
}

// add puts r in its source's batch; opened says the batch is new.
func (bt *batcher) add(r *record) (*batch, bool) {
	b, ok := bt.open[r.source]
	if ok && (len(b.records) >= bt.size || b.bytes+len(r.body) > bt.bytes) {
		bt.close(b)
		ok = false
	}
	if !ok {
		b = &batch{source: r.source, first: r.seq}
		bt.open[r.source] = b
	}
	b.records = append(b.records, r)
	b.bytes += len(r.body)
	bt.pending++
	bt.pendingBytes += len(r.body)
	if len(b.records) >= bt.size {
		bt.close(b)
	}
	for len(bt.open) > 0 && (bt.pending > bt.pendingCap || bt.pendingBytes > bt.pendingBytesCap) {
		bt.close(bt.oldest())
	}
	return b, !ok
}

// oldest is the open batch with the earliest first record.
func (bt *batcher) oldest() *batch {
	var oldest *batch
	for _, b := range bt.open {
		if oldest == nil || b.first < oldest.first {
			oldest = b
		}
	}
	return oldest
}

func (bt *batcher) close(b *batch) {
	delete(bt.open, b.source)
	bt.pending -= len(b.records)
	bt.pendingBytes -= b.bytes
	bt.full = append(bt.full, b)
}

// ready returns the batches that are due to go out.
func (bt *batcher) ready() []*batch {
	out := bt.full
	bt.full = nil
	return out
}

// drain closes every open batch, oldest first, and returns what is due.
func (bt *batcher) drain() []*batch {
	for len(bt.open) > 0 {
		bt.close(bt.oldest())
	}
	return bt.ready()
}
