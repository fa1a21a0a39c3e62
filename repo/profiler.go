package repo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Profiler reads from MongoDB's database profiler what the commands of an
// interval examined: the index keys and documents of every find,
// aggregate, count and getMore a request made the service run, whatever
// the plan, as explain("executionStats") would count them. It is for load
// measurements (exchange load-study): the profiler records every
// operation of the database while it is on, so it stays on only between
// Start and Stop, and Stop puts back the level it found.
type Profiler struct {
	client *mongo.Client
	db     *mongo.Database
	was    int32 // the level found at start
	slowMS int32
}

// ErrNoProfiler is the answer of a server without MongoDB's profiler: the
// embedded FerretDB, which uses no index but _id anyway.
var ErrNoProfiler = errors.New("the database has no profiler")

// StartProfiler connects to the database of uri and turns its profiler on
// for every operation. On FerretDB it returns ErrNoProfiler.
func StartProfiler(ctx context.Context, uri, database string) (*Profiler, error) {
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetServerSelectionTimeout(10 * time.Second))
	if err != nil {
		return nil, err
	}
	ferret, err := isFerretDB(ctx, client)
	if err != nil || ferret {
		_ = client.Disconnect(ctx)
		if err == nil {
			err = ErrNoProfiler
		}
		return nil, err
	}
	p := &Profiler{client: client, db: client.Database(database)}
	var level struct {
		Was    int32 `bson:"was"`
		SlowMS int32 `bson:"slowms"`
	}
	if err := p.db.RunCommand(ctx, bson.D{{Key: "profile", Value: 2}}).Decode(&level); err != nil {
		_ = client.Disconnect(ctx)
		return nil, fmt.Errorf("turn the profiler on (it takes the dbAdmin role; a mongos has none): %w", err)
	}
	p.was, p.slowMS = level.Was, level.SlowMS
	return p, nil
}

// Stop puts the profiler back to the level it had and disconnects.
func (p *Profiler) Stop(ctx context.Context) error {
	err := p.db.RunCommand(ctx, bson.D{{Key: "profile", Value: p.was}, {Key: "slowms", Value: p.slowMS}}).Err()
	return errors.Join(err, p.client.Disconnect(ctx))
}

// ProfileMark is a point in the profiler's record.
type ProfileMark time.Time

// Mark returns the time of the latest operation recorded, from which Since
// sums.
func (p *Profiler) Mark(ctx context.Context) (ProfileMark, error) {
	var last struct {
		TS time.Time `bson:"ts"`
	}
	err := p.db.Collection("system.profile").FindOne(ctx, bson.D{}, options.FindOne().SetSort(bson.D{{Key: "$natural", Value: -1}})).Decode(&last)
	if errors.Is(err, mongo.ErrNoDocuments) {
		err = nil
	}
	return ProfileMark(last.TS), err
}

// ProfiledWork is what the operations of an interval examined.
type ProfiledWork struct {
	Operations    int
	KeysExamined  int64
	DocsExamined  int64
	PlanSummaries []string // of the reads of observations and resources, distinct, in order
}

// Since sums the keys and documents examined by the operations recorded
// after the mark, every collection of the database but the profiler's own.
func (p *Profiler) Since(ctx context.Context, mark ProfileMark) (ProfiledWork, error) {
	var w ProfiledWork
	cur, err := p.db.Collection("system.profile").Find(ctx, bson.D{
		{Key: "ts", Value: bson.D{{Key: "$gt", Value: time.Time(mark)}}},
		{Key: "ns", Value: bson.D{{Key: "$ne", Value: p.db.Name() + ".system.profile"}}},
	})
	if err != nil {
		return w, err
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		var op struct {
			NS           string `bson:"ns"`
			KeysExamined int64  `bson:"keysExamined"`
			DocsExamined int64  `bson:"docsExamined"`
			PlanSummary  string `bson:"planSummary"`
		}
		if err := cur.Decode(&op); err != nil {
			return w, err
		}
		w.Operations++
		w.KeysExamined += op.KeysExamined
		w.DocsExamined += op.DocsExamined
		coll := strings.TrimPrefix(op.NS, p.db.Name()+".")
		if (coll == colObservations || coll == colResources) && op.PlanSummary != "" && !slices.Contains(w.PlanSummaries, op.PlanSummary) {
			w.PlanSummaries = append(w.PlanSummaries, op.PlanSummary)
		}
	}
	return w, cur.Err()
}
