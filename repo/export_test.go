package repo

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// RawDocument returns a stored document as the Mongo shell would see it.
func RawDocument(ctx context.Context, d *DB, collection string, id any) (bson.M, error) {
	var m bson.M
	err := d.c(collection).FindOne(ctx, bson.M{"_id": id}).Decode(&m)
	return m, err
}
