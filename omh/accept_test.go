package omh_test

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"exchange/omh"
	"exchange/omh/omhtest"
)

// commonDataPoints are data points as devices and apps send them, of the
// schemas most uploads use: the accept check must decide them.
var commonDataPoints = map[string]string{
	"heart rate (as BenchmarkObservationCPU)": `{"header":{"id":"cpu-7","creation_date_time":"2024-05-01T10:07:30Z",` +
		`"schema_id":{"namespace":"omh","name":"heart-rate","version":"2.0"},` +
		`"acquisition_provenance":{"source_name":"Bench Watch","modality":"sensed"}},` +
		`"body":{"heart_rate":{"value":62,"unit":"beats/min"},"effective_time_frame":{"date_time":"2024-05-01T10:07:00Z"}}}`,
	"blood pressure": string(dataPointWith(omhHeader, "omh:blood-pressure:4.0", `{"systolic_blood_pressure": {"value": 120, "unit": "mmHg"},
		"diastolic_blood_pressure": {"value": 80, "unit": "mmHg"}, "effective_time_frame": {"date_time": "2024-05-01T09:00:00Z"}}`)),
	"blood glucose": string(dataPointWith(omhHeader, "omh:blood-glucose:4.0", `{"blood_glucose": {"value": 5.4, "unit": "mmol/L"},
		"effective_time_frame": {"date_time": "2024-05-01T09:00:00Z"}}`)),
	"body weight": string(dataPointWith(omhHeader, "omh:body-weight:3.0", `{"body_weight": {"value": 70.5, "unit": "kg"},
		"effective_time_frame": {"date_time": "2024-05-01T09:00:00Z"}, "descriptive_statistic": "average"}`)),
	"step count": string(dataPointWith(omhHeader, "omh:step-count:3.0", `{"step_count": {"value": 4120, "unit": "steps"},
		"effective_time_frame": {"time_interval": {"start_date_time": "2024-05-01T09:00:00Z", "end_date_time": "2024-05-01T10:00:00Z"}}}`)),
	"IEEE physical activity": string(dataPointWith(ieeeHeader, "ieee:physical-activity:1.0", `{"activity_name": "walking",
		"effective_time_frame": {"time_interval": {"start_date_time": "2024-05-01T09:00:00Z", "duration": {"value": 30, "unit": "min"}}}}`)),
	"IEEE sleep episode": string(dataPointWith(ieeeHeader, "ieee:sleep-episode:1.0", `{"effective_time_frame": {"time_interval":
		{"start_date_time": "2024-05-01T23:00:00+02:00", "end_date_time": "2024-05-02T07:00:00+02:00"}}, "is_main_sleep": true}`)),
}

// checkAgrees compares the accept check's verdict on v against id with the
// library's, failing t when the check accepts what the library rejects or
// rejects what it accepts; it returns the verdict.
func checkAgrees(t testing.TB, r *omh.Registry, id omh.SchemaID, v any, what string) string {
	t.Helper()
	verdict := r.AcceptVerdict(id, v)
	err := r.LibraryValidate(id, v)
	if verdict == "accepted" && err != nil || verdict == "rejected" && err == nil {
		doc, _ := json.Marshal(v)
		t.Fatalf("%s against %s: the accept check says %s, the library %v: %s", what, id.Code(), verdict, err, doc)
	}
	return verdict
}

// checkDataPointAgrees compares both on a data point, whole against the
// data point schema of its header's kind and its body against its schema.
func checkDataPointAgrees(t testing.TB, r *omh.Registry, dp *omh.DataPoint, what string) (header, body string) {
	t.Helper()
	header = checkAgrees(t, r, omh.HeaderSchema(dp), dp.Document, what)
	if r.Has(dp.Schema) {
		body = checkAgrees(t, r, dp.Schema, dp.Body, what+" (body)")
	}
	return header, body
}

// testDataPoints are the schemas' shouldPass test data of object values
// with a schema of their own, each made the body of a data point with an
// Open mHealth header and one with an IEEE 1752 header.
func testDataPoints(t testing.TB, r *omh.Registry) map[string][]byte {
	out := map[string][]byte{}
	for _, c := range omhtest.TestData(t) {
		if _, isObject := c.Value.(map[string]any); !c.ShouldPass || !isObject || !r.Has(c.Schema) {
			continue
		}
		out[c.Name] = dataPointWith(omhHeader, c.Schema.Code(), string(c.JSON))
		out[c.Name+" (IEEE header)"] = dataPointWith(ieeeHeader, c.Schema.Code(), string(c.JSON))
	}
	return out
}

// TestAcceptCheckAgrees runs the accept check and the schema library over
// every file of the schemas' test data against every schema, and over the
// common data points and the test data made data points: the check never
// accepts what the library rejects, nor rejects what it accepts.
func TestAcceptCheckAgrees(t *testing.T) {
	r := registry(t)
	cases := omhtest.TestData(t)
	counts := map[string]int{}
	for _, c := range cases {
		for _, s := range r.Schemas() {
			counts[checkAgrees(t, r, s.ID(), c.Value, c.Name)]++
		}
		if c.ShouldPass && r.Has(c.Schema) && r.AcceptVerdict(c.Schema, c.Value) == "accepted" {
			counts["shouldPass accepted"]++
		}
		if c.ShouldPass && r.Has(c.Schema) {
			counts["shouldPass"]++
		}
	}
	t.Logf("%d test data files x %d schemas: %d accepted, %d rejected, %d unsure; %d of %d shouldPass files accepted by their own schema's check",
		len(cases), len(r.Schemas()), counts["accepted"], counts["rejected"], counts["unsure"], counts["shouldPass accepted"], counts["shouldPass"])

	dataPoints := testDataPoints(t, r)
	for name, data := range commonDataPoints {
		dataPoints[name] = []byte(data)
	}
	counts = map[string]int{}
	for name, data := range dataPoints {
		dp, err := omh.Parse(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		header, body := checkDataPointAgrees(t, r, dp, name)
		counts[header]++
		counts[body]++
	}
	t.Logf("%d data points, headers and bodies: %d accepted, %d rejected, %d unsure", len(dataPoints), counts["accepted"], counts["rejected"], counts["unsure"])
}

// TestAcceptCheckDecidesCommonDataPoints: the accept check accepts the
// common data points, header and body, so that validating them does not
// fall back to the library.
func TestAcceptCheckDecidesCommonDataPoints(t *testing.T) {
	r := registry(t)
	for name, data := range commonDataPoints {
		dp, err := omh.Parse([]byte(data))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if header, body := checkDataPointAgrees(t, r, dp, name); header != "accepted" || body != "accepted" {
			t.Errorf("%s: the accept check says %s for the header, %s for the body; want both accepted", name, header, body)
		}
	}
}

// FuzzAcceptCheck mutates data points (the common ones and the schemas'
// test data made data points) member by member: numbers, strings (enum
// codes, units, date-times good and bad), kinds, members removed and
// added, values wrapped and copied; the accept check and the library must
// agree on every one, against both data point schemas and the body's.
func FuzzAcceptCheck(f *testing.F) {
	r := registry(f)
	var bases [][]byte
	for _, data := range commonDataPoints {
		bases = append(bases, []byte(data))
	}
	for _, data := range testDataPoints(f, r) {
		bases = append(bases, data)
	}
	for i := range bases {
		f.Add(uint16(i), []byte{})
		f.Add(uint16(i), []byte{byte(i), 1, byte(i * 7), 2, byte(i * 13), 7})
	}
	f.Fuzz(func(t *testing.T, base uint16, ops []byte) {
		dp, err := omh.Parse(bases[int(base)%len(bases)])
		if err != nil {
			t.Fatal(err)
		}
		var doc any = dp.Document
		for i := 0; i+1 < len(ops) && i < 2*maxMutations; i += 2 {
			mutate(doc, ops[i], ops[i+1])
		}
		for _, ns := range []string{omh.NamespaceOMH, omh.NamespaceIEEE} {
			checkAgrees(t, r, omh.SchemaID{Namespace: ns, Name: "data-point", Version: "1.0"}, doc, "mutated data point")
		}
		if body, ok := dp.Document["body"]; ok {
			checkAgrees(t, r, dp.Schema, body, "mutated body")
		}
	})
}

// slot is a place in a decoded document: a member of an object or an
// element of an array.
type slot struct {
	object map[string]any
	array  []any
	key    string
	index  int
}

func (s slot) get() any {
	if s.object != nil {
		return s.object[s.key]
	}
	return s.array[s.index]
}

func (s slot) set(v any) {
	if s.object != nil {
		s.object[s.key] = v
	} else {
		s.array[s.index] = v
	}
}

// slots lists every place in v, in a stable order.
func slots(v any) []slot {
	var out []slot
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(v)) {
				out = append(out, slot{object: v, key: k})
				walk(v[k])
			}
		case []any:
			for i := range v {
				out = append(out, slot{array: v, index: i})
				walk(v[i])
			}
		}
	}
	walk(v)
	return out
}

// Values the mutations put in: numbers as Parse decodes them (and one
// float64, a kind it does not produce), strings the schemas care about
// (units, enum codes, date-times valid and not), member names they name.
var (
	fuzzNumbers = []any{json.Number("0"), json.Number("-1"), json.Number("60"), json.Number("1.0"), json.Number("1.5"),
		json.Number("1e2"), json.Number("-0"), json.Number("2.50E+1"), json.Number("123456789012345678901234567890"),
		json.Number("1e400"), json.Number("0.000"), float64(60)}
	fuzzStrings = []any{"", "beats/min", "bpm", "kg", "lb", "mmHg", "kPa", "mmol/L", "mg/dL", "steps", "min", "h", "sec",
		"average", "maximum", "bogus", "sensed", "self-reported", "morning", "walking", "omh", "ieee", "heart-rate", "2.0",
		"2024-05-01T09:00:00Z", "2024-05-01T09:00:00.123+02:00", "2024-05-01t09:00:00z", "2024-02-30T09:00:00Z",
		"2024-05-01T24:00:00Z", "2024-05-01T09:00:60Z", "2024-05-01 09:00:00Z", "2024-05-01T09:00:00", "2024-05-01",
		"yesterday", "2f1c1d8e-8a6b-4c1e-9d1a-5f0e6b7c8d9e", "2f1c1d8e-8a6b-4c1e-9d1a-5f0e6b7c8d9", "urn:x", "http://example.org/a b",
		"P1D", "12:00:00"}
	fuzzKeys = []string{"extra", "value", "unit", "date_time", "time_interval", "start_date_time", "end_date_time", "duration",
		"date", "part_of_day", "effective_time_frame", "descriptive_statistic", "modality", "id", "uuid", "schema_id",
		"creation_date_time", "source_creation_date_time", "header", "body", "namespace", "name", "version"}
)

// A fuzzed data point gets at most maxMutations changes, and values are
// copied only while it has fewer than maxPlaces places, which keeps each
// run small.
const maxMutations, maxPlaces = 32, 400

// mutate changes the document at the place sel picks, as op says.
func mutate(doc any, sel, op byte) {
	places := slots(doc)
	if len(places) == 0 {
		return
	}
	s := places[int(sel)%len(places)]
	pick := int(op) / 11
	switch op % 11 {
	case 0: // remove
		if s.object != nil {
			delete(s.object, s.key)
		} else {
			s.set(nil)
		}
	case 1:
		s.set(fuzzNumbers[pick%len(fuzzNumbers)])
	case 2, 3:
		s.set(fuzzStrings[pick%len(fuzzStrings)])
	case 4:
		s.set(pick%2 == 0)
	case 5:
		s.set(nil)
	case 6:
		s.set(map[string]any{})
	case 7:
		s.set([]any{s.get()})
	case 8, 9: // a member added beside it, or inside it
		target := s.object
		if obj, ok := s.get().(map[string]any); ok && op%11 == 9 {
			target = obj
		}
		if target != nil {
			target[fuzzKeys[pick%len(fuzzKeys)]] = fuzzStrings[pick%len(fuzzStrings)]
		}
	case 10: // another place's value, copied (each copy may double the document)
		if len(places) < maxPlaces {
			s.set(deepCopy(places[(int(sel)+pick+1)%len(places)].get()))
		}
	}
}

func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = deepCopy(e)
		}
		return out
	}
	return v
}
