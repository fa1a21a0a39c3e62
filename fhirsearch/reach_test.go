package fhirsearch_test

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
	"exchange/fhirsearch"
)

// TestReachNarrowsThePlan: what a token's scopes reach (domain.Scope.Reach)
// is a condition of the $match, ANDed with the query's own, so no search
// parameter can widen it.
func TestReachNarrowsThePlan(t *testing.T) {
	hr := domain.ScopeConstraint{Param: "code", Values: []string{"https://w3id.org/openmhealth|omh:heart-rate:2.0"}}
	lab := domain.ScopeConstraint{Param: "category", Values: []string{"http://terminology.hl7.org/CodeSystem/observation-category|laboratory"}}
	patients := []int64{1, 2}
	for _, tc := range []struct {
		name, resourceType, query string
		scope                     domain.Scope
		match                     string
	}{
		{"a code constraint is a code search", "Observation", "", domain.Scope{PatientIDs: patients, Reach: []domain.Reach{{Constraints: []domain.ScopeConstraint{hr}}}},
			`{"$and":[{"codeTokens":{"$in":["https://w3id.org/openmhealth|omh:heart-rate:2.0"]}}],"patientId":{"$in":[1,2]}}`},
		{"a code search cannot widen the constraint", "Observation", "code=omh:step-count:3.0,omh:heart-rate:2.0",
			domain.Scope{PatientIDs: patients, Reach: []domain.Reach{{Constraints: []domain.ScopeConstraint{hr}}}},
			`{"$and":[{"codeTokens":{"$in":["https://w3id.org/openmhealth|omh:heart-rate:2.0"]}}],"codeTokens":{"$in":["omh:step-count:3.0","omh:heart-rate:2.0"]},"patientId":{"$in":[1,2]}}`},
		{"native observations carry no category", "Observation", "", domain.Scope{PatientIDs: patients, Reach: []domain.Reach{{Constraints: []domain.ScopeConstraint{lab}}}},
			`{"$and":[{"_id":{"$in":[]}}],"patientId":{"$in":[1,2]}}`},
		{"a type without the parameter matches nothing", "Patient", "", domain.Scope{IDs: []int64{7}, Reach: []domain.Reach{{Constraints: []domain.ScopeConstraint{hr}}}},
			`{"$and":[{"_id":{"$in":[7]}},{"_id":{"$in":[]}}]}`},
		{"several scopes are alternatives", "Observation", "", domain.Scope{PatientIDs: patients, Reach: []domain.Reach{
			{PatientIDs: []int64{2}}, {Constraints: []domain.ScopeConstraint{hr, lab}}}},
			`{"$and":[{"$or":[{"patientId":{"$in":[2]}},{"$and":[{"codeTokens":{"$in":["https://w3id.org/openmhealth|omh:heart-rate:2.0"]}},{"_id":{"$in":[]}}]}]}],"patientId":{"$in":[1,2]}}`},
		{"no alternative: nothing", "Observation", "", domain.Scope{Reach: []domain.Reach{}},
			`{"$and":[{"_id":{"$in":[]}}]}`},
		{"imported: the category of the search index", "Condition", "_source:below=" + sourceBase + "/",
			domain.Scope{SourceIDs: []int64{3}, Reach: []domain.Reach{{Constraints: []domain.ScopeConstraint{{Param: "category", Values: []string{"problem-list-item", "|x"}}}}}},
			`{"$and":[{"search":{"$in":["category|problem-list-item","category||x"]}}],"resourceType":"Condition","sourceId":{"$in":[3]}}`},
		{"imported: a patient's alternative is its sources or references", "Condition", "_source:below=" + sourceBase + "/",
			domain.Scope{SourceIDs: []int64{3}, Reach: []domain.Reach{{PatientIDs: []int64{7}}, {IDs: []int64{}}}},
			`{"$and":[{"$or":[{"$or":[{"sourcePatientId":{"$in":[7]}},{"search":{"$in":["patient|Patient/7"]}}]},{"_id":{"$in":[]}}]}],"resourceType":"Condition","sourceId":{"$in":[3]}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := parse(t, tc.resourceType, tc.query).Plan(tc.scope)
			if err != nil {
				t.Fatal(err)
			}
			if got := canon(t, plan.Pipeline[0].(bson.D)[0].Value); got != tc.match {
				t.Errorf("$match\n got %s\nwant %s", got, tc.match)
			}
		})
	}
}

// TestReadsAreSearchesByID: the search a read under narrowing scopes runs.
func TestReadsAreSearchesByID(t *testing.T) {
	q, err := translator().ByID("Observation", "5")
	if err != nil || q.ResourceType() != "Observation" || q.Interaction() != domain.InteractionRead || q.Store().Kind != domain.StoreNative {
		t.Fatalf("ByID native: %v %+v", err, q)
	}
	plan, err := q.Plan(domain.Scope{})
	if err != nil || canon(t, plan.Pipeline[0].(bson.D)[0].Value) != `{"$and":[{"_id":{"$in":[5]}}]}` {
		t.Errorf("native read plan %v %v", plan, err)
	}
	q, err = translator().ByID("Condition", "0b6a4f8e-5b4e-4c1a-9d2b-3a1e0f6b7c8d")
	if err != nil || q.Store().Kind != domain.StoreImported || q.Interaction() != domain.InteractionRead {
		t.Fatalf("ByID imported: %v %+v", err, q)
	}
	if search := parse(t, "Observation", ""); search.Interaction() != domain.InteractionSearch {
		t.Error("a search is a search")
	}
	var _ domain.IDSearches = (*fhirsearch.Translator)(nil)
}
