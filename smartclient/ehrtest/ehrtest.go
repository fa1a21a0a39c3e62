// Package ehrtest is an in-process test EHR: a SMART App Launch
// authorization server (discovery, authorize checking PKCE S256 and state,
// token with the patient and a signed id_token, refresh, revocation, key
// set) and an R4 FHIR API of patient-scoped searches (_count and next
// links, patient, category, _lastUpdated) over a Bulk Data NDJSON folder,
// such as the Synthea sample; with fault switches for what real EHRs do:
// a type refused (403), a page that fails (500), an Observation search
// that demands a category, an id over 64 characters, a token response
// without patient, an access token refused before its time.
//
// It signs the patient in without asking: the test chooses the patient
// (SignIn) before the browser, or the test as the browser, reaches the
// authorize endpoint.
package ehrtest

import (
	"bufio"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// EHR is a running test EHR. Its fields are the fault switches and what
// it recorded; set them with Set, read them with Get.
type EHR struct {
	// Server serves it; Base is its FHIR base (the SMART iss).
	Server *httptest.Server
	Base   string

	// ClientID and ClientSecret are the one client it knows ("" secret:
	// public); RedirectURI, the one redirect it allows (set by the test).
	ClientID, ClientSecret, RedirectURI string

	mu  sync.Mutex
	key *rsa.PrivateKey
	// byType[type][patient id] are the resources of a patient, in file
	// order; patients[id] the Patient resources.
	byType   map[string]map[string][]map[string]any
	patients map[string]map[string]any
	// signIn is the patient the next authorization is for.
	signIn string
	codes  map[string]*grant
	tokens map[string]*grant // access tokens
	// refresh tokens, each of a grant
	refresh map[string]*grant

	issuedCodes []string
	faults      Faults
	recorded    Recorded
	requests    int // FHIR requests served, for Faults.RefuseTokenAfter
	authorize   url.Values
}

// Faults are the EHR's misbehaviours a test switches on.
type Faults struct {
	// Refuse answers a type's search with this status (403, 400, 404)
	// and an OperationOutcome.
	Refuse map[string]int
	// NotBundle answers a type's search 200 with JSON that is not a
	// Bundle.
	NotBundle map[string]bool
	// ScopesV2: the EHR advertises SMART v2 scopes (permission-v2).
	ScopesV2 bool
	// FailPage makes the page n (from 1) of a type's search answer 500,
	// every time: "Type#n".
	FailPage map[string]bool
	// ObservationsWithoutCategory: an Observation search without category
	// is answered, not refused with 400 (large EHRs refuse it).
	ObservationsWithoutCategory bool
	// NoPatient leaves the patient out of the token response.
	NoPatient bool
	// RefuseTokenAfter refuses (401) every access token issued so far
	// once the EHR has served this many FHIR requests (0: never): a token
	// that expires mid-run.
	RefuseTokenAfter int
	// NoRefreshToken: no refresh token, even for offline_access.
	NoRefreshToken bool
	// BeforeSearch runs before each search is answered, with its type:
	// what a test does while a pull runs.
	BeforeSearch func(resourceType string)
}

// Recorded is what the EHR saw.
type Recorded struct {
	Revoked       []string // tokens revoked
	Refreshes     int
	Searches      map[string]int // FHIR requests by type
	LastUpdatedGT []string       // _lastUpdated values searched
}

type grant struct {
	patient, clientID, scope, challenge, redirect string
	refused                                       bool
	expires                                       time.Time
}

// Start serves the resources of the NDJSON files of dir (the export's
// other files, such as log.ndjson, are skipped). Every Patient resource is
// a patient who can sign in.
func Start(t testing.TB, dir string) *EHR {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	e := &EHR{key: key, ClientID: "exchange-test-client", byType: map[string]map[string][]map[string]any{},
		patients: map[string]map[string]any{}, codes: map[string]*grant{}, tokens: map[string]*grant{}, refresh: map[string]*grant{},
		recorded: Recorded{Searches: map[string]int{}}}
	if err := e.load(dir); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /fhir/.well-known/smart-configuration", e.discovery)
	mux.HandleFunc("GET /authorize", e.authorizeEndpoint)
	mux.HandleFunc("POST /token", e.token)
	mux.HandleFunc("POST /revoke", e.revoke)
	mux.HandleFunc("GET /jwks", e.jwks)
	mux.HandleFunc("GET /fhir/Patient/{id}", e.readPatient)
	mux.HandleFunc("GET /fhir/{type}", e.search)
	e.Server = httptest.NewServer(mux)
	e.Base = e.Server.URL + "/fhir"
	t.Cleanup(e.Server.Close)
	return e
}

// Patients are the ids of the patients the EHR holds, sorted.
func (e *EHR) Patients() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ids []string
	for id := range e.patients {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Count is how many resources of a type the EHR holds of a patient.
func (e *EHR) Count(resourceType, patient string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.byType[resourceType][patient])
}

// SignIn makes the next authorizations sign in as a patient.
func (e *EHR) SignIn(patient string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.signIn = patient
}

// SetFaults replaces the fault switches.
func (e *EHR) SetFaults(f Faults) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.faults = f
	e.requests = 0
}

// Recorded returns what the EHR saw so far.
func (e *EHR) Recorded() Recorded {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.recorded
	r.Revoked = slices.Clone(r.Revoked)
	r.Searches = map[string]int{}
	for k, v := range e.recorded.Searches {
		r.Searches[k] = v
	}
	r.LastUpdatedGT = slices.Clone(r.LastUpdatedGT)
	return r
}

// Issued returns every code, access and refresh token the EHR issued:
// what must never be found in the exchange's database or logs.
func (e *EHR) Issued() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, m := range []map[string]*grant{e.tokens, e.refresh} {
		for t := range m {
			out = append(out, t)
		}
	}
	return append(out, e.issuedCodes...)
}

// Authorize returns the query of the last authorize request.
func (e *EHR) Authorize() url.Values {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.authorize
}

// Touch gives a resource a new lastUpdated (now) and changes its content
// by fn: what changed at the EHR since a pull.
func (e *EHR) Touch(resourceType, id string, fn func(map[string]any)) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, rs := range e.byType[resourceType] {
		for _, r := range rs {
			if r["id"] == id {
				fn(r)
				r["meta"] = map[string]any{"lastUpdated": time.Now().UTC().Format(time.RFC3339Nano)}
				return true
			}
		}
	}
	return false
}

// Add adds a resource of a patient.
func (e *EHR) Add(patient string, r map[string]any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.addLocked(patient, r)
}

func (e *EHR) addLocked(patient string, r map[string]any) {
	typ, _ := r["resourceType"].(string)
	if e.byType[typ] == nil {
		e.byType[typ] = map[string][]map[string]any{}
	}
	e.byType[typ][patient] = append(e.byType[typ][patient], r)
}

// loaded is when every resource of the folder was last updated.
var loaded = time.Date(2024, 8, 6, 18, 12, 57, 0, time.UTC)

// load reads the NDJSON files: each resource under the patient it names
// (subject, patient or, for a Patient, itself); the others (Organization,
// Practitioner, ...) are no patient's and are not searched. Each patient
// also gets a few Observations of two categories (the sample has none).
func (e *EHR) load(dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.ndjson"))
	if err != nil {
		return err
	}
	for _, f := range files {
		if strings.EqualFold(filepath.Base(f), "log.ndjson") {
			continue
		}
		if err := e.loadFile(f); err != nil {
			return err
		}
	}
	if len(e.patients) == 0 {
		return fmt.Errorf("%s holds no Patient: run scripts/setup", dir)
	}
	for id := range e.patients {
		for i, c := range []struct{ category, loinc, unit string }{
			{"vital-signs", "8867-4", "/min"}, {"vital-signs", "8310-5", "Cel"}, {"laboratory", "2339-0", "mg/dL"},
		} {
			e.addLocked(id, map[string]any{"resourceType": "Observation", "id": fmt.Sprintf("obs-%s-%d", id[:8], i), "status": "final",
				"meta":     map[string]any{"lastUpdated": loaded.Format(time.RFC3339)},
				"category": []any{map[string]any{"coding": []any{map[string]any{"system": "http://terminology.hl7.org/CodeSystem/observation-category", "code": c.category}}}},
				"code":     map[string]any{"coding": []any{map[string]any{"system": "http://loinc.org", "code": c.loinc}}},
				"subject":  map[string]any{"reference": "Patient/" + id}, "effectiveDateTime": "2024-03-01T08:00:00Z",
				"valueQuantity": map[string]any{"value": json.Number(strconv.Itoa(60 + i)), "unit": c.unit, "system": "http://unitsofmeasure.org", "code": c.unit}})
		}
	}
	return nil
}

func (e *EHR) loadFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.UseNumber() // decimals as sent
		var r map[string]any
		if err := dec.Decode(&r); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if _, ok := r["meta"].(map[string]any); !ok {
			r["meta"] = map[string]any{}
		}
		r["meta"].(map[string]any)["lastUpdated"] = loaded.Format(time.RFC3339)
		if r["resourceType"] == "Patient" {
			id, _ := r["id"].(string)
			e.patients[id] = r
			continue
		}
		if patient := patientOf(r); patient != "" {
			e.addLocked(patient, r)
		}
	}
	return sc.Err()
}

// patientOf is the id of the patient a resource names.
func patientOf(r map[string]any) string {
	for _, k := range []string{"subject", "patient"} {
		if ref, ok := r[k].(map[string]any); ok {
			if s, _ := ref["reference"].(string); strings.HasPrefix(s, "Patient/") {
				return strings.TrimPrefix(s, "Patient/")
			}
		}
	}
	return ""
}

func (e *EHR) discovery(w http.ResponseWriter, _ *http.Request) {
	e.mu.Lock()
	v2 := e.faults.ScopesV2
	e.mu.Unlock()
	capabilities := []string{"launch-standalone", "client-public", "client-confidential-symmetric", "context-standalone-patient", "permission-offline", "permission-patient", "permission-v1", "sso-openid-connect"}
	scopes := []string{"openid", "fhirUser", "launch/patient", "offline_access", "patient/*.read"}
	if v2 {
		capabilities = append(capabilities, "permission-v2")
		scopes = append(scopes, "patient/*.rs")
	}
	writeJSON(w, 200, map[string]any{
		"issuer": e.Server.URL, "authorization_endpoint": e.Server.URL + "/authorize", "token_endpoint": e.Server.URL + "/token",
		"revocation_endpoint": e.Server.URL + "/revoke", "jwks_uri": e.Server.URL + "/jwks",
		"capabilities": capabilities, "code_challenge_methods_supported": []string{"S256"}, "scopes_supported": scopes,
	})
}

// authorizeEndpoint checks the request as an EHR does (client, redirect,
// aud, PKCE S256, state) and signs in the patient SignIn chose.
func (e *EHR) authorizeEndpoint(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.authorize = q
	switch {
	case q.Get("response_type") != "code", q.Get("client_id") != e.ClientID:
		http.Error(w, "unknown client or response type", http.StatusBadRequest)
		return
	case q.Get("redirect_uri") == "" || q.Get("redirect_uri") != e.RedirectURI:
		http.Error(w, "redirect_uri is not the registered one", http.StatusBadRequest)
		return
	case q.Get("aud") != e.Base:
		http.Error(w, "aud is not this FHIR server", http.StatusBadRequest)
		return
	case q.Get("code_challenge_method") != "S256" || len(q.Get("code_challenge")) < 43:
		http.Error(w, "PKCE S256 is required", http.StatusBadRequest)
		return
	case len(q.Get("state")) < 22: // 128 bits as base64url; the exchange sends 256
		http.Error(w, "a state of enough entropy is required", http.StatusBadRequest)
		return
	case e.patients[e.signIn] == nil:
		http.Error(w, "no patient is signed in", http.StatusBadRequest)
		return
	}
	code := random()
	e.issuedCodes = append(e.issuedCodes, code)
	e.codes[code] = &grant{patient: e.signIn, clientID: q.Get("client_id"), scope: q.Get("scope"), challenge: q.Get("code_challenge"),
		redirect: q.Get("redirect_uri")}
	back := q.Get("redirect_uri") + "?" + url.Values{"code": {code}, "state": {q.Get("state")}}.Encode()
	http.Redirect(w, r, back, http.StatusFound)
}

func (e *EHR) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request")
		return
	}
	// HTTP Basic credentials of OAuth are form-encoded first (RFC 6749
	// section 2.3.1): a secret with a space or a quote arrives escaped.
	client, secret, basic := r.BasicAuth()
	if basic {
		client, _ = url.QueryUnescape(client)
		secret, _ = url.QueryUnescape(secret)
	} else {
		client = r.PostForm.Get("client_id")
	}
	if client != e.ClientID || secret != e.ClientSecret || (e.ClientSecret != "" && !basic) {
		oauthError(w, http.StatusUnauthorized, "invalid_client")
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var g *grant
	switch r.PostForm.Get("grant_type") {
	case "authorization_code":
		g = e.codes[r.PostForm.Get("code")]
		delete(e.codes, r.PostForm.Get("code"))
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		if g == nil || g.redirect != r.PostForm.Get("redirect_uri") || base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge {
			oauthError(w, http.StatusBadRequest, "invalid_grant")
			return
		}
	case "refresh_token":
		g = e.refresh[r.PostForm.Get("refresh_token")]
		if g == nil || g.refused {
			oauthError(w, http.StatusBadRequest, "invalid_grant")
			return
		}
		e.recorded.Refreshes++
	default:
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type")
		return
	}
	access := random()
	issued := *g
	issued.expires = time.Now().Add(time.Hour)
	e.tokens[access] = &issued
	out := map[string]any{"access_token": access, "token_type": "Bearer", "expires_in": 3600, "scope": g.scope}
	if !e.faults.NoPatient {
		out["patient"] = g.patient
	}
	if strings.Contains(" "+g.scope+" ", " offline_access ") && !e.faults.NoRefreshToken {
		if r.PostForm.Get("grant_type") == "refresh_token" {
			out["refresh_token"] = r.PostForm.Get("refresh_token")
		} else {
			rt := random()
			e.refresh[rt] = g
			out["refresh_token"] = rt
		}
	}
	if strings.Contains(" "+g.scope+" ", " openid ") {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"iss": e.Server.URL, "sub": g.patient, "aud": g.clientID,
			"fhirUser": e.Base + "/Patient/" + g.patient, "iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()})
		tok.Header["kid"] = "test-ehr-key"
		signed, err := tok.SignedString(e.key)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		out["id_token"] = signed
	}
	writeJSON(w, 200, out)
}

func (e *EHR) revoke(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request")
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	t := r.PostForm.Get("token")
	e.recorded.Revoked = append(e.recorded.Revoked, t)
	if g := e.refresh[t]; g != nil {
		g.refused = true
	}
	if g := e.tokens[t]; g != nil {
		g.refused = true
	}
	w.WriteHeader(http.StatusOK)
}

func (e *EHR) jwks(w http.ResponseWriter, _ *http.Request) {
	pub := e.key.PublicKey
	writeJSON(w, 200, map[string]any{"keys": []any{map[string]any{"kty": "RSA", "kid": "test-ehr-key", "use": "sig", "alg": "RS256",
		"n": base64.RawURLEncoding.EncodeToString(pub.N.Bytes()), "e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes())}}})
}

// authorized returns the grant of the request's bearer token, or answers
// 401 (and nil).
func (e *EHR) authorized(w http.ResponseWriter, r *http.Request) *grant {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	e.requests++
	g := e.tokens[token]
	if g != nil && e.faults.RefuseTokenAfter > 0 && e.requests > e.faults.RefuseTokenAfter {
		// Every token issued so far is refused, from now on.
		for _, other := range e.tokens {
			other.refused = true
		}
		e.faults.RefuseTokenAfter = 0
	}
	if !ok || g == nil || g.refused || time.Now().After(g.expires) {
		outcome(w, http.StatusUnauthorized, "login", "the access token is not valid")
		return nil
	}
	return g
}

func (e *EHR) readPatient(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.authorized(w, r)
	if g == nil {
		return
	}
	id := r.PathValue("id")
	if id != g.patient || e.patients[id] == nil {
		outcome(w, http.StatusNotFound, "not-found", "no such patient")
		return
	}
	writeJSON(w, 200, e.patients[id])
}

// search answers a patient-scoped search: patient (required, the token's),
// category (Observation), _lastUpdated=gt, _count, and the page (_page,
// from the next link).
func (e *EHR) search(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	before := e.faults.BeforeSearch
	e.mu.Unlock()
	if before != nil {
		before(r.PathValue("type"))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.authorized(w, r)
	if g == nil {
		return
	}
	typ, q := r.PathValue("type"), r.URL.Query()
	e.recorded.Searches[typ]++
	page, _ := strconv.Atoi(q.Get("_page"))
	page = max(page, 1)
	switch {
	case e.faults.Refuse[typ] != 0:
		outcome(w, e.faults.Refuse[typ], "forbidden", "this application may not read "+typ)
		return
	case e.faults.NotBundle[typ]:
		writeJSON(w, 200, map[string]any{"message": "not FHIR"})
		return
	case e.faults.FailPage[typ+"#"+strconv.Itoa(page)]:
		outcome(w, http.StatusInternalServerError, "exception", "the EHR failed")
		return
	case q.Get("patient") != g.patient:
		outcome(w, http.StatusForbidden, "forbidden", "a search of another patient")
		return
	case typ == "Observation" && q.Get("category") == "" && !e.faults.ObservationsWithoutCategory:
		outcome(w, http.StatusBadRequest, "required", "an Observation search requires a category")
		return
	}
	var hits []map[string]any
	since := q.Get("_lastUpdated")
	if since != "" {
		e.recorded.LastUpdatedGT = append(e.recorded.LastUpdatedGT, since)
	}
	for _, res := range e.byType[typ][g.patient] {
		if c := q.Get("category"); c != "" && !hasCategory(res, c) {
			continue
		}
		if s, ok := strings.CutPrefix(since, "gt"); ok {
			at, err := time.Parse(time.RFC3339, s)
			updated, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(res["meta"].(map[string]any)["lastUpdated"]))
			if err != nil || !updated.After(at) {
				continue
			}
		}
		hits = append(hits, res)
	}
	count, _ := strconv.Atoi(q.Get("_count"))
	if count < 1 || count > 200 {
		count = 50
	}
	from := min((page-1)*count, len(hits))
	to := min(from+count, len(hits))
	b := map[string]any{"resourceType": "Bundle", "type": "searchset", "total": len(hits),
		"link": []any{map[string]any{"relation": "self", "url": e.Base + "/" + typ + "?" + q.Encode()}}}
	var entries []any
	for _, res := range hits[from:to] {
		entries = append(entries, map[string]any{"fullUrl": e.Base + "/" + typ + "/" + fmt.Sprint(res["id"]), "resource": res,
			"search": map[string]any{"mode": "match"}})
	}
	b["entry"] = entries
	if to < len(hits) {
		next := url.Values{}
		for k, v := range q {
			next[k] = v
		}
		next.Set("_page", strconv.Itoa(page+1))
		b["link"] = append(b["link"].([]any), map[string]any{"relation": "next", "url": e.Base + "/" + typ + "?" + next.Encode()})
	}
	writeJSON(w, 200, b)
}

func hasCategory(r map[string]any, code string) bool {
	cats, _ := r["category"].([]any)
	for _, c := range cats {
		codings, _ := c.(map[string]any)["coding"].([]any)
		for _, coding := range codings {
			if coding.(map[string]any)["code"] == code {
				return true
			}
		}
	}
	return false
}

func outcome(w http.ResponseWriter, status int, code, text string) {
	writeJSON(w, status, map[string]any{"resourceType": "OperationOutcome",
		"issue": []any{map[string]any{"severity": "error", "code": code, "diagnostics": text}}})
}

func oauthError(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": code})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/fhir+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func random() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// OneRecord writes the folder of a small record, one patient's
// (OneRecordPatient) with a Condition, for tests that need an EHR but not
// a large record.
func OneRecord(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for name, line := range map[string]string{
		"Patient.000.ndjson":   `{"resourceType": "Patient", "id": "` + OneRecordPatient + `", "gender": "female"}`,
		"Condition.000.ndjson": `{"resourceType": "Condition", "id": "c1", "code": {"text": "asthma"}, "subject": {"reference": "Patient/` + OneRecordPatient + `"}}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// OneRecordPatient is the patient of OneRecord.
const OneRecordPatient = "ehr-patient-1"
