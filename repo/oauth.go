package repo

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"exchange/domain"
)

// oauthClientDoc is a document of oauth_clients.
type oauthClientDoc struct {
	ID                      string    `bson:"_id"`
	Name                    string    `bson:"name"`
	ClientType              string    `bson:"clientType"`
	SecretHash              string    `bson:"secretHash"`
	RedirectURIs            []string  `bson:"redirectUris"`
	PostLogoutRedirectURIs  []string  `bson:"postLogoutRedirectUris"`
	AllowedOrigins          []string  `bson:"allowedOrigins"`
	GrantTypes              []string  `bson:"grantTypes"`
	Algorithm               string    `bson:"algorithm"`
	Scopes                  []string  `bson:"scopes"`
	TokenEndpointAuthMethod string    `bson:"tokenEndpointAuthMethod"`
	AuthMethodPinned        bool      `bson:"authMethodPinned"`
	UserID                  *int64    `bson:"userId"`
	SkipAuthorization       bool      `bson:"skipAuthorization"`
	CreatedAt               time.Time `bson:"createdAt"`
	LastUpdated             time.Time `bson:"lastUpdated"`
	// A backend client's public keys (the JWKS as JSON text, or its URL)
	// and the practitioner or organization it acts for.
	JWKS                  string `bson:"jwks,omitempty"`
	JWKSURL               string `bson:"jwksUrl,omitempty"`
	ActsForUserID         int64  `bson:"actsForUserId,omitempty"`
	ActsForOrganizationID int64  `bson:"actsForOrganizationId,omitempty"`
}

func toClientDoc(c *domain.OAuthClient) oauthClientDoc {
	return oauthClientDoc{c.ID, c.Name, string(c.Type), c.SecretHash, nonNil(c.RedirectURIs), nonNil(c.PostLogoutRedirectURIs),
		nonNil(c.AllowedOrigins), nonNil(c.GrantTypes), c.Algorithm, nonNil(c.Scopes), c.TokenEndpointAuthMethod,
		c.AuthMethodPinned, optionalID(c.UserID), c.SkipAuthorization, c.CreatedAt, c.LastUpdated,
		c.JWKS, c.JWKSURL, c.ActsForUserID, c.ActsForOrganizationID}
}

func (x oauthClientDoc) client() *domain.OAuthClient {
	c := &domain.OAuthClient{ID: x.ID, Name: x.Name, Type: domain.ClientType(x.ClientType), SecretHash: x.SecretHash,
		RedirectURIs: x.RedirectURIs, PostLogoutRedirectURIs: x.PostLogoutRedirectURIs, AllowedOrigins: x.AllowedOrigins,
		GrantTypes: x.GrantTypes, Algorithm: x.Algorithm, Scopes: x.Scopes, TokenEndpointAuthMethod: x.TokenEndpointAuthMethod,
		AuthMethodPinned: x.AuthMethodPinned, SkipAuthorization: x.SkipAuthorization, CreatedAt: x.CreatedAt.UTC(), LastUpdated: x.LastUpdated.UTC(),
		JWKS: x.JWKS, JWKSURL: x.JWKSURL, ActsForUserID: x.ActsForUserID, ActsForOrganizationID: x.ActsForOrganizationID}
	if x.UserID != nil {
		c.UserID = *x.UserID
	}
	return c
}

func nonNil(ss []string) []string {
	if ss == nil {
		return []string{}
	}
	return ss
}

// CreateOAuthClient stores a new client; CodeDuplicate if the id is taken.
func (d *DB) CreateOAuthClient(ctx context.Context, c *domain.OAuthClient) error {
	c.CreatedAt = d.nowMillis()
	c.LastUpdated = c.CreatedAt
	return d.insertUnique(ctx, colOAuthClients, toClientDoc(c), fmt.Sprintf("client %q already exists", c.ID))
}

// OAuthClient returns the client with that id; CodeNotFound if none.
func (d *DB) OAuthClient(ctx context.Context, id string) (*domain.OAuthClient, error) {
	var x oauthClientDoc
	if err := d.findOne(ctx, colOAuthClients, bson.M{"_id": id}, &x, fmt.Sprintf("client %q does not exist", id)); err != nil {
		return nil, err
	}
	return x.client(), nil
}

// UpdateOAuthClient replaces the stored client old with c (same id), a
// compare-and-set on the version old was read at (replaceVersion), under
// the client's stripe of recordWrites.
func (d *DB) UpdateOAuthClient(ctx context.Context, old, c *domain.OAuthClient) error {
	c.LastUpdated = d.nextVersion(old.LastUpdated)
	stripe := d.recordWrites.ofString(c.ID)
	stripe.Lock()
	defer stripe.Unlock()
	return d.replaceVersion(ctx, colOAuthClients, c.ID, old.LastUpdated, toClientDoc(c), "client %q", c.ID)
}

// OAuthClients returns every client, oldest first.
func (d *DB) OAuthClients(ctx context.Context) ([]domain.OAuthClient, error) {
	var docs []oauthClientDoc
	if err := d.findAll(ctx, colOAuthClients, bson.M{}, &docs, options.Find().SetSort(bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}})); err != nil {
		return nil, err
	}
	out := make([]domain.OAuthClient, len(docs))
	for i, x := range docs {
		out[i] = *x.client()
	}
	return out, nil
}

// oauthTokenDoc is a document of oauth_tokens, keyed by kind and signature.
type oauthTokenDoc struct {
	ID        string    `bson:"_id"` // kind:signature
	Kind      string    `bson:"kind"`
	RequestID string    `bson:"requestId"`
	ClientID  string    `bson:"clientId"`
	UserID    int64     `bson:"userId"`
	Active    bool      `bson:"active"`
	Pending   bool      `bson:"pending,omitempty"`
	IssuedAt  time.Time `bson:"issuedAt"`
	ExpiresAt time.Time `bson:"expiresAt"`
	Request   string    `bson:"request"` // JSON, owned by package oauth
	// Invitation marks a patient's invitation code (absent on others).
	Invitation bool `bson:"invitation,omitempty"`
}

func tokenID(kind domain.OAuthTokenKind, signature string) string {
	return string(kind) + ":" + signature
}

// CreateOAuthToken stores a token record; CodeDuplicate if (kind, signature)
// is taken.
func (d *DB) CreateOAuthToken(ctx context.Context, t *domain.OAuthToken) error {
	doc := oauthTokenDoc{tokenID(t.Kind, t.Signature), string(t.Kind), t.RequestID, t.ClientID, t.UserID, t.Active, t.Pending,
		t.IssuedAt.UTC(), t.ExpiresAt.UTC(), string(t.Request), t.Invitation}
	return d.insertUnique(ctx, colOAuthTokens, doc, "the token already exists")
}

// OAuthToken returns the record of (kind, signature); CodeNotFound if none.
func (d *DB) OAuthToken(ctx context.Context, kind domain.OAuthTokenKind, signature string) (*domain.OAuthToken, error) {
	var x oauthTokenDoc
	if err := d.findOne(ctx, colOAuthTokens, bson.M{"_id": tokenID(kind, signature)}, &x, "no such token"); err != nil {
		return nil, err
	}
	return x.token(), nil
}

func (x oauthTokenDoc) token() *domain.OAuthToken {
	kind, signature, _ := strings.Cut(x.ID, ":")
	return &domain.OAuthToken{Kind: domain.OAuthTokenKind(kind), Signature: signature, RequestID: x.RequestID, ClientID: x.ClientID,
		UserID: x.UserID, Active: x.Active, Pending: x.Pending, IssuedAt: x.IssuedAt.UTC(), ExpiresAt: x.ExpiresAt.UTC(), Request: []byte(x.Request),
		Invitation: x.Invitation}
}

// Invitations returns the invitation codes of the users, oldest first,
// expired ones included until the sweeper removes them.
func (d *DB) Invitations(ctx context.Context, userIDs []int64) ([]domain.OAuthToken, error) {
	filter := bson.D{{Key: "userId", Value: bson.M{"$in": userIDs}}, {Key: "kind", Value: string(domain.TokenAuthorizeCode)},
		{Key: "invitation", Value: true}}
	cur, err := d.c(colOAuthTokens).Find(ctx, filter, options.Find().SetSort(bson.D{{Key: "issuedAt", Value: 1}, {Key: "_id", Value: 1}}))
	if err != nil {
		return nil, err
	}
	var docs []oauthTokenDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	out := make([]domain.OAuthToken, len(docs))
	for i, x := range docs {
		out[i] = *x.token()
	}
	return out, nil
}

// revoked is the update that deactivates records for good: not pending.
var revoked = bson.M{"$set": bson.M{"active": false, "pending": false}}

// DeactivateOAuthToken marks one record inactive; CodeNotFound if none.
func (d *DB) DeactivateOAuthToken(ctx context.Context, kind domain.OAuthTokenKind, signature string) error {
	res, err := d.c(colOAuthTokens).UpdateOne(ctx, bson.M{"_id": tokenID(kind, signature)}, revoked)
	if err != nil {
		return err
	}
	if res.MatchedCount == 0 {
		return domain.Errorf(domain.CodeNotFound, "no such token")
	}
	return nil
}

// DeactivateOAuthTokensOfRequest marks every record of a kind that belongs
// to the grant inactive.
func (d *DB) DeactivateOAuthTokensOfRequest(ctx context.Context, kind domain.OAuthTokenKind, requestID string) error {
	_, err := d.c(colOAuthTokens).UpdateMany(ctx, bson.M{"requestId": requestID, "kind": string(kind)}, revoked)
	return err
}

// retired is the update that marks records used by a token request not
// yet answered.
var retired = bson.M{"$set": bson.M{"active": false, "pending": true}}

// RetireOAuthTokens marks the active records of a kind of the grant,
// except keep, used and pending.
func (d *DB) RetireOAuthTokens(ctx context.Context, kind domain.OAuthTokenKind, requestID, keep string) error {
	_, err := d.c(colOAuthTokens).UpdateMany(ctx, bson.M{"requestId": requestID, "kind": string(kind), "active": true,
		"_id": bson.M{"$ne": tokenID(kind, keep)}}, retired)
	return err
}

// RetireOAuthToken marks one record used and pending; CodeNotFound if none.
func (d *DB) RetireOAuthToken(ctx context.Context, kind domain.OAuthTokenKind, signature string) error {
	res, err := d.c(colOAuthTokens).UpdateOne(ctx, bson.M{"_id": tokenID(kind, signature)}, retired)
	if err != nil {
		return err
	}
	if res.MatchedCount == 0 {
		return domain.Errorf(domain.CodeNotFound, "no such token")
	}
	return nil
}

// AnswerOAuthTokens ends the grant's token request: its records are no
// longer pending, and its PKCE and OpenID Connect records go.
func (d *DB) AnswerOAuthTokens(ctx context.Context, requestID string) error {
	if _, err := d.c(colOAuthTokens).UpdateMany(ctx, bson.M{"requestId": requestID, "pending": true},
		bson.M{"$set": bson.M{"pending": false}}); err != nil {
		return err
	}
	_, err := d.c(colOAuthTokens).DeleteMany(ctx, bson.M{"requestId": requestID,
		"kind": bson.M{"$in": []string{string(domain.TokenPKCE), string(domain.TokenOIDC)}}})
	return err
}

// DeleteOAuthToken removes one record; removing a missing one is not an error.
func (d *DB) DeleteOAuthToken(ctx context.Context, kind domain.OAuthTokenKind, signature string) error {
	_, err := d.c(colOAuthTokens).DeleteOne(ctx, bson.M{"_id": tokenID(kind, signature)})
	return err
}

// DeleteOAuthTokensOfRequest removes every record of a kind that belongs to
// the grant.
func (d *DB) DeleteOAuthTokensOfRequest(ctx context.Context, kind domain.OAuthTokenKind, requestID string) error {
	_, err := d.c(colOAuthTokens).DeleteMany(ctx, bson.M{"requestId": requestID, "kind": string(kind)})
	return err
}

// DeactivateOAuthTokensOfUser implements domain.CredentialStore: every
// record of the user, of every kind, becomes inactive, as revocation
// leaves them (fosite then refuses them, and a refresh with one revokes
// the rest of its grant).
func (d *DB) DeactivateOAuthTokensOfUser(ctx context.Context, userID int64) error {
	_, err := d.c(colOAuthTokens).UpdateMany(ctx, bson.M{"userId": userID, "active": true}, bson.M{"$set": bson.M{"active": false}})
	return err
}
