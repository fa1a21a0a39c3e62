package handlers_test

import (
	"net/http"
	"slices"
	"testing"
)

// The directory: superusers search by a part of the email; a manager looks
// up a practitioner to add by the exact email and learns their id, email
// and type only, never of a patient; anyone else is refused.
func TestUsersSearchByEmail(t *testing.T) {
	w := admNewWorld(t)
	alice := w.practitioner(t, "Alice.Smith@Example.org")
	bob := w.practitioner(t, "bob@smithfield.example.net")
	w.practitioner(t, "carol@example.com")
	patient := w.patient(t, "dave.smith@example.org", "Smith", "Dave", w.org.ID)

	search := func(token, part string) []int64 {
		t.Helper()
		list := w.call(t, "GET", "/api/v1/users?email="+part, token, nil, http.StatusOK)
		if int(list["count"].(float64)) != len(admResults(t, list)) {
			t.Errorf("count %v for %d results", list["count"], len(admResults(t, list)))
		}
		return admIDs(t, list)
	}
	// A superuser: a part of the address, any case; patients are found too
	// (they are users), in id order.
	if got, want := search(w.admin, "SMITH"), []int64{alice.ID, bob.ID, patient.UserID}; !slices.Equal(got, want) {
		t.Errorf("email=SMITH: %v, want %v", got, want)
	}
	if got := search(w.admin, "ice.smith%40ex"); !slices.Equal(got, []int64{alice.ID}) {
		t.Errorf("email=ice.smith@ex: %v, want [%d]", got, alice.ID)
	}
	// Regular expression characters are literal.
	if got := search(w.admin, ".%2A"); len(got) != 0 {
		t.Errorf("email=.*: %v, want none", got)
	}
	one := admResults(t, w.call(t, "GET", "/api/v1/users?email=alice", w.admin, nil, http.StatusOK))
	if len(one) != 1 || one[0]["email"] != "alice.smith@example.org" || one[0]["userType"] != "practitioner" || one[0]["isSuperuser"] != false ||
		one[0]["firstName"] != "Pat" {
		t.Errorf("alice: %v", one)
	}
	if _, leaked := one[0]["passwordHash"]; leaked {
		t.Error("the user list shows password hashes")
	}
	if got, want := admKeys(one[0]), []string{"email", "firstName", "id", "isSuperuser", "lastName", "userType"}; !slices.Equal(got, want) {
		t.Errorf("user keys %v, want %v", got, want)
	}
	// Without a filter: everyone (admin, 3 staff, 3 here, 1 patient).
	if all := w.call(t, "GET", "/api/v1/users", w.admin, nil, http.StatusOK); all["count"] != float64(8) {
		t.Errorf("all users: %v", all["count"])
	}

	// A manager: the exact address, trimmed, any case; a practitioner only.
	found := admResults(t, w.call(t, "GET", "/api/v1/users?email=+ALICE.smith%40example.ORG+", w.manager, nil, http.StatusOK))
	if len(found) != 1 || found[0]["id"] != float64(alice.ID) || found[0]["email"] != "alice.smith@example.org" ||
		found[0]["userType"] != "practitioner" || found[0]["firstName"] != "" || found[0]["lastName"] != "" {
		t.Errorf("a manager's lookup of alice: %v", found)
	}
	if got := search(w.manager, "dave.smith%40example.org"); len(got) != 0 {
		t.Errorf("a manager's lookup of a patient: %v, want none", got)
	}
	if got := search(w.manager, "nobody%40example.org"); len(got) != 0 {
		t.Errorf("a lookup of nobody: %v", got)
	}
	for _, part := range []string{"smith", "", "%40example.org"} {
		w.call(t, "GET", "/api/v1/users?email="+part, w.manager, nil, http.StatusBadRequest, "email")
	}
	for _, token := range []string{w.member, w.viewer, w.env.Token(t, patient.UserID)} {
		w.call(t, "GET", "/api/v1/users?email=alice.smith%40example.org", token, nil, http.StatusForbidden)
	}
	w.call(t, "GET", "/api/v1/users?email=smith", "", nil, http.StatusUnauthorized)
}
