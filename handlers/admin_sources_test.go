package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"exchange/domain"
	"exchange/handlers/handlerstest"
)

func TestDataSourcesCRUD(t *testing.T) {
	w := admNewWorld(t)
	ctx := context.Background()
	hr := w.scopeCode(t, "omh:heart-rate:2.0", "Heart rate")
	steps := w.scopeCode(t, "omh:step-count:2.0", "Steps")

	created := w.call(t, "POST", "/api/v1/data_sources", w.admin, map[string]any{"name": " Ring ", "type": "personal_device", "supportedScopeCodeIds": []int64{steps.ID, hr.ID, steps.ID}}, http.StatusCreated)
	id := admID(t, created)
	if created["name"] != "Ring" || created["type"] != "personal_device" || created["lastUpdated"] == nil {
		t.Errorf("created: %v", created)
	}
	if _, leaked := created["supportedScopeCodeIds"]; leaked {
		t.Errorf("the answer carries supportedScopeCodeIds: %v", created)
	}
	if got, want := admKeys(created), []string{"id", "lastUpdated", "name", "supportedScopes", "type"}; !slices.Equal(got, want) {
		t.Errorf("data source keys %v, want %v", got, want)
	}
	supported := admList(t, created, "supportedScopes")
	if len(supported) != 2 {
		t.Fatalf("supportedScopes: %v", supported)
	}
	admCheckScopeCode(t, "supported 0", supported[0], hr)
	admCheckScopeCode(t, "supported 1", supported[1], steps)
	bare := w.call(t, "POST", "/api/v1/data_sources", w.admin, map[string]any{"name": "App", "type": "patient_app"}, http.StatusCreated)
	if s, ok := bare["supportedScopes"].([]any); !ok || len(s) != 0 {
		t.Errorf("no supported scopes is []: %v", bare)
	}

	before := admSnapshot(t, w.env)
	w.call(t, "POST", "/api/v1/data_sources", w.admin, map[string]any{"name": "X", "type": "personal_device", "supportedScopeCodeIds": []int64{hr.ID, 9999}}, http.StatusBadRequest, "supportedScopeCodeIds")
	w.call(t, "POST", "/api/v1/data_sources", w.admin, map[string]any{"name": "X", "type": "toaster"}, http.StatusBadRequest, "type")
	w.call(t, "POST", "/api/v1/data_sources", w.admin, map[string]any{"type": "patient_app"}, http.StatusBadRequest, "name")
	w.call(t, "POST", "/api/v1/data_sources", w.admin, map[string]any{"name": "X", "type": "patient_app", "supportedScopes": []int64{hr.ID}}, http.StatusBadRequest, "supportedScopes")
	w.call(t, "POST", "/api/v1/data_sources", w.manager, map[string]any{"name": "X", "type": "patient_app"}, http.StatusForbidden)
	admSameSnapshot(t, "refused data source creates", before, admSnapshot(t, w.env))

	path := fmt.Sprintf("/api/v1/data_sources/%d", id)
	// Everyone authenticated reads the catalogue.
	patient := w.env.Token(t, w.patient(t, "p@example.org", "Doe", "Jo", w.org.ID).UserID)
	if got := w.call(t, "GET", path, patient, nil, http.StatusOK); fmt.Sprint(got) != fmt.Sprint(created) {
		t.Errorf("GET %v, want %v", got, created)
	}
	list := w.call(t, "GET", "/api/v1/data_sources", w.viewer, nil, http.StatusOK)
	if got := admIDs(t, list); !slices.Equal(got, []int64{id, admID(t, bare)}) {
		t.Errorf("list: %v", got)
	}
	// Each item carries its own scopes (read for the whole page at once).
	if items := admList(t, list, "results"); fmt.Sprint(items[0]) != fmt.Sprint(created) || fmt.Sprint(items[1]) != fmt.Sprint(bare) {
		t.Errorf("list items %v, want %v and %v", items, created, bare)
	}
	w.call(t, "GET", "/api/v1/data_sources/9999", w.admin, nil, http.StatusNotFound)

	patched := w.call(t, "PATCH", path, w.admin, map[string]any{"type": "medical_device", "supportedScopeCodeIds": []int64{steps.ID}}, http.StatusOK)
	if patched["name"] != "Ring" || patched["type"] != "medical_device" || len(admList(t, patched, "supportedScopes")) != 1 {
		t.Errorf("PATCH: %v", patched)
	}
	admCheckScopeCode(t, "patched", admList(t, patched, "supportedScopes")[0], steps)
	w.call(t, "PATCH", path, w.admin, map[string]any{"supportedScopeCodeIds": []int64{9999}}, http.StatusBadRequest, "supportedScopeCodeIds")
	w.call(t, "PATCH", path, w.admin, map[string]any{"type": "toaster"}, http.StatusBadRequest, "type")
	w.call(t, "PATCH", path, w.manager, map[string]any{"name": "Mine"}, http.StatusForbidden)
	w.call(t, "PATCH", "/api/v1/data_sources/9999", w.admin, map[string]any{"name": "N"}, http.StatusNotFound)
	if got := w.call(t, "GET", path, w.admin, nil, http.StatusOK); fmt.Sprint(got) != fmt.Sprint(patched) {
		t.Errorf("after refused PATCHes: %v, want %v", got, patched)
	}

	// A study using it blocks the delete; so does a FHIR source.
	st := w.study(t, w.org.ID, "Study")
	if _, err := w.env.Service.AddStudyDataSource(ctx, domain.SystemActor(), st.ID, id); err != nil {
		t.Fatal(err)
	}
	w.call(t, "DELETE", path, w.admin, nil, http.StatusConflict)
	if err := w.env.Service.RemoveStudyDataSource(ctx, domain.SystemActor(), st.ID, id); err != nil {
		t.Fatal(err)
	}
	w.call(t, "POST", "/api/v1/fhir_sources", patient, map[string]any{"dataSource": id, "label": "Ring"}, http.StatusCreated)
	w.call(t, "DELETE", path, w.admin, nil, http.StatusConflict)
	bareID := admID(t, bare)
	w.call(t, "DELETE", fmt.Sprintf("/api/v1/data_sources/%d", bareID), w.manager, nil, http.StatusForbidden)
	w.call(t, "DELETE", fmt.Sprintf("/api/v1/data_sources/%d", bareID), w.admin, nil, http.StatusNoContent)
	w.call(t, "GET", fmt.Sprintf("/api/v1/data_sources/%d", bareID), w.admin, nil, http.StatusNotFound)
	w.call(t, "DELETE", fmt.Sprintf("/api/v1/data_sources/%d", bareID), w.admin, nil, http.StatusNotFound)
}

func TestScopeCodes(t *testing.T) {
	w := admNewWorld(t)
	hr := w.scopeCode(t, "omh:heart-rate:2.0", "Heart rate")

	created := w.call(t, "POST", "/api/v1/scope_codes", w.admin, map[string]any{"codingSystem": domain.SystemIEEE1752, "codingCode": "ieee:sleep-episode", "text": "Sleep"}, http.StatusCreated)
	if created["codingSystem"] != domain.SystemIEEE1752 || created["codingCode"] != "ieee:sleep-episode" || created["text"] != "Sleep" || len(created) != 4 {
		t.Errorf("created: %v", created)
	}
	w.call(t, "POST", "/api/v1/scope_codes", w.admin, map[string]any{"codingSystem": hr.System, "codingCode": hr.Code, "text": "Again"}, http.StatusConflict)
	w.call(t, "POST", "/api/v1/scope_codes", w.admin, map[string]any{"codingSystem": "omh", "codingCode": "x"}, http.StatusBadRequest, "codingSystem")
	w.call(t, "POST", "/api/v1/scope_codes", w.admin, map[string]any{"codingSystem": domain.SystemOpenMHealth}, http.StatusBadRequest, "codingCode")
	w.call(t, "POST", "/api/v1/scope_codes", w.manager, map[string]any{"codingSystem": domain.SystemOpenMHealth, "codingCode": "omh:x"}, http.StatusForbidden)

	list := w.call(t, "GET", "/api/v1/scope_codes", w.viewer, nil, http.StatusOK)
	results := admResults(t, list)
	if list["count"] != float64(2) || len(results) != 2 {
		t.Fatalf("list: %v", list)
	}
	admCheckScopeCode(t, "listed", results[0], hr)
	if admID(t, results[1]) != admID(t, created) {
		t.Errorf("listed: %v", results[1])
	}
}

func TestFHIRSources(t *testing.T) {
	w := admNewWorld(t)
	ctx := context.Background()
	ds, err := w.env.Service.CreateDataSource(ctx, domain.SystemActor(), domain.NewDataSource{Name: "Phone", Type: domain.DataSourcePatientApp})
	if err != nil {
		t.Fatal(err)
	}
	p := w.patient(t, "p@example.org", "Doe", "Jo", w.org.ID)
	other := w.patient(t, "o@example.org", "Other", "Ola", w.org.ID)
	patient := w.env.Token(t, p.UserID)

	checkSource := func(what string, got map[string]any, patientID int64, dataSource any, label string) {
		t.Helper()
		if got, want := admKeys(got), []string{"dataSource", "id", "label", "lastUpdated", "patient", "uri"}; !slices.Equal(got, want) {
			t.Errorf("%s: keys %v, want %v", what, got, want)
		}
		if want := fmt.Sprintf("%s/%v", handlerstest.SourceBase, got["id"]); got["uri"] != want {
			t.Errorf("%s: uri %v, want %s", what, got["uri"], want)
		}
		if got["patient"] != float64(patientID) || got["dataSource"] != dataSource || got["label"] != label {
			t.Errorf("%s: %v, want patient %d, dataSource %v, label %q", what, got, patientID, dataSource, label)
		}
		s, _ := got["lastUpdated"].(string)
		at, err := time.Parse(time.RFC3339Nano, s)
		if err != nil || !strings.HasSuffix(s, "Z") || time.Since(at) > time.Minute || time.Until(at) > time.Minute {
			t.Errorf("%s: lastUpdated %q is not a current UTC ISO 8601 time", what, s)
		}
	}

	// The calling patient, with the data source spelled either way.
	snake := w.call(t, "POST", "/api/v1/fhir_sources", patient, map[string]any{"data_source": ds.ID, "label": "My phone"}, http.StatusCreated)
	checkSource("data_source", snake, p.ID, float64(ds.ID), "My phone")
	camel := w.call(t, "POST", "/api/v1/fhir_sources", patient, map[string]any{"dataSource": ds.ID, "label": "My tablet"}, http.StatusCreated)
	checkSource("dataSource", camel, p.ID, float64(ds.ID), "My tablet")
	none := w.call(t, "POST", "/api/v1/fhir_sources", patient, map[string]any{"label": "Hospital portal"}, http.StatusCreated)
	checkSource("no data source", none, p.ID, nil, "Hospital portal")
	// A practitioner who may write the patient's data names the patient.
	byMember := w.call(t, "POST", "/api/v1/fhir_sources", w.member, map[string]any{"patient": other.ID, "dataSource": ds.ID, "label": "Clinic feed"}, http.StatusCreated)
	checkSource("by a member", byMember, other.ID, float64(ds.ID), "Clinic feed")

	before := admSnapshot(t, w.env)
	w.call(t, "POST", "/api/v1/fhir_sources", w.viewer, map[string]any{"patient": other.ID, "label": "No"}, http.StatusForbidden)
	w.call(t, "POST", "/api/v1/fhir_sources", patient, map[string]any{"patient": other.ID, "label": "No"}, http.StatusBadRequest, "patient") // as a patient that does not exist
	w.call(t, "POST", "/api/v1/fhir_sources", w.member, map[string]any{"label": "Whose?"}, http.StatusBadRequest, "patient")
	w.call(t, "POST", "/api/v1/fhir_sources", w.member, map[string]any{"patient": 9999, "label": "Nobody"}, http.StatusBadRequest, "patient")
	w.call(t, "POST", "/api/v1/fhir_sources", patient, map[string]any{"label": " "}, http.StatusBadRequest, "label")
	w.call(t, "POST", "/api/v1/fhir_sources", patient, map[string]any{"dataSource": 9999, "label": "X"}, http.StatusBadRequest, "dataSource")
	w.call(t, "POST", "/api/v1/fhir_sources", patient, map[string]any{"dataSource": ds.ID, "data_source": 9999, "label": "X"}, http.StatusBadRequest, "dataSource")
	admSameSnapshot(t, "refused FHIR source creates", before, admSnapshot(t, w.env))

	// Lists: the patient's own; a practitioner's patients; all.
	mine := []int64{admID(t, snake), admID(t, camel), admID(t, none)}
	if got := admIDs(t, w.call(t, "GET", "/api/v1/fhir_sources", patient, nil, http.StatusOK)); !slices.Equal(got, mine) {
		t.Errorf("the patient's sources: %v, want %v", got, mine)
	}
	all := append(slices.Clone(mine), admID(t, byMember))
	if got := admIDs(t, w.call(t, "GET", "/api/v1/fhir_sources", w.viewer, nil, http.StatusOK)); !slices.Equal(got, all) {
		t.Errorf("the viewer's sources: %v, want %v", got, all)
	}
	if got := w.call(t, "GET", "/api/v1/fhir_sources?pageSize=2&page=2", w.admin, nil, http.StatusOK); !slices.Equal(admIDs(t, got), all[2:]) || got["count"] != float64(4) {
		t.Errorf("page 2: %v", got)
	}
	one := w.call(t, "GET", fmt.Sprintf("/api/v1/fhir_sources/%d", admID(t, snake)), w.viewer, nil, http.StatusOK)
	checkSource("GET one", one, p.ID, float64(ds.ID), "My phone")
	if one["lastUpdated"] != snake["lastUpdated"] {
		t.Errorf("GET lastUpdated %v, created %v", one["lastUpdated"], snake["lastUpdated"])
	}
	w.call(t, "GET", fmt.Sprintf("/api/v1/fhir_sources/%d", admID(t, byMember)), patient, nil, http.StatusNotFound) // another patient's: not there for them
	w.call(t, "GET", "/api/v1/fhir_sources/9999", w.admin, nil, http.StatusNotFound)

	// Delete.
	w.call(t, "DELETE", fmt.Sprintf("/api/v1/fhir_sources/%d", admID(t, snake)), w.viewer, nil, http.StatusForbidden)
	w.call(t, "DELETE", fmt.Sprintf("/api/v1/fhir_sources/%d", admID(t, byMember)), patient, nil, http.StatusNotFound)
	w.call(t, "DELETE", fmt.Sprintf("/api/v1/fhir_sources/%d", admID(t, snake)), patient, nil, http.StatusNoContent)
	w.call(t, "DELETE", fmt.Sprintf("/api/v1/fhir_sources/%d", admID(t, byMember)), w.member, nil, http.StatusNoContent)
	w.call(t, "GET", fmt.Sprintf("/api/v1/fhir_sources/%d", admID(t, snake)), patient, nil, http.StatusNotFound)
	w.call(t, "DELETE", fmt.Sprintf("/api/v1/fhir_sources/%d", admID(t, snake)), patient, nil, http.StatusNotFound)
	if got := admIDs(t, w.call(t, "GET", "/api/v1/fhir_sources", w.admin, nil, http.StatusOK)); !slices.Equal(got, mine[1:]) {
		t.Errorf("after the deletes: %v", got)
	}
}
