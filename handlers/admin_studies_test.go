package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"exchange/domain"
)

func TestStudiesCRUD(t *testing.T) {
	w := admNewWorld(t)
	ctx := context.Background()
	other, err := w.env.Service.CreateOrganization(ctx, domain.SystemActor(), domain.NewOrganization{Name: "Other", Type: "prov"})
	if err != nil {
		t.Fatal(err)
	}

	created := w.call(t, "POST", "/api/v1/studies", w.member, map[string]any{"organizationId": w.org.ID, "name": " Sleep ", "description": "Nights", "iconUrl": "https://example.org/i.png"}, http.StatusCreated)
	id := admID(t, created)
	if created["name"] != "Sleep" || created["description"] != "Nights" || created["iconUrl"] != "https://example.org/i.png" || created["lastUpdated"] == nil {
		t.Errorf("created: %v", created)
	}
	if org := admObj(t, created, "organization"); admID(t, org) != w.org.ID || org["name"] != "Hospital" {
		t.Errorf("organization: %v", org)
	}
	plain := w.call(t, "POST", "/api/v1/studies", w.admin, map[string]any{"organizationId": other.ID, "name": "Plain"}, http.StatusCreated)
	if v, ok := plain["iconUrl"]; !ok || v != nil {
		t.Errorf("no icon is null: %v", plain)
	}
	w.call(t, "POST", "/api/v1/studies", w.member, map[string]any{"organizationId": w.org.ID}, http.StatusBadRequest, "name")
	w.call(t, "POST", "/api/v1/studies", w.member, map[string]any{"organizationId": w.org.ID, "name": "X", "iconUrl": "icon.png"}, http.StatusBadRequest, "iconUrl")
	w.call(t, "POST", "/api/v1/studies", w.member, map[string]any{"organizationId": 9999, "name": "X"}, http.StatusBadRequest, "organizationId")
	w.call(t, "POST", "/api/v1/studies", w.viewer, map[string]any{"organizationId": w.org.ID, "name": "X"}, http.StatusForbidden)
	w.call(t, "POST", "/api/v1/studies", w.member, map[string]any{"organizationId": other.ID, "name": "X"}, http.StatusForbidden)

	path := fmt.Sprintf("/api/v1/studies/%d", id)
	if got := w.call(t, "GET", path, w.viewer, nil, http.StatusOK); fmt.Sprint(got) != fmt.Sprint(created) {
		t.Errorf("GET %v, want %v", got, created)
	}
	w.call(t, "GET", fmt.Sprintf("/api/v1/studies/%d", admID(t, plain)), w.viewer, nil, http.StatusForbidden)
	w.call(t, "GET", "/api/v1/studies/9999", w.admin, nil, http.StatusNotFound)
	if got := admIDs(t, w.call(t, "GET", "/api/v1/studies", w.viewer, nil, http.StatusOK)); !slices.Equal(got, []int64{id}) {
		t.Errorf("the viewer's studies: %v", got)
	}
	if got := admIDs(t, w.call(t, "GET", fmt.Sprintf("/api/v1/studies?organizationId=%d", other.ID), w.admin, nil, http.StatusOK)); !slices.Equal(got, []int64{admID(t, plain)}) {
		t.Errorf("studies of the other organization: %v", got)
	}

	patched := w.call(t, "PATCH", path, w.manager, map[string]any{"name": "Deep sleep", "iconUrl": ""}, http.StatusOK)
	if patched["name"] != "Deep sleep" || patched["description"] != "Nights" || patched["iconUrl"] != nil {
		t.Errorf("PATCH: %v", patched)
	}
	w.call(t, "PATCH", path, w.manager, map[string]any{"organizationId": other.ID}, http.StatusBadRequest, "organizationId")
	w.call(t, "PATCH", path, w.manager, map[string]any{"name": " "}, http.StatusBadRequest, "name")
	w.call(t, "PATCH", path, w.viewer, map[string]any{"name": "V"}, http.StatusForbidden)
	if got := w.call(t, "GET", path, w.admin, nil, http.StatusOK); got["name"] != "Deep sleep" || admID(t, admObj(t, got, "organization")) != w.org.ID {
		t.Errorf("after refused PATCHes: %v", got)
	}

	// Enrolled patients block the delete.
	p := w.patient(t, "p@example.org", "Doe", "Jo", w.org.ID)
	w.call(t, "POST", path+"/patients", w.member, map[string]any{"patientIds": []int64{p.ID}}, http.StatusCreated)
	w.call(t, "DELETE", path, w.member, nil, http.StatusConflict)
	w.call(t, "DELETE", path+"/patients", w.member, map[string]any{"patientIds": []int64{p.ID}}, http.StatusNoContent)
	w.call(t, "DELETE", path, w.viewer, nil, http.StatusForbidden)
	// Its scope requests and data source links go with it.
	hr := w.scopeCode(t, "omh:heart-rate:2.0", "Heart rate")
	ds, err := w.env.Service.CreateDataSource(ctx, domain.SystemActor(), domain.NewDataSource{Name: "Ring", Type: domain.DataSourcePersonalDevice})
	if err != nil {
		t.Fatal(err)
	}
	w.call(t, "POST", path+"/scope_requests", w.member, map[string]any{"scopeCodeId": hr.ID}, http.StatusCreated)
	w.call(t, "POST", path+"/data_sources", w.member, map[string]any{"dataSourceId": ds.ID}, http.StatusCreated)
	w.call(t, "DELETE", path, w.member, nil, http.StatusNoContent)
	w.call(t, "GET", path, w.admin, nil, http.StatusNotFound)
	if snap := admSnapshot(t, w.env); len(snap["study_scope_requests"])+len(snap["study_data_sources"]) != 0 {
		t.Errorf("links left by the deleted study: %v %v", snap["study_scope_requests"], snap["study_data_sources"])
	}
	w.call(t, "DELETE", fmt.Sprintf("/api/v1/data_sources/%d", ds.ID), w.admin, nil, http.StatusNoContent)
	w.call(t, "DELETE", path, w.admin, nil, http.StatusNotFound)
}

func TestStudyEnrollment(t *testing.T) {
	w := admNewWorld(t)
	ctx := context.Background()
	other, err := w.env.Service.CreateOrganization(ctx, domain.SystemActor(), domain.NewOrganization{Name: "Other", Type: "prov"})
	if err != nil {
		t.Fatal(err)
	}
	st := w.study(t, w.org.ID, "Study")
	var ps []int64
	for i := range 5 {
		ps = append(ps, w.patient(t, fmt.Sprintf("p%d@example.org", i), "Doe", "Jo", w.org.ID).ID)
	}
	outsider := w.patient(t, "out@example.org", "Out", "Sider", other.ID)
	path := fmt.Sprintf("/api/v1/studies/%d/patients", st.ID)
	enrolled := func() []int64 {
		t.Helper()
		return admIDs(t, w.call(t, "GET", path+"?pageSize=1000", w.admin, nil, http.StatusOK))
	}

	out := w.call(t, "POST", path, w.member, map[string]any{"patientIds": []int64{ps[0]}}, http.StatusCreated)
	if fmt.Sprint(out["patientIds"]) != fmt.Sprintf("[%d]", ps[0]) || admID(t, out, "studyId") != st.ID {
		t.Errorf("enrolled: %v", out)
	}

	// All or nothing: an unknown, an already enrolled or an outside patient
	// in the list enrolls none of it.
	before := admSnapshot(t, w.env)
	w.call(t, "POST", path, w.member, map[string]any{"patientIds": []int64{ps[1], 9999}}, http.StatusBadRequest, "patientIds")
	w.call(t, "POST", path, w.member, map[string]any{"patientIds": []int64{ps[1], ps[2], ps[0]}}, http.StatusConflict)
	w.call(t, "POST", path, w.member, map[string]any{"patientIds": []int64{ps[1], outsider.ID}}, http.StatusBadRequest, "patientIds")
	w.call(t, "POST", path, w.member, map[string]any{"patientIds": []int64{ps[1], ps[1]}}, http.StatusBadRequest, "patientIds")
	w.call(t, "POST", path, w.member, map[string]any{"patientIds": []int64{}}, http.StatusBadRequest, "patientIds")
	w.call(t, "POST", path, w.member, map[string]any{"patientIds": "1"}, http.StatusBadRequest, "patientIds")
	w.call(t, "POST", path, w.viewer, map[string]any{"patientIds": []int64{ps[1]}}, http.StatusForbidden)
	admSameSnapshot(t, "refused enrollments", before, admSnapshot(t, w.env))
	if got := enrolled(); !slices.Equal(got, []int64{ps[0]}) {
		t.Fatalf("after refused enrollments: %v", got)
	}

	w.call(t, "POST", path, w.member, map[string]any{"patientIds": []int64{ps[3], ps[1], ps[2], ps[4]}}, http.StatusCreated)
	if got := enrolled(); !slices.Equal(got, ps) {
		t.Fatalf("enrolled: %v, want %v", got, ps)
	}

	// The enrolled patients are a paginated list.
	page2 := w.call(t, "GET", path+"?pageSize=2&page=2", w.viewer, nil, http.StatusOK)
	if page2["count"] != float64(5) || !slices.Equal(admIDs(t, page2), ps[2:4]) || page2["next"] == nil || page2["previous"] == nil {
		t.Errorf("page 2: %v", page2)
	}
	if r := admResults(t, page2); r[0]["nameFamily"] != "Doe" {
		t.Errorf("a patient of the list: %v", r[0])
	}
	w.call(t, "GET", path+"?pageSize=2&page=4", w.viewer, nil, http.StatusNotFound)
	w.call(t, "GET", path, w.env.Token(t, outsider.UserID), nil, http.StatusForbidden)

	// Unenroll: all must be enrolled, or nothing changes; the answers to the
	// study go with the enrollment.
	hr := w.scopeCode(t, "omh:heart-rate:2.0", "Heart rate")
	if _, err := w.env.Service.AddScopeRequest(ctx, domain.SystemActor(), st.ID, domain.ScopeRef{ID: hr.ID}); err != nil {
		t.Fatal(err)
	}
	yes := true
	if err := w.env.Service.AnswerConsents(ctx, domain.SystemActor(), ps[0], []domain.StudyScopeConsents{{StudyID: st.ID, Scopes: []domain.ScopeConsent{{System: hr.System, Code: hr.Code, Consented: &yes}}}}); err != nil {
		t.Fatal(err)
	}
	before = admSnapshot(t, w.env)
	w.call(t, "DELETE", path, w.member, map[string]any{"patientIds": []int64{ps[0], outsider.ID}}, http.StatusNotFound)
	admSameSnapshot(t, "a refused unenrollment", before, admSnapshot(t, w.env))
	w.call(t, "DELETE", path, w.member, map[string]any{"patientIds": []int64{ps[0], ps[4]}}, http.StatusNoContent)
	if got := enrolled(); !slices.Equal(got, ps[1:4]) {
		t.Errorf("after unenrolling: %v", got)
	}
	if answers := admSnapshot(t, w.env)["consents"]; len(answers) != 0 {
		t.Errorf("answers left after unenrolling: %v", answers)
	}
	w.call(t, "POST", path, w.member, map[string]any{"patientIds": []int64{ps[0]}}, http.StatusCreated)
	doc := w.call(t, "GET", fmt.Sprintf("/api/v1/patients/%d/consents", ps[0]), w.member, nil, http.StatusOK)
	if len(admList(t, doc, "studies")) != 0 || len(admList(t, doc, "studiesPendingConsent")) != 1 {
		t.Errorf("consents after enrolling again: %v", doc)
	}
	w.call(t, "POST", "/api/v1/studies/9999/patients", w.admin, map[string]any{"patientIds": []int64{ps[0]}}, http.StatusNotFound)
}

func TestStudyScopeRequests(t *testing.T) {
	w := admNewWorld(t)
	ctx := context.Background()
	sys := domain.SystemActor()
	hr := w.scopeCode(t, "omh:heart-rate:2.0", "Heart rate")
	steps := w.scopeCode(t, "omh:step-count:2.0", "Steps")
	st := w.study(t, w.org.ID, "Study")
	path := fmt.Sprintf("/api/v1/studies/%d/scope_requests", st.ID)

	if empty := w.call(t, "GET", path, w.viewer, nil, http.StatusOK); empty["count"] != float64(0) || len(admResults(t, empty)) != 0 {
		t.Errorf("no requests: %v", empty)
	}
	byID := w.call(t, "POST", path, w.member, map[string]any{"scopeCodeId": hr.ID}, http.StatusCreated)
	if admID(t, byID) != hr.ID || byID["codingSystem"] != domain.SystemOpenMHealth || byID["codingCode"] != "omh:heart-rate:2.0" || byID["text"] != "Heart rate" {
		t.Errorf("by id: %v", byID)
	}
	byCoding := w.call(t, "POST", path, w.member, map[string]any{"codingSystem": domain.SystemOpenMHealth, "codingCode": "omh:step-count:2.0"}, http.StatusCreated)
	if admID(t, byCoding) != steps.ID {
		t.Errorf("by coding: %v", byCoding)
	}
	w.call(t, "POST", path, w.member, map[string]any{"scopeCodeId": hr.ID}, http.StatusConflict)
	w.call(t, "POST", path, w.member, map[string]any{"codingSystem": domain.SystemOpenMHealth, "codingCode": "omh:step-count:2.0"}, http.StatusConflict)
	w.call(t, "POST", path, w.member, map[string]any{"scopeCodeId": 9999}, http.StatusBadRequest, "scopeCodeId")
	w.call(t, "POST", path, w.member, map[string]any{"codingSystem": domain.SystemOpenMHealth, "codingCode": "omh:nothing"}, http.StatusBadRequest, "scopeCodeId")
	w.call(t, "POST", path, w.member, map[string]any{}, http.StatusBadRequest, "scopeCodeId")
	w.call(t, "POST", path, w.viewer, map[string]any{"scopeCodeId": hr.ID}, http.StatusForbidden)
	list := w.call(t, "GET", path, w.viewer, nil, http.StatusOK)
	if got := admIDs(t, list); !slices.Equal(got, []int64{hr.ID, steps.ID}) || list["count"] != float64(2) {
		t.Errorf("requests: %v", list)
	}

	// Removing a request forgets the answers given to it, and only those.
	p := w.patient(t, "p@example.org", "Doe", "Jo", w.org.ID)
	if err := w.env.Service.EnrollPatients(ctx, sys, st.ID, []int64{p.ID}); err != nil {
		t.Fatal(err)
	}
	yes := true
	if err := w.env.Service.AnswerConsents(ctx, sys, p.ID, []domain.StudyScopeConsents{{StudyID: st.ID, Scopes: []domain.ScopeConsent{
		{System: hr.System, Code: hr.Code, Consented: &yes}, {System: steps.System, Code: steps.Code, Consented: &yes}}}}); err != nil {
		t.Fatal(err)
	}
	w.call(t, "DELETE", fmt.Sprintf("%s/%d", path, hr.ID), w.viewer, nil, http.StatusForbidden)
	w.call(t, "DELETE", fmt.Sprintf("%s/%d", path, hr.ID), w.member, nil, http.StatusNoContent)
	w.call(t, "DELETE", fmt.Sprintf("%s/%d", path, hr.ID), w.member, nil, http.StatusNotFound)
	if got := admIDs(t, w.call(t, "GET", path, w.viewer, nil, http.StatusOK)); !slices.Equal(got, []int64{steps.ID}) {
		t.Errorf("requests after the removal: %v", got)
	}
	answers, err := w.env.Service.PatientConsents(ctx, sys, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(answers.Studies) != 1 || len(answers.Studies[0].Answers) != 1 || answers.Studies[0].Answers[0].Code.ID != steps.ID {
		t.Errorf("answers after the removal: %+v", answers.Studies)
	}
	if snap := admSnapshot(t, w.env); len(snap["consents"]) != 1 {
		t.Errorf("stored answers: %v", snap["consents"])
	}
	// Asking again: the scope is pending, not answered.
	w.call(t, "POST", path, w.member, map[string]any{"scopeCodeId": hr.ID}, http.StatusCreated)
	consents := w.call(t, "GET", fmt.Sprintf("/api/v1/patients/%d/consents", p.ID), w.admin, nil, http.StatusOK)
	if pending := admList(t, consents, "studiesPendingConsent"); len(pending) != 1 || len(admList(t, pending[0], "pendingScopeConsents")) != 1 {
		t.Errorf("pending after asking again: %v", consents)
	}
}

func TestStudyDataSources(t *testing.T) {
	w := admNewWorld(t)
	ctx := context.Background()
	st := w.study(t, w.org.ID, "Study")
	var sources []int64
	for _, name := range []string{"Ring", "Watch"} {
		d, err := w.env.Service.CreateDataSource(ctx, domain.SystemActor(), domain.NewDataSource{Name: name, Type: domain.DataSourcePersonalDevice})
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, d.ID)
	}
	path := fmt.Sprintf("/api/v1/studies/%d/data_sources", st.ID)

	added := w.call(t, "POST", path, w.member, map[string]any{"dataSourceId": sources[1]}, http.StatusCreated)
	if admID(t, added) != sources[1] || added["name"] != "Watch" || added["type"] != "personal_device" {
		t.Errorf("added: %v", added)
	}
	w.call(t, "POST", path, w.member, map[string]any{"dataSourceId": sources[0]}, http.StatusCreated)
	w.call(t, "POST", path, w.member, map[string]any{"dataSourceId": sources[0]}, http.StatusConflict)
	w.call(t, "POST", path, w.member, map[string]any{"dataSourceId": 9999}, http.StatusBadRequest, "dataSourceId")
	w.call(t, "POST", path, w.member, map[string]any{}, http.StatusBadRequest, "dataSourceId")
	w.call(t, "POST", path, w.viewer, map[string]any{"dataSourceId": sources[0]}, http.StatusForbidden)
	list := w.call(t, "GET", path, w.viewer, nil, http.StatusOK)
	if got := admIDs(t, list); !slices.Equal(got, sources) || list["count"] != float64(2) {
		t.Errorf("data sources: %v", list)
	}

	w.call(t, "DELETE", fmt.Sprintf("%s/%d", path, sources[0]), w.viewer, nil, http.StatusForbidden)
	w.call(t, "DELETE", fmt.Sprintf("%s/%d", path, sources[0]), w.member, nil, http.StatusNoContent)
	w.call(t, "DELETE", fmt.Sprintf("%s/%d", path, sources[0]), w.member, nil, http.StatusNotFound)
	if got := admIDs(t, w.call(t, "GET", path, w.viewer, nil, http.StatusOK)); !slices.Equal(got, sources[1:]) {
		t.Errorf("after the removal: %v", got)
	}
	w.call(t, "GET", "/api/v1/studies/9999/data_sources", w.admin, nil, http.StatusNotFound)
}
