package main

import (
	"bufio"
	"bytes"
	"cmp"
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

	"go.mongodb.org/mongo-driver/v2/bson"
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
// multi-document inserts). Every write of every variant is killed in
// both ways first, in a seeded order; then trials draw their points, one
// in five a wall-clock kill instead, at a random moment within the clean
// request's duration, to catch what counting misses.
//
// A path runs trials until its kills landed: by default every write
// point in both ways and a quarter more, at least crashMinKills (a path
// of one write, a batch insert, still has its "during" kills at many
// moments); CRASH_TRIALS sets the number (500 for a benchmark-style
// run). A kill planned "during" the last write, or on the wall clock, can
// miss a request that answered first, and such a trial counts as a check
// of the request without a crash. CRASH_SEED replays a run (the seed is
// logged, and printed with every failure), CRASH_PATHS picks paths by
// name.

// crashMinKills is the least number of kills per path by default.
const crashMinKills = 20

// crashSettings reads a crash test's kills from the variable named (def
// when unset) and its seed from CRASH_SEED (the clock when unset).
func crashSettings(t *testing.T, killsVar string, def int) (kills int, seed uint64) {
	t.Helper()
	kills = def
	if v := os.Getenv(killsVar); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", killsVar, v)
		}
		kills = n
	}
	seed = uint64(time.Now().UnixNano())
	if v := os.Getenv("CRASH_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CRASH_SEED=%q: want a number", v)
		}
		seed = n
	}
	return kills, seed
}

func TestCrashConvergence(t *testing.T) {
	if testing.Short() {
		t.Skip("the crash suite starts the service hundreds of times")
	}
	kills, seed := crashSettings(t, "CRASH_TRIALS", 0) // 0: by path, its write points
	t.Logf("crash suite: seed %d (replay with CRASH_SEED=%d), kills per path: %s", seed, seed, cmp.Or(os.Getenv("CRASH_TRIALS"), "every write point in both ways, and a quarter more"))
	bin := buildCrashBinary(t)
	only := os.Getenv("CRASH_PATHS")
	for i, p := range crashPaths {
		if only != "" && !slices.Contains(strings.Split(only, ","), p.name) {
			continue
		}
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, bin, seed, i, p)
			h.runPath(p, kills)
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
	// variants are the requests of the path; trials take them in turn,
	// and each has a clean run of its own.
	variants []crashVariant
}

// crashVariant is one request of a path.
type crashVariant struct {
	name string
	// prepare readies a trial whose data is its own (n is unique in the
	// path): unarmed requests may set the stage. It returns the request
	// under test and the check of the store after its retry, which also
	// removes what the trial stored when later trials would pay for it.
	prepare func(h *harness, n int) (*crashRequest, crashCheck)
}

// crashCheck checks the outcome of a trial: the answer to the retry (or,
// in the clean run, to the one request) and the store.
type crashCheck func(h *harness, retry *crashResponse, out crashOutcome)

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
	planned   [][]crashPlanFile // by variant: the write points not killed at yet
	baseSeed  uint64            // the suite's seed, to replay
	path      string
	current   string // the trial being checked, for messages
	seq       int    // data numbers used (next)
}

// crashStats counts what a path's trials did, for the log.
type crashStats struct {
	trials, killed, notLanded int
	byMode                    map[string]int
	points                    map[int]bool // the write numbers killed at
	retryStatus               map[int]int
	repairedAtStart           int      // interrupted writes the start-up repair found and repaired
	writes                    []string // writes of the clean runs, by variant
	sending, restarting       time.Duration
	retrying, checking        time.Duration
}

func newHarness(t *testing.T, bin string, seed uint64, index int, p crashPath) *harness {
	dir := t.TempDir()
	h := &harness{t: t, bin: bin, dir: dir, plan: filepath.Join(dir, "plan.json"), baseSeed: seed, path: p.name,
		rng: rand.New(rand.NewPCG(seed, uint64(index))),
		// Answers are checked as sent: a redirect is not followed.
		http:  &http.Client{Timeout: 2 * time.Minute, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
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
		"LOG_FORMAT=json", // healedByRestart reads the start-up repair's line
		"PORT="+strconv.Itoa(port),
		"EMBEDDED_MONGO_ADDR="+h.mongoAddr,
		"EXCHANGE_CRASHTEST_PLAN="+h.plan,
		"OMH_SCHEMA_DIR="+filepath.Join(root, "standards", "omh", "schemas"),
		"FHIR_PACKAGES_DIR="+standards("fhir-packages"),
		"FHIR_XVER_PACKAGE_DIR="+standards("fhir/xver-r4-r5/maps"),
	)
	t.Cleanup(h.stop)
	if keep := os.Getenv("CRASH_KEEP_LOGS"); keep != "" {
		t.Cleanup(func() {
			data, _ := os.ReadFile(filepath.Join(dir, "service.log"))
			_ = os.WriteFile(filepath.Join(keep, p.name+".log"), data, 0o600)
		})
	}
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
	// A client of its own per start: the driver would wait for its
	// monitor to find the restarted server again.
	if h.client != nil {
		_ = h.client.Disconnect(context.Background())
	}
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://" + h.mongoAddr + "/"))
	if err != nil {
		h.t.Fatal(err)
	}
	h.client, h.db = client, client.Database("exchange")
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

// cleanRun is what a variant's clean run measured.
type cleanRun struct {
	writes   []cleanWrite
	duration time.Duration
}

// runPath runs the clean runs of each variant, then trials until kills of
// them landed (at most three times as many trials), taking the
// variants in turn.
func (h *harness) runPath(p crashPath, kills int) {
	if p.setup != nil {
		p.setup(h)
	}
	clean := make([]cleanRun, len(p.variants))
	for v, variant := range p.variants {
		// Twice: a write the service makes on its own schedule (the
		// minute's sweep) can fall into one run, and the request's own
		// writes are the fewer.
		for run := range 2 {
			req, check := variant.prepare(h, h.next())
			h.arm(crashPlanFile{})
			started := time.Now()
			resp, err := h.send(req)
			duration := time.Since(started)
			if err != nil {
				h.fail("%s: clean run: %v", variant.name, err)
			}
			writes := h.writesLogged()
			if len(writes) == 0 {
				h.fail("%s: clean run: no write counted (status %d)\n%s", variant.name, resp.status, resp.body)
			}
			h.current = variant.name + ": clean run"
			check(h, resp, crashOutcome{answered: true, writes: len(writes)})
			if run == 0 || len(writes) < len(clean[v].writes) {
				clean[v] = cleanRun{writes: writes, duration: duration}
			}
		}
		h.stats.writes = append(h.stats.writes, fmt.Sprintf("%s %d", variant.name, len(clean[v].writes)))
	}
	// Every write point of every variant, after and during the write, in
	// a seeded order.
	writePoints := 0
	h.planned = make([][]crashPlanFile, len(p.variants))
	for v := range p.variants {
		for at := 1; at <= len(clean[v].writes); at++ {
			h.planned[v] = append(h.planned[v], crashPlanFile{At: at, Mode: "after"}, crashPlanFile{At: at, Mode: "during"})
		}
		h.rng.Shuffle(len(h.planned[v]), func(i, j int) { h.planned[v][i], h.planned[v][j] = h.planned[v][j], h.planned[v][i] })
		writePoints += len(h.planned[v])
	}
	if kills == 0 {
		kills = max(crashMinKills, writePoints+(writePoints+3)/4)
	}
	for i := 1; h.stats.killed < kills && i <= 3*kills; i++ {
		v := (i - 1) % len(p.variants)
		h.trial(p.variants[v], v, i, clean[v])
	}
	if h.stats.killed < kills {
		h.fail("%s: %d kills landed in %d trials, want %d: the kill points miss the requests", p.name, h.stats.killed, h.stats.trials, kills)
	}
	s := h.stats
	points := make([]int, 0, len(s.points))
	for k := range s.points {
		points = append(points, k)
	}
	slices.Sort(points)
	h.t.Logf("%s: %d trials, %d killed (%v), %d kill points that did not land; clean runs' writes %v; kills at writes %v; "+
		"writes repaired at start-up %d; retry answers %v; time sending %v, restarting %v, retrying %v, checking %v",
		p.name, s.trials, s.killed, s.byMode, s.notLanded, s.writes, points, s.repairedAtStart, s.retryStatus,
		s.sending.Round(time.Millisecond), s.restarting.Round(time.Millisecond), s.retrying.Round(time.Millisecond), s.checking.Round(time.Millisecond))
}

// next returns a number no other trial of the path uses, for unique data.
func (h *harness) next() int {
	h.seq++
	return h.seq
}

// crashOutcome is how a trial's first send ended, for the path's check.
type crashOutcome struct {
	at     int // the write killed at; 0: none or a wall-clock kill
	writes int // the writes of the variant's clean run
	killed bool
	// answered: the first send got its answer before the kill (a kill
	// "during" the last write can fire after the reply).
	answered bool
	// afterLastWrite: the kill may have come after the request's last
	// write, so that its retry meets a completed request.
	afterLastWrite bool
}

// trial runs one kill point: the request under a plan, a restart when the
// child died, the retry, the checks.
func (h *harness) trial(variant crashVariant, v, i int, clean cleanRun) {
	writes, cleanDuration := clean.writes, clean.duration
	req, check := variant.prepare(h, h.next())
	h.stats.trials++
	var plan crashPlanFile
	mode := "wall-clock"
	switch {
	case len(h.planned[v]) > 0: // a write point not killed at yet
		plan, h.planned[v] = h.planned[v][0], h.planned[v][1:]
		mode = plan.Mode
	case h.rng.IntN(5) > 0:
		plan.At = 1 + h.rng.IntN(len(writes))
		plan.Mode = "after"
		if h.rng.IntN(2) == 0 {
			plan.Mode = "during"
		}
		mode = plan.Mode
	}
	if plan.Mode == "during" {
		plan.DelayMicros = h.rng.IntN(writes[plan.At-1].micros + 1)
	}
	h.arm(plan)
	var wallKill *time.Timer
	if mode == "wall-clock" {
		child := h.child
		wallKill = time.AfterFunc(time.Duration(h.rng.Int64N(int64(cleanDuration)+1)), func() { _ = child.Process.Kill() })
	}
	started := time.Now()
	_, sendErr := h.send(req)
	h.stats.sending += time.Since(started)
	// A wall-clock kill that fired after the answer still kills the
	// child: Stop's false says so, and the trial must wait for the exit.
	wallKillFired := wallKill != nil && !wallKill.Stop()
	out := crashOutcome{at: plan.At, writes: len(writes)}
	if sendErr == nil {
		// Answered: disarm, unless a kill fired meanwhile.
		out.answered = true
		if wallKillFired {
			<-h.exited
			out.killed = true
		} else {
			out.killed = !h.disarm()
		}
	} else {
		select {
		case <-h.exited:
			out.killed = true
		case <-time.After(10 * time.Second):
			h.fail("trial %d: %v, but the service still runs", i, sendErr)
		}
	}
	h.current = fmt.Sprintf("trial %d, %s (%s kill at write %d of %d, delay %dµs, killed %v)", i, variant.name, mode, plan.At, len(writes), plan.DelayMicros, out.killed)
	if out.killed {
		h.stats.killed++
		h.stats.byMode[mode]++
		if plan.At > 0 {
			h.stats.points[plan.At] = true
		}
		out.afterLastWrite = out.answered || plan.At == 0 || plan.At == len(writes)
		h.child = nil
		started = time.Now()
		h.start()
		h.stats.restarting += time.Since(started)
		h.healedByRestart()
	} else {
		h.stats.notLanded++
	}
	started = time.Now()
	retry, err := h.send(req)
	h.stats.retrying += time.Since(started)
	if err != nil {
		h.fail("trial %d, %s (%s kill at write %d): the retry failed: %v", i, variant.name, mode, plan.At, err)
	}
	h.stats.retryStatus[retry.status]++
	started = time.Now()
	check(h, retry, out)
	h.stats.checking += time.Since(started)
}

// healedByRestart checks that the restart alone, before any retry, healed
// what the kill left half done: the start-up repair left no write intent
// and logged, with counts, what it repaired (the last such line of the
// service's JSON log).
func (h *harness) healedByRestart() {
	h.t.Helper()
	if n := h.count("write_intents", bson.M{}); n > 0 {
		h.checkf("%d write intents left after the restart, before any retry", n)
	}
	data, err := os.ReadFile(filepath.Join(h.dir, "service.log"))
	if err != nil {
		h.t.Fatal(err)
	}
	repaired := -1
	for line := range bytes.Lines(data) {
		var l struct {
			Msg      string `json:"msg"`
			When     string `json:"when"`
			Repaired *int   `json:"repaired"`
		}
		if json.Unmarshal(line, &l) == nil && l.Msg == "Repaired interrupted writes." && l.When == "start-up" && l.Repaired != nil {
			repaired = *l.Repaired
		}
	}
	if repaired < 0 {
		h.checkf("the start-up repair logged nothing")
	}
	h.stats.repairedAtStart += repaired
}

// disarm takes back a kill plan once the request is answered; false when
// the child died before it could.
func (h *harness) disarm() bool {
	data, _ := json.Marshal(crashPlanFile{})
	_ = os.Remove(h.plan + ".armed")
	if err := os.WriteFile(h.plan, data, 0o600); err != nil {
		h.t.Fatal(err)
	}
	if h.child.Process.Signal(syscall.SIGUSR1) != nil {
		<-h.exited
		return false
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		select {
		case <-h.exited:
			return false
		case <-time.After(2 * time.Millisecond):
		}
		if got, err := os.ReadFile(h.plan + ".armed"); err == nil && bytes.Equal(got, data) {
			return true
		}
	}
	h.fail("the service did not take back the kill plan")
	return false
}

// checkf fails the current trial with its kill point in the message.
func (h *harness) checkf(format string, args ...any) {
	h.t.Helper()
	h.fail("%s: %s", h.current, fmt.Sprintf(format, args...))
}
