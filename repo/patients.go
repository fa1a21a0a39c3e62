package repo

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"exchange/domain"
)

// patientDoc is a document of the patients collection.
type patientDoc struct {
	ID              int64           `bson:"_id"`
	UserID          int64           `bson:"userId"`
	Name            humanNameDoc    `bson:"name"`
	NameKeys        []string        `bson:"nameKeys"`       // family and given names folded for prefix search (domain.SearchKey)
	FamilyKey       string          `bson:"familyKey"`      // the family name folded
	GivenKeys       []string        `bson:"givenKeys"`      // the given names folded
	BirthDate       *string         `bson:"birthDate"`      // YYYY-MM-DD: sorts and compares as a date
	BirthDateStart  *time.Time      `bson:"birthDateStart"` // the birth date as an instant range, for FHIR date search
	BirthDateEnd    *time.Time      `bson:"birthDateEnd"`
	Telecom         []codedValueDoc `bson:"telecom"`
	Identifiers     []codedValueDoc `bson:"identifiers"`
	IDTokens        []string        `bson:"identifierTokens"` // every form of a token search that matches
	OrganizationIDs []int64         `bson:"organizationIds"`
	LastUpdated     time.Time       `bson:"lastUpdated"`
}

type humanNameDoc struct {
	Family string   `bson:"family"`
	Given  []string `bson:"given"`
}

// codedValueDoc is a (system, value) pair: an identifier or a contact point.
type codedValueDoc struct {
	System string `bson:"system"`
	Value  string `bson:"value"`
}

// patientIdentifierDoc is a document of patient_identifiers: one per
// identifier, so that its unique index makes (system, value) unique across
// patients.
type patientIdentifierDoc struct {
	System    string    `bson:"system"`
	Value     string    `bson:"value"`
	PatientID int64     `bson:"patientId"`
	ClaimedAt time.Time `bson:"claimedAt"`
}

func (x patientDoc) patient() domain.Patient {
	p := domain.Patient{ID: x.ID, UserID: x.UserID, FamilyName: x.Name.Family, GivenNames: x.Name.Given,
		OrganizationIDs: x.OrganizationIDs, LastUpdated: x.LastUpdated.UTC()}
	if x.BirthDate != nil {
		p.BirthDate = *x.BirthDate
	}
	for _, t := range x.Telecom {
		p.Telecom = append(p.Telecom, domain.ContactPoint{System: t.System, Value: t.Value})
	}
	for _, i := range x.Identifiers {
		p.Identifiers = append(p.Identifiers, domain.Identifier{System: i.System, Value: i.Value})
	}
	return p
}

func toPatientDoc(p *domain.Patient) patientDoc {
	x := patientDoc{ID: p.ID, UserID: p.UserID, Name: humanNameDoc{p.FamilyName, nonNil(p.GivenNames)},
		Telecom: []codedValueDoc{}, Identifiers: []codedValueDoc{}, OrganizationIDs: nonNilIDs(p.OrganizationIDs), LastUpdated: p.LastUpdated}
	x.FamilyKey = domain.SearchKey(p.FamilyName)
	x.NameKeys, x.GivenKeys = []string{x.FamilyKey}, []string{}
	for _, g := range p.GivenNames {
		x.GivenKeys = append(x.GivenKeys, domain.SearchKey(g))
		x.NameKeys = append(x.NameKeys, domain.SearchKey(g))
	}
	if day, err := time.Parse(time.DateOnly, p.BirthDate); err == nil {
		end := day.Add(24*time.Hour - time.Millisecond)
		x.BirthDate, x.BirthDateStart, x.BirthDateEnd = &p.BirthDate, &day, &end
	}
	x.IDTokens = identifierTokens(p.Identifiers)
	for _, t := range p.Telecom {
		x.Telecom = append(x.Telecom, codedValueDoc{t.System, t.Value})
	}
	for _, i := range p.Identifiers {
		x.Identifiers = append(x.Identifiers, codedValueDoc{i.System, i.Value})
	}
	return x
}

// CreatePatient implements domain.PatientStore. The identifiers are claimed
// first, one insert each; if one is taken, or the patient insert fails, the
// claimed ones are released, so a refused patient leaves nothing behind.
func (d *DB) CreatePatient(ctx context.Context, p *domain.Patient) error {
	id, err := d.nextID(ctx, colPatients)
	if err != nil {
		return err
	}
	p.ID, p.LastUpdated = id, d.nowMillis()
	if err := d.claimIdentifiers(ctx, p.ID, p.Identifiers); err != nil {
		return err
	}
	if err := d.insertUnique(ctx, colPatients, toPatientDoc(p), fmt.Sprintf("user %d already has a patient record", p.UserID)); err != nil {
		return d.releaseIdentifiers(ctx, p.ID, p.Identifiers, err)
	}
	return nil
}

// orphanClaimAge is how old a claim of a patient that does not exist must
// be before another patient may take its identifier: younger claims may
// belong to a patient being created right now.
const orphanClaimAge = time.Minute

// claimIdentifiers inserts one patient_identifiers document per identifier;
// on a clash it releases the ones it claimed and returns CodeDuplicate.
func (d *DB) claimIdentifiers(ctx context.Context, patientID int64, ids []domain.Identifier) error {
	for i, id := range ids {
		err := d.claimIdentifier(ctx, patientID, id)
		if err != nil {
			return d.releaseIdentifiers(ctx, patientID, ids[:i], err)
		}
	}
	return nil
}

func (d *DB) claimIdentifier(ctx context.Context, patientID int64, id domain.Identifier) error {
	claim := patientIdentifierDoc{id.System, id.Value, patientID, d.nowMillis()}
	taken := fmt.Sprintf("identifier %s|%s belongs to another patient", id.System, id.Value)
	err := d.insertUnique(ctx, colPatientIdentifiers, claim, taken)
	if !domain.IsCode(err, domain.CodeDuplicate) {
		return err
	}
	// A claim left behind by an interrupted delete has no patient; once it
	// is old enough, it is taken over.
	var owner patientIdentifierDoc
	if err := d.c(colPatientIdentifiers).FindOne(ctx, bson.M{"system": id.System, "value": id.Value}).Decode(&owner); err != nil {
		return domain.Errorf(domain.CodeDuplicate, "%s", taken)
	}
	if owner.PatientID == patientID || d.now().Sub(owner.ClaimedAt) < orphanClaimAge {
		return domain.Errorf(domain.CodeDuplicate, "%s", taken)
	}
	err = d.c(colPatients).FindOne(ctx, bson.M{"_id": owner.PatientID}).Err()
	if !errors.Is(err, mongo.ErrNoDocuments) {
		return domain.Errorf(domain.CodeDuplicate, "%s", taken)
	}
	if _, err := d.c(colPatientIdentifiers).DeleteOne(ctx, bson.M{"system": id.System, "value": id.Value, "patientId": owner.PatientID}); err != nil {
		return err
	}
	return d.insertUnique(ctx, colPatientIdentifiers, claim, taken)
}

// releaseIdentifiers removes the patient's claims on ids after cause, and
// returns cause.
func (d *DB) releaseIdentifiers(ctx context.Context, patientID int64, ids []domain.Identifier, cause error) error {
	for _, id := range ids {
		_, err := d.c(colPatientIdentifiers).DeleteOne(context.WithoutCancel(ctx), bson.M{"system": id.System, "value": id.Value, "patientId": patientID})
		if err != nil {
			return fmt.Errorf("%w (and releasing identifier %s|%s of patient %d failed: %v)", cause, id.System, id.Value, patientID, err)
		}
	}
	return cause
}

// PatientByID implements domain.PatientStore.
func (d *DB) PatientByID(ctx context.Context, id int64) (*domain.Patient, error) {
	var x patientDoc
	if err := d.findOne(ctx, colPatients, bson.M{"_id": id}, &x, fmt.Sprintf("patient %d does not exist", id)); err != nil {
		return nil, err
	}
	p := x.patient()
	return &p, nil
}

// PatientByUserID implements domain.PatientStore.
func (d *DB) PatientByUserID(ctx context.Context, userID int64) (*domain.Patient, error) {
	var x patientDoc
	if err := d.findOne(ctx, colPatients, bson.M{"userId": userID}, &x, fmt.Sprintf("user %d has no patient record", userID)); err != nil {
		return nil, err
	}
	p := x.patient()
	return &p, nil
}

// ListPatients implements domain.PatientStore.
func (d *DB) ListPatients(ctx context.Context, q domain.PatientQuery, p domain.Page) (domain.List[domain.Patient], error) {
	filter, err := d.patientFilter(ctx, q)
	if err != nil {
		return domain.List[domain.Patient]{}, err
	}
	var docs []patientDoc
	total, err := d.listPage(ctx, colPatients, filter, byID, p, &docs)
	return domain.List[domain.Patient]{Items: convert(docs, patientDoc.patient), Total: total}, err
}

// patientFilter translates a patient query. An identifier is looked up in
// patient_identifiers (its unique index) rather than matched inside the
// identifiers array, which would need $elemMatch.
func (d *DB) patientFilter(ctx context.Context, q domain.PatientQuery) (bson.D, error) {
	ids := q.IDs
	if q.Identifier != nil {
		var claim patientIdentifierDoc
		err := d.c(colPatientIdentifiers).FindOne(ctx, bson.M{"system": q.Identifier.System, "value": q.Identifier.Value}).Decode(&claim)
		switch {
		case errors.Is(err, mongo.ErrNoDocuments):
			ids = []int64{}
		case err != nil:
			return nil, err
		case ids == nil || slices.Contains(ids, claim.PatientID):
			ids = []int64{claim.PatientID}
		default:
			ids = []int64{}
		}
	}
	filter := withIn(nil, "_id", ids)
	filter = withIn(filter, "organizationIds", q.OrganizationIDs)
	if q.NamePrefix != "" {
		filter = append(filter, bson.E{Key: "nameKeys", Value: bson.M{"$regex": "^" + regexp.QuoteMeta(q.NamePrefix)}})
	}
	return filter, nil
}

// UpdatePatient implements domain.PatientStore.
func (d *DB) UpdatePatient(ctx context.Context, old, p *domain.Patient) error {
	added := missingFrom(p.Identifiers, old.Identifiers)
	if err := d.claimIdentifiers(ctx, p.ID, added); err != nil {
		return err
	}
	p.LastUpdated = d.nowMillis()
	res, err := d.c(colPatients).ReplaceOne(ctx, bson.M{"_id": p.ID}, toPatientDoc(p))
	if err == nil {
		err = mustMatch(res.MatchedCount, "patient %d does not exist", p.ID)
	}
	if err != nil {
		return d.releaseIdentifiers(ctx, p.ID, added, err)
	}
	return d.releaseIdentifiers(ctx, p.ID, missingFrom(old.Identifiers, p.Identifiers), nil)
}

// DeletePatient implements domain.PatientStore.
func (d *DB) DeletePatient(ctx context.Context, p *domain.Patient) error {
	if err := d.deleteOne(ctx, colPatients, bson.M{"_id": p.ID}, "patient %d does not exist", p.ID); err != nil {
		return err
	}
	_, err := d.c(colPatientIdentifiers).DeleteMany(ctx, bson.M{"patientId": p.ID})
	return err
}

// missingFrom returns the identifiers of a that b lacks.
func missingFrom(a, b []domain.Identifier) []domain.Identifier {
	var out []domain.Identifier
	for _, id := range a {
		if !slices.Contains(b, id) {
			out = append(out, id)
		}
	}
	return out
}

// PatientIDs implements domain.PatientStore.
func (d *DB) PatientIDs(ctx context.Context, q domain.PatientQuery) ([]int64, error) {
	filter, err := d.patientFilter(ctx, q)
	if err != nil {
		return nil, err
	}
	var docs []idDoc
	if err := d.findAll(ctx, colPatients, filter, &docs, options.Find().SetSort(byID).SetProjection(bson.M{"_id": 1})); err != nil {
		return nil, err
	}
	return convert(docs, func(x idDoc) int64 { return x.ID }), nil
}
