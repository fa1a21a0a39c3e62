package repo

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// index is one index of a collection. Compound indexes put equality fields
// first, then the sort field, then ranges (MongoDB's ESR rule).
type index struct {
	collection string
	name       string
	keys       bson.D
	unique     bool
}

// indexes lists every index the exchange relies on. Unique ones are on
// scalar keys every document has: a missing key would collide on MongoDB and
// not on FerretDB, and FerretDB has no partial indexes.
var indexes = []index{
	{colUsers, "email_unique", bson.D{{Key: "email", Value: 1}}, true},
	{colOrganizations, "partOf_name", bson.D{{Key: "partOf", Value: 1}, {Key: "name", Value: 1}}, false},
	{colMemberships, "organization_user_unique", bson.D{{Key: "organizationId", Value: 1}, {Key: "userId", Value: 1}}, true},
	{colMemberships, "user", bson.D{{Key: "userId", Value: 1}}, false},
	{colPatients, "user_unique", bson.D{{Key: "userId", Value: 1}}, true},
	{colPatients, "organizations", bson.D{{Key: "organizationIds", Value: 1}}, false},
	{colPatients, "nameKeys", bson.D{{Key: "nameKeys", Value: 1}}, false},
	{colPatients, "familyKey", bson.D{{Key: "familyKey", Value: 1}}, false},
	{colPatients, "givenKeys", bson.D{{Key: "givenKeys", Value: 1}}, false},
	{colPatients, "identifierTokens", bson.D{{Key: "identifierTokens", Value: 1}}, false},
	{colPatients, "birthDate", bson.D{{Key: "birthDateStart", Value: 1}, {Key: "birthDateEnd", Value: 1}}, false},
	{colPatientIdentifiers, "system_value_unique", bson.D{{Key: "system", Value: 1}, {Key: "value", Value: 1}}, true},
	{colPatientIdentifiers, "patient", bson.D{{Key: "patientId", Value: 1}}, false},
	{colStudies, "organization_name", bson.D{{Key: "organizationId", Value: 1}, {Key: "name", Value: 1}}, false},
	{colEnrollments, "study_patient_unique", bson.D{{Key: "studyId", Value: 1}, {Key: "patientId", Value: 1}}, true},
	{colEnrollments, "patient", bson.D{{Key: "patientId", Value: 1}}, false},
	{colScopeCodes, "system_code_unique", bson.D{{Key: "system", Value: 1}, {Key: "code", Value: 1}}, true},
	{colScopeRequests, "study_scope_unique", bson.D{{Key: "studyId", Value: 1}, {Key: "scopeCodeId", Value: 1}}, true},
	{colConsents, "patient_study_scope_unique", bson.D{{Key: "patientId", Value: 1}, {Key: "studyId", Value: 1}, {Key: "scopeCodeId", Value: 1}}, true},
	{colConsents, "study", bson.D{{Key: "studyId", Value: 1}}, false},
	{colDataSources, "name", bson.D{{Key: "name", Value: 1}}, false},
	{colStudyDataSources, "study_dataSource_unique", bson.D{{Key: "studyId", Value: 1}, {Key: "dataSourceId", Value: 1}}, true},
	{colStudyDataSources, "dataSource", bson.D{{Key: "dataSourceId", Value: 1}}, false},
	{colFHIRSources, "patient_label", bson.D{{Key: "patientId", Value: 1}, {Key: "label", Value: 1}}, false},
	// Observations: equality fields first (patient, code), then the sort
	// field, then _id, which breaks ties and carries the keyset cursor. The
	// planner (fhirsearch) puts patientId and codeTokens at the top of its
	// $match to use them; both directions of the date sort have an index.
	{colObservations, "patient_code_date_asc", bson.D{{Key: "patientId", Value: 1}, {Key: "codeTokens", Value: 1}, {Key: "sortAsc", Value: 1}, {Key: "_id", Value: 1}}, false},
	{colObservations, "patient_code_date_desc", bson.D{{Key: "patientId", Value: 1}, {Key: "codeTokens", Value: 1}, {Key: "sortDesc", Value: -1}, {Key: "_id", Value: -1}}, false},
	{colObservations, "patient_date_asc", bson.D{{Key: "patientId", Value: 1}, {Key: "sortAsc", Value: 1}, {Key: "_id", Value: 1}}, false},
	{colObservations, "patient_date_desc", bson.D{{Key: "patientId", Value: 1}, {Key: "sortDesc", Value: -1}, {Key: "_id", Value: -1}}, false},
	{colObservations, "patient_lastUpdated", bson.D{{Key: "patientId", Value: 1}, {Key: "lastUpdated", Value: 1}, {Key: "_id", Value: 1}}, false},
	{colObservations, "patient_id", bson.D{{Key: "patientId", Value: 1}, {Key: "_id", Value: 1}}, false},
	// A date range bounds the start of the spans (the sort key) per span
	// class, one scan each (fhirsearch/bounds.go), in either direction; the
	// other sort keys with the code; an identifier, nearly unique.
	{colObservations, "patient_code_span_date", bson.D{{Key: "patientId", Value: 1}, {Key: "codeTokens", Value: 1}, {Key: "spanClass", Value: 1}, {Key: "sortAsc", Value: 1}, {Key: "_id", Value: 1}}, false},
	{colObservations, "patient_span_date", bson.D{{Key: "patientId", Value: 1}, {Key: "spanClass", Value: 1}, {Key: "sortAsc", Value: 1}, {Key: "_id", Value: 1}}, false},
	{colObservations, "patient_code_id", bson.D{{Key: "patientId", Value: 1}, {Key: "codeTokens", Value: 1}, {Key: "_id", Value: 1}}, false},
	{colObservations, "patient_code_lastUpdated", bson.D{{Key: "patientId", Value: 1}, {Key: "codeTokens", Value: 1}, {Key: "lastUpdated", Value: 1}, {Key: "_id", Value: 1}}, false},
	{colObservations, "patient_identifier", bson.D{{Key: "patientId", Value: 1}, {Key: "identifierTokens", Value: 1}, {Key: "_id", Value: 1}}, false},
	{colObservations, "dataSource", bson.D{{Key: "dataSourceId", Value: 1}}, false}, // may a data source go (DeleteDataSource)
	{colObservationIdentifier, "system_value_unique", bson.D{{Key: "system", Value: 1}, {Key: "value", Value: 1}}, true},
	{colObservationIdentifier, "observation", bson.D{{Key: "observationId", Value: 1}}, false},
	// The imported store: the type and source first (every search has the
	// type, and all but a superuser's the readable sources), then the sort
	// field and _id. Token, string and reference parameters share the one
	// multikey search index; date parameters filter within the others
	// (one index each would spend MongoDB's 64 on one collection).
	{colResources, "uniqueKey_unique", bson.D{{Key: "uniqueKey", Value: 1}}, true},
	{colResources, "type_source_id", bson.D{{Key: "resourceType", Value: 1}, {Key: "sourceId", Value: 1}, {Key: "_id", Value: 1}}, false},
	{colResources, "type_source_lastUpdated", bson.D{{Key: "resourceType", Value: 1}, {Key: "sourceId", Value: 1}, {Key: "lastUpdated", Value: 1}, {Key: "_id", Value: 1}}, false},
	{colResources, "type_source_date_asc", bson.D{{Key: "resourceType", Value: 1}, {Key: "sourceId", Value: 1}, {Key: "sortAsc", Value: 1}, {Key: "_id", Value: 1}}, false},
	{colResources, "type_source_date_desc", bson.D{{Key: "resourceType", Value: 1}, {Key: "sourceId", Value: 1}, {Key: "sortDesc", Value: -1}, {Key: "_id", Value: -1}}, false},
	{colResources, "type_search_id", bson.D{{Key: "resourceType", Value: 1}, {Key: "search", Value: 1}, {Key: "_id", Value: 1}}, false},
	{colResources, "type_sourcePatient_id", bson.D{{Key: "resourceType", Value: 1}, {Key: "sourcePatientId", Value: 1}, {Key: "_id", Value: 1}}, false},
	{colResources, "source", bson.D{{Key: "sourceId", Value: 1}}, false},
	{colUsers, "userType_lastUpdated", bson.D{{Key: "userType", Value: 1}, {Key: "lastUpdated", Value: 1}}, false},
	{colOAuthTokens, "request_kind", bson.D{{Key: "requestId", Value: 1}, {Key: "kind", Value: 1}}, false},
	{colOAuthTokens, "expiresAt", bson.D{{Key: "expiresAt", Value: 1}}, false},
	{colOAuthTokens, "user_kind", bson.D{{Key: "userId", Value: 1}, {Key: "kind", Value: 1}}, false}, // revoke a user's tokens; a patient's invitations
	{colLoginThrottle, "expiresAt", bson.D{{Key: "expiresAt", Value: 1}}, false},
	{colInvitationRedemptions, "expiresAt", bson.D{{Key: "expiresAt", Value: 1}}, false},
	{colLoginSessions, "user", bson.D{{Key: "userId", Value: 1}}, false}, // end a user's sessions
	{colLoginSessions, "expiresAt", bson.D{{Key: "expiresAt", Value: 1}}, false},
	{colUsers, "identifier", bson.D{{Key: "identifier", Value: 1}}, false}, // a token exchange's practitioner
	{colIdentityLinks, "user", bson.D{{Key: "userId", Value: 1}}, false},
	{colIdentityInvitations, "provider_email", bson.D{{Key: "provider", Value: 1}, {Key: "email", Value: 1}}, false},
	{colPendingSignIns, "expiresAt", bson.D{{Key: "expiresAt", Value: 1}}, false},
	{colUsedAssertions, "expiresAt", bson.D{{Key: "expiresAt", Value: 1}}, false},
	// Export jobs: the queue (state, then age), an owner's unfinished jobs,
	// the expired ones. Their files' GridFS indexes are the driver's.
	{colExportJobs, "state_createdAt", bson.D{{Key: "state", Value: 1}, {Key: "createdAt", Value: 1}}, false},
	{colExportJobs, "owner_state", bson.D{{Key: "owner.userId", Value: 1}, {Key: "owner.clientId", Value: 1}, {Key: "state", Value: 1}}, false},
	{colExportJobs, "state_expiresAt", bson.D{{Key: "state", Value: 1}, {Key: "expiresAt", Value: 1}}, false},
	{colIDBlocks, "sequence_last", bson.D{{Key: "sequence", Value: 1}, {Key: "last", Value: 1}}, false},
	// The audit trail: each search parameter's field first (patientIds is
	// multikey), then the time and _id, which sort and page; the time alone
	// for date ranges, superusers' browsing and retention.
	{colAuditEvents, "patient_date", bson.D{{Key: "patientIds", Value: 1}, {Key: "lastUpdated", Value: 1}, {Key: "_id", Value: 1}}, false},
	{colAuditEvents, "agent_date", bson.D{{Key: "agent", Value: 1}, {Key: "lastUpdated", Value: 1}, {Key: "_id", Value: 1}}, false},
	{colAuditEvents, "entityType_date", bson.D{{Key: "entityTypes", Value: 1}, {Key: "lastUpdated", Value: 1}, {Key: "_id", Value: 1}}, false},
	{colAuditEvents, "action_date", bson.D{{Key: "action", Value: 1}, {Key: "lastUpdated", Value: 1}, {Key: "_id", Value: 1}}, false},
	{colAuditEvents, "date", bson.D{{Key: "lastUpdated", Value: 1}, {Key: "_id", Value: 1}}, false},
	// Patient access: brands by their endpoint (the upsert key); the
	// brand picker's facilities by word prefix, state and postal code,
	// each with the sort key (brand, then facility); connections by
	// patient and EHR; pulls by patient, newest first, and by connection.
	{colEHRBrands, "fhirBaseUrl_unique", bson.D{{Key: "fhirBaseUrl", Value: 1}}, true},
	{colEHRFacilities, "sortKey", bson.D{{Key: "sortKey", Value: 1}, {Key: "_id", Value: 1}}, false},
	{colEHRFacilities, "words_sortKey", bson.D{{Key: "words", Value: 1}, {Key: "sortKey", Value: 1}}, false},
	{colEHRFacilities, "state_sortKey", bson.D{{Key: "state", Value: 1}, {Key: "sortKey", Value: 1}}, false},
	{colEHRFacilities, "postalCode", bson.D{{Key: "postalCode", Value: 1}}, false},
	{colEHRFacilities, "brand", bson.D{{Key: "brandId", Value: 1}}, false},
	{colEHRAuthorizations, "expiresAt", bson.D{{Key: "expiresAt", Value: 1}}, false},
	{colEHRConnections, "patient_issuer_unique", bson.D{{Key: "patientId", Value: 1}, {Key: "issuer", Value: 1}}, true},
	{colPullRuns, "patient_id", bson.D{{Key: "patientId", Value: 1}, {Key: "_id", Value: -1}}, false},
	{colPullRuns, "connection_outcome", bson.D{{Key: "connectionId", Value: 1}, {Key: "outcome", Value: 1}}, false},
	{colFHIRSources, "patient_fhirBase", bson.D{{Key: "patientId", Value: 1}, {Key: "fhirBase", Value: 1}}, false},
}

// Migrate creates every collection's missing indexes and returns how many
// it created. It is idempotent: indexes are compared by name and existing
// ones are left alone (FerretDB crashes on re-creating some compound unique
// indexes, and MongoDB would reject a changed definition under an old name).
func (d *DB) Migrate(ctx context.Context) (int, error) {
	byCollection := map[string][]mongo.IndexModel{}
	existing := map[string][]string{}
	var order []string
	for _, ix := range indexes {
		if _, ok := existing[ix.collection]; !ok {
			names, err := d.IndexNames(ctx, ix.collection)
			if err != nil {
				return 0, fmt.Errorf("list indexes of %s: %w", ix.collection, err)
			}
			existing[ix.collection] = names
			order = append(order, ix.collection)
		}
		if slices.Contains(existing[ix.collection], ix.name) {
			continue
		}
		opts := options.Index().SetName(ix.name)
		if ix.unique {
			opts.SetUnique(true)
		}
		byCollection[ix.collection] = append(byCollection[ix.collection], mongo.IndexModel{Keys: ix.keys, Options: opts})
	}
	created := 0
	for _, col := range order {
		if len(byCollection[col]) == 0 {
			continue
		}
		if _, err := d.c(col).Indexes().CreateMany(ctx, byCollection[col]); err != nil {
			return created, fmt.Errorf("create indexes of %s: %w", col, err)
		}
		created += len(byCollection[col])
	}
	return created, nil
}

// IndexNames returns the names of the indexes of a collection, for tests
// and the migrate command's report.
func (d *DB) IndexNames(ctx context.Context, collection string) ([]string, error) {
	cur, err := d.c(collection).Indexes().List(ctx)
	if err != nil {
		// A collection that does not exist yet has no indexes; MongoDB says
		// NamespaceNotFound (26), FerretDB may too.
		var ce mongo.CommandError
		if errors.As(err, &ce) && ce.Code == 26 {
			return nil, nil
		}
		return nil, err
	}
	var specs []struct {
		Name string `bson:"name"`
	}
	if err := cur.All(ctx, &specs); err != nil {
		return nil, err
	}
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	return names, nil
}
