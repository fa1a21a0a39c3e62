package repo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/gzip"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"exchange/domain"
)

// The files of export jobs (domain.ExportFiles), stored gzip-compressed:
// a download that accepts gzip is sent the stored bytes as they are, and
// an NDJSON line of an observation compresses to a fifth.
//
// Two stores, one per deployment:
//
//   - GridFS, on MongoDB: every instance reads every job's files, so any
//     instance answers any download. A file is its chunks, then its files
//     document, written last (by the driver, at Commit): a file whose
//     document is missing was cut short and is not readable. Its id
//     (exportFileID) sorts by job then part, so the chunks a crash left
//     without a document are found by range.
//   - The data directory, with the embedded database: one process serves
//     everything, and FerretDB would sort a file's chunks in memory on
//     every download (it sorts every query in memory), which a download of
//     a large export must not do. A file is written aside and renamed into
//     place at Commit, whole or not at all.

// exportGzipLevel trades size for speed: the fastest level is cheap next
// to rendering a line, and still shrinks NDJSON several times.
const exportGzipLevel = gzip.BestSpeed

// Collections of the GridFS bucket of export files.
const (
	exportBucket    = "export_files"
	colExportFiles  = exportBucket + ".files"
	colExportChunks = exportBucket + ".chunks"
)

// ExportFilesInGridFS returns the GridFS store of export files.
func (d *DB) ExportFilesInGridFS() domain.ExportFiles {
	return &gridFSExportFiles{bucket: d.db.GridFSBucket(options.GridFSBucket().SetName(exportBucket))}
}

type gridFSExportFiles struct {
	bucket *mongo.GridFSBucket
}

// exportFileID is the GridFS id of a file: job, part (zero-padded, so that
// ids sort by part) and name.
func exportFileID(job string, part int, name string) string {
	return fmt.Sprintf("%s/%06d/%s", job, part, name)
}

func (g *gridFSExportFiles) CreateExportFile(ctx context.Context, jobID string, part int, name string) (domain.ExportFileWriter, error) {
	stream, err := g.bucket.OpenUploadStreamWithID(ctx, exportFileID(jobID, part, name), name,
		options.GridFSUpload().SetMetadata(bson.D{{Key: "job", Value: jobID}, {Key: "part", Value: part}}))
	if err != nil {
		return nil, err
	}
	return newGzipFile(stream, stream.Close, func() { _ = stream.Abort() })
}

func (g *gridFSExportFiles) OpenExportFile(ctx context.Context, jobID, name string) (io.ReadCloser, error) {
	part, ok := domain.ExportFilePart(name)
	if !ok {
		return nil, domain.Errorf(domain.CodeNotFound, "no file %q", name)
	}
	stream, err := g.bucket.OpenDownloadStream(ctx, exportFileID(jobID, part, name))
	if errors.Is(err, mongo.ErrFileNotFound) {
		return nil, domain.Errorf(domain.CodeNotFound, "no file %q", name)
	}
	return stream, err
}

func (g *gridFSExportFiles) DeleteExportFiles(ctx context.Context, jobID string, from int) error {
	ids := bson.M{"$gte": exportFileID(jobID, from, ""), "$lt": jobID + "0"} // "0" follows "/"
	if _, err := g.bucket.GetFilesCollection().DeleteMany(ctx, bson.M{"_id": ids}); err != nil {
		return err
	}
	_, err := g.bucket.GetChunksCollection().DeleteMany(ctx, bson.M{"files_id": ids})
	return err
}

// NewDirExportFiles returns the store of export files under dir (created
// when missing): a folder per job.
func NewDirExportFiles(dir string) (domain.ExportFiles, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("export files: %w", err)
	}
	return dirExportFiles(dir), nil
}

type dirExportFiles string

// path is where a job's file lives; false for a job id or name that could
// leave the folder (neither comes from a client unchecked, but a path is
// never built from one that could).
func (d dirExportFiles) path(jobID, name string) (string, bool) {
	for _, s := range []string{jobID, name} {
		if s == "" || s == "." || s == ".." || strings.ContainsAny(s, `/\`) || strings.HasPrefix(s, ".") {
			return "", false
		}
	}
	return filepath.Join(string(d), jobID, name+".gz"), true
}

func (d dirExportFiles) CreateExportFile(_ context.Context, jobID string, _ int, name string) (domain.ExportFileWriter, error) {
	path, ok := d.path(jobID, name)
	if !ok {
		return nil, fmt.Errorf("export file %q of %q: not a plain name", name, jobID)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".partial-*")
	if err != nil {
		return nil, err
	}
	commit := func() error {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		return os.Rename(f.Name(), path)
	}
	return newGzipFile(f, commit, func() { f.Close(); os.Remove(f.Name()) })
}

func (d dirExportFiles) OpenExportFile(_ context.Context, jobID, name string) (io.ReadCloser, error) {
	path, ok := d.path(jobID, name)
	if !ok {
		return nil, domain.Errorf(domain.CodeNotFound, "no file %q", name)
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, domain.Errorf(domain.CodeNotFound, "no file %q", name)
	}
	return f, err
}

func (d dirExportFiles) DeleteExportFiles(_ context.Context, jobID string, from int) error {
	dir, ok := d.path(jobID, "x")
	if !ok {
		return fmt.Errorf("export job %q: not a plain id", jobID)
	}
	dir = filepath.Dir(dir)
	if from == 0 {
		return os.RemoveAll(dir)
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".gz")
		// Files cut short (written aside) belong to the part being
		// redone; committed ones by their part.
		if part, ok := domain.ExportFilePart(name); strings.HasPrefix(e.Name(), ".partial-") || ok && part >= from {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// gzipFile compresses what is written to an underlying file, counting the
// bytes stored.
type gzipFile struct {
	gz     *gzip.Writer
	n      *countingWriter
	commit func() error
	abort  func()
	ended  bool
}

func newGzipFile(w io.Writer, commit func() error, abort func()) (*gzipFile, error) {
	n := &countingWriter{w: w}
	gz, err := gzip.NewWriterLevel(n, exportGzipLevel)
	if err != nil {
		abort()
		return nil, err
	}
	return &gzipFile{gz: gz, n: n, commit: commit, abort: abort}, nil
}

func (f *gzipFile) Write(p []byte) (int, error) { return f.gz.Write(p) }

// Commit implements domain.ExportFileWriter.
func (f *gzipFile) Commit() (int64, error) {
	f.ended = true
	if err := f.gz.Close(); err != nil {
		f.abort()
		return 0, err
	}
	if err := f.commit(); err != nil {
		f.abort()
		return 0, err
	}
	return f.n.n, nil
}

// Abort implements domain.ExportFileWriter.
func (f *gzipFile) Abort() {
	if !f.ended {
		f.ended = true
		f.abort()
	}
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
