package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// exchange doctor, as an operator runs it on a stopped service's data
// directory: what an interrupted patient create left (its login and the
// intent naming it) and an identifier claim no patient owns. The dry run
// reports both and changes nothing; the repair removes them; a third run
// finds nothing.
func TestDoctor(t *testing.T) {
	standards := filepath.Join("..", "..", "standards")
	getenv := env(map[string]string{"DATA_DIR": t.TempDir(), "EMBEDDED_MONGO_ADDR": "127.0.0.1:0",
		"FHIR_PACKAGES_DIR": filepath.Join(standards, "fhir-packages"), "FHIR_XVER_PACKAGE_DIR": filepath.Join(standards, "fhir", "xver-r4-r5", "maps"),
		"OMH_SCHEMA_DIR": filepath.Join(standards, "omh", "schemas")})
	ctx := context.Background()
	// store opens the embedded database and hands f its collections.
	store := func(f func(db *mongo.Database)) {
		t.Helper()
		s, err := loadSettings(getenv)
		if err != nil {
			t.Fatal(err)
		}
		a, err := openApp(ctx, s, slog.New(slog.DiscardHandler), true)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		client, err := mongo.Connect(options.Client().ApplyURI(a.mongoURI))
		if err != nil {
			t.Fatal(err)
		}
		defer client.Disconnect(ctx)
		f(client.Database(s.MongoDatabase))
	}
	store(func(db *mongo.Database) {
		for col, doc := range map[string]bson.M{
			"users":               {"_id": int64(50), "email": "cut@example.org", "userType": "patient"},
			"patient_identifiers": {"system": "urn:example:mrn", "value": "orphan", "patientId": int64(900)},
			"write_intents": {"_id": bson.NewObjectID(), "kind": "patient.create", "instance": "gone", "startedAt": time.Now(),
				"userId": int64(50), "patientId": int64(60), "keys": []string{}},
		} {
			if _, err := db.Collection(col).InsertOne(ctx, doc); err != nil {
				t.Fatal(err)
			}
		}
	})
	doctor := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := run(ctx, append([]string{"doctor"}, args...), getenv, nil, &out, io.Discard); err != nil {
			t.Fatalf("doctor %v: %v", args, err)
		}
		return out.String()
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--dry-run"}, []string{"Write intents: 1; abandoned, to repair: 1 (patient.create=1)",
			"Claims in patient_identifiers that no stored record owns, to release: 1"}},
		{nil, []string{"Write intents: 1; abandoned, repaired: 1 (patient.create=1)",
			"Claims in patient_identifiers that no stored record owns, released: 1"}},
		{nil, []string{"Write intents: 0;", "Nothing to repair."}},
	} {
		out := doctor(c.args...)
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("doctor %v: lacks %q:\n%s", c.args, w, out)
			}
		}
		if len(c.args) > 0 {
			store(func(db *mongo.Database) {
				if n, _ := db.Collection("users").CountDocuments(ctx, bson.M{"_id": int64(50)}); n != 1 {
					t.Errorf("the dry run removed the login of the interrupted create")
				}
			})
		}
	}
	store(func(db *mongo.Database) {
		for _, col := range []string{"users", "patient_identifiers", "write_intents"} {
			if n, _ := db.Collection(col).CountDocuments(ctx, bson.M{}); n != 0 {
				t.Errorf("%s: %d documents left after the repair", col, n)
			}
		}
	})
	if err := run(ctx, []string{"doctor", "extra"}, getenv, nil, io.Discard, io.Discard); !errors.As(err, new(usageError)) {
		t.Errorf("doctor with an argument: %v", err)
	}
}
