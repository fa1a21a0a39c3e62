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

// throttleDoc is a document of login_throttle: the failed logins counted for
// one key in one window. The sweeper removes it after expiresAt.
type throttleDoc struct {
	ID        string    `bson:"_id"` // key@window start (Unix seconds)
	Failures  int       `bson:"failures"`
	ExpiresAt time.Time `bson:"expiresAt"`
}

func throttleID(key string, windowStart time.Time) string {
	return fmt.Sprintf("%s@%d", key, windowStart.Unix())
}

// LoginFailures implements domain.LoginThrottle.
func (d *DB) LoginFailures(ctx context.Context, key string, windowStart time.Time) (int, error) {
	var x throttleDoc
	err := d.c(colLoginThrottle).FindOne(ctx, bson.M{"_id": throttleID(key, windowStart)}).Decode(&x)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return 0, nil
	}
	return x.Failures, err
}

// RecordLoginFailure implements domain.LoginThrottle.
func (d *DB) RecordLoginFailure(ctx context.Context, key string, windowStart, expires time.Time) error {
	_, err := d.c(colLoginThrottle).UpdateOne(ctx, bson.M{"_id": throttleID(key, windowStart)},
		bson.M{"$inc": bson.M{"failures": 1}, "$setOnInsert": bson.M{"expiresAt": expires}},
		options.UpdateOne().SetUpsert(true))
	return err
}

// Sweep deletes what has expired by now: OAuth codes and tokens and login
// throttle counters (FerretDB has no TTL indexes, so a sweeper does their
// work on both databases). It returns how many documents went.
func (d *DB) Sweep(ctx context.Context, now time.Time) (int64, error) {
	var total int64
	for _, col := range []string{colOAuthTokens, colLoginThrottle} {
		res, err := d.c(col).DeleteMany(ctx, bson.M{"expiresAt": bson.M{"$lt": now}})
		if err != nil {
			return total, fmt.Errorf("sweep %s: %w", col, err)
		}
		total += res.DeletedCount
	}
	return total, nil
}
