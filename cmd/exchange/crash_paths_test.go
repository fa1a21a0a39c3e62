package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// crashPaths are the write paths the crash suite kills; each trial uses
// data of its own, so trials share one store.
var crashPaths = []crashPath{
	nativeBatchPath,
}

// batchSize is the observations of a native batch trial: more than
// FerretDB inserts in one SQLite transaction (100), so that a kill
// during an insert can leave part of it.
const batchSize = 120

// nativeObservation is a heart rate of alice (Patient/1) measured by her
// cuff (Device/1), the demo data's consented pair; identifier nil: none.
func nativeObservation(headerID string, identifier *[2]string) map[string]any {
	point := fmt.Sprintf(`{"header":{"id":%q,"creation_date_time":"2025-03-10T08:00:05Z","schema_id":{"namespace":"omh","name":"heart-rate","version":"2.0"}},`+
		`"body":{"heart_rate":{"value":72,"unit":"beats/min"},"effective_time_frame":{"date_time":"2025-03-10T08:00:00Z"}}}`, headerID)
	o := map[string]any{"resourceType": "Observation", "status": "final",
		"code":    map[string]any{"coding": []any{map[string]any{"system": "https://w3id.org/openmhealth", "code": "omh:heart-rate:2.0"}}},
		"subject": map[string]any{"reference": "Patient/1"}, "device": map[string]any{"reference": "Device/1"},
		"valueAttachment": map[string]any{"contentType": "application/json", "data": base64.StdEncoding.EncodeToString([]byte(point))}}
	if identifier != nil {
		o["identifier"] = []any{map[string]any{"system": identifier[0], "value": identifier[1]}}
	}
	return o
}

// batchOf is a batch Bundle creating the resources.
func batchOf(resources ...map[string]any) []byte {
	entries := make([]any, len(resources))
	for i, r := range resources {
		entries[i] = map[string]any{"request": map[string]any{"method": "POST", "url": r["resourceType"]}, "resource": r}
	}
	data, _ := json.Marshal(map[string]any{"resourceType": "Bundle", "type": "batch", "entry": entries})
	return data
}

// batchAnswer is a batch-response Bundle as far as the checks read it.
type batchAnswer struct {
	ResourceType string `json:"resourceType"`
	Entry        []struct {
		Resource *struct {
			ID         string `json:"id"`
			Identifier []struct {
				System string `json:"system"`
				Value  string `json:"value"`
			} `json:"identifier"`
		} `json:"resource"`
		Response struct {
			Status   string          `json:"status"`
			Location string          `json:"location"`
			Outcome  json.RawMessage `json:"outcome"`
		} `json:"response"`
	} `json:"entry"`
}

const crashSystem = "urn:crash:observation"

// nativeBatchPath: a batch of native Observations, each with an identifier.
var nativeBatchPath = crashPath{
	name: "native-batch",
	trial: func(h *harness, i int) (*crashRequest, func(*harness, *crashResponse, bool)) {
		obs := make([]map[string]any, batchSize)
		for j := range obs {
			id := fmt.Sprintf("t%d-%d", i, j)
			obs[j] = nativeObservation(id, &[2]string{crashSystem, id})
		}
		req := &crashRequest{method: "POST", path: "/FHIR/R5", body: batchOf(obs...),
			header: map[string]string{"Content-Type": "application/fhir+json"}}
		return req, func(h *harness, retry *crashResponse, _ bool) {
			var b batchAnswer
			if retry.status != 200 || json.Unmarshal(retry.body, &b) != nil || len(b.Entry) != batchSize {
				h.checkf("the retry answered %d\n%.2000s", retry.status, retry.body)
			}
			for j, e := range b.Entry {
				want := fmt.Sprintf("t%d-%d", i, j)
				var id string
				switch {
				case strings.HasPrefix(e.Response.Status, "201") && e.Resource != nil:
					id = e.Resource.ID
				case strings.HasPrefix(e.Response.Status, "409"):
					ref, ok := strings.CutPrefix(e.Response.Location, "Observation/")
					if !ok {
						h.checkf("entry %d (%s): 409 names no stored observation (%d observations hold the identifier): %s",
							j, want, h.countObservationsWith(want), e.Response.Outcome)
					}
					id, _, _ = strings.Cut(ref, "/")
				default:
					h.checkf("entry %d (%s): %s %s", j, want, e.Response.Status, e.Response.Outcome)
				}
				h.expectObservation(id, want)
			}
		}
	},
	final: func(h *harness) { h.checkObservationStore() },
}

// expectObservation checks that Observation/id is stored with the
// identifier value.
func (h *harness) expectObservation(id, value string) {
	var n int64
	if _, err := fmt.Sscan(id, &n); err != nil {
		h.checkf("observation id %q", id)
	}
	var doc struct {
		Identifiers []struct{ System, Value string } `bson:"identifiers"`
	}
	if err := h.db.Collection("observations").FindOne(context.Background(), bson.M{"_id": n}).Decode(&doc); err != nil {
		h.checkf("Observation/%s, answered for %s, is not stored: %v", id, value, err)
	}
	if len(doc.Identifiers) != 1 || doc.Identifiers[0].Value != value {
		h.checkf("Observation/%s, answered for %s, holds %v", id, value, doc.Identifiers)
	}
}

// countObservationsWith counts the observations holding an identifier
// of crashSystem.
func (h *harness) countObservationsWith(value string) int64 {
	n, err := h.db.Collection("observations").CountDocuments(context.Background(),
		bson.M{"identifiers": bson.M{"system": crashSystem, "value": value}})
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

// checkObservationStore checks the native store as a whole: every
// identifier on exactly one observation, every claim's observation
// stored, no write left half done.
func (h *harness) checkObservationStore() {
	ctx := context.Background()
	cur, err := h.db.Collection("observations").Find(ctx, bson.M{}, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	var obs []struct {
		ID          int64                            `bson:"_id"`
		Identifiers []struct{ System, Value string } `bson:"identifiers"`
	}
	if err := cur.All(ctx, &obs); err != nil {
		h.t.Fatal(err)
	}
	owner := map[string]int64{}
	stored := map[int64]bool{}
	for _, o := range obs {
		stored[o.ID] = true
		for _, id := range o.Identifiers {
			key := id.System + "|" + id.Value
			if other, ok := owner[key]; ok {
				h.fail("identifier %s is on Observation/%d and Observation/%d", key, other, o.ID)
			}
			owner[key] = o.ID
		}
	}
	cur, err = h.db.Collection("observation_identifiers").Find(ctx, bson.M{})
	if err != nil {
		h.t.Fatal(err)
	}
	var claims []struct {
		System        string `bson:"system"`
		Value         string `bson:"value"`
		ObservationID int64  `bson:"observationId"`
	}
	if err := cur.All(ctx, &claims); err != nil {
		h.t.Fatal(err)
	}
	for _, c := range claims {
		if !stored[c.ObservationID] {
			h.fail("the claim of %s|%s points to Observation/%d, which is not stored", c.System, c.Value, c.ObservationID)
		}
	}
	if n, _ := h.db.Collection("write_intents").CountDocuments(ctx, bson.M{}); n > 0 {
		h.fail("%d write intents left", n)
	}
	h.t.Logf("native store: %d observations, %d identifier claims", len(obs), len(claims))
}
