package main

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
	"time"

	"exchange/domain"
)

// The demo observations `exchange seed --observations` loads: a month of
// readings up to today for the demo patients who consented to share them,
// as their devices would send them, so that a fresh install has charts,
// analysts' queries and assistant tools with something to show.
//
// Values are drawn from a hash of (patient, series, day), not a random
// source: a second run makes the same data points, which the identifiers
// recognise as already stored, and a run on a later day adds the days since.

// demoObservationDays is how many days, up to today, the demo covers.
const demoObservationDays = 30

// demoIdentifierSystem names the demo data points' identifiers.
const demoIdentifierSystem = "urn:example:exchange-demo"

// demoZone is the demo patients' UTC offset (Pacific standard time), which
// their devices write into every time frame.
var demoZone = time.FixedZone("", -8*60*60)

// demoSeries is one kind of reading a patient's device takes every day.
type demoSeries struct {
	patient    string // the patient's email
	dataSource string // the data source's name
	schema     string // name and version of the Open mHealth schema: "heart-rate:2.0"
	at         time.Duration
	// body returns the data point's body (without its time frame) for the
	// day's draw u in [0, 1) and the day's index (0 = the first day).
	body func(u float64, day int) map[string]any
	// interval: the reading covers from `at` for this long (a time interval
	// time frame) instead of an instant.
	interval time.Duration
}

func unitValue(value float64, unit string) map[string]any {
	return map[string]any{"value": value, "unit": unit}
}

// round keeps one decimal, as a scale or a cuff shows it.
func round(v float64) float64 { return math.Round(v*10) / 10 }

var demoObservationSeries = []demoSeries{
	// Alice: heart failure home monitoring, and fasting glucose.
	{patient: "alice@example.org", dataSource: "Smart Scale", schema: "body-weight:3.0", at: 7 * time.Hour,
		body: func(u float64, day int) map[string]any {
			return map[string]any{"body_weight": unitValue(round(71.8+0.04*float64(day)+0.6*u), "kg")}
		}},
	{patient: "alice@example.org", dataSource: "Home Blood Pressure Cuff", schema: "blood-pressure:4.0", at: 7*time.Hour + 30*time.Minute,
		body: func(u float64, _ int) map[string]any {
			return map[string]any{
				"systolic_blood_pressure":  unitValue(math.Round(126+16*u), "mmHg"),
				"diastolic_blood_pressure": unitValue(math.Round(78+10*u), "mmHg"),
				"body_posture":             "sitting",
			}
		}},
	{patient: "alice@example.org", dataSource: "Home Blood Pressure Cuff", schema: "heart-rate:2.0", at: 7*time.Hour + 30*time.Minute,
		body: func(u float64, _ int) map[string]any {
			return map[string]any{"heart_rate": unitValue(math.Round(68+12*u), "beats/min")}
		}},
	{patient: "alice@example.org", dataSource: "Pulse Oximeter", schema: "oxygen-saturation:2.0", at: 8 * time.Hour,
		body: func(u float64, _ int) map[string]any {
			return map[string]any{"oxygen_saturation": unitValue(math.Round(95+3*u), "%"), "measurement_method": "pulse oximetry"}
		}},
	{patient: "alice@example.org", dataSource: "Connected Glucometer", schema: "blood-glucose:4.0", at: 7*time.Hour + 15*time.Minute,
		body: func(u float64, _ int) map[string]any {
			return map[string]any{"blood_glucose": unitValue(math.Round(96+34*u), "mg/dL"), "temporal_relationship_to_meal": "fasting"}
		}},
	// Robert: heart failure home monitoring and sleep.
	{patient: "bob@example.org", dataSource: "Smart Scale", schema: "body-weight:3.0", at: 7*time.Hour + 45*time.Minute,
		body: func(u float64, day int) map[string]any {
			return map[string]any{"body_weight": unitValue(round(94.6-0.03*float64(day)+0.8*u), "kg")}
		}},
	{patient: "bob@example.org", dataSource: "Home Blood Pressure Cuff", schema: "blood-pressure:4.0", at: 8 * time.Hour,
		body: func(u float64, _ int) map[string]any {
			return map[string]any{
				"systolic_blood_pressure":  unitValue(math.Round(134+18*u), "mmHg"),
				"diastolic_blood_pressure": unitValue(math.Round(84+10*u), "mmHg"),
			}
		}},
	{patient: "bob@example.org", dataSource: "Home Blood Pressure Cuff", schema: "heart-rate:2.0", at: 8 * time.Hour,
		body: func(u float64, _ int) map[string]any {
			return map[string]any{"heart_rate": unitValue(math.Round(72+14*u), "beats/min")}
		}},
	{patient: "bob@example.org", dataSource: "Fitness Tracker", schema: "step-count:3.0", interval: 24 * time.Hour,
		body: func(u float64, _ int) map[string]any {
			return map[string]any{"step_count": unitValue(math.Round(2500+5000*u), "steps")}
		}},
	{patient: "bob@example.org", dataSource: "Fitness Tracker", schema: "sleep-duration:2.0", at: -time.Hour, interval: 7*time.Hour + 30*time.Minute,
		body: func(u float64, _ int) map[string]any {
			return map[string]any{"sleep_duration": unitValue(round(5.8+1.6*u), "h")}
		}},
	// Daniel: the wellness baseline, with an afternoon run on some days.
	{patient: "dan@example.org", dataSource: "Smart Scale", schema: "body-weight:3.0", at: 6*time.Hour + 45*time.Minute,
		body: func(u float64, day int) map[string]any {
			return map[string]any{"body_weight": unitValue(round(88.4-0.05*float64(day)+0.5*u), "kg")}
		}},
	{patient: "dan@example.org", dataSource: "Fitness Tracker", schema: "heart-rate:2.0", at: 7 * time.Hour,
		body: func(u float64, _ int) map[string]any {
			return map[string]any{"heart_rate": unitValue(math.Round(58+8*u), "beats/min")}
		}},
	{patient: "dan@example.org", dataSource: "Fitness Tracker", schema: "heart-rate:2.0", at: 17*time.Hour + 30*time.Minute,
		body: func(u float64, _ int) map[string]any {
			return map[string]any{"heart_rate": unitValue(math.Round(84+40*u), "beats/min")}
		}},
	{patient: "dan@example.org", dataSource: "Fitness Tracker", schema: "step-count:3.0", interval: 24 * time.Hour,
		body: func(u float64, _ int) map[string]any {
			return map[string]any{"step_count": unitValue(math.Round(6000+9000*u), "steps")}
		}},
}

// draw is a number in [0, 1) that depends only on its parts.
func draw(parts ...string) float64 {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	x := h.Sum64() // mixed (splitmix64's finalizer): FNV's high bits barely move for inputs a digit apart
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}

// demoObservations builds the demo observations of the days up to now: a
// reading whose time (or whose interval's end) is still to come is left
// for a later run.
func demoObservations(now time.Time, patientIDs, dataSourceIDs map[string]int64) ([]domain.NewObservation, error) {
	now = now.In(demoZone)
	today := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, demoZone)
	var out []domain.NewObservation
	for day := range demoObservationDays {
		midnight := today.AddDate(0, 0, day-demoObservationDays+1)
		for _, s := range demoObservationSeries {
			start := midnight.Add(s.at)
			if start.Add(s.interval).After(now) {
				continue
			}
			name, version, _ := strings.Cut(s.schema, ":")
			id := fmt.Sprintf("demo-%s-%s-%s-%s", strings.TrimSuffix(s.patient, "@example.org"), name,
				midnight.Format(time.DateOnly), strconv.Itoa(int(s.at.Minutes())))
			body := s.body(draw(s.patient, s.schema, strconv.Itoa(int(s.at.Minutes())), midnight.Format(time.DateOnly)), day)
			if s.interval > 0 {
				body["effective_time_frame"] = map[string]any{"time_interval": map[string]any{
					"start_date_time": start.Format(time.RFC3339), "end_date_time": start.Add(s.interval).Format(time.RFC3339)}}
			} else {
				body["effective_time_frame"] = map[string]any{"date_time": start.Format(time.RFC3339)}
			}
			data, err := json.Marshal(map[string]any{
				"header": map[string]any{
					"id":                 id,
					"creation_date_time": start.Add(s.interval + 5*time.Second).Format(time.RFC3339),
					"schema_id":          map[string]any{"namespace": "omh", "name": name, "version": version},
				},
				"body": body,
			})
			if err != nil {
				return nil, err
			}
			out = append(out, domain.NewObservation{
				Subject:     "Patient/" + strconv.FormatInt(patientIDs[s.patient], 10),
				Device:      "Device/" + strconv.FormatInt(dataSourceIDs[s.dataSource], 10),
				Status:      "final",
				Codings:     []domain.Coding{{System: domain.SystemOpenMHealth, Code: "omh:" + s.schema}},
				Identifiers: []domain.Identifier{{System: demoIdentifierSystem, Value: id}},
				ContentType: "application/json",
				Data:        data,
			})
		}
	}
	return out, nil
}

// seedObservations stores the demo observations up to now; those already
// stored (by an earlier run) are recognised by their identifiers and kept.
// It reports how many it added.
func seedObservations(ctx context.Context, svc *domain.Service, now time.Time) (int, error) {
	patientIDs := map[string]int64{}
	dataSourceIDs := map[string]int64{}
	for _, s := range demoObservationSeries {
		if _, ok := patientIDs[s.patient]; !ok {
			u, err := svc.UserByEmail(ctx, s.patient)
			if err != nil {
				return 0, fmt.Errorf("patient %s: %w", s.patient, err)
			}
			p, err := svc.PatientByUserID(ctx, u.ID)
			if err != nil {
				return 0, fmt.Errorf("patient %s: %w", s.patient, err)
			}
			patientIDs[s.patient] = p.ID
		}
		if _, ok := dataSourceIDs[s.dataSource]; !ok {
			ds, err := svc.DataSourceByName(ctx, s.dataSource)
			if err != nil {
				return 0, fmt.Errorf("data source %q: %w", s.dataSource, err)
			}
			dataSourceIDs[s.dataSource] = ds.ID
		}
	}
	all, err := demoObservations(now, patientIDs, dataSourceIDs)
	if err != nil {
		return 0, err
	}
	added := 0
	const batch = 500
	for start := 0; start < len(all); start += batch {
		for i, outcome := range svc.CreateObservations(ctx, domain.SystemActor(), all[start:min(start+batch, len(all))]) {
			switch {
			case outcome.Err == nil:
				added++
			case domain.IsCode(outcome.Err, domain.CodeDuplicate):
			default:
				return added, fmt.Errorf("observation %s: %w", all[start+i].Identifiers[0].Value, outcome.Err)
			}
		}
	}
	return added, nil
}
