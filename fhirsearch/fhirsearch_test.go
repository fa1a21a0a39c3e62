package fhirsearch_test

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
	"exchange/fhirsearch"
)

var now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const sourceBase = "https://exchange.example.org/fhir-source"

// translator searches the configured types (no R5 package).
func translator() *fhirsearch.Translator {
	catalog, err := fhirsearch.NewCatalog(nil)
	if err != nil {
		panic(err)
	}
	return fhirsearch.NewTranslator(catalog, []byte("test key"), sourceBase, func() time.Time { return now })
}

func parse(t *testing.T, resourceType, query string) *fhirsearch.Query {
	t.Helper()
	v, err := url.ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	q, err := translator().Parse(resourceType, v, false)
	if err != nil {
		t.Fatalf("%s?%s: %v", resourceType, query, err)
	}
	return q
}

// canon renders a BSON value as JSON with sorted keys, so that maps compare.
func canon(t *testing.T, v any) string {
	t.Helper()
	data, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, false, false)
	if err != nil {
		t.Fatal(err)
	}
	var generic any
	if err := json.Unmarshal(data, &generic); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(generic.(map[string]any)["v"])
	return string(out)
}

func TestPipelines(t *testing.T) {
	patients := domain.Scope{PatientIDs: []int64{1, 2}}
	for _, tc := range []struct {
		name, resourceType, query string
		scope                     domain.Scope
		match, sort               string
	}{
		{"everything a practitioner reads", "Observation", "", patients,
			`{"patientId":{"$in":[1,2]}}`, `{"_id":1}`},
		{"code takes the index prefix after the patient", "Observation", "code=https://w3id.org/openmhealth|omh:heart-rate:2.0,omh:step-count:3.0", patients,
			`{"codeTokens":{"$in":["https://w3id.org/openmhealth|omh:heart-rate:2.0","omh:step-count:3.0"]},"patientId":{"$in":[1,2]}}`, `{"_id":1}`},
		{"a superuser's code search has no prefix", "Observation", "code=|x", domain.Scope{},
			`{"$and":[{"codeTokens":{"$in":["|x"]}}]}`, `{"_id":1}`},
		{"date range and sort", "Observation", "date=ge2024-01-01&date=lt2024-02&_sort=-date", patients,
			`{"$or":[{"patientId":{"$in":[1,2]},"sortAsc":{"$gte":{"$date":"2024-01-01T00:00:00Z"},"$lt":{"$date":"2024-02-01T00:00:00Z"}},"spanClass":0},{"$and":[{"effectiveEnd":{"$gte":{"$date":"2024-01-01T00:00:00Z"}}},{"effectiveStart":{"$lt":{"$date":"2024-02-01T00:00:00Z"}}}],"patientId":{"$in":[1,2]},"sortAsc":{"$gte":{"$date":"2023-12-31T23:00:00Z"},"$lt":{"$date":"2024-02-01T00:00:00Z"}},"spanClass":1},{"$and":[{"effectiveEnd":{"$gte":{"$date":"2024-01-01T00:00:00Z"}}},{"effectiveStart":{"$lt":{"$date":"2024-02-01T00:00:00Z"}}}],"patientId":{"$in":[1,2]},"sortAsc":{"$gte":{"$date":"2023-12-30T22:00:00Z"},"$lt":{"$date":"2024-02-01T00:00:00Z"}},"spanClass":2},{"$and":[{"effectiveEnd":{"$gte":{"$date":"2024-01-01T00:00:00Z"}}},{"effectiveStart":{"$lt":{"$date":"2024-02-01T00:00:00Z"}}}],"patientId":{"$in":[1,2]},"sortAsc":{"$gte":{"$date":"2023-11-30T00:00:00Z"},"$lt":{"$date":"2024-02-01T00:00:00Z"}},"spanClass":3},{"$and":[{"effectiveEnd":{"$gte":{"$date":"2024-01-01T00:00:00Z"}}},{"effectiveStart":{"$lt":{"$date":"2024-02-01T00:00:00Z"}}}],"patientId":{"$in":[1,2]},"sortAsc":{"$gte":{"$date":"2022-12-30T00:00:00Z"},"$lt":{"$date":"2024-02-01T00:00:00Z"}},"spanClass":4},{"$and":[{"effectiveEnd":{"$gte":{"$date":"2024-01-01T00:00:00Z"}}},{"effectiveStart":{"$lt":{"$date":"2024-02-01T00:00:00Z"}}}],"patientId":{"$in":[1,2]},"sortAsc":{"$lt":{"$date":"2024-02-01T00:00:00Z"}},"spanClass":5},{"$and":[{"effectiveEnd":{"$gte":{"$date":"2024-01-01T00:00:00Z"}}},{"effectiveStart":{"$lt":{"$date":"2024-02-01T00:00:00Z"}}}],"patientId":{"$in":[1,2]},"sortAsc":{"$lt":{"$date":"2024-02-01T00:00:00Z"}},"spanClass":null}]}`,
			`{"sortAsc":-1,"_id":-1}`},
		{"eq spans the precision", "Observation", "date=2024-03-05T10:15", patients,
			`{"$and":[{"effectiveEnd":{"$lt":{"$date":"2024-03-05T10:16:00Z"}},"effectiveStart":{"$gte":{"$date":"2024-03-05T10:15:00Z"}}}],"patientId":{"$in":[1,2]},"sortAsc":{"$gte":{"$date":"2024-03-05T10:15:00Z"},"$lt":{"$date":"2024-03-05T10:16:00Z"}}}`, `{"sortAsc":1,"_id":1}`},
		{"status of the official system", "Observation", "status=http://hl7.org/fhir/observation-status|final,preliminary", patients,
			`{"$and":[{"status":{"$in":["final","preliminary"]}}],"patientId":{"$in":[1,2]}}`, `{"_id":1}`},
		{"status of another system matches nothing", "Observation", "status=http://example.org|final", patients,
			`{"$and":[{"status":{"$in":[]}}],"patientId":{"$in":[1,2]}}`, `{"_id":1}`},
		{"consent per patient", "Observation", "code=omh:heart-rate:2.0", domain.Scope{PatientIDs: []int64{1, 2, 3}, Codes: map[int64][]string{1: {"omh:heart-rate:2.0"}, 2: {}}},
			`{"$and":[{"codeTokens":{"$in":["omh:heart-rate:2.0"]}}],"$or":[{"codeTokens":{"$in":["omh:heart-rate:2.0"]},"patientId":1},{"patientId":{"$in":[3]}}]}`, `{"_id":1}`},
		{"ids, last updated", "Observation", "_id=5,abc&_lastUpdated=gt2025&_sort=_lastUpdated", patients,
			`{"$and":[{"_id":{"$in":[5]}}],"lastUpdated":{"$gte":{"$date":"2026-01-01T00:00:00Z"},"$lt":{"$date":"9999-12-31T23:59:59.999Z"}},"patientId":{"$in":[1,2]}}`, `{"lastUpdated":1,"_id":1}`},
		{"patient names fold case and accents", "Patient", "name=ZOË&birthdate=sa1990", domain.Scope{IDs: []int64{7}},
			`{"$and":[{"_id":{"$in":[7]}},{"birthDateStart":{"$gte":{"$date":"1991-01-01T00:00:00Z"}}},{"nameKeys":{"$regex":"^zoe"}}]}`, `{"_id":1}`},
		{"regular expression characters are literal", "Patient", "family=.*&given=a,b", domain.Scope{},
			`{"$and":[{"familyKey":{"$regex":"^\\.\\*"}},{"$or":[{"givenKeys":{"$regex":"^a"}},{"givenKeys":{"$regex":"^b"}}]}]}`, `{"_id":1}`},
		{"practitioners are users", "Practitioner", "_sort=-lastUpdated", domain.Scope{IDs: []int64{3}},
			`{"$and":[{"userType":"practitioner"},{"_id":{"$in":[3]}}]}`, `{"lastUpdated":-1,"_id":-1}`},
		{"a _source of another base names no store", "Observation", "_source=http://example.org/fhir-source/1", patients,
			`{"$and":[{"_id":{"$in":[]}}]}`, `{"_id":1}`},
		{"a type without a native store finds nothing natively", "Condition", "", patients,
			`{"$and":[{"_id":{"$in":[]}}]}`, `{"_id":1}`},
		{"an imported search runs on the search index", "Condition",
			"_source:below=" + sourceBase + "/&code=http://snomed.info/sct|44054006&onset-date=ge2024&_sort=onset-date", domain.Scope{SourceIDs: []int64{3, 4}},
			`{"$and":[{"search":{"$in":["code|http://snomed.info/sct|44054006"]}},{"dates.onset-date.end":{"$gte":{"$date":"2024-01-01T00:00:00Z"}}}],"resourceType":"Condition","sortAsc":{"$lt":{"$date":"9999-12-31T23:59:59.999Z"}},"sourceId":{"$in":[3,4]}}`,
			`{"sortAsc":1,"_id":1}`},
		{"imported strings, references and ids", "Encounter",
			"_source=" + sourceBase + "/3&location=Location/9&_id=0b6a4f8e-5b4e-4c1a-9d2b-3a1e0f6b7c8d", domain.Scope{SourceIDs: []int64{3}},
			`{"$and":[{"_id":{"$in":["0b6a4f8e-5b4e-4c1a-9d2b-3a1e0f6b7c8d"]}},{"search":{"$in":["location|Location/9","location|^Location/9"]}}],"resourceType":"Encounter","sourceId":{"$in":[3]}}`, `{"_id":1}`},
		{"the imported patient: its sources or a reference to it", "Location", "_source:below=" + sourceBase + "&name=Saint&_lastUpdated=lt2025",
			domain.Scope{SourceIDs: []int64{3}, PatientIDs: []int64{7}},
			`{"$and":[{"$or":[{"sourcePatientId":{"$in":[7]}},{"search":{"$in":["patient|Patient/7"]}}]},{"search":{"$regex":"^name\\|saint"}}],"lastUpdated":{"$lt":{"$date":"2025-01-01T00:00:00Z"}},"resourceType":"Location","sourceId":{"$in":[3]}}`,
			`{"lastUpdated":1,"_id":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := parse(t, tc.resourceType, tc.query).Plan(tc.scope)
			if err != nil {
				t.Fatal(err)
			}
			if len(plan.Pipeline) < 3 {
				t.Fatalf("pipeline %v", plan.Pipeline)
			}
			stage := func(i int, name string) string {
				d := plan.Pipeline[i].(bson.D)
				if d[0].Key != name {
					t.Fatalf("stage %d is %s, want %s", i, d[0].Key, name)
				}
				if name == "$sort" { // order matters: compare as written
					data, _ := bson.MarshalExtJSON(d[0].Value, false, false)
					return string(data)
				}
				return canon(t, d[0].Value)
			}
			if got := stage(0, "$match"); got != tc.match {
				t.Errorf("$match\n got %s\nwant %s", got, tc.match)
			}
			if got := stage(1, "$sort"); got != tc.sort {
				t.Errorf("$sort %s, want %s", got, tc.sort)
			}
			if got := stage(2, "$limit"); got != "51" {
				t.Errorf("$limit %s", got)
			}
		})
	}
}

func TestPlansWithoutEntries(t *testing.T) {
	plan, err := parse(t, "Observation", "_summary=count&code=x").Plan(domain.Scope{})
	if err != nil || plan.Pipeline != nil || plan.Filter == nil {
		t.Fatalf("_summary=count: %+v %v", plan, err)
	}
	plan, _ = parse(t, "Observation", "_count=0").Plan(domain.Scope{})
	if plan.Pipeline != nil || plan.Filter != nil {
		t.Errorf("_count=0: %+v", plan)
	}
	plan, _ = parse(t, "Observation", "_total=accurate&_count=10").Plan(domain.Scope{})
	if plan.Pipeline == nil || plan.Filter == nil || plan.PageSize != 10 {
		t.Errorf("_total=accurate: %+v", plan)
	}
	plan, _ = parse(t, "Observation", "_elements=code,status").Plan(domain.Scope{})
	if got := canon(t, plan.Pipeline[3].(bson.D)[0].Value); got != `{"codeTokens":0,"identifierTokens":0,"lastUpdated":0,"omh":0,"payload":0,"sortAsc":0,"sortDesc":0,"spanClass":0,"valueNumber":0,"valueUnit":0}` {
		t.Errorf("_elements without the value: $project %s", got)
	}
}

func TestParseRefusesMalformedValues(t *testing.T) {
	for _, query := range []string{
		"date=2024-13", "date=2024-02-30", "date=xx2024", "date=24", "date=2024-01-01T25:00", "date=2024-01-01T10:00+25:99",
		"_lastUpdated=yesterday", "_count=-1", "_count=1001", "_count=ten", "_summary=true", "_total=some",
		"_sort=code", "_sort=date,_lastUpdated", "_elements=code%3Bdrop", "code:text=x", "code=", "code=|",
		"patient.identifier=justavalue", "patient.identifier=|v", "patient=", "_cursor=forged.signature",
		"patient=" + strings.Repeat("1,", fhirsearch.MaxValues) + "1", "code=" + strings.Repeat("x,", fhirsearch.MaxValues) + "x",
	} {
		v, _ := url.ParseQuery(query)
		_, err := translator().Parse("Observation", v, false)
		if !domain.IsCode(err, domain.CodeInvalid) {
			t.Errorf("%s: got %v, want an invalid error", query, err)
			continue
		}
		param, _, _ := strings.Cut(query, "=")
		param, _, _ = strings.Cut(param, ":")
		if !strings.Contains(err.Error(), param) {
			t.Errorf("%s: %q does not name the parameter", query, err)
		}
	}
	if _, err := translator().Parse("Basic", url.Values{}, false); !domain.IsCode(err, domain.CodeNotSupported) {
		t.Errorf("unknown type: %v", err)
	}
}

// TestParseRefusesMalformedR5Values: number, quantity and uri values of
// the types served from R5.
func TestParseRefusesMalformedR5Values(t *testing.T) {
	tr := fhirsearch.NewTranslator(catalog(t), []byte("test key"), sourceBase, func() time.Time { return now })
	for _, c := range []struct{ resourceType, query string }{
		{"RiskAssessment", "probability=abc"}, {"RiskAssessment", "probability=xx5"}, {"RiskAssessment", "probability=1e999"},
		{"RiskAssessment", "probability=.5"}, {"RiskAssessment", "probability=5|http://unitsofmeasure.org|mg"},
		{"RiskAssessment", "probability="}, {"Substance", "quantity=5|http://unitsofmeasure.org"},
		{"Substance", "quantity=5|http://unitsofmeasure.org|"}, {"Substance", "quantity=|x|mg"}, {"Questionnaire", "url="},
	} {
		v, _ := url.ParseQuery(c.query)
		_, err := tr.Parse(c.resourceType, v, false)
		param, _, _ := strings.Cut(c.query, "=")
		if !domain.IsCode(err, domain.CodeInvalid) || !strings.Contains(err.Error(), param) {
			t.Errorf("%s?%s: got %v, want an invalid error naming %s", c.resourceType, c.query, err, param)
		}
	}
	for _, typ := range []string{"Bundle", "Parameters", "CodeSystem"} {
		if _, err := tr.Parse(typ, url.Values{}, false); !domain.IsCode(err, domain.CodeNotSupported) || !strings.Contains(err.Error(), ":") {
			t.Errorf("%s: %v, want not-supported with the reason", typ, err)
		}
	}
}

func TestUnknownParameters(t *testing.T) {
	q := parse(t, "Observation", "category=vital-signs&code=x&value-quantity=5")
	if got := strings.Join(q.Unknown(), ","); got != "category,value-quantity" {
		t.Errorf("unknown %q", got)
	}
	v, _ := url.ParseQuery("category=vital-signs")
	if _, err := translator().Parse("Observation", v, true); !domain.IsCode(err, domain.CodeInvalid) || !strings.Contains(err.Error(), "category") {
		t.Errorf("strict: %v", err)
	}
}

func TestJoins(t *testing.T) {
	q := parse(t, "Observation", "patient=Patient/3,4,a1b2c3d4-0000-0000-0000-000000000000&patient.organization=Organization/7"+
		"&patient._has:Group:member:_id=Group/9&patient.identifier="+url.QueryEscape("http://mrn|M-1"))
	got, _ := json.Marshal(q.Joins())
	want := `[{"Kind":"patient","IDs":[3,4],"Identifiers":null},{"Kind":"patient._has:Group:member:_id","IDs":[9],"Identifiers":null},` +
		`{"Kind":"patient.identifier","IDs":null,"Identifiers":[{"System":"http://mrn","Value":"M-1"}]},{"Kind":"patient.organization","IDs":[7],"Identifiers":null}]`
	if string(got) != want {
		t.Errorf("joins\n got %s\nwant %s", got, want)
	}
	if j := parse(t, "Group", "_has:Group:member:_id=5").Joins(); len(j) != 1 || j[0].Kind != domain.JoinStudy || j[0].IDs[0] != 5 {
		t.Errorf("Group joins %+v", j)
	}
}

func TestDateRangesFollowPrecision(t *testing.T) {
	for value, want := range map[string]string{
		"2024":                      `{"$gte":{"$date":"2024-01-01T00:00:00Z"}}..{"$lt":{"$date":"2025-01-01T00:00:00Z"}}`,
		"2024-02":                   `{"$gte":{"$date":"2024-02-01T00:00:00Z"}}..{"$lt":{"$date":"2024-03-01T00:00:00Z"}}`,
		"2024-02-29":                `{"$gte":{"$date":"2024-02-29T00:00:00Z"}}..{"$lt":{"$date":"2024-03-01T00:00:00Z"}}`,
		"2024-02-29T23:59:59+02:00": `{"$gte":{"$date":"2024-02-29T21:59:59Z"}}..{"$lt":{"$date":"2024-02-29T22:00:00Z"}}`,
		"2024-02-29T23:59:59.5Z":    `{"$gte":{"$date":"2024-02-29T23:59:59.5Z"}}..{"$lt":{"$date":"2024-02-29T23:59:59.6Z"}}`,
		// Finer than stored (milliseconds): the millisecond it falls in.
		"eq2024-02-29T10:00:00.123456Z": `{"$gte":{"$date":"2024-02-29T10:00:00.123Z"}}..{"$lt":{"$date":"2024-02-29T10:00:00.124Z"}}`,
	} {
		plan, err := parse(t, "Observation", "date="+url.QueryEscape(value)).Plan(domain.Scope{})
		if err != nil {
			t.Fatal(err)
		}
		var cond bson.M
		for _, e := range plan.Pipeline[0].(bson.D)[0].Value.(bson.D) {
			if e.Key == "$and" {
				cond = e.Value.(bson.A)[0].(bson.M)
			}
		}
		if got := canon(t, cond["effectiveStart"]) + ".." + canon(t, cond["effectiveEnd"]); got != want {
			t.Errorf("%s: %s, want %s", value, got, want)
		}
	}
}

func TestCursorsAreSignedAndBoundToTheirSearch(t *testing.T) {
	tr := translator()
	v, _ := url.ParseQuery("code=x&_sort=date")
	q, err := tr.Parse("Observation", v, false)
	if err != nil {
		t.Fatal(err)
	}
	date := time.Date(2024, 5, 1, 10, 0, 0, 123456789, time.UTC)
	next := q.Next(fhirsearch.Position{ID: 42, Date: &date})
	v.Set(fhirsearch.CursorParam, next)
	q2, err := tr.Parse("Observation", v, false)
	if err != nil {
		t.Fatal(err)
	}
	plan, _ := q2.Plan(domain.Scope{PatientIDs: []int64{1}})
	match := canon(t, plan.Pipeline[0].(bson.D)[0].Value)
	want := `{"$and":[{"$or":[{"sortAsc":{"$gt":{"$date":"2024-05-01T10:00:00.123Z"}}},{"_id":{"$gt":42},"sortAsc":{"$date":"2024-05-01T10:00:00.123Z"}}]}],"codeTokens":{"$in":["x"]},"patientId":{"$in":[1]},"sortAsc":{"$gte":{"$date":"2024-05-01T10:00:00.123Z"}}}`
	if match != want {
		t.Errorf("continuation\n got %s\nwant %s", match, want)
	}
	for name, tamper := range map[string]func(url.Values){
		"another search":    func(v url.Values) { v.Set("code", "y") },
		"another sort":      func(v url.Values) { v.Set("_sort", "-date") },
		"changed signature": func(v url.Values) { v.Set(fhirsearch.CursorParam, next[:len(next)-2]+"AA") },
		"changed payload":   func(v url.Values) { v.Set(fhirsearch.CursorParam, "x"+next[1:]) },
	} {
		w, _ := url.ParseQuery(v.Encode())
		tamper(w)
		if _, err := tr.Parse("Observation", w, false); !domain.IsCode(err, domain.CodeInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Undated records sort last both ways.
	q3, _ := tr.Parse("Observation", url.Values{"_sort": {"-date"}}, false)
	v3 := url.Values{"_sort": {"-date"}, fhirsearch.CursorParam: {q3.Next(fhirsearch.Position{ID: 7})}}
	q4, err := tr.Parse("Observation", v3, false)
	if err != nil {
		t.Fatal(err)
	}
	plan, _ = q4.Plan(domain.Scope{})
	if got := canon(t, plan.Pipeline[0].(bson.D)[0].Value); !strings.Contains(got, `"sortDesc":{"$date":{"$numberLong":"-62135596800000"}}`) {
		t.Errorf("undated cursor: %s", got)
	}
}

// No plan ever pages with $skip.
func TestNoSkip(t *testing.T) {
	for _, query := range []string{"", "_sort=date", "_count=1000&_total=accurate", "code=x&_sort=-_lastUpdated"} {
		plan, _ := parse(t, "Observation", query).Plan(domain.Scope{})
		if strings.Contains(canon(t, plan.Pipeline), "$skip") {
			t.Errorf("%s: $skip in %s", query, canon(t, plan.Pipeline))
		}
	}
}

// FuzzParse: any query string parses or is refused as invalid; it never
// panics, and what parses also plans.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"code=https://w3id.org/openmhealth|omh:heart-rate:2.0&date=ge2024-01-01&_sort=-date&_count=10",
		"patient=Patient/1,2&patient._has:Group:member:_id=3&_summary=count",
		`identifier=a\|b|c\,d&status=final&_lastUpdated=ap2025-06`,
		"_elements=code,effective[x]&_total=accurate&_source:below=http://x/",
		"name=Zo%C3%AB&birthdate=le1990-02-28T10:00:00.5%2B01:00",
		"probability=ap0.5,gt-1e-3&quantity=ge100|http://unitsofmeasure.org|mL,5||mg&url=http://x|1.0",
	} {
		f.Add("Observation", seed)
		f.Add("Patient", seed)
		f.Add("RiskAssessment", seed)
		f.Add("Substance", seed)
	}
	tr := fhirsearch.NewTranslator(catalog(f), []byte("test key"), sourceBase, func() time.Time { return now })
	f.Fuzz(func(t *testing.T, resourceType, query string) {
		v, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		q, err := tr.Parse(resourceType, v, false)
		if err != nil {
			if c := domain.ErrorCode(err); c != domain.CodeInvalid && c != domain.CodeNotSupported {
				t.Fatalf("%s?%s: %v", resourceType, query, err)
			}
			return
		}
		if _, err := q.Plan(domain.Scope{PatientIDs: []int64{1}}); err != nil {
			t.Fatalf("%s?%s: plan: %v", resourceType, query, err)
		}
	})
}

func TestSourceSelectsTheStore(t *testing.T) {
	native := domain.StoreSelection{Kind: domain.StoreNative}
	none := domain.StoreSelection{Kind: domain.StoreNone}
	all := domain.StoreSelection{Kind: domain.StoreImported}
	for query, want := range map[string]domain.StoreSelection{
		"":                                                          native,
		"_source=" + sourceBase + "/12":                             {Kind: domain.StoreImported, SourceID: 12},
		"_source:below=" + sourceBase + "/":                         all,
		"_source:below=" + sourceBase:                               all,
		"_source=" + sourceBase + "/012":                            none, // not how the source is named
		"_source=" + sourceBase + "/0":                              none,
		"_source=" + sourceBase + "/12/x":                           none,
		"_source=" + sourceBase:                                     none,
		"_source=http://elsewhere.example.org/fhir-source/12":       none,
		"_source:below=" + sourceBase + "/12":                       none,
		"_source=" + sourceBase + "/1&_source=" + sourceBase + "/2": none,
	} {
		v, _ := url.ParseQuery(query)
		q, err := translator().Parse("Observation", v, true)
		if err != nil {
			t.Errorf("%s: %v", query, err)
			continue
		}
		if q.Store() != want {
			t.Errorf("%s: store %+v, want %+v", query, q.Store(), want)
		}
	}
	// Without _source, a type that has no native store finds nothing.
	if q := parse(t, "Condition", ""); q.Store() != none {
		t.Errorf("Condition: %+v", q.Store())
	}
}

func TestParametersApplyToTheirStore(t *testing.T) {
	imported := "&_source:below=" + sourceBase
	for _, tc := range []struct {
		resourceType, query string
		ok                  bool
	}{
		{"Observation", "category=vital-signs", false},           // imported only
		{"Observation", "category=vital-signs" + imported, true}, // applies there
		{"Observation", "identifier=x", true},                    // native only
		{"Observation", "identifier=x" + imported, false},
		{"Observation", "patient.organization=1" + imported, false},
		{"Patient", "gender=male", false},
		{"Patient", "gender=male" + imported, true},
		{"Patient", "_has:Group:member:_id=1", true},
		{"Condition", "code=x" + imported, true},
		{"Condition", "patient=1" + imported, true},
		{"Condition", "_lastUpdated=gt2020&_sort=-onset-date" + imported, true},
		{"Condition", "_sort=date" + imported, false},             // Condition sorts by its onset
		{"Condition", "onset-date=ge2020&_sort=onset-date", true}, // no native store: empty, but checked as imported
		{"Location", "patient=1" + imported, false},
	} {
		v, _ := url.ParseQuery(tc.query)
		_, err := translator().Parse(tc.resourceType, v, true)
		if (err == nil) != tc.ok {
			t.Errorf("%s?%s: %v", tc.resourceType, tc.query, err)
		}
		if err != nil && !domain.IsCode(err, domain.CodeInvalid) {
			t.Errorf("%s?%s: %v is not invalid", tc.resourceType, tc.query, err)
		}
	}
}
