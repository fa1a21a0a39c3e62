package handlers

import (
	"net/url"
	"testing"

	"exchange/domain"
)

// FuzzExportRequest: whatever a kick-off's parameters hold, they are read
// into a request or refused as invalid (a 400), never a fault.
func FuzzExportRequest(f *testing.F) {
	for _, q := range []string{"", "_type=Patient,Observation&_since=2024-01-01T00:00:00Z", "_typeFilter=Observation%3Fcode%3Dx",
		"_outputFormat=ndjson&_elements=Observation.code,id", "patient=Patient/1,2", "_since=yesterday", "_until=2024-01-01T00:00:00.5%2B02:00",
		"_elements=a[x]", "x=1", "_type=&_type=,", "patient=Patient/01", "_outputFormat=application%2Fx-omh%2Bndjson&_elements=code"} {
		f.Add(q, false)
		f.Add(q, true)
	}
	f.Fuzz(func(t *testing.T, query string, lenient bool) {
		params, err := url.ParseQuery(query)
		if err != nil {
			return // the handler refuses a malformed query string before
		}
		for _, level := range []domain.ExportLevel{domain.ExportSystem, domain.ExportPatient, domain.ExportGroup} {
			req, err := exportRequest(level, params, lenient)
			if err != nil && domain.ErrorCode(err) != domain.CodeInvalid {
				t.Fatalf("%q: %v is not a 400", query, err)
			}
			if err == nil && (req.Format != domain.ExportFHIR && req.Format != domain.ExportOMH) {
				t.Fatalf("%q: format %q", query, req.Format)
			}
		}
	})
}
