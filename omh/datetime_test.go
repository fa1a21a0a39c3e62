package omh_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"exchange/omh"
	"exchange/omh/omhtest"
)

// libraryDateTime is jsonschema v6's own date-time format check, as the
// registry's compiled schemas hold it.
func libraryDateTime(t testing.TB) func(any) error {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("mem:///s.json", map[string]any{"$schema": "http://json-schema.org/draft-07/schema#", "format": "date-time"}); err != nil {
		t.Fatal(err)
	}
	sch := c.MustCompile("mem:///s.json")
	if sch.Format == nil || sch.Format.Name != "date-time" {
		t.Fatal("the compiled schema has no date-time format")
	}
	return sch.Format.Validate
}

// dateTimeCases are date-times good and bad: every string of the schemas'
// test data, instants of many years formatted with offsets and fractions,
// and the edges of each field (leap days and seconds, out-of-range parts,
// odd separators).
func dateTimeCases(t testing.TB) []string {
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			out = append(out, v)
		case map[string]any:
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	for _, c := range omhtest.TestData(t) {
		walk(c.Value)
	}
	zones := []*time.Location{time.UTC, time.FixedZone("", 2*3600), time.FixedZone("", -(9*3600 + 30*60)), time.FixedZone("", 14*3600), time.FixedZone("", -12*3600)}
	for i := range 4000 {
		at := time.Date(1899+i%250, time.Month(1+i%12), 1+i%31, i%24, (i*7)%60, (i*13)%60, (i*7919)%1e9, zones[i%len(zones)])
		for _, layout := range []string{time.RFC3339, time.RFC3339Nano, "2006-01-02T15:04:05.000Z07:00", "2006-01-02t15:04:05z07:00"} {
			out = append(out, at.Format(layout))
		}
	}
	out = append(out, []string{
		"2024-02-29T00:00:00Z", "2023-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2000-02-29T00:00:00Z", "0000-02-29T00:00:00Z",
		"2024-04-31T00:00:00Z", "2024-04-30T00:00:00Z", "2024-12-31T23:59:59Z", "2024-00-10T00:00:00Z", "2024-13-10T00:00:00Z",
		"2024-01-00T00:00:00Z", "2024-01-32T00:00:00Z", "2024-01-01T24:00:00Z", "2024-01-01T23:60:00Z", "2024-01-01T23:59:60Z",
		"2024-06-30T23:59:60Z", "2024-06-30T22:59:60-01:00", "2024-06-30T23:59:60+00:00", "2024-06-30T12:00:60Z",
		"2024-01-01T00:00:00+24:00", "2024-01-01T00:00:00+23:59", "2024-01-01T00:00:00-00:60", "2024-01-01T00:00:00+0100",
		"2024-01-01T00:00:00.Z", "2024-01-01T00:00:00.5Z", "2024-01-01T00:00:00.123456789012Z", "2024-01-01T00:00:00,5Z",
		"2024-01-01 00:00:00Z", "2024-01-01T00:00:00", "2024-01-01T00:00:00ZZ", "2024-01-01T00:00:00z", "2024-01-01t00:00:00Z",
		"+024-01-01T00:00:00Z", "2024-1-01T00:00:00Z", "2024-01-01T0:00:00Z", "2024-01-01T00:0:00Z", "2024-01-01T00:00:0Z",
		"2024-01-01T+0:00:00Z", "2024-01-01T00:+0:00Z", "2024-01-01T00:00:00+-1:00", "2024-01-01T00:00:00+01:-1", "2024/01/01T00:00:00Z",
		"2024-01-01T00:00:00.\u0661Z", "2024-01-01T00:00:00+01:00\n", "２024-01-01T00:00:00Z", "2024-01-01T00:00:00.5+01:00",
	}...)
	return out
}

// TestPlainDateTime: every string the date-time shortcut passes, the
// library's check passes, over the schemas' test data and the cases
// above; and the shortcut passes the date-times devices write (the
// formats of time.RFC3339 and RFC3339Nano, fractions, offsets, lower
// case), so that it is a shortcut.
func TestPlainDateTime(t *testing.T) {
	lib := libraryDateTime(t)
	passed, libPassed := 0, 0
	for _, s := range dateTimeCases(t) {
		libErr := lib(s)
		if libErr == nil {
			libPassed++
		}
		if !omh.PlainDateTime(s) {
			continue
		}
		passed++
		if libErr != nil {
			t.Errorf("%q: the shortcut passes it, the library says %v", s, libErr)
		}
	}
	t.Logf("%d strings the library passes, %d of them by the shortcut", libPassed, passed)
	for i := range 2000 {
		at := time.Date(1970+i%100, time.Month(1+i%12), 1+i%28, i%24, i%60, i%60, i*100003, time.FixedZone("", (i%27-13)*3600))
		for _, s := range []string{at.Format(time.RFC3339), at.Format(time.RFC3339Nano), strings.ToLower(at.UTC().Format(time.RFC3339))} {
			if !omh.PlainDateTime(s) {
				t.Fatalf("%q: the shortcut leaves it to the library", s)
			}
		}
	}
}

// FuzzPlainDateTime: the shortcut never passes what the library's
// date-time check refuses.
func FuzzPlainDateTime(f *testing.F) {
	lib := libraryDateTime(f)
	for _, s := range dateTimeCases(f)[:200] {
		f.Add(s)
	}
	for _, s := range []string{"2024-06-30T23:59:60Z", "2024-02-29T10:00:00.5+01:00", "1900-02-29T00:00:00Z", "2024-01-01T00:00:00+23:59"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if omh.PlainDateTime(s) {
			if err := lib(s); err != nil {
				t.Fatalf("%q: the shortcut passes it, the library says %v", s, err)
			}
		}
	})
}

// TestPlainDateTimeGrid: over every month 00 to 13 and day 00 to 32 of
// leap and common years (1900 and 0000 too), and every hour 00 to 25
// with minutes, seconds and offsets at and past their ends, the shortcut
// passes exactly what the library passes, but the leap seconds (:60) it
// leaves to the library: a string of its shape is never passed wrongly,
// nor sent to the library for nothing.
func TestPlainDateTimeGrid(t *testing.T) {
	lib := libraryDateTime(t)
	compare := func(s string, leap bool) {
		t.Helper()
		want := lib(s) == nil && !leap
		if got := omh.PlainDateTime(s); got != want {
			t.Errorf("%q: the shortcut says %v, the library %v", s, got, lib(s))
		}
	}
	for _, year := range []string{"0000", "0004", "1900", "1996", "2000", "2023", "2024", "2100", "9999"} {
		for month := range 14 {
			for day := range 33 {
				compare(fmt.Sprintf("%s-%02d-%02dT12:30:30Z", year, month, day), false)
			}
		}
	}
	offsets := []string{"Z", "z", "+00:00", "-00:00", "+23:59", "-23:59", "+24:00", "-24:00", "+00:60", "-12:30", ".5Z", ".123456789+05:45"}
	for hour := range 26 {
		for _, minute := range []int{0, 59, 60} {
			for _, second := range []int{0, 59, 60, 61} {
				for _, offset := range offsets {
					compare(fmt.Sprintf("2016-12-31T%02d:%02d:%02d%s", hour, minute, second, offset), second == 60)
				}
			}
		}
	}
}
