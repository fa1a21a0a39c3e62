package repo_test

import (
	"compress/gzip"
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"exchange/domain"
	"exchange/repo"
	"exchange/repo/repotest"
)

func newExportJob(t *testing.T, db *repo.DB, id string) *domain.ExportJob {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Millisecond)
	j := &domain.ExportJob{ID: id, State: domain.ExportQueued, Owner: domain.ExportOwner{UserID: 1},
		Request: domain.ExportRequest{Level: domain.ExportPatient, Format: domain.ExportFHIR}, TransactionTime: now, CreatedAt: now}
	if err := db.CreateExportJob(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	return j
}

// TestExportJobOfADeadInstanceIsHandedBack: a running job names the lease
// of its process; another instance hands it back (queued, its attempt
// counted) only once that lease is gone, and its own process's clean
// close gives the attempt back.
func TestExportJobOfADeadInstanceIsHandedBack(t *testing.T) {
	ctx := context.Background()
	db := repotest.NewDB(t)
	first := repotest.OtherInstance(t, db)
	newExportJob(t, db, "job-a")
	j, err := first.ClaimExportJob(ctx, time.Now().Add(time.Second))
	if err != nil || j.ID != "job-a" || j.State != domain.ExportRunning || j.Attempts != 1 {
		t.Fatalf("claim: %+v %v", j, err)
	}
	if _, err := db.ClaimExportJob(ctx, time.Now().Add(time.Second)); !domain.IsCode(err, domain.CodeNotFound) {
		t.Fatalf("a running job claimed twice: %v", err)
	}
	if n, err := db.RequeueExportJobs(ctx, false); err != nil || n != 0 {
		t.Fatalf("a live instance's job handed back: %d %v", n, err)
	}
	// The first instance dies: its lease goes (as another instance's
	// repair removes a lease left unrenewed).
	if _, err := repotest.Collection(t, db, "service_instances").DeleteOne(ctx, bson.M{"_id": repo.LeaseID(first)}); err != nil {
		t.Fatal(err)
	}
	if n, err := db.RequeueExportJobs(ctx, false); err != nil || n != 1 {
		t.Fatalf("the dead instance's job: %d handed back, %v", n, err)
	}
	j, err = db.ClaimExportJob(ctx, time.Now().Add(time.Second))
	if err != nil || j.Attempts != 2 {
		t.Fatalf("second claim: %+v %v", j, err)
	}
	// A clean close hands it back without counting the attempt.
	if n, err := db.RequeueExportJobs(ctx, true); err != nil || n != 1 {
		t.Fatalf("hand back on close: %d %v", n, err)
	}
	if j, err = db.ExportJob(ctx, "job-a"); err != nil || j.State != domain.ExportQueued || j.Attempts != 1 {
		t.Errorf("after the close: %+v %v", j, err)
	}
}

// TestExportFilesStayWhileDownloaded: a finished job past its retention
// is deleted (no download begins any more), but its files are removed
// only once the download running then has ended.
func TestExportFilesStayWhileDownloaded(t *testing.T) {
	ctx := context.Background()
	db := repotest.NewDB(t)
	j := newExportJob(t, db, "job-b")
	j.State, j.FinishedAt, j.ExpiresAt = domain.ExportCompleted, time.Now(), time.Now().Add(time.Hour)
	if err := db.UpdateExportJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	download, err := db.BeginExportDownload(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(2 * time.Hour)
	if jobs, err := db.ExportJobsToRemove(ctx, later); err != nil || len(jobs) != 0 {
		t.Fatalf("removed while downloaded: %v %v", jobs, err)
	}
	if stored, _ := db.ExportJob(ctx, j.ID); stored.State != domain.ExportDeleted {
		t.Errorf("an expired job is %s, want deleted", stored.State)
	}
	if _, err := db.BeginExportDownload(ctx, j.ID); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("a download of an expired job began: %v", err)
	}
	if err := db.EndExportDownload(ctx, j.ID, download); err != nil {
		t.Fatal(err)
	}
	jobs, err := db.ExportJobsToRemove(ctx, later)
	if err != nil || len(jobs) != 1 || jobs[0].ID != j.ID {
		raw, _ := repo.RawDocument(ctx, db, "export_jobs", j.ID)
		t.Fatalf("after the download: %v %v\n%v", jobs, err, raw)
	}
	if err := db.RemoveExportJob(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExportJob(ctx, j.ID); !domain.IsCode(err, domain.CodeNotFound) {
		t.Errorf("removed job: %v", err)
	}
}

// TestExportFilesWholeOrAbsent: in both stores a file is readable only once
// committed, an aborted one leaves nothing, and the files of the parts from
// one on go (a resumed part's leftovers) while earlier parts' stay.
func TestExportFilesWholeOrAbsent(t *testing.T) {
	ctx := context.Background()
	db := repotest.NewDB(t)
	dir, err := repo.NewDirExportFiles(filepath.Join(t.TempDir(), "exports"))
	if err != nil {
		t.Fatal(err)
	}
	for name, files := range map[string]domain.ExportFiles{"directory": dir, "GridFS": db.ExportFilesInGridFS()} {
		t.Run(name, func(t *testing.T) {
			write := func(part int, file, text string, commit bool) {
				w, err := files.CreateExportFile(ctx, "job", part, file)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := io.WriteString(w, text); err != nil {
					t.Fatal(err)
				}
				if !commit {
					return // cut short: neither committed nor aborted
				}
				if n, err := w.Commit(); err != nil || n <= 0 {
					t.Fatalf("commit: %d %v", n, err)
				}
			}
			read := func(file string) (string, error) {
				f, err := files.OpenExportFile(ctx, "job", file)
				if err != nil {
					return "", err
				}
				defer f.Close()
				zr, err := gzip.NewReader(f)
				if err != nil {
					return "", err
				}
				b, err := io.ReadAll(zr)
				return string(b), err
			}
			write(0, "Patient.0.0.ndjson", "{\"resourceType\":\"Patient\"}\n", true)
			write(1, "Observation.1.0.ndjson", "{\"resourceType\":\"Observation\"}\n", true)
			write(1, "Observation.1.1.ndjson", "cut short", false)
			if _, err := read("Observation.1.1.ndjson"); !domain.IsCode(err, domain.CodeNotFound) {
				t.Errorf("a file not committed is readable: %v", err)
			}
			w, _ := files.CreateExportFile(ctx, "job", 2, "Group.2.0.ndjson")
			_, _ = io.WriteString(w, "aborted")
			w.Abort()
			if _, err := read("Group.2.0.ndjson"); !domain.IsCode(err, domain.CodeNotFound) {
				t.Errorf("an aborted file is readable: %v", err)
			}
			if got, err := read("Observation.1.0.ndjson"); err != nil || got != "{\"resourceType\":\"Observation\"}\n" {
				t.Errorf("a committed file: %q %v", got, err)
			}
			if err := files.DeleteExportFiles(ctx, "job", 1); err != nil {
				t.Fatal(err)
			}
			if _, err := read("Observation.1.0.ndjson"); !domain.IsCode(err, domain.CodeNotFound) {
				t.Errorf("a file of part 1 left: %v", err)
			}
			if got, err := read("Patient.0.0.ndjson"); err != nil || got == "" {
				t.Errorf("the file of part 0 went: %v", err)
			}
			if err := files.DeleteExportFiles(ctx, "job", 0); err != nil {
				t.Fatal(err)
			}
			if _, err := read("Patient.0.0.ndjson"); !domain.IsCode(err, domain.CodeNotFound) {
				t.Errorf("the job's files left: %v", err)
			}
		})
	}
	// GridFS leaves no chunk behind, of committed files or cut short.
	if n, err := repotest.Collection(t, db, "export_files.chunks").CountDocuments(ctx, bson.M{}); err != nil || n != 0 {
		t.Errorf("%d chunks left (%v)", n, err)
	}
}

// TestADeletedRunningJobIsRemovedOnceReleased: a job deleted while it runs
// keeps its files until the process running it lets it go.
func TestADeletedRunningJobIsRemovedOnceReleased(t *testing.T) {
	ctx := context.Background()
	db := repotest.NewDB(t)
	newExportJob(t, db, "job-c")
	j, err := db.ClaimExportJob(ctx, time.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	j.State = domain.ExportDeleted
	if err := db.UpdateExportJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	if jobs, err := db.ExportJobsToRemove(ctx, time.Now()); err != nil || len(jobs) != 0 {
		t.Fatalf("removed while it runs: %v %v", jobs, err)
	}
	if err := db.ReleaseExportJob(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if jobs, err := db.ExportJobsToRemove(ctx, time.Now()); err != nil || len(jobs) != 1 {
		t.Fatalf("released: %v %v", jobs, err)
	}
}

// TestAFinishedJobIsRemovedWhileItsInstanceLives: a job that completed
// and expired is removed at once, though the instance that ran it is
// alive (the embedded default's one instance runs for months).
func TestAFinishedJobIsRemovedWhileItsInstanceLives(t *testing.T) {
	ctx := context.Background()
	db := repotest.NewDB(t)
	newExportJob(t, db, "job-d")
	j, err := db.ClaimExportJob(ctx, time.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	j.State, j.FinishedAt, j.ExpiresAt = domain.ExportCompleted, time.Now().Add(-time.Hour), time.Now().Add(-time.Minute)
	if err := db.UpdateExportJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	if jobs, err := db.ExportJobsToRemove(ctx, time.Now()); err != nil || len(jobs) != 1 || jobs[0].ID != j.ID {
		t.Fatalf("an expired job of a live instance: %v %v", jobs, err)
	}
}
