package handlers_test

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/repo/repotest"
)

// versionedRecord is a record of the admin API that a PATCH changes, as
// TestAdminPatchIfMatch edits it. Actors are named by their role in the
// admin world (admWorld.token).
type versionedRecord struct {
	name string
	// post creates one, sent by creator with body; path is the PATCH path
	// of one from its id, read the GET path of its version (empty: path),
	// the same record under another route for a user.
	post, creator  string
	body           func(w *admWorld) map[string]any
	path, read     string
	editor, reader string
	refused        string                     // who may not change it
	edit           func(i int) map[string]any // the i-th change, each unlike the one before
}

var versionedRecords = []versionedRecord{
	{name: "study", post: "/api/v1/studies", creator: "member", body: func(w *admWorld) map[string]any {
		return map[string]any{"organizationId": w.org.ID, "name": "Sleep"}
	}, path: "/api/v1/studies/%v", editor: "member", reader: "viewer", refused: "viewer",
		edit: func(i int) map[string]any { return map[string]any{"description": fmt.Sprintf("Nights, take %d", i)} }},
	{name: "organization", post: "/api/v1/organizations", creator: "admin", body: func(*admWorld) map[string]any {
		return map[string]any{"name": "Lab", "type": "prov"}
	}, path: "/api/v1/organizations/%v", editor: "admin", reader: "admin", refused: "manager", // of another organization
		edit: func(i int) map[string]any { return map[string]any{"name": fmt.Sprintf("Lab %d", i)} }},
	{name: "practitioner", post: "/api/v1/practitioners", creator: "manager", body: newViewer("doc@example.org"),
		path: "/api/v1/practitioners/%v", editor: "admin", reader: "viewer", refused: "manager", // only themselves or a superuser
		edit: func(i int) map[string]any { return map[string]any{"firstName": fmt.Sprintf("Doc %d", i)} }},
	{name: "user", post: "/api/v1/practitioners", creator: "manager", body: newViewer("nurse@example.org"),
		path: "/api/v1/users/%v", read: "/api/v1/practitioners/%v", editor: "admin", reader: "admin", refused: "manager", // only a superuser
		edit: func(i int) map[string]any { return map[string]any{"isActive": i%2 == 0} }},
	{name: "patient", post: "/api/v1/patients", creator: "member", body: func(w *admWorld) map[string]any {
		return map[string]any{"email": "pat@example.org", "nameFamily": "Doe", "nameGiven": []string{"Jo"}, "organizationIds": []int64{w.org.ID}}
	}, path: "/api/v1/patients/%v", editor: "member", reader: "viewer", refused: "viewer",
		edit: func(i int) map[string]any { return map[string]any{"phone": fmt.Sprintf("+1-555-010%d", i)} }},
	{name: "data source", post: "/api/v1/data_sources", creator: "admin", body: func(*admWorld) map[string]any {
		return map[string]any{"name": "Cuff", "type": "medical_device"}
	}, path: "/api/v1/data_sources/%v", editor: "admin", reader: "viewer", refused: "manager", // only a superuser
		edit: func(i int) map[string]any { return map[string]any{"name": fmt.Sprintf("Cuff %d", i)} }},
}

// newViewer is the body of a POST /practitioners that adds a viewer of
// the world's organization with that email.
func newViewer(email string) func(*admWorld) map[string]any {
	return func(w *admWorld) map[string]any {
		return map[string]any{"email": email, "organizationId": w.org.ID, "role": "viewer"}
	}
}

// token is the token of the world's actor of that role.
func (w *admWorld) token(role string) string {
	return map[string]string{"admin": w.admin, "manager": w.manager, "member": w.member, "viewer": w.viewer}[role]
}

// TestAdminPatchIfMatch: the answers of every record the admin API lets a
// PATCH change (GET, POST, PATCH) carry its version as ETag, and a PATCH
// with If-Match is applied only to that version: two administrators
// editing one record no longer write over each other. An actor who may
// not change the record is answered as without If-Match.
func TestAdminPatchIfMatch(t *testing.T) {
	for _, rec := range versionedRecords {
		t.Run(rec.name, func(t *testing.T) {
			w := admNewWorld(t)
			// tagOf is the version a record's JSON names, spelled as its
			// ETag.
			tagOf := func(out map[string]any) string {
				t.Helper()
				at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(out["lastUpdated"]))
				if err != nil {
					t.Fatalf("lastUpdated of %v: %v", out, err)
				}
				return fmt.Sprintf(`W/"%d"`, at.UnixMilli())
			}
			send := func(method, path, token, ifMatch string, body any, status int) map[string]any {
				t.Helper()
				var header map[string]string
				if ifMatch != "" {
					header = map[string]string{"If-Match": ifMatch}
				}
				resp, out := handlerstest.SendTo(t, method, w.env.URL+path, token, body, header)
				switch {
				case resp.StatusCode != status:
					t.Errorf("%s %s If-Match %q: %d %v, want %d", method, path, ifMatch, resp.StatusCode, out, status)
				case status >= 400:
					admCheckDetail(t, method+" If-Match "+ifMatch, out)
				case resp.Header.Get("ETag") != tagOf(out):
					t.Errorf("%s %s If-Match %q: ETag %q, want %s", method, path, ifMatch, resp.Header.Get("ETag"), tagOf(out))
				}
				return out
			}
			created := send("POST", rec.post, w.token(rec.creator), "", rec.body(w), http.StatusCreated)
			path, read := fmt.Sprintf(rec.path, created["id"]), fmt.Sprintf(cmp.Or(rec.read, rec.path), created["id"])
			editor, refused := w.token(rec.editor), w.token(rec.refused)
			version := func() string {
				t.Helper()
				return tagOf(send("GET", read, w.token(rec.reader), "", nil, http.StatusOK))
			}
			patch := func(token, ifMatch string, i, status int) map[string]any {
				t.Helper()
				return send("PATCH", path, token, ifMatch, rec.edit(i), status)
			}
			// A read names the version created; a PATCH from the current
			// version is applied and names a new one, which a read names.
			v1 := tagOf(created)
			if got := version(); got != v1 {
				t.Errorf("GET: version %s, want %s, the one created", got, v1)
			}
			v2 := tagOf(patch(editor, v1, 1, http.StatusOK))
			if v2 == v1 {
				t.Errorf("the PATCH kept version %s", v1)
			}

			// A PATCH from the version before is refused and writes
			// nothing: the edit would undo the one made since.
			before := admSnapshot(t, w.env)
			out := patch(editor, v1, 2, http.StatusPreconditionFailed)
			if d := fmt.Sprint(out["detail"]); !strings.Contains(d, "changed by someone else") {
				t.Errorf("412 detail %q", d)
			}
			// If-Match is "*" or one tag, spelled as ETag writes it (with
			// or without W/): anything else is 400.
			digits := strings.Trim(v2, `W/"`)
			for _, bad := range []string{"yesterday", digits, `"` + digits, v2 + ", " + v1, `W/"0` + digits + `"`, "w/" + strings.TrimPrefix(v2, "W/")} {
				patch(editor, bad, 2, http.StatusBadRequest)
			}
			admSameSnapshot(t, "refused PATCHes", before, admSnapshot(t, w.env))

			// "*": any version of a record that exists; the strong
			// spelling of the current tag; no If-Match at all, as before
			// ETags.
			last := v2
			for i, tc := range []struct {
				name    string
				ifMatch func(current string) string
			}{
				{`If-Match "*"`, func(string) string { return "*" }},
				{"the strong spelling", func(v string) string { return strings.TrimPrefix(v, "W/") }},
				{"no If-Match", func(string) string { return "" }},
			} {
				if v := tagOf(patch(editor, tc.ifMatch(last), i+2, http.StatusOK)); v == last {
					t.Errorf("PATCH with %s kept version %s", tc.name, v)
				} else {
					last = v
				}
			}
			if got := version(); got != last {
				t.Errorf("GET after the PATCHes: version %s, want %s", got, last)
			}

			// Refusals that come first are answered as without If-Match:
			// a caller who may not change the record, or names none,
			// learns nothing of its version.
			forbidden := patch(refused, "", 5, http.StatusForbidden)
			missingPath := path[:strings.LastIndex(path, "/")+1] + "9999"
			missing := send("PATCH", missingPath, editor, "", rec.edit(5), http.StatusNotFound)
			for _, tag := range []string{v1, last, "*"} {
				if out := patch(refused, tag, 5, http.StatusForbidden); !maps.Equal(out, forbidden) {
					t.Errorf("a refused PATCH with If-Match %q: %v, without: %v", tag, out, forbidden)
				}
				if out := send("PATCH", missingPath, editor, tag, rec.edit(5), http.StatusNotFound); !maps.Equal(out, missing) {
					t.Errorf("PATCH %s with If-Match %q: %v, without: %v", missingPath, tag, out, missing)
				}
			}
		})
	}
}

// TestIfMatchAfterMoveAuthorization: a PATCH that moves a patient or an
// organization where its caller may not put it is refused as without
// If-Match, whatever the tag: the version is checked only once every
// authorization of the change holds, including those the patch's own
// fields ask for.
func TestIfMatchAfterMoveAuthorization(t *testing.T) {
	w := admNewWorld(t)
	ctx, sys := context.Background(), domain.SystemActor()
	elsewhere, err := w.env.Service.CreateOrganization(ctx, sys, domain.NewOrganization{Name: "Elsewhere", Type: "prov"})
	if err != nil {
		t.Fatal(err)
	}
	p := w.patient(t, "pat@example.org", "Doe", "Jo", w.org.ID)
	for _, tc := range []struct {
		path, token string
		body        map[string]any
	}{
		{fmt.Sprintf("/api/v1/patients/%d", p.ID), w.member, map[string]any{"organizationIds": []int64{w.org.ID, elsewhere.ID}}},
		{fmt.Sprintf("/api/v1/organizations/%d", w.org.ID), w.manager, map[string]any{"partOf": elsewhere.ID}},
	} {
		resp, _ := w.env.Send(t, "GET", tc.path, w.admin, nil)
		current := resp.Header.Get("ETag")
		version, err := strconv.ParseInt(strings.Trim(current, `W/"`), 10, 64)
		if err != nil {
			t.Fatalf("GET %s: ETag %q", tc.path, current)
		}
		plain := w.call(t, "PATCH", tc.path, tc.token, tc.body, http.StatusForbidden)
		for _, tag := range []string{fmt.Sprintf(`W/"%d"`, version-1), current, "*"} {
			resp, out := handlerstest.SendTo(t, "PATCH", w.env.URL+tc.path, tc.token, tc.body, map[string]string{"If-Match": tag})
			if resp.StatusCode != http.StatusForbidden || !maps.Equal(out, plain) {
				t.Errorf("PATCH %s with If-Match %s: %d %v, without: 403 %v", tc.path, tag, resp.StatusCode, out, plain)
			}
		}
	}
}

// TestEmptyPatchChangesNothing: a PATCH of null or {} names no field, so
// it writes nothing and the record keeps its version (ETag), on every
// versioned record of the admin API.
func TestEmptyPatchChangesNothing(t *testing.T) {
	w := newWorld(t)
	rows := matrixRows(w)
	superuser := w.tokens["superuser"]
	for _, name := range versionedPatches {
		path, _ := rows[name].prepare(w, "superuser")
		read := strings.Replace(path, "/users/", "/practitioners/", 1)
		resp, _ := w.env.Send(t, "GET", read, superuser, nil)
		version := resp.Header.Get("ETag")
		before := repotest.Snapshot(t, w.env.DB)
		for _, body := range []string{"null", "{}", " { } "} {
			resp, out := handlerstest.SendTo(t, "PATCH", w.env.URL+path, superuser, body, nil)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") != version || version == "" {
				t.Errorf("%s with %s: %d, ETag %q after %q (%v); want 200 and the same version", name, body, resp.StatusCode, resp.Header.Get("ETag"), version, out)
			}
		}
		if !reflect.DeepEqual(before, repotest.Snapshot(t, w.env.DB)) {
			t.Errorf("%s: an empty PATCH changed the database", name)
		}
	}
}
