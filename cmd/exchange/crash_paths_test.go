package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/alexedwards/argon2id"
	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/oauth"
)

// crashPaths are the write paths the crash suite kills, one per write
// path the service has that touches more than one document, or that a
// resend could double. Trials use data of their own; paths whose data
// would make later trials slower (every FerretDB lookup reads the whole
// collection) remove it after their check.
var crashPaths = []crashPath{
	{name: "native-batch", variants: []crashVariant{{"batch of 120 with identifiers", nativeBatch}}},
	{name: "native-single", variants: []crashVariant{{"one without identifiers", nativeSingle}}},
	{name: "imported-create", models: true, variants: []crashVariant{{"batch of 120, half without ids", importedBatch}}},
	{name: "imported-change", models: true, variants: []crashVariant{{"PUT", importedPut}, {"PATCH", importedPatch}, {"DELETE", importedDelete}}},
	{name: "r4-import", models: true, variants: []crashVariant{{"R4 Bundle of 60, half without ids", r4Import}}},
	{name: "enrollment-consents", variants: []crashVariant{{"enroll", enroll}, {"answer", answerConsents},
		{"update", updateConsents}, {"withdraw", withdrawConsents}, {"unenroll", unenroll}}},
	{name: "patients", variants: []crashVariant{{"create", createPatient}, {"update identifiers", updatePatientIdentifiers}, {"delete", deletePatient}}},
	{name: "practitioners-organizations", variants: []crashVariant{{"create practitioner", createPractitioner},
		{"create organization", createOrganization}, {"delete organization", deleteOrganization}}},
	{name: "oauth-tokens", variants: []crashVariant{{"code exchange", codeExchange}, {"refresh", refreshTokens}}},
	{name: "console-invitation", variants: []crashVariant{{"accept", acceptInvitation}}},
}

// The demo data the paths build on (`exchange seed`).
const (
	crashPatient     = 1 // alice
	crashDevice      = 1 // her blood pressure cuff
	crashFHIRSource  = 1 // her EHR
	crashCardiology  = 3 // the organization of alice and of crashStudy
	crashStudy       = 1 // Heart Failure Home Monitoring, requesting heart rate and blood pressure
	crashIdentifiers = "urn:crash:observation"
)

// --- Store access for the checks ---

func (h *harness) findAll(col string, filter bson.M, out any) {
	h.t.Helper()
	cur, err := h.db.Collection(col).Find(context.Background(), filter)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := cur.All(context.Background(), out); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) count(col string, filter bson.M) int64 {
	h.t.Helper()
	n, err := h.db.Collection(col).CountDocuments(context.Background(), filter)
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

func (h *harness) deleteAll(col string, filter bson.M) {
	h.t.Helper()
	if _, err := h.db.Collection(col).DeleteMany(context.Background(), filter); err != nil {
		h.t.Fatal(err)
	}
}

// noWriteLeftHalfDone checks that no write intent is left: after a restart
// and a retry, every interrupted write is repaired or finished.
func (h *harness) noWriteLeftHalfDone() {
	h.t.Helper()
	if n := h.count("write_intents", bson.M{}); n > 0 {
		var in []bson.M
		h.findAll("write_intents", bson.M{}, &in)
		h.checkf("%d write intents left: %v", n, in)
	}
}

// expectStatus checks the retry's status against those allowed.
func (h *harness) expectStatus(retry *crashResponse, allowed ...int) {
	h.t.Helper()
	for _, s := range allowed {
		if retry.status == s {
			return
		}
	}
	h.checkf("the retry answered %d, want one of %v: %.1000s", retry.status, allowed, retry.body)
}

func (h *harness) decode(data []byte, out any) {
	h.t.Helper()
	if err := json.Unmarshal(data, out); err != nil {
		h.checkf("%v: %.500s", err, data)
	}
}

// --- Native observations ---

// nativeObservation is a heart rate of alice measured by her cuff, the
// demo data's consented pair; identifier "": none.
func nativeObservation(headerID, identifier string) map[string]any {
	point := fmt.Sprintf(`{"header":{"id":%q,"creation_date_time":"2025-03-10T08:00:05Z","schema_id":{"namespace":"omh","name":"heart-rate","version":"2.0"}},`+
		`"body":{"heart_rate":{"value":72,"unit":"beats/min"},"effective_time_frame":{"date_time":"2025-03-10T08:00:00Z"}}}`, headerID)
	o := map[string]any{"resourceType": "Observation", "status": "final",
		"code":    map[string]any{"coding": []any{map[string]any{"system": "https://w3id.org/openmhealth", "code": "omh:heart-rate:2.0"}}},
		"subject": map[string]any{"reference": fmt.Sprintf("Patient/%d", crashPatient)}, "device": map[string]any{"reference": fmt.Sprintf("Device/%d", crashDevice)},
		"valueAttachment": map[string]any{"contentType": "application/json", "data": base64.StdEncoding.EncodeToString([]byte(point))}}
	if identifier != "" {
		o["identifier"] = []any{map[string]any{"system": crashIdentifiers, "value": identifier}}
	}
	return o
}

// batchOf is a batch Bundle creating the resources.
func batchOf(bundleType string, resources ...map[string]any) []byte {
	entries := make([]any, len(resources))
	for i, r := range resources {
		entries[i] = map[string]any{"request": map[string]any{"method": "POST", "url": r["resourceType"]}, "resource": r}
	}
	data, _ := json.Marshal(map[string]any{"resourceType": "Bundle", "type": bundleType, "entry": entries})
	return data
}

// batchAnswer is a batch-response Bundle as far as the checks read it.
type batchAnswer struct {
	Entry []struct {
		Resource *struct {
			ResourceType string `json:"resourceType"`
			ID           string `json:"id"`
		} `json:"resource"`
		Response struct {
			Status   string          `json:"status"`
			Location string          `json:"location"`
			Outcome  json.RawMessage `json:"outcome"`
		} `json:"response"`
	} `json:"entry"`
}

// storedIDs reads a batch-response: for each entry the id of the resource
// stored for it, created (201) or already stored (409 naming it). Any
// other answer fails the trial.
func (h *harness) storedIDs(retry *crashResponse, entries int) []string {
	h.t.Helper()
	var b batchAnswer
	if retry.status != 200 {
		h.checkf("the retry answered %d: %.2000s", retry.status, retry.body)
	}
	h.decode(retry.body, &b)
	if len(b.Entry) != entries {
		h.checkf("%d entries answered for %d", len(b.Entry), entries)
	}
	ids := make([]string, entries)
	for j, e := range b.Entry {
		switch {
		case strings.HasPrefix(e.Response.Status, "201") && e.Resource != nil:
			ids[j] = e.Resource.ID
		case strings.HasPrefix(e.Response.Status, "409"):
			_, ref, ok := strings.Cut(e.Response.Location, "/")
			if !ok {
				h.checkf("entry %d: 409 names no stored resource: %s", j, e.Response.Outcome)
			}
			ids[j], _, _ = strings.Cut(ref, "/")
		default:
			h.checkf("entry %d: %s %s", j, e.Response.Status, e.Response.Outcome)
		}
	}
	return ids
}

// locationID is the id a single create's answer names: its Location
// (a 201, or a 409 of what is stored already).
func (h *harness) locationID(retry *crashResponse) string {
	h.t.Helper()
	loc := retry.header.Get("Location")
	if retry.status != 201 && retry.status != 409 || loc == "" {
		h.checkf("the retry answered %d, Location %q: %.1000s", retry.status, loc, retry.body)
	}
	u, err := url.Parse(loc)
	if err != nil {
		h.checkf("Location %q: %v", loc, err)
	}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/FHIR/R5/"), "/")
	return parts[1]
}

// observationView is an observation as the checks read it.
type observationView struct {
	ID          int64                            `bson:"_id"`
	Identifiers []struct{ System, Value string } `bson:"identifiers"`
}

// checkNativeStore checks the native store as a whole, which holds the
// trial's observations only: want of them; every identifier on exactly one
// observation, every observation holding its claims (an identifier's, or
// its content's when it has none) and every claim's observation stored;
// no write left half done. It then removes the trial's observations.
func (h *harness) checkNativeStore(want int) map[int64]observationView {
	h.t.Helper()
	var obs []observationView
	h.findAll("observations", bson.M{}, &obs)
	var claims []struct {
		System        string `bson:"system"`
		Value         string `bson:"value"`
		ObservationID int64  `bson:"observationId"`
	}
	h.findAll("observation_identifiers", bson.M{}, &claims)
	byID := map[int64]observationView{}
	owner := map[string]int64{}
	for _, o := range obs {
		byID[o.ID] = o
		for _, id := range o.Identifiers {
			key := id.System + "|" + id.Value
			if other, ok := owner[key]; ok {
				h.checkf("identifier %s is on Observation/%d and Observation/%d", key, other, o.ID)
			}
			owner[key] = o.ID
		}
	}
	held := map[int64]int{}
	for _, c := range claims {
		if _, ok := byID[c.ObservationID]; !ok {
			h.checkf("the claim on %s|%s points to Observation/%d, which is not stored", c.System, c.Value, c.ObservationID)
		}
		if c.System != "urn:exchange:observation-content" && owner[c.System+"|"+c.Value] != c.ObservationID {
			h.checkf("the claim on %s|%s points to Observation/%d, which does not hold it", c.System, c.Value, c.ObservationID)
		}
		held[c.ObservationID]++
	}
	for _, o := range obs {
		if n := max(len(o.Identifiers), 1); held[o.ID] != n {
			h.checkf("Observation/%d holds %d claims, want %d", o.ID, held[o.ID], n)
		}
	}
	if len(obs) != want {
		h.checkf("%d observations stored, want %d", len(obs), want)
	}
	h.noWriteLeftHalfDone()
	h.deleteAll("observations", bson.M{})
	h.deleteAll("observation_identifiers", bson.M{})
	return byID
}

// nativeBatch: a batch of native Observations, each with an identifier.
func nativeBatch(h *harness, n int) (*crashRequest, crashCheck) {
	const size = 120 // more than FerretDB inserts in one SQLite transaction (100)
	obs := make([]map[string]any, size)
	for j := range obs {
		obs[j] = nativeObservation(fmt.Sprintf("b%d-%d", n, j), fmt.Sprintf("b%d-%d", n, j))
	}
	req := &crashRequest{method: "POST", path: "/FHIR/R5", body: batchOf("batch", obs...),
		header: map[string]string{"Content-Type": "application/fhir+json"}}
	return req, func(h *harness, retry *crashResponse, _ crashOutcome) {
		ids := h.storedIDs(retry, size)
		stored := h.checkNativeStore(size)
		for j, id := range ids {
			number, _ := strconv.ParseInt(id, 10, 64)
			o, ok := stored[number]
			if want := fmt.Sprintf("b%d-%d", n, j); !ok || len(o.Identifiers) != 1 || o.Identifiers[0].Value != want {
				h.checkf("entry %d: Observation/%s, answered for %s, holds %v (stored: %v)", j, id, want, o.Identifiers, ok)
			}
		}
	}
}

// nativeSingle: one native Observation without identifiers, which its
// content identifies.
func nativeSingle(h *harness, n int) (*crashRequest, crashCheck) {
	body, _ := json.Marshal(nativeObservation(fmt.Sprintf("s%d", n), ""))
	req := &crashRequest{method: "POST", path: "/FHIR/R5/Observation", body: body,
		header: map[string]string{"Content-Type": "application/fhir+json"}}
	return req, func(h *harness, retry *crashResponse, _ crashOutcome) {
		id := h.locationID(retry)
		stored := h.checkNativeStore(1)
		number, _ := strconv.ParseInt(id, 10, 64)
		if _, ok := stored[number]; !ok {
			h.checkf("Observation/%s, answered, is not stored", id)
		}
	}
}

// --- Imported resources and the R4 import ---

func fhirSourceHeader() map[string]string {
	return map[string]string{"Content-Type": "application/fhir+json", "X-SERVICE-FHIR-Source-ID": strconv.Itoa(crashFHIRSource)}
}

// resourceView is an imported resource as the checks read it.
type resourceView struct {
	ID         string `bson:"_id"`
	Type       string `bson:"resourceType"`
	UpstreamID string `bson:"upstreamId"`
	VersionID  int64  `bson:"versionId"`
	JSON       string `bson:"json"`
}

// checkImportedStore checks the imported store, which holds the trial's
// resources only: want of them, each upstream id once, every id answered
// stored, no write left half done; then removes them.
func (h *harness) checkImportedStore(want int, answered []string) map[string]resourceView {
	h.t.Helper()
	var rs []resourceView
	h.findAll("resources", bson.M{}, &rs)
	byID := map[string]resourceView{}
	upstream := map[string]bool{}
	for _, r := range rs {
		byID[r.ID] = r
		if r.UpstreamID != "" {
			if upstream[r.Type+"/"+r.UpstreamID] {
				h.checkf("%s/%s is stored twice", r.Type, r.UpstreamID)
			}
			upstream[r.Type+"/"+r.UpstreamID] = true
		}
	}
	seen := map[string]bool{}
	for j, id := range answered {
		if _, ok := byID[id]; !ok {
			h.checkf("entry %d: %s, answered, is not stored", j, id)
		}
		if seen[id] {
			h.checkf("entry %d: %s is answered for two entries", j, id)
		}
		seen[id] = true
	}
	if len(rs) != want {
		h.checkf("%d resources stored, want %d", len(rs), want)
	}
	h.noWriteLeftHalfDone()
	h.deleteAll("resources", bson.M{})
	return byID
}

// condition is an R5 (and R4) Condition of alice's EHR with an upstream id.
func condition(id string) map[string]any {
	return map[string]any{"resourceType": "Condition", "id": id,
		"clinicalStatus": map[string]any{"coding": []any{map[string]any{"system": "http://terminology.hl7.org/CodeSystem/condition-clinical", "code": "active"}}},
		"code":           map[string]any{"coding": []any{map[string]any{"system": "http://snomed.info/sct", "code": "38341003"}}, "text": id},
		"subject":        map[string]any{"reference": "Patient/1"}}
}

// loincObservation is an Observation without an upstream id: only its
// content tells it from others.
func loincObservation(value string) map[string]any {
	return map[string]any{"resourceType": "Observation", "status": "final",
		"code":          map[string]any{"coding": []any{map[string]any{"system": "http://loinc.org", "code": "8867-4"}}, "text": value},
		"subject":       map[string]any{"reference": "Patient/1"},
		"valueQuantity": map[string]any{"value": 70, "unit": "/min", "system": "http://unitsofmeasure.org", "code": "/min"}}
}

func importedBatch(h *harness, n int) (*crashRequest, crashCheck) {
	const size = 120
	var rs []map[string]any
	for j := range size / 2 {
		rs = append(rs, condition(fmt.Sprintf("c%d-%d", n, j)), loincObservation(fmt.Sprintf("o%d-%d", n, j)))
	}
	req := &crashRequest{method: "POST", path: "/FHIR/R5", body: batchOf("batch", rs...), header: fhirSourceHeader()}
	return req, func(h *harness, retry *crashResponse, _ crashOutcome) {
		h.checkImportedStore(size, h.storedIDs(retry, size))
	}
}

func r4Import(h *harness, n int) (*crashRequest, crashCheck) {
	const size = 60
	var rs []map[string]any
	for j := range size / 2 {
		rs = append(rs, condition(fmt.Sprintf("r%d-%d", n, j)), loincObservation(fmt.Sprintf("r%d-%d", n, j)))
	}
	req := &crashRequest{method: "POST", path: "/fhir-import/R4", body: batchOf("transaction", rs...), header: fhirSourceHeader()}
	return req, func(h *harness, retry *crashResponse, _ crashOutcome) {
		h.checkImportedStore(size, h.storedIDs(retry, size))
	}
}

// storedCondition creates a Condition (unarmed) and returns its JSON.
func (h *harness) storedCondition(n int) map[string]any {
	body, _ := json.Marshal(condition(fmt.Sprintf("u%d", n)))
	resp, err := h.send(&crashRequest{method: "POST", path: "/FHIR/R5/Condition", body: body, header: fhirSourceHeader()})
	if err != nil || resp.status != 201 {
		h.fail("create a Condition: %v %+v", err, resp)
	}
	var r map[string]any
	h.decode(resp.body, &r)
	return r
}

// checkChanged checks the one resource of the store after a change.
func (h *harness) checkChanged(id string, check func(r resourceView, json map[string]any)) {
	h.t.Helper()
	byID := h.checkImportedStore(1, nil)
	r, ok := byID[id]
	if !ok {
		h.checkf("Condition/%s is gone", id)
	}
	var doc map[string]any
	h.decode([]byte(r.JSON), &doc)
	check(r, doc)
}

func importedPut(h *harness, n int) (*crashRequest, crashCheck) {
	r := h.storedCondition(n)
	id := r["id"].(string)
	r["note"] = []any{map[string]any{"text": fmt.Sprintf("changed %d", n)}}
	body, _ := json.Marshal(r)
	req := &crashRequest{method: "PUT", path: "/FHIR/R5/Condition/" + id, body: body, header: fhirSourceHeader()}
	return req, func(h *harness, retry *crashResponse, _ crashOutcome) {
		h.expectStatus(retry, 200)
		h.checkChanged(id, func(r resourceView, doc map[string]any) {
			if r.VersionID != 2 || doc["note"] == nil {
				h.checkf("after the update: version %d, note %v; want version 2 with the note", r.VersionID, doc["note"])
			}
		})
	}
}

func importedPatch(h *harness, n int) (*crashRequest, crashCheck) {
	id := h.storedCondition(n)["id"].(string)
	// Not idempotent: applied twice, it would add two identifiers.
	patch := fmt.Sprintf(`[{"op": "add", "path": "/identifier/-", "value": {"system": "urn:crash:patch", "value": "p%d"}}]`, n)
	req := &crashRequest{method: "PATCH", path: "/FHIR/R5/Condition/" + id, body: []byte(patch),
		header: map[string]string{"Content-Type": "application/json-patch+json"}}
	return req, func(h *harness, retry *crashResponse, _ crashOutcome) {
		h.expectStatus(retry, 200)
		h.checkChanged(id, func(r resourceView, doc map[string]any) {
			added := strings.Count(r.JSON, `"urn:crash:patch"`)
			if r.VersionID != 2 || added != 1 {
				h.checkf("after the patch: version %d with %d added identifiers; want version 2 with 1", r.VersionID, added)
			}
		})
	}
}

func importedDelete(h *harness, n int) (*crashRequest, crashCheck) {
	id := h.storedCondition(n)["id"].(string)
	req := &crashRequest{method: "DELETE", path: "/FHIR/R5/Condition/" + id}
	return req, func(h *harness, retry *crashResponse, out crashOutcome) {
		// A retry of a delete that was done finds nothing to delete, which
		// has no effect and answers as the delete did (FHIR R5 delete).
		h.expectStatus(retry, 204)
		h.checkImportedStore(0, nil)
	}
}

// --- Patients ---

func patientBody(n int) map[string]any {
	return map[string]any{"email": fmt.Sprintf("crash-p%d@example.org", n), "nameFamily": "Crash", "nameGiven": []string{fmt.Sprint("P", n)},
		"organizationIds": []int64{crashCardiology}, "identifiers": []any{
			map[string]any{"system": "urn:crash:mrn", "value": fmt.Sprintf("m%d", n)},
			map[string]any{"system": "urn:crash:other", "value": fmt.Sprintf("o%d", n)}}}
}

// newPatient creates a patient (unarmed) and returns its id.
func (h *harness) newPatient(n int) int64 {
	var p struct{ ID int64 }
	h.decode(h.do("POST", "/api/v1/patients", patientBody(n), 201), &p)
	return p.ID
}

// checkPatients checks the patient records as a whole: every patient user
// has a record, every record a user, every identifier claim a record that
// lists it; no write left half done.
func (h *harness) checkPatients() {
	h.t.Helper()
	var users []struct {
		ID    int64  `bson:"_id"`
		Email string `bson:"email"`
	}
	h.findAll("users", bson.M{"userType": "patient"}, &users)
	var patients []struct {
		ID          int64                            `bson:"_id"`
		UserID      int64                            `bson:"userId"`
		Identifiers []struct{ System, Value string } `bson:"identifiers"`
	}
	h.findAll("patients", bson.M{}, &patients)
	var claims []struct {
		System    string `bson:"system"`
		Value     string `bson:"value"`
		PatientID int64  `bson:"patientId"`
	}
	h.findAll("patient_identifiers", bson.M{}, &claims)
	records := map[int64]bool{}
	lists := map[string]int64{}
	for _, p := range patients {
		records[p.UserID] = true
		for _, id := range p.Identifiers {
			lists[id.System+"|"+id.Value] = p.ID
		}
	}
	for _, u := range users {
		if !records[u.ID] {
			h.checkf("patient user %s has no patient record", u.Email)
		}
	}
	if len(users) != len(patients) {
		h.checkf("%d patient users, %d patient records", len(users), len(patients))
	}
	for _, c := range claims {
		if lists[c.System+"|"+c.Value] != c.PatientID {
			h.checkf("the claim on %s|%s points to patient %d, which does not list it", c.System, c.Value, c.PatientID)
		}
	}
	if len(claims) != len(lists) {
		h.checkf("%d identifier claims for %d identifiers", len(claims), len(lists))
	}
	h.noWriteLeftHalfDone()
}

func createPatient(h *harness, n int) (*crashRequest, crashCheck) {
	body, _ := json.Marshal(patientBody(n))
	req := &crashRequest{method: "POST", path: "/api/v1/patients", body: body, header: map[string]string{"Content-Type": "application/json"}}
	return req, func(h *harness, retry *crashResponse, _ crashOutcome) {
		h.expectStatus(retry, 201, 409) // 409: the first attempt stored it
		h.checkPatients()
		email := fmt.Sprintf("crash-p%d@example.org", n)
		if c := h.count("users", bson.M{"email": email}); c != 1 {
			h.checkf("%d users with email %s", c, email)
		}
		if c := h.count("patient_identifiers", bson.M{"system": "urn:crash:mrn", "value": fmt.Sprintf("m%d", n)}); c != 1 {
			h.checkf("%d claims on the new patient's identifier", c)
		}
	}
}

// updatePatientIdentifiers keeps one of the patient's identifiers, drops
// the other and adds a new one: claims taken, the record replaced, claims
// released, under the patient's identifier lock.
func updatePatientIdentifiers(h *harness, n int) (*crashRequest, crashCheck) {
	id := h.newPatient(n)
	kept := map[string]any{"system": "urn:crash:mrn", "value": fmt.Sprintf("m%d", n)}
	added := map[string]any{"system": "urn:crash:new", "value": fmt.Sprintf("u%d", n)}
	body, _ := json.Marshal(map[string]any{"identifiers": []any{kept, added}})
	req := &crashRequest{method: "PATCH", path: fmt.Sprintf("/api/v1/patients/%d", id), body: body, header: map[string]string{"Content-Type": "application/json"}}
	return req, func(h *harness, retry *crashResponse, _ crashOutcome) {
		h.expectStatus(retry, 200)
		h.checkPatients()
		for system, want := range map[string]string{"urn:crash:mrn": fmt.Sprintf("m%d", n), "urn:crash:new": fmt.Sprintf("u%d", n)} {
			if c := h.count("patient_identifiers", bson.M{"system": system, "value": want, "patientId": id}); c != 1 {
				h.checkf("patient %d: %d claims on %s|%s, want 1", id, c, system, want)
			}
		}
		if c := h.count("patient_identifiers", bson.M{"patientId": id}); c != 2 {
			h.checkf("patient %d: %d identifier claims, want 2 (the dropped one released)", id, c)
		}
	}
}

func deletePatient(h *harness, n int) (*crashRequest, crashCheck) {
	id := h.newPatient(n)
	req := &crashRequest{method: "DELETE", path: fmt.Sprintf("/api/v1/patients/%d", id)}
	return req, func(h *harness, retry *crashResponse, _ crashOutcome) {
		h.expectStatus(retry, 204, 404)
		h.checkPatients()
		if c := h.count("patients", bson.M{"_id": id}) + h.count("users", bson.M{"email": fmt.Sprintf("crash-p%d@example.org", n)}) +
			h.count("patient_identifiers", bson.M{"patientId": id}); c != 0 {
			h.checkf("patient %d: %d of its record, login and claims left", id, c)
		}
	}
}

// --- Practitioners and organizations ---

func createPractitioner(h *harness, n int) (*crashRequest, crashCheck) {
	email := fmt.Sprintf("crash-u%d@example.org", n)
	body, _ := json.Marshal(map[string]any{"email": email, "firstName": "Crash", "lastName": fmt.Sprint("U", n),
		"organizationId": crashCardiology, "role": "member"})
	req := &crashRequest{method: "POST", path: "/api/v1/practitioners", body: body, header: map[string]string{"Content-Type": "application/json"}}
	return req, func(h *harness, retry *crashResponse, _ crashOutcome) {
		h.expectStatus(retry, 201, 409)
		var users []struct {
			ID int64 `bson:"_id"`
		}
		h.findAll("users", bson.M{"email": email}, &users)
		if len(users) != 1 {
			h.checkf("%d users with email %s", len(users), email)
		}
		if c := h.count("memberships", bson.M{"organizationId": crashCardiology, "userId": users[0].ID}); c != 1 {
			h.checkf("%s has %d memberships of organization %d, want 1", email, c, crashCardiology)
		}
		h.noWriteLeftHalfDone()
	}
}

func organizationBody(n int) map[string]any {
	return map[string]any{"name": fmt.Sprintf("Crash team %d", n), "type": "team", "partOf": crashCardiology}
}

func createOrganization(h *harness, n int) (*crashRequest, crashCheck) {
	body, _ := json.Marshal(organizationBody(n))
	req := &crashRequest{method: "POST", path: "/api/v1/organizations", body: body, header: map[string]string{"Content-Type": "application/json"}}
	return req, func(h *harness, retry *crashResponse, _ crashOutcome) {
		h.expectStatus(retry, 201, 409) // 409: the first attempt stored it, under that name
		if c := h.count("organizations", bson.M{"name": fmt.Sprintf("Crash team %d", n)}); c != 1 {
			h.checkf("%d organizations named Crash team %d", c, n)
		}
		h.noWriteLeftHalfDone()
	}
}

func deleteOrganization(h *harness, n int) (*crashRequest, crashCheck) {
	var org struct{ ID int64 }
	h.decode(h.do("POST", "/api/v1/organizations", organizationBody(n), 201), &org)
	for _, who := range []string{"a", "b"} {
		h.do("POST", "/api/v1/practitioners", map[string]any{"email": fmt.Sprintf("crash-o%d%s@example.org", n, who),
			"firstName": "Crash", "lastName": "O", "organizationId": org.ID, "role": "member"}, 201)
	}
	req := &crashRequest{method: "DELETE", path: fmt.Sprintf("/api/v1/organizations/%d", org.ID)}
	return req, func(h *harness, retry *crashResponse, _ crashOutcome) {
		h.expectStatus(retry, 204, 404)
		if c := h.count("organizations", bson.M{"_id": org.ID}) + h.count("memberships", bson.M{"organizationId": org.ID}); c != 0 {
			h.checkf("organization %d: %d of it and its memberships left", org.ID, c)
		}
		h.noWriteLeftHalfDone()
	}
}

// --- Enrollment and consents ---

// The scopes of crashStudy the trials answer, with the answers given.
var crashScopes = []struct {
	code    string
	consent bool
}{{"omh:heart-rate:2.0", true}, {"omh:blood-pressure:4.0", true}, {"omh:body-weight:3.0", false}}

func consentBody(scopes int, flip bool, withAnswer bool) map[string]any {
	var sc []any
	for _, s := range crashScopes[:scopes] {
		a := map[string]any{"codingSystem": "https://w3id.org/openmhealth", "codingCode": s.code}
		if withAnswer {
			a["consented"] = s.consent != flip
		}
		sc = append(sc, a)
	}
	return map[string]any{"studyScopeConsents": []any{map[string]any{"studyId": crashStudy, "scopeConsents": sc}}}
}

// enrolledPatients creates two patients (unarmed), enrolled in crashStudy
// or not, with their first answers or not.
func (h *harness) enrolledPatients(n int, enroll, answer bool) [2]int64 {
	ids := [2]int64{h.newPatient(2 * n), h.newPatient(2*n + 1)}
	if enroll {
		h.do("POST", fmt.Sprintf("/api/v1/studies/%d/patients", crashStudy), map[string]any{"patientIds": ids[:]}, 201)
	}
	if answer {
		for _, id := range ids {
			h.do("POST", fmt.Sprintf("/api/v1/patients/%d/consents", id), consentBody(len(crashScopes), false, true), 201)
		}
	}
	return ids
}

// checkEnrollment checks what the patients' enrollment in crashStudy and
// their answers are: answers maps a scope code to the answer, absent when
// there is none.
func (h *harness) checkEnrollment(ids []int64, enrolled bool, answers map[string]bool) {
	h.t.Helper()
	for _, id := range ids {
		if c := h.count("enrollments", bson.M{"studyId": crashStudy, "patientId": id}); c != map[bool]int64{true: 1}[enrolled] {
			h.checkf("patient %d: %d enrollments, want enrolled %v", id, c, enrolled)
		}
		var got []struct {
			Consented   bool  `bson:"consented"`
			ScopeCodeID int64 `bson:"scopeCodeId"`
		}
		h.findAll("consents", bson.M{"studyId": crashStudy, "patientId": id}, &got)
		if len(got) != len(answers) {
			h.checkf("patient %d: %d answers, want %d", id, len(got), len(answers))
		}
		yes := 0
		for _, g := range got {
			if g.Consented {
				yes++
			}
		}
		want := 0
		for _, a := range answers {
			if a {
				want++
			}
		}
		if yes != want {
			h.checkf("patient %d: %d consented answers, want %d", id, yes, want)
		}
	}
	h.noWriteLeftHalfDone()
}

func answersOf(scopes int, flip bool) map[string]bool {
	out := map[string]bool{}
	for _, s := range crashScopes[:scopes] {
		out[s.code] = s.consent != flip
	}
	return out
}

func enroll(h *harness, n int) (*crashRequest, crashCheck) {
	ids := h.enrolledPatients(n, false, false)
	body, _ := json.Marshal(map[string]any{"patientIds": ids[:]})
	req := &crashRequest{method: "POST", path: fmt.Sprintf("/api/v1/studies/%d/patients", crashStudy), body: body,
		header: map[string]string{"Content-Type": "application/json"}}
	return req, func(h *harness, retry *crashResponse, _ crashOutcome) {
		h.expectStatus(retry, 201, 409) // 409: enrolled by the first attempt
		h.checkEnrollment(ids[:], true, nil)
	}
}

func consentRequest(method string, id int64, body map[string]any) *crashRequest {
	data, _ := json.Marshal(body)
	return &crashRequest{method: method, path: fmt.Sprintf("/api/v1/patients/%d/consents", id), body: data,
		header: map[string]string{"Content-Type": "application/json"}}
}

func answerConsents(h *harness, n int) (*crashRequest, crashCheck) {
	ids := h.enrolledPatients(n, true, false)
	return consentRequest("POST", ids[0], consentBody(len(crashScopes), false, true)), func(h *harness, retry *crashResponse, _ crashOutcome) {
		h.expectStatus(retry, 201, 409) // 409: answered by the first attempt
		h.checkEnrollment(ids[:1], true, answersOf(len(crashScopes), false))
	}
}

func updateConsents(h *harness, n int) (*crashRequest, crashCheck) {
	ids := h.enrolledPatients(n, true, true)
	return consentRequest("PATCH", ids[0], consentBody(len(crashScopes), true, true)), func(h *harness, retry *crashResponse, _ crashOutcome) {
		h.expectStatus(retry, 200)
		h.checkEnrollment(ids[:1], true, answersOf(len(crashScopes), true))
	}
}

func withdrawConsents(h *harness, n int) (*crashRequest, crashCheck) {
	ids := h.enrolledPatients(n, true, true)
	return consentRequest("DELETE", ids[0], consentBody(2, false, false)), func(h *harness, retry *crashResponse, _ crashOutcome) {
		h.expectStatus(retry, 204, 404) // 404: withdrawn by the first attempt
		left := answersOf(len(crashScopes), false)
		for _, s := range crashScopes[:2] {
			delete(left, s.code)
		}
		h.checkEnrollment(ids[:1], true, left)
	}
}

func unenroll(h *harness, n int) (*crashRequest, crashCheck) {
	ids := h.enrolledPatients(n, true, true)
	body, _ := json.Marshal(map[string]any{"patientIds": ids[:]})
	req := &crashRequest{method: "DELETE", path: fmt.Sprintf("/api/v1/studies/%d/patients", crashStudy), body: body,
		header: map[string]string{"Content-Type": "application/json"}}
	return req, func(h *harness, retry *crashResponse, _ crashOutcome) {
		h.expectStatus(retry, 204, 404) // 404: removed by the first attempt
		h.checkEnrollment(ids[:], false, nil)
	}
}

// --- OAuth token issue and rotation ---

const (
	crashClient      = "exchange-local" // the demo public client
	crashRedirect    = "http://localhost:3000/callback"
	crashPKCEVerfier = defaultPatientVerifier
)

// invitationCode issues a patient's authorization code (unarmed).
func (h *harness) invitationCode(patientID int64) string {
	var inv struct {
		Link string `json:"invitationLink"`
	}
	h.decode(h.do("POST", fmt.Sprintf("/api/v1/patients/%d/invitation", patientID), map[string]any{"clientId": crashClient}, 201), &inv)
	u, err := url.Parse(inv.Link)
	if err != nil {
		h.fail("invitation link %q: %v", inv.Link, err)
	}
	return u.Query().Get("code")
}

func tokenRequest(form url.Values) *crashRequest {
	return &crashRequest{method: "POST", path: "/o/token/", body: []byte(form.Encode()),
		header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}
}

func codeForm(code string) url.Values {
	return url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {crashRedirect},
		"client_id": {crashClient}, "code_verifier": {crashPKCEVerfier}}
}

type tokenAnswer struct {
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
	Error        string `json:"error"`
}

// checkGrant checks a token request's outcome. A retry gets tokens, and
// the grant then holds exactly one active access token and one active
// refresh token, which work. Only a kill after the request's last writes
// (it was answered, or about to be) may make the retry a replay of a used
// code or refresh token: refused (RFC 6749 10.5), and the grant revoked,
// nothing of it left active.
func (h *harness) checkGrant(retry *crashResponse, out crashOutcome, patientID int64) {
	h.t.Helper()
	var tok tokenAnswer
	h.decode(retry.body, &tok)
	active := func() int64 {
		var p struct {
			UserID int64 `bson:"userId"`
		}
		if err := h.db.Collection("patients").FindOne(context.Background(), bson.M{"_id": patientID}).Decode(&p); err != nil {
			h.t.Fatal(err)
		}
		return h.count("oauth_tokens", bson.M{"userId": p.UserID, "kind": bson.M{"$in": []string{"access_token", "refresh_token"}}, "active": true})
	}
	switch {
	case retry.status == 200:
		if n := active(); n != 2 || tok.AccessToken == "" || tok.RefreshToken == "" {
			h.checkf("after the retry: %d active tokens, answer %.300s; want 2", n, retry.body)
		}
		resp, err := h.send(&crashRequest{method: "GET", path: "/api/v1/users/profile", header: map[string]string{"Authorization": "Bearer " + tok.AccessToken}})
		if err != nil || resp.status != 200 {
			h.checkf("the retry's access token: %v %+v", err, resp)
		}
	case retry.status == 400 && tok.Error == "invalid_grant" && (out.answered || out.at == 0 || out.at >= out.writes-1):
		if n := active(); n != 0 {
			h.checkf("a refused replay left %d active tokens", n)
		}
	default:
		h.checkf("the retry answered %d %.300s", retry.status, retry.body)
	}
	if c := h.count("oauth_tokens", bson.M{"pending": true}); c != 0 {
		h.checkf("%d token records still pending", c)
	}
}

func codeExchange(h *harness, n int) (*crashRequest, crashCheck) {
	patient := h.newPatient(n)
	code := h.invitationCode(patient)
	return tokenRequest(codeForm(code)), func(h *harness, retry *crashResponse, out crashOutcome) {
		h.checkGrant(retry, out, patient)
	}
}

func refreshTokens(h *harness, n int) (*crashRequest, crashCheck) {
	patient := h.newPatient(n)
	resp, err := h.send(tokenRequest(codeForm(h.invitationCode(patient))))
	var tok tokenAnswer
	if err != nil || resp.status != 200 {
		h.fail("exchange a code: %v %+v", err, resp)
	}
	h.decode(resp.body, &tok)
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken}, "client_id": {crashClient}}
	return tokenRequest(form), func(h *harness, retry *crashResponse, out crashOutcome) {
		h.checkGrant(retry, out, patient)
	}
}

// --- Console invitations ---

// consoleInvitationCode issues a patient's console invitation, as the
// invitation command prints it (unarmed).
func (h *harness) consoleInvitationCode(patientID int64) string {
	link := strings.TrimSpace(h.command("invitation", "--patient-id", strconv.FormatInt(patientID, 10), "--client-id", oauth.ConsoleClientID))
	u, err := url.Parse(link)
	if err != nil || u.Query().Get("code") == "" {
		h.fail("invitation link %q: %v", link, err)
	}
	return u.Query().Get("code")
}

// acceptForm is the console's invitation form, choosing password, with
// its double-submit CSRF token in the cookie and the form.
func acceptForm(code, password string) *crashRequest {
	const csrf = "crash-suite-csrf-token"
	form := url.Values{"code": {code}, "password": {password}, "confirm": {password}, "csrf_token": {csrf}}
	return &crashRequest{method: "POST", path: oauth.ConsoleInvitationPath, body: []byte(form.Encode()),
		header: map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Cookie": "exchange_csrf=" + csrf}}
}

// acceptInvitation: a patient chooses a password with a console
// invitation. Whatever write the kill cut, the patient then signs in with
// that password: the retry completes the redemption (200, the
// confirmation whose form signs in at the login page), or finds it
// completed by the start-up repair or by the first attempt (the code is
// used: 404). The code is used once: another
// password sent with it is refused and changes nothing.
func acceptInvitation(h *harness, n int) (*crashRequest, crashCheck) {
	patient := h.newPatient(n)
	code := h.consoleInvitationCode(patient)
	password := fmt.Sprintf("crash suite password %d", n)
	return acceptForm(code, password), func(h *harness, retry *crashResponse, _ crashOutcome) {
		h.t.Helper()
		h.expectStatus(retry, 200, 404)
		if retry.status == 200 && !strings.Contains(string(retry.body), `action="/o/login/"`) {
			h.checkf("the retry's confirmation does not sign in at the login page:\n%s", retry.body)
		}
		h.noWriteLeftHalfDone()
		h.checkPassword(patient, password)
		if n := h.count("oauth_tokens", bson.M{"userId": h.userOf(patient), "active": true}); n != 0 {
			h.checkf("%d active token records of the patient: the invitation was not used", n)
		}
		other, err := h.send(acceptForm(code, password+" changed"))
		if err != nil || other.status != 404 {
			h.checkf("another password with the used code: %v %+v", err, other)
		}
		h.checkPassword(patient, password)
	}
}

// userOf returns the user id of a patient record.
func (h *harness) userOf(patientID int64) int64 {
	h.t.Helper()
	var p struct {
		UserID int64 `bson:"userId"`
	}
	if err := h.db.Collection("patients").FindOne(context.Background(), bson.M{"_id": patientID}).Decode(&p); err != nil {
		h.t.Fatal(err)
	}
	return p.UserID
}

// checkPassword checks that the patient signs in with password: their
// user's hash is of it.
func (h *harness) checkPassword(patientID int64, password string) {
	h.t.Helper()
	var u struct {
		PasswordHash string `bson:"passwordHash"`
	}
	if err := h.db.Collection("users").FindOne(context.Background(), bson.M{"_id": h.userOf(patientID)}).Decode(&u); err != nil {
		h.t.Fatal(err)
	}
	if ok, err := argon2id.ComparePasswordAndHash(password, u.PasswordHash); err != nil || !ok {
		h.checkf("the patient cannot sign in with the password they chose (%v)", err)
	}
}
