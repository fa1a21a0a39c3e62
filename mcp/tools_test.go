package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"exchange/mcp"
)

// TestToolSchemaSnapshots compares every tool's definition, as tools/list
// shows it, with testdata/toolsnaps/<name>.snap. UPDATE_TOOLSNAPS=1
// rewrites them; a tool without a snapshot fails.
func TestToolSchemaSnapshots(t *testing.T) {
	s := newStack(t)
	w := s.seed(t)
	g := s.startGateway(t, nil)
	c := g.mcpClient(t, s.userToken(t, w.managerA))
	list, err := c.ListTools(context.Background(), mcpgo.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
		got, err := json.MarshalIndent(tool, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, '\n')
		path := filepath.Join("testdata", "toolsnaps", tool.Name+".snap")
		if os.Getenv("UPDATE_TOOLSNAPS") == "1" {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%s has no snapshot (run with UPDATE_TOOLSNAPS=1 and review it): %v", tool.Name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s changed; if on purpose, UPDATE_TOOLSNAPS=1 and review the diff\ngot:\n%s", tool.Name, got)
		}
	}
	want := []string{"count_studies", "list_studies", "get_study", "list_study_patients", "search_patients", "get_patient",
		"patient_data_range", "list_observations", "count_observations", "summarize_observations", "list_omh_schemas",
		"get_omh_schema", "get_capabilities"}
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("tools %v, want %v", names, want)
	}
	snaps, _ := filepath.Glob(filepath.Join("testdata", "toolsnaps", "*.snap"))
	if len(snaps) != len(want) {
		t.Errorf("%d snapshots for %d tools: remove the stale ones", len(snaps), len(want))
	}
}

func num(v any) int64 {
	f, _ := v.(float64)
	return int64(f)
}

// TestEveryTool calls each tool as manager A against the seeded world and
// checks its answer.
func TestEveryTool(t *testing.T) {
	s := newStack(t)
	w := s.seed(t)
	g := s.startGateway(t, nil)
	checkEveryTool(t, w, g.mcpClient(t, s.userToken(t, w.managerA)))
}

// checkEveryTool calls every tool as manager A and checks the answers.
func checkEveryTool(t *testing.T, w *world, c *client.Client) {
	t.Helper()
	if got := callJSON(t, c, "count_studies", nil); num(got["count"]) != 1 {
		t.Errorf("count_studies %v", got)
	}
	studies := callJSON(t, c, "list_studies", map[string]any{"page_size": 10})
	if rows := studies["studies"].([]any); len(rows) != 1 || num(rows[0].(map[string]any)["id"]) != w.studyA || studies["has_more"] != false {
		t.Errorf("list_studies %v", studies)
	}
	study := callJSON(t, c, "get_study", map[string]any{"study_id": w.studyA})
	if study["name"] != "Heart study" || num(study["enrolled_patients"]) != 1 || len(study["requested_scopes"].([]any)) != 1 || len(study["data_sources"].([]any)) != 1 {
		t.Errorf("get_study %v", study)
	}
	enrolled := callJSON(t, c, "list_study_patients", map[string]any{"study_id": w.studyA})
	if rows := enrolled["patients"].([]any); len(rows) != 1 || rows[0].(map[string]any)["name"] != "Alice Nguyen" {
		t.Errorf("list_study_patients %v", enrolled)
	}

	found := callJSON(t, c, "search_patients", map[string]any{"family": "nguy"})
	if rows := found["patients"].([]any); len(rows) != 1 || num(rows[0].(map[string]any)["id"]) != w.patientA || rows[0].(map[string]any)["birth_date"] != "1980-01-02" {
		t.Errorf("search_patients %v", found)
	}
	if got := callJSON(t, c, "search_patients", map[string]any{"birthdate": "ge1990"}); len(got["patients"].([]any)) != 0 {
		t.Errorf("search_patients birthdate ge1990 %v", got)
	}
	patient := callJSON(t, c, "get_patient", map[string]any{"patient_id": w.patientA})
	if patient["family"] != "Nguyen" || patient["birth_date"] != "1980-01-02" {
		t.Errorf("get_patient %v", patient)
	}
	span := callJSON(t, c, "patient_data_range", map[string]any{"patient_id": w.patientA})
	if num(span["observations"]) != int64(w.observationsA) || span["earliest"] != w.firstA || span["latest"] != w.lastA {
		t.Errorf("patient_data_range %v", span)
	}

	// Observations, paged: two, then the last one through the cursor.
	page1 := callJSON(t, c, "list_observations", map[string]any{"patient_id": w.patientA, "limit": 2, "order": "oldest_first"})
	rows := page1["observations"].([]any)
	if len(rows) != 2 || page1["has_more"] != true || page1["next_cursor"] == nil {
		t.Fatalf("list_observations page 1 %v", page1)
	}
	first := rows[0].(map[string]any)
	if first["effective"] != w.firstA || first["code"] != heartRate {
		t.Errorf("first observation %v", first)
	}
	if hr := first["value"].(map[string]any)["heart_rate"].(map[string]any); hr["value"] != float64(60) || hr["unit"] != "beats/min" {
		t.Errorf("slim value %v", first["value"])
	}
	if _, ok := first["value"].(map[string]any)["effective_time_frame"]; ok {
		t.Error("a slim row repeats the time frame")
	}
	page2 := callJSON(t, c, "list_observations", map[string]any{"patient_id": w.patientA, "cursor": page1["next_cursor"]})
	if rows := page2["observations"].([]any); len(rows) != 1 || page2["has_more"] != false || rows[0].(map[string]any)["effective"] != w.lastA {
		t.Errorf("list_observations page 2 %v", page2)
	}
	// The cursor decides whose observations come back: with another
	// patient_id it is refused rather than answered under the wrong id.
	if text, isError := call(t, c, "list_observations", map[string]any{"patient_id": w.patientB, "cursor": page1["next_cursor"]}); !isError ||
		!strings.Contains(text, "cursor") || !strings.Contains(text, fmt.Sprintf("patient %d", w.patientA)) {
		t.Errorf("list_observations with another patient's cursor: error %v, %q", isError, text)
	}
	full := callJSON(t, c, "list_observations", map[string]any{"patient_id": w.patientA, "verbosity": "full",
		"date_from": "2025-03-02", "date_to": "2025-03-02"})
	if rows := full["observations"].([]any); len(rows) != 1 || rows[0].(map[string]any)["data_point"].(map[string]any)["header"] == nil ||
		rows[0].(map[string]any)["effective"] != "2025-03-02T08:00:00Z" {
		t.Errorf("list_observations full, one day %v", full)
	}

	if got := callJSON(t, c, "count_observations", map[string]any{"patient_id": w.patientA}); num(got["count"]) != int64(w.observationsA) {
		t.Errorf("count_observations patient %v", got)
	}
	if got := callJSON(t, c, "count_observations", map[string]any{"patient_id": w.patientA, "date_from": "2025-03-02"}); num(got["count"]) != 2 {
		t.Errorf("count_observations from 2025-03-02 %v", got)
	}
	perPatient := callJSON(t, c, "count_observations", map[string]any{"study_id": w.studyA, "per_patient": true})
	if num(perPatient["count"]) != int64(w.observationsA) || len(perPatient["per_patient"].([]any)) != 1 ||
		num(perPatient["per_patient"].([]any)[0].(map[string]any)["count"]) != int64(w.observationsA) {
		t.Errorf("count_observations per study %v", perPatient)
	}
	summary := callJSON(t, c, "summarize_observations", map[string]any{"patient_id": w.patientA})
	if types := summary["types"].([]any); len(types) != 1 || types[0].(map[string]any)["code"] != heartRate ||
		num(types[0].(map[string]any)["count"]) != int64(w.observationsA) || types[0].(map[string]any)["latest"] != w.lastA {
		t.Errorf("summarize_observations %v", summary)
	}

	schemas := callJSON(t, c, "list_omh_schemas", map[string]any{"contains": "heart"})
	if !strings.Contains(fmt.Sprint(schemas["schemas"]), "heart-rate") {
		t.Errorf("list_omh_schemas heart %v", schemas)
	}
	schema := callJSON(t, c, "get_omh_schema", map[string]any{"name": "heart-rate", "version": "2.0"})
	if schema["$schema"] == nil && schema["type"] == nil {
		t.Errorf("get_omh_schema %v", schema)
	}
	// IEEE 1752 schemas are listed and served beside Open mHealth's.
	ieee := callJSON(t, c, "list_omh_schemas", map[string]any{"namespace": "ieee", "contains": "stage-summary"})
	if list, _ := ieee["schemas"].([]any); len(list) != 1 || list[0].(map[string]any)["namespace"] != "ieee" || list[0].(map[string]any)["name"] != "sleep-stage-summary" {
		t.Errorf("list_omh_schemas ieee summary %v", ieee)
	}
	schema = callJSON(t, c, "get_omh_schema", map[string]any{"namespace": "ieee", "name": "sleep-stage-summary", "version": "1.0"})
	if !strings.Contains(fmt.Sprint(schema["properties"]), "sleep_stage_state") {
		t.Errorf("get_omh_schema ieee sleep-stage-summary %v", schema)
	}
	for uri, want := range map[string]string{"omh-schema://heart-rate/2.0": "heart_rate", "ieee-schema://sleep-stage-summary/1.0": "sleep_stage_state"} {
		res, err := c.ReadResource(context.Background(), mcpgo.ReadResourceRequest{Params: mcpgo.ReadResourceParams{URI: uri}})
		if err != nil || len(res.Contents) != 1 {
			t.Fatalf("resource %s: %v %v", uri, err, res)
		}
		if text, ok := mcpgo.AsTextResourceContents(res.Contents[0]); !ok || !json.Valid([]byte(text.Text)) || !strings.Contains(text.Text, want) {
			t.Errorf("resource %s contents %v", uri, res.Contents[0])
		}
	}

	caps := callJSON(t, c, "get_capabilities", nil)
	if caps["fhir_version"] != "5.0.0" || !strings.Contains(fmt.Sprint(caps["resource_types"]), "Observation") {
		t.Errorf("get_capabilities %v", caps)
	}
	obs := callJSON(t, c, "get_capabilities", map[string]any{"resource_type": "Observation"})
	if !strings.Contains(fmt.Sprint(obs["search_params"]), "patient._has:Group:member:_id") {
		t.Errorf("get_capabilities Observation %v", obs)
	}
}

// TestToolErrors: mistakes come back as tool errors the model can read,
// never as protocol errors or 500s.
func TestToolErrors(t *testing.T) {
	s := newStack(t)
	w := s.seed(t)
	g := s.startGateway(t, nil)
	c := g.mcpClient(t, s.userToken(t, w.managerA))
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"get_study", map[string]any{"study_id": 9999}, "not found"},
		{"get_study", map[string]any{}, "study_id"},
		{"get_study", map[string]any{"study_id": "one"}, "study_id"},
		{"list_studies", map[string]any{"page_size": 1000}, "page_size"},
		{"list_studies", map[string]any{"colour": "red"}, "colour"},
		{"list_observations", map[string]any{"patient_id": w.patientA, "cursor": "garbage"}, "cursor"},
		{"list_observations", map[string]any{"patient_id": w.patientA, "date_from": "yesterday"}, "date"},
		{"list_observations", map[string]any{"patient_id": w.patientA, "verbosity": "loud"}, "verbosity"},
		{"count_observations", map[string]any{}, "exactly one"},
		{"count_observations", map[string]any{"patient_id": 1, "study_id": 1}, "exactly one"},
		{"get_omh_schema", map[string]any{"name": "../../users", "version": "1.0"}, "name"},
		{"get_omh_schema", map[string]any{"name": "no-such-schema", "version": "1.0"}, "not found"},
		{"get_capabilities", map[string]any{"resource_type": "Spaceship"}, "Spaceship"},
	} {
		text, isError := call(t, c, tc.tool, tc.args)
		if !isError || !strings.Contains(text, tc.want) {
			t.Errorf("%s(%v): error %v, %q; want a tool error mentioning %q", tc.tool, tc.args, isError, text, tc.want)
		}
	}
	// Schemas as resources: an unknown or malformed omh-schema URI is a
	// resource not found. (mcp-go v1.2.1 sends every resource handler's
	// error as -32603 with its message; only a URI that matches no
	// template gets -32002.)
	for _, uri := range []string{"omh-schema://no-such-schema/1.0", "omh-schema://Heart_Rate/2.0", "omh-schema://heart-rate/two", "omh-schema://heart-rate",
		"omh-schema://sleep-stage-summary/1.0", "ieee-schema://heart-rate/2.0"} {
		_, err := c.ReadResource(context.Background(), mcpgo.ReadResourceRequest{Params: mcpgo.ReadResourceParams{URI: uri}})
		if err == nil || !strings.Contains(err.Error(), "resource not found") {
			t.Errorf("resource %s: %v, want resource not found", uri, err)
		}
	}
}

// TestUsersSeeOnlyTheirOrganization: the same tools answer each user what
// the service lets that user see.
func TestUsersSeeOnlyTheirOrganization(t *testing.T) {
	s := newStack(t)
	w := s.seed(t)
	g := s.startGateway(t, nil)
	_, tokA := g.tokens(t, w.managerA)
	_, tokB := g.tokens(t, w.managerB)
	for _, side := range []struct {
		name                     string
		token                    string
		study, patient           int64
		otherStudy, otherPatient int64
		family                   string
		observations             int
	}{
		{"manager A", tokA.AccessToken, w.studyA, w.patientA, w.studyB, w.patientB, "Alice Nguyen", w.observationsA},
		{"manager B", tokB.AccessToken, w.studyB, w.patientB, w.studyA, w.patientA, "Robert Okafor", w.observationsB},
	} {
		t.Run(side.name, func(t *testing.T) {
			c := g.mcpClient(t, side.token)
			studies := callJSON(t, c, "list_studies", nil)["studies"].([]any)
			if len(studies) != 1 || num(studies[0].(map[string]any)["id"]) != side.study {
				t.Errorf("list_studies %v", studies)
			}
			patients := callJSON(t, c, "search_patients", nil)["patients"].([]any)
			if len(patients) != 1 || patients[0].(map[string]any)["name"] != side.family {
				t.Errorf("search_patients %v", patients)
			}
			if got := callJSON(t, c, "count_observations", map[string]any{"patient_id": side.patient}); num(got["count"]) != int64(side.observations) {
				t.Errorf("count_observations of their patient %v", got)
			}
			// The other organization's records: refused or empty, never shown.
			// Another organization's patient is not there: no observations, as for an id that does not exist.
			if got := callJSON(t, c, "list_observations", map[string]any{"patient_id": side.otherPatient}); num(got["returned"]) != 0 {
				t.Errorf("list_observations of the other patient: %v", got)
			}
			if text, isError := call(t, c, "count_observations", map[string]any{"study_id": side.otherStudy}); !isError || !strings.Contains(text, "not allowed") {
				t.Errorf("count_observations of the other study: %s", text)
			}
			if text, isError := call(t, c, "get_study", map[string]any{"study_id": side.otherStudy}); !isError {
				t.Errorf("get_study of the other study: %s", text)
			}
			if text, isError := call(t, c, "get_patient", map[string]any{"patient_id": side.otherPatient}); !isError {
				t.Errorf("get_patient of the other patient: %s", text)
			}
		})
	}
}

// TestSearchParametersAreCheckedAgainstTheCapabilityStatement runs the
// tools through a proxy to the real service whose CapabilityStatement
// lacks Observation's date, then through one without /metadata.
func TestSearchParametersAreCheckedAgainstTheCapabilityStatement(t *testing.T) {
	s := newStack(t)
	w := s.seed(t)
	target, _ := url.Parse(s.env.URL)
	proxy := func(metadata func(w http.ResponseWriter)) string {
		rp := httputil.NewSingleHostReverseProxy(target)
		srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/FHIR/R5/metadata" {
				metadata(rw)
				return
			}
			rp.ServeHTTP(rw, r)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	withoutDate := proxy(func(rw http.ResponseWriter) {
		resp, err := http.Get(s.env.URL + "/FHIR/R5/metadata")
		if err != nil {
			t.Error(err)
			return
		}
		defer resp.Body.Close()
		var stmt map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&stmt)
		for _, r := range stmt["rest"].([]any)[0].(map[string]any)["resource"].([]any) {
			r := r.(map[string]any)
			if r["type"] == "Observation" {
				r["searchParam"] = slices.DeleteFunc(r["searchParam"].([]any), func(p any) bool { return p.(map[string]any)["name"] == "date" })
			}
		}
		rw.Header().Set("Content-Type", "application/fhir+json")
		_ = json.NewEncoder(rw).Encode(stmt)
	})
	noMetadata := proxy(func(rw http.ResponseWriter) { http.NotFound(rw, nil) })
	token := s.userToken(t, w.managerA)

	g := s.startGateway(t, func(c *mcp.Config) { c.ServiceURL = withoutDate })
	c := g.mcpClient(t, token)
	text, isError := call(t, c, "list_observations", map[string]any{"patient_id": w.patientA, "date_from": "2025-03-02"})
	if !isError || !strings.Contains(text, `"date"`) || !strings.Contains(text, "Observation") {
		t.Errorf("an undeclared parameter: error %v %q", isError, text)
	}
	if got := callJSON(t, c, "list_observations", map[string]any{"patient_id": w.patientA}); len(got["observations"].([]any)) != w.observationsA {
		t.Errorf("declared parameters only: %v", got)
	}

	g = s.startGateway(t, func(c *mcp.Config) { c.ServiceURL = noMetadata })
	c = g.mcpClient(t, token)
	if got := callJSON(t, c, "count_observations", map[string]any{"patient_id": w.patientA, "date_from": "2025-03-02"}); num(got["count"]) != 2 {
		t.Errorf("unchecked against a service without /metadata: %v", got)
	}
	if text, isError := call(t, c, "get_capabilities", nil); !isError || !strings.Contains(text, "no CapabilityStatement") {
		t.Errorf("get_capabilities without /metadata: %v %q", isError, text)
	}

	// A failing /metadata: searches go unchecked, and it is asked again
	// only once the failure is 30 seconds old, not on every search.
	var asked atomic.Int32
	failing := proxy(func(rw http.ResponseWriter) {
		asked.Add(1)
		http.Error(rw, "down for maintenance", http.StatusServiceUnavailable)
	})
	g = s.startGateway(t, func(c *mcp.Config) { c.ServiceURL = failing })
	c = g.mcpClient(t, token)
	countFrom := func() {
		t.Helper()
		if got := callJSON(t, c, "count_observations", map[string]any{"patient_id": w.patientA, "date_from": "2025-03-02"}); num(got["count"]) != 2 {
			t.Errorf("unchecked against a failing /metadata: %v", got)
		}
	}
	countFrom()
	countFrom()
	if n := asked.Load(); n != 1 {
		t.Errorf("/metadata asked %d times within 30 seconds, want 1", n)
	}
	g.clock.Advance(31 * time.Second)
	countFrom()
	if n := asked.Load(); n != 2 {
		t.Errorf("/metadata asked %d times after 30 seconds, want 2", n)
	}
}
