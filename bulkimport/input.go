package bulkimport

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// inputFile is one file of the input, as the checkpoint fingerprints it:
// a resumed run must read the very same files.
type inputFile struct {
	Path    string    `json:"path"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"modTime"`
}

// ndjson says whether the file holds one resource per line (.ndjson,
// .jsonl), else it is one JSON document: a Bundle or a single resource.
func (f inputFile) ndjson() bool {
	ext := strings.ToLower(filepath.Ext(f.Path))
	return ext == ".ndjson" || ext == ".jsonl"
}

// listInputs expands paths into the files to read: a file as given, a
// directory its *.ndjson, *.jsonl and *.json files at any depth, in
// lexical order so that every run reads them in the same order. The
// report is never read, should it be kept among the input, and neither
// is a Bulk Data export's own log found in a directory (exportLog):
// skipped lists those.
func listInputs(paths []string, report string) (files []inputFile, skipped []string, err error) {
	reportPath, _ := filepath.Abs(report)
	if len(paths) == 0 {
		return nil, nil, errors.New("no input: name R4 NDJSON files, Bundles, or directories of them")
	}
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			return nil, nil, err
		}
		if !info.IsDir() {
			files = append(files, inputFile{Path: p, Size: info.Size(), ModTime: info.ModTime().UTC()})
			continue
		}
		var found []inputFile
		// Walked from p with a trailing separator: a directory named by a
		// symbolic link is read through it (WalkDir does not follow links,
		// the root's either).
		err = filepath.WalkDir(strings.TrimSuffix(p, string(filepath.Separator))+string(filepath.Separator), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			switch strings.ToLower(filepath.Ext(path)) {
			case ".ndjson", ".jsonl", ".json":
			default:
				return nil
			}
			if abs, _ := filepath.Abs(path); abs == reportPath {
				return nil
			}
			if log, err := exportLog(path); err != nil || log {
				if log {
					skipped = append(skipped, path)
				}
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			found = append(found, inputFile{Path: path, Size: info.Size(), ModTime: info.ModTime().UTC()})
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
		if len(found) == 0 {
			return nil, nil, fmt.Errorf("%s: no .ndjson, .jsonl or .json files in it", p)
		}
		slices.SortFunc(found, func(a, b inputFile) int { return strings.Compare(a.Path, b.Path) })
		files = append(files, found...)
	}
	return files, skipped, nil
}

// exportLog reports whether a file of a directory is a Bulk Data export's
// log, not data: named log.ndjson, as exports that keep one name it (the
// SMART sample datasets', beside the data files), and its first line an
// object without a resourceType (an event: exportId, eventId, ...). A
// log.ndjson that holds resources is read as any other file.
func exportLog(path string) (bool, error) {
	if !strings.EqualFold(filepath.Base(path), "log.ndjson") {
		return false, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<16)
	for {
		line, err := br.ReadSlice('\n')
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			var first map[string]json.RawMessage
			if json.Unmarshal(trimmed, &first) != nil {
				return false, nil // not an object: read, and refused, as data
			}
			_, resource := first["resourceType"]
			return !resource, nil
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			return false, nil // a first line that long is no log event
		case err != nil:
			return false, nil // empty: nothing to skip
		}
	}
}

// record is one resource read from the input.
type record struct {
	seq  int64  // position in the whole input, from 0: what the checkpoint counts
	file string // the file it came from
	// at is its line in an NDJSON file or its entry (from 1) in a Bundle;
	// 0 when the file is the resource.
	at      int
	inLines bool   // at is a line, not a Bundle entry
	size    int64  // the input bytes it stands for, for progress
	body    []byte // the resource's JSON as read
	fullURL string // a Bundle entry's fullUrl
	err     error  // why it cannot be sent: it is answered here, as failed

	// Filled in by routing.
	resourceType, id string
	source           int64
	// contentHash identifies a resource without an id: a hash of its FHIR
	// source and its JSON as read. The service recognises such a resource
	// sent again by the same content (its unique key), so a retry or a
	// resumed run does not store it twice; the report names it by this.
	contentHash string
}

// where says where in the input the record is, for messages.
func (r *record) where() string {
	switch {
	case r.at == 0:
		return r.file
	case r.inLines:
		return fmt.Sprintf("%s line %d", r.file, r.at)
	default:
		return fmt.Sprintf("%s entry %d", r.file, r.at)
	}
}

// readFile reads the records of one file, in order, into emit; seq is
// left for the caller to number. It stops at emit's first error.
func readFile(ctx context.Context, f inputFile, emit func(*record) error) error {
	fh, err := os.Open(f.Path)
	if err != nil {
		return err
	}
	defer fh.Close()
	br := bufio.NewReaderSize(fh, 1<<16)
	if f.ndjson() {
		return readLines(ctx, f.Path, br, emit)
	}
	return readDocument(ctx, f.Path, f.Size, br, emit)
}

// readLines reads NDJSON: one resource per non-blank line.
func readLines(ctx context.Context, path string, br *bufio.Reader, emit func(*record) error) error {
	var carried int64 // bytes of blank lines, counted with the next record
	for line := 1; ; line++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		text, err := br.ReadBytes('\n')
		if len(text) > 0 {
			body := bytes.TrimSpace(text)
			if len(body) == 0 {
				carried += int64(len(text))
			} else {
				r := &record{file: path, at: line, inLines: true, size: carried + int64(len(text)), body: body}
				carried = 0
				if body[0] != '{' {
					r.err = errors.New("the line is not a JSON object")
				}
				if err := emit(r); err != nil {
					return err
				}
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// member is one top-level member of a JSON document, kept in order.
type member struct {
	key   string
	value json.RawMessage
}

// readDocument reads a JSON file: a Bundle, whose entries are streamed
// one by one, or a single resource. Entries that come before the
// document says it is a Bundle are held until it does (rare: writers put
// resourceType first).
func readDocument(ctx context.Context, path string, size int64, br *bufio.Reader, emit func(*record) error) error {
	dec := json.NewDecoder(br)
	var emitted int64 // bytes the records so far stand for
	next := emit
	emit = func(r *record) error { emitted += r.size; return next(r) }
	bad := func(err error) error {
		return emit(&record{file: path, size: max(size-emitted, 0), err: fmt.Errorf("the file is not a JSON object: %v", err)})
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		if err == nil {
			err = errors.New("it does not start with {")
		}
		return bad(err)
	}
	var resourceType string
	var members []member
	entries, streamed := 0, false
	for dec.More() {
		if err := ctx.Err(); err != nil {
			return err
		}
		tok, err := dec.Token()
		if err != nil {
			return bad(err)
		}
		key, _ := tok.(string)
		if key == "entry" && resourceType == "Bundle" {
			if streamed, err = true, streamEntries(ctx, path, dec, &entries, emit); err != nil {
				if errors.Is(err, errBrokenFile) {
					return nil
				}
				return err
			}
			continue
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return bad(err)
		}
		if key == "resourceType" {
			_ = json.Unmarshal(value, &resourceType)
		}
		members = append(members, member{key, value})
	}
	if _, err := dec.Token(); err != nil {
		return bad(err)
	}
	// Anything after the document is refused, not skipped: NDJSON saved
	// as .json would otherwise import its first line only.
	_, err := dec.Token()
	trailing := !errors.Is(err, io.EOF)
	if resourceType != "Bundle" {
		if err := emit(&record{file: path, size: size, body: joinMembers(members)}); err != nil || !trailing {
			return err
		}
	} else {
		for _, m := range members {
			if m.key == "entry" && !streamed {
				err := streamEntries(ctx, path, json.NewDecoder(bytes.NewReader(m.value)), &entries, emit)
				if errors.Is(err, errBrokenFile) {
					return nil
				}
				if err != nil {
					return err
				}
			}
		}
	}
	if trailing {
		return bad(errors.New("more follows the first JSON value (one resource per line belongs in a .ndjson file)"))
	}
	return nil
}

// errBrokenFile stops reading a file whose failure is already recorded.
var errBrokenFile = errors.New("the rest of the file cannot be read")

// streamEntries reads a Bundle's entry array, the decoder placed at it.
func streamEntries(ctx context.Context, path string, dec *json.Decoder, entries *int, emit func(*record) error) error {
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		//lint:ignore ST1005 the message starts with the FHIR path it is about, whose type is capitalized
		return cmp.Or(emit(&record{file: path, err: errors.New("Bundle.entry is not an array")}), errBrokenFile)
	}
	for dec.More() {
		if err := ctx.Err(); err != nil {
			return err
		}
		*entries++
		start := dec.InputOffset()
		var e struct {
			FullURL  string          `json:"fullUrl"`
			Resource json.RawMessage `json:"resource"`
		}
		r := &record{file: path, at: *entries}
		if err := dec.Decode(&e); err != nil {
			var syntax *json.SyntaxError
			if errors.As(err, &syntax) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				r.err = fmt.Errorf("the Bundle breaks off: %v", err)
				return cmp.Or(emit(r), errBrokenFile)
			}
			r.err = fmt.Errorf("the entry is not a Bundle entry: %v", err)
		}
		r.size, r.fullURL, r.body = dec.InputOffset()-start, e.FullURL, e.Resource
		if r.err == nil && (len(e.Resource) == 0 || e.Resource[0] != '{') {
			r.err = errors.New("the entry has no resource")
		}
		if err := emit(r); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return cmp.Or(emit(&record{file: path, err: fmt.Errorf("the Bundle breaks off: %v", err)}), errBrokenFile)
	}
	return nil
}

// joinMembers writes members back as one JSON object, in their order.
func joinMembers(members []member) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			b.WriteByte(',')
		}
		key, _ := json.Marshal(m.key)
		b.Write(key)
		b.WriteByte(':')
		b.Write(m.value)
	}
	b.WriteByte('}')
	return b.Bytes()
}
