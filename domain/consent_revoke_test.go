package domain_test

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"testing"

	"exchange/domain"
	"exchange/fhirsearch"
)

// TestWithdrawnConsentIsSeenAtOnce: what a patient consented to share is
// read afresh on every request, though the scope codes it names are
// answered from the store's cache once read: after a withdrawal the code
// is no longer uploadable nor in the study view, after re-consent it is
// again, and after the patient leaves the study its view holds nothing.
func TestWithdrawnConsentIsSeenAtOnce(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	const hr = "omh:heart-rate:2.0"
	body := func(day int) string {
		return fmt.Sprintf(`{"heart_rate": {"value": 70, "unit": "beats/min"}, "effective_time_frame": {"date_time": "2025-03-%02dT08:00:00Z"}}`, day)
	}
	consent := func(yes bool) {
		t.Helper()
		if err := w.f.svc.UpdateConsents(ctx, w.patientActor, w.patient.ID, []domain.StudyScopeConsents{{StudyID: w.study.ID,
			Scopes: []domain.ScopeConsent{{System: w.hr.System, Code: w.hr.Code, Consented: &yes}}}}); err != nil {
			t.Fatal(err)
		}
	}
	catalog, err := fhirsearch.NewCatalog(nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := fhirsearch.NewTranslator(catalog, []byte("key"), "https://exchange.example.org/fhir-source", nil)
	studyView := func() []string {
		t.Helper()
		q, err := tr.Parse("Observation", url.Values{"patient": {fmt.Sprint(w.patient.ID)}, "patient._has:Group:member:_id": {fmt.Sprint(w.study.ID)}}, true)
		if err != nil {
			t.Fatal(err)
		}
		groups, err := w.f.svc.ObservationsByCode(ctx, w.manager, q)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, g := range groups {
			out = append(out, fmt.Sprintf("%s:%d", g.Code, len(g.Observations)))
		}
		return out
	}
	send := func(n int) error { return tryUpload(w, w.patient, hr, body(n), n) }

	answer(t, w, w.patientActor, w.patient, w.hr, true)
	if err := send(1); err != nil {
		t.Fatalf("upload with consent: %v", err)
	}
	if got := studyView(); !slices.Equal(got, []string{hr + ":1"}) {
		t.Fatalf("study view with consent: %v", got)
	}

	consent(false)
	if err := send(2); err == nil {
		t.Error("upload after the consent was withdrawn: stored")
	}
	if got := studyView(); got != nil {
		t.Errorf("study view after the consent was withdrawn: %v, want nothing", got)
	}

	consent(true)
	if err := send(3); err != nil {
		t.Fatalf("upload after consenting again: %v", err)
	}
	if got := studyView(); !slices.Equal(got, []string{hr + ":2"}) {
		t.Fatalf("study view after consenting again: %v", got)
	}

	if err := w.f.svc.UnenrollPatients(ctx, domain.SystemActor(), w.study.ID, []int64{w.patient.ID}); err != nil {
		t.Fatal(err)
	}
	if got := studyView(); got != nil {
		t.Errorf("study view after the patient left the study: %v, want nothing", got)
	}
	if err := send(4); err == nil {
		t.Error("upload after the patient left the study (and its consents with it): stored")
	}
}
