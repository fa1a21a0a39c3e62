package handlers_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestFHIRNativeUnknownElements: an element of a native Observation that
// the native store would not keep is refused with 400, each one named by
// its path, where before it was silently dropped; the elements FHIR's
// create ignores (id, meta.versionId, meta.lastUpdated) are accepted.
func TestFHIRNativeUnknownElements(t *testing.T) {
	w := fxNewWorld(t)
	n := 0
	obs := func(edit func(r map[string]any)) map[string]any {
		n++
		r := fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, identifiers: []string{fmt.Sprintf("u-%d-a", n), fmt.Sprintf("u-%d-b", n)},
			payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2024-03-05T10:00:00+01:00")))}.resource()
		edit(r)
		return r
	}
	before := fxSnapshot(t, w)
	for name, tc := range map[string]struct {
		edit  func(r map[string]any)
		paths []string
	}{
		"a category": {func(r map[string]any) {
			r["category"] = []any{map[string]any{"text": "vital signs"}}
		}, []string{"Observation.category"}},
		"a note, an extension and a primitive's extension": {func(r map[string]any) {
			r["note"] = []any{map[string]any{"text": "after a run"}}
			r["extension"] = []any{map[string]any{"url": "http://example.org/x", "valueString": "y"}}
			r["_status"] = map[string]any{"id": "s"}
		}, []string{"Observation._status", "Observation.extension", "Observation.note"}},
		"the code's text": {func(r map[string]any) {
			fxObj(r["code"])["text"] = "Heart rate"
		}, []string{"Observation.code.text"}},
		"a coding's version and userSelected": {func(r map[string]any) {
			c := fxObj(fxArr(fxObj(r["code"])["coding"])[0])
			c["version"], c["userSelected"] = "2.0", true
		}, []string{"Observation.code.coding[0].userSelected", "Observation.code.coding[0].version"}},
		"identifiers' use and period": {func(r map[string]any) {
			fxObj(fxArr(r["identifier"])[0])["use"] = "official"
			fxObj(fxArr(r["identifier"])[1])["period"] = map[string]any{"start": "2024"}
		}, []string{"Observation.identifier[0].use", "Observation.identifier[1].period"}},
		"the subject's display and the device's identifier": {func(r map[string]any) {
			fxObj(r["subject"])["display"] = "Alice"
			fxObj(r["device"])["identifier"] = map[string]any{"value": "watch-1"}
		}, []string{"Observation.device.identifier", "Observation.subject.display"}},
		"the attachment's title and size": {func(r map[string]any) {
			a := fxObj(r["valueAttachment"])
			a["title"], a["size"] = "heart rate", "300"
		}, []string{"Observation.valueAttachment.size", "Observation.valueAttachment.title"}},
		"tags and a profile": {func(r map[string]any) {
			r["meta"] = map[string]any{"versionId": "3", "tag": []any{map[string]any{"code": "x"}}, "profile": []any{"http://example.org/p"}}
		}, []string{"Observation.meta.profile", "Observation.meta.tag"}},
		"a value of another type beside the attachment": {func(r map[string]any) {
			r["valueQuantity"] = map[string]any{"value": 64}
		}, []string{"Observation.valueQuantity"}},
	} {
		r := obs(tc.edit)
		resp, out := w.env.Send(t, "POST", fxBase+"/Observation", w.tok["alice"], r)
		var exprs []string
		for _, i := range fxArr(out["issue"]) {
			issue := fxObj(i)
			for _, e := range fxArr(issue["expression"]) {
				exprs = append(exprs, e.(string))
			}
			if issue["code"] != "invalid" || !strings.Contains(issue["diagnostics"].(string), "is not an element of a native Observation") {
				t.Errorf("%s: issue %v", name, issue)
			}
		}
		if resp.StatusCode != http.StatusBadRequest || !slices.Equal(exprs, tc.paths) {
			t.Errorf("%s: %d %s, want 400 naming %v", name, resp.StatusCode, fxCompact(out), tc.paths)
		}
		entry := w.batch(t, w.tok["alice"], r)[0]
		if got := fxObj(entry["response"]); got["status"] != "400 Bad Request" || !strings.Contains(fxOutcomeText(fxObj(got["outcome"])), tc.paths[0]) {
			t.Errorf("%s in a batch: %s", name, fxCompact(entry))
		}
	}
	if after := fxSnapshot(t, w); !slices.Equal(after["observations"], before["observations"]) {
		t.Errorf("refused observations were stored: %v", after["observations"])
	}

	// What FHIR's create ignores is accepted: the server assigns the id
	// and the version.
	r := obs(func(r map[string]any) {
		r["id"] = "my-own-id"
		r["meta"] = map[string]any{"versionId": "7", "lastUpdated": "2020-01-01T00:00:00Z"}
	})
	resp, out := w.env.Send(t, "POST", fxBase+"/Observation", w.tok["alice"], r)
	if resp.StatusCode != http.StatusCreated || out["id"] == "my-own-id" || fxObj(out["meta"])["versionId"] != "1" {
		t.Errorf("id and meta: %d %v", resp.StatusCode, out)
	}
}

// TestFHIRGivenEffective: effective[x] comes from the data point; one sent
// with the Observation is accepted when it says the same (in any offset),
// and refused rather than dropped when it does not.
func TestFHIRGivenEffective(t *testing.T) {
	w := fxNewWorld(t)
	send := func(frame any, effective map[string]any) (int, map[string]any) {
		t.Helper()
		r := fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, payload: fxDataPoint(fxHR, fxHeartRate(frame))}.resource()
		for k, v := range effective {
			r[k] = v
		}
		resp, out := w.env.Send(t, "POST", fxBase+"/Observation", w.tok["alice"], r)
		return resp.StatusCode, out
	}
	at := fxAt("2024-03-05T10:00:00+01:00")
	interval := fxInterval("start_date_time", "2024-03-05T10:00:00Z", "duration", fxDuration(30, "min"))
	for _, tc := range []struct {
		name      string
		frame     any
		effective map[string]any
		status    int
		field     string
	}{
		{"the same instant", at, map[string]any{"effectiveDateTime": "2024-03-05T10:00:00+01:00"}, http.StatusCreated, ""},
		{"the same instant in UTC", at, map[string]any{"effectiveDateTime": "2024-03-05T09:00:00.000Z"}, http.StatusCreated, ""},
		{"the same instant as an instant", at, map[string]any{"effectiveInstant": "2024-03-05T09:00:00Z"}, http.StatusCreated, ""},
		{"the same period", interval, map[string]any{"effectivePeriod": map[string]any{"start": "2024-03-05T10:00:00Z", "end": "2024-03-05T11:30:00+01:00"}}, http.StatusCreated, ""},
		{"another instant", at, map[string]any{"effectiveDateTime": "2024-03-05T10:00:00Z"}, http.StatusUnprocessableEntity, "Observation.effectiveDateTime"},
		{"a day", at, map[string]any{"effectiveDateTime": "2024-03-05"}, http.StatusUnprocessableEntity, "Observation.effectiveDateTime"},
		{"a period for an instant", at, map[string]any{"effectivePeriod": map[string]any{"start": "2024-03-05T09:00:00Z", "end": "2024-03-05T09:00:00Z"}},
			http.StatusUnprocessableEntity, "Observation.effectivePeriod"},
		{"another period", interval, map[string]any{"effectivePeriod": map[string]any{"start": "2024-03-05T10:00:00Z", "end": "2024-03-05T11:00:00Z"}},
			http.StatusUnprocessableEntity, "Observation.effectivePeriod"},
		{"two forms", at, map[string]any{"effectiveDateTime": "2024-03-05T10:00:00+01:00", "effectiveInstant": "2024-03-05T09:00:00Z"},
			http.StatusBadRequest, "Observation.effective[x]"},
	} {
		status, out := send(tc.frame, tc.effective)
		if status != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, status, fxCompact(out), tc.status)
			continue
		}
		if issues := fxArr(out["issue"]); tc.field != "" && (len(issues) == 0 || !slices.Equal(fxArr(fxObj(issues[0])["expression"]), []any{tc.field})) {
			t.Errorf("%s: %s, want the issue at %s", tc.name, fxCompact(out), tc.field)
		}
	}
}

// TestFHIRBase64WithWhitespace: a base64Binary may hold whitespace, as
// MIME-style Base64 with its line breaks every 76 characters does; the
// decoded bytes are stored, and a read answers them re-encoded without it.
func TestFHIRBase64WithWhitespace(t *testing.T) {
	w := fxNewWorld(t)
	payload := fxDataPoint(fxHR, fxHeartRate(fxAt("2024-03-05T10:00:00+01:00")))
	canonical := base64.StdEncoding.EncodeToString(payload)
	mime := func(canonical string) string {
		var b strings.Builder
		for i := 0; i < len(canonical); i += 76 {
			b.WriteString(canonical[i:min(i+76, len(canonical))])
			b.WriteString("\r\n")
		}
		return b.String()
	}
	withWhitespace := map[string]func(canonical string) string{
		"MIME lines (CR LF)": mime,
		"line feeds":         func(c string) string { return strings.ReplaceAll(mime(c), "\r\n", "\n") },
		"spaces and tabs":    func(c string) string { return " " + c[:8] + " " + c[8:16] + "\t" + c[16:] + " " },
	}
	// Each create its own data point: the same one sent twice is one
	// observation.
	minute := 0
	sent := func(name string) (map[string]any, []byte, string) {
		minute++
		payload := fxDataPoint(fxHR, fxHeartRate(fxAt(fmt.Sprintf("2024-03-05T10:%02d:00+01:00", minute))))
		canonical := base64.StdEncoding.EncodeToString(payload)
		r := fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, payload: payload}.resource()
		fxObj(r["valueAttachment"])["data"] = withWhitespace[name](canonical)
		return r, payload, canonical
	}
	for name := range withWhitespace {
		r, payload, canonical := sent(name)
		resp, out := w.env.Send(t, "POST", fxBase+"/Observation", w.tok["alice"], r)
		if resp.StatusCode != http.StatusCreated {
			t.Errorf("%s: %d %v", name, resp.StatusCode, out)
			continue
		}
		read := w.readPayload(t, out["id"].(string), payload)
		if got := fxObj(read["valueAttachment"])["data"]; got != canonical {
			t.Errorf("%s: read answers %q, want the canonical Base64", name, got)
		}
		r, _, _ = sent(name)
		entry := w.batch(t, w.tok["alice"], r)[0]
		if fxObj(entry["response"])["status"] != "201 Created" {
			t.Errorf("%s in a batch: %s", name, fxCompact(entry))
		}
	}
	for name, data := range map[string]string{"not Base64": "e30$", "a character past the padding": canonical + " x"} {
		r := fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, payload: payload}.resource()
		fxObj(r["valueAttachment"])["data"] = data
		if resp, out := w.env.Send(t, "POST", fxBase+"/Observation", w.tok["alice"], r); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d %v", name, resp.StatusCode, out)
		}
	}
}
