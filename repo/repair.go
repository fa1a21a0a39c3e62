package repo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// abandoned says whether an intent's write (or repair) can no longer be
// running: its holder's lease is gone or stale, or it is older than
// intentTimeout, or it was given up leaseTimeout ago; or the caller is
// the only process that can write (exclusive).
func (d *DB) abandoned(ctx context.Context, in *intentDoc, now time.Time, exclusive bool) (bool, error) {
	switch {
	case exclusive || now.Sub(in.Hold.Since) > intentTimeout:
		return true, nil
	case in.Hold.State == intentGivenUp: // its last write may still land
		return now.Sub(in.Hold.Since) > leaseTimeout, nil
	case in.Hold.Instance == d.lease.id:
		return false, nil
	}
	return d.leaseLapsed(ctx, in.Hold.Instance, now)
}

// settleKey makes way for a write (under the intent own, if any) that
// found the claim key taken by an owner that is not stored: abandoned
// intents holding the key are repaired. live says that another running
// write holds it.
func (d *DB) settleKey(ctx context.Context, key string, own *intentDoc) (live bool, err error) {
	return d.settleIntents(ctx, bson.M{"keys": key}, own)
}

// settleObservationClaim is settleKey for a claim on an observation key
// whose owner, the observation id it names, is not stored. Observation
// intents name the ids they reserved, not the keys they claim (a batch of
// 1,000 listed 64 KiB of keys, and writing and removing that intent cost
// the embedded database more CPU per batch than the batch's own
// checks): the intents that may hold the claim are those whose range
// covers its owner. Every claim of a batch names an id of the batch's
// range, written after its intent, so a claim of a write in flight is
// found exactly as by its key.
func (d *DB) settleObservationClaim(ctx context.Context, owner int64, own *intentDoc) (live bool, err error) {
	return d.settleIntents(ctx, observationIntentsOf(owner), own)
}

// observationIntentsOf selects the observation intents whose reserved
// ids include id.
func observationIntentsOf(id int64) bson.M {
	return bson.M{"kind": intentObservations, "firstId": bson.M{"$lte": id}, "lastId": bson.M{"$gte": id}}
}

// settleIntents repairs the abandoned intents among those filter selects
// (but own); live says that another running write holds one of them.
func (d *DB) settleIntents(ctx context.Context, filter bson.M, own *intentDoc) (live bool, err error) {
	var held []intentDoc
	if err := d.findAll(ctx, colIntents, filter, &held); err != nil {
		return false, err
	}
	now := d.now()
	for i := range held {
		in := &held[i]
		if own != nil && in.ID == own.ID {
			continue
		}
		gone, err := d.abandoned(ctx, in, now, false)
		if err != nil {
			return false, err
		}
		if !gone {
			live = true
			continue
		}
		switch err := d.repair(ctx, in); {
		case errors.Is(err, errRepairedElsewhere):
			live = true
		case err != nil:
			return false, err
		}
	}
	return live, nil
}

// errRepairedElsewhere: another process, or another request of this one,
// adopted the intent first and repairs it.
var errRepairedElsewhere = errors.New("the write intent is being repaired elsewhere")

// repair settles one abandoned intent, then removes it. It adopts the
// intent first: one compare-and-set moves it, as it was read, to this
// process's lease with a fresh start. Of the processes (or requests) that
// found it abandoned only one repairs it (the others get
// errRepairedElsewhere), and every later look sees a running write.
// Without it two repairs of one intent could run at once, and a repair
// that read the state before the other ended the intent could act on it
// after a new write had started: a repair of a patient update would
// release the claim that a later update of the patient, begun once the
// intent was gone, relies on. A repair that fails with a definite error
// gives the intent back as it was, abandoned still, for the next sweep
// (or colliding write) to try again; one whose own command failed with
// an unknown outcome (outcomeUnknown) gives it back given up as of now
// (giveUp), as a write does: that command may still land, and a repair
// at once, and the write begun after it, would be undone by it (a late
// release of a claim the next update made again). So does one whose
// adoption failed so (giveUpAdoption): landed unanswered, it would hold
// the intent for intentTimeout.
func (d *DB) repair(ctx context.Context, in *intentDoc) error {
	if err := d.hold(ctx); err != nil {
		return err
	}
	was := in.Hold
	adopted := d.nowMillis()
	if !adopted.After(was.Since) {
		adopted = was.Since.Add(time.Millisecond)
	}
	if err := d.moveIntent(ctx, in, intentHold{State: intentAdopted, Instance: d.lease.id, Since: adopted}); err != nil {
		if outcomeUnknown(err) {
			d.giveUpAdoption(ctx, in, adopted)
		}
		return err
	}
	err := d.settleAbandoned(ctx, in)
	if err == nil {
		err = d.remove(ctx, in)
	}
	if err != nil {
		if outcomeUnknown(err) {
			was = intentHold{State: intentGivenUp, Since: d.nowMillis()}
		}
		_ = d.moveIntent(context.WithoutCancel(ctx), in, was)
		return fmt.Errorf("repair the %s write intent %s: %w", in.Kind, in.ID.Hex(), err)
	}
	return nil
}

// giveUpAdoption gives up (giveUp), as of adopted, the intent whose
// adoption by repair failed with an unknown outcome. The adoption may have
// landed unanswered, or still land: the intent would then be held by this
// process's live lease, a write still running to every look until
// intentTimeout (for an identifier change, the patient's identifier lock).
// Two compare-and-sets, each of one state the intent may be in: as read
// (then a late adoption, which matches only that state, is refused), and
// as adopted. If both fail, another process moved it (it repairs it), or
// the give-up was cut too and the intent waits for intentTimeout.
func (d *DB) giveUpAdoption(ctx context.Context, in *intentDoc, adopted time.Time) {
	ctx = context.WithoutCancel(ctx)
	givenUp := intentHold{State: intentGivenUp, Since: adopted}
	if err := d.moveIntent(ctx, in, givenUp); !errors.Is(err, errRepairedElsewhere) {
		return
	}
	landed := *in
	landed.Hold = intentHold{State: intentAdopted, Instance: d.lease.id, Since: adopted}
	_ = d.moveIntent(ctx, &landed, givenUp)
}

// settleAbandoned undoes or finishes the write of an abandoned intent, by
// its kind's repair (intentRepairs).
func (d *DB) settleAbandoned(ctx context.Context, in *intentDoc) error {
	if in.Unbegun {
		// Its write never got past open: it wrote nothing to undo, and
		// rolling it forward would make from nothing a write that its
		// caller was told failed before any of its documents was written.
		return nil
	}
	if err := d.supersedeEarlier(ctx, in); err != nil {
		return err
	}
	repair, ok := intentRepairs[in.Kind]
	if !ok {
		return fmt.Errorf("unknown kind %q", in.Kind)
	}
	return repair(d, ctx, in)
}

// RepairOptions says how much Repair may assume and do.
type RepairOptions struct {
	// Exclusive: no other process can be writing, as when this process
	// started the embedded database; every intent is then abandoned, not
	// only those of dead processes.
	Exclusive bool
	// DryRun reports without changing anything.
	DryRun bool
	// Budget bounds the time spent on intents (0: none); what is left is
	// reported and repaired by a later call.
	Budget time.Duration
	// Scan also looks for identifier claims whose owner is not stored,
	// left by writes of versions before intents: a pass over every
	// claim, for the doctor command.
	Scan bool
}

// RepairReport is what Repair found and did.
type RepairReport struct {
	Intents  int            // intents found
	Repaired map[string]int // abandoned intents repaired (to be, in a dry run), by kind
	Running  int            // intents of writes still running
	Left     int            // abandoned intents the budget left for later
	Orphans  map[string]int // (Scan) claims whose owner is not stored, by collection
	Leases   int            // leases of dead processes removed
	Failed   []error        // intents whose repair failed
	Elapsed  time.Duration
}

// Repair heals what interrupted writes left half done: it repairs every
// abandoned intent, oldest first, removes the leases of dead processes,
// and with Scan releases orphan claims. It is bounded by the number of
// intents (a few: the writes running when a process died), not by the
// size of the store, except for Scan.
func (d *DB) Repair(ctx context.Context, o RepairOptions) (rep RepairReport, err error) {
	started := d.now()
	rep = RepairReport{Repaired: map[string]int{}, Orphans: map[string]int{}}
	defer func() { rep.Elapsed = d.now().Sub(started) }()
	var intents []intentDoc
	if err := d.findAll(ctx, colIntents, bson.D{}, &intents); err != nil {
		return rep, err
	}
	slices.SortFunc(intents, func(a, b intentDoc) int { return a.Hold.Since.Compare(b.Hold.Since) })
	rep.Intents = len(intents)
	for i := range intents {
		in := &intents[i]
		gone, err := d.abandoned(ctx, in, started, o.Exclusive)
		if err != nil {
			return rep, err
		}
		switch {
		case !gone:
			rep.Running++
		case o.Budget > 0 && d.now().Sub(started) > o.Budget:
			rep.Left++
		case o.DryRun:
			rep.Repaired[string(in.Kind)]++
		default:
			switch err := d.repair(ctx, in); {
			case errors.Is(err, errRepairedElsewhere):
				rep.Running++
			case err != nil:
				rep.Failed = append(rep.Failed, err)
			default:
				rep.Repaired[string(in.Kind)]++
			}
		}
	}
	if err := d.removeDeadLeases(ctx, started, o, &rep); err != nil {
		return rep, err
	}
	if o.Scan {
		if err := d.scanClaims(ctx, o.DryRun, &rep); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// scanClaims releases the identifier claims whose owner is not stored
// and that no write in progress holds: claims left by versions before
// write intents. It reads every claim and every owner id once.
func (d *DB) scanClaims(ctx context.Context, dryRun bool, rep *RepairReport) error {
	for _, s := range []struct{ claims, owners, field string }{
		{colObservationIdentifier, colObservations, "observationId"},
		{colPatientIdentifiers, colPatients, "patientId"},
	} {
		var owners []idDoc
		if err := d.findAll(ctx, s.owners, bson.D{}, &owners, options.Find().SetProjection(bson.M{"_id": 1})); err != nil {
			return err
		}
		stored := make(map[int64]bool, len(owners))
		for _, o := range owners {
			stored[o.ID] = true
		}
		cur, err := d.c(s.claims).Find(ctx, bson.D{}, options.Find().SetProjection(bson.M{"_id": 1, "system": 1, "value": 1, s.field: 1}))
		if err != nil {
			return err
		}
		defer cur.Close(context.WithoutCancel(ctx)) // a decode error leaves it open
		var candidates []bson.M
		for cur.Next(ctx) {
			var c bson.M
			if err := cur.Decode(&c); err != nil {
				return err
			}
			if owner, _ := c[s.field].(int64); !stored[owner] {
				candidates = append(candidates, c)
			}
		}
		if err := cur.Err(); err != nil {
			return err
		}
		// Writes that began during the pass: their intents, read now,
		// hold their claims; then the owner is looked up again.
		var intents []intentDoc
		if err := d.findAll(ctx, colIntents, bson.D{}, &intents); err != nil {
			return err
		}
		held := map[string]bool{}
		var ranges [][2]int64 // observation intents hold the claims naming their ids
		for _, in := range intents {
			for _, k := range in.Keys {
				held[k] = true
			}
			if in.Kind == intentObservations {
				ranges = append(ranges, [2]int64{in.FirstID, in.LastID})
			}
		}
		var orphans []any
		for _, c := range candidates {
			system, _ := c["system"].(string)
			value, _ := c["value"].(string)
			owner, _ := c[s.field].(int64)
			if held[claimKey(system, value)] ||
				s.claims == colObservationIdentifier && slices.ContainsFunc(ranges, func(r [2]int64) bool { return owner >= r[0] && owner <= r[1] }) {
				continue
			}
			if stored, err := d.exists(ctx, s.owners, c[s.field]); stored || err != nil {
				if err != nil {
					return err
				}
				continue
			}
			orphans = append(orphans, c["_id"])
		}
		rep.Orphans[s.claims] = len(orphans)
		if len(orphans) > 0 && !dryRun {
			if _, err := d.c(s.claims).DeleteMany(ctx, bson.M{"_id": bson.M{"$in": orphans}}); err != nil {
				return err
			}
		}
	}
	return nil
}
