package handlers_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestAdminRoutesRefuseUnknownParameters sends every route of the admin
// API with a parameter none reads: each answers 400 {"detail": "unknown
// parameter X"} before anything else, so a route added later refuses
// them too, unless it declares them.
func TestAdminRoutesRefuseUnknownParameters(t *testing.T) {
	w := admNewWorld(t)
	routes := 0
	for _, route := range w.env.Routes {
		method, path, _ := strings.Cut(route, " ")
		if !strings.HasPrefix(path, "/api/v1/") || method == "HEAD" {
			continue
		}
		routes++
		path = strings.NewReplacer(":id", "1", ":userId", "1", ":invitationId", "x", ":scopeCodeId", "1", ":dataSourceId", "1",
			":namespace", "omh", ":name", "heart-rate", ":version", "2.0").Replace(path)
		for _, query := range []string{"colour=blue", "page=1&colour=blue", "studyid=1"} {
			resp, out := w.env.Send(t, method, path+"?"+query, w.admin, nil)
			if method == "GET" {
				query = strings.TrimPrefix(query, "page=1&") // page is a GET's
			}
			name, _, _ := strings.Cut(query, "=")
			if resp.StatusCode != http.StatusBadRequest || out["detail"] != "unknown parameter "+name || len(out) != 1 {
				t.Errorf("%s %s?%s: %d %v, want 400 unknown parameter %s", method, path, query, resp.StatusCode, out, name)
			}
		}
	}
	if routes < 50 {
		t.Fatalf("only %d routes of the admin API", routes)
	}
	// The paging parameters belong to GET.
	w.call(t, "PATCH", fmt.Sprintf("/api/v1/organizations/%d?page=1", w.org.ID), w.manager, map[string]any{"name": "Hospital"}, http.StatusBadRequest, "page")
	// No token: 401 first, whatever the parameters.
	w.call(t, "GET", "/api/v1/patients?colour=blue", "", nil, http.StatusUnauthorized)
}
