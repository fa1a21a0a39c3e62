package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"exchange/domain"
	"exchange/handlers/handlerstest"
	"exchange/repo"
	"exchange/repo/repotest"
)

// The contract of JupyterHealth Exchange (JHE) that its Python client,
// jupyterhealth-client, and apps written against JHE's /api/v1 rely on:
// the requests each public method of the client sends, and the fields it
// reads of the answers, with a practitioner's token and a patient's.

// jheWorld is the FHIR tests' fixture (fxWorld) with observations: alice
// has three heart rates, two blood pressures and an IEEE physical
// activity; bob one heart rate.
type jheWorld struct {
	*fxWorld
	aliceObs []string
}

func jheNewWorld(t *testing.T) *jheWorld {
	w := &jheWorld{fxWorld: fxNewWorld(t)}
	var obs []fxObs
	for i := range 3 {
		obs = append(obs, fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, payload: fxDataPoint(fxHR, fxHeartRate(fxAt(fmt.Sprintf("2025-03-0%dT08:00:00Z", i+1))))})
	}
	for i := range 2 {
		obs = append(obs, fxObs{patient: w.alice.ID, device: w.watch, code: fxBP, payload: fxDataPoint(fxBP, fxBloodPressure(fxAt(fmt.Sprintf("2025-03-0%dT09:00:00Z", i+1))))})
	}
	obs = append(obs, fxObs{patient: w.alice.ID, device: w.watch, system: fxIEEE, code: fxIEEEPA, payload: fxIEEEDataPoint(fxIEEEPA,
		map[string]any{"activity_name": "walking", "effective_time_frame": fxInterval("end_date_time", "2025-03-05T08:00:00-05:00", "duration", fxDuration(40, "min"))})})
	w.aliceObs = w.create(t, w.tok["super"], obs...)
	w.create(t, w.tok["super"], fxObs{patient: w.bob.ID, device: w.watch, code: fxHR, payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2025-03-01T07:00:00Z")))})
	return w
}

// jheGet sends GET with the token and decodes whatever JSON it answers.
func jheGet(t *testing.T, env *handlerstest.Env, token, path string) (int, any) {
	t.Helper()
	status, text := handlerstest.GetText(t, env.URL+path, token)
	var body any
	if err := json.Unmarshal([]byte(text), &body); err != nil {
		t.Fatalf("GET %s: %d, not JSON: %q", path, status, text)
	}
	return status, body
}

// jheRow is one call as the client makes it: who sends it, the path
// (under the server), the status it must answer and what its body must
// hold.
type jheRow struct {
	name   string
	as     string // a token of fxWorld.tok
	path   func(w *jheWorld) string
	status int
	check  func(t *testing.T, w *jheWorld, body any)
}

func jhePath(format string, args ...func(w *jheWorld) any) func(w *jheWorld) string {
	return func(w *jheWorld) string {
		values := make([]any, len(args))
		for i, a := range args {
			values[i] = a(w)
		}
		return fmt.Sprintf(format, values...)
	}
}

// The ids of the fixture, for jhePath.
var (
	jheAlice = func(w *jheWorld) any { return w.alice.ID }
	jheBob   = func(w *jheWorld) any { return w.bob.ID }
	jheOrgA  = func(w *jheWorld) any { return w.orgA.ID }
	jheOrgA1 = func(w *jheWorld) any { return w.orgA1.ID }
	jheOrgB  = func(w *jheWorld) any { return w.orgB.ID }
	jheS1    = func(w *jheWorld) any { return w.s1.ID }
	jheS2    = func(w *jheWorld) any { return w.s2.ID }
)

// jheRows are the contract, row by row. Rows marked "kept" held before
// the exchange followed JHE's conventions, and must go on holding; every
// other row failed then.
func jheRows() []jheRow {
	return []jheRow{
		// users/profile: {id, email, firstName, lastName, isSuperUser, patient}.
		{"profile of a practitioner", "doc", jhePath("/api/v1/users/profile"), 200, func(t *testing.T, w *jheWorld, body any) {
			jheFields(t, body, map[string]any{"id": float64(w.doc.ID), "email": "doc@example.org", "firstName": "Doc", "lastName": "Practitioner",
				"isSuperUser": false, "patient": nil})
		}},
		{"profile of a superuser", "super", jheJust("/api/v1/users/profile"), 200, func(t *testing.T, w *jheWorld, body any) {
			jheFields(t, body, map[string]any{"isSuperUser": true})
		}},
		{"profile of a patient", "alice", jheJust("/api/v1/users/profile"), 200, func(t *testing.T, w *jheWorld, body any) {
			jheFields(t, body, map[string]any{"email": "alice@example.org", "isSuperUser": false})
			jheAlicePatient(t, w, jheObj(body)["patient"])
		}},

		// JHE's patient object, beside the exchange's fields.
		{"a patient as a practitioner reads them", "doc", jhePath("/api/v1/patients/%d", jheAlice), 200, jheAlicePatientBody},
		{"a patient as they read themselves", "alice", jhePath("/api/v1/patients/%d", jheAlice), 200, jheAlicePatientBody},
		{"a patient without identifier or phone", "doc", jhePath("/api/v1/patients/%d", func(w *jheWorld) any { return w.dave.ID }), 200,
			func(t *testing.T, w *jheWorld, body any) {
				jheFields(t, body, map[string]any{"identifier": nil, "telecomPhone": nil, "nameGiven": "Dave", "birthDate": nil,
					"telecomEmail": "dave@example.org", "organizationId": float64(w.orgA.ID)})
			}},
		{"patients in a list", "doc", jhePath("/api/v1/patients?organizationId=%d", jheOrgA1), 200, func(t *testing.T, w *jheWorld, body any) {
			results := jheResults(t, body)
			if len(results) != 1 {
				t.Fatalf("results %v", results)
			}
			jheAlicePatient(t, w, results[0])
		}},
		{"the patient of a consent overview", "alice", jhePath("/api/v1/patients/%d/consents", jheAlice), 200, func(t *testing.T, w *jheWorld, body any) {
			jheAlicePatient(t, w, jheObj(body)["patient"])
		}},
		{"patients of a study", "doc", jhePath("/api/v1/studies/%d/patients", jheS2), 200, func(t *testing.T, w *jheWorld, body any) {
			for _, p := range jheResults(t, body) {
				if _, ok := p["nameGiven"].(string); !ok || p["jheUserId"] == nil {
					t.Errorf("an enrolled patient without JHE's fields: %v", p)
				}
			}
		}},

		// JHE's snake_case filters, as the camelCase ones.
		{"patients?organization_id", "doc", jhePath("/api/v1/patients?organization_id=%d", jheOrgA1), 200, jheIDs(jheAlice)},
		{"patients?organizationId", "doc", jhePath("/api/v1/patients?organizationId=%d", jheOrgA1), 200, jheIDs(jheAlice)}, // kept
		{"patients?study_id", "doc", jhePath("/api/v1/patients?study_id=%d", jheS2), 200, jheIDs(jheBob, func(w *jheWorld) any { return w.dave.ID })},
		{"patients?patient_id", "doc", jhePath("/api/v1/patients?patient_id=%d", jheBob), 200, jheIDs(jheBob)},
		{"patients?study_id of a patient", "alice", jhePath("/api/v1/patients?study_id=%d", jheS2), 200, jheIDs()},
		{"patients?study_id and organization_id", "doc", jhePath("/api/v1/patients?study_id=%d&organization_id=%d", jheS1, jheOrgA1), 200, jheIDs(jheAlice)},
		{"studies?organization_id", "super", jhePath("/api/v1/studies?organization_id=%d", jheOrgB), 200, jheIDs(func(w *jheWorld) any { return w.s3.ID })},
		{"studies?organization_id of another organization", "doc", jhePath("/api/v1/studies?organization_id=%d", jheOrgB), 403, nil},
		{"practitioners?organization_id", "super", jhePath("/api/v1/practitioners?organization_id=%d", jheOrgA1), 200,
			jheIDs(func(w *jheWorld) any { return w.nurse.ID })},
		{"organizations?part_of", "doc", jhePath("/api/v1/organizations?part_of=%d", jheOrgA), 200, jheIDs(jheOrgA1)},
		{"patients?page_size", "doc", jheJust("/api/v1/patients?page_size=1"), 200, func(t *testing.T, w *jheWorld, body any) {
			if results := jheResults(t, body); len(results) != 1 || jheObj(body)["count"] != float64(3) {
				t.Errorf("a page of 1 of 3: %v", body)
			}
			next, _ := jheObj(body)["next"].(string)
			status, page2 := jheGet(t, w.env, w.tok["doc"], strings.TrimPrefix(next, w.env.URL))
			if !strings.HasPrefix(next, w.env.URL) || status != 200 || len(jheResults(t, page2)) != 1 {
				t.Errorf("next %q answers %d %v", next, status, page2)
			}
		}},
		{"a filter given twice", "doc", jhePath("/api/v1/patients?study_id=%d&studyId=%d", jheS1, jheS2), 400, jheDetail("studyId")},
		{"an unknown parameter", "doc", jheJust("/api/v1/patients?study=3"), 400, jheDetailIs("unknown parameter study")},
		{"an unknown parameter of a study's patients", "doc", jhePath("/api/v1/studies/%d/patients?organization_id=%d", jheS1, jheOrgA), 400,
			jheDetailIs("unknown parameter organization_id")},
		{"an unknown parameter of a read", "doc", jhePath("/api/v1/patients/%d?organization_id=%d", jheAlice, jheOrgA), 400,
			jheDetailIs("unknown parameter organization_id")},

		// patients/global_lookup?email=: never tells a hidden patient from
		// an absent one.
		{"global_lookup by a member", "doc", jheJust("/api/v1/patients/global_lookup?email=alice@example.org"), 200, func(t *testing.T, w *jheWorld, body any) {
			found := jheList(t, body)
			if len(found) != 1 {
				t.Fatalf("found %v", found)
			}
			jheFields(t, found[0], map[string]any{"id": float64(w.alice.ID), "jheUserId": float64(w.alice.UserID)})
			if ids := jheList(t, found[0]["identifiers"]); len(ids) != 1 || ids[0]["value"] != "A-1" || ids[0]["system"] != fxMRN {
				t.Errorf("identifiers %v", ids)
			}
		}},
		{"global_lookup in any case", "doc", jheJust("/api/v1/patients/global_lookup?email=Alice@Example.org"), 200, jheLookup(jheAlice)},
		{"global_lookup by the patient", "alice", jheJust("/api/v1/patients/global_lookup?email=alice@example.org"), 200, jheLookup(jheAlice)},
		{"global_lookup of a hidden patient", "outsider", jheJust("/api/v1/patients/global_lookup?email=alice@example.org"), 200, jheLookup()},
		{"global_lookup of another patient", "bob", jheJust("/api/v1/patients/global_lookup?email=alice@example.org"), 200, jheLookup()},
		{"global_lookup of nobody", "doc", jheJust("/api/v1/patients/global_lookup?email=nobody@example.org"), 200, jheLookup()},
		{"global_lookup of a practitioner", "doc", jheJust("/api/v1/patients/global_lookup?email=nurse@example.org"), 200, jheLookup()},
		{"global_lookup without an email", "doc", jheJust("/api/v1/patients/global_lookup"), 400, jheDetail("email")},

		// patients?identifier=: one lookup, with or without the system.
		{"patients?identifier=system|value", "doc", jheJust("/api/v1/patients?identifier=" + url.QueryEscape(fxMRN+"|A-1")), 200, jheIDs(jheAlice)}, // kept
		{"patients?identifier=value", "doc", jheJust("/api/v1/patients?identifier=B-2"), 200, jheIDs(jheBob)},
		{"patients?patient_identifier_value", "doc", jheJust("/api/v1/patients?patient_identifier_value=A-1"), 200, jheIDs(jheAlice)},
		{"patients?identifier=value of a hidden patient", "outsider", jheJust("/api/v1/patients?identifier=A-1"), 200, jheIDs()},

		// Organizations: ROOT is 0, top-level ones are partOf 0, every one
		// carries children and currentUserRole; the directory is everyone's.
		{"organizations/0 is ROOT", "doc", jheJust("/api/v1/organizations/0"), 200, func(t *testing.T, w *jheWorld, body any) {
			jheFields(t, body, map[string]any{"id": float64(0), "name": "ROOT", "type": "root", "partOf": nil, "currentUserRole": nil})
			top := jheList(t, jheObj(body)["children"])
			if got := jheIDsOf(top); !slices.Equal(got, []int64{w.orgA.ID, w.orgB.ID}) {
				t.Fatalf("ROOT's children %v", got)
			}
			jheFields(t, top[0], map[string]any{"partOf": float64(0), "currentUserRole": "member"})
			if got := jheIDsOf(jheList(t, top[0]["children"])); !slices.Equal(got, []int64{w.orgA1.ID}) {
				t.Errorf("the children of %v", top[0])
			}
		}},
		{"a top-level organization", "doc", jhePath("/api/v1/organizations/%d", jheOrgA), 200, func(t *testing.T, w *jheWorld, body any) {
			jheFields(t, body, map[string]any{"name": "Clinic", "type": "prov", "partOf": float64(0), "currentUserRole": "member"})
			children := jheList(t, jheObj(body)["children"])
			if len(children) != 1 {
				t.Fatalf("children %v", children)
			}
			jheFields(t, children[0], map[string]any{"id": float64(w.orgA1.ID), "partOf": float64(w.orgA.ID), "currentUserRole": "member"})
		}},
		{"a sub-organization of one's own", "nurse", jhePath("/api/v1/organizations/%d", jheOrgA1), 200, func(t *testing.T, w *jheWorld, body any) {
			jheFields(t, body, map[string]any{"partOf": float64(w.orgA.ID), "currentUserRole": "member", "children": []any{}})
		}},
		{"an organization one is not a member of", "doc", jhePath("/api/v1/organizations/%d", jheOrgB), 200, func(t *testing.T, w *jheWorld, body any) {
			jheFields(t, body, map[string]any{"name": "Elsewhere", "partOf": float64(0), "currentUserRole": nil})
		}},
		{"an organization of a superuser", "super", jhePath("/api/v1/organizations/%d", jheOrgB), 200, func(t *testing.T, w *jheWorld, body any) {
			jheFields(t, body, map[string]any{"currentUserRole": "super_user"})
		}},
		{"an organization of a patient", "alice", jhePath("/api/v1/organizations/%d", jheOrgA1), 200, func(t *testing.T, w *jheWorld, body any) {
			jheFields(t, body, map[string]any{"name": "Cardiology", "currentUserRole": nil})
		}},
		{"the organizations of a non-member", "outsider", jheJust("/api/v1/organizations"), 200, jheDirectory},
		{"the organizations of a patient", "alice", jheJust("/api/v1/organizations"), 200, jheDirectory},
		{"the members of another organization", "outsider", jhePath("/api/v1/organizations/%d/users", jheOrgA), 403, nil},   // kept
		{"the studies of another organization", "outsider", jhePath("/api/v1/organizations/%d/studies", jheOrgA), 403, nil}, // kept
		{"an organization that does not exist", "doc", jheJust("/api/v1/organizations/987654"), 404, jheDetail("987654")},   // kept

		// Studies and data sources fit already.
		{"studies", "doc", jheJust("/api/v1/studies"), 200, func(t *testing.T, w *jheWorld, body any) { // kept
			for _, st := range jheResults(t, body) {
				if o := jheObj(st["organization"]); st["name"] == nil || st["description"] == nil || o["name"] == nil || o["type"] == nil {
					t.Errorf("a study without JHE's fields: %v", st)
				}
			}
		}},
		{"a study", "alice", jhePath("/api/v1/studies/%d", jheS1), 200, func(t *testing.T, w *jheWorld, body any) {
			jheFields(t, body, map[string]any{"id": float64(w.s1.ID), "name": "Sleep and heart"})
			jheFields(t, jheObj(body)["organization"], map[string]any{"id": float64(w.orgA.ID), "name": "Clinic", "type": "prov", "partOf": float64(0)})
		}},
		{"data sources", "alice", jheJust("/api/v1/data_sources"), 200, func(t *testing.T, w *jheWorld, body any) { // kept
			for _, d := range jheResults(t, body) {
				if d["name"] == nil || d["type"] == nil || d["supportedScopes"] == nil {
					t.Errorf("a data source without JHE's fields: %v", d)
				}
			}
		}},
		{"consents", "doc", jhePath("/api/v1/patients/%d/consents", jheAlice), 200, func(t *testing.T, w *jheWorld, body any) { // kept
			studies := jheList(t, jheObj(body)["studies"])
			if len(studies) != 1 || jheObj(body)["studiesPendingConsent"] == nil {
				t.Fatalf("studies %v", studies)
			}
			for _, sc := range jheList(t, studies[0]["scopeConsents"]) {
				if code := jheObj(sc["code"]); code["codingCode"] == nil || code["text"] == nil || sc["consented"] == nil {
					t.Errorf("a scope consent without JHE's fields: %v", sc)
				}
			}
		}},

		// FHIR searches as the client sends them: entry always, total where cheap.
		{"a study's observations", "doc", jheFHIR("Observation", "patient._has:Group:member:_id", jheS1, "_count", "1000"), 200, jheBundle(7, 7)},
		{"a study's observations of a code", "doc", jheFHIR("Observation", "patient._has:Group:member:_id", jheS1, "code", fxOMH+"|"+fxBP, "_count", "1000"), 200, jheBundle(2, 2)},
		{"an IEEE code on the Open mHealth system", "doc", jheFHIR("Observation", "patient", jheAlice, "code", fxOMH+"|"+fxIEEEPA, "_count", "1000"), 200, jheBundle(1, 1)},
		{"a bare code", "doc", jheFHIR("Observation", "patient", jheAlice, "code", fxIEEEPA), 200, jheBundle(1, 1)},
		{"a patient's own observations", "alice", jheFHIR("Observation", "patient", jheAlice, "_count", "1000"), 200, jheBundle(6, 6)},
		{"a search that matches nothing", "doc", jheFHIR("Observation", "patient", jheAlice, "code", fxOMH+"|omh:body-weight:3.0"), 200, jheBundle(0, 0)},
		{"a count", "doc", jheFHIR("Observation", "patient", jheAlice, "_summary", "count"), 200, jheBundle(0, 6)},
		{"a page of several", "doc", jheFHIR("Observation", "patient", jheAlice, "_count", "2"), 200, jheBundle(2, -1)}, // kept
		{"the lower-case alias", "doc", jhePath("/fhir/r5/Observation?patient=%d", jheAlice), 200, jheBundle(6, 6)},
		{"another case of the base", "doc", jhePath("/Fhir/R5/Observation?patient=%d", jheAlice), 404, nil},    // kept
		{"another case of the version", "doc", jhePath("/FHIR/r5/Observation?patient=%d", jheAlice), 404, nil}, // kept
		{"a FHIR error", "doc", jheJust("/FHIR/R5/Observation?date=2025-13-45"), 400, func(t *testing.T, w *jheWorld, body any) { // kept
			jheFields(t, body, map[string]any{"resourceType": "OperationOutcome"})
		}},

		// Errors of the admin API: {"detail": ...}.
		{"an unknown patient", "doc", jheJust("/api/v1/patients/987654"), 404, jheDetail("987654")}, // kept
		{"an unknown route", "doc", jheJust("/api/v1/no_such_thing"), 404, jheDetail()},             // kept
		{"no token", "", jheJust("/api/v1/users/profile"), 401, jheDetail()},                        // kept
	}
}

// TestJupyterHealthContract sends every row of the contract.
func TestJupyterHealthContract(t *testing.T) {
	w := jheNewWorld(t)
	for _, row := range jheRows() {
		path := row.path(w)
		status, body := jheGet(t, w.env, w.tok[row.as], path)
		if status != row.status {
			t.Errorf("%s: GET %s as %s: %d %v, want %d", row.name, path, row.as, status, body, row.status)
			continue
		}
		if status >= 400 && strings.HasPrefix(path, "/api/") {
			jheDetail()(t, w, body)
		}
		if row.check != nil {
			t.Run(row.name, func(t *testing.T) { row.check(t, w, body) })
		}
	}
}

// TestJupyterHealthWrites: JHE's names in the bodies that create and
// change a patient (telecomEmail, telecomPhone, nameGiven as one string),
// and nameGiven sent back as read changes nothing.
func TestJupyterHealthWrites(t *testing.T) {
	w := admNewWorld(t)
	created := w.call(t, "POST", "/api/v1/patients", w.member, map[string]any{"telecomEmail": "heather@example.edu", "nameFamily": "Williams",
		"nameGiven": "Heather Ann", "telecomPhone": "+1 555 0123", "birthDate": "1967-12-09", "organizationIds": []int64{w.org.ID}}, http.StatusCreated)
	jheFields(t, created, map[string]any{"nameGiven": "Heather Ann", "telecomEmail": "heather@example.edu", "telecomPhone": "+1 555 0123",
		"birthDate": "1967-12-09", "organizationId": float64(w.org.ID)})
	if fmt.Sprint(created["givenNames"]) != "[Heather Ann]" {
		t.Errorf("given names %v", created["givenNames"])
	}
	path := fmt.Sprintf("/api/v1/patients/%d", admID(t, created))
	// A given name with a space, sent as a list, is kept whole when its
	// joined form comes back.
	w.call(t, "PATCH", path, w.member, map[string]any{"nameGiven": []string{"Mary Ann", "Jo"}}, http.StatusOK)
	same := w.call(t, "PATCH", path, w.member, map[string]any{"nameGiven": "Mary Ann Jo", "telecomPhone": "+1 555 0199"}, http.StatusOK)
	if fmt.Sprint(same["givenNames"]) != "[Mary Ann Jo]" || same["nameGiven"] != "Mary Ann Jo" || same["telecomPhone"] != "+1 555 0199" {
		t.Errorf("nameGiven sent back as read: %v", same)
	}
	w.call(t, "PATCH", path, w.member, map[string]any{"nameGiven": "Heather", "givenNames": []string{"Heather"}}, http.StatusBadRequest, "givenNames")
	w.call(t, "PATCH", path, w.member, map[string]any{"phone": "1", "telecomPhone": "2"}, http.StatusBadRequest, "telecomPhone")
	w.call(t, "PATCH", path, w.member, map[string]any{"telecomEmail": "x@example.org"}, http.StatusBadRequest, "email")
	w.call(t, "POST", "/api/v1/patients", w.member, map[string]any{"email": "a@example.org", "telecomEmail": "b@example.org", "nameFamily": "X",
		"nameGiven": "Y", "organizationIds": []int64{w.org.ID}}, http.StatusBadRequest, "telecomEmail")
	if got := w.call(t, "GET", path, w.member, nil, http.StatusOK); got["nameGiven"] != "Mary Ann Jo" {
		t.Errorf("after the refused writes: %v", got)
	}
	if profile := w.call(t, "GET", "/api/v1/users/profile", w.env.Token(t, admID(t, created, "userId")), nil, http.StatusOK); profile["firstName"] != "Mary Ann" {
		t.Errorf("the login's first name: %v", profile)
	}
}

// ---- checks ----

func jheJust(path string) func(*jheWorld) string { return func(*jheWorld) string { return path } }

// jheFHIR is a FHIR search path with parameters (values: strings or
// fixture ids).
func jheFHIR(resourceType string, kv ...any) func(*jheWorld) string {
	return func(w *jheWorld) string {
		q := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			v := kv[i+1]
			if f, ok := v.(func(*jheWorld) any); ok {
				v = f(w)
			}
			q.Add(kv[i].(string), fmt.Sprint(v))
		}
		return fxBase + "/" + resourceType + "?" + q.Encode()
	}
}

func jheObj(v any) map[string]any { m, _ := v.(map[string]any); return m }

// jheList reads an array of objects.
func jheList(t *testing.T, v any) []map[string]any {
	t.Helper()
	raw, ok := v.([]any)
	if !ok {
		t.Fatalf("%v is not an array", v)
	}
	out := make([]map[string]any, len(raw))
	for i, r := range raw {
		out[i] = jheObj(r)
	}
	return out
}

func jheResults(t *testing.T, body any) []map[string]any {
	t.Helper()
	for _, k := range []string{"count", "next", "previous"} {
		if _, ok := jheObj(body)[k]; !ok {
			t.Errorf("a list without %s: %v", k, body)
		}
	}
	return jheList(t, jheObj(body)["results"])
}

func jheIDsOf(items []map[string]any) []int64 {
	ids := []int64{}
	for _, it := range items {
		id, _ := it["id"].(float64)
		ids = append(ids, int64(id))
	}
	return ids
}

// jheFields checks members of an object: each present, with that value
// (a slice value compares as printed).
func jheFields(t *testing.T, v any, want map[string]any) {
	t.Helper()
	obj := jheObj(v)
	for k, x := range want {
		got, ok := obj[k]
		if !ok || fmt.Sprint(got) != fmt.Sprint(x) {
			t.Errorf("%s: %v (present %v), want %v; in %v", k, got, ok, x, obj)
		}
	}
}

// jheWant returns the ids of the fixture.
func jheWant(w *jheWorld, ids []func(*jheWorld) any) []int64 {
	want := []int64{}
	for _, id := range ids {
		want = append(want, id(w).(int64))
	}
	return want
}

// jheIDs checks that a list holds exactly these ids, in order.
func jheIDs(ids ...func(*jheWorld) any) func(*testing.T, *jheWorld, any) {
	return func(t *testing.T, w *jheWorld, body any) {
		t.Helper()
		want := jheWant(w, ids)
		if got := jheIDsOf(jheResults(t, body)); !slices.Equal(got, want) || jheObj(body)["count"] != float64(len(want)) {
			t.Errorf("ids %v (count %v), want %v", got, jheObj(body)["count"], want)
		}
	}
}

// jheLookup checks a global lookup's answer: a list of these patients.
func jheLookup(ids ...func(*jheWorld) any) func(*testing.T, *jheWorld, any) {
	return func(t *testing.T, w *jheWorld, body any) {
		t.Helper()
		want := jheWant(w, ids)
		if got := jheIDsOf(jheList(t, body)); !slices.Equal(got, want) {
			t.Errorf("found %v, want %v", got, want)
		}
	}
}

// jheDetail checks an error body: {"detail": ...} naming each word.
func jheDetail(words ...string) func(*testing.T, *jheWorld, any) {
	return func(t *testing.T, _ *jheWorld, body any) {
		t.Helper()
		obj := jheObj(body)
		detail, _ := obj["detail"].(string)
		if detail == "" || len(obj) != 1 {
			t.Errorf("error body %v, want {\"detail\": ...}", body)
		}
		for _, w := range words {
			if !strings.Contains(detail, w) {
				t.Errorf("detail %q does not name %q", detail, w)
			}
		}
	}
}

func jheDetailIs(detail string) func(*testing.T, *jheWorld, any) {
	return func(t *testing.T, _ *jheWorld, body any) {
		t.Helper()
		if got := jheObj(body)["detail"]; got != detail {
			t.Errorf("detail %q, want %q", got, detail)
		}
	}
}

// jheAlicePatient checks alice's record as JHE's patient object, beside
// the exchange's own fields.
func jheAlicePatient(t *testing.T, w *jheWorld, v any) {
	t.Helper()
	jheFields(t, v, map[string]any{"id": float64(w.alice.ID), "jheUserId": float64(w.alice.UserID), "identifier": "A-1",
		"nameFamily": "Ødegård", "nameGiven": "Alice Marie", "birthDate": "1980-05-17", "telecomPhone": "+1 555 0100",
		"telecomEmail": "alice@example.org", "organizationId": float64(w.orgA.ID),
		"givenNames": []any{"Alice", "Marie"}, "userId": float64(w.alice.UserID), "organizationIds": []any{float64(w.orgA.ID), float64(w.orgA1.ID)}})
	p := jheObj(v)
	if ids := jheList(t, p["identifiers"]); len(ids) != 1 || ids[0]["system"] != fxMRN || ids[0]["value"] != "A-1" {
		t.Errorf("identifiers %v", p["identifiers"])
	}
	orgs := jheList(t, p["organizations"])
	if got := jheIDsOf(orgs); !slices.Equal(got, []int64{w.orgA.ID, w.orgA1.ID}) || orgs[0]["name"] != "Clinic" || orgs[1]["partOf"] != float64(w.orgA.ID) {
		t.Errorf("organizations %v", orgs)
	}
	if len(jheList(t, p["telecom"])) != 2 {
		t.Errorf("telecom %v", p["telecom"])
	}
}

func jheAlicePatientBody(t *testing.T, w *jheWorld, body any) { jheAlicePatient(t, w, body) }

// jheDirectory checks a list of organizations: ROOT first, then every
// organization, with the caller's role in none.
func jheDirectory(t *testing.T, w *jheWorld, body any) {
	t.Helper()
	results := jheResults(t, body)
	if got := jheIDsOf(results); !slices.Equal(got, []int64{0, w.orgA.ID, w.orgA1.ID, w.orgB.ID}) || jheObj(body)["count"] != float64(4) {
		t.Fatalf("organizations %v", got)
	}
	jheFields(t, results[0], map[string]any{"name": "ROOT", "partOf": nil})
	jheFields(t, results[1], map[string]any{"name": "Clinic", "partOf": float64(0), "currentUserRole": nil})
	if kids := jheIDsOf(jheList(t, results[1]["children"])); !slices.Equal(kids, []int64{w.orgA1.ID}) {
		t.Errorf("the children of Clinic: %v", kids)
	}
}

// jheBundle checks a searchset as the client reads it: entry always (an
// array of n resources with ids), total as given (-1: none).
func jheBundle(n, total int) func(*testing.T, *jheWorld, any) {
	return func(t *testing.T, w *jheWorld, body any) {
		t.Helper()
		b := jheObj(body)
		entries := jheList(t, b["entry"])
		if len(entries) != n || b["resourceType"] != "Bundle" || b["type"] != "searchset" {
			t.Fatalf("%d entries, want %d: %v", len(entries), n, b)
		}
		for _, e := range entries {
			r := jheObj(e["resource"])
			if r["id"] == nil || jheObj(r["valueAttachment"])["data"] == nil || jheObj(r["subject"])["reference"] == nil {
				t.Errorf("an entry the client cannot read: %v", e)
			}
		}
		got, present := b["total"]
		switch {
		case total < 0 && present:
			t.Errorf("total %v on a page that is not the whole result", got)
		case total >= 0 && got != float64(total):
			t.Errorf("total %v (present %v), want %d", got, present, total)
		}
	}
}

// TestJupyterHealthPythonExample runs the Python example of
// docs/jupyterhealth.md (docs/jupyterhealth/study_observations.py): the
// calls jupyterhealth-client makes, with requests, from a token to a
// pandas DataFrame, as a practitioner reading a study and as a patient
// reading their own data. It needs python3 with pandas, requests and yarl
// (Debian: python3-pandas python3-requests python3-yarl; PYTHON names
// another interpreter), and skips, saying so, without them.
func TestJupyterHealthPythonExample(t *testing.T) {
	python := jhePython(t)
	w := jheNewWorld(t)
	script := filepath.Join(handlerstest.RepoRoot(), "docs", "jupyterhealth", "study_observations.py")
	for _, c := range []struct {
		name, as string
		args     []string
		rows     int
		shows    []string
	}{
		{"a study, as a practitioner", "doc", []string{"--study", fmt.Sprint(w.s1.ID)}, 7, []string{"heart_rate_value", "systolic_blood_pressure_value", "Patient/"}},
		{"a study's blood pressure", "doc", []string{"--study", fmt.Sprint(w.s1.ID), "--code", fxBP}, 2, []string{"diastolic_blood_pressure_value"}},
		{"one's own data, as a patient", "alice", []string{"--patient", fmt.Sprint(w.alice.ID)}, 6, []string{"ieee:physical-activity:1.0"}},
	} {
		cmd := exec.Command(python, append([]string{script}, c.args...)...)
		cmd.Env = append(os.Environ(), "JHE_URL="+w.env.URL, "JHE_TOKEN="+w.tok[c.as])
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v\n%s", c.name, err, out)
			continue
		}
		t.Logf("%s:\n%s", c.name, out)
		if !strings.Contains(string(out), fmt.Sprintf("rows: %d\n", c.rows)) {
			t.Errorf("%s: want %d rows:\n%s", c.name, c.rows, out)
		}
		for _, s := range c.shows {
			if !strings.Contains(string(out), s) {
				t.Errorf("%s: the output does not show %q:\n%s", c.name, s, out)
			}
		}
	}
}

// jhePython returns a Python interpreter with pandas, requests and yarl:
// $PYTHON, python3 on the PATH, or Debian's /usr/bin/python3. It skips
// the test when there is none.
func jhePython(t *testing.T) string {
	t.Helper()
	var tried []string
	for _, p := range []string{os.Getenv("PYTHON"), "python3", "/usr/bin/python3"} {
		if p == "" || slices.Contains(tried, p) {
			continue
		}
		tried = append(tried, p)
		if exec.Command(p, "-c", "import pandas, requests, yarl").Run() == nil {
			return p
		}
	}
	t.Skipf("no Python with pandas, requests and yarl among %v: install python3-pandas python3-requests python3-yarl (Debian) to run the JupyterHealth example", tried)
	return ""
}

// TestGlobalLookupReadsAlikeForHiddenAndAbsent: a global lookup of a
// patient out of the caller's sight makes the same reads, collection by
// collection, as one of an email nobody has, or of a practitioner's: no
// answer, and no time spent, tells them apart.
func TestGlobalLookupReadsAlikeForHiddenAndAbsent(t *testing.T) {
	reg := prometheus.NewRegistry()
	env := handlerstest.StartWith(t, handlerstest.Options{DB: repo.Options{Metrics: repo.NewMetrics(reg)}})
	ctx := context.Background()
	clinic := fxMust(env.Service.CreateOrganization(ctx, fxSys, domain.NewOrganization{Name: "Clinic", Type: "prov"}))
	elsewhere := fxMust(env.Service.CreateOrganization(ctx, fxSys, domain.NewOrganization{Name: "Elsewhere", Type: "prov"}))
	fxMust(env.Service.CreatePatient(ctx, fxSys, domain.NewPatient{Email: "hidden@example.org", FamilyName: "Roe", GivenNames: []string{"Sam"},
		OrganizationIDs: []int64{clinic.ID}}))
	outsider := env.Practitioner(t, "outsider@example.org", false)
	if err := env.Service.AddMember(ctx, fxSys, elsewhere.ID, outsider.ID, domain.RoleMember); err != nil {
		t.Fatal(err)
	}
	token := env.Token(t, outsider.ID)
	reads := func(email string) [2]int {
		t.Helper()
		users, patients := repotest.Operations(t, reg, "users", "find"), repotest.Operations(t, reg, "patients", "find")
		if status, body := handlerstest.GetText(t, env.URL+"/api/v1/patients/global_lookup?email="+url.QueryEscape(email), token); status != http.StatusOK || body != "[]" {
			t.Fatalf("%s: %d %s", email, status, body)
		}
		return [2]int{repotest.Operations(t, reg, "users", "find") - users, repotest.Operations(t, reg, "patients", "find") - patients}
	}
	hidden := reads("hidden@example.org")
	for _, email := range []string{"nobody@example.org", "outsider@example.org"} {
		if got := reads(email); got != hidden {
			t.Errorf("%s: %v reads of users and patients, %v for a hidden patient", email, got, hidden)
		}
	}
}
