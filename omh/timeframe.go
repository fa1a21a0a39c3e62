package omh

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// TimeFrame is when a data point's measure applies: an instant or an
// interval. Start and End are UTC instants for indexing (equal for an
// instant); the strings are what FHIR's effective[x] shows, in the payload's
// own offsets.
type TimeFrame struct {
	Start, End time.Time
	// DateTime is set for an instant (effectiveDateTime); PeriodStart and
	// PeriodEnd for an interval (effectivePeriod).
	DateTime               string
	PeriodStart, PeriodEnd string
}

// IsInstant reports whether the time frame is a point in time.
func (tf *TimeFrame) IsInstant() bool { return tf.DateTime != "" }

// fhirDateTime renders a time as a FHIR dateTime (and instant): upper-case
// T and Z, the time's own offset, fractional seconds only when present.
const fhirDateTime = "2006-01-02T15:04:05.999999999Z07:00"

// maxFHIROffset is the largest UTC offset a FHIR dateTime can carry (RFC
// 3339 allows up to 23:59).
const maxFHIROffset = 14 * 60 * 60

// formatFHIR renders a time as a FHIR dateTime in its own offset, or in UTC
// when the offset is beyond what FHIR allows.
func formatFHIR(t time.Time) string {
	if _, offset := t.Zone(); offset > maxFHIROffset || offset < -maxFHIROffset {
		t = t.UTC()
	}
	return t.Format(fhirDateTime)
}

// EffectiveTimeFrame reads body.effective_time_frame: nil and no error when
// the body has none. The shapes are a date_time; a time_interval with
// start and end, start and duration, end and duration, or (Open mHealth
// only) a date and part_of_day. IEEE 1752's time-frame-1.0 has the same
// shapes but the last, so it reads the same. A time frame it cannot read
// (an interval that ends before it starts, a negative duration: what the
// schemas cannot say) is a *TimeFrameError whose path is in the data
// point, such as /body/effective_time_frame/time_interval.
func EffectiveTimeFrame(body map[string]any) (*TimeFrame, error) {
	v, ok := body["effective_time_frame"]
	if !ok {
		return nil, nil
	}
	tf, err := ParseTimeFrame(v)
	if err == nil {
		// Before fe, which errors.As moves to the heap: every upload
		// reads a time frame, and nearly none fails.
		return tf, nil
	}
	var fe *TimeFrameError
	if errors.As(err, &fe) {
		return nil, &TimeFrameError{Path: "/body/effective_time_frame" + fe.Path, Problem: fe.Problem}
	}
	return tf, err
}

// TimeFrameError says what is wrong with a time frame, and where: Path is
// a JSON pointer to the member at fault, from the time frame (or, from
// EffectiveTimeFrame, from the data point).
type TimeFrameError struct {
	Path    string
	Problem string
}

func (e *TimeFrameError) Error() string {
	if e.Path == "" {
		return e.Problem
	}
	return e.Path + ": " + e.Problem
}

// frameErrorf is a *TimeFrameError at path.
func frameErrorf(path, format string, args ...any) error {
	return &TimeFrameError{Path: path, Problem: fmt.Sprintf(format, args...)}
}

// ParseTimeFrame reads an Open mHealth or IEEE 1752 time frame object,
// saying what is wrong with a *TimeFrameError.
func ParseTimeFrame(v any) (*TimeFrame, error) {
	frame, ok := v.(map[string]any)
	if !ok {
		return nil, frameErrorf("", "the time frame is not an object")
	}
	if dt, ok := frame["date_time"]; ok {
		t, err := dateTimeAt("/date_time", dt)
		if err != nil {
			return nil, err
		}
		return &TimeFrame{Start: t.UTC(), End: t.UTC(), DateTime: formatFHIR(t)}, nil
	}
	const at = "/time_interval"
	interval, ok := frame["time_interval"].(map[string]any)
	if !ok {
		return nil, frameErrorf("", "the time frame has neither date_time nor a time_interval object")
	}
	start, hasStart := interval["start_date_time"]
	end, hasEnd := interval["end_date_time"]
	dur, hasDur := interval["duration"]
	switch {
	case hasStart && hasEnd:
		s, err := dateTimeAt(at+"/start_date_time", start)
		if err != nil {
			return nil, err
		}
		e, err := dateTimeAt(at+"/end_date_time", end)
		if err != nil {
			return nil, err
		}
		return period(at, s, e)
	case hasStart && hasDur:
		s, err := dateTimeAt(at+"/start_date_time", start)
		if err != nil {
			return nil, err
		}
		e, err := addDuration(s, dur, 1)
		if err != nil {
			return nil, frameErrorf(at+"/duration", "%v", err)
		}
		return period(at, s, e)
	case hasEnd && hasDur:
		e, err := dateTimeAt(at+"/end_date_time", end)
		if err != nil {
			return nil, err
		}
		s, err := addDuration(e, dur, -1)
		if err != nil {
			return nil, frameErrorf(at+"/duration", "%v", err)
		}
		return period(at, s, e)
	}
	date, hasDate := interval["date"].(string)
	part, hasPart := interval["part_of_day"].(string)
	if hasDate && hasPart {
		day, err := time.Parse(time.DateOnly, date)
		if err != nil {
			return nil, frameErrorf(at+"/date", "%q is not a date (YYYY-MM-DD)", date)
		}
		hours, ok := partsOfDay[part]
		if !ok {
			return nil, frameErrorf(at+"/part_of_day", "%q is not morning, afternoon, evening or night", part)
		}
		return period(at, day.Add(time.Duration(hours[0])*time.Hour), day.Add(time.Duration(hours[1])*time.Hour))
	}
	return nil, frameErrorf(at, "the time_interval is none of start+end, start+duration, end+duration, date+part_of_day")
}

// dateTimeAt reads the date-time at path.
func dateTimeAt(path string, v any) (time.Time, error) {
	s, ok := v.(string)
	if !ok {
		return time.Time{}, frameErrorf(path, "is not a string")
	}
	t, err := ParseDateTime(s)
	if err != nil {
		return time.Time{}, &TimeFrameError{Path: path, Problem: err.Error()}
	}
	return t, nil
}

// partsOfDay are the hours of each part of the day, in UTC (a full_date
// carries no offset).
var partsOfDay = map[string][2]int{"night": {0, 6}, "morning": {6, 12}, "afternoon": {12, 18}, "evening": {18, 24}}

// period is the interval at path from start to end; one that ends before
// it starts is refused.
func period(path string, start, end time.Time) (*TimeFrame, error) {
	if end.Before(start) {
		return nil, frameErrorf(path, "the interval ends (%s) before it starts (%s)", end.Format(fhirDateTime), start.Format(fhirDateTime))
	}
	return &TimeFrame{Start: start.UTC(), End: end.UTC(), PeriodStart: formatFHIR(start), PeriodEnd: formatFHIR(end)}, nil
}

// ParseDateTime reads an RFC 3339 date-time; OMH requires the offset.
// RFC 3339 allows a lower-case t and z, which Go's layout does not, and a
// leap second (second 60), which Go's parser refuses: a leap second, which
// ends a month in UTC (23:59:60Z), reads as the instant after it, the
// first of the next month, as POSIX clocks count it; a second 60 anywhere
// else is refused.
func ParseDateTime(s string) (time.Time, error) {
	upper := strings.ToUpper(s)
	leap := len(upper) > 19 && upper[10] == 'T' && upper[17:19] == "60"
	if leap {
		upper = upper[:17] + "59" + upper[19:]
	}
	t, err := time.Parse(time.RFC3339Nano, upper)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not an RFC 3339 date-time with an offset", s)
	}
	if leap {
		if after := t.Add(time.Second).UTC(); after.Day() != 1 || after.Hour() != 0 || after.Minute() != 0 || after.Second() != 0 {
			return time.Time{}, fmt.Errorf("%q is not a leap second: one is 23:59:60 UTC on the last day of a month", s)
		}
		t = t.Add(time.Second)
	}
	if t.Year() < 1 || t.Year() > 9999 {
		return time.Time{}, fmt.Errorf("%q is out of range", s)
	}
	return t, nil
}

// nanoseconds gives the length of each OMH duration unit of fixed length.
var nanoseconds = map[string]float64{
	"ps": 1e-3, "ns": 1, "us": 1e3, "ms": 1e6, "sec": 1e9, "min": 60e9, "h": 3600e9, "d": 86400e9, "wk": 7 * 86400e9,
}

// addDuration moves t by sign times an OMH duration {value, unit}. Months
// and years are calendar arithmetic: whole ones with the calendar (see
// addMonths), a fraction as that share of the following month or year.
func addDuration(t time.Time, v any, sign int) (time.Time, error) {
	d, ok := v.(map[string]any)
	if !ok {
		return time.Time{}, fmt.Errorf("is not an object {value, unit}")
	}
	value, err := number(d["value"])
	if err != nil || value < 0 || math.IsInf(value, 0) || math.IsNaN(value) {
		return time.Time{}, fmt.Errorf("value must be a number of 0 or more: a negative duration would end the interval before it starts")
	}
	unit, _ := d["unit"].(string)
	if size, ok := nanoseconds[unit]; ok {
		span := value * size
		if span > float64(math.MaxInt64/2) {
			return time.Time{}, fmt.Errorf("is too long")
		}
		return t.Add(time.Duration(float64(sign) * span)), nil
	}
	var months int
	switch unit {
	case "Mo":
		months = 1
	case "yr":
		months = 12
	default:
		return time.Time{}, fmt.Errorf("unit %q is not an OMH duration unit (ps, ns, us, ms, sec, min, h, d, wk, Mo, yr)", unit)
	}
	if value > 120000 {
		return time.Time{}, fmt.Errorf("is too long")
	}
	whole, frac := math.Modf(value)
	moved := addMonths(t, sign*months*int(whole))
	if frac > 0 {
		next := addMonths(moved, sign*months)
		moved = moved.Add(time.Duration(frac * float64(next.Sub(moved))))
	}
	return moved, nil
}

// addMonths moves t by calendar months, keeping the day of the month but
// holding it to the last day of a shorter month: 31 January and one month
// is 29 February (2024), not 2 March as time.AddDate would have it.
func addMonths(t time.Time, months int) time.Time {
	y, m, d := t.Date()
	first := time.Date(y, m+time.Month(months), 1, t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), t.Location())
	last := first.AddDate(0, 1, -1).Day()
	return first.AddDate(0, 0, min(d, last)-1)
}

// number reads a JSON number decoded as json.Number or float64.
func number(v any) (float64, error) {
	switch n := v.(type) {
	case json.Number:
		return n.Float64()
	case float64:
		return n, nil
	}
	return 0, fmt.Errorf("not a number")
}
