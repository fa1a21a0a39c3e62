package handlers_test

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"exchange/domain"
)

// fxRefs names the fixture's records as FHIR ids, per type.
func (w *fxWorld) fxRefs() map[string]string {
	id := func(v int64) string { return fmt.Sprint(v) }
	return map[string]string{
		"alice": id(w.alice.ID), "bob": id(w.bob.ID), "carol": id(w.carol.ID), "dave": id(w.dave.ID),
		"S1": id(w.s1.ID), "S2": id(w.s2.ID), "S3": id(w.s3.ID),
		"watch": id(w.watch), "cuff": id(w.cuff), "scale": id(w.scale),
		"A": id(w.orgA.ID), "A1": id(w.orgA1.ID), "B": id(w.orgB.ID),
		"super": id(w.super.ID), "doc": id(w.doc.ID), "viewer": id(w.viewer.ID), "nurse": id(w.nurse.ID), "outsider": id(w.outsider.ID),
	}
}

// projectionNames runs a one-page search of a projection and names the
// records it finds, sorted.
func (w *fxWorld) projectionNames(t *testing.T, actor, resourceType, query string) []string {
	t.Helper()
	byID := map[string]string{}
	for name, id := range w.fxRefs() {
		if fxKindOf(name) == resourceType {
			byID[id] = name
		}
	}
	var names []string
	for _, id := range w.ids(t, w.tok[actor], "/"+resourceType+"?"+w.fxSubstitute(query)) {
		n, ok := byID[id]
		if !ok {
			n = "?" + id
		}
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// fxKindOf is the FHIR type of a record of the fixture, by name.
func fxKindOf(name string) string {
	kind := map[string]string{"alice": "Patient", "bob": "Patient", "carol": "Patient", "dave": "Patient",
		"S1": "Group", "S2": "Group", "S3": "Group", "watch": "Device", "cuff": "Device", "scale": "Device",
		"A": "Organization", "A1": "Organization", "B": "Organization"}[name]
	if kind == "" {
		return "Practitioner"
	}
	return kind
}

// fxSubstitute replaces {name} in a query with the record's id and {MRN}
// with the identifier system.
func (w *fxWorld) fxSubstitute(q string) string {
	var pairs []string
	for name, id := range w.fxRefs() {
		pairs = append(pairs, "{"+name+"}", id)
	}
	pairs = append(pairs, "{MRN}", fxMRN)
	return strings.NewReplacer(pairs...).Replace(q)
}

// TestFHIRProjectionSearches is the result table of the five join
// parameters on each of the five projection types, what each caller sees
// without them, and 403 for values the caller may not read.
func TestFHIRProjectionSearches(t *testing.T) {
	w := fxNewWorld(t)
	// One row per parameter: a study's id for the two study parameters, a
	// patient for patient and patient.identifier, an organization.
	params := []struct{ param, value string }{
		{"_has:Group:member:_id", "{S1}"},
		{"patient", "{bob}"},
		{"patient.organization", "{A1}"},
		{"patient._has:Group:member:_id", "{S2}"},
		{"patient.identifier", "{MRN}|A-1"},
	}
	want := map[string][]string{ // per type, in the order of params
		// the study's patients / the patient / the organization's patients
		"Patient": {"alice bob dave", "bob", "alice", "bob dave", "alice"},
		// the study / the patient's studies / the organization's studies
		"Group": {"S1", "S1 S2", "", "S2", "S1"},
		// the study's data sources / those of the patient's studies / those
		// of the organization's studies
		"Device": {"watch", "cuff watch", "", "cuff", "watch"},
		// the study's organization / the patient's organizations / the
		// organization itself
		"Organization": {"A", "A", "A1", "A", "A A1"},
		// the practitioners of the study's organization / of the patient's
		// organizations / of the organization
		"Practitioner": {"doc viewer", "doc viewer", "nurse", "doc viewer", "doc nurse viewer"},
	}
	for rt, rows := range want {
		for i, p := range params {
			got := w.projectionNames(t, "doc", rt, p.param+"="+p.value)
			if !slices.Equal(got, strings.Fields(rows[i])) {
				t.Errorf("%s?%s=%s: %v, want %v", rt, p.param, p.value, got, strings.Fields(rows[i]))
			}
		}
	}
	// The organization parameter again, where organization A has studies.
	for rt, w1 := range map[string]string{"Patient": "alice bob dave", "Group": "S1 S2", "Device": "cuff watch", "Organization": "A",
		"Practitioner": "doc viewer"} {
		if got := w.projectionNames(t, "doc", rt, "patient.organization={A}"); !slices.Equal(got, strings.Fields(w1)) {
			t.Errorf("%s?patient.organization=A: %v, want %s", rt, got, w1)
		}
	}

	for _, c := range []struct{ actor, rt, query, want string }{
		// Without joins: what the caller may read.
		{"doc", "Patient", "", "alice bob dave"},
		{"doc", "Group", "", "S1 S2"},
		{"doc", "Device", "", "cuff scale watch"},
		{"doc", "Organization", "", "A A1"},
		{"doc", "Practitioner", "", "doc nurse viewer"},
		{"nurse", "Patient", "", "alice"},
		{"alice", "Patient", "", "alice"},
		{"alice", "Group", "", "S1"},
		{"alice", "Organization", "", "A A1"},
		{"alice", "Practitioner", "", "doc nurse viewer"},
		{"alice", "Device", "", "cuff scale watch"},
		{"outsider", "Patient", "", "carol"},
		{"super", "Patient", "", "alice bob carol dave"},
		{"super", "Group", "", "S1 S2 S3"},
		{"super", "Organization", "", "A A1 B"},
		{"super", "Practitioner", "", "doc nurse outsider super viewer"},
		// Joins over another organization, for a superuser.
		{"super", "Device", "patient.organization={B}", "cuff scale"},
		{"super", "Practitioner", "_has:Group:member:_id={S3}", "outsider"},
		{"super", "Group", "patient={carol}", "S3"},
		// Several values are OR'ed, several parameters AND'ed.
		{"doc", "Group", "patient={alice},{dave}", "S1 S2"},
		{"doc", "Group", "patient={alice}&patient={dave}", "S1"},
		{"doc", "Patient", "_has:Group:member:_id={S1}&patient.organization={A1}", "alice"},
		{"doc", "Patient", "_id={bob},{carol}", "bob"},
		{"doc", "Device", "_id={scale}", "scale"},
		{"doc", "Patient", "patient=999999", ""},
		// The Patient parameters.
		{"super", "Patient", "identifier={MRN}|A-1", "alice"},
		{"super", "Patient", "identifier=C-3", "carol"},
		{"super", "Patient", "identifier={MRN}|A-1,{MRN}|C-3", "alice carol"},
		{"super", "Patient", "identifier=http://other.example.org|A-1", ""},
		{"super", "Patient", "family=smith", "bob carol"},
		{"super", "Patient", "family=SMITHS", "carol"},
		{"super", "Patient", "family=odeg", "alice"},
		{"super", "Patient", "family=%C3%98DEG%C3%85", "alice"},
		{"super", "Patient", "family=mith", ""},
		{"super", "Patient", "given=mar", "alice"},
		{"super", "Patient", "given=D", "dave"},
		{"super", "Patient", "given=smith", ""},
		{"super", "Patient", "name=s", "bob carol"},
		{"super", "Patient", "name=al,bo", "alice bob"},
		{"super", "Patient", "name=marie", "alice"},
		{"super", "Patient", "name=smith&given=c", "carol"},
		{"super", "Patient", "birthdate=1980-05-17", "alice"},
		{"super", "Patient", "birthdate=1980", "alice"},
		{"super", "Patient", "birthdate=eq1980-05", "alice"},
		{"super", "Patient", "birthdate=ne1980-05-17", "bob carol"},
		{"super", "Patient", "birthdate=lt1980", "bob"},
		{"super", "Patient", "birthdate=le1980-05-17", "alice bob"},
		{"super", "Patient", "birthdate=gt1980-05-17", "carol"},
		{"super", "Patient", "birthdate=ge1980-05-17", "alice carol"},
		{"super", "Patient", "birthdate=sa1980-05-16", "alice carol"},
		{"super", "Patient", "birthdate=eb1990-01-01", "alice bob"},
		{"super", "Patient", "birthdate=1975-12-01,1990", "bob carol"},
		{"super", "Patient", "birthdate=ge1976&birthdate=lt1990", "alice"},
		{"doc", "Patient", "family=smith", "bob"},
	} {
		if got := w.projectionNames(t, c.actor, c.rt, c.query); !slices.Equal(got, strings.Fields(c.want)) {
			t.Errorf("%s: %s?%s: %v, want %v", c.actor, c.rt, c.query, got, strings.Fields(c.want))
		}
	}
	// Projections page through next links too, in either order.
	for _, c := range []struct{ actor, query, want string }{
		{"super", "Patient?_count=1", "alice bob dave carol"},
		{"super", "Patient?_count=3&_sort=-_lastUpdated", "carol dave bob alice"},
		{"super", "Practitioner?_count=2&_sort=lastUpdated", "super doc viewer nurse outsider"},
		{"doc", "Group?_count=1&_sort=-_lastUpdated", "S2 S1"},
		{"doc", "Device?_count=2", "watch cuff scale"},
		{"alice", "Organization?_count=1", "A A1"},
	} {
		rt, _, _ := strings.Cut(c.query, "?")
		var got []string
		next := fxBase + "/" + c.query
		for pages := 0; next != ""; pages++ {
			resp, body := w.env.GetJSON(t, strings.TrimPrefix(next, w.env.URL), w.tok[c.actor])
			if resp.StatusCode != http.StatusOK || pages > 5 {
				t.Fatalf("%s page %d: %d %v", c.query, pages, resp.StatusCode, body)
			}
			for _, id := range fxIDsOf(fxMatches(t, body)) {
				for name, ref := range w.fxRefs() {
					if ref == id && fxKindOf(name) == rt {
						got = append(got, name)
					}
				}
			}
			next = fxLink(body, "next")
		}
		if !slices.Equal(got, strings.Fields(c.want)) {
			t.Errorf("%s: %s pages: %v, want %v", c.actor, c.query, got, strings.Fields(c.want))
		}
	}

	// Unknown Patient parameters are reported; malformed ones refused.
	status, body := w.search(t, w.tok["doc"], "/Patient?code=x")
	if status != http.StatusOK || len(fxOutcomes(t, body)) != 1 {
		t.Errorf("Patient?code=x: %d %v", status, body)
	}
	for _, q := range []string{"birthdate=1980-02-30", "family=", "_sort=date", "patient.identifier=A-1"} {
		if status, body := w.search(t, w.tok["doc"], "/Patient?"+q); status != http.StatusBadRequest {
			t.Errorf("Patient?%s: %d %v", q, status, body)
		}
	}

	// Organizations and studies the caller may not read are 403, on every
	// type; patients name nothing, as ids that do not exist.
	for _, rt := range []string{"Patient", "Practitioner", "Organization", "Group", "Device"} {
		for _, q := range []string{"patient.organization={B}", "_has:Group:member:_id={S3}", "patient._has:Group:member:_id={S3}"} {
			status, body := w.search(t, w.tok["doc"], "/"+rt+"?"+w.fxSubstitute(q))
			if status != http.StatusForbidden || fxIssueCode(body) != "forbidden" {
				t.Errorf("doc: %s?%s: %d %v, want 403", rt, q, status, body)
			}
		}
		for _, c := range []struct{ actor, query string }{{"doc", "patient={carol}"}, {"doc", "patient.identifier={MRN}|C-3"}, {"alice", "patient={bob}"}} {
			if ids := w.ids(t, w.tok[c.actor], "/"+rt+"?"+w.fxSubstitute(c.query)); len(ids) != 0 {
				t.Errorf("%s: %s?%s: %v, want none", c.actor, rt, c.query, ids)
			}
		}
	}
}

// TestFHIRReads reads a record of every native type by id: the resource
// with its projection's elements, the same as a search finds it; 404 for
// an unknown id and for a patient (or their observation) the caller may
// not read, 403 for another record the caller may not read; writes are 405.
func TestFHIRReads(t *testing.T) {
	w := fxNewWorld(t)
	obs := w.create(t, w.tok["doc"], fxObs{patient: w.alice.ID, device: w.watch, code: fxHR, identifiers: []string{"r-1"},
		payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2024-03-05T10:00:00Z")))})[0]
	carols := w.create(t, w.tok["outsider"], fxObs{patient: w.carol.ID, device: w.cuff, code: fxHR,
		payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2024-03-05T10:00:00Z")))})[0]
	refs := w.fxRefs()
	keys := func(r map[string]any) []string {
		var out []string
		for k := range r {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	for _, c := range []struct {
		ref, query string
		keys       []string
		check      func(r map[string]any) bool
	}{
		{"Observation/" + obs, "Observation?_id=" + obs, []string{"code", "device", "effectiveDateTime", "id", "identifier", "meta", "resourceType", "status", "subject", "valueAttachment"},
			func(r map[string]any) bool { return fxObj(r["subject"])["reference"] == "Patient/"+refs["alice"] }},
		{"Patient/" + refs["alice"], "Patient?_id=" + refs["alice"], []string{"birthDate", "id", "identifier", "meta", "name", "resourceType", "telecom"},
			func(r map[string]any) bool {
				name := fxObj(fxArr(r["name"])[0])
				telecom := fxCompact(r["telecom"])
				return len(fxArr(r["name"])) == 1 && name["family"] == "Ødegård" && fxCompact(name["given"]) == `["Alice","Marie"]` && len(name) == 2 &&
					r["birthDate"] == "1980-05-17" && telecom == `[{"system":"email","value":"alice@example.org"},{"system":"phone","value":"+1 555 0100"}]` &&
					fxCompact(r["identifier"]) == `[{"system":"`+fxMRN+`","value":"A-1"}]`
			}},
		{"Patient/" + refs["dave"], "Patient?_id=" + refs["dave"], []string{"id", "meta", "name", "resourceType", "telecom"}, nil},
		{"Practitioner/" + refs["nurse"], "Practitioner?_id=" + refs["nurse"], []string{"id", "identifier", "meta", "name", "resourceType", "telecom"},
			func(r map[string]any) bool {
				return fxCompact(r["name"]) == `[{"family":"Practitioner","given":["Nurse"]}]` && strings.Contains(fxCompact(r["telecom"]), "nurse@example.org")
			}},
		{"Organization/" + refs["A1"], "Organization?_id=" + refs["A1"], []string{"id", "meta", "name", "partOf", "resourceType", "type"},
			func(r map[string]any) bool {
				return r["name"] == "Cardiology" && fxObj(r["partOf"])["reference"] == "Organization/"+refs["A"] && strings.Contains(fxCompact(r["type"]), `"code":"dept"`)
			}},
		{"Organization/" + refs["A"], "Organization?_id=" + refs["A"], []string{"id", "meta", "name", "resourceType", "type"}, nil},
		{"Group/" + refs["S1"], "Group?_id=" + refs["S1"], []string{"description", "id", "managingEntity", "membership", "meta", "name", "quantity", "resourceType", "type"},
			func(r map[string]any) bool {
				return r["type"] == "person" && r["membership"] == "enumerated" && r["quantity"] == float64(3) && r["name"] == "Sleep and heart" &&
					r["description"] == "Sleep and heart description" && fxObj(r["managingEntity"])["reference"] == "Organization/"+refs["A"]
			}},
		{"Device/" + refs["scale"], "Device?_id=" + refs["scale"], []string{"displayName", "id", "meta", "resourceType", "type"},
			func(r map[string]any) bool {
				return r["displayName"] == "Scale" && strings.Contains(fxCompact(r["type"]), `"code":"medical_device"`)
			}},
	} {
		resp, r := w.env.GetJSON(t, fxBase+"/"+c.ref, w.tok["doc"])
		if resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") != `W/"1"` || resp.Header.Get("Content-Type") != "application/fhir+json" {
			t.Errorf("read %s: %d %v", c.ref, resp.StatusCode, r)
			continue
		}
		rt, id, _ := strings.Cut(c.ref, "/")
		if r["resourceType"] != rt || r["id"] != id || !slices.Equal(keys(r), c.keys) || !fxInstant.MatchString(fmt.Sprint(fxObj(r["meta"])["lastUpdated"])) ||
			(c.check != nil && !c.check(r)) {
			t.Errorf("read %s: %s (keys %v, want %v)", c.ref, fxCompact(r), keys(r), c.keys)
		}
		status, bundle := w.search(t, w.tok["doc"], "/"+c.query)
		if found := fxMatches(t, bundle); status != http.StatusOK || len(found) != 1 || fxCompact(found[0]) != fxCompact(r) {
			t.Errorf("search %s: %d %v, want the read resource", c.query, status, bundle)
		}
		// Records are read-only.
		for _, method := range []string{"PUT", "PATCH", "DELETE"} {
			resp, raw := fxDo(t, w.env, method, fxBase+"/"+c.ref, map[string]string{"Authorization": "Bearer " + w.tok["super"]}, fxCompact(r))
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET" || fxDecode(t, raw)["resourceType"] != "OperationOutcome" {
				t.Errorf("%s %s: %d Allow %q %s", method, c.ref, resp.StatusCode, resp.Header.Get("Allow"), raw)
			}
		}
	}
	// Several groups on one page each count their own members.
	status, bundle := w.search(t, w.tok["doc"], "/Group")
	groups := fxMatches(t, bundle)
	if status != http.StatusOK || len(groups) < 2 {
		t.Fatalf("Group search: %d %v", status, bundle)
	}
	for _, g := range groups {
		id, _ := strconv.ParseInt(fmt.Sprint(g["id"]), 10, 64)
		members, err := w.env.Service.StudyPatients(w.ctx, fxSys, id, domain.Page{Number: 1, Size: 100})
		if err != nil || g["quantity"] != float64(members.Total) {
			t.Errorf("Group/%d quantity %v, want %d (%v)", id, g["quantity"], members.Total, err)
		}
	}
	// A patient reads their own records and those related to them.
	for _, ref := range []string{"Observation/" + obs, "Patient/" + refs["alice"], "Group/" + refs["S1"], "Organization/" + refs["A1"],
		"Device/" + refs["scale"], "Practitioner/" + refs["nurse"]} {
		if resp, r := w.env.GetJSON(t, fxBase+"/"+ref, w.tok["alice"]); resp.StatusCode != http.StatusOK {
			t.Errorf("alice reads %s: %d %v", ref, resp.StatusCode, r)
		}
	}
	for _, c := range []struct {
		actor, ref string
		status     int
	}{
		// Patients out of reach, and their data, are not there for the caller.
		{"doc", "Observation/" + carols, http.StatusNotFound},
		{"bob", "Observation/" + obs, http.StatusNotFound},
		{"doc", "Patient/" + refs["carol"], http.StatusNotFound},
		{"alice", "Patient/" + refs["bob"], http.StatusNotFound},
		{"doc", "Organization/" + refs["B"], http.StatusForbidden},
		{"doc", "Group/" + refs["S3"], http.StatusForbidden},
		{"alice", "Group/" + refs["S2"], http.StatusForbidden},
		{"doc", "Practitioner/" + refs["outsider"], http.StatusForbidden},
		{"doc", "Observation/999999", http.StatusNotFound},
		{"doc", "Patient/999999", http.StatusNotFound},
		{"doc", "Practitioner/999999", http.StatusNotFound},
		{"doc", "Practitioner/" + fmt.Sprint(w.alice.UserID), http.StatusNotFound}, // a patient's user is no practitioner
		{"doc", "Organization/999999", http.StatusNotFound},
		{"doc", "Group/999999", http.StatusNotFound},
		{"doc", "Device/999999", http.StatusNotFound},
		{"doc", "Observation/abc", http.StatusNotFound},
		{"", "Patient/" + refs["alice"], http.StatusUnauthorized},
	} {
		resp, r := w.env.GetJSON(t, fxBase+"/"+c.ref, w.tok[c.actor])
		if resp.StatusCode != c.status || r["resourceType"] != "OperationOutcome" {
			t.Errorf("%s reads %s: %d %v, want %d", c.actor, c.ref, resp.StatusCode, r, c.status)
		}
	}
}
