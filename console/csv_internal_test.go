package console

import (
	"encoding/csv"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"exchange/domain"
)

// TestCSVNeutralisesFormulas: no cell of the CSV download starts with a
// character a spreadsheet reads as a formula (=, +, -, @, tab, carriage
// return), in any column: a data point's field names and values and the
// code alike; numbers stay numbers.
func TestCSVNeutralisesFormulas(t *testing.T) {
	payload := `{"header": {"id": "x"}, "body": {"=HYPERLINK(\"https://evil.example\",\"x\")": 1, "@SUM(A1)": "+cmd|' /C calc'!A0",
		"value": "-2+3", "tab": "\tx", "cr": "\rx", "number": -12.5, "positive": "+7"}}`
	groups := []domain.CodeObservations{{Code: "=evil", Observations: []domain.Observation{{ID: 1, Payload: []byte(payload)}}}}
	rec := httptest.NewRecorder()
	if err := writeCSV(rec, "data", groups); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(strings.NewReader(rec.Body.String())).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 8 {
		t.Fatalf("%d rows, want a header and 7 values: %q", len(rows), rows)
	}
	numbers := 0
	for _, row := range rows[1:] {
		for col, cell := range row {
			if cell == "" || !strings.ContainsAny(cell[:1], "=+-@\t\r") {
				continue
			}
			if _, err := strconv.ParseFloat(cell, 64); err == nil && col == 5 {
				numbers++
				continue
			}
			t.Errorf("column %s starts a formula: %q", rows[0][col], cell)
		}
	}
	if numbers != 2 {
		t.Errorf("%d signed numbers kept as numbers, want 2 (-12.5, +7)", numbers)
	}
}
