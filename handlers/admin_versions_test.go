package handlers_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"exchange/domain"
	"exchange/handlers/handlerstest"
)

// versionedRecord is a record of the admin API that a PATCH changes, as
// TestAdminPatchIfMatch edits it.
type versionedRecord struct {
	name string
	// create makes one by POST (checked for its ETag by send) and
	// returns its path and what the POST answered.
	create func(w *admWorld, send admSender) (string, map[string]any)
	// read is the GET path of the record's version, from its path: its
	// own, or that of the same record under another route.
	read func(path string) string
	// editor may change the record, reader read it, refused not change it.
	editor, reader, refused func(w *admWorld) string
	// edit is the i-th change of the record: each differs from the one
	// before.
	edit func(i int) map[string]any
}

// admSender sends a request with If-Match (none when empty), checks its
// status, its error shape, and the ETag of a record it answers: the
// version of the record.
type admSender func(method, path, token, ifMatch string, body any, status int) map[string]any

var versionedRecords = []versionedRecord{{
	name: "study",
	create: func(w *admWorld, send admSender) (string, map[string]any) {
		out := send("POST", "/api/v1/studies", w.member, "", map[string]any{"organizationId": w.org.ID, "name": "Sleep"}, http.StatusCreated)
		return fmt.Sprintf("/api/v1/studies/%v", out["id"]), out
	},
	editor: func(w *admWorld) string { return w.member }, reader: func(w *admWorld) string { return w.viewer },
	refused: func(w *admWorld) string { return w.viewer },
	edit:    func(i int) map[string]any { return map[string]any{"description": fmt.Sprintf("Nights, take %d", i)} },
}, {
	name: "organization",
	create: func(w *admWorld, send admSender) (string, map[string]any) {
		out := send("POST", "/api/v1/organizations", w.admin, "", map[string]any{"name": "Lab", "type": "prov"}, http.StatusCreated)
		return fmt.Sprintf("/api/v1/organizations/%v", out["id"]), out
	},
	editor: func(w *admWorld) string { return w.admin }, reader: func(w *admWorld) string { return w.admin },
	refused: func(w *admWorld) string { return w.manager }, // of another organization
	edit:    func(i int) map[string]any { return map[string]any{"name": fmt.Sprintf("Lab %d", i)} },
}, {
	name: "practitioner",
	create: func(w *admWorld, send admSender) (string, map[string]any) {
		out := send("POST", "/api/v1/practitioners", w.manager, "", map[string]any{"email": "doc@example.org", "organizationId": w.org.ID, "role": "viewer"}, http.StatusCreated)
		return fmt.Sprintf("/api/v1/practitioners/%v", out["id"]), out
	},
	editor: func(w *admWorld) string { return w.admin }, reader: func(w *admWorld) string { return w.viewer },
	refused: func(w *admWorld) string { return w.manager }, // only themselves or a superuser
	edit:    func(i int) map[string]any { return map[string]any{"firstName": fmt.Sprintf("Doc %d", i)} },
}, {
	// A user's version is its practitioner's: the same record.
	name: "user",
	create: func(w *admWorld, send admSender) (string, map[string]any) {
		out := send("POST", "/api/v1/practitioners", w.manager, "", map[string]any{"email": "nurse@example.org", "organizationId": w.org.ID, "role": "viewer"}, http.StatusCreated)
		return fmt.Sprintf("/api/v1/users/%v", out["id"]), out
	},
	read:   func(p string) string { return strings.Replace(p, "/users/", "/practitioners/", 1) },
	editor: func(w *admWorld) string { return w.admin }, reader: func(w *admWorld) string { return w.admin },
	refused: func(w *admWorld) string { return w.manager }, // only a superuser
	edit:    func(i int) map[string]any { return map[string]any{"isActive": i%2 == 0} },
}, {
	name: "patient",
	create: func(w *admWorld, send admSender) (string, map[string]any) {
		out := send("POST", "/api/v1/patients", w.member, "", map[string]any{"email": "pat@example.org", "nameFamily": "Doe", "nameGiven": []string{"Jo"},
			"organizationIds": []int64{w.org.ID}}, http.StatusCreated)
		return fmt.Sprintf("/api/v1/patients/%v", out["id"]), out
	},
	editor: func(w *admWorld) string { return w.member }, reader: func(w *admWorld) string { return w.viewer },
	refused: func(w *admWorld) string { return w.viewer },
	edit:    func(i int) map[string]any { return map[string]any{"phone": fmt.Sprintf("+1-555-010%d", i)} },
}, {
	name: "data source",
	create: func(w *admWorld, send admSender) (string, map[string]any) {
		out := send("POST", "/api/v1/data_sources", w.admin, "", map[string]any{"name": "Cuff", "type": "medical_device"}, http.StatusCreated)
		return fmt.Sprintf("/api/v1/data_sources/%v", out["id"]), out
	},
	editor: func(w *admWorld) string { return w.admin }, reader: func(w *admWorld) string { return w.viewer },
	refused: func(w *admWorld) string { return w.manager }, // only a superuser
	edit:    func(i int) map[string]any { return map[string]any{"name": fmt.Sprintf("Cuff %d", i)} },
}}

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
			path, created := rec.create(w, send)
			read := path
			if rec.read != nil {
				read = rec.read(path)
			}
			editor, refused := rec.editor(w), rec.refused(w)
			version := func() string {
				t.Helper()
				return tagOf(send("GET", read, rec.reader(w), "", nil, http.StatusOK))
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
