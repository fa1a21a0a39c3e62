package handlers_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"exchange/handlers/handlerstest"
	"exchange/repo"
	"exchange/repo/repotest"
)

func TestMain(m *testing.M) { repotest.Main(m) }

func TestProfile(t *testing.T) {
	env := handlerstest.Start(t)
	ctx := context.Background()
	p := env.Patient(t, "pat@example.org")
	doc := env.Practitioner(t, "doc@example.org", false)
	patientToken, _, err := env.OAuth.IssueAccessToken(ctx, p.UserID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	docToken, _, _ := env.OAuth.IssueAccessToken(ctx, doc.ID, time.Hour)

	resp, body := env.GetJSON(t, "/api/v1/users/profile", patientToken)
	patient, _ := body["patient"].(map[string]any)
	if resp.StatusCode != http.StatusOK || body["email"] != "pat@example.org" || body["userType"] != "patient" ||
		body["isSuperuser"] != false || body["firstName"] != "Jo" || body["lastName"] != "Doe" || patient == nil ||
		patient["id"] != float64(p.ID) || patient["birthDate"] != "1980-01-02" {
		t.Fatalf("patient profile: %d %v", resp.StatusCode, body)
	}
	resp, body = env.GetJSON(t, "/api/v1/users/profile", docToken)
	if resp.StatusCode != http.StatusOK || body["userType"] != "practitioner" || body["patient"] != nil || body["id"] != float64(doc.ID) {
		t.Fatalf("practitioner profile: %d %v", resp.StatusCode, body)
	}
	if _, ok := body["patient"]; !ok {
		t.Error("profile must carry patient: null for practitioners")
	}
}

// TestABearerTokenReadsItsUserOnce: a request with a bearer token reads
// its user once, for the token's check (a password change or
// deactivation voids it) and the request's actor alike.
func TestABearerTokenReadsItsUserOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	env := handlerstest.StartWith(t, handlerstest.Options{DB: repo.Options{Metrics: repo.NewMetrics(reg)}})
	for _, u := range []struct {
		name   string
		userID int64
	}{{"patient", env.Patient(t, "pat@example.org").UserID}, {"practitioner", env.Practitioner(t, "doc@example.org", false).ID}} {
		token := env.Token(t, u.userID)
		before := repotest.Operations(t, reg, "users", "find")
		if resp, body := env.GetJSON(t, "/api/v1/users/profile", token); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s profile: %d %v", u.name, resp.StatusCode, body)
		}
		if n := repotest.Operations(t, reg, "users", "find") - before; n != 1 {
			t.Errorf("a %s's request read the user %d times, want once", u.name, n)
		}
	}
}

func TestErrorsAreRenderedPerSurface(t *testing.T) {
	env := handlerstest.Start(t)
	doc := env.Practitioner(t, "doc@example.org", false)
	token, _, _ := env.OAuth.IssueAccessToken(context.Background(), doc.ID, time.Hour)

	// The admin API answers {"detail": ...}.
	resp, body := env.GetJSON(t, "/api/v1/no-such-thing", token)
	if resp.StatusCode != http.StatusNotFound || body["detail"] == nil {
		t.Errorf("unknown admin route: %d %v", resp.StatusCode, body)
	}
	resp, body = env.GetJSON(t, "/api/v1/no-such-thing", "")
	if resp.StatusCode != http.StatusUnauthorized || body["detail"] == nil {
		t.Errorf("unknown admin route without a token: %d %v", resp.StatusCode, body)
	}
	// FHIR paths answer with an OperationOutcome.
	resp, body = env.GetJSON(t, "/FHIR/R5/NoSuchThing/1/2/3", token)
	issues, _ := body["issue"].([]any)
	if resp.StatusCode != http.StatusNotFound || body["resourceType"] != "OperationOutcome" || len(issues) != 1 ||
		resp.Header.Get("Content-Type") != "application/fhir+json" {
		t.Fatalf("unknown FHIR route: %d %s %v", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if issue := issues[0].(map[string]any); issue["severity"] != "error" || issue["code"] != "not-found" || issue["diagnostics"] == "" {
		t.Errorf("issue %v", issue)
	}
	// Routes are case-sensitive.
	if resp, _ := env.GetJSON(t, "/API/v1/users/profile", token); resp.StatusCode != http.StatusNotFound {
		t.Errorf("/API/v1: %d", resp.StatusCode)
	}
}
