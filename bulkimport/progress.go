package bulkimport

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress shows a run going: a bar on a terminal, lines elsewhere. Both
// measure by input bytes, the only total known before reading, and say
// how many resources are done and at what rate. The ledger calls it under
// its lock.
type progress interface {
	update(s Summary, at position)
	finish(s Summary, at position)
}

// position is how far into the input a run is, in bytes.
type position struct {
	done    int64 // answered or skipped
	skipped int64 // answered by an earlier run: read at once, left out of rates
}

// newProgress picks the display for w: a bar when w is a terminal, else
// a line every interval (none when interval is 0).
func newProgress(w io.Writer, terminal bool, totalBytes int64, interval time.Duration) progress {
	start := time.Now()
	if terminal {
		bar := progressbar.NewOptions64(totalBytes,
			progressbar.OptionSetWriter(w),
			progressbar.OptionShowBytes(true),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetWidth(24),
			progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionSetDescription("R4 import"),
			progressbar.OptionShowDescriptionAtLineEnd(),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
		)
		return &barProgress{bar: bar, start: start}
	}
	return &lineProgress{w: w, total: totalBytes, start: start, every: interval, lastLine: start}
}

// describe is the resources part of a progress display.
func describe(s Summary, start time.Time) string {
	done := s.Answered()
	text := fmt.Sprintf("%d resources done", done+s.Skipped)
	if secs := time.Since(start).Seconds(); secs > 0 && done > 0 {
		text += fmt.Sprintf(", %.0f/s", float64(done)/secs)
	}
	if s.Failed > 0 {
		text += fmt.Sprintf(", %d failed", s.Failed)
	}
	return text
}

type barProgress struct {
	bar   *progressbar.ProgressBar
	start time.Time
}

func (p *barProgress) update(s Summary, at position) {
	p.bar.Describe(describe(s, p.start))
	_ = p.bar.Set64(min(at.done, p.bar.GetMax64()))
}

func (p *barProgress) finish(s Summary, at position) {
	p.bar.Describe(describe(s, p.start))
	if s.Interrupted {
		_ = p.bar.Set64(min(at.done, p.bar.GetMax64()))
		_ = p.bar.Exit()
		return
	}
	_ = p.bar.Finish()
}

type lineProgress struct {
	w        io.Writer
	total    int64
	start    time.Time
	every    time.Duration
	lastLine time.Time
}

func (p *lineProgress) update(s Summary, at position) {
	if p.every <= 0 || time.Since(p.lastLine) < p.every {
		return
	}
	p.lastLine = time.Now()
	p.print(s, at, true)
}

func (p *lineProgress) finish(s Summary, at position) {
	if p.every > 0 {
		p.print(s, at, false)
	}
}

// print writes one line; eta adds the time left.
func (p *lineProgress) print(s Summary, at position, eta bool) {
	line := "R4 import: " + describe(s, p.start)
	if p.total > 0 {
		line += fmt.Sprintf(", %.0f%% of the input", 100*float64(at.done)/float64(p.total))
		if sent := at.done - at.skipped; eta && sent > 0 && at.done < p.total {
			rate := float64(sent) / time.Since(p.start).Seconds() // bytes per second
			left := time.Duration(float64(p.total-at.done) / rate * float64(time.Second))
			line += ", about " + left.Round(time.Second).String() + " left"
		}
	}
	fmt.Fprintln(p.w, line)
}
