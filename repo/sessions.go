package repo

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
)

// sessionDoc is a document of sessions: one signed-in browser.
type sessionDoc struct {
	ID        string    `bson:"_id"` // hash of the cookie value
	UserID    int64     `bson:"userId"`
	AuthTime  time.Time `bson:"authTime"`
	LastUsed  time.Time `bson:"lastUsed"`
	ExpiresAt time.Time `bson:"expiresAt"`
}

// CreateLoginSession stores a new login session; CodeDuplicate if its id
// is taken.
func (d *DB) CreateLoginSession(ctx context.Context, s *domain.LoginSession) error {
	doc := sessionDoc{s.ID, s.UserID, s.AuthTime.UTC(), s.LastUsed.UTC(), s.ExpiresAt.UTC()}
	return d.insertUnique(ctx, colLoginSessions, doc, "the session already exists")
}

// LoginSession returns the session with that id; CodeNotFound if none.
func (d *DB) LoginSession(ctx context.Context, id string) (*domain.LoginSession, error) {
	var x sessionDoc
	if err := d.findOne(ctx, colLoginSessions, bson.M{"_id": id}, &x, "no such session"); err != nil {
		return nil, err
	}
	return &domain.LoginSession{ID: x.ID, UserID: x.UserID, AuthTime: x.AuthTime.UTC(), LastUsed: x.LastUsed.UTC(), ExpiresAt: x.ExpiresAt.UTC()}, nil
}

// TouchLoginSession records a use of the session; a session ended
// meanwhile stays ended.
func (d *DB) TouchLoginSession(ctx context.Context, id string, lastUsed, expiresAt time.Time) error {
	_, err := d.c(colLoginSessions).UpdateOne(ctx, bson.M{"_id": id},
		bson.M{"$max": bson.M{"lastUsed": lastUsed.UTC(), "expiresAt": expiresAt.UTC()}})
	return err
}

// DeleteLoginSession ends one session; ending a missing one is not an
// error.
func (d *DB) DeleteLoginSession(ctx context.Context, id string) error {
	_, err := d.c(colLoginSessions).DeleteOne(ctx, bson.M{"_id": id})
	return err
}

// DeleteLoginSessionsOfUser implements domain.CredentialStore.
func (d *DB) DeleteLoginSessionsOfUser(ctx context.Context, userID int64) error {
	_, err := d.c(colLoginSessions).DeleteMany(ctx, bson.M{"userId": userID})
	return err
}
