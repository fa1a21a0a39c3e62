package repo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"exchange/domain"
)

// Federated sign-in's collections: the identity providers configured
// through the admin API, the links between an identity at a provider and
// an account, the invitations to link one, and the protocol state every
// instance shares (sign-ins in progress, SAML assertions already used).
// The state expires by its expiresAt, checked on every read: FerretDB has
// no TTL indexes, so the sweeper only reclaims the space.
const (
	colIdentityProviders   = "identity_providers"
	colIdentityLinks       = "identity_links"
	colIdentityInvitations = "identity_invitations"
	colPendingSignIns      = "pending_sign_ins"
	colUsedAssertions      = "used_assertions"
)

// identityProviderDoc is a document of identity_providers. clientSecret
// is sealed by the domain.
type identityProviderDoc struct {
	ID                  string    `bson:"_id"`
	Kind                string    `bson:"kind"`
	Name                string    `bson:"name"`
	Issuer              string    `bson:"issuer,omitempty"`
	ClientID            string    `bson:"clientId,omitempty"`
	ClientSecret        string    `bson:"clientSecret,omitempty"`
	Scopes              []string  `bson:"scopes,omitempty"`
	MetadataURL         string    `bson:"metadataUrl,omitempty"`
	MetadataXML         string    `bson:"metadataXml,omitempty"`
	Claims              claimsDoc `bson:"claims"`
	AllowedEmailDomains []string  `bson:"allowedEmailDomains"`
	FirstSignIn         string    `bson:"firstSignIn"`
	LinkVerifiedEmail   bool      `bson:"linkVerifiedEmail"`
	LastUpdated         time.Time `bson:"lastUpdated"`
}

type claimsDoc struct {
	Subject       string `bson:"sub,omitempty"`
	Email         string `bson:"email,omitempty"`
	EmailVerified string `bson:"email_verified,omitempty"`
	GivenName     string `bson:"given_name,omitempty"`
	FamilyName    string `bson:"family_name,omitempty"`
}

func toIdentityProviderDoc(p *domain.IdentityProvider) identityProviderDoc {
	return identityProviderDoc{ID: p.ID, Kind: string(p.Kind), Name: p.Name, Issuer: p.Issuer, ClientID: p.ClientID,
		ClientSecret: p.ClientSecret, Scopes: p.Scopes, MetadataURL: p.MetadataURL, MetadataXML: p.MetadataXML,
		Claims:              claimsDoc(p.Claims),
		AllowedEmailDomains: nonNil(p.AllowedEmailDomains), FirstSignIn: string(p.FirstSignIn),
		LinkVerifiedEmail: p.LinkVerifiedEmail, LastUpdated: p.LastUpdated}
}

func (x identityProviderDoc) provider() domain.IdentityProvider {
	return domain.IdentityProvider{ID: x.ID, Kind: domain.IdentityProviderKind(x.Kind), Name: x.Name, Issuer: x.Issuer,
		ClientID: x.ClientID, ClientSecret: x.ClientSecret, Scopes: x.Scopes, MetadataURL: x.MetadataURL, MetadataXML: x.MetadataXML,
		Claims: domain.ClaimMap(x.Claims), AllowedEmailDomains: x.AllowedEmailDomains,
		FirstSignIn: domain.FirstSignIn(x.FirstSignIn), LinkVerifiedEmail: x.LinkVerifiedEmail, LastUpdated: x.LastUpdated.UTC()}
}

// CreateIdentityProvider implements domain.FederationStore.
func (d *DB) CreateIdentityProvider(ctx context.Context, p *domain.IdentityProvider) error {
	p.LastUpdated = d.nowMillis()
	return d.insertUnique(ctx, colIdentityProviders, toIdentityProviderDoc(p), fmt.Sprintf("id: identity provider %s already exists", p.ID))
}

// IdentityProviderByID implements domain.FederationStore.
func (d *DB) IdentityProviderByID(ctx context.Context, id string) (*domain.IdentityProvider, error) {
	var x identityProviderDoc
	if err := d.findOne(ctx, colIdentityProviders, bson.M{"_id": id}, &x, fmt.Sprintf("identity provider %s does not exist", id)); err != nil {
		return nil, err
	}
	p := x.provider()
	return &p, nil
}

// ListIdentityProviders implements domain.FederationStore: by id.
func (d *DB) ListIdentityProviders(ctx context.Context) ([]domain.IdentityProvider, error) {
	var docs []identityProviderDoc
	if err := d.findAll(ctx, colIdentityProviders, bson.M{}, &docs, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}})); err != nil {
		return nil, err
	}
	out := make([]domain.IdentityProvider, len(docs))
	for i, x := range docs {
		out[i] = x.provider()
	}
	return out, nil
}

// UpdateIdentityProvider implements domain.FederationStore, a
// compare-and-set on the version old was read at.
func (d *DB) UpdateIdentityProvider(ctx context.Context, old, p *domain.IdentityProvider) error {
	p.LastUpdated = d.nextVersion(old.LastUpdated)
	stripe := d.recordWrites.ofString("identity-provider:" + p.ID)
	stripe.Lock()
	defer stripe.Unlock()
	return d.replaceVersion(ctx, colIdentityProviders, p.ID, old.LastUpdated, toIdentityProviderDoc(p), "identity provider %s", p.ID)
}

// DeleteIdentityProvider implements domain.FederationStore: the
// invitations go first, so none outlives its provider.
func (d *DB) DeleteIdentityProvider(ctx context.Context, id string) error {
	if _, err := d.c(colIdentityInvitations).DeleteMany(ctx, bson.M{"provider": id}); err != nil {
		return err
	}
	res, err := d.c(colIdentityProviders).DeleteOne(ctx, bson.M{"_id": id})
	if err == nil && res.DeletedCount == 0 {
		return domain.Errorf(domain.CodeNotFound, "identity provider %s does not exist", id)
	}
	return err
}

// identityLinkDoc is a document of identity_links, keyed by a hash of the
// identity: _id equality is the one lookup every database serves from an
// index.
type identityLinkDoc struct {
	ID       string    `bson:"_id"`
	Issuer   string    `bson:"issuer"`
	Subject  string    `bson:"subject"`
	Provider string    `bson:"provider"`
	UserID   int64     `bson:"userId"`
	Created  time.Time `bson:"created"`
}

// identityKey is the _id of an identity's link: the issuer and subject,
// length-prefixed so that no two pairs share it.
func identityKey(issuer, subject string) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%d:%s%s", len(issuer), issuer, subject))
	return hex.EncodeToString(sum[:])
}

func toIdentityLinkDoc(l *domain.IdentityLink) identityLinkDoc {
	return identityLinkDoc{identityKey(l.Issuer, l.Subject), l.Issuer, l.Subject, l.Provider, l.UserID, l.Created.UTC().Truncate(time.Millisecond)}
}

func (x identityLinkDoc) link() domain.IdentityLink {
	return domain.IdentityLink{Issuer: x.Issuer, Subject: x.Subject, Provider: x.Provider, UserID: x.UserID, Created: x.Created.UTC()}
}

// IdentityLink implements domain.FederationStore.
func (d *DB) IdentityLink(ctx context.Context, issuer, subject string) (*domain.IdentityLink, error) {
	var x identityLinkDoc
	if err := d.findOne(ctx, colIdentityLinks, bson.M{"_id": identityKey(issuer, subject)}, &x, "the identity is not linked to an account"); err != nil {
		return nil, err
	}
	l := x.link()
	return &l, nil
}

// CreateIdentityLink implements domain.FederationStore.
func (d *DB) CreateIdentityLink(ctx context.Context, l *domain.IdentityLink) error {
	return d.insertUnique(ctx, colIdentityLinks, toIdentityLinkDoc(l), "the identity is linked to an account already")
}

// CreateLinkedUser implements domain.FederationStore without
// transactions: the link is written first, naming the user id the user is
// then stored under, so a create cut short between the two leaves a link
// whose user is missing, which the next sign-in of the identity finishes.
func (d *DB) CreateLinkedUser(ctx context.Context, u *domain.User, l *domain.IdentityLink) error {
	if l.UserID == 0 {
		id, err := d.nextID(ctx, colUsers)
		if err != nil {
			return err
		}
		l.UserID = id
		if err := d.CreateIdentityLink(ctx, l); err != nil {
			return err
		}
	}
	u.ID = l.UserID
	err := d.insertUser(ctx, u, nil)
	if domain.IsCode(err, domain.CodeDuplicate) && d.c(colUsers).FindOne(ctx, bson.M{"_id": u.ID}).Err() != nil {
		// The email is another user's: this link must not stay to
		// claim it later.
		if _, derr := d.c(colIdentityLinks).DeleteOne(context.WithoutCancel(ctx), bson.M{"_id": identityKey(l.Issuer, l.Subject), "userId": l.UserID}); derr != nil {
			return errors.Join(err, derr)
		}
	}
	return err
}

// IdentityLinksOfUser implements domain.FederationStore.
func (d *DB) IdentityLinksOfUser(ctx context.Context, userID int64) ([]domain.IdentityLink, error) {
	var docs []identityLinkDoc
	if err := d.findAll(ctx, colIdentityLinks, bson.M{"userId": userID}, &docs, options.Find().SetSort(bson.D{{Key: "created", Value: 1}})); err != nil {
		return nil, err
	}
	out := make([]domain.IdentityLink, len(docs))
	for i, x := range docs {
		out[i] = x.link()
	}
	return out, nil
}

// identityInvitationDoc is a document of identity_invitations.
type identityInvitationDoc struct {
	ID        string    `bson:"_id"` // provider:email
	Provider  string    `bson:"provider"`
	Email     string    `bson:"email"`
	InvitedBy int64     `bson:"invitedBy"`
	Created   time.Time `bson:"created"`
}

func invitationKey(provider, email string) string { return provider + ":" + email }

func (x identityInvitationDoc) invitation() domain.IdentityInvitation {
	return domain.IdentityInvitation{Provider: x.Provider, Email: x.Email, InvitedBy: x.InvitedBy, Created: x.Created.UTC()}
}

// PutIdentityInvitation implements domain.FederationStore.
func (d *DB) PutIdentityInvitation(ctx context.Context, inv *domain.IdentityInvitation) error {
	inv.Created = inv.Created.UTC().Truncate(time.Millisecond)
	id := invitationKey(inv.Provider, inv.Email)
	_, err := d.c(colIdentityInvitations).ReplaceOne(ctx, bson.M{"_id": id},
		identityInvitationDoc{ID: id, Provider: inv.Provider, Email: inv.Email, InvitedBy: inv.InvitedBy, Created: inv.Created},
		options.Replace().SetUpsert(true))
	return err
}

// IdentityInvitation implements domain.FederationStore.
func (d *DB) IdentityInvitation(ctx context.Context, provider, email string) (*domain.IdentityInvitation, error) {
	var x identityInvitationDoc
	if err := d.findOne(ctx, colIdentityInvitations, bson.M{"_id": invitationKey(provider, email)}, &x, "no such invitation"); err != nil {
		return nil, err
	}
	inv := x.invitation()
	return &inv, nil
}

// IdentityInvitations implements domain.FederationStore: by email.
func (d *DB) IdentityInvitations(ctx context.Context, provider string) ([]domain.IdentityInvitation, error) {
	var docs []identityInvitationDoc
	if err := d.findAll(ctx, colIdentityInvitations, bson.M{"provider": provider}, &docs, options.Find().SetSort(bson.D{{Key: "email", Value: 1}})); err != nil {
		return nil, err
	}
	out := make([]domain.IdentityInvitation, len(docs))
	for i, x := range docs {
		out[i] = x.invitation()
	}
	return out, nil
}

// DeleteIdentityInvitation implements domain.FederationStore.
func (d *DB) DeleteIdentityInvitation(ctx context.Context, provider, email string) error {
	res, err := d.c(colIdentityInvitations).DeleteOne(ctx, bson.M{"_id": invitationKey(provider, email)})
	if err == nil && res.DeletedCount == 0 {
		return domain.Errorf(domain.CodeNotFound, "no invitation of %s to %s", email, provider)
	}
	return err
}

// PractitionersByIdentifier implements domain.FederationStore.
func (d *DB) PractitionersByIdentifier(ctx context.Context, id string, limit int) ([]domain.User, error) {
	var docs []userDoc
	err := d.findAll(ctx, colUsers, bson.M{"identifier": id, "userType": string(domain.UserPractitioner)}, &docs,
		options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(limit)))
	if err != nil {
		return nil, err
	}
	out := make([]domain.User, len(docs))
	for i, x := range docs {
		out[i] = *x.user()
	}
	return out, nil
}

// pendingSignInDoc is a document of pending_sign_ins.
type pendingSignInDoc struct {
	ID        string    `bson:"_id"`
	Provider  string    `bson:"provider"`
	Browser   string    `bson:"browser"`
	Nonce     string    `bson:"nonce,omitempty"`
	Verifier  string    `bson:"verifier,omitempty"`
	RequestID string    `bson:"requestId,omitempty"`
	Next      string    `bson:"next,omitempty"`
	ExpiresAt time.Time `bson:"expiresAt"`
	UserID    int64     `bson:"userId,omitempty"`
	AuthTime  time.Time `bson:"authTime,omitempty"`
}

func (x pendingSignInDoc) pending() *domain.PendingSignIn {
	return &domain.PendingSignIn{ID: x.ID, Provider: x.Provider, Browser: x.Browser, Nonce: x.Nonce, Verifier: x.Verifier,
		RequestID: x.RequestID, Next: x.Next, ExpiresAt: x.ExpiresAt.UTC(), UserID: x.UserID, AuthTime: x.AuthTime.UTC()}
}

// CreatePendingSignIn stores a sign-in in progress; CodeDuplicate if its
// id is taken.
func (d *DB) CreatePendingSignIn(ctx context.Context, p *domain.PendingSignIn) error {
	return d.insertUnique(ctx, colPendingSignIns, pendingSignInDoc{ID: p.ID, Provider: p.Provider, Browser: p.Browser, Nonce: p.Nonce,
		Verifier: p.Verifier, RequestID: p.RequestID, Next: p.Next, ExpiresAt: p.ExpiresAt.UTC()}, "the sign-in already exists")
}

// acceptedKey is the _id of the record of a sign-in's acceptance: a
// record of its own, claimed by insert (unique by _id), because FerretDB
// applies a conditional update as a read then a write, which two callers
// may both pass.
func acceptedKey(id string) string { return id + "/accepted" }

// PendingSignIn returns a sign-in in progress that has not expired by
// now, with its acceptance if it has one; CodeNotFound otherwise.
func (d *DB) PendingSignIn(ctx context.Context, id string, now time.Time) (*domain.PendingSignIn, error) {
	var x pendingSignInDoc
	if err := d.findOne(ctx, colPendingSignIns, bson.M{"_id": id, "expiresAt": bson.M{"$gt": now.UTC()}}, &x, "no such sign-in in progress"); err != nil {
		return nil, err
	}
	p := x.pending()
	return p, d.readAcceptance(ctx, p)
}

// readAcceptance sets the user and time a sign-in was accepted for, if
// it was.
func (d *DB) readAcceptance(ctx context.Context, p *domain.PendingSignIn) error {
	var a pendingSignInDoc
	err := d.c(colPendingSignIns).FindOne(ctx, bson.M{"_id": acceptedKey(p.ID)}).Decode(&a)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil
	}
	p.UserID, p.AuthTime = a.UserID, a.AuthTime.UTC()
	return err
}

// TakePendingSignIn removes a sign-in in progress that has not expired by
// now and returns it, with its acceptance: of several instances taking it
// at once, one gets it, the others CodeNotFound. The one whose delete
// removed the record gets it (FerretDB's findAndModify is a read then a
// write, which two callers may both pass; a delete by _id removes a
// record once).
func (d *DB) TakePendingSignIn(ctx context.Context, id string, now time.Time) (*domain.PendingSignIn, error) {
	var x pendingSignInDoc
	err := d.c(colPendingSignIns).FindOne(ctx, bson.M{"_id": id}).Decode(&x)
	if err == nil {
		var res *mongo.DeleteResult
		if res, err = d.c(colPendingSignIns).DeleteOne(ctx, bson.M{"_id": id}); err == nil && res.DeletedCount == 0 {
			err = mongo.ErrNoDocuments
		}
	}
	if errors.Is(err, mongo.ErrNoDocuments) || (err == nil && !x.ExpiresAt.After(now)) {
		return nil, domain.Errorf(domain.CodeNotFound, "no such sign-in in progress")
	}
	if err != nil {
		return nil, err
	}
	p := x.pending()
	if err := d.readAcceptance(ctx, p); err != nil {
		return nil, err
	}
	_, err = d.c(colPendingSignIns).DeleteOne(ctx, bson.M{"_id": acceptedKey(id)})
	return p, err
}

// AcceptPendingSignIn records the user a sign-in in progress was accepted
// for, once: CodeNotFound if it is gone, expired or accepted already.
func (d *DB) AcceptPendingSignIn(ctx context.Context, id string, userID int64, authTime, now time.Time) error {
	var x pendingSignInDoc
	if err := d.findOne(ctx, colPendingSignIns, bson.M{"_id": id, "expiresAt": bson.M{"$gt": now.UTC()}}, &x, "no such sign-in in progress"); err != nil {
		return err
	}
	err := d.insertUnique(ctx, colPendingSignIns, pendingSignInDoc{ID: acceptedKey(id), UserID: userID, AuthTime: authTime.UTC(), ExpiresAt: x.ExpiresAt}, "")
	if domain.IsCode(err, domain.CodeDuplicate) {
		return domain.Errorf(domain.CodeNotFound, "the sign-in was accepted already")
	}
	return err
}

// UseAssertion records that the assertion of a key (a SAML provider's
// entity id and the assertion's id, or a backend client's jti) was
// accepted, until expiresAt;
// CodeDuplicate if it was already, on any instance, and has not expired.
func (d *DB) UseAssertion(ctx context.Context, key string, expiresAt, now time.Time) error {
	id := sha256.Sum256([]byte(key))
	doc := bson.M{"_id": hex.EncodeToString(id[:]), "expiresAt": expiresAt.UTC()}
	_, err := d.c(colUsedAssertions).InsertOne(ctx, doc)
	if !isDuplicate(err) {
		return err
	}
	// A record the sweeper has not reached yet may be past its time: an
	// assertion that old is refused for its age anyway, so replacing the
	// record loses nothing.
	res, err := d.c(colUsedAssertions).ReplaceOne(ctx, bson.M{"_id": doc["_id"], "expiresAt": bson.M{"$lte": now.UTC()}}, doc)
	if err == nil && res.MatchedCount == 0 {
		return domain.Errorf(domain.CodeDuplicate, "the assertion was used already")
	}
	return err
}
