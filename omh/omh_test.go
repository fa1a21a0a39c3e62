package omh_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"exchange/omh"
	"exchange/omh/omhtest"
)

func registry(t testing.TB) *omh.Registry { return omhtest.Registry(t) }

func dataPoint(schema, body string) []byte {
	return []byte(`{"header": {"id": "a1", "creation_date_time": "2024-05-01T10:00:00Z",
		"schema_id": {"namespace": "omh", "name": "` + schema + `", "version": "2.0"}}, "body": ` + body + `}`)
}

func TestValidateAgainstOfficialSchema(t *testing.T) {
	r := registry(t)
	if len(r.Schemas()) < 100 || !r.Has(omh.SchemaID{Namespace: "omh", Name: "heart-rate", Version: "2.0"}) || r.Has(omh.SchemaID{Namespace: "omh", Name: "heart-rate", Version: "9.9"}) {
		t.Fatalf("registry: %d schemas", len(r.Schemas()))
	}
	good := `{"heart_rate": {"value": 60, "unit": "beats/min"}, "effective_time_frame": {"date_time": "2024-05-01T09:00:00+02:00"}}`
	dp, err := omh.Parse(dataPoint("heart-rate", good))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Validate(dp); err != nil {
		t.Fatalf("valid heart rate: %v", err)
	}
	for name, body := range map[string]string{
		"wrong unit":    `{"heart_rate": {"value": 60, "unit": "bpm"}, "effective_time_frame": {"date_time": "2024-05-01T09:00:00Z"}}`,
		"no time frame": `{"heart_rate": {"value": 60, "unit": "beats/min"}}`,
		"string value":  `{"heart_rate": {"value": "60", "unit": "beats/min"}, "effective_time_frame": {"date_time": "2024-05-01T09:00:00Z"}}`,
		"bad date-time": `{"heart_rate": {"value": 60, "unit": "beats/min"}, "effective_time_frame": {"date_time": "yesterday"}}`,
		"two time frame kinds": `{"heart_rate": {"value": 60, "unit": "beats/min"}, "effective_time_frame": {"date_time": "2024-05-01T09:00:00Z",
			"time_interval": {"date": "2024-05-01", "part_of_day": "morning"}}}`,
	} {
		dp, err := omh.Parse(dataPoint("heart-rate", body))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var ve *omh.ValidationError
		if err := r.Validate(dp); !errors.As(err, &ve) || len(ve.Problems) == 0 {
			t.Errorf("%s: got %v, want a validation error", name, err)
		}
	}
	// A schema that references IEEE 1752 schemas validates through them.
	bp := `{"systolic_blood_pressure": {"value": 120, "unit": "mmHg"}, "diastolic_blood_pressure": {"value": 80, "unit": "mmHg"},
		"effective_time_frame": {"date_time": "2024-05-01T09:00:00Z"}}`
	dp, _ = omh.Parse([]byte(strings.Replace(string(dataPoint("blood-pressure", bp)), `"2.0"`, `"4.0"`, 1)))
	if err := r.Validate(dp); err != nil {
		t.Errorf("blood pressure 4.0: %v", err)
	}
	dp, _ = omh.Parse([]byte(strings.Replace(strings.Replace(string(dataPoint("blood-pressure", bp)), `"2.0"`, `"4.0"`, 1), `"mmHg"`, `"kPa"`, 1)))
	if err := r.Validate(dp); err == nil {
		t.Error("blood pressure in kPa passed")
	}
}

func TestParseRefusesMalformedDataPoints(t *testing.T) {
	for name, doc := range map[string]string{
		"not JSON":       `{`,
		"array":          `[]`,
		"no header":      `{"body": {}}`,
		"no schema id":   `{"header": {"id": "a", "creation_date_time": "2024-05-01T10:00:00Z"}, "body": {}}`,
		"no header kind": `{"header": {"schema_id": {"namespace": "omh", "name": "x", "version": "1.0"}}, "body": {}}`,
		"empty name":     `{"header": {"id": "a", "creation_date_time": "2024-05-01T10:00:00Z", "schema_id": {"namespace": "omh", "name": "", "version": "1.0"}}, "body": {}}`,
		"no body":        `{"header": {"id": "a", "creation_date_time": "2024-05-01T10:00:00Z", "schema_id": {"namespace": "omh", "name": "x", "version": "1.0"}}}`,
		"trailing data":  `{"header": {"id": "a", "creation_date_time": "2024-05-01T10:00:00Z", "schema_id": {"namespace": "omh", "name": "x", "version": "1.0"}}, "body": {}} {}`,
		"trailing ]":     `{"header": {"id": "a", "creation_date_time": "2024-05-01T10:00:00Z", "schema_id": {"namespace": "omh", "name": "x", "version": "1.0"}}, "body": {}}]`,
		"trailing }":     `{"header": {"id": "a", "creation_date_time": "2024-05-01T10:00:00Z", "schema_id": {"namespace": "omh", "name": "x", "version": "1.0"}}, "body": {}} }x`,
		"dotted key":     `{"header": {"id": "a", "creation_date_time": "2024-05-01T10:00:00Z", "schema_id": {"namespace": "omh", "name": "x", "version": "1.0"}}, "body": {"a.b": 1}}`,
		"dollar key":     `{"header": {"id": "a", "creation_date_time": "2024-05-01T10:00:00Z", "schema_id": {"namespace": "omh", "name": "x", "version": "1.0"}}, "body": {"x": [{"$where": 1}]}}`,
		"NUL in a key":   "{\"header\": {\"id\": \"a\", \"creation_date_time\": \"2024-05-01T10:00:00Z\", \"schema_id\": {\"namespace\": \"omh\", \"name\": \"x\", \"version\": \"1.0\"}}, \"body\": {\"a\\u0000b\": 1}}",
		"empty key":      `{"header": {"id": "a", "creation_date_time": "2024-05-01T10:00:00Z", "schema_id": {"namespace": "omh", "name": "x", "version": "1.0"}}, "body": {"": 1}}`,
	} {
		if _, err := omh.Parse([]byte(doc)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	_, err := omh.Parse([]byte(`{"header": {"id": "a", "creation_date_time": "2024-05-01T10:00:00Z", "schema_id": {"namespace": "omh", "name": "x", "version": "1.0"}}, "body": {"a.b": 1}}`))
	if !errors.Is(err, omh.ErrUnstorableKey) {
		t.Errorf("dotted key: %v, want ErrUnstorableKey", err)
	}
}

func TestParseCode(t *testing.T) {
	for code, want := range map[string]omh.SchemaID{
		"omh:heart-rate:2.0":           {Namespace: "omh", Name: "heart-rate", Version: "2.0"},
		"ieee:sleep-stage-summary:1.0": {Namespace: "ieee", Name: "sleep-stage-summary", Version: "1.0"},
	} {
		got, err := omh.ParseCode(code)
		if err != nil || got != want || got.Code() != code {
			t.Errorf("%s: %+v %v", code, got, err)
		}
	}
	for _, bad := range []string{"heart-rate", "omh:heart-rate", "omh:heart-rate:2", "loinc:8867-4:1.0", "omh:Heart:2.0", "omh:heart-rate:2.0:x"} {
		if _, err := omh.ParseCode(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// FuzzParseCode checks that ParseCode, which only matches the code pattern
// and cuts at the colons, returns its groups, and that Code() gives back
// the code.
func FuzzParseCode(f *testing.F) {
	for _, s := range []string{"omh:heart-rate:2.0", "ieee:sleep-stage-summary:1.0", "omh:a:1.0:x", "omh::1.0", "omh:a-:1.0", "ieee:a:1.0\n", "omh:-a:1.0", "omh:a--b:1.0", "omh:a:1.", "omh:a:.1", "omh:a:1.0.1", "omh:a:1..0", "omh:a:\u0661.0", "OMH:a:1.0", "omh:a_b:1.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, code string) {
		got, err := omh.ParseCode(code)
		m := omh.CodePattern.FindStringSubmatch(code)
		if (m == nil) != (err != nil) {
			t.Fatalf("%q: err %v, pattern %q", code, err, m)
		}
		if m != nil && (got != omh.SchemaID{Namespace: m[1], Name: m[2], Version: m[3]} || got.Code() != code) {
			t.Fatalf("%q: %+v, groups %q", code, got, m)
		}
	})
}

// TestEffectiveTimeFrameAllocations: reading an instant allocates its
// TimeFrame and its FHIR rendering only, not the error target that only a
// failure uses (allocations are counted, not timed).
func TestEffectiveTimeFrameAllocations(t *testing.T) {
	body := map[string]any{"effective_time_frame": map[string]any{"date_time": "2024-05-01T09:30:00+02:00"}}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := omh.EffectiveTimeFrame(body); err != nil {
			t.Fatal(err)
		}
	}); n > 2 {
		t.Errorf("EffectiveTimeFrame allocates %v times, want 2", n)
	}
}

func TestEffectiveTimeFrame(t *testing.T) {
	utc := func(s string) time.Time { v, _ := time.Parse(time.RFC3339Nano, s); return v.UTC() }
	for _, tc := range []struct {
		name, frame            string
		start, end             string // UTC instants
		dateTime, pStart, pEnd string // rendering
	}{
		{"date_time keeps its offset", `{"date_time": "2024-05-01T09:30:00.25+02:00"}`,
			"2024-05-01T07:30:00.25Z", "2024-05-01T07:30:00.25Z", "2024-05-01T09:30:00.25+02:00", "", ""},
		{"start and end", `{"time_interval": {"start_date_time": "2024-05-01T22:00:00-07:00", "end_date_time": "2024-05-02T06:00:00-07:00"}}`,
			"2024-05-02T05:00:00Z", "2024-05-02T13:00:00Z", "", "2024-05-01T22:00:00-07:00", "2024-05-02T06:00:00-07:00"},
		{"start and minutes", `{"time_interval": {"start_date_time": "2024-05-01T10:00:00Z", "duration": {"value": 90, "unit": "min"}}}`,
			"2024-05-01T10:00:00Z", "2024-05-01T11:30:00Z", "", "2024-05-01T10:00:00Z", "2024-05-01T11:30:00Z"},
		{"end and weeks", `{"time_interval": {"end_date_time": "2024-05-15T00:00:00+01:00", "duration": {"value": 2, "unit": "wk"}}}`,
			"2024-04-30T23:00:00Z", "2024-05-14T23:00:00Z", "", "2024-05-01T00:00:00+01:00", "2024-05-15T00:00:00+01:00"},
		{"a month from 31 January ends on the last day of February", `{"time_interval": {"start_date_time": "2024-01-31T00:00:00Z", "duration": {"value": 1, "unit": "Mo"}}}`,
			"2024-01-31T00:00:00Z", "2024-02-29T00:00:00Z", "", "2024-01-31T00:00:00Z", "2024-02-29T00:00:00Z"},
		{"a year from 29 February", `{"time_interval": {"start_date_time": "2024-02-29T12:00:00Z", "duration": {"value": 1, "unit": "yr"}}}`,
			"2024-02-29T12:00:00Z", "2025-02-28T12:00:00Z", "", "2024-02-29T12:00:00Z", "2025-02-28T12:00:00Z"},
		{"a month back from 31 March", `{"time_interval": {"end_date_time": "2023-03-31T00:00:00Z", "duration": {"value": 1, "unit": "Mo"}}}`,
			"2023-02-28T00:00:00Z", "2023-03-31T00:00:00Z", "", "2023-02-28T00:00:00Z", "2023-03-31T00:00:00Z"},
		{"end and a leap year", `{"time_interval": {"end_date_time": "2025-03-01T00:00:00Z", "duration": {"value": 1, "unit": "yr"}}}`,
			"2024-03-01T00:00:00Z", "2025-03-01T00:00:00Z", "", "2024-03-01T00:00:00Z", "2025-03-01T00:00:00Z"},
		{"half a month", `{"time_interval": {"start_date_time": "2023-02-01T00:00:00Z", "duration": {"value": 0.5, "unit": "Mo"}}}`,
			"2023-02-01T00:00:00Z", "2023-02-15T00:00:00Z", "", "2023-02-01T00:00:00Z", "2023-02-15T00:00:00Z"},
		{"milliseconds", `{"time_interval": {"start_date_time": "2024-05-01T10:00:00Z", "duration": {"value": 1500, "unit": "ms"}}}`,
			"2024-05-01T10:00:00Z", "2024-05-01T10:00:01.5Z", "", "2024-05-01T10:00:00Z", "2024-05-01T10:00:01.5Z"},
		{"morning", `{"time_interval": {"date": "2024-05-01", "part_of_day": "morning"}}`,
			"2024-05-01T06:00:00Z", "2024-05-01T12:00:00Z", "", "2024-05-01T06:00:00Z", "2024-05-01T12:00:00Z"},
		{"evening ends at midnight", `{"time_interval": {"date": "2024-05-01", "part_of_day": "evening"}}`,
			"2024-05-01T18:00:00Z", "2024-05-02T00:00:00Z", "", "2024-05-01T18:00:00Z", "2024-05-02T00:00:00Z"},
		{"night", `{"time_interval": {"date": "2024-05-01", "part_of_day": "night"}}`,
			"2024-05-01T00:00:00Z", "2024-05-01T06:00:00Z", "", "2024-05-01T00:00:00Z", "2024-05-01T06:00:00Z"},
		{"afternoon", `{"time_interval": {"date": "2024-05-01", "part_of_day": "afternoon"}}`,
			"2024-05-01T12:00:00Z", "2024-05-01T18:00:00Z", "", "2024-05-01T12:00:00Z", "2024-05-01T18:00:00Z"},
		{"an offset FHIR cannot show is rendered in UTC", `{"date_time": "2024-05-01T09:00:00+15:00"}`,
			"2024-04-30T18:00:00Z", "2024-04-30T18:00:00Z", "2024-04-30T18:00:00Z", "", ""},
		{"FHIR's largest offset is kept", `{"time_interval": {"start_date_time": "2024-05-01T09:00:00+14:00", "end_date_time": "2024-05-01T10:00:00-14:00"}}`,
			"2024-04-30T19:00:00Z", "2024-05-02T00:00:00Z", "", "2024-05-01T09:00:00+14:00", "2024-05-01T10:00:00-14:00"},
		{"lower-case t and z (RFC 3339)", `{"date_time": "2024-05-01t09:00:00z"}`,
			"2024-05-01T09:00:00Z", "2024-05-01T09:00:00Z", "2024-05-01T09:00:00Z", "", ""},
		{"a leap second is the instant after it", `{"date_time": "2016-12-31T23:59:60Z"}`,
			"2017-01-01T00:00:00Z", "2017-01-01T00:00:00Z", "2017-01-01T00:00:00Z", "", ""},
		{"a leap second in another offset, with a fraction", `{"time_interval": {"start_date_time": "2015-06-30T16:59:60.5-07:00", "duration": {"value": 1, "unit": "sec"}}}`,
			"2015-07-01T00:00:00.5Z", "2015-07-01T00:00:01.5Z", "", "2015-06-30T17:00:00.5-07:00", "2015-06-30T17:00:01.5-07:00"},
	} {
		dp, err := omh.Parse(dataPoint("x", `{"effective_time_frame": `+tc.frame+`}`))
		if err != nil {
			t.Fatal(err)
		}
		tf, err := omh.EffectiveTimeFrame(dp.Body)
		if err != nil || tf == nil {
			t.Errorf("%s: not read: %v", tc.name, err)
			continue
		}
		if !tf.Start.Equal(utc(tc.start)) || !tf.End.Equal(utc(tc.end)) || tf.DateTime != tc.dateTime || tf.PeriodStart != tc.pStart || tf.PeriodEnd != tc.pEnd {
			t.Errorf("%s: got %+v", tc.name, tf)
		}
	}
	// No time frame is none, and no error.
	dp, err := omh.Parse(dataPoint("x", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	if tf, err := omh.EffectiveTimeFrame(dp.Body); tf != nil || err != nil {
		t.Errorf("missing: %+v, %v", tf, err)
	}
	// One that cannot be read says where in the data point it is wrong.
	for name, tc := range map[string]struct{ frame, path string }{
		"not an object":     {`"2024-05-01"`, "/body/effective_time_frame"},
		"no offset":         {`{"date_time": "2024-05-01T09:00:00"}`, "/body/effective_time_frame/date_time"},
		"unknown unit":      {`{"time_interval": {"start_date_time": "2024-05-01T10:00:00Z", "duration": {"value": 1, "unit": "fortnight"}}}`, "/body/effective_time_frame/time_interval/duration"},
		"negative duration": {`{"time_interval": {"start_date_time": "2024-05-01T10:00:00Z", "duration": {"value": -1, "unit": "h"}}}`, "/body/effective_time_frame/time_interval/duration"},
		"negative, from the end": {`{"time_interval": {"end_date_time": "2024-05-01T10:00:00Z", "duration": {"value": -0.5, "unit": "Mo"}}}`,
			"/body/effective_time_frame/time_interval/duration"},
		"string duration":       {`{"time_interval": {"start_date_time": "2024-05-01T10:00:00Z", "duration": {"value": "1", "unit": "h"}}}`, "/body/effective_time_frame/time_interval/duration"},
		"ends before start":     {`{"time_interval": {"start_date_time": "2024-05-02T10:00:00Z", "end_date_time": "2024-05-01T10:00:00Z"}}`, "/body/effective_time_frame/time_interval"},
		"unknown part":          {`{"time_interval": {"date": "2024-05-01", "part_of_day": "dusk"}}`, "/body/effective_time_frame/time_interval/part_of_day"},
		"start only":            {`{"time_interval": {"start_date_time": "2024-05-01T10:00:00Z"}}`, "/body/effective_time_frame/time_interval"},
		"huge duration":         {`{"time_interval": {"start_date_time": "2024-05-01T10:00:00Z", "duration": {"value": 1e300, "unit": "yr"}}}`, "/body/effective_time_frame/time_interval/duration"},
		"a second 60 mid-day":   {`{"date_time": "2016-12-31T12:59:60Z"}`, "/body/effective_time_frame/date_time"},
		"a second 60 mid-month": {`{"date_time": "2016-12-30T23:59:60Z"}`, "/body/effective_time_frame/date_time"},
		"a bad end":             {`{"time_interval": {"start_date_time": "2024-05-01T10:00:00Z", "end_date_time": "soon"}}`, "/body/effective_time_frame/time_interval/end_date_time"},
	} {
		dp, err := omh.Parse(dataPoint("x", `{"effective_time_frame": `+tc.frame+`}`))
		if err != nil {
			t.Fatal(err)
		}
		tf, err := omh.EffectiveTimeFrame(dp.Body)
		var fe *omh.TimeFrameError
		if !errors.As(err, &fe) || fe.Path != tc.path {
			t.Errorf("%s: %+v, %v; want an error at %s", name, tf, err, tc.path)
		}
	}
}

// FuzzTimeFrame feeds arbitrary JSON to the time frame reader: it may
// refuse, never panic, and what it accepts is ordered.
func FuzzTimeFrame(f *testing.F) {
	for _, seed := range []string{
		`{"date_time": "2024-05-01T09:30:00.25+02:00"}`,
		`{"time_interval": {"start_date_time": "2024-01-31T00:00:00Z", "duration": {"value": 1.5, "unit": "Mo"}}}`,
		`{"time_interval": {"end_date_time": "2024-05-15T00:00:00+01:00", "duration": {"value": 2, "unit": "wk"}}}`,
		`{"time_interval": {"date": "2024-05-01", "part_of_day": "evening"}}`,
		`{"time_interval": {"start_date_time": "0001-01-01T00:00:00Z", "duration": {"value": 1e18, "unit": "ps"}}}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, frame string) {
		dp, err := omh.Parse(dataPoint("x", `{"effective_time_frame": `+frame+`}`))
		if err != nil {
			return
		}
		if tf, err := omh.EffectiveTimeFrame(dp.Body); err == nil && tf != nil && tf.End.Before(tf.Start) {
			t.Fatalf("%s: ends before it starts: %+v", frame, tf)
		}
	})
}

// FuzzParseDateTime: what Go's RFC 3339 parser reads is read the same; a
// second 60 is taken only as a leap second, the instant before a UTC month
// begins, and reads as that instant.
func FuzzParseDateTime(f *testing.F) {
	for _, seed := range []string{"2016-12-31T23:59:60Z", "2015-06-30T16:59:60.5-07:00", "2016-12-31T12:59:60Z", "2024-05-01t09:00:00z",
		"0000-01-01T00:00:00Z", "2024-02-29T23:59:60+00:00", "9999-12-31T23:59:60Z", "2024-05-01T09:00:00"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := omh.ParseDateTime(s)
		upper := strings.ToUpper(s)
		if want, werr := time.Parse(time.RFC3339Nano, upper); werr == nil && want.Year() >= 1 {
			if err != nil || !got.Equal(want) {
				t.Fatalf("%q: %v %v, Go reads %v", s, got, err, want)
			}
			return
		}
		if err != nil {
			return
		}
		if got.Year() < 1 || got.Year() > 9999 {
			t.Fatalf("%q: out of range: %v", s, got)
		}
		if u := got.UTC().Truncate(time.Second); len(upper) < 19 || upper[17:19] != "60" || u.Day() != 1 || u.Hour() != 0 || u.Minute() != 0 || u.Second() != 0 {
			t.Fatalf("%q: read as %v, which is no leap second", s, got)
		}
	})
}
