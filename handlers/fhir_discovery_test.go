package handlers_test

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"exchange/handlers/handlerstest"
	"exchange/omh/omhtest"
)

// fxEnv starts a bare exchange with one practitioner's token.
func fxEnv(t *testing.T) (*handlerstest.Env, string) {
	t.Helper()
	t.Parallel()
	env := handlerstest.StartWith(t, behindLoopbackProxy)
	doc := env.Practitioner(t, "doc@example.org", false)
	return env, env.Token(t, doc.ID)
}

// TestFHIRCapabilityStatement reads the CapabilityStatement without a
// token, with an invalid one, behind a proxy and on the alias.
func TestFHIRCapabilityStatement(t *testing.T) {
	env, _ := fxEnv(t)
	resp, raw := fxDo(t, env, "GET", fxBase+"/metadata", nil, "")
	cs := fxDecode(t, raw)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/fhir+json" ||
		resp.Header.Get("Cache-Control") != "public, max-age=3600" {
		t.Fatalf("metadata: %d %v %s", resp.StatusCode, resp.Header, raw)
	}
	date, _ := cs["date"].(string)
	if _, err := time.Parse(time.DateOnly, date); err != nil && !fxInstant.MatchString(date) {
		t.Errorf("date %q", date)
	}
	formats := fxArr(cs["format"])
	if cs["resourceType"] != "CapabilityStatement" || cs["kind"] != "instance" || cs["fhirVersion"] != "5.0.0" || cs["status"] != "active" ||
		len(formats) != 1 || formats[0] != "json" {
		t.Errorf("statement %v", fxCompact(cs))
	}
	rest := fxArr(cs["rest"])
	if len(rest) != 1 {
		t.Fatalf("rest %v", cs["rest"])
	}
	server := fxObj(rest[0])
	var interactions []string
	for _, i := range fxArr(server["interaction"]) {
		interactions = append(interactions, fxObj(i)["code"].(string))
	}
	if server["mode"] != "server" || !slices.Contains(interactions, "batch") {
		t.Errorf("rest %v", fxCompact(server))
	}
	// The SMART oauth-uris extension, absolute on the request's host.
	uris := map[string]string{}
	for _, e := range fxArr(fxObj(server["security"])["extension"]) {
		if fxObj(e)["url"] == "http://fhir-registry.smarthealthit.org/StructureDefinition/oauth-uris" {
			for _, sub := range fxArr(fxObj(e)["extension"]) {
				uris[fxObj(sub)["url"].(string)], _ = fxObj(sub)["valueUri"].(string)
			}
		}
	}
	if uris["authorize"] != env.URL+"/o/authorize/" || uris["token"] != env.URL+"/o/token/" {
		t.Errorf("oauth-uris %v", uris)
	}
	// One entry per type with its interactions and every parameter typed.
	types := map[string]map[string]any{}
	for _, r := range fxArr(server["resource"]) {
		rt := fxObj(r)["type"].(string)
		if types[rt] != nil {
			t.Errorf("%s listed twice", rt)
		}
		types[rt] = fxObj(r)
	}
	// Bulk Data: the statement instantiates the Bulk Data one and declares
	// $export at the system level and on Patient and Group.
	const bulk = "http://hl7.org/fhir/uv/bulkdata/"
	operation := func(v any) string { return fmt.Sprint(fxObj(fxArr(v)[0])["definition"]) }
	if fmt.Sprint(cs["instantiates"]) != "["+bulk+"CapabilityStatement/bulk-data]" || operation(server["operation"]) != bulk+"OperationDefinition/export" ||
		operation(types["Patient"]["operation"]) != bulk+"OperationDefinition/patient-export" ||
		operation(types["Group"]["operation"]) != bulk+"OperationDefinition/group-export" {
		t.Errorf("Bulk Data: instantiates %v, operations %v, %v, %v", cs["instantiates"], server["operation"], types["Patient"]["operation"], types["Group"]["operation"])
	}
	common := map[string]string{"_id": "token", "_lastUpdated": "date", "_source": "uri", "_sort": "", "_count": "number",
		"_summary": "", "_total": "", "_elements": ""}
	joins := map[string]string{"patient": "reference", "patient.organization": "reference", "patient.identifier": "token",
		"patient._has:Group:member:_id": "", "_has:Group:member:_id": ""}
	rw := []string{"create", "delete", "patch", "read", "search-type", "update", "vread"} // the imported store's, on every type
	paramTypes := []string{"number", "date", "string", "token", "reference", "composite", "quantity", "uri", "special", "resource"}
	for _, c := range []struct {
		rt           string
		interactions []string
		params       map[string]string
	}{
		{"Observation", rw, map[string]string{"patient": "reference", "patient.organization": "reference",
			"patient.identifier": "token", "patient._has:Group:member:_id": "", "code": "token", "date": "date", "identifier": "token", "status": "token"}},
		{"Patient", rw, map[string]string{"identifier": "token", "family": "string", "given": "string", "name": "string", "birthdate": "date"}},
		{"Practitioner", rw, nil},
		{"Organization", rw, nil},
		{"Group", rw, nil},
		{"Device", rw, nil},
	} {
		r := types[c.rt]
		if r == nil {
			t.Errorf("no %s in the CapabilityStatement", c.rt)
			continue
		}
		var got []string
		for _, i := range fxArr(r["interaction"]) {
			got = append(got, fxObj(i)["code"].(string))
		}
		slices.Sort(got)
		if !slices.Equal(got, c.interactions) {
			t.Errorf("%s interactions %v, want %v", c.rt, got, c.interactions)
		}
		params := map[string]string{}
		for _, p := range fxArr(r["searchParam"]) {
			name, _ := fxObj(p)["name"].(string)
			typ, _ := fxObj(p)["type"].(string)
			if _, dup := params[name]; dup {
				t.Errorf("%s: %s listed twice", c.rt, name)
			}
			params[name] = typ
			if !slices.Contains(paramTypes, typ) {
				t.Errorf("%s: %s has type %q", c.rt, name, typ)
			}
		}
		want := map[string]string{}
		for _, m := range []map[string]string{common, c.params} {
			for k, v := range m {
				want[k] = v
			}
		}
		if c.rt != "Observation" {
			for k, v := range joins {
				want[k] = v
			}
		}
		for name, typ := range want {
			got, ok := params[name]
			if !ok || (typ != "" && got != typ) {
				t.Errorf("%s: search parameter %s is %q (listed: %v), want type %q", c.rt, name, got, ok, typ)
			}
		}
	}
	// Every type of the catalog: the configured ones and those from R5.
	_, catalog := handlerstest.R5(t)
	if len(types) != len(catalog.Resources()) || len(types) < 130 || types["Claim"] == nil || types["Bundle"] != nil {
		t.Errorf("%d types", len(types))
	}
	// The audit trail: read-only, searched by its own parameters.
	var auditInteractions, auditParams []string
	for _, i := range fxArr(types["AuditEvent"]["interaction"]) {
		auditInteractions = append(auditInteractions, fxObj(i)["code"].(string))
	}
	for _, p := range fxArr(types["AuditEvent"]["searchParam"]) {
		auditParams = append(auditParams, fxObj(p)["name"].(string)+":"+fxObj(p)["type"].(string))
	}
	slices.Sort(auditInteractions)
	if !slices.Equal(auditInteractions, []string{"read", "search-type", "vread"}) {
		t.Errorf("AuditEvent interactions %v", auditInteractions)
	}
	for _, want := range []string{"patient:reference", "date:date", "agent:reference", "entity-type:token", "action:token"} {
		if !slices.Contains(auditParams, want) {
			t.Errorf("AuditEvent search parameters %v lack %s", auditParams, want)
		}
	}
	// Parameters of the imported store only are marked so.
	marked := func(rt, name string) bool {
		for _, p := range fxArr(types[rt]["searchParam"]) {
			if fxObj(p)["name"] == name {
				return len(fxArr(fxObj(p)["extension"])) == 1
			}
		}
		t.Errorf("%s has no parameter %s", rt, name)
		return false
	}
	for _, c := range []struct {
		rt, name     string
		importedOnly bool
	}{{"Observation", "category", true}, {"Observation", "code", false}, {"Patient", "gender", true}, {"Patient", "family", false},
		{"Condition", "onset-date", true}, {"Condition", "_source", false}} {
		if marked(c.rt, c.name) != c.importedOnly {
			t.Errorf("%s %s: marked imported-only %v", c.rt, c.name, !c.importedOnly)
		}
	}
	if got := fmt.Sprint(cs["patchFormat"]); got != "[application/json-patch+json application/merge-patch+json]" {
		t.Errorf("patchFormat %s", got)
	}

	// Stable between requests; the same with an invalid token; the same
	// on the alias; absolute URLs follow the proxy headers.
	resp, again := fxDo(t, env, "GET", fxBase+"/metadata", map[string]string{"Authorization": "Bearer not-a-token"}, "")
	if resp.StatusCode != http.StatusOK || string(again) != string(raw) {
		t.Errorf("with an invalid token: %d, same body %v", resp.StatusCode, string(again) == string(raw))
	}
	resp, alias := fxDo(t, env, "GET", "/fhir/r5/metadata", nil, "")
	if resp.StatusCode != http.StatusOK || string(alias) != string(raw) || resp.Header.Get("Cache-Control") != "public, max-age=3600" {
		t.Errorf("on the alias: %d, same body %v", resp.StatusCode, string(alias) == string(raw))
	}
	resp, proxied := fxDo(t, env, "GET", fxBase+"/metadata", map[string]string{"X-Forwarded-Proto": "https", "X-Forwarded-Host": "fhir.example.org"}, "")
	pcs := fxDecode(t, proxied)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(pcs["url"].(string), "https://fhir.example.org/FHIR/R5") ||
		strings.Contains(string(proxied), env.URL) || !strings.Contains(string(proxied), "https://fhir.example.org/o/token/") {
		t.Errorf("behind a proxy: %d %s", resp.StatusCode, proxied)
	}
}

// TestFHIRSmartConfiguration reads the SMART configuration without a token
// and with an invalid one.
func TestFHIRSmartConfiguration(t *testing.T) {
	env, _ := fxEnv(t)
	for _, header := range []map[string]string{nil, {"Authorization": "Bearer not-a-token"}} {
		resp, raw := fxDo(t, env, "GET", fxBase+"/.well-known/smart-configuration", header, "")
		sc := fxDecode(t, raw)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Cache-Control") != "public, max-age=3600" ||
			!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Fatalf("smart-configuration: %d %v %s", resp.StatusCode, resp.Header, raw)
		}
		issuer := env.URL + "/o"
		for key, want := range map[string]string{
			"issuer": issuer, "jwks_uri": issuer + "/.well-known/jwks.json", "authorization_endpoint": issuer + "/authorize/",
			"token_endpoint": issuer + "/token/", "introspection_endpoint": issuer + "/introspect/", "revocation_endpoint": issuer + "/revoke_token/",
		} {
			if sc[key] != want {
				t.Errorf("%s = %v, want %s", key, sc[key], want)
			}
		}
		strs := func(key string) []string {
			var out []string
			for _, v := range fxArr(sc[key]) {
				out = append(out, v.(string))
			}
			return out
		}
		if m := strs("code_challenge_methods_supported"); !slices.Equal(m, []string{"S256"}) {
			t.Errorf("code_challenge_methods_supported %v", m)
		}
		if g := strs("grant_types_supported"); !slices.Contains(g, "authorization_code") || !slices.Contains(g, "refresh_token") {
			t.Errorf("grant_types_supported %v", g)
		}
		if r := strs("response_types_supported"); !slices.Contains(r, "code") {
			t.Errorf("response_types_supported %v", r)
		}
		if s := strs("scopes_supported"); !slices.Contains(s, "openid") || !slices.Contains(s, "offline_access") {
			t.Errorf("scopes_supported %v", s)
		}
		capabilities := strs("capabilities")
		for _, c := range []string{"launch-standalone", "client-public", "client-confidential-symmetric", "client-confidential-asymmetric",
			"sso-openid-connect", "permission-offline"} {
			if !slices.Contains(capabilities, c) {
				t.Errorf("capabilities %v lack %s", capabilities, c)
			}
		}
		// SMART Backend Services: private_key_jwt with RS384 or ES384, the
		// client_credentials grant and system/ scopes.
		if m := strs("token_endpoint_auth_methods_supported"); !slices.Contains(m, "private_key_jwt") || !slices.Contains(m, "client_secret_basic") {
			t.Errorf("token_endpoint_auth_methods_supported %v", m)
		}
		if a := strs("token_endpoint_auth_signing_alg_values_supported"); !slices.Equal(a, []string{"RS384", "ES384"}) {
			t.Errorf("token_endpoint_auth_signing_alg_values_supported %v", a)
		}
		if !slices.Contains(strs("grant_types_supported"), "client_credentials") || !slices.Contains(strs("scopes_supported"), "system/*.rs") {
			t.Errorf("grant_types_supported %v, scopes_supported %v", strs("grant_types_supported"), strs("scopes_supported"))
		}
	}
	// The endpoints it names answer.
	resp, body := env.GetJSON(t, "/o/.well-known/jwks.json", "")
	if resp.StatusCode != http.StatusOK || body["keys"] == nil {
		t.Errorf("jwks_uri: %d %v", resp.StatusCode, body)
	}
	resp, raw := fxDo(t, env, "GET", "/fhir/r5/.well-known/smart-configuration", map[string]string{"X-Forwarded-Proto": "https", "X-Forwarded-Host": "fhir.example.org"}, "")
	if sc := fxDecode(t, raw); resp.StatusCode != http.StatusOK || sc["issuer"] != "https://fhir.example.org/o" || sc["token_endpoint"] != "https://fhir.example.org/o/token/" {
		t.Errorf("behind a proxy, on the alias: %d %s", resp.StatusCode, raw)
	}
}

// TestFHIRDiscoveryMethods: the discovery documents answer GET and HEAD;
// other methods are 405 with Allow.
func TestFHIRDiscoveryMethods(t *testing.T) {
	env, token := fxEnv(t)
	for _, base := range []string{fxBase, "/fhir/r5"} {
		for _, path := range []string{"/metadata", "/.well-known/smart-configuration"} {
			resp, raw := fxDo(t, env, "HEAD", base+path, nil, "")
			if resp.StatusCode != http.StatusOK || len(raw) != 0 || resp.Header.Get("Cache-Control") != "public, max-age=3600" {
				t.Errorf("HEAD %s%s: %d %q", base, path, resp.StatusCode, raw)
			}
			for _, method := range []string{"POST", "PUT", "PATCH", "DELETE"} {
				for _, tok := range []string{"", token} {
					header := map[string]string{}
					if tok != "" {
						header["Authorization"] = "Bearer " + tok
					}
					resp, raw := fxDo(t, env, method, base+path, header, "{}")
					allow := resp.Header.Get("Allow")
					if resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(allow, "GET") || !strings.Contains(allow, "HEAD") ||
						fxDecode(t, raw)["resourceType"] != "OperationOutcome" {
						t.Errorf("%s %s%s (token %v): %d Allow %q %s", method, base, path, tok != "", resp.StatusCode, allow, raw)
					}
				}
			}
		}
	}
}

// TestFHIRCORS: the canonical base has permissive CORS and answers
// preflights, errors included; the alias has no CORS headers.
func TestFHIRCORS(t *testing.T) {
	env, token := fxEnv(t)
	origin := map[string]string{"Origin": "https://app.example.org"}
	with := func(extra map[string]string) map[string]string {
		h := map[string]string{"Origin": "https://app.example.org"}
		for k, v := range extra {
			h[k] = v
		}
		return h
	}
	cors := func(resp *http.Response) bool {
		return resp.Header.Get("Access-Control-Allow-Origin") == "*" &&
			resp.Header.Get("Access-Control-Allow-Methods") == "GET, POST, PUT, PATCH, DELETE"
	}
	none := func(resp *http.Response) bool {
		for k := range resp.Header {
			if strings.HasPrefix(strings.ToLower(k), "access-control-") {
				return false
			}
		}
		return true
	}
	preflight := with(map[string]string{"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type"})
	for _, c := range []struct {
		name, method, path string
		header             map[string]string
		status             int
		canonical          bool
	}{
		{"metadata", "GET", "/metadata", origin, http.StatusOK, true},
		{"smart configuration", "GET", "/.well-known/smart-configuration", origin, http.StatusOK, true},
		{"a search", "GET", "/Observation", with(map[string]string{"Authorization": "Bearer " + token}), http.StatusOK, true},
		{"a search without a token", "GET", "/Observation", origin, http.StatusUnauthorized, true},
		{"an unknown resource", "GET", "/Observation/424242", with(map[string]string{"Authorization": "Bearer " + token}), http.StatusNotFound, true},
		{"a refused write", "DELETE", "/Patient/1", with(map[string]string{"Authorization": "Bearer " + token}), http.StatusMethodNotAllowed, true},
	} {
		for _, base := range []string{fxBase, "/fhir/r5"} {
			resp, raw := fxDo(t, env, c.method, base+c.path, c.header, "")
			if resp.StatusCode != c.status {
				t.Errorf("%s on %s: %d %s, want %d", c.name, base, resp.StatusCode, raw, c.status)
			}
			if base == fxBase && !cors(resp) {
				t.Errorf("%s on %s: no CORS headers: %v", c.name, base, resp.Header)
			}
			if base != fxBase && !none(resp) {
				t.Errorf("%s on the alias: CORS headers %v", c.name, resp.Header)
			}
		}
	}
	// Preflights of the canonical base are answered without a token.
	for _, path := range []string{"", "/", "/Observation", "/Observation/1", "/metadata"} {
		resp, _ := fxDo(t, env, "OPTIONS", fxBase+path, preflight, "")
		if resp.StatusCode/100 != 2 || !cors(resp) || !strings.Contains(strings.ToLower(resp.Header.Get("Access-Control-Allow-Headers")), "authorization") {
			t.Errorf("preflight of %s: %d %v", path, resp.StatusCode, resp.Header)
		}
		resp, _ = fxDo(t, env, "OPTIONS", "/fhir/r5"+path, preflight, "")
		if !none(resp) || resp.StatusCode/100 == 2 {
			t.Errorf("preflight of the alias %s: %d %v", path, resp.StatusCode, resp.Header)
		}
	}
	// The decision is made on the raw path: another case is neither.
	resp, _ := fxDo(t, env, "GET", "/Fhir/R5/metadata", origin, "")
	if resp.StatusCode != http.StatusNotFound || !none(resp) {
		t.Errorf("/Fhir/R5/metadata: %d %v", resp.StatusCode, resp.Header)
	}
}

// TestFHIRContentNegotiation: application/fhir+json by default,
// application/json when Accept or _format prefers it, 406 for XML.
func TestFHIRContentNegotiation(t *testing.T) {
	env, token := fxEnv(t)
	auth := "Bearer " + token
	for _, c := range []struct {
		accept, format string
		want           string // the Content-Type, or "406"
	}{
		{"", "", "application/fhir+json"},
		{"application/fhir+json", "", "application/fhir+json"},
		{"application/json", "", "application/json"},
		{"*/*", "", "application/fhir+json"},
		{"application/*", "", "application/fhir+json"},
		{"application/json;q=0.9, application/fhir+json", "", "application/fhir+json"},
		{"application/fhir+json;q=0.5, application/json", "", "application/json"},
		{"application/fhir+xml, application/json;q=0.1", "", "application/json"},
		{"application/fhir+json; fhirVersion=5.0", "", "application/fhir+json"},
		{"application/fhir+xml", "", "406"},
		{"application/xml", "", "406"},
		{"text/html", "", "406"},
		{"application/json;q=0", "", "406"},
		{"", "json", "application/fhir+json"},
		{"", "application/fhir+json", "application/fhir+json"},
		{"", "application/json", "application/json"},
		{"", "xml", "406"},
		{"", "application/fhir+xml", "406"},
		{"", "text/xml", "406"},
		{"application/fhir+xml", "json", "application/fhir+json"}, // _format wins
		{"application/json", "xml", "406"},
	} {
		q := ""
		if c.format != "" {
			q = "?_format=" + url.QueryEscape(c.format)
		}
		for _, path := range []string{"/metadata", "/Observation", "/Patient"} {
			header := map[string]string{"Authorization": auth}
			if c.accept != "" {
				header["Accept"] = c.accept
			}
			resp, raw := fxDo(t, env, "GET", fxBase+path+q, header, "")
			ct := resp.Header.Get("Content-Type")
			if c.want == "406" {
				if resp.StatusCode != http.StatusNotAcceptable || fxDecode(t, raw)["resourceType"] != "OperationOutcome" {
					t.Errorf("GET %s%s Accept %q: %d %s, want 406", path, q, c.accept, resp.StatusCode, raw)
				}
				continue
			}
			if resp.StatusCode != http.StatusOK || ct != c.want {
				t.Errorf("GET %s%s Accept %q: %d %q, want %s", path, q, c.accept, resp.StatusCode, ct, c.want)
			}
		}
	}
	// Writes negotiate too.
	resp, raw := fxDo(t, env, "POST", fxBase+"/", map[string]string{"Authorization": auth, "Accept": "application/json"}, `{"resourceType": "Bundle", "type": "batch", "entry": []}`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("batch, Accept application/json: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), raw)
	}
	resp, raw = fxDo(t, env, "POST", fxBase+"/", map[string]string{"Authorization": auth, "Accept": "application/fhir+xml"}, `{"resourceType": "Bundle", "type": "batch", "entry": []}`)
	if resp.StatusCode != http.StatusNotAcceptable {
		t.Errorf("batch, Accept XML: %d %s", resp.StatusCode, raw)
	}
}

// TestOMHSchemas lists the Open mHealth and IEEE 1752 schemas, each with
// its namespace, and serves one of each as published; both need a token.
func TestOMHSchemas(t *testing.T) {
	env, token := fxEnv(t)
	resp, list := env.GetJSON(t, "/api/v1/omh_schemas", token)
	results := fxArr(list["results"])
	if resp.StatusCode != http.StatusOK || len(results) < 10 || list["count"] != float64(len(results)) {
		t.Fatalf("omh_schemas: %d %v", resp.StatusCode, list["count"])
	}
	listed := map[string]string{} // namespace:name:version -> title
	for _, r := range results {
		s := fxObj(r)
		if len(s) != 4 || s["namespace"] == nil || s["name"] == nil || s["version"] == nil || s["title"] == nil {
			t.Errorf("schema entry %v", s)
		}
		listed[fmt.Sprintf("%v:%v:%v", s["namespace"], s["name"], s["version"])], _ = s["title"].(string)
	}
	if got := listed["omh:heart-rate:2.0"]; got != "This schema represents a person's heart rate." {
		t.Errorf("heart-rate 2.0 is not listed with its title: %q", got)
	}
	for _, code := range []string{"ieee:sleep-stage-summary:1.0", "ieee:physical-activity:1.0", "omh:sleep-episode:1.0"} {
		if listed[code] == "" {
			t.Errorf("%s is not listed with a title", code)
		}
	}
	omhDir, ieeeDir := omhtest.SchemaDirs()
	for path, file := range map[string]string{
		"/api/v1/omh_schemas/heart-rate/2.0":         filepath.Join(omhDir, "heart-rate-2.0.json"),
		"/api/v1/omh_schemas/omh/heart-rate/2.0":     filepath.Join(omhDir, "heart-rate-2.0.json"),
		"/api/v1/omh_schemas/ieee/sleep-episode/1.0": filepath.Join(ieeeDir, "sleep", "sleep-episode-1.0.json"),
		"/api/v1/omh_schemas/ieee/data-point/1.0":    filepath.Join(ieeeDir, "metadata", "data-point-1.0.json"),
	} {
		published, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		resp, raw := fxDo(t, env, "GET", path, map[string]string{"Authorization": "Bearer " + token}, "")
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || string(raw) != string(published) {
			t.Errorf("%s: %d %q, the published bytes: %v", path, resp.StatusCode, resp.Header.Get("Content-Type"), string(raw) == string(published))
		}
	}
	for _, path := range []string{"/api/v1/omh_schemas/heart-rate/9.9", "/api/v1/omh_schemas/no-such-schema/1.0", "/api/v1/omh_schemas/..%2Fdata-point/1.0",
		"/api/v1/omh_schemas/sleep-stage-summary/1.0", "/api/v1/omh_schemas/ieee/heart-rate/2.0", "/api/v1/omh_schemas/fhir/heart-rate/2.0"} {
		if resp, body := env.GetJSON(t, path, token); resp.StatusCode != http.StatusNotFound || body["detail"] == nil {
			t.Errorf("%s: %d %v", path, resp.StatusCode, body)
		}
	}
	for _, path := range []string{"/api/v1/omh_schemas", "/api/v1/omh_schemas/heart-rate/2.0", "/api/v1/omh_schemas/ieee/sleep-episode/1.0"} {
		if resp, _ := env.GetJSON(t, path, ""); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without a token: %d", path, resp.StatusCode)
		}
	}
}

// The Location of a create is a version read of the one version a native
// record has.
func TestFHIRVersionRead(t *testing.T) {
	w := fxNewWorld(t)
	ids := w.create(t, w.tok["doc"], fxObs{patient: w.alice.ID, device: w.watch, code: fxHR,
		payload: fxDataPoint(fxHR, fxHeartRate(fxAt("2024-03-05T10:00:00+01:00")))})
	path := fxBase + "/Observation/" + ids[0] + "/_history/1"
	resp, body := w.env.GetJSON(t, path, w.tok["doc"])
	if resp.StatusCode != http.StatusOK || body["id"] != ids[0] {
		t.Fatalf("GET %s: %d %v", path, resp.StatusCode, body)
	}
	if resp, _ := w.env.GetJSON(t, strings.TrimSuffix(path, "1")+"2", w.tok["doc"]); resp.StatusCode != http.StatusNotFound {
		t.Errorf("version 2: %d", resp.StatusCode)
	}
}
