package repo

import (
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

func (x organizationDoc) organization() *domain.Organization {
	o := &domain.Organization{ID: x.ID, Name: x.Name, Type: domain.OrganizationType(x.Type), LastUpdated: x.LastUpdated.UTC()}
	if x.PartOf != nil {
		o.PartOf = *x.PartOf
	}
	return o
}

// membershipDoc is a document of the memberships collection; role is null
// for a membership without a role.
type membershipDoc struct {
	OrganizationID int64     `bson:"organizationId"`
	UserID         int64     `bson:"userId"`
	Role           *string   `bson:"role"`
	LastUpdated    time.Time `bson:"lastUpdated"`
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
	_, err = d.c(colOrganizations).InsertOne(ctx, organizationDoc{o.ID, o.Name, string(o.Type), optionalID(o.PartOf), o.LastUpdated})
	return err
}

// OrganizationByID implements domain.OrganizationStore.
func (d *DB) OrganizationByID(ctx context.Context, id int64) (*domain.Organization, error) {
	var x organizationDoc
	if err := d.findOne(ctx, colOrganizations, bson.M{"_id": id}, &x, fmt.Sprintf("organization %d does not exist", id)); err != nil {
		return nil, err
	}
	return x.organization(), nil
}

// OrganizationByName implements domain.OrganizationStore.
func (d *DB) OrganizationByName(ctx context.Context, name string, partOf int64) (*domain.Organization, error) {
	var x organizationDoc
	filter := bson.M{"partOf": optionalID(partOf), "name": name}
	if err := d.findOne(ctx, colOrganizations, filter, &x, fmt.Sprintf("no organization is named %q", name),
		options.FindOne().SetSort(bson.D{{Key: "_id", Value: 1}})); err != nil {
		return nil, err
	}
	return x.organization(), nil
}

// CreateMembership implements domain.OrganizationStore.
func (d *DB) CreateMembership(ctx context.Context, m *domain.Membership) error {
	m.LastUpdated = d.nowMillis()
	var role *string
	if m.Role != domain.RoleNone {
		r := string(m.Role)
		role = &r
	}
	return d.insertUnique(ctx, colMemberships, membershipDoc{m.OrganizationID, m.UserID, role, m.LastUpdated},
		fmt.Sprintf("user %d is already a member of organization %d", m.UserID, m.OrganizationID))
}

// MembershipsOfUser implements domain.OrganizationStore.
func (d *DB) MembershipsOfUser(ctx context.Context, userID int64) ([]domain.Membership, error) {
	var docs []membershipDoc
	if err := d.findAll(ctx, colMemberships, bson.M{"userId": userID}, &docs, options.Find().SetSort(bson.D{{Key: "organizationId", Value: 1}})); err != nil {
		return nil, err
	}
	out := make([]domain.Membership, len(docs))
	for i, x := range docs {
		out[i] = domain.Membership{OrganizationID: x.OrganizationID, UserID: x.UserID, LastUpdated: x.LastUpdated.UTC()}
		if x.Role != nil {
			out[i].Role = domain.Role(*x.Role)
		}
	}
	return out, nil
}
