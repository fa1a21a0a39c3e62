package console_test

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"exchange/handlers/handlerstest"
)

// TestHomeSaysTheStoreIsPastItsSize: once the embedded database is past
// the size it searches comfortably, staff read it on the console's home
// page, with the count; a patient, who can do nothing about it, does not.
func TestHomeSaysTheStoreIsPastItsSize(t *testing.T) {
	env := handlerstest.StartWith(t, handlerstest.Options{ComfortableObservations: 2, Logger: slog.New(slog.DiscardHandler)})
	env.Practitioner(t, "staff@example.org", false)
	env.Patient(t, "pat@example.org")
	staff, patient := signIn(t, env, "staff", "staff@example.org"), signIn(t, env, "patient", "pat@example.org")
	observe := func(n int) { env.AddBareObservations(t, n) }
	const notice = "The embedded database is past its comfortable size"
	home := func(c *caller) string {
		t.Helper()
		resp, page := c.b.Do("GET", env.URL+"/console/", nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s's home: %d", c.name, resp.StatusCode)
		}
		return page
	}
	observe(2)
	if page := home(staff); strings.Contains(page, notice) {
		t.Errorf("staff's home within the size shows the notice:\n%s", page)
	}
	observe(1)
	if page := home(staff); !strings.Contains(page, notice) || !strings.Contains(page, "it holds 3 observations") ||
		!strings.Contains(page, "MONGODB_URI") {
		t.Errorf("staff's home past the size lacks the notice:\n%s", page)
	}
	if page := home(patient); strings.Contains(page, notice) || strings.Contains(page, "MONGODB_URI") {
		t.Errorf("a patient's home shows the store's size:\n%s", page)
	}
}
