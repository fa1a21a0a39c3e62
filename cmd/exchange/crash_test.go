package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The crash suite: the real service binary, built with -tags crashtest
// (repo/faults_crashtest.go), runs as a child process on a temporary data
// directory with its embedded database. For every write path the suite
// sends one request per trial and kills the child with SIGKILL at a point
// drawn from a seeded schedule, restarts it on the same directory, sends
// the same request again and checks that the store converged: what one
// clean request gives, nothing lost, nothing doubled, no leftover that
// blocks a later write, every 201 and 409 answer true.
//
// Kill points are chosen by store operation, not by wall time: a clean
// run of the path's request counts its database writes (N), and each
// trial kills the child at write k in [1, N], either right after the
// write's reply ("after") or while it runs ("during", a delay drawn
// within the write's clean duration, which lands inside FerretDB's
// multi-document inserts). One trial in five is a wall-clock kill
// instead, at a random moment within the clean request's duration, to
// catch what counting misses.
//
// CRASH_TRIALS sets the trials per path (default 50; more for a
// benchmark-style run), CRASH_SEED replays a run (the seed is logged, and
// printed with every failure), CRASH_PATHS picks paths by name.

// crashTrials is the default number of kill points per path.
const crashTrials = 50

func TestCrashConvergence(t *testing.T) {
	if testing.Short() {
		t.Skip("the crash suite starts the service hundreds of times")
	}
	trials := crashTrials
	if v := os.Getenv("CRASH_TRIALS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("CRASH_TRIALS=%q: want a positive number", v)
		}
		trials = n
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("CRASH_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CRASH_SEED=%q: want a number", v)
		}
		seed = n
	}
	t.Logf("crash suite: seed %d (replay with CRASH_SEED=%d), %d trials per path", seed, seed, trials)
	bin := buildCrashBinary(t)
	only := os.Getenv("CRASH_PATHS")
	for i, p := range crashPaths {
		if only != "" && !slices.Contains(strings.Split(only, ","), p.name) {
			continue
		}
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, bin, seed, i, p)
			h.runPath(p, trials)
		})
	}
}

// buildCrashBinary builds the service with the fault hook.
func buildCrashBinary(t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "exchange-crashtest")
	cmd := exec.Command("go", "build", "-tags", "crashtest", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the crashtest binary: %v\n%s", err, out)
	}
	return bin
}

// crashPath is one write path under test.
type crashPath struct {
	name string
	// models: the path needs the standards data (R5 definitions, R4 maps).
	models bool
	// setup prepares the store once, on a running child, after the seed.
	setup func(h *harness)
	// trial prepares trial i (unarmed requests allowed) and returns the
	// request under test and the check of its outcome.
	trial func(h *harness, i int) (*crashRequest, func(h *harness, retry *crashResponse, killedAfterLastWrite bool))
	// final checks the whole store once every trial ran.
	final func(h *harness)
}

// crashRequest is a request under test: sent once under a kill plan, then
// again, the same bytes, after the restart.
type crashRequest struct {
	method, path string
	header       map[string]string
	body         []byte
}

type crashResponse struct {
	status int
	header http.Header
	body   []byte
}

// harness runs one path: its child process, data directory and schedule.
type harness struct {
	t         *testing.T
	bin       string
	dir       string
	env       []string
	plan      string
	base      string // http://127.0.0.1:port
	mongoAddr string
	child     *exec.Cmd
	exited    chan error
	db        *mongo.Database
	client    *mongo.Client
	token     string
	rng       *rand.Rand
	http      *http.Client
	stats     crashStats
	baseSeed  uint64 // the suite's seed, to replay
	path      string
	current   string // the trial being checked, for messages
}

// crashStats counts what a path's trials did, for the log.
type crashStats struct {
	trials, killed, notLanded int
	byMode                    map[string]int
	points                    map[int]bool // the write numbers killed at
	retryStatus               map[int]int
	writes                    int // writes of the clean run
}

func newHarness(t *testing.T, bin string, seed uint64, index int, p crashPath) *harness {
	dir := t.TempDir()
	h := &harness{t: t, bin: bin, dir: dir, plan: filepath.Join(dir, "plan.json"), baseSeed: seed, path: p.name,
		rng:   rand.New(rand.NewPCG(seed, uint64(index))),
		http:  &http.Client{Timeout: 2 * time.Minute},
		stats: crashStats{byMode: map[string]int{}, points: map[int]bool{}, retryStatus: map[int]int{}}}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	standards := func(rel string) string {
		if !p.models {
			// Empty: the service starts without them, quicker.
			empty := filepath.Join(dir, "none", rel)
			if err := os.MkdirAll(empty, 0o700); err != nil {
				t.Fatal(err)
			}
			return empty
		}
		return filepath.Join(root, "standards", rel)
	}
	port, mongoPort := freePort(t), freePort(t)
	h.base = "http://127.0.0.1:" + strconv.Itoa(port)
	h.mongoAddr = "127.0.0.1:" + strconv.Itoa(mongoPort)
	h.env = append(os.Environ(),
		"DATA_DIR="+filepath.Join(dir, "data"),
		"PORT="+strconv.Itoa(port),
		"EMBEDDED_MONGO_ADDR="+h.mongoAddr,
		"EXCHANGE_CRASHTEST_PLAN="+h.plan,
		"OMH_SCHEMA_DIR="+filepath.Join(root, "standards", "omh", "schemas"),
		"FHIR_PACKAGES_DIR="+standards("fhir-packages"),
		"FHIR_XVER_PACKAGE_DIR="+standards("fhir/xver-r4-r5/maps"),
	)
	t.Cleanup(h.stop)
	h.start()
	h.command("seed")
	h.token = strings.TrimSpace(h.command("token", "create", "--email", demoSuperuserEmail))
	return h
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// fail stops the path with the seed to replay it.
func (h *harness) fail(format string, args ...any) {
	h.t.Helper()
	h.t.Fatalf("%s (replay: CRASH_SEED=%d CRASH_PATHS=%s)", fmt.Sprintf(format, args...), h.baseSeed, h.path)
}

// start runs the service and waits until it answers; the start-up repair
// has run by then.
func (h *harness) start() {
	cmd := exec.Command(h.bin, "serve")
	cmd.Env = h.env
	logf, err := os.OpenFile(filepath.Join(h.dir, "service.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		h.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	logf.Close()
	h.child, h.exited = cmd, make(chan error, 1)
	go func() { h.exited <- cmd.Wait() }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get(h.base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-h.exited:
			h.fail("the service exited while starting: %v\n%s", err, h.logTail())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			h.fail("the service did not answer within 2 minutes\n%s", h.logTail())
		}
	}
	if h.client == nil {
		client, err := mongo.Connect(options.Client().ApplyURI("mongodb://" + h.mongoAddr + "/"))
		if err != nil {
			h.t.Fatal(err)
		}
		h.client, h.db = client, client.Database("exchange")
	}
}

// stop ends the child, if it runs.
func (h *harness) stop() {
	if h.child != nil {
		_ = h.child.Process.Kill()
		<-h.exited
		h.child = nil
	}
	if h.client != nil {
		_ = h.client.Disconnect(context.Background())
		h.client = nil
	}
}

func (h *harness) logTail() string {
	data, _ := os.ReadFile(filepath.Join(h.dir, "service.log"))
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}

// command runs an exchange command beside the running service.
func (h *harness) command(args ...string) string {
	cmd := exec.Command(h.bin, args...)
	cmd.Env = slices.DeleteFunc(slices.Clone(h.env), func(s string) bool { return strings.HasPrefix(s, "EXCHANGE_CRASHTEST_PLAN=") })
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		h.fail("exchange %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String()
}

// crashPlanFile is the plan the fault hook reads (repo/faults_crashtest.go).
type crashPlanFile struct {
	At          int    `json:"at"`
	Mode        string `json:"mode"`
	DelayMicros int    `json:"delayMicros"`
}

// arm hands the child a kill plan and waits until it took it.
func (h *harness) arm(p crashPlanFile) {
	data, _ := json.Marshal(p)
	_ = os.Remove(h.plan + ".armed")
	if err := os.WriteFile(h.plan, data, 0o600); err != nil {
		h.t.Fatal(err)
	}
	if err := h.child.Process.Signal(syscall.SIGUSR1); err != nil {
		h.t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if got, err := os.ReadFile(h.plan + ".armed"); err == nil && bytes.Equal(got, data) {
			return
		}
		if time.Now().After(deadline) {
			h.fail("the service did not take the kill plan")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// cleanWrite is one write of the clean run: its command, collection and
// duration.
type cleanWrite struct {
	command, collection string
	micros              int
}

// writesLogged reads the hook's log of the writes since arming.
func (h *harness) writesLogged() []cleanWrite {
	f, err := os.Open(h.plan + ".log")
	if err != nil {
		h.t.Fatal(err)
	}
	defer f.Close()
	var out []cleanWrite
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var n, micros int
		var w cleanWrite
		if _, err := fmt.Sscanf(sc.Text(), "%d %s %s %d", &n, &w.command, &w.collection, &micros); err == nil {
			w.micros = micros
			out = append(out, w)
		}
	}
	return out
}

// send sends a request under test; err is a transport failure (the
// child died under it).
func (h *harness) send(r *crashRequest) (*crashResponse, error) {
	req, err := http.NewRequest(r.method, h.base+r.path, bytes.NewReader(r.body))
	if err != nil {
		h.t.Fatal(err)
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	if req.Header.Get("Authorization") == "" && !strings.HasPrefix(r.path, "/o/") {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	resp, err := h.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &crashResponse{status: resp.StatusCode, header: resp.Header, body: body}, nil
}

// do sends an unarmed request that must answer want.
func (h *harness) do(method, path string, body any, want int) []byte {
	var data []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		data = b
	default:
		data, _ = json.Marshal(b)
	}
	resp, err := h.send(&crashRequest{method: method, path: path, body: data,
		header: map[string]string{"Content-Type": "application/json"}})
	if err != nil {
		h.fail("%s %s: %v", method, path, err)
	}
	if resp.status != want {
		h.fail("%s %s: %d, want %d\n%s", method, path, resp.status, want, resp.body)
	}
	return resp.body
}

// runPath runs the clean run and the trials of one path, then its final
// check.
func (h *harness) runPath(p crashPath, trials int) {
	if p.setup != nil {
		p.setup(h)
	}
	// The clean run: the writes of one request, and a check that it holds.
	req, check := p.trial(h, 0)
	h.arm(crashPlanFile{})
	started := time.Now()
	resp, err := h.send(req)
	cleanDuration := time.Since(started)
	if err != nil {
		h.fail("clean run: %v", err)
	}
	writes := h.writesLogged()
	if len(writes) == 0 {
		h.fail("clean run: no write counted (status %d)\n%s", resp.status, resp.body)
	}
	h.stats.writes = len(writes)
	check(h, resp, false)
	for i := 1; i <= trials; i++ {
		h.trial(p, i, writes, cleanDuration)
	}
	if p.final != nil {
		p.final(h)
	}
	s := h.stats
	points := make([]int, 0, len(s.points))
	for k := range s.points {
		points = append(points, k)
	}
	slices.Sort(points)
	h.t.Logf("%s: %d trials, %d killed (%v), %d kill points that did not land; clean run %d writes; kills at writes %v; retry answers %v",
		p.name, s.trials, s.killed, s.byMode, s.notLanded, s.writes, points, s.retryStatus)
}

// trial runs one kill point: the request under a plan, a restart when the
// child died, the retry, the checks.
func (h *harness) trial(p crashPath, i int, writes []cleanWrite, cleanDuration time.Duration) {
	req, check := p.trial(h, i)
	h.stats.trials++
	var plan crashPlanFile
	mode := "wall-clock"
	if h.rng.IntN(5) > 0 {
		plan.At = 1 + h.rng.IntN(len(writes))
		plan.Mode = "after"
		if h.rng.IntN(2) == 0 {
			plan.Mode = "during"
			plan.DelayMicros = h.rng.IntN(writes[plan.At-1].micros + 1)
		}
		mode = plan.Mode
	}
	h.arm(plan)
	var wallKill *time.Timer
	if mode == "wall-clock" {
		child := h.child
		wallKill = time.AfterFunc(time.Duration(h.rng.Int64N(int64(cleanDuration)+1)), func() { _ = child.Process.Kill() })
	}
	_, sendErr := h.send(req)
	if wallKill != nil {
		wallKill.Stop()
	}
	killed := false
	select {
	case <-h.exited:
		killed = true
	case <-time.After(func() time.Duration {
		if sendErr != nil {
			return 10 * time.Second // a transport error: the child is dying
		}
		return 0
	}()):
		if sendErr != nil {
			h.fail("trial %d: %v, but the service still runs", i, sendErr)
		}
	}
	lastWrite := false
	if killed {
		h.stats.killed++
		h.stats.byMode[mode]++
		if plan.At > 0 {
			h.stats.points[plan.At] = true
			lastWrite = plan.At == len(writes) && plan.Mode == "after"
		} else {
			lastWrite = true // a wall-clock kill may land after the last write
		}
		h.child = nil
		h.start()
	} else {
		h.stats.notLanded++
	}
	retry, err := h.send(req)
	if err != nil {
		h.fail("trial %d (%s kill at write %d): the retry failed: %v", i, mode, plan.At, err)
	}
	h.stats.retryStatus[retry.status]++
	h.current = fmt.Sprintf("trial %d (%s kill at write %d of %d, delay %dµs, killed %v)", i, mode, plan.At, len(writes), plan.DelayMicros, killed)
	check(h, retry, lastWrite)
}

// checkf fails the current trial with its kill point in the message.
func (h *harness) checkf(format string, args ...any) {
	h.t.Helper()
	h.fail("%s: %s", h.current, fmt.Sprintf(format, args...))
}
