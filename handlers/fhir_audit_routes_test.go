package handlers_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/repo/repotest"
)

// TestEverySearchAboutAPatientIsAudited walks every FHIR type and every
// parameter that scopes a search to a patient (patient=, subject=,
// patient.identifier=; in the native store and the imported one, the
// count alone with _summary=count too) and checks that each search left an
// event naming the patient, whatever it returned: a list of the
// patient's studies or devices, a count, an empty page. The old service
// recorded no event for Group?patient= or Device?patient=, and
// Observation?patient=N&_summary=count without the patient. Reading the
// audit trail itself is not recorded, and is left out.
func TestEverySearchAboutAPatientIsAudited(t *testing.T) {
	w := newWorldWith(t, handlerstest.Options{Audit: true})
	P := w.patient.ID
	if _, err := w.env.Service.UpdatePatient(w.ctx, sys, P, domain.PatientPatch{AddIdentifiers: []domain.Identifier{{System: "urn:mrn", Value: "A-1"}}}); err != nil {
		t.Fatal(err)
	}
	type search struct{ path, requestID string }
	var searches []search
	for i, path := range patientSearches(t, P, "urn:mrn|A-1") {
		searches = append(searches, search{path: path, requestID: fmt.Sprintf("walk-%d", i)})
	}
	for _, s := range searches {
		resp, out := handlerstest.SendTo(t, "GET", w.env.URL+s.path, w.tokens["member"], nil, map[string]string{"X-Request-Id": s.requestID})
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d %v", s.path, resp.StatusCode, out)
		}
	}
	// The trail writes at least every second.
	events := repotest.Collection(t, w.env.DB, "audit_events")
	missing := searches
	for deadline := time.Now().Add(10 * time.Second); len(missing) > 0 && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		missing = slices.DeleteFunc(missing, func(s search) bool {
			n, err := events.CountDocuments(context.Background(), bson.M{"requestId": s.requestID, "patientIds": P})
			return err == nil && n > 0
		})
	}
	for _, s := range missing {
		t.Errorf("GET %s left no event naming Patient/%d", s.path, P)
	}
	t.Logf("%d searches about a patient, each audited", len(searches)-len(missing))
}

// patientSearches are the FHIR searches about one patient: every type
// and every parameter that scopes a search to a patient (patient=,
// subject=, patient.identifier=, the latter with identifier), in the
// native store and the imported one, each also as a count alone
// (_summary=count). AuditEvent is left out: reading the trail is not
// recorded.
func patientSearches(t *testing.T, patient int64, identifier string) []string {
	t.Helper()
	_, catalog := handlerstest.R5(t)
	imported := url.Values{"_source:below": {handlerstest.SourceBase + "/"}}
	var searches []string
	for _, r := range catalog.Resources() {
		if r.Type == "AuditEvent" {
			continue
		}
		for _, p := range r.Params {
			var value string
			switch p.Join {
			case domain.JoinPatient:
				value = fmt.Sprint(patient)
			case domain.JoinPatientIdentifier:
				value = identifier
			default:
				continue
			}
			var stores []url.Values
			if p.Native() && r.Collection != "" {
				stores = append(stores, url.Values{})
			}
			if p.Imported && r.Imported {
				stores = append(stores, imported)
			}
			for _, store := range stores {
				for _, summary := range []string{"", "count"} {
					q := url.Values{p.Name: {value}}
					for k, v := range store {
						q[k] = v
					}
					if summary != "" {
						q.Set("_summary", summary)
					}
					searches = append(searches, "/FHIR/R5/"+r.Type+"?"+q.Encode())
				}
			}
		}
	}
	if len(searches) < 20 {
		t.Fatalf("only %d searches: the catalog's patient parameters were not found", len(searches))
	}
	return searches
}

// refusingTrail is an audit trail that refuses every event while
// refusing is set, as one whose database cannot take a write.
type refusingTrail struct {
	domain.Auditor // the trail behind; nil: none
	refusing       atomic.Bool
}

func (r *refusingTrail) Record(ctx context.Context, e domain.AuditEvent) error {
	if r.refusing.Load() {
		return domain.Errorf(domain.CodeUnavailable, "the audit trail cannot record this request now")
	}
	if r.Auditor == nil {
		return nil
	}
	return r.Auditor.Record(ctx, e)
}

// TestNoPatientDataGoesOutUnaudited: while the audit trail cannot keep
// an event, every route that reads a patient's data answers 503 without
// the data: every FHIR search about the patient (counts and the study or
// device lists included), the reads of the record, the admin API's reads
// and lookup, and the download of a finished Bulk Data export. The old
// service answered the lookup and the download all the same.
func TestNoPatientDataGoesOutUnaudited(t *testing.T) {
	trail := &refusingTrail{}
	w := exporting(t, handlerstest.Options{Auditor: func(a domain.Auditor) domain.Auditor { trail.Auditor = a; return trail }})
	w.exportData(t)
	resp, status := w.kickOff(t, "GET", "/Patient/$export", w.tok["alice"], nil, "")
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("alice's export: %d", resp.StatusCode)
	}
	var files []string
	for _, o := range fxArr(w.exportManifest(t, status, w.tok["alice"])["output"]) {
		files = append(files, fmt.Sprint(fxObj(o)["url"]))
	}
	if len(files) == 0 {
		t.Fatal("alice's export has no file")
	}
	A := w.alice.ID
	reads := append(patientSearches(t, A, fxMRN+"|A-1"),
		fmt.Sprintf("/FHIR/R5/Patient/%d", A),
		fmt.Sprintf("/api/v1/patients/%d", A),
		fmt.Sprintf("/api/v1/patients/%d/consents", A),
		"/api/v1/patients?"+url.Values{"name": {"Ødegård"}}.Encode(),
		"/api/v1/patients/global_lookup?email=alice@example.org")
	trail.refusing.Store(true)
	for _, path := range reads {
		resp, body := fxGetAbs(t, w.env.URL+path, w.tok["doc"], nil)
		if resp.StatusCode != http.StatusServiceUnavailable || bytes.Contains(body, []byte("Ødegård")) {
			t.Errorf("GET %s with the trail refusing: %d %.200s", path, resp.StatusCode, body)
		}
	}
	for _, link := range files {
		resp, body := fxGetAbs(t, link, w.tok["alice"], nil)
		if resp.StatusCode != http.StatusServiceUnavailable || bytes.Contains(body, []byte(`"resourceType"`)) && !bytes.Contains(body, []byte("OperationOutcome")) {
			t.Errorf("export file %s with the trail refusing: %d %.200s", link, resp.StatusCode, body)
		}
	}
	trail.refusing.Store(false)
	if resp, body := fxGetAbs(t, w.env.URL+"/api/v1/patients/global_lookup?email=alice@example.org", w.tok["doc"], nil); resp.StatusCode != http.StatusOK {
		t.Errorf("the lookup once the trail keeps events: %d %s", resp.StatusCode, body)
	}
}
