package repo

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"exchange/domain"
)

// organizationDoc is a document of the organizations collection; partOf is
// null for a top-level organization.
type organizationDoc struct {
	ID          int64     `bson:"_id"`
	Name        string    `bson:"name"`
	Type        string    `bson:"type"`
	PartOf      *int64    `bson:"partOf"`
	LastUpdated time.Time `bson:"lastUpdated"`
}

func (x organizationDoc) organization() domain.Organization {
	o := domain.Organization{ID: x.ID, Name: x.Name, Type: domain.OrganizationType(x.Type), LastUpdated: x.LastUpdated.UTC()}
	if x.PartOf != nil {
		o.PartOf = *x.PartOf
	}
	return o
}

func toOrganizationDoc(o *domain.Organization) organizationDoc {
	return organizationDoc{o.ID, o.Name, string(o.Type), optionalID(o.PartOf), o.LastUpdated}
}

// membershipDoc is a document of the memberships collection; role is null
// for a membership without a role.
type membershipDoc struct {
	OrganizationID int64     `bson:"organizationId"`
	UserID         int64     `bson:"userId"`
	Role           *string   `bson:"role"`
	LastUpdated    time.Time `bson:"lastUpdated"`
}

func (x membershipDoc) membership() domain.Membership {
	m := domain.Membership{OrganizationID: x.OrganizationID, UserID: x.UserID, LastUpdated: x.LastUpdated.UTC()}
	if x.Role != nil {
		m.Role = domain.Role(*x.Role)
	}
	return m
}

func roleValue(r domain.Role) *string {
	if r == domain.RoleNone {
		return nil
	}
	s := string(r)
	return &s
}

func optionalID(id int64) *int64 {
	if id == 0 {
		return nil
	}
	return &id
}

// CreateOrganization implements domain.OrganizationStore.
func (d *DB) CreateOrganization(ctx context.Context, o *domain.Organization) error {
	id, err := d.nextID(ctx, colOrganizations)
	if err != nil {
		return err
	}
	o.ID, o.LastUpdated = id, d.nowMillis()
	_, err = d.c(colOrganizations).InsertOne(ctx, toOrganizationDoc(o))
	return err
}

// OrganizationByID implements domain.OrganizationStore.
func (d *DB) OrganizationByID(ctx context.Context, id int64) (*domain.Organization, error) {
	var x organizationDoc
	if err := d.findOne(ctx, colOrganizations, bson.M{"_id": id}, &x, fmt.Sprintf("organization %d does not exist", id)); err != nil {
		return nil, err
	}
	o := x.organization()
	return &o, nil
}

// OrganizationsByIDs implements domain.OrganizationStore.
func (d *DB) OrganizationsByIDs(ctx context.Context, ids []int64) ([]domain.Organization, error) {
	var docs []organizationDoc
	if err := d.findAll(ctx, colOrganizations, withIn(nil, "_id", nonNilIDs(ids)), &docs, options.Find().SetSort(byID)); err != nil {
		return nil, err
	}
	return convert(docs, organizationDoc.organization), nil
}

// OrganizationByName implements domain.OrganizationStore.
func (d *DB) OrganizationByName(ctx context.Context, name string, partOf int64) (*domain.Organization, error) {
	var x organizationDoc
	filter := bson.M{"partOf": optionalID(partOf), "name": name}
	if err := d.findOne(ctx, colOrganizations, filter, &x, fmt.Sprintf("no organization is named %q", name),
		options.FindOne().SetSort(byID)); err != nil {
		return nil, err
	}
	o := x.organization()
	return &o, nil
}

// ListOrganizations implements domain.OrganizationStore.
func (d *DB) ListOrganizations(ctx context.Context, q domain.OrganizationQuery, p domain.Page) (domain.List[domain.Organization], error) {
	filter := withIn(nil, "_id", q.IDs)
	if q.PartOf != nil {
		filter = append(filter, bson.E{Key: "partOf", Value: optionalID(*q.PartOf)})
	}
	var docs []organizationDoc
	total, err := d.listPage(ctx, colOrganizations, filter, byID, p, &docs)
	return domain.List[domain.Organization]{Items: convert(docs, organizationDoc.organization), Total: total}, err
}

// AllOrganizations implements domain.OrganizationStore.
func (d *DB) AllOrganizations(ctx context.Context) ([]domain.Organization, error) {
	var docs []organizationDoc
	if err := d.findAll(ctx, colOrganizations, bson.D{}, &docs, options.Find().SetSort(byID)); err != nil {
		return nil, err
	}
	return convert(docs, organizationDoc.organization), nil
}

// OrganizationsPartOf implements domain.OrganizationStore. MongoDB answers
// it from the partOf_name index.
func (d *DB) OrganizationsPartOf(ctx context.Context, ids []int64) ([]domain.Organization, error) {
	var docs []organizationDoc
	if err := d.findAll(ctx, colOrganizations, withIn(nil, "partOf", nonNilIDs(ids)), &docs, options.Find().SetSort(byID)); err != nil {
		return nil, err
	}
	return convert(docs, organizationDoc.organization), nil
}

// UpdateOrganization implements domain.OrganizationStore: a
// compare-and-set on the version old was read at (replaceVersion).
func (d *DB) UpdateOrganization(ctx context.Context, old, o *domain.Organization) error {
	o.LastUpdated = d.nextVersion(old.LastUpdated)
	return d.replaceRecord(ctx, colOrganizations, o.ID, old.LastUpdated, toOrganizationDoc(o), "organization")
}

// DeleteOrganization implements domain.OrganizationStore: its memberships,
// then the organization, under a write intent that a retry or the repair
// finishes.
func (d *DB) DeleteOrganization(ctx context.Context, id int64) error {
	if stored, err := d.exists(ctx, colOrganizations, id); err != nil || !stored {
		return cmp.Or(err, error(domain.Errorf(domain.CodeNotFound, "organization %d does not exist", id)))
	}
	in := &intentDoc{Kind: intentOrganizationDelete, OrganizationID: id}
	if err := d.open(ctx, in); err != nil {
		return err
	}
	err := d.deleteOrganizationDocuments(ctx, id)
	return d.close(ctx, in, forwardEnd(err), err)
}

// repairOrganizationDelete is the repair of an organization delete cut
// short: the delete again.
func (d *DB) repairOrganizationDelete(ctx context.Context, in *intentDoc) error {
	return d.deleteOrganizationDocuments(ctx, in.OrganizationID)
}

// deleteOrganizationDocuments removes an organization and its
// memberships; what is gone already is no error.
func (d *DB) deleteOrganizationDocuments(ctx context.Context, id int64) error {
	if _, err := d.c(colMemberships).DeleteMany(ctx, bson.M{"organizationId": id}); err != nil {
		return err
	}
	_, err := d.c(colOrganizations).DeleteOne(ctx, bson.M{"_id": id})
	return err
}

// CreateMembership implements domain.OrganizationStore.
func (d *DB) CreateMembership(ctx context.Context, m *domain.Membership) error {
	m.LastUpdated = d.nowMillis()
	return d.insertUnique(ctx, colMemberships, membershipDoc{m.OrganizationID, m.UserID, roleValue(m.Role), m.LastUpdated},
		fmt.Sprintf("user %d is already a member of organization %d", m.UserID, m.OrganizationID))
}

// Membership implements domain.OrganizationStore.
func (d *DB) Membership(ctx context.Context, organizationID, userID int64) (*domain.Membership, error) {
	var x membershipDoc
	if err := d.findOne(ctx, colMemberships, bson.M{"organizationId": organizationID, "userId": userID}, &x,
		fmt.Sprintf("user %d is not a member of organization %d", userID, organizationID)); err != nil {
		return nil, err
	}
	m := x.membership()
	return &m, nil
}

// MembershipsOfUsers implements domain.OrganizationStore.
func (d *DB) MembershipsOfUsers(ctx context.Context, userIDs []int64) ([]domain.Membership, error) {
	var docs []membershipDoc
	if err := d.findAll(ctx, colMemberships, withIn(nil, "userId", nonNilIDs(userIDs)), &docs,
		options.Find().SetSort(bson.D{{Key: "userId", Value: 1}, {Key: "organizationId", Value: 1}})); err != nil {
		return nil, err
	}
	return convert(docs, membershipDoc.membership), nil
}

// MembershipsOfOrganizations implements domain.OrganizationStore.
func (d *DB) MembershipsOfOrganizations(ctx context.Context, organizationIDs []int64, p domain.Page) (domain.List[domain.Membership], error) {
	var docs []membershipDoc
	total, err := d.listPage(ctx, colMemberships, withIn(nil, "organizationId", nonNilIDs(organizationIDs)),
		bson.D{{Key: "organizationId", Value: 1}, {Key: "userId", Value: 1}}, p, &docs)
	return domain.List[domain.Membership]{Items: convert(docs, membershipDoc.membership), Total: total}, err
}

// UpdateMembership implements domain.OrganizationStore: it changes the role.
func (d *DB) UpdateMembership(ctx context.Context, m *domain.Membership) error {
	m.LastUpdated = d.nowMillis()
	res, err := d.c(colMemberships).UpdateOne(ctx, bson.M{"organizationId": m.OrganizationID, "userId": m.UserID},
		bson.M{"$set": bson.M{"role": roleValue(m.Role), "lastUpdated": m.LastUpdated}})
	if err != nil {
		return err
	}
	return mustMatch(res.MatchedCount, "user %d is not a member of organization %d", m.UserID, m.OrganizationID)
}

// DeleteMembership implements domain.OrganizationStore.
func (d *DB) DeleteMembership(ctx context.Context, organizationID, userID int64) error {
	return d.deleteOne(ctx, colMemberships, bson.M{"organizationId": organizationID, "userId": userID},
		"user %d is not a member of organization %d", userID, organizationID)
}
