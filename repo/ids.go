package repo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Integer ids are handed out in blocks. A block is claimed by inserting
// its document into id_blocks, whose _id is "<sequence>@<first id>": the
// unique _id lets one claim of a block succeed, on MongoDB and on
// FerretDB alike. An $inc on a counter would not do: FerretDB reads and
// writes the document in two steps that concurrent callers interleave, so
// two requests (or two instances) got the same ids and one write failed.
//
// The counters document of a sequence ({_id: <sequence>, seq}) is only a
// hint of where the free ids begin. A claim starts after it; a block
// already taken sends the next try past that block's end, so the blocks of
// a sequence form one chain without gaps or overlaps. After a claim the
// hint is raised to the block's end ($max); a raise that a concurrent one
// overwrote on FerretDB costs a later caller one more try, never an id.
//
// Ids are never given back: those a refused batch reserved stay unused. A
// give-back would move the hint back and drop the block, and a claim
// racing it could then take a block across a later one: without an atomic
// update (FerretDB has none) only inserts can decide, and a gap in the ids
// costs nothing.

// maxClaimTries bounds the walk along taken blocks: the hint lags the
// chain by at most the claims that raced it.
const maxClaimTries = 1000

// idBlockRetention is how long a block stays once the hint has passed
// it. A caller that read an older hint and stalled for longer than this
// could claim a block again; a day is far beyond any request.
const idBlockRetention = 24 * time.Hour

// idBlockDoc is a document of id_blocks: the ids First..Last of a sequence
// (First is in the _id), claimed at ClaimedAt.
type idBlockDoc struct {
	ID        string    `bson:"_id"`
	Sequence  string    `bson:"sequence"`
	Last      int64     `bson:"last"`
	ClaimedAt time.Time `bson:"claimedAt"`
}

func idBlockID(sequence string, first int64) string {
	return sequence + "@" + strconv.FormatInt(first, 10)
}

// nextID returns the next integer id of the named sequence (one per
// collection of native entities).
func (d *DB) nextID(ctx context.Context, sequence string) (int64, error) {
	return d.nextIDs(ctx, sequence, 1)
}

// nextIDs reserves n consecutive ids of a sequence and returns the first.
// No two calls, in this process or any other on the same database, get
// the same id.
func (d *DB) nextIDs(ctx context.Context, sequence string, n int) (int64, error) {
	var hint struct {
		Seq int64 `bson:"seq"`
	}
	err := d.c(colCounters).FindOne(ctx, bson.M{"_id": sequence}).Decode(&hint)
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return 0, fmt.Errorf("next %s id: %w", sequence, err)
	}
	first := hint.Seq + 1
	for range maxClaimTries {
		last := first + int64(n) - 1
		_, err := d.c(colIDBlocks).InsertOne(ctx, idBlockDoc{ID: idBlockID(sequence, first), Sequence: sequence, Last: last, ClaimedAt: d.nowMillis()})
		if err == nil {
			d.raiseHint(ctx, sequence, last)
			return first, nil
		}
		if !isDuplicate(err) {
			return 0, fmt.Errorf("next %s id: %w", sequence, err)
		}
		var taken idBlockDoc
		if err := d.c(colIDBlocks).FindOne(ctx, bson.M{"_id": idBlockID(sequence, first)}).Decode(&taken); err != nil {
			return 0, fmt.Errorf("next %s id: %w", sequence, err)
		}
		first = taken.Last + 1
	}
	return 0, fmt.Errorf("next %s id: no free block after %d tries", sequence, maxClaimTries)
}

// raiseHint moves the sequence's hint up to last. Its failure costs
// later callers tries, not ids, so the claimed block is used anyway; two
// first uses of a sequence may race to insert the hint, and the loser's
// value is the smaller one.
func (d *DB) raiseHint(ctx context.Context, sequence string, last int64) {
	_, _ = d.c(colCounters).UpdateOne(ctx, bson.M{"_id": sequence}, bson.M{"$max": bson.M{"seq": last}}, options.UpdateOne().SetUpsert(true))
}

// sweepIDBlocks deletes the blocks of each sequence that end before its
// hint and were claimed more than idBlockRetention before now: the blocks
// at and after the hint are what a claim walks along.
func (d *DB) sweepIDBlocks(ctx context.Context, now time.Time) (int64, error) {
	cur, err := d.c(colCounters).Find(ctx, bson.D{})
	if err != nil {
		return 0, err
	}
	var hints []struct {
		ID  string `bson:"_id"`
		Seq int64  `bson:"seq"`
	}
	if err := cur.All(ctx, &hints); err != nil {
		return 0, err
	}
	var total int64
	for _, h := range hints {
		res, err := d.c(colIDBlocks).DeleteMany(ctx, bson.D{{Key: "sequence", Value: h.ID},
			{Key: "last", Value: bson.M{"$lt": h.Seq}}, {Key: "claimedAt", Value: bson.M{"$lt": now.Add(-idBlockRetention)}}})
		if err != nil {
			return total, fmt.Errorf("sweep %s: %w", colIDBlocks, err)
		}
		total += res.DeletedCount
	}
	return total, nil
}

// batchIDBlock is the size of the blocks the batch writers (observations,
// audit events) claim: each batch takes its ids from the block this
// process holds, and claims a new one only when that runs short. A batch
// of 100 observations cost three database round trips for its ids (read
// the hint, claim the block, raise the hint), as many as its claims and
// documents together; a block of this size pays them once per 4,096 ids.
// The ids a process holds when it stops are never used: a gap, which
// costs nothing (see above), and the ids of one process's batches still
// follow each other.
const batchIDBlock = 4096

// heldIDs are the ids this process claimed and has not handed out yet,
// per sequence: next..last.
type heldIDs struct {
	mu     sync.Mutex
	blocks map[string][2]int64
}

// batchIDs reserves n consecutive ids of a sequence for one batch and
// returns the first: from the block this process holds when it has n
// left, else from a new block of at least batchIDBlock ids (the rest of
// the old one is dropped, so that a batch's ids are consecutive, as its
// write intent names them first..last). Uniqueness is nextIDs': every
// block is claimed by one unique insert, and each id of a block is handed
// out once, under the lock.
func (d *DB) batchIDs(ctx context.Context, sequence string, n int) (int64, error) {
	h := &d.held
	h.mu.Lock()
	defer h.mu.Unlock()
	if b, ok := h.blocks[sequence]; ok && b[1]-b[0]+1 >= int64(n) {
		h.blocks[sequence] = [2]int64{b[0] + int64(n), b[1]}
		return b[0], nil
	}
	size := max(n, batchIDBlock)
	first, err := d.nextIDs(ctx, sequence, size)
	if err != nil {
		return 0, err
	}
	if h.blocks == nil {
		h.blocks = map[string][2]int64{}
	}
	h.blocks[sequence] = [2]int64{first + int64(n), first + int64(size) - 1}
	return first, nil
}
