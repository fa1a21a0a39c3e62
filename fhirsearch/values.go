package fhirsearch

import (
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"exchange/domain"
)

// splitOR splits a parameter value on the commas that are not escaped
// (\,), and unescapes \, \| and \$ in the parts.
func splitOR(v string) []string {
	var parts []string
	var cur strings.Builder
	for i := 0; i < len(v); i++ {
		switch {
		case v[i] == '\\' && i+1 < len(v) && strings.IndexByte(",|$\\", v[i+1]) >= 0:
			if v[i+1] == '|' {
				cur.WriteString(`\|`) // kept escaped for the token split
			} else {
				cur.WriteByte(v[i+1])
			}
			i++
		case v[i] == ',':
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(v[i])
		}
	}
	return append(parts, cur.String())
}

// Token is a parsed token value: the keys a token field holds for it.
type Token struct {
	System, Code string
	HasSystem    bool // system|code, |code, system|; false for a bare code
}

// parseToken reads system|code, |code, code or system|.
func parseToken(param, v string) (Token, error) {
	i := unescapedPipe(v)
	if i < 0 {
		code := unescapePipes(v)
		if code == "" {
			return Token{}, domain.Errorf(domain.CodeInvalid, "%s: an empty value", param)
		}
		return Token{Code: code}, nil
	}
	t := Token{System: unescapePipes(v[:i]), Code: unescapePipes(v[i+1:]), HasSystem: true}
	if t.System == "" && t.Code == "" {
		return Token{}, domain.Errorf(domain.CodeInvalid, "%s: %q names neither a system nor a code", param, v)
	}
	return t, nil
}

func unescapedPipe(v string) int {
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' {
			i++
			continue
		}
		if v[i] == '|' {
			return i
		}
	}
	return -1
}

func unescapePipes(v string) string { return strings.ReplaceAll(v, `\|`, "|") }

// Key returns the string a token field holds for this value: system|code,
// |code (no system), code (any system) or system| (any code).
func (t Token) Key() string {
	if !t.HasSystem {
		return t.Code
	}
	return t.System + "|" + t.Code
}

// TokenKeys returns every key a stored coding answers to, so that each form
// of a token search is one equality on a multikey field.
func TokenKeys(system, code string) []string {
	tokens, n := TokenKeyTokens(system, code)
	keys := make([]string, n)
	for i, t := range tokens[:n] {
		keys[i] = t.Key()
	}
	return keys
}

// TokenKeyTokens returns the first n of tokens, whose Keys are TokenKeys'
// keys, in order, without making them: a writer of stored documents
// writes each straight from its parts.
func TokenKeyTokens(system, code string) (tokens [3]Token, n int) {
	if system == "" {
		return [3]Token{{Code: code, HasSystem: true}, {Code: code}}, 2
	}
	return [3]Token{{System: system, Code: code, HasSystem: true}, {Code: code}, {System: system, HasSystem: true}}, 3
}

// prefixes are the FHIR comparators of date (and number) values.
var prefixes = []string{"eq", "ne", "gt", "lt", "ge", "le", "sa", "eb", "ap"}

// DateRange is a parsed date value: the comparator and the half-open
// interval [Low, High) the value's precision spans.
type DateRange struct {
	Prefix    string
	Low, High time.Time
}

var dateValue = regexp.MustCompile(`^([0-9]{4})(?:-([0-9]{2})(?:-([0-9]{2})(?:T([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]{1,9}))?)?(Z|[+-][0-9]{2}:[0-9]{2})?)?)?)?$`)

// parseDate reads [prefix]date: a FHIR date, dateTime or instant of any
// precision; a time without an offset is UTC.
func parseDate(param, v string) (DateRange, error) {
	r := DateRange{Prefix: "eq"}
	// A comparator is two letters before the date's first digit.
	if len(v) >= 3 && v[0] >= 'a' && v[0] <= 'z' && v[2] >= '0' && v[2] <= '9' {
		p := v[:2]
		found := false
		for _, known := range prefixes {
			if p == known {
				found = true
			}
		}
		if !found {
			return r, domain.Errorf(domain.CodeInvalid, "%s: %q is not a comparator (eq, ne, gt, lt, ge, le, sa, eb, ap)", param, p)
		}
		r.Prefix, v = p, v[2:]
	}
	m := dateValue.FindStringSubmatch(v)
	if m == nil {
		return r, domain.Errorf(domain.CodeInvalid, "%s: %q is not a date (YYYY, YYYY-MM, YYYY-MM-DD or a dateTime)", param, v)
	}
	n := func(s string, def int) int {
		if s == "" {
			return def
		}
		i, _ := strconv.Atoi(s)
		return i
	}
	year, month, day := n(m[1], 0), n(m[2], 1), n(m[3], 1)
	hour, minute, sec := n(m[4], 0), n(m[5], 0), n(m[6], 0)
	if month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || sec > 59 {
		return r, domain.Errorf(domain.CodeInvalid, "%s: %q is not a valid date", param, v)
	}
	loc := time.UTC
	if zone := m[8]; zone != "" && zone != "Z" {
		t, err := time.Parse("-07:00", zone)
		if err != nil {
			return r, domain.Errorf(domain.CodeInvalid, "%s: %q has an invalid offset", param, v)
		}
		_, offset := t.Zone()
		loc = time.FixedZone(zone, offset)
	}
	nanos := 0
	if frac := m[7]; frac != "" {
		nanos, _ = strconv.Atoi((frac + "000000000")[:9])
	}
	low := time.Date(year, time.Month(month), day, hour, minute, sec, nanos, loc)
	if low.Day() != day { // 2023-02-30 rolled over
		return r, domain.Errorf(domain.CodeInvalid, "%s: %q is not a valid date", param, v)
	}
	var high time.Time
	switch {
	case m[2] == "":
		high = low.AddDate(1, 0, 0)
	case m[3] == "":
		high = low.AddDate(0, 1, 0)
	case m[4] == "":
		high = low.AddDate(0, 0, 1)
	case m[6] == "":
		high = low.Add(time.Minute)
	case m[7] == "":
		high = low.Add(time.Second)
	default:
		high = low.Add(time.Duration(math.Pow10(9 - len(m[7]))))
	}
	// Stored dates keep milliseconds: a finer value widens to the
	// milliseconds it touches, or [low, high) would round to nothing.
	if t := high.Truncate(time.Millisecond); !t.Equal(high) {
		high = t.Add(time.Millisecond)
	}
	r.Low, r.High = low.Truncate(time.Millisecond).UTC(), high.UTC()
	return r, nil
}

// parseID reads a native integer id, as in Patient/12 or 12 or a full URL
// ending in Type/12. Returns false for a value that cannot be one (a
// UUID of the imported store, say): it matches no native record.
func parseID(v, resourceType string) (int64, bool) {
	if strings.Contains(v, "/") {
		typ, id, ok := typeAndID(v)
		if !ok || (resourceType != "" && typ != resourceType) {
			return 0, false
		}
		v = id
	}
	return domain.ParseID(v)
}

// NumberValue is a parsed number or quantity value: the comparator, the
// number, the half-open range [Low, High) its significant digits span
// (100 spans [99.5, 100.5), 100.0 spans [99.95, 100.05)), and for a
// quantity the unit key it requires ("" for any unit).
type NumberValue struct {
	Prefix           string
	Value, Low, High float64
	Unit             string
}

var numberText = regexp.MustCompile(`^-?(?:0|[1-9][0-9]*)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?$`)

// parseNumber reads [prefix]number, and for a quantity
// [prefix]number|system|code or [prefix]number||code (code or unit).
func parseNumber(param, v string, quantity bool) (NumberValue, error) {
	n := NumberValue{Prefix: "eq"}
	number := v
	if quantity {
		if i := unescapedPipe(v); i >= 0 {
			number = v[:i]
			rest := v[i+1:]
			j := unescapedPipe(rest)
			if j < 0 {
				return n, domain.Errorf(domain.CodeInvalid, "%s: %q is not number, number|system|code or number||code", param, v)
			}
			system, code := unescapePipes(rest[:j]), unescapePipes(rest[j+1:])
			if code == "" || strings.Contains(code, "|") {
				return n, domain.Errorf(domain.CodeInvalid, "%s: %q names no unit code", param, v)
			}
			n.Unit = system + "|" + code
		}
	}
	if len(number) >= 3 && number[0] >= 'a' && number[0] <= 'z' {
		if !slices.Contains(prefixes, number[:2]) {
			return n, domain.Errorf(domain.CodeInvalid, "%s: %q is not a comparator (eq, ne, gt, lt, ge, le, sa, eb, ap)", param, number[:2])
		}
		n.Prefix, number = number[:2], number[2:]
	}
	m := numberText.FindStringSubmatch(number)
	f, err := strconv.ParseFloat(number, 64)
	if m == nil || err != nil || math.IsInf(f, 0) {
		return n, domain.Errorf(domain.CodeInvalid, "%s: %q is not a number", param, number)
	}
	exp, _ := strconv.Atoi(m[2])
	half := 0.5 * math.Pow10(exp-len(m[1]))
	n.Value, n.Low, n.High = f, f-half, f+half
	return n, nil
}
