package repo

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"exchange/domain"
)

// userDoc is a document of the users collection.
type userDoc struct {
	ID                   int64     `bson:"_id"`
	Email                string    `bson:"email"`
	PasswordHash         string    `bson:"passwordHash"`
	UserType             string    `bson:"userType"`
	FirstName            string    `bson:"firstName"`
	LastName             string    `bson:"lastName"`
	IsSuperuser          bool      `bson:"isSuperuser"`
	IsStaff              bool      `bson:"isStaff"`
	IsActive             bool      `bson:"isActive"`
	DateJoined           time.Time `bson:"dateJoined"`
	LastUpdated          time.Time `bson:"lastUpdated"`
	CredentialsChangedAt time.Time `bson:"credentialsChangedAt"` // absent: never changed
	Identifier           string    `bson:"identifier,omitempty"` // a practitioner's id at the EHR
	InvitationAcceptedAt time.Time `bson:"invitationAcceptedAt,omitempty"`
}

func toUserDoc(u *domain.User) userDoc {
	return userDoc{u.ID, u.Email, u.PasswordHash, string(u.Type), u.FirstName, u.LastName, u.IsSuperuser, u.IsStaff, u.IsActive,
		u.DateJoined, u.LastUpdated, u.CredentialsChangedAt.UTC().Truncate(time.Millisecond), u.Identifier,
		u.InvitationAcceptedAt.UTC().Truncate(time.Millisecond)}
}

func (x userDoc) user() *domain.User {
	return &domain.User{ID: x.ID, Email: x.Email, PasswordHash: x.PasswordHash, Type: domain.UserType(x.UserType),
		FirstName: x.FirstName, LastName: x.LastName, IsSuperuser: x.IsSuperuser, IsStaff: x.IsStaff, IsActive: x.IsActive,
		DateJoined: x.DateJoined.UTC(), LastUpdated: x.LastUpdated.UTC(), CredentialsChangedAt: x.CredentialsChangedAt.UTC(),
		Identifier: x.Identifier, InvitationAcceptedAt: x.InvitationAcceptedAt.UTC()}
}

// CreateUser implements domain.UserStore.
func (d *DB) CreateUser(ctx context.Context, u *domain.User) error {
	id, err := d.nextID(ctx, colUsers)
	if err != nil {
		return err
	}
	u.ID = id
	return d.insertUser(ctx, u, nil)
}

// emailKey is the claim key of an email address: how a user insert that
// collides with the user of an interrupted create finds its intent.
func emailKey(email string) string { return claimKey("email", email) }

// insertUser stores u (its ID set), for the write under intent own (nil:
// none). An email taken by the user of a create that was cut short is
// freed first, by repairing its intent.
func (d *DB) insertUser(ctx context.Context, u *domain.User, own *intentDoc) error {
	u.LastUpdated = d.nowMillis()
	u.DateJoined = u.DateJoined.UTC().Truncate(time.Millisecond)
	insert := func() error {
		_, err := d.c(colUsers).InsertOne(ctx, toUserDoc(u))
		if isDuplicate(err) {
			return &domain.Error{Code: domain.CodeDuplicate, Field: "email", Message: fmt.Sprintf("email: a user with email %q already exists", u.Email)}
		}
		return err
	}
	err := insert()
	if !domain.IsCode(err, domain.CodeDuplicate) {
		return err
	}
	live, serr := d.settleKey(ctx, emailKey(u.Email), own)
	switch {
	case serr != nil:
		return serr
	case live:
		// The email's user may be a create still running, or one whose
		// process died and is not repaired yet: not taken for good.
		return domain.Errorf(domain.CodeConflict, "email: a user with email %q is being created by another request; try again later", u.Email)
	}
	return insert()
}

// CreatePractitioner implements domain.UserStore: the user, then the
// membership, under a write intent whose repair removes the user when the
// membership is not stored.
func (d *DB) CreatePractitioner(ctx context.Context, u *domain.User, m *domain.Membership) error {
	id, err := d.nextID(ctx, colUsers)
	if err != nil {
		return err
	}
	u.ID, m.UserID = id, id
	in := &intentDoc{Kind: intentPractitionerCreate, UserID: u.ID, OrganizationID: m.OrganizationID, Keys: []string{emailKey(u.Email)}}
	if err := d.open(ctx, in); err != nil {
		return err
	}
	err = d.insertUser(ctx, u, in)
	if err == nil {
		err = d.CreateMembership(ctx, m)
	}
	if err != nil {
		end, err := settledEnd(err, func() error { return d.undoPractitionerCreate(ctx, in) })
		return d.close(ctx, in, end, err)
	}
	return d.close(ctx, in, writeDone, nil)
}

// undoPractitionerCreate removes the user of a practitioner create whose
// membership is not stored: the undo of a create refused, and the repair
// of one cut short.
func (d *DB) undoPractitionerCreate(ctx context.Context, in *intentDoc) error {
	ctx = context.WithoutCancel(ctx)
	err := d.c(colMemberships).FindOne(ctx, bson.M{"organizationId": in.OrganizationID, "userId": in.UserID}).Err()
	if !errors.Is(err, mongo.ErrNoDocuments) {
		return err
	}
	_, err = d.c(colUsers).DeleteOne(ctx, bson.M{"_id": in.UserID})
	return err
}

// UserByID implements domain.UserStore.
func (d *DB) UserByID(ctx context.Context, id int64) (*domain.User, error) {
	var x userDoc
	if err := d.findOne(ctx, colUsers, bson.M{"_id": id}, &x, fmt.Sprintf("user %d does not exist", id)); err != nil {
		return nil, err
	}
	return x.user(), nil
}

// UserByEmail implements domain.UserStore.
func (d *DB) UserByEmail(ctx context.Context, email string) (*domain.User, error) {
	var x userDoc
	if err := d.findOne(ctx, colUsers, bson.M{"email": email}, &x, fmt.Sprintf("no user has email %q", email)); err != nil {
		return nil, err
	}
	return x.user(), nil
}

// UsersByIDs implements domain.UserStore.
func (d *DB) UsersByIDs(ctx context.Context, ids []int64) ([]domain.User, error) {
	var docs []userDoc
	if err := d.findAll(ctx, colUsers, withIn(nil, "_id", nonNilIDs(ids)), &docs, options.Find().SetSort(byID)); err != nil {
		return nil, err
	}
	return convert(docs, func(x userDoc) domain.User { return *x.user() }), nil
}

// ListUsers implements domain.UserStore.
func (d *DB) ListUsers(ctx context.Context, q domain.UserQuery, p domain.Page) (domain.List[domain.User], error) {
	filter := withIn(nil, "_id", q.IDs)
	if q.EmailContains != "" {
		// Emails are stored in lower case.
		filter = append(filter, bson.E{Key: "email", Value: bson.M{"$regex": regexp.QuoteMeta(strings.ToLower(q.EmailContains))}})
	}
	if q.Type != "" {
		filter = append(filter, bson.E{Key: "userType", Value: string(q.Type)})
	}
	var docs []userDoc
	total, err := d.listPage(ctx, colUsers, filter, byID, p, &docs)
	return domain.List[domain.User]{Items: convert(docs, func(x userDoc) domain.User { return *x.user() }), Total: total}, err
}

// MarkRedeemedInvitations records that a patient has a login
// (domain.User.HasLogin) when their app redeemed an invitation before the
// exchange recorded redemptions: a patient without a password nor a
// recorded redemption who holds a live refresh token of a settled grant,
// which only a redeemed invitation gives such a patient. A grant whose
// code is still active or pending is a redemption in progress (a crash
// cut it short; its retry completes it and records it), not counted.
// Without the mark an invitation could be issued for them, and whoever
// redeemed it would take their account over. It changes only such
// patients (idempotent), leaves their version as it is, and returns how
// many it marked.
func (d *DB) MarkRedeemedInvitations(ctx context.Context, now time.Time) (int64, error) {
	cur, err := d.c(colOAuthTokens).Find(ctx, bson.M{"kind": string(domain.TokenRefresh), "active": true, "expiresAt": bson.M{"$gt": now}},
		options.Find().SetProjection(bson.M{"userId": 1, "requestId": 1}))
	if err != nil {
		return 0, err
	}
	var grants []oauthTokenDoc
	if err := cur.All(ctx, &grants); err != nil || len(grants) == 0 {
		return 0, err
	}
	requests := make([]string, len(grants))
	for i, g := range grants {
		requests[i] = g.RequestID
	}
	var unsettled []string
	err = d.c(colOAuthTokens).Distinct(ctx, "requestId", bson.M{"kind": string(domain.TokenAuthorizeCode), "requestId": bson.M{"$in": requests},
		"$or": bson.A{bson.M{"active": true}, bson.M{"pending": true}}}).Decode(&unsettled)
	if err != nil {
		return 0, err
	}
	var holders []int64
	for _, g := range grants {
		if !slices.Contains(unsettled, g.RequestID) {
			holders = append(holders, g.UserID)
		}
	}
	if len(holders) == 0 {
		return 0, nil
	}
	res, err := d.c(colUsers).UpdateMany(ctx, bson.M{"_id": bson.M{"$in": holders}, "userType": string(domain.UserPatient), "passwordHash": "",
		"$or": bson.A{bson.M{"invitationAcceptedAt": bson.M{"$exists": false}}, bson.M{"invitationAcceptedAt": bson.M{"$lte": time.Time{}}}}},
		bson.M{"$set": bson.M{"invitationAcceptedAt": now.UTC().Truncate(time.Millisecond)}})
	if err != nil {
		return 0, err
	}
	return res.ModifiedCount, nil
}

// ChangeUser implements domain.UserStore: one $set of the fields the
// change names (the email is never among them: changing a unique key
// needs an insert to be checked on FerretDB), as a new version of the user
// (setUser).
func (d *DB) ChangeUser(ctx context.Context, id int64, ch domain.UserChange) (time.Time, error) {
	set := bson.M{}
	for key, v := range map[string]*string{"firstName": ch.FirstName, "lastName": ch.LastName, "passwordHash": ch.PasswordHash, "identifier": ch.Identifier} {
		if v != nil {
			set[key] = *v
		}
	}
	for key, v := range map[string]*bool{"isActive": ch.IsActive, "isSuperuser": ch.IsSuperuser, "isStaff": ch.IsStaff} {
		if v != nil {
			set[key] = *v
		}
	}
	if ch.CredentialsChangedAt != nil {
		set["credentialsChangedAt"] = ch.CredentialsChangedAt.UTC().Truncate(time.Millisecond)
	}
	if ch.InvitationAcceptedAt != nil {
		set["invitationAcceptedAt"] = ch.InvitationAcceptedAt.UTC().Truncate(time.Millisecond)
	}
	return d.setUser(ctx, id, nil, set, ch.From, fmt.Sprintf("user %d does not exist", id))
}

// userChangeAttempts bounds how often setUser reads a user again because
// other changes came first: changes made by other instances (this one's
// queue on the user's stripe).
const userChangeAttempts = 5

// setUser applies set, a $set of some of user id's fields, if the user
// matches cond (nil: any user; CodeNotFound saying missing otherwise), as
// a new version of the user: its lastUpdated moves on from the stored one
// by a millisecond at least (nextVersion), by compare-and-set on the
// version read, read again if another change came first. So no two
// versions of a user share a lastUpdated, which callers hand back as the
// version a change was made from (domain.UserChange.From), while changes
// of different fields sent at once each keep theirs. from, if not nil, is the version the change was made from:
// CodeVersionMismatch, and nothing changed, if the stored user is
// another. Returns the new version.
func (d *DB) setUser(ctx context.Context, id int64, cond, set bson.M, from *time.Time, missing string) (time.Time, error) {
	stripe := d.userWrites.of(id)
	stripe.Lock()
	defer stripe.Unlock()
	filter := bson.M{"_id": id}
	maps.Copy(filter, cond)
	for range userChangeAttempts {
		var x struct {
			LastUpdated time.Time `bson:"lastUpdated"`
		}
		if err := d.findOne(ctx, colUsers, filter, &x, missing); err != nil {
			return time.Time{}, err
		}
		if from != nil && !from.Equal(x.LastUpdated) {
			return time.Time{}, domain.Errorf(domain.CodeVersionMismatch, "user %d changed meanwhile", id)
		}
		next := d.nextVersion(x.LastUpdated)
		set["lastUpdated"] = next
		read := maps.Clone(filter)
		read["lastUpdated"] = x.LastUpdated
		res, err := d.c(colUsers).UpdateOne(ctx, read, bson.M{"$set": set})
		if err != nil {
			return time.Time{}, err
		}
		if res.MatchedCount > 0 {
			return next, nil
		}
	}
	return time.Time{}, domain.Errorf(domain.CodeConflict, "user %d is being changed by other requests; send the change again", id)
}

// CountUsers implements domain.UserStore.
func (d *DB) CountUsers(ctx context.Context) (int64, error) {
	return d.c(colUsers).CountDocuments(ctx, bson.M{})
}
