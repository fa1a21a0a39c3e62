package handlers_test

import (
	"net/http"
	"slices"
	"testing"
)

func TestUsersSearchByEmail(t *testing.T) {
	w := admNewWorld(t)
	alice := w.practitioner(t, "Alice.Smith@Example.org")
	bob := w.practitioner(t, "bob@smithfield.example.net")
	w.practitioner(t, "carol@example.com")
	patient := w.patient(t, "dave.smith@example.org", "Smith", "Dave", w.org.ID)

	search := func(part string) []int64 {
		t.Helper()
		list := w.call(t, "GET", "/api/v1/users?email="+part, w.member, nil, http.StatusOK)
		if int(list["count"].(float64)) != len(admResults(t, list)) {
			t.Errorf("count %v for %d results", list["count"], len(admResults(t, list)))
		}
		return admIDs(t, list)
	}
	// A part of the address, any case; patients are found too (they are
	// users), in id order.
	if got, want := search("SMITH"), []int64{alice.ID, bob.ID, patient.UserID}; !slices.Equal(got, want) {
		t.Errorf("email=SMITH: %v, want %v", got, want)
	}
	if got := search("ice.smith%40ex"); !slices.Equal(got, []int64{alice.ID}) {
		t.Errorf("email=ice.smith@ex: %v, want [%d]", got, alice.ID)
	}
	// Regular expression characters are literal.
	if got := search(".%2A"); len(got) != 0 {
		t.Errorf("email=.*: %v, want none", got)
	}
	if got := search("nobody"); len(got) != 0 {
		t.Errorf("email=nobody: %v", got)
	}
	one := admResults(t, w.call(t, "GET", "/api/v1/users?email=alice", w.admin, nil, http.StatusOK))
	if len(one) != 1 || one[0]["email"] != "alice.smith@example.org" || one[0]["userType"] != "practitioner" || one[0]["isSuperuser"] != false {
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
	// Patients may not search users.
	w.call(t, "GET", "/api/v1/users?email=smith", w.env.Token(t, patient.UserID), nil, http.StatusForbidden)
	w.call(t, "GET", "/api/v1/users?email=smith", "", nil, http.StatusUnauthorized)
}
