package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
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
	_, catalog := handlerstest.R5(t)
	imported := url.Values{"_source:below": {handlerstest.SourceBase + "/"}}
	type search struct{ path, requestID string }
	var searches []search
	for _, r := range catalog.Resources() {
		if r.Type == "AuditEvent" {
			continue
		}
		for _, p := range r.Params {
			var value string
			switch p.Join {
			case domain.JoinPatient:
				value = fmt.Sprint(P)
			case domain.JoinPatientIdentifier:
				value = "urn:mrn|A-1"
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
					searches = append(searches, search{path: "/FHIR/R5/" + r.Type + "?" + q.Encode(), requestID: fmt.Sprintf("walk-%d", len(searches))})
				}
			}
		}
	}
	if len(searches) < 20 {
		t.Fatalf("only %d searches: the catalog's patient parameters were not found", len(searches))
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
