package repo

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the driver FerretDB's SQLite backend uses: one SQLite in the process
)

// SQLite copies its write-ahead log into the database file after commits
// (a passive checkpoint), but it can only start the log over once every
// reader has left it. FerretDB holds a read transaction for the whole of a
// search, and on the embedded database a search of a large store takes
// seconds to minutes: with uploads going on and the search slots busy,
// some reader is always in the log, no checkpoint completes, and the log
// grows without bound (1 GB in three minutes of uploads with two
// overlapping scans, truncated only once the load stopped). checkpointWALs
// looks at the logs every walCheckEvery and, when one is past walLimit,
// runs a truncating checkpoint: it copies the log, waits (walCheckpointWait
// at most) for the readers still in it to finish, and empties it. Writers
// wait meanwhile, well within FerretDB's own 10 s busy timeout; a reader
// that outlasts the wait leaves the log for the next look.

// walCheckEvery is how often the logs' sizes are looked at.
var walCheckEvery = 10 * time.Second

// walCheckpointWait bounds how long a checkpoint waits for readers, which
// is how long writers may wait for it.
const walCheckpointWait = time.Second

// checkpointWALs runs a truncating checkpoint of each SQLite database in
// dir whose write-ahead log is past walLimit, every walCheckEvery, until ctx
// ends.
func checkpointWALs(ctx context.Context, dir string, log *slog.Logger) {
	t := time.NewTicker(walCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		logs, _ := filepath.Glob(filepath.Join(dir, "*.sqlite-wal"))
		for _, wal := range logs {
			if fi, err := os.Stat(wal); err != nil || fi.Size() <= walLimit {
				continue
			}
			busy, err := checkpointWAL(ctx, strings.TrimSuffix(wal, "-wal"))
			switch {
			case err != nil && ctx.Err() == nil:
				log.Warn("checkpointing the embedded database's write-ahead log failed", "file", filepath.Base(wal), "error", err)
			case busy:
				log.Debug("the embedded database's write-ahead log is still being read; checkpoint again later", "file", filepath.Base(wal))
			}
		}
	}
}

// checkpointWAL runs PRAGMA wal_checkpoint(TRUNCATE) on the database file
// over a connection of its own, and reports whether readers kept it from
// completing. The connection is closed at once: FerretDB may drop the
// database, and its file, at any time.
func checkpointWAL(ctx context.Context, file string) (busy bool, err error) {
	if _, err := os.Stat(file); errors.Is(err, os.ErrNotExist) {
		return false, nil // dropped meanwhile
	}
	db, err := sql.Open("sqlite", "file:"+filepath.ToSlash(file)+"?mode=rw&_pragma=busy_timeout("+
		strconv.FormatInt(walCheckpointWait.Milliseconds(), 10)+")")
	if err != nil {
		return false, err
	}
	defer db.Close()
	var blocked, frames, copied int
	if err := db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&blocked, &frames, &copied); err != nil {
		return false, err
	}
	return blocked != 0, nil
}
