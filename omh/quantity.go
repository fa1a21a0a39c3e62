package omh

import "encoding/json"

// SingleQuantity returns the one numeric value of a data point: the only
// member of its body that is a unit value ({"value": number, "unit":
// string}), as a heart rate, a glucose level or a step count has. A body
// with none or several (a blood pressure's systolic and diastolic) has no
// single value: ok is false.
func SingleQuantity(dataPoint map[string]any) (value float64, unit string, ok bool) {
	body, _ := dataPoint["body"].(map[string]any)
	found := 0
	for _, member := range body {
		m, isObject := member.(map[string]any)
		if !isObject {
			continue
		}
		u, hasUnit := m["unit"].(string)
		v, isNumber := numberOf(m["value"])
		if !hasUnit || !isNumber {
			continue
		}
		found++
		value, unit = v, u
	}
	if found != 1 {
		return 0, "", false
	}
	return value, unit, true
}

func numberOf(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	case int64:
		return float64(n), true
	}
	return 0, false
}
