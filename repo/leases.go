package repo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

const (
	// leaseRenew is how often a process renews its lease; leaseTimeout
	// how long a lease may go unrenewed before its process counts as dead.
	leaseRenew   = 10 * time.Second
	leaseTimeout = 45 * time.Second
)

// instanceDoc is a document of service_instances: one process's lease.
type instanceDoc struct {
	ID        string    `bson:"_id"`
	Host      string    `bson:"host"`
	PID       int       `bson:"pid"`
	StartedAt time.Time `bson:"startedAt"`
	Renewed   time.Time `bson:"renewed"`
}

// lease is this process's instance document and the loop renewing it.
type lease struct {
	id   string
	mu   sync.Mutex
	held bool
	stop chan struct{}
	done chan struct{}
}

func newLease() *lease {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return &lease{id: hex.EncodeToString(b)}
}

// hold makes sure the lease is written and renewed; the first intent of
// a process takes it.
func (d *DB) hold(ctx context.Context) error {
	l := d.lease
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held {
		return nil
	}
	if err := d.writeLease(ctx); err != nil {
		return fmt.Errorf("take the instance lease: %w", err)
	}
	l.held, l.stop, l.done = true, make(chan struct{}), make(chan struct{})
	go d.renew(l.stop, l.done)
	return nil
}

// writeLease renews this process's lease, writing it anew when it is
// gone: another instance removes a lease left unrenewed for leaseTimeout
// (this process stalled, or could not reach the database), and without
// it every intent this process writes would look abandoned to the others,
// which would repair writes still running.
func (d *DB) writeLease(ctx context.Context) error {
	host, _ := os.Hostname()
	now := d.nowMillis()
	_, err := d.c(colInstances).UpdateOne(ctx, bson.M{"_id": d.lease.id},
		bson.M{"$set": bson.M{"renewed": now}, "$setOnInsert": bson.M{"host": host, "pid": os.Getpid(), "startedAt": now}},
		options.UpdateOne().SetUpsert(true))
	return err
}

// renew keeps the lease fresh until stop closes; a failed renewal is
// tried again at the next tick.
func (d *DB) renew(stop, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(leaseRenew)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), leaseRenew)
			_ = d.writeLease(ctx)
			cancel()
		}
	}
}

// release ends the lease of a process closing cleanly: its intents are
// all ended, and the document goes.
func (d *DB) release(ctx context.Context) {
	l := d.lease
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held {
		return
	}
	close(l.stop)
	<-l.done
	l.held = false
	_, _ = d.c(colInstances).DeleteOne(ctx, bson.M{"_id": l.id})
}

// removeDeadLeases deletes the leases of processes that are gone and
// hold no intent any more.
func (d *DB) removeDeadLeases(ctx context.Context, now time.Time, o RepairOptions, rep *RepairReport) error {
	var leases []instanceDoc
	if err := d.findAll(ctx, colInstances, bson.D{}, &leases); err != nil {
		return err
	}
	for _, l := range leases {
		if l.ID == d.lease.id || !o.Exclusive && now.Sub(l.Renewed) <= leaseTimeout {
			continue
		}
		if n, err := d.c(colIntents).CountDocuments(ctx, bson.M{"instance": l.ID}); err != nil || n > 0 {
			continue // its intents come first
		}
		rep.Leases++
		if !o.DryRun {
			if _, err := d.c(colInstances).DeleteOne(ctx, bson.M{"_id": l.ID}); err != nil {
				return err
			}
		}
	}
	return nil
}

// leaseLapsed reports whether the process holding the instance lease is
// gone: its lease is removed, or unrenewed for leaseTimeout. What the
// process was doing (a write, an export job) can no longer be running.
func (d *DB) leaseLapsed(ctx context.Context, instance string, now time.Time) (bool, error) {
	var owner instanceDoc
	err := d.c(colInstances).FindOne(ctx, bson.M{"_id": instance}).Decode(&owner)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return now.Sub(owner.Renewed) > leaseTimeout, nil
}
