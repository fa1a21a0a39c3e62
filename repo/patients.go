package repo

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
)

// patientDoc is a document of the patients collection.
type patientDoc struct {
	ID              int64           `bson:"_id"`
	UserID          int64           `bson:"userId"`
	Name            humanNameDoc    `bson:"name"`
	BirthDate       *string         `bson:"birthDate"` // YYYY-MM-DD: sorts and compares as a date
	Telecom         []codedValueDoc `bson:"telecom"`
	Identifiers     []codedValueDoc `bson:"identifiers"`
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
	System    string `bson:"system"`
	Value     string `bson:"value"`
	PatientID int64  `bson:"patientId"`
}

func (x patientDoc) patient() *domain.Patient {
	p := &domain.Patient{ID: x.ID, UserID: x.UserID, FamilyName: x.Name.Family, GivenNames: x.Name.Given,
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
	x := patientDoc{ID: p.ID, UserID: p.UserID, Name: humanNameDoc{p.FamilyName, p.GivenNames},
		Telecom: []codedValueDoc{}, Identifiers: []codedValueDoc{}, OrganizationIDs: p.OrganizationIDs, LastUpdated: p.LastUpdated}
	if x.Name.Given == nil {
		x.Name.Given = []string{}
	}
	if x.OrganizationIDs == nil {
		x.OrganizationIDs = []int64{}
	}
	if p.BirthDate != "" {
		x.BirthDate = &p.BirthDate
	}
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
		return d.releaseIdentifiers(ctx, p.ID, err)
	}
	return nil
}

// claimIdentifiers inserts one patient_identifiers document per identifier.
func (d *DB) claimIdentifiers(ctx context.Context, patientID int64, ids []domain.Identifier) error {
	for _, id := range ids {
		err := d.insertUnique(ctx, colPatientIdentifiers, patientIdentifierDoc{id.System, id.Value, patientID},
			fmt.Sprintf("identifier %s|%s belongs to another patient", id.System, id.Value))
		if err != nil {
			return d.releaseIdentifiers(ctx, patientID, err)
		}
	}
	return nil
}

// releaseIdentifiers undoes claimIdentifiers after cause, and returns cause.
func (d *DB) releaseIdentifiers(ctx context.Context, patientID int64, cause error) error {
	if _, err := d.c(colPatientIdentifiers).DeleteMany(context.WithoutCancel(ctx), bson.M{"patientId": patientID}); err != nil {
		return fmt.Errorf("%w (and releasing the identifiers of patient %d failed: %v)", cause, patientID, err)
	}
	return cause
}

// PatientByID implements domain.PatientStore.
func (d *DB) PatientByID(ctx context.Context, id int64) (*domain.Patient, error) {
	var x patientDoc
	if err := d.findOne(ctx, colPatients, bson.M{"_id": id}, &x, fmt.Sprintf("patient %d does not exist", id)); err != nil {
		return nil, err
	}
	return x.patient(), nil
}

// PatientByUserID implements domain.PatientStore.
func (d *DB) PatientByUserID(ctx context.Context, userID int64) (*domain.Patient, error) {
	var x patientDoc
	if err := d.findOne(ctx, colPatients, bson.M{"userId": userID}, &x, fmt.Sprintf("user %d has no patient record", userID)); err != nil {
		return nil, err
	}
	return x.patient(), nil
}
