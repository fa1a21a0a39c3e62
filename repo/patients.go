package repo

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
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

// CreatePatient implements domain.PatientStore: the patient's user, the
// claims on its identifiers, then the record, under a write intent. A
// refusal undoes what was written; a crash leaves the intent, whose
// repair does the same when the record is not stored, and so does a
// command whose outcome is unknown (settledEnd): it may still land.
func (d *DB) CreatePatient(ctx context.Context, u *domain.User, p *domain.Patient) error {
	userID, err := d.nextID(ctx, colUsers)
	if err != nil {
		return err
	}
	if p.ID, err = d.nextID(ctx, colPatients); err != nil {
		return err
	}
	u.ID, p.UserID = userID, userID
	in := &intentDoc{Kind: intentPatientCreate, UserID: u.ID, PatientID: p.ID, Keys: []string{emailKey(u.Email)}}
	for _, id := range p.Identifiers {
		in.Keys = append(in.Keys, claimKey(id.System, id.Value))
	}
	if err := d.open(ctx, in); err != nil {
		return err
	}
	err = d.insertUser(ctx, u, in)
	if err == nil {
		p.LastUpdated = d.nowMillis()
		err = d.claimIdentifiers(ctx, in, p.ID, p.Identifiers)
	}
	if err == nil {
		err = d.insertUnique(ctx, colPatients, toPatientDoc(p), fmt.Sprintf("user %d already has a patient record", p.UserID))
	}
	if err != nil {
		end, err := settledEnd(err, func() error { return d.undoPatientCreate(ctx, in) })
		return d.close(ctx, in, end, err)
	}
	return d.close(ctx, in, writeDone, nil)
}

// undoPatientCreate removes what a patient create wrote, unless its
// record is stored (then the create is complete): the undo of a create
// refused, and the repair of one cut short.
func (d *DB) undoPatientCreate(ctx context.Context, in *intentDoc) error {
	ctx = context.WithoutCancel(ctx)
	if stored, err := d.exists(ctx, colPatients, in.PatientID); stored || err != nil {
		return err
	}
	if _, err := d.c(colPatientIdentifiers).DeleteMany(ctx, bson.M{"patientId": in.PatientID}); err != nil {
		return err
	}
	_, err := d.c(colUsers).DeleteOne(ctx, bson.M{"_id": in.UserID})
	return err
}

// claimIdentifiers inserts one patient_identifiers document per identifier,
// for the write under intent in, up to the first it cannot claim. It
// releases nothing: a claim it found may be one the patient's stored
// record relies on. Its caller's undo (a create's) or settle (an
// update's) releases, from what is stored, the claims that are not due.
func (d *DB) claimIdentifiers(ctx context.Context, in *intentDoc, patientID int64, ids []domain.Identifier) error {
	for _, id := range ids {
		if err := d.claimIdentifier(ctx, in, patientID, id); err != nil {
			return err
		}
	}
	return nil
}

// claimIdentifier claims one identifier for the patient. A claim of the
// patient itself (a retry) is kept; one of a patient that is not stored
// belongs to a write still running (a conflict), or was left by one cut
// short: its intent is repaired, or, with none, the claim is taken over.
func (d *DB) claimIdentifier(ctx context.Context, in *intentDoc, patientID int64, id domain.Identifier) error {
	taken := fmt.Sprintf("identifier %s|%s belongs to another patient", id.System, id.Value)
	for attempt := 0; attempt < 3; attempt++ {
		claim := patientIdentifierDoc{id.System, id.Value, patientID, d.nowMillis()}
		err := d.insertUnique(ctx, colPatientIdentifiers, claim, taken)
		if !domain.IsCode(err, domain.CodeDuplicate) {
			return err
		}
		owner, found, err := d.patientClaim(ctx, id)
		switch {
		case err != nil:
			return err
		case !found:
			continue // released meanwhile
		case owner == patientID:
			return nil
		}
		if stored, err := d.exists(ctx, colPatients, owner); stored || err != nil {
			return cmp.Or(err, error(domain.Errorf(domain.CodeDuplicate, "%s", taken)))
		}
		live, err := d.settleKey(ctx, claimKey(id.System, id.Value), in)
		if err != nil {
			return err
		}
		if live {
			return domain.Errorf(domain.CodeConflict, "identifier %s|%s is being given to patient %d by another request; try again later", id.System, id.Value, owner)
		}
		if stored, err := d.exists(ctx, colPatients, owner); stored || err != nil {
			return cmp.Or(err, error(domain.Errorf(domain.CodeDuplicate, "%s", taken)))
		}
		if _, err := d.c(colPatientIdentifiers).DeleteOne(ctx, bson.M{"system": id.System, "value": id.Value, "patientId": owner}); err != nil {
			return err
		}
	}
	return domain.Errorf(domain.CodeConflict, "identifier %s|%s is being claimed by other requests; try again later", id.System, id.Value)
}

// patientClaim returns the patient that holds an identifier.
func (d *DB) patientClaim(ctx context.Context, id domain.Identifier) (int64, bool, error) {
	var owner patientIdentifierDoc
	err := d.c(colPatientIdentifiers).FindOne(ctx, bson.M{"system": id.System, "value": id.Value}).Decode(&owner)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return 0, false, nil
	}
	return owner.PatientID, err == nil, err
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
// identifiers array, which would need $elemMatch; a value of any system is
// one equality on the identifierTokens index, whose value-only keys are
// the values themselves (fhirsearch.TokenKeys). A value with a "|" could
// also be another identifier's system|value key: the identifiers' values
// must then hold it too.
func (d *DB) patientFilter(ctx context.Context, q domain.PatientQuery) (bson.D, error) {
	ids := q.IDs
	var byValue bson.D
	if q.Identifier != nil && q.Identifier.System == "" {
		byValue = bson.D{{Key: "identifierTokens", Value: q.Identifier.Value}}
		if strings.Contains(q.Identifier.Value, "|") {
			byValue = append(byValue, bson.E{Key: "identifiers.value", Value: q.Identifier.Value})
		}
	} else if q.Identifier != nil {
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
	filter := withIn(byValue, "_id", ids)
	filter = withIn(filter, "organizationIds", q.OrganizationIDs)
	if q.NamePrefix != "" {
		filter = append(filter, bson.E{Key: "nameKeys", Value: bson.M{"$regex": "^" + regexp.QuoteMeta(q.NamePrefix)}})
	}
	return filter, nil
}

// UpdatePatient implements domain.PatientStore. An update that keeps the
// identifiers is one compare-and-set of the record (replacePatient). One
// that changes them runs under a write intent that is also the patient's
// identifier lock (openIdentifierChange): it claims the identifiers it
// adds, replaces the record if it is still old, then settles the claims
// it named against the record as stored (settlePatientClaims). A crash at
// any point leaves the intent, and the lock, until its repair settles the
// same way; so does a claim or replace whose outcome is unknown
// (settledEnd), which may still land: the repair settles once it can no
// longer do so.
//
// Why the patient's claims end as exactly the identifiers its record
// lists, under any interleaving and at every crash point:
//
//   - The record's identifiers change only by the replace of an update
//     that changes them, or with the record's delete (which removes every
//     claim of the patient): an update that keeps them writes the record
//     only if it is still the one it read, so it writes back the
//     identifiers stored.
//   - The updates that change them hold the lock from before their first
//     claim to after their settle, one at a time per patient, across
//     processes; a repair adopts the lock before it settles (repair), so
//     it too runs alone. While one holds it, the stored identifiers move
//     only by its own replace: its settle, which reads the record after
//     that replace, reads the final set, and a claim it releases is one
//     the record does not list and no other write relies on. (A claim of
//     the patient that an update finds already there is one its stored
//     record, or an earlier write, settled since, made.)
//   - Claims are inserted before the replace: the record never lists an
//     identifier it does not claim, and no other patient can claim it.
//   - A settle reads the truth and releases only what it lacks: applied
//     again (a retry, a repair after a crash in the settle), it changes
//     nothing more.
func (d *DB) UpdatePatient(ctx context.Context, old, p *domain.Patient) error {
	added, dropped := missingFrom(p.Identifiers, old.Identifiers), missingFrom(old.Identifiers, p.Identifiers)
	if len(added)+len(dropped) == 0 {
		return d.replacePatient(ctx, old, p)
	}
	stripe := d.patientWrites.of(p.ID)
	stripe.Lock()
	defer stripe.Unlock()
	in := identifierChange(p.ID, added, dropped)
	if err := d.openIdentifierChange(ctx, in); err != nil {
		return err
	}
	err := d.claimIdentifiers(ctx, in, p.ID, added)
	if err == nil {
		err = d.storePatient(ctx, old, p)
	}
	end, err := settledEnd(err, func() error { return d.settlePatientClaims(ctx, p.ID, in.Identifiers) })
	return d.close(ctx, in, end, err)
}

// identifierChange is the intent of an update of the patient's
// identifiers: the ones it adds, whose claims it takes (Keys), and those
// it drops, whose claims it releases.
func identifierChange(patientID int64, added, dropped []domain.Identifier) *intentDoc {
	in := &intentDoc{Kind: intentPatientUpdate, PatientID: patientID, Keys: []string{}}
	for _, id := range append(slices.Clone(added), dropped...) {
		in.Identifiers = append(in.Identifiers, codedValueDoc{id.System, id.Value})
	}
	for _, id := range added {
		in.Keys = append(in.Keys, claimKey(id.System, id.Value))
	}
	return in
}

// identifierChangeID is the _id of the intent of any update of the
// patient's identifiers: the patient id, with no time and no randomness
// in it, so that a second such intent of the patient is a duplicate key.
// The insert is the lock: atomic on MongoDB and on FerretDB alike.
func identifierChangeID(patientID int64) bson.ObjectID {
	var id bson.ObjectID
	binary.BigEndian.PutUint64(id[4:], uint64(patientID))
	return id
}

// openIdentifierChange records the intent in of an update of the
// patient's identifiers, which takes the patient's identifier lock. A
// lock left by a write that is gone is repaired on the spot and taken;
// one of a write still running (on another instance: this one's queue on
// the patient's stripe) refuses the update with CodeConflict. A lock whose
// write returned without settling, or without removing it, was given up
// (giveUp): it refuses the update as well for leaseTimeout, while that
// write's last command may still land, then is repaired on the spot.
func (d *DB) openIdentifierChange(ctx context.Context, in *intentDoc) error {
	in.ID = identifierChangeID(in.PatientID)
	for attempt := 0; attempt < 3; attempt++ {
		err := d.open(ctx, in)
		if !isDuplicate(err) {
			return err
		}
		live, err := d.settleIntents(ctx, bson.M{"_id": in.ID}, nil)
		if err != nil {
			return err
		}
		if live {
			break
		}
	}
	return domain.Errorf(domain.CodeConflict, "the identifiers of patient %d are being changed by another request; send the change again", in.PatientID)
}

// replacePatient stores p in place of old, if the stored record is still
// old (storePatient), holding the patient's stripe.
func (d *DB) replacePatient(ctx context.Context, old, p *domain.Patient) error {
	stripe := d.patientWrites.of(p.ID)
	stripe.Lock()
	defer stripe.Unlock()
	return d.storePatient(ctx, old, p)
}

// storePatient stores p in place of old, if the stored record is still
// old: lastUpdated is the record's version, which every replace moves on
// (by a millisecond at least), so that of two updates read from the same
// record the second is refused instead of dropping the first's fields.
// The caller holds the patient's stripe.
func (d *DB) storePatient(ctx context.Context, old, p *domain.Patient) error {
	p.LastUpdated = d.nextVersion(old.LastUpdated)
	return d.replaceVersion(ctx, colPatients, p.ID, old.LastUpdated, toPatientDoc(p), "patient %d", p.ID)
}

// repairPatientUpdate is the repair of an update of a patient's
// identifiers cut short: it settles the claims it named
// (settlePatientClaims).
func (d *DB) repairPatientUpdate(ctx context.Context, in *intentDoc) error {
	return d.settlePatientClaims(ctx, in.PatientID, in.Identifiers)
}

// settlePatientClaims releases the patient's claims on ids that its
// stored record does not list (all of them when it is gone), read now.
// Its caller holds the patient's identifier lock: an update of the
// patient's identifiers (after its replace), or the repair that adopted
// its intent; the record's identifiers cannot change meanwhile, but for
// a delete, which releases every claim itself.
func (d *DB) settlePatientClaims(ctx context.Context, patientID int64, ids []codedValueDoc) error {
	ctx = context.WithoutCancel(ctx)
	var listed []codedValueDoc
	var x patientDoc
	err := d.c(colPatients).FindOne(ctx, bson.M{"_id": patientID}).Decode(&x)
	switch {
	case err == nil:
		listed = x.Identifiers
	case !errors.Is(err, mongo.ErrNoDocuments):
		return err
	}
	for _, id := range ids {
		if slices.Contains(listed, id) {
			continue
		}
		if _, err := d.c(colPatientIdentifiers).DeleteOne(ctx, bson.M{"system": id.System, "value": id.Value, "patientId": patientID}); err != nil {
			return err
		}
	}
	return nil
}

// DeletePatient implements domain.PatientStore: the patient's answers,
// enrollments, login, record and identifier claims, under a write intent
// that a retry or the repair finishes.
func (d *DB) DeletePatient(ctx context.Context, p *domain.Patient) error {
	in := &intentDoc{Kind: intentPatientDelete, PatientID: p.ID, UserID: p.UserID}
	if err := d.open(ctx, in); err != nil {
		return err
	}
	err := d.deletePatientDocuments(ctx, p.ID, p.UserID)
	return d.close(ctx, in, forwardEnd(err), err)
}

// repairPatientDelete is the repair of a patient delete cut short: the
// delete again.
func (d *DB) repairPatientDelete(ctx context.Context, in *intentDoc) error {
	return d.deletePatientDocuments(ctx, in.PatientID, in.UserID)
}

// deletePatientDocuments removes every document of a patient; what is
// gone already is no error.
func (d *DB) deletePatientDocuments(ctx context.Context, patientID, userID int64) error {
	for _, del := range []struct {
		col    string
		filter bson.M
	}{
		{colConsents, bson.M{"patientId": patientID}},
		{colEnrollments, bson.M{"patientId": patientID}},
		{colUsers, bson.M{"_id": userID}},
		{colPatients, bson.M{"_id": patientID}},
		{colPatientIdentifiers, bson.M{"patientId": patientID}},
	} {
		if _, err := d.c(del.col).DeleteMany(ctx, del.filter); err != nil {
			return err
		}
	}
	return nil
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
