//go:build crashtest

package repo

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
)

// This file is compiled only with -tags crashtest, into the binary the
// crash suite (cmd/exchange/crash_test.go) starts: never into the
// production binary. It makes the process SIGKILL itself at a chosen
// database write, so that kill points land on the store's operations
// rather than on wall-clock guesses.
//
// The suite writes a plan (JSON) to the file EXCHANGE_CRASHTEST_PLAN names
// and sends SIGUSR1: the hook reads the plan, resets its write counter and
// answers by writing the plan file's name + ".armed". From then on every
// write command (insert, update, delete, findAndModify) counts, except the
// heartbeat of the instance lease and the audit trail's batches (both
// written off the request path), and each one is logged to the plan
// file's name + ".log" as "n command collection micros". With At = n > 0
// the process kills itself at the n-th write: right after its reply
// ("after"), or while it runs ("during": DelayMicros after it was sent).
// At = 0 only counts: the suite's clean run.

// crashPlan is what the suite asks of the hook.
type crashPlan struct {
	At          int    `json:"at"`
	Mode        string `json:"mode"` // after | during
	DelayMicros int    `json:"delayMicros"`
}

// crashMonitor counts write commands and kills the process at the planned one.
type crashMonitor struct {
	mu      sync.Mutex
	path    string
	plan    crashPlan
	armed   bool
	gen     int // arms so far: a kill planned under an earlier plan does not fire
	n       int
	started map[int64]writeStart // write commands in flight, by request id
	log     *os.File
}

type writeStart struct {
	n          int
	name, coll string
	at         time.Time
}

var writeCommands = map[string]bool{"insert": true, "update": true, "delete": true, "findAndModify": true}

func init() {
	path := os.Getenv("EXCHANGE_CRASHTEST_PLAN")
	if path == "" {
		return
	}
	m := &crashMonitor{path: path, started: map[int64]writeStart{}}
	faultMonitor = &event.CommandMonitor{Started: m.commandStarted, Succeeded: m.commandSucceeded, Failed: m.commandFailed}
	arm := make(chan os.Signal, 1)
	signal.Notify(arm, syscall.SIGUSR1)
	go func() {
		for range arm {
			m.arm()
		}
	}()
}

func (m *crashMonitor) arm() {
	m.mu.Lock()
	defer m.mu.Unlock()
	var plan crashPlan
	data, err := os.ReadFile(m.path)
	if err == nil {
		err = json.Unmarshal(data, &plan)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "crashtest: no plan: %v\n", err)
		return
	}
	if m.log != nil {
		m.log.Close()
	}
	if m.log, err = os.Create(m.path + ".log"); err != nil {
		fmt.Fprintf(os.Stderr, "crashtest: %v\n", err)
		return
	}
	m.plan, m.armed, m.n = plan, true, 0
	m.gen++
	clear(m.started)
	_ = os.WriteFile(m.path+".armed", data, 0o600)
}

func (m *crashMonitor) commandStarted(_ context.Context, e *event.CommandStartedEvent) {
	if !writeCommands[e.CommandName] {
		return
	}
	coll, _ := e.Command.Lookup(e.CommandName).StringValueOK()
	if coll == colInstances || coll == colAuditEvents {
		return // written on their own schedule, not by the request
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.armed {
		return
	}
	m.n++
	m.started[e.RequestID] = writeStart{m.n, e.CommandName, coll, time.Now()}
	if m.plan.At == m.n && m.plan.Mode == "during" {
		delay, gen := time.Duration(m.plan.DelayMicros)*time.Microsecond, m.gen
		go func() {
			time.Sleep(delay)
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.gen == gen {
				kill()
			}
		}()
	}
}

func (m *crashMonitor) commandSucceeded(_ context.Context, e *event.CommandSucceededEvent) {
	m.finished(e.RequestID)
}

func (m *crashMonitor) commandFailed(_ context.Context, e *event.CommandFailedEvent) {
	m.finished(e.RequestID)
}

func (m *crashMonitor) finished(requestID int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w, ok := m.started[requestID]
	if !ok {
		return
	}
	delete(m.started, requestID)
	fmt.Fprintf(m.log, "%d %s %s %d\n", w.n, w.name, w.coll, time.Since(w.at).Microseconds())
	_ = m.log.Sync()
	if m.plan.At == w.n && m.plan.Mode == "after" {
		kill()
	}
}

// kill ends the process as kill -9 does: no deferred function, no flush.
func kill() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }
