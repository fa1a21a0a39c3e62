package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The crash test of bulk export: the service (the crash suite's binary,
// embedded database, files in the data directory) is killed with SIGKILL
// while an export runs (at the n-th database write after the kick-off,
// during or right after it, or at a random moment), then restarted; the
// export must end resumed (completed with every resource once) or failed
// with its reason, never left running, and its files whole or absent.
//
// CRASH_EXPORT_KILLS sets the kills (default 8); CRASH_SEED replays.

func TestExportCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the service again for every kill")
	}
	kills, seed := crashSettings(t, "CRASH_EXPORT_KILLS", 8)
	t.Logf("export crash test: seed %d, %d kills", seed, kills)
	h := newHarness(t, buildCrashBinary(t), seed, len(crashPaths), crashPath{name: "bulk-export"})
	for b := range 10 { // 1,200 observations beside the demo data
		obs := make([]map[string]any, 120)
		for j := range obs {
			obs[j] = nativeObservation(fmt.Sprintf("x%d-%d", b, j), fmt.Sprintf("x%d-%d", b, j))
		}
		h.do("POST", "/FHIR/R5", batchOf("batch", obs...), http.StatusOK)
	}
	want := map[string]int64{"Observation": h.count("observations", bson.M{}), "Patient": h.count("patients", bson.M{})}

	// The clean run: the writes an export makes, and how long it takes.
	h.arm(crashPlanFile{})
	started := time.Now()
	status := h.kickOffExport()
	if h.exportOrDeath(status) {
		h.fail("the clean run killed the service")
	}
	duration, writes := time.Since(started), h.writesLogged()
	h.exportEnds(status, want)
	t.Logf("clean export: %d writes in %v", len(writes), duration.Round(time.Millisecond))

	killed, trials := 0, 0
	for ; killed < kills && trials < 3*kills; trials++ {
		plan, mode := crashPlanFile{}, "wall-clock"
		if h.rng.IntN(4) > 0 {
			plan = crashPlanFile{At: 1 + h.rng.IntN(len(writes)), Mode: "after"}
			if h.rng.IntN(2) == 0 {
				plan.Mode, plan.DelayMicros = "during", h.rng.IntN(writes[plan.At-1].micros+1)
			}
			mode = plan.Mode
		}
		h.current = fmt.Sprintf("export trial %d (%s kill at write %d of %d, delay %dµs)", trials+1, mode, plan.At, len(writes), plan.DelayMicros)
		h.arm(plan)
		var wallKill *time.Timer
		if mode == "wall-clock" {
			child := h.child
			wallKill = time.AfterFunc(time.Duration(h.rng.Int64N(int64(duration)+1)), func() { _ = child.Process.Kill() })
		}
		status, sent := h.tryKickOffExport()
		died := h.exportOrDeath(status)
		switch {
		case died:
		case wallKill != nil && !wallKill.Stop(): // fired after the export ended
			<-h.exited
			died = true
		default:
			died = !h.disarm()
		}
		if died {
			killed++
			h.child = nil
			h.start()
		}
		if !sent { // the kick-off itself was cut short: the client sends it again
			status = h.kickOffExport()
		}
		h.exportEnds(status, want)
	}
	if killed < kills {
		h.fail("%d kills landed in %d trials, want %d", killed, trials, kills)
	}
	t.Logf("export crash test: %d trials, %d kills", trials, killed)
}

// kickOffExport kicks off a system export as the superuser and returns
// its status URL.
func (h *harness) kickOffExport() string {
	status, ok := h.tryKickOffExport()
	if !ok {
		h.fail("kick-off failed")
	}
	return status
}

// tryKickOffExport kicks off; false when the service died under it.
func (h *harness) tryKickOffExport() (string, bool) {
	resp, err := h.send(&crashRequest{method: "GET", path: "/FHIR/R5/$export", header: map[string]string{"Prefer": "respond-async"}})
	if err != nil {
		return "", false
	}
	if resp.status != http.StatusAccepted {
		h.checkf("kick-off: %d %s", resp.status, resp.body)
	}
	return resp.header.Get("Content-Location"), true
}

// exportOrDeath waits until the export at status completes or the service
// dies; true when it died.
func (h *harness) exportOrDeath(status string) bool {
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
		select {
		case <-h.exited:
			return true
		case <-time.After(time.Second):
		}
		if status == "" {
			continue
		}
		resp, err := h.get(status)
		if err != nil {
			continue // dying
		}
		if resp.status != http.StatusAccepted {
			return false
		}
	}
	h.checkf("the export neither ended nor killed the service in 2 minutes")
	return false
}

// get GETs an absolute URL of the service with the superuser's token.
func (h *harness) get(rawURL string) (*crashResponse, error) {
	return h.send(&crashRequest{method: "GET", path: strings.TrimPrefix(rawURL, h.base)})
}

// exportEnds polls the export until it ends: completed, with every
// resource once in files that are whole, and no file cut short left
// beside them; or failed with its reason, its files whole.
func (h *harness) exportEnds(status string, want map[string]int64) {
	h.t.Helper()
	job := status[strings.LastIndex(status, "/")+1:]
	var resp *crashResponse
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		var err error
		if resp, err = h.get(status); err != nil {
			h.checkf("status: %v", err)
		}
		if resp.status != http.StatusAccepted {
			break
		}
		if time.Now().After(deadline) {
			h.checkf("export %s still running 2 minutes after the restart: %s", job, resp.header.Get("X-Progress"))
		}
	}
	dir := filepath.Join(h.dir, "data", "exports", job)
	if resp.status != http.StatusOK {
		var out struct {
			ResourceType string `json:"resourceType"`
			Issue        []struct {
				Diagnostics string `json:"diagnostics"`
			} `json:"issue"`
		}
		if json.Unmarshal(resp.body, &out) != nil || out.ResourceType != "OperationOutcome" || len(out.Issue) == 0 || out.Issue[0].Diagnostics == "" {
			h.checkf("a failed export answers %d without its reason: %s", resp.status, resp.body)
		}
		h.filesWhole(dir)
		h.t.Logf("%s: export %s failed: %s", h.current, job, out.Issue[0].Diagnostics)
		return
	}
	var m struct {
		Output []struct {
			Type  string `json:"type"`
			URL   string `json:"url"`
			Count int64  `json:"count"`
		} `json:"output"`
	}
	if err := json.Unmarshal(resp.body, &m); err != nil {
		h.checkf("manifest: %v", err)
	}
	seen := map[string]map[string]bool{}
	for _, o := range m.Output {
		file, err := h.get(o.URL)
		if err != nil || file.status != http.StatusOK {
			h.checkf("file %s: %v", o.URL, err)
		}
		lines := int64(0)
		sc := bufio.NewScanner(bytes.NewReader(file.body))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines++
			var r struct {
				ResourceType string `json:"resourceType"`
				ID           string `json:"id"`
			}
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.ResourceType != o.Type {
				h.checkf("file %s line %d: %v %q", o.URL, lines, err, r.ResourceType)
			}
			if seen[o.Type] == nil {
				seen[o.Type] = map[string]bool{}
			}
			if seen[o.Type][r.ID] {
				h.checkf("%s/%s exported twice", o.Type, r.ID)
			}
			seen[o.Type][r.ID] = true
		}
		if lines != o.Count {
			h.checkf("file %s: %d lines, the manifest counts %d", o.URL, lines, o.Count)
		}
	}
	for typ, n := range want {
		if int64(len(seen[typ])) != n {
			h.checkf("%d %s exported, %d stored", len(seen[typ]), typ, n)
		}
	}
	h.filesWhole(dir)
}

// filesWhole checks the export's folder: every file a whole gzip stream,
// and no file cut short left (a resumed part removes its leftovers).
func (h *harness) filesWhole(dir string) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return
	}
	if err != nil {
		h.t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".partial-") {
			h.checkf("a file cut short is left: %s", e.Name())
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			h.t.Fatal(err)
		}
		zr, err := gzip.NewReader(f)
		if err == nil {
			_, err = io.Copy(io.Discard, zr)
		}
		f.Close()
		if err != nil {
			h.checkf("file %s is not whole: %v", e.Name(), err)
		}
	}
}
