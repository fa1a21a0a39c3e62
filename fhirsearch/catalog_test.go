package fhirsearch_test

import (
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
	"exchange/fhirdefs"
	"exchange/fhirdefs/fhirdefstest"
	"exchange/fhirsearch"
)

func paramNames(r *fhirsearch.Resource) []string {
	var names []string
	for _, p := range r.Params {
		names = append(names, p.Name)
	}
	return names
}

// TestCatalogServesEveryR5Type: the catalog serves every concrete R5
// resource type but those it names with a reason; the configured types
// keep their parameters; the others take theirs from R5, and nothing it
// advertises is composite, special or an expression it skipped.
func TestCatalogServesEveryR5Type(t *testing.T) {
	defs, err := fhirdefs.OpenPackage(fhirdefstest.PackageDir("hl7.fhir.r5.core"))
	if err != nil {
		t.Fatalf("%v (run scripts/setup first)", err)
	}
	r5Types, err := defs.ResourceTypes()
	if err != nil {
		t.Fatal(err)
	}
	full := catalog(t)
	configuredOnly, err := fhirsearch.NewCatalog(nil)
	if err != nil {
		t.Fatal(err)
	}
	var served []string
	for _, r := range full.Resources() {
		served = append(served, r.Type)
	}
	var want []string
	for _, typ := range r5Types {
		if _, excluded := fhirsearch.NotServed(typ); !excluded {
			want = append(want, typ)
		}
	}
	if !slices.Equal(served, want) {
		t.Errorf("served %v,\nwant every R5 type but the excluded: %v", served, want)
	}
	for _, typ := range fhirsearch.NotServedTypes() {
		if !slices.Contains(r5Types, typ) {
			t.Errorf("%s is excluded but is no R5 resource type", typ)
		}
		if _, ok := configuredOnly.Lookup(typ); ok {
			t.Errorf("%s is excluded and configured", typ)
		}
		reason, _ := fhirsearch.NotServed(typ)
		if _, err := full.Require(typ); domain.ErrorCode(err) != domain.CodeNotSupported || !strings.Contains(err.Error(), reason) {
			t.Errorf("Require(%s): %v", typ, err)
		}
		if full.Keeps(typ) {
			t.Errorf("%s is kept", typ)
		}
	}
	if _, err := full.Require("Spaceship"); domain.ErrorCode(err) != domain.CodeNotSupported {
		t.Errorf("Require(Spaceship): %v", err)
	}

	// The configured types keep their parameters, first; those of the
	// imported store then take every other parameter R5 defines for them.
	for _, c := range configuredOnly.Resources() {
		r, _ := full.Lookup(c.Type)
		names := paramNames(r)
		if !slices.Equal(names[:min(len(names), len(c.Params))], paramNames(c)) || !c.Imported && len(names) != len(c.Params) {
			t.Errorf("%s: %v, configured %v", c.Type, names, paramNames(c))
		}
	}
	if r, _ := full.Lookup("MedicationRequest"); !slices.Contains(paramNames(r), "code") || !slices.Contains(paramNames(r), "medication") {
		t.Errorf("MedicationRequest: %v", paramNames(r))
	}

	skipped := map[string]bool{}
	reasons := map[string]int{}
	for _, s := range full.Skipped() {
		skipped[s.Type+"."+s.Code] = true
		reason, _, _ := strings.Cut(s.Reason, ":")
		reasons[s.Kind+": "+reason]++
	}
	advertised := 0
	kinds := map[fhirsearch.ParamType]int{}
	for _, r := range full.Resources() {
		// Every served type is kept, but the read-only native ones (the
		// audit trail), which the imported store never takes.
		if full.Keeps(r.Type) != r.Allows("create") {
			t.Errorf("%s: kept %v, takes creates %v", r.Type, full.Keeps(r.Type), r.Allows("create"))
		}
		configuredType, _ := configuredOnly.Lookup(r.Type)
		for _, p := range r.Params {
			if configuredType != nil && slices.ContainsFunc(configuredType.Params, func(c fhirsearch.Param) bool { return c.Name == p.Name }) {
				continue
			}
			advertised++
			kinds[p.Type]++
			if p.Type == "composite" || p.Type == fhirsearch.TypeSpecial || skipped[r.Type+"."+p.Name] || p.Expression == "" {
				t.Errorf("%s.%s (%s) is advertised", r.Type, p.Name, p.Type)
			}
		}
	}
	t.Logf("served %d types: %d configured, %d from R5 SearchParameters; %d excluded", len(served),
		len(configuredOnly.Resources()), len(served)-len(configuredOnly.Resources()), len(fhirsearch.NotServedTypes()))
	t.Logf("R5 parameters advertised beyond the configured ones: %d %v; skipped %d %v", advertised, kinds, len(full.Skipped()), reasons)

	// What cannot be indexed is skipped, each kind of reason.
	for _, key := range []string{
		"ChargeItemDefinition.context-type-quantity", // composite
		"Composition.section-text",                   // special
		"Person.deceased",                            // beyond the evaluator: exists() and !=
		"Appointment.date",                           // R5 gives no expression rooted at Appointment
	} {
		if !skipped[key] {
			t.Errorf("%s is not skipped", key)
		}
	}
}

// TestCatalogPatientParameter: patient= on the types from R5 follows their
// R5 patient parameter, else the Patient compartment, restricted to
// Patient references; types outside the compartment have none.
func TestCatalogPatientParameter(t *testing.T) {
	c := catalog(t)
	for typ, want := range map[string]string{
		"Claim":                    "Claim.patient",
		"MedicationAdministration": "MedicationAdministration.subject.where(resolve() is Patient)",
		"Basic":                    "Basic.subject.where(resolve() is Patient)",
		// No R5 patient parameter: the compartment's (actor).
		"Schedule":      "(Schedule.actor).where(resolve() is Patient)",
		"Questionnaire": "",
	} {
		r, ok := c.Lookup(typ)
		if !ok {
			t.Fatalf("%s is not served", typ)
		}
		i := slices.IndexFunc(r.Params, func(p fhirsearch.Param) bool { return p.Name == "patient" })
		switch {
		case want == "" && i >= 0:
			t.Errorf("%s has patient %q", typ, r.Params[i].Expression)
		case want != "" && (i < 0 || r.Params[i].Expression != want || r.Params[i].Join != domain.JoinPatient):
			t.Errorf("%s patient: %+v, want %q", typ, r.Params, want)
		}
	}
	idx := index(t, `{"resourceType": "Schedule",
		"actor": [{"reference": "Practitioner/d1"}, {"reference": "Patient/p1"}, {"reference": "Location/l1"}]}`)
	var patients []string
	for _, k := range idx.Keys {
		if strings.HasPrefix(k, "patient|") {
			patients = append(patients, k)
		}
	}
	if !slices.Equal(patients, []string{"patient|Patient/p1", "patient|p1"}) {
		t.Errorf("Communication patient keys %v", patients)
	}
}

// TestIndexCanonical: a canonical is found with and without its version.
func TestIndexCanonical(t *testing.T) {
	idx := index(t, `{"resourceType": "Questionnaire", "status": "active", "url": "http://example.org/Questionnaire/q|2.0"}`)
	for _, k := range []string{"url|http://example.org/Questionnaire/q|2.0", "url|http://example.org/Questionnaire/q"} {
		if !slices.Contains(idx.Keys, k) {
			t.Errorf("no key %q in %q", k, idx.Keys)
		}
	}
}

// TestR5KindsPipelines: the number, quantity and uri parameters of the
// types from R5 become conditions on the stored index.
func TestR5KindsPipelines(t *testing.T) {
	tr := fhirsearch.NewTranslator(catalog(t), []byte("test key"), sourceBase, func() time.Time { return now })
	scope := domain.Scope{SourceIDs: []int64{7}}
	for _, tc := range []struct {
		resourceType, query, match string
	}{
		{"RiskAssessment", "probability=0.02",
			`{"$and":[{"numbers.probability.high":{"$lt":0.025},"numbers.probability.low":{"$gte":0.015}}],"resourceType":"RiskAssessment","sourceId":{"$in":[7]}}`},
		// gt and le against the exact value: above it, below the next double.
		{"RiskAssessment", "probability=gt0.5&probability=le1",
			`{"$and":[{"numbers.probability.high":{"$gte":0.5000000000000001}},{"numbers.probability.low":{"$lt":1.0000000000000002}}],"resourceType":"RiskAssessment","sourceId":{"$in":[7]}}`},
		{"RiskAssessment", "probability=ne1e2",
			`{"$and":[{"$or":[{"numbers.probability.low":{"$lt":50}},{"numbers.probability.high":{"$gte":150}}]}],"resourceType":"RiskAssessment","sourceId":{"$in":[7]}}`},
		{"Substance", "quantity=ge100|http://unitsofmeasure.org|mL",
			`{"$and":[{"$and":[{"numbers.quantity.high":{"$gte":100}},{"search":"quantity|http://unitsofmeasure.org|mL"}]}],"resourceType":"Substance","sourceId":{"$in":[7]}}`},
		{"Substance", "quantity=100||mL,lt5",
			`{"$and":[{"$or":[{"$and":[{"numbers.quantity.high":{"$lt":100.5},"numbers.quantity.low":{"$gte":99.5}},{"search":"quantity||mL"}]},{"numbers.quantity.low":{"$lt":5}}]}],"resourceType":"Substance","sourceId":{"$in":[7]}}`},
		{"Questionnaire", "url=http://hl7.org/fhir/Questionnaire/3141",
			`{"$and":[{"search":{"$in":["url|http://hl7.org/fhir/Questionnaire/3141"]}}],"resourceType":"Questionnaire","sourceId":{"$in":[7]}}`},
		{"Claim", "created=ge2014&_sort=-created",
			`{"$and":[{"dates.created.end":{"$gte":{"$date":"2014-01-01T00:00:00Z"}}}],"resourceType":"Claim","sortAsc":{"$lt":{"$date":"9999-12-31T23:59:59.999Z"}},"sourceId":{"$in":[7]}}`},
	} {
		v, err := url.ParseQuery(tc.query + "&_source:below=" + url.QueryEscape(sourceBase+"/"))
		if err != nil {
			t.Fatal(err)
		}
		q, err := tr.Parse(tc.resourceType, v, true)
		if err != nil {
			t.Fatalf("%s?%s: %v", tc.resourceType, tc.query, err)
		}
		plan, err := q.Plan(scope)
		if err != nil {
			t.Fatal(err)
		}
		if got := canon(t, plan.Pipeline[0].(bson.D)[0].Value); got != tc.match {
			t.Errorf("%s?%s:\n$match %s\nwant   %s", tc.resourceType, tc.query, got, tc.match)
		}
	}
}

// TestDocsListTheExcludedTypes: docs/fhir.md's table of the types the
// imported store does not keep names exactly those of the code.
func TestDocsListTheExcludedTypes(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "docs", "fhir.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(data), "| not kept | why |")
	if !ok {
		t.Fatal("docs/fhir.md has no table of the types not kept")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	var listed []string
	for _, row := range strings.Split(table, "\n")[2:] {
		cells := strings.Split(row, "|")
		if len(cells) < 3 {
			continue
		}
		for _, typ := range strings.Split(cells[1], ",") {
			listed = append(listed, strings.TrimSpace(typ))
		}
	}
	slices.Sort(listed)
	if want := fhirsearch.NotServedTypes(); !slices.Equal(listed, want) {
		t.Errorf("docs/fhir.md lists %v,\nthe code excludes %v", listed, want)
	}
}

// TestCodeableReferenceParameters: every R5 search parameter whose
// expression reaches a CodeableReference (its concept, its reference, or
// the CodeableReference itself) is offered on every type the imported
// store keeps, and indexes what a resource holds there: a token its
// concept's codings, a reference its reference. MedicationRequest?code=
// was ignored, its type configured with US Core's parameters only.
func TestCodeableReferenceParameters(t *testing.T) {
	defs, err := fhirdefs.OpenPackage(fhirdefstest.PackageDir("hl7.fhir.r5.core"))
	if err != nil {
		t.Fatalf("%v (run scripts/setup first)", err)
	}
	c := catalog(t)
	checked := 0
	for _, r := range c.Resources() {
		if !c.Keeps(r.Type) {
			continue
		}
		sd, err := defs.Type(r.Type)
		if err != nil {
			t.Fatal(err)
		}
		defined, err := defs.SearchParameters(r.Type)
		if err != nil {
			t.Fatal(err)
		}
		for _, sp := range defined {
			if sp.Type != "token" && sp.Type != "reference" {
				continue
			}
			for _, part := range fhirdefs.SplitUnion(sp.Expression) {
				path := strings.TrimSpace(part)
				if !strings.HasPrefix(path, r.Type+".") || strings.ContainsAny(path, "() ") {
					continue // another type's part, or a function: not a plain path
				}
				steps := strings.Split(path, ".")
				at := -1 // where the CodeableReference is among the steps
				for i := 2; i <= len(steps); i++ {
					if el, ok := sd.Element(strings.Join(steps[:i], ".")); ok && slices.Equal(el.Types, []string{"CodeableReference"}) {
						at = i - 1
					}
				}
				if at < 0 || at < len(steps)-2 || at == len(steps)-2 && steps[at+1] != "concept" && steps[at+1] != "reference" {
					continue
				}
				checked++
				offered := slices.ContainsFunc(r.Params, func(p fhirsearch.Param) bool { return p.Name == sp.Code })
				if !offered {
					t.Errorf("%s.%s (%s) reaches a CodeableReference and is not offered", r.Type, sp.Code, path)
					continue
				}
				// A resource with that CodeableReference: its concept and
				// its reference set, nested as the path says.
				var value any = map[string]any{
					"concept":   map[string]any{"coding": []any{map[string]any{"system": "http://example.org/codes", "code": "c1"}}},
					"reference": map[string]any{"reference": "Condition/cond-1"},
				}
				for i := at; i >= 1; i-- {
					value = map[string]any{steps[i]: value}
				}
				resource := value.(map[string]any)
				resource["resourceType"] = r.Type
				want := sp.Code + "|http://example.org/codes|c1"
				if sp.Type == "reference" {
					want = sp.Code + "|Condition/cond-1"
				}
				if idx := c.Index(r.Type, resource); !slices.Contains(idx.Keys, want) {
					t.Errorf("%s.%s (%s): no key %q in %q", r.Type, sp.Code, path, want, idx.Keys)
				}
			}
		}
	}
	if checked < 90 {
		t.Errorf("only %d parameters reach a CodeableReference", checked)
	}
	// R5 gives ImagingStudy's reason no expression; its element is a
	// CodeableReference, searched by its concept.
	idx := index(t, `{"resourceType": "ImagingStudy", "status": "available", "subject": {"reference": "Patient/p1"},
		"reason": [{"concept": {"coding": [{"system": "http://snomed.info/sct", "code": "22298006"}]}}]}`)
	if !slices.Contains(idx.Keys, "reason|http://snomed.info/sct|22298006") {
		t.Errorf("ImagingStudy reason keys %q", idx.Keys)
	}
	t.Logf("%d parameter expressions reach a CodeableReference", checked)
}
