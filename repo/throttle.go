package repo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// throttleDoc is a document of login_throttle: the failed sign-ins
// counted for one key, or (failures 0) an account known at an address. It
// counts only until expiresAt; the sweeper deletes it after.
type throttleDoc struct {
	ID          string    `bson:"_id"`
	Failures    int       `bson:"failures"`
	LastFailure time.Time `bson:"lastFailure"`
	ExpiresAt   time.Time `bson:"expiresAt"`
}

// liveThrottle returns the record of key that has not expired by now.
func (d *DB) liveThrottle(ctx context.Context, key string, now time.Time) (*throttleDoc, error) {
	var x throttleDoc
	err := d.c(colLoginThrottle).FindOne(ctx, bson.M{"_id": key}).Decode(&x)
	if errors.Is(err, mongo.ErrNoDocuments) || (err == nil && !x.ExpiresAt.After(now)) {
		return nil, nil
	}
	return &x, err
}

// LoginFailures implements domain.LoginThrottle.
func (d *DB) LoginFailures(ctx context.Context, key string, now time.Time) (int, time.Time, error) {
	x, err := d.liveThrottle(ctx, key, now)
	if x == nil || err != nil {
		return 0, time.Time{}, err
	}
	return x.Failures, x.LastFailure.UTC(), nil
}

// RecordLoginFailure implements domain.LoginThrottle without transactions:
// it counts on in a live record, else replaces an expired one, else
// inserts; when another instance wins a step's race (the replace finds the
// record renewed, the insert a duplicate), it starts over and counts on.
func (d *DB) RecordLoginFailure(ctx context.Context, key string, now, forgetAt time.Time) error {
	col := d.c(colLoginThrottle)
	fresh := throttleDoc{ID: key, Failures: 1, LastFailure: now.UTC(), ExpiresAt: forgetAt.UTC()}
	for range 3 {
		res, err := col.UpdateOne(ctx, bson.M{"_id": key, "expiresAt": bson.M{"$gt": now}},
			bson.M{"$inc": bson.M{"failures": 1}, "$max": bson.M{"lastFailure": fresh.LastFailure, "expiresAt": fresh.ExpiresAt}})
		if err != nil || res.MatchedCount > 0 {
			return err
		}
		if res, err = col.ReplaceOne(ctx, bson.M{"_id": key, "expiresAt": bson.M{"$lte": now}}, fresh); err != nil || res.MatchedCount > 0 {
			return err
		}
		if _, err := col.InsertOne(ctx, fresh); !isDuplicate(err) {
			return err
		}
	}
	return fmt.Errorf("record login failure: the record of %s kept changing", key)
}

// ForgetLoginFailures implements domain.LoginThrottle.
func (d *DB) ForgetLoginFailures(ctx context.Context, key string) error {
	_, err := d.c(colLoginThrottle).DeleteOne(ctx, bson.M{"_id": key})
	return err
}

// RememberLogin implements domain.LoginThrottle.
func (d *DB) RememberLogin(ctx context.Context, key string, until time.Time) error {
	_, err := d.c(colLoginThrottle).ReplaceOne(ctx, bson.M{"_id": key}, throttleDoc{ID: key, ExpiresAt: until.UTC()},
		options.Replace().SetUpsert(true))
	return err
}

// SpendLoginProof implements domain.LoginThrottle: a unique insert, so
// that of two attempts with one proof exactly one spends it, on FerretDB
// too. Each proof names a random id of its own, so no expired record
// stands in a new one's way.
func (d *DB) SpendLoginProof(ctx context.Context, key string, until time.Time) (bool, error) {
	_, err := d.c(colLoginThrottle).InsertOne(ctx, throttleDoc{ID: key, ExpiresAt: until.UTC()})
	if isDuplicate(err) {
		return false, nil
	}
	return err == nil, err
}

// KnownLogin implements domain.LoginThrottle.
func (d *DB) KnownLogin(ctx context.Context, key string, now time.Time) (bool, error) {
	x, err := d.liveThrottle(ctx, key, now)
	return x != nil, err
}

// Sweep deletes what has expired by now: OAuth codes and tokens, the
// redemptions of invitation codes, login sessions, login throttle
// records, federated sign-ins in progress and used SAML assertions (FerretDB has no TTL indexes, so a sweeper does their work on
// both databases), and the id blocks no claim walks along any more. It returns how many documents went.
func (d *DB) Sweep(ctx context.Context, now time.Time) (int64, error) {
	total, err := d.sweepIDBlocks(ctx, now)
	if err != nil {
		return total, err
	}
	for _, col := range []string{colOAuthTokens, colInvitationRedemptions, colLoginSessions, colLoginThrottle, colPendingSignIns, colUsedAssertions, colEHRAuthorizations} {
		res, err := d.c(col).DeleteMany(ctx, bson.M{"expiresAt": bson.M{"$lt": now}})
		if err != nil {
			return total, fmt.Errorf("sweep %s: %w", col, err)
		}
		total += res.DeletedCount
	}
	return total, nil
}
