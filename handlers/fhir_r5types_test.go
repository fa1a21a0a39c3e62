package handlers_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
	"exchange/fhirdefs/fhirdefstest"
	"exchange/fhirsearch"
	"exchange/handlers/handlerstest"
	"exchange/internal/pinned"
)

// The imported store over every R5 resource type, tried with the official
// R5 examples (hl7.fhir.r5.examples): each example of a served type is
// created (all 1,014 are, none refused), then found by each search
// parameter the CapabilityStatement advertises for its type that the
// example gives a value (its own value, as the catalog indexes it), by
// patient= and by _lastUpdated.

// fxAdvertised reads the CapabilityStatement: each type's search
// parameters, by name, with their types.
func fxAdvertised(t *testing.T, w *fxImported) map[string]map[string]string {
	t.Helper()
	resp, body := w.do(t, "super", "GET", "/metadata", nil, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("metadata: %d %s", resp.StatusCode, body)
	}
	out := map[string]map[string]string{}
	for _, r := range fxArr(fxObj(fxArr(fxDecode(t, body)["rest"])[0])["resource"]) {
		params := map[string]string{}
		for _, p := range fxArr(fxObj(r)["searchParam"]) {
			params[fxObj(p)["name"].(string)] = fxObj(p)["type"].(string)
		}
		out[fxObj(r)["type"].(string)] = params
	}
	return out
}

// fxExamples returns the official R5 examples by resource type, file names
// sorted.
func fxExamples(t *testing.T) map[string][]string {
	t.Helper()
	dir := fhirdefstest.PackageDir("hl7.fhir.r5.examples")
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no R5 examples in %s (run scripts/setup first): %v", dir, err)
	}
	files = pinned.Sample(files) // under -short: a sample of them
	out := map[string][]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var r struct{ ResourceType string }
		if json.Unmarshal(data, &r) != nil || r.ResourceType == "" {
			continue // package.json
		}
		out[r.ResourceType] = append(out[r.ResourceType], f)
	}
	return out
}

// fxValueQuery is a search, as query parameters, that the resource's own
// value of a parameter meets, read off its search index; "" when the
// resource gives the parameter no value.
func fxValueQuery(name, typ string, idx *domain.ResourceIndex) string {
	escape := strings.NewReplacer(`\`, `\\`, `,`, `\,`, `$`, `\$`, `|`, `\|`).Replace
	var keys []string
	for _, k := range idx.Keys {
		if v, ok := strings.CutPrefix(k, name+"|"); ok {
			keys = append(keys, v)
		}
	}
	q := url.Values{}
	switch typ {
	case "token":
		// system|code when there is one, each side escaped.
		slices.SortStableFunc(keys, func(a, b string) int { return strings.Count(b, "|") - strings.Count(a, "|") })
		if len(keys) == 0 {
			return ""
		}
		if system, code, ok := strings.Cut(keys[0], "|"); ok && system != "" && code != "" {
			q.Set(name, escape(system)+"|"+escape(code))
		} else {
			q.Set(name, escape(keys[0]))
		}
	case "reference", "uri":
		if len(keys) == 0 {
			return ""
		}
		q.Set(name, escape(keys[0]))
	case "string":
		if len(keys) == 0 {
			return ""
		}
		prefix := []rune(keys[0]) // strings match by prefix: a long text by its start
		q.Set(name, escape(strings.TrimSpace(string(prefix[:min(len(prefix), 64)]))))
	case "date":
		span, ok := idx.Dates[name]
		if !ok {
			return ""
		}
		at := func(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }
		q[name] = []string{"ge" + at(span.Start), "le" + at(span.End)}
	case "number", "quantity":
		span, ok := idx.Numbers[name]
		if !ok {
			return ""
		}
		unit := ""
		if len(keys) > 0 { // a quantity's unit: system|code or |code
			system, code, _ := strings.Cut(keys[0], "|")
			unit = "|" + escape(system) + "|" + escape(code)
		}
		number := func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
		q[name] = []string{"ge" + number(span.Low) + unit, "le" + number(span.High) + unit}
	}
	return q.Encode()
}

func TestImportedR5Examples(t *testing.T) {
	w := fxNewImported(t)
	advertised := fxAdvertised(t, w)
	examples := fxExamples(t)
	below := "_source:below=" + url.QueryEscape(handlerstest.SourceBase+"/")

	// Every type the examples show is served, but the excluded ones.
	for typ := range examples {
		_, excluded := fhirsearch.NotServed(typ)
		if _, served := advertised[typ]; served == excluded {
			t.Errorf("%s: served %v, excluded %v", typ, served, excluded)
		}
	}

	// patient= of the imported store (the projections' is native only).
	_, catalog := handlerstest.R5(t)
	importedPatient := func(typ string) bool {
		r, _ := catalog.Lookup(typ)
		i := slices.IndexFunc(r.Params, func(p fhirsearch.Param) bool { return p.Name == "patient" })
		return i >= 0 && r.Params[i].Imported
	}

	schema, err := fhirdefstest.OpenR5Schema()
	if err != nil {
		t.Fatalf("%v (run scripts/setup first)", err)
	}
	var refused, schemaRefused []string
	examplesData := map[string][]byte{}
	accepted, searches := 0, 0
	exercised := map[string]map[string]bool{} // kind -> type.param
	// found searches as a superuser, strictly: a parameter the type does
	// not take, or a value it refuses, fails the test.
	found := func(typ, query, id string) bool {
		t.Helper()
		searches++
		resp, body := w.do(t, "super", "GET", "/"+typ+"?"+below+"&_count=1000&_elements=id&"+query, map[string]string{"Prefer": "handling=strict"}, "")
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s?%s: %d %s", typ, query, resp.StatusCode, body)
			return true // reported
		}
		return slices.Contains(fxIDsOf(fxMatches(t, fxDecode(t, body))), id)
	}
	for _, typeName := range slices.Sorted(maps.Keys(examples)) {
		params, served := advertised[typeName]
		if !served || !catalog.Keeps(typeName) { // not kept: the read-only audit trail
			continue
		}
		// One example at a time: FerretDB decodes every stored resource of
		// the type a search names, and some examples are large.
		for batch := range slices.Chunk(examples[typeName], 1) {
			var entries []string
			for _, f := range batch {
				data, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				examplesData[f] = data
				entries = append(entries, fmt.Sprintf(`{"request": {"method": "POST", "url": %q}, "resource": %s}`, typeName, data))
			}
			resp, body := w.do(t, "super", "POST", "", fxSourceHeader(w.aliceSrc),
				`{"resourceType": "Bundle", "type": "batch", "entry": [`+strings.Join(entries, ",")+`]}`)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s batch: %d %.2000s", typeName, resp.StatusCode, body)
			}
			for i, e := range fxArr(fxDecode(t, body)["entry"]) {
				file := filepath.Base(batch[i])
				response := fxObj(fxObj(e)["response"])
				if response["status"] != "201 Created" {
					issue := fxObj(fxArr(fxObj(response["outcome"])["issue"])[0])
					line := fmt.Sprintf("%s\t%s %s: %s", file, response["status"], issue["code"], issue["diagnostics"])
					if problems, err := schema.Problems(examplesData[batch[i]]); err != nil || len(problems) == 0 {
						refused = append(refused, line)
					} else {
						schemaRefused = append(schemaRefused, line)
					}
					continue
				}
				accepted++
				resource := fxObj(fxObj(e)["resource"])
				id := resource["id"].(string)
				// The values the catalog indexes; the search then shows the
				// store kept and matches them.
				idx := catalog.Index(typeName, resource)
				// One search of every value the example gives: finding it
				// finds it by each parameter; when it does not, each is
				// searched alone to name those that fail.
				queries := map[string]string{"_lastUpdated": "_lastUpdated=" + url.QueryEscape(fxObj(resource["meta"])["lastUpdated"].(string))}
				if importedPatient(typeName) {
					queries["patient"] = "patient=" + fmt.Sprint(w.alice.ID)
				}
				for name, typ := range params {
					if strings.HasPrefix(name, "_") || strings.Contains(name, ".") || name == "patient" {
						continue
					}
					if query := fxValueQuery(name, typ, &idx); query != "" {
						queries[name] = query
						if exercised[typ] == nil {
							exercised[typ] = map[string]bool{}
						}
						exercised[typ][typeName+"."+name] = true
					}
				}
				all := slices.Sorted(maps.Values(queries))
				if !found(typeName, strings.Join(all, "&"), id) {
					alone := 0
					for _, name := range slices.Sorted(maps.Keys(queries)) {
						if !found(typeName, queries[name], id) {
							alone++
							t.Errorf("%s: %s?%s does not find it", file, typeName, queries[name])
						}
					}
					if alone == 0 {
						t.Errorf("%s: each of %s?%s finds it alone, not all together", file, typeName, strings.Join(all, "&"))
					}
				}
			}
			// The next batch's searches scan only their own resources.
			if _, err := w.resources.DeleteMany(w.ctx, bson.D{{Key: "resourceType", Value: typeName}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	kinds := map[string]int{}
	for kind, pairs := range exercised {
		kinds[kind] = len(pairs)
	}
	t.Logf("R5 examples of served types: %d accepted, %d refused as the official R5 JSON Schema refuses them, %d refused otherwise; %d searches; type.parameter pairs searched by kind %v",
		accepted, len(schemaRefused), len(refused), searches, kinds)
	for _, line := range schemaRefused {
		t.Logf("refused, as by the official R5 JSON Schema: %s", line)
	}
	for _, kind := range []string{"token", "reference", "date", "string", "quantity", "uri", "number"} {
		if kinds[kind] == 0 && !testing.Short() { // a sample may hold no example of a kind
			t.Errorf("no %s parameter searched", kind)
		}
	}

	// The R5 gate accepts every official example of a served type that the
	// official R5 JSON Schema accepts: a refusal is a fault of the gate, or
	// of the store's stamping. (QuestionnaireResponse-f201 carries
	// _questionnaire, beside a canonical that names its target, which the
	// schema, and so the gate, refuses: fhirdefs.Package.ExtensionSibling.)
	if len(refused) > 0 {
		t.Errorf("%d official examples refused:\n%s", len(refused), strings.Join(refused, "\n"))
	}
}

// TestImportedSingleIdentifier: where a type has one identifier, the
// upstream id becomes it when the source sent none (or one of the source's
// id system); one of another system is kept, and the upstream id only
// beside the resource.
func TestImportedSingleIdentifier(t *testing.T) {
	w := fxNewImported(t)
	const ingredient = `{"resourceType": "Ingredient", "id": "%s", "status": "active", %s
		"role": {"coding": [{"system": "http://hl7.org/fhir/ingredient-role", "code": "100000072072"}]},
		"substance": {"code": {"concept": {"text": "water"}}}}`
	upstream := fxSourceURI(w.aliceSrc) + "/id"
	for _, c := range []struct {
		id, identifier string
		want           map[string]any
	}{
		{"ing-1", "", map[string]any{"system": upstream, "value": "ing-1"}},
		{"ing-2", `"identifier": {"system": "` + upstream + `", "value": "stale"},`, map[string]any{"system": upstream, "value": "ing-2"}},
		{"ing-3", `"identifier": {"system": "urn:example:lot", "value": "L7"},`, map[string]any{"system": "urn:example:lot", "value": "L7"}},
	} {
		created := w.post(t, "super", w.aliceSrc, fmt.Sprintf(ingredient, c.id, c.identifier))
		if got := fxObj(created["identifier"]); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: identifier %v, want %v", c.id, created["identifier"], c.want)
		}
		var doc struct {
			UpstreamID string `bson:"upstreamId"`
		}
		if err := w.resources.FindOne(w.ctx, bson.D{{Key: "_id", Value: created["id"]}}).Decode(&doc); err != nil || doc.UpstreamID != c.id {
			t.Errorf("%s: upstream id %q %v", c.id, doc.UpstreamID, err)
		}
	}
	// A second create of the same upstream id is a duplicate, whatever
	// the identifier says.
	resp, body := w.do(t, "super", "POST", "/Ingredient", fxSourceHeader(w.aliceSrc),
		fmt.Sprintf(ingredient, "ing-3", `"identifier": {"system": "urn:example:lot", "value": "L8"},`))
	if resp.StatusCode != http.StatusConflict {
		t.Errorf("second ing-3: %d %s", resp.StatusCode, body)
	}
}
