package bulkimport

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"slices"
	"sync"
	"time"
)

// Summary counts what a run did. Every resource read lands in exactly
// one of Skipped, Converted, WithLoss, Failed and Duplicates, unless the
// run was interrupted before its answer came.
type Summary struct {
	Read       int64 // resources read from the input
	Skipped    int64 // answered in an earlier, interrupted run (the checkpoint)
	Converted  int64 // stored, no field loss detected
	WithLoss   int64 // stored, some R4 values dropped (the report lists them)
	Failed     int64 // not stored: the report says why
	Duplicates int64 // already stored under the same source (a 409 naming it, read back): done
	Retries    int64 // batches sent again after a transient failure
	// Interrupted: the run stopped before every resource was answered;
	// the same command resumes it.
	Interrupted bool
	Elapsed     time.Duration
}

// Answered counts the resources this run has an answer for.
func (s Summary) Answered() int64 { return s.Converted + s.WithLoss + s.Failed + s.Duplicates }

// reportLine is one line of the report: a resource whose answer carried a
// warning or an error.
type reportLine struct {
	File         string  `json:"file"`
	Line         int     `json:"line,omitempty"`
	Entry        int     `json:"entry,omitempty"`
	ResourceType string  `json:"resourceType,omitempty"`
	ID           string  `json:"id,omitempty"`
	ContentHash  string  `json:"contentHash,omitempty"` // the identity of a resource without an id
	Source       int64   `json:"source,omitempty"`
	Result       string  `json:"result"` // converted with loss | failed | duplicate
	Status       string  `json:"status,omitempty"`
	Stored       string  `json:"stored,omitempty"`
	Issues       []issue `json:"issue"`
}

// Results a report line can give.
const (
	resultLoss      = "converted with loss"
	resultFailed    = "failed"
	resultDuplicate = "duplicate"
)

// checkpoint is how far an interrupted run got: every resource before
// Done had its answer. It is kept beside the report while a run is
// unfinished and removed when one finishes.
type checkpoint struct {
	Inputs  []inputFile `json:"inputs"`
	Routing string      `json:"routing"`
	Done    int64       `json:"done"`
	Saved   time.Time   `json:"saved"`
}

// ledger records answers: the counts, the report, the checkpoint and the
// progress display. Workers call it concurrently.
type ledger struct {
	mu       sync.Mutex
	summary  Summary
	started  time.Time
	report   *bufio.Writer
	file     *os.File
	progress progress

	// The checkpoint: batches in the order they were opened, which is the
	// order of their first records; the oldest unanswered one bounds Done.
	cp       checkpoint
	cpPath   string
	cpSaved  time.Time
	open     []*batch
	nextSeq  int64    // the seq after the last record read
	at       position // input bytes answered or skipped, for progress
	writeErr error    // the first failure to write the report or checkpoint
}

// openReport starts the report: appended to when resuming, else new.
func (l *ledger) openReport(path string, resume bool) error {
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if resume {
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		return err
	}
	l.file, l.report = f, bufio.NewWriter(f)
	return nil
}

// loadCheckpoint returns the checkpoint at path, if there is one.
func loadCheckpoint(path string) (*checkpoint, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var cp checkpoint
	if err := json.Unmarshal(data, &cp); err != nil {
		return nil, nil // unreadable: as if there were none
	}
	return &cp, nil
}

// matches says whether cp is of the same input and routing.
func (cp *checkpoint) matches(inputs []inputFile, routing string) bool {
	return cp.Routing == routing && slices.EqualFunc(cp.Inputs, inputs, func(a, b inputFile) bool {
		return a.Path == b.Path && a.Size == b.Size && a.ModTime.Equal(b.ModTime)
	})
}

// skipped counts a record an earlier run answered.
func (l *ledger) skipped(r *record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.summary.Read++
	l.summary.Skipped++
	l.nextSeq = r.seq + 1
	l.at.done += r.size
	l.at.skipped += r.size
	l.progress.update(l.summary, l.at)
}

// read counts a record that goes on to be sent (batch is its batch, new
// when the record opened it) or failed here (batch nil: r.err says why).
func (l *ledger) read(r *record, b *batch, opened bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.summary.Read++
	l.nextSeq = r.seq + 1
	if opened {
		l.open = append(l.open, b)
	}
	if b == nil {
		l.answerLocked(r, answer{issues: []issue{{Severity: "error", Code: "invalid", Diagnostics: r.err.Error()}}})
		l.keep(l.saveLocked(false))
	}
}

// answered records the answers to a batch.
func (l *ledger) answered(b *batch, answers []answer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, r := range b.records {
		l.answerLocked(r, answers[i])
	}
	b.answered = true
	b.records = nil // only first and answered matter now: memory stays flat behind a slow batch
	l.keep(l.saveLocked(false))
}

// failed records a batch whose request failed as a whole: each of its
// resources gets the request's error, with its issue code when the
// service sent one.
func (l *ledger) failed(b *batch, err error) {
	failure := answer{issues: []issue{{Severity: "error", Code: "exception", Diagnostics: err.Error()}}}
	if re, ok := errors.AsType[*requestError](err); ok {
		failure.status = re.status
		failure.issues[0].Code = cmp.Or(re.issue, "exception")
	}
	answers := make([]answer, len(b.records))
	for i := range answers {
		answers[i] = failure
	}
	l.answered(b, answers)
}

// retried counts a batch sent again.
func (l *ledger) retried() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.summary.Retries++
}

func (l *ledger) answerLocked(r *record, a answer) {
	l.at.done += r.size
	result := ""
	switch {
	case a.code == 201 && hasSeverity(a.issues, "warning"):
		l.summary.WithLoss++
		result = resultLoss
	case a.code == 201:
		l.summary.Converted++
	case a.code == 409 && a.stored != "":
		l.summary.Duplicates++
		result = resultDuplicate
	default:
		l.summary.Failed++
		result = resultFailed
	}
	l.progress.update(l.summary, l.at)
	if result == "" {
		return
	}
	line := reportLine{File: r.file, ResourceType: r.resourceType, ID: r.id, ContentHash: r.contentHash, Source: r.source,
		Result: result, Status: a.status, Stored: a.stored, Issues: a.issues}
	if r.inLines {
		line.Line = r.at
	} else {
		line.Entry = r.at
	}
	data, _ := json.Marshal(line)
	_, err := l.report.Write(append(data, '\n'))
	l.keep(err)
}

// keep holds on to the first write failure.
func (l *ledger) keep(err error) {
	if l.writeErr == nil && err != nil {
		l.writeErr = err
	}
}

func hasSeverity(issues []issue, severity string) bool {
	return slices.ContainsFunc(issues, func(i issue) bool { return i.Severity == severity })
}

// saveLocked writes the checkpoint, at most once a second unless forced.
// Done is the first record of the oldest batch still waiting for its
// answer, else the next record to read.
func (l *ledger) saveLocked(force bool) error {
	for len(l.open) > 0 && l.open[0].answered {
		l.open[0] = nil
		l.open = l.open[1:]
	}
	if !force && time.Since(l.cpSaved) < time.Second {
		return nil
	}
	l.cp.Done = l.nextSeq
	if len(l.open) > 0 {
		l.cp.Done = l.open[0].first
	}
	l.cp.Saved = time.Now().UTC()
	l.cpSaved = time.Now()
	if err := l.report.Flush(); err != nil {
		return err
	}
	data, _ := json.MarshalIndent(l.cp, "", "  ")
	tmp := l.cpPath + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, l.cpPath)
}

// allAnswered says whether every batch opened has its answers.
func (l *ledger) allAnswered() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !slices.ContainsFunc(l.open, func(b *batch) bool { return !b.answered })
}

// close ends the run's records: the checkpoint is removed when every
// record was answered, else saved; the report is flushed and closed.
func (l *ledger) close(complete bool) (Summary, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	if complete {
		err = l.report.Flush()
		if rm := os.Remove(l.cpPath); rm != nil && !errors.Is(rm, fs.ErrNotExist) {
			err = errors.Join(err, rm)
		}
	} else {
		err = l.saveLocked(true)
	}
	l.summary.Interrupted = !complete
	l.summary.Elapsed = time.Since(l.started)
	l.progress.finish(l.summary, l.at)
	return l.summary, errors.Join(l.writeErr, err, l.file.Close())
}

// broken is the first failure to write the report or the checkpoint:
// the run stops, since what it does could no longer be resumed.
func (l *ledger) broken() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.writeErr
}
