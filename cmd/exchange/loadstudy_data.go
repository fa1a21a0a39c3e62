package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"exchange/domain"
)

// What `exchange load-study` sends: per patient and day the readings of a
// small research study's devices, as Open mHealth data points in native
// Observations, and once per patient an EHR record taken from the Synthea
// sample. Values come from a hash of patient, series and time (draw), so
// two runs of one study send the same data.

// studyDevice is a data source of the study and the codes it sends.
type studyDevice struct {
	name  string
	codes []string
}

var studyDevices = []studyDevice{
	{"Load study CGM", []string{"omh:blood-glucose:4.0"}},
	{"Load study blood pressure cuff", []string{"omh:blood-pressure:4.0"}},
	{"Load study watch", []string{"omh:heart-rate:2.0", "omh:step-count:3.0", "omh:sleep-duration:2.0"}},
}

// studySeries is one kind of reading a patient's devices take every day.
type studySeries struct {
	code   string // the Open mHealth code, omh:name:version
	device string
	// times are the starts of the day's readings, from midnight.
	times []time.Duration
	// span is how long a reading lasts (a time interval time frame); 0:
	// an instant.
	span time.Duration
	// body is the data point's body without its time frame, for the draw
	// u in [0, 1) and the reading's start.
	body func(u float64, at time.Time) map[string]any
}

// every returns the starts of readings taken every d from midnight.
func every(d time.Duration) []time.Duration {
	var out []time.Duration
	for t := time.Duration(0); t < 24*time.Hour; t += d {
		out = append(out, t)
	}
	return out
}

// hourOf is the time of day of t in hours.
func hourOf(t time.Time) float64 { return float64(t.Hour()) + float64(t.Minute())/60 }

var studySeriesList = []studySeries{
	{code: "omh:blood-pressure:4.0", device: "Load study blood pressure cuff", times: []time.Duration{7*time.Hour + 30*time.Minute, 19*time.Hour + 30*time.Minute},
		body: func(u float64, _ time.Time) map[string]any {
			return map[string]any{
				"systolic_blood_pressure":  unitValue(math.Round(116+24*u), "mmHg"),
				"diastolic_blood_pressure": unitValue(math.Round(72+14*u), "mmHg"),
				"body_posture":             "sitting",
			}
		}},
	// A continuous glucose monitor: a rise after each meal.
	{code: "omh:blood-glucose:4.0", device: "Load study CGM", times: every(5 * time.Minute),
		body: func(u float64, at time.Time) map[string]any {
			h, rise := hourOf(at), 0.0
			for _, meal := range []float64{7.5, 12.5, 19} {
				if d := h - meal; d > 0 && d < 3 {
					rise = max(rise, 50*1.5*d*math.Exp(1-1.5*d)) // peaks at 50 mg/dL 40 minutes after
				}
			}
			return map[string]any{"blood_glucose": unitValue(math.Round(88+rise+14*u), "mg/dL"), "specimen_source": "interstitial fluid"}
		}},
	// A watch: lower at night.
	{code: "omh:heart-rate:2.0", device: "Load study watch", times: every(time.Minute),
		body: func(u float64, at time.Time) map[string]any {
			base := 70.0
			if h := hourOf(at); h < 6.5 || h >= 23 {
				base = 56
			}
			return map[string]any{"heart_rate": unitValue(math.Round(base+22*u), "beats/min")}
		}},
	{code: "omh:step-count:3.0", device: "Load study watch", times: []time.Duration{0}, span: 24 * time.Hour,
		body: func(u float64, _ time.Time) map[string]any {
			return map[string]any{"step_count": unitValue(math.Round(2500+10000*u), "steps")}
		}},
	// The night that ends on the day.
	{code: "omh:sleep-duration:2.0", device: "Load study watch", times: []time.Duration{-time.Hour}, span: 7*time.Hour + 45*time.Minute,
		body: func(u float64, _ time.Time) map[string]any {
			return map[string]any{"sleep_duration": unitValue(round(5.5+2.5*u), "h")}
		}},
}

// readingsPerDay is how many observations a patient sends a day.
func readingsPerDay() int {
	n := 0
	for _, s := range studySeriesList {
		n += len(s.times)
	}
	return n
}

// studyCodes are the codes the study asks its patients to share.
func studyCodes() []string {
	var codes []string
	for _, d := range studyDevices {
		codes = append(codes, d.codes...)
	}
	return codes
}

// reading is one observation to send.
type reading struct {
	series *studySeries
	at     time.Time
}

// dayReadings are a patient's readings of the day that starts at
// midnight (UTC), in time order, as the patient's phone sends them.
func dayReadings(midnight time.Time) []reading {
	var out []reading
	for i := range studySeriesList {
		s := &studySeriesList[i]
		for _, t := range s.times {
			out = append(out, reading{s, midnight.Add(t)})
		}
	}
	slices.SortStableFunc(out, func(a, b reading) int { return a.at.Compare(b.at) })
	return out
}

// studyIdentifierSystem names the identifiers of the observations sent.
const studyIdentifierSystem = "urn:example:exchange-load-study"

// observationEntry is one reading as an entry of a FHIR batch: a native
// Observation carrying the data point in Base64, as a device's app sends
// it. slug names the study, index the patient within it.
func observationEntry(r reading, slug string, index int, patientID, deviceID int64) (json.RawMessage, error) {
	name, version, _ := strings.Cut(strings.TrimPrefix(r.series.code, "omh:"), ":")
	id := fmt.Sprintf("%s-%d-%s-%d", slug, index, name, r.at.Unix())
	body := r.series.body(draw(slug, strconv.Itoa(index), r.series.code, r.at.Format(time.RFC3339)), r.at)
	if r.series.span > 0 {
		body["effective_time_frame"] = map[string]any{"time_interval": map[string]any{
			"start_date_time": r.at.Format(time.RFC3339), "end_date_time": r.at.Add(r.series.span).Format(time.RFC3339)}}
	} else {
		body["effective_time_frame"] = map[string]any{"date_time": r.at.Format(time.RFC3339)}
	}
	point, err := json.Marshal(map[string]any{
		"header": map[string]any{
			"id":                     id,
			"creation_date_time":     r.at.Add(r.series.span + 5*time.Second).Format(time.RFC3339),
			"schema_id":              map[string]any{"namespace": "omh", "name": name, "version": version},
			"acquisition_provenance": map[string]any{"source_name": r.series.device, "modality": "sensed"},
		},
		"body": body,
	})
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{
		"resource": map[string]any{
			"resourceType": "Observation",
			"status":       "final",
			"identifier":   []any{map[string]any{"system": studyIdentifierSystem, "value": id}},
			"code":         map[string]any{"coding": []any{map[string]any{"system": domain.SystemOpenMHealth, "code": r.series.code}}},
			"subject":      map[string]any{"reference": "Patient/" + strconv.FormatInt(patientID, 10)},
			"device":       map[string]any{"reference": "Device/" + strconv.FormatInt(deviceID, 10)},
			"valueAttachment": map[string]any{"contentType": "application/json",
				"data": base64.StdEncoding.EncodeToString(point)},
		},
		"request": map[string]any{"method": "POST", "url": "Observation"},
	})
}

// An EHR record is one Synthea patient's resources: the Patient and every
// resource whose subject, patient or beneficiary it is (the practitioners,
// organizations and locations they share are left out).
type ehrRecord [][]byte

// syntheaRecords reads the Synthea sample's NDJSON files and returns its
// patients' records, the smallest first.
func syntheaRecords(dir string) ([]ehrRecord, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.ndjson"))
	if err != nil {
		return nil, err
	}
	byPatient := map[string]ehrRecord{}
	for _, name := range files {
		if filepath.Base(name) == "log.ndjson" {
			continue
		}
		if err := eachLine(name, func(line []byte) error {
			var head struct {
				ResourceType string `json:"resourceType"`
				ID           string `json:"id"`
				Subject      struct {
					Reference string `json:"reference"`
				} `json:"subject"`
				Patient struct {
					Reference string `json:"reference"`
				} `json:"patient"`
				Beneficiary struct {
					Reference string `json:"reference"`
				} `json:"beneficiary"`
			}
			if err := json.Unmarshal(line, &head); err != nil {
				return err
			}
			patient := ""
			if head.ResourceType == "Patient" {
				patient = head.ID
			} else {
				for _, ref := range []string{head.Subject.Reference, head.Patient.Reference, head.Beneficiary.Reference} {
					if id, ok := strings.CutPrefix(ref, "Patient/"); ok {
						patient = id
						break
					}
				}
			}
			if patient != "" {
				byPatient[patient] = append(byPatient[patient], line)
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	var records []ehrRecord
	for _, r := range byPatient {
		records = append(records, r)
	}
	// Smallest first, then by content: the same order every run.
	slices.SortFunc(records, func(a, b ehrRecord) int {
		if len(a) != len(b) {
			return len(a) - len(b)
		}
		return strings.Compare(string(a[0]), string(b[0]))
	})
	if len(records) == 0 {
		return nil, fmt.Errorf("no patient's record in %s", dir)
	}
	return records, nil
}

// eachLine calls f with every non-empty line of an NDJSON file.
func eachLine(name string, f func([]byte) error) error {
	file, err := os.Open(name)
	if err != nil {
		return err
	}
	defer file.Close()
	lines := bufio.NewScanner(file)
	lines.Buffer(make([]byte, 1<<20), 64<<20)
	for lines.Scan() {
		if line := lines.Bytes(); len(strings.TrimSpace(string(line))) > 0 {
			if err := f(slices.Clone(line)); err != nil {
				return err
			}
		}
	}
	return lines.Err()
}

var uuidPattern = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// rekeyed returns the record with each of its resources' ids, and every
// mention of them (references, identifiers), replaced by an id of its own
// for the study's patient index: each patient gets a record of their own,
// as if from their own EHR. It also returns the new Patient's id.
func (r ehrRecord) rekeyed(slug string, index int) (ehrRecord, string) {
	ids := map[string]string{}
	patient := ""
	for _, line := range r {
		var head struct {
			ResourceType string `json:"resourceType"`
			ID           string `json:"id"`
		}
		_ = json.Unmarshal(line, &head)
		sum := sha256.Sum256([]byte(slug + "\x00" + strconv.Itoa(index) + "\x00" + head.ID))
		h := hex.EncodeToString(sum[:16])
		ids[head.ID] = h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
		if head.ResourceType == "Patient" {
			patient = ids[head.ID]
		}
	}
	out := make(ehrRecord, len(r))
	for i, line := range r {
		out[i] = uuidPattern.ReplaceAllFunc(line, func(id []byte) []byte {
			if to, ok := ids[string(id)]; ok {
				return []byte(to)
			}
			return id
		})
	}
	return out, patient
}
