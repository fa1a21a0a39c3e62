package repo_test

import (
	"context"
	"testing"
	"time"

	"exchange/domain"
	"exchange/repo"
	"exchange/repo/repotest"
)

// TestEHRPullLock: a connection's pull lock is one across instances of
// the service: while one holds it, another is refused (a conflict), the
// lock of another connection is free, and once released it is taken
// again. A lock whose holder died is repaired as every write intent is:
// the connection's runs still recorded running are marked interrupted,
// and the lock is free.
func TestEHRPullLock(t *testing.T) {
	ctx := context.Background()
	db := repotest.NewDB(t)
	other := repotest.OtherInstance(t, db)
	release, err := db.LockEHRPull(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.LockEHRPull(ctx, 7); !domain.IsCode(err, domain.CodeConflict) {
		t.Errorf("the lock held by another instance: %v, want a conflict", err)
	}
	if releaseOther, err := other.LockEHRPull(ctx, 8); err != nil {
		t.Errorf("the lock of another connection: %v", err)
	} else {
		releaseOther()
	}
	release()
	if _, err := other.LockEHRPull(ctx, 7); err != nil {
		t.Fatalf("the lock released: %v", err)
	}

	// The other instance dies during its pull (its release never runs):
	// its run stays recorded running.
	run := &domain.PullRun{ConnectionID: 7, PatientID: 1, SourceID: 1, Issuer: "https://ehr.example.org/fhir",
		Trigger: domain.PullOnDemand, StartedAt: time.Now(), Outcome: domain.PullRunning}
	if err := other.CreatePullRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	rep, err := db.Repair(ctx, repo.RepairOptions{Exclusive: true})
	if err != nil || rep.Repaired["ehr.pull"] != 1 || len(rep.Failed) != 0 {
		t.Fatalf("repair: %+v, %v", rep, err)
	}
	runs, err := db.PullRuns(ctx, nil, domain.Page{Number: 1, Size: 10})
	if err != nil || len(runs.Items) != 1 || runs.Items[0].Outcome != domain.PullInterrupted || runs.Items[0].EndedAt.IsZero() {
		t.Errorf("the run of the dead instance: %+v, %v", runs.Items, err)
	}
	if release, err := db.LockEHRPull(ctx, 7); err != nil {
		t.Errorf("the lock after its repair: %v", err)
	} else {
		release()
	}
}
