package repo

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"exchange/domain"
	"exchange/fhirsearch"
	"exchange/omh"
)

const (
	colObservations          = "observations"
	colObservationIdentifier = "observation_identifiers" // the claims, observationClaimDoc
)

// observationDoc is a document of the observations collection. The field
// names are those fhirsearch's configuration table searches.
type observationDoc struct {
	ID           int64           `bson:"_id"`
	PatientID    int64           `bson:"patientId"`
	DataSourceID int64           `bson:"dataSourceId"`
	Status       string          `bson:"status"`
	Code         string          `bson:"code"` // the native code, omh:heart-rate:2.0
	Codings      []codingDoc     `bson:"codings"`
	CodeTokens   []string        `bson:"codeTokens"` // every form of a token search that matches (fhirsearch.TokenKeys)
	Identifiers  []codedValueDoc `bson:"identifiers"`
	IDTokens     []string        `bson:"identifierTokens"`
	ContentType  string          `bson:"contentType"`
	Payload      []byte          `bson:"payload"`       // the data point, byte for byte
	OMH          bson.D          `bson:"omh,omitempty"` // the data point decoded, for analysts; never read back
	Effective    *effectiveDoc   `bson:"effective"`
	Start        *time.Time      `bson:"effectiveStart"`
	End          *time.Time      `bson:"effectiveEnd"`
	SortAsc      time.Time       `bson:"sortAsc"`               // effectiveStart, or the largest date when none
	SortDesc     time.Time       `bson:"sortDesc"`              // effectiveStart, or the smallest date when none
	SpanClass    int32           `bson:"spanClass"`             // how long effective[x] spans (fhirsearch.SpanClass): bounds date searches
	ValueNumber  *float64        `bson:"valueNumber,omitempty"` // the data point's single numeric value (omh.SingleQuantity), for summaries
	ValueUnit    string          `bson:"valueUnit,omitempty"`
	LastUpdated  time.Time       `bson:"lastUpdated"`
	LastUpdateUS int64           `bson:"lastUpdatedMicros"` // microseconds since 1970: BSON dates keep milliseconds
}

type codingDoc struct {
	System  string `bson:"system"`
	Code    string `bson:"code"`
	Display string `bson:"display,omitempty"`
}

// effectiveDoc is effective[x] as FHIR shows it, in the payload's offsets.
type effectiveDoc struct {
	DateTime string `bson:"dateTime,omitempty"`
	Start    string `bson:"start,omitempty"`
	End      string `bson:"end,omitempty"`
}

// observationClaimDoc claims one key for one observation: an identifier,
// or, for an observation without identifiers, its content (system
// contentClaimSystem, value the content's hash), so that the same
// observation sent twice is stored once. Its _id is claimKey(system,
// value); claims written before that was so have an ObjectID _id and are
// found by (system, value). Content is the content of the observation
// (observationContent), by which a resend is told from another
// observation without reading the stored one (settledClaims); claims
// written before it was kept have none.
type observationClaimDoc struct {
	Key           string    `bson:"_id"`
	System        string    `bson:"system"`
	Value         string    `bson:"value"`
	ObservationID int64     `bson:"observationId"`
	ClaimedAt     time.Time `bson:"claimedAt"`
	Content       string    `bson:"content,omitempty"`
}

// storedClaim is a claim as read: its _id may be either form.
type storedClaim struct {
	ID            any    `bson:"_id"`
	ObservationID int64  `bson:"observationId"`
	Content       string `bson:"content"`
}

// contentClaimSystem is the system of the claims on observations'
// content.
const contentClaimSystem = "urn:exchange:observation-content"

func identifierTokens(ids []domain.Identifier) []string {
	keys := []string{}
	for _, id := range ids {
		keys = append(keys, fhirsearch.TokenKeys(id.System, id.Value)...)
	}
	return keys
}

func (x observationDoc) observation() domain.Observation {
	o := domain.Observation{ID: x.ID, PatientID: x.PatientID, DataSourceID: x.DataSourceID, Status: x.Status, Code: x.Code,
		ContentType: x.ContentType, Payload: x.Payload, LastUpdated: time.UnixMicro(x.LastUpdateUS).UTC()}
	for _, c := range x.Codings {
		o.Codings = append(o.Codings, domain.Coding{System: c.System, Code: c.Code, Display: c.Display})
	}
	for _, id := range x.Identifiers {
		o.Identifiers = append(o.Identifiers, domain.Identifier{System: id.System, Value: id.Value})
	}
	if x.Effective != nil && x.Start != nil && x.End != nil {
		o.Effective = &omh.TimeFrame{Start: x.Start.UTC(), End: x.End.UTC(), DateTime: x.Effective.DateTime,
			PeriodStart: x.Effective.Start, PeriodEnd: x.Effective.End}
	}
	return o
}

// bsonDocument turns decoded JSON into a BSON document with sorted keys:
// integers that fit become int64, other numbers doubles.
func bsonDocument(m map[string]any) bson.D {
	if m == nil {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	d := make(bson.D, len(keys))
	for i, k := range keys {
		d[i] = bson.E{Key: k, Value: bsonValue(m[k])}
	}
	return d
}

func bsonValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		return bsonDocument(v)
	case []any:
		a := make(bson.A, len(v))
		for i, x := range v {
			a[i] = bsonValue(x)
		}
		return a
	case json.Number:
		if n, err := v.Int64(); err == nil {
			return n
		}
		f, _ := v.Float64() // finite: omh.Parse refused the rest
		if math.IsInf(f, 0) {
			return nil
		}
		return f
	}
	return v
}

// observationContent is a hash of what an observation was sent with:
// two observations with the same content are the same observation. It is
// the SHA-256 of the line encoding/json's Encoder writes for
// [patientId, dataSourceId, status, codings, identifiers, contentType,
// payload] (an empty list as null), written by hand (appendContent;
// TestObservationContentIsTheReflectiveHash and its fuzzer compare them):
// every claim keeps it, and the reflective encoder cost a tenth of an
// upload's CPU. The hashes of claims already stored depend on it byte for
// byte.
func observationContent(o *domain.Observation) string {
	buf := contentBuffers.Get().(*[]byte)
	b := appendContent((*buf)[:0], o)
	sum := sha256.Sum256(b)
	*buf = b
	contentBuffers.Put(buf)
	var hexSum [2 * sha256.Size]byte
	hex.Encode(hexSum[:], sum[:])
	return string(hexSum[:])
}

// contentBuffers hold the lines observationContent hashes.
var contentBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// appendContentList appends a list of the content line: null when empty,
// else its items, each written by item.
func appendContentList[T any](b []byte, items []T, item func([]byte, T) []byte) []byte {
	if len(items) == 0 {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, x := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = item(b, x)
	}
	return append(b, ']')
}

// appendContent appends the line observationContent hashes.
func appendContent(b []byte, o *domain.Observation) []byte {
	b = append(b, '[')
	b = strconv.AppendInt(b, o.PatientID, 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, o.DataSourceID, 10)
	b = append(b, ',')
	b = domain.AppendHTMLEscapedJSONString(b, o.Status)
	b = append(b, ',')
	b = appendContentList(b, o.Codings, func(b []byte, c domain.Coding) []byte {
		b = append(b, `{"System":`...)
		b = domain.AppendHTMLEscapedJSONString(b, c.System)
		b = append(b, `,"Code":`...)
		b = domain.AppendHTMLEscapedJSONString(b, c.Code)
		b = append(b, `,"Display":`...)
		b = domain.AppendHTMLEscapedJSONString(b, c.Display)
		return append(b, '}')
	})
	b = append(b, ',')
	b = appendContentList(b, o.Identifiers, func(b []byte, id domain.Identifier) []byte {
		b = append(b, `{"System":`...)
		b = domain.AppendHTMLEscapedJSONString(b, id.System)
		b = append(b, `,"Value":`...)
		b = domain.AppendHTMLEscapedJSONString(b, id.Value)
		return append(b, '}')
	})
	b = append(b, ',')
	b = domain.AppendHTMLEscapedJSONString(b, o.ContentType)
	b = append(b, ',')
	if o.Payload == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, o.Payload)
		b = append(b, '"')
	}
	return append(b, "]\n"...)
}

// observationClaims are the claims an observation takes: one per
// identifier, or one on its content when it has none.
func observationClaims(o *domain.Observation) []observationClaimDoc {
	claimed, content := o.LastUpdated.Truncate(time.Millisecond), observationContent(o)
	if len(o.Identifiers) == 0 {
		return []observationClaimDoc{{claimKey(contentClaimSystem, content), contentClaimSystem, content, o.ID, claimed, content}}
	}
	out := make([]observationClaimDoc, len(o.Identifiers))
	for i, id := range o.Identifiers {
		out[i] = observationClaimDoc{claimKey(id.System, id.Value), id.System, id.Value, o.ID, claimed, content}
	}
	return out
}

// claimBSON is bson.Marshal(c), built with bsoncore's appenders
// (TestClaimBSONIsTheReflectiveDocument compares them): every stored
// observation inserts a claim, and the driver's reflective encoder cost
// more than a microsecond each.
func claimBSON(c observationClaimDoc) bson.Raw {
	start, b := bsoncore.AppendDocumentStart(make([]byte, 0, 112+len(c.Key)+len(c.System)+len(c.Value)+len(c.Content)))
	b = bsoncore.AppendStringElement(b, "_id", c.Key)
	b = bsoncore.AppendStringElement(b, "system", c.System)
	b = bsoncore.AppendStringElement(b, "value", c.Value)
	b = bsoncore.AppendInt64Element(b, "observationId", c.ObservationID)
	b = appendTime(b, "claimedAt", c.ClaimedAt)
	if c.Content != "" {
		b = bsoncore.AppendStringElement(b, "content", c.Content)
	}
	b, _ = bsoncore.AppendDocumentEnd(b, start)
	return bson.Raw(b)
}

// ObservationDocuments are the documents CreateObservations inserts for
// an observation whose ID and LastUpdated are set: the observation and its
// claims. Benchmarks insert them with the raw driver to compare against
// the service.
func ObservationDocuments(o *domain.Observation) (doc bson.Raw, claims []any, err error) {
	for _, c := range observationClaims(o) {
		claims = append(claims, claimBSON(c))
	}
	doc, err = observationBSON(o)
	return doc, claims, err
}

// CreateObservations implements domain.ObservationStore. Without
// transactions, it converges: a request cut short at any point and sent
// again stores each observation once.
//
//  1. It reserves the batch's ids and records a write intent naming them
//     and the keys the batch claims.
//  2. It claims every key (identifiers, or the content of observations
//     without one) in one unordered insert; the unique _id refuses taken
//     ones. A taken key whose observation is stored refuses the entry: a
//     duplicate that names it (Stored when it is the same observation). A
//     taken key whose observation is not stored belongs to a write still
//     running (a conflict), or to one that was cut short: its intent is
//     repaired, or, with none, the orphan claim is taken over.
//  3. It inserts the observations that hold all their claims, releases
//     the claims of the entries that failed, and ends the intent.
//
// A crash leaves the intent: its repair releases the claims whose
// observation is not stored, and the retry finds the stored ones as
// duplicates of themselves. A batch that returns with claims it could not
// settle leaves its intent too, given up, for the next write that meets
// one of them once leaseTimeout has passed to repair; so does one whose
// insert of claims or of observations has an unknown outcome
// (outcomeUnknown): it releases nothing, as the insert may still land.
// Ids of entries not stored stay unused (ids are never given back:
// ids.go).
func (d *DB) CreateObservations(ctx context.Context, obs []*domain.Observation) []error {
	entries := make([]batchEntry, len(obs))
	for i, o := range obs {
		entries[i].o = o
	}
	first, err := d.batchIDs(ctx, colObservations, len(obs))
	if err != nil {
		return outcomes(failEntries(entries, err))
	}
	now := d.now().UTC().Truncate(time.Microsecond)
	in := &intentDoc{Kind: intentObservations, FirstID: first, LastID: first + int64(len(obs)) - 1}
	firstWith := make(map[string]int, len(obs)) // key -> the first entry claiming it
	var inserts []claimInsert
	for i := range entries {
		e := &entries[i]
		e.o.ID, e.o.LastUpdated = first+int64(i), now
		e.claims = observationClaims(e.o)
		for _, c := range e.claims {
			if j, ok := firstWith[c.Key]; ok {
				e.repeats = &repeat{j, c}
				break
			}
		}
		if e.repeats != nil {
			continue
		}
		for _, c := range e.claims {
			firstWith[c.Key] = i
			inserts = append(inserts, claimInsert{len(inserts), i, c})
		}
	}
	if err := d.open(ctx, in); err != nil {
		return outcomes(failEntries(entries, err))
	}
	raws := make([]bson.Raw, len(inserts))
	for k, ins := range inserts {
		raws[k] = claimBSON(ins.claim)
	}
	var taken []claimInsert
	for idx, werr := range insertErrors(d.c(colObservationIdentifier).InsertMany(ctx, raws, options.InsertMany().SetOrdered(false))) {
		switch {
		case idx < 0:
			// Which claims were written is unknown: store nothing; the
			// release below removes whatever was (or, when the insert
			// may still land, the repair does).
			failEntries(entries, werr)
		case isDuplicate(werr):
			taken = append(taken, inserts[idx])
			entries[inserts[idx].entry].refused(inserts[idx].claim.Key)
		default:
			e := &entries[inserts[idx].entry]
			e.refused(inserts[idx].claim.Key)
			if e.err == nil {
				e.err = werr
			}
		}
	}
	if len(taken) > 0 {
		// In the order of the claims: an entry whose keys are taken is
		// refused for its first one, whatever order the errors came in.
		slices.SortFunc(taken, func(a, b claimInsert) int { return cmp.Compare(a.index, b.index) })
		d.resolveTaken(ctx, in, entries, taken)
	}
	var inserting []*batchEntry // the entries whose observation is inserted, in order
	for i := range entries {
		e := &entries[i]
		if e.err != nil || e.repeats != nil {
			continue
		}
		if e.doc, e.err = observationBSON(e.o); e.err == nil {
			inserting = append(inserting, e)
		}
	}
	if len(inserting) > 0 {
		docs := make([]any, len(inserting))
		for k, e := range inserting {
			docs[k] = e.doc
		}
		werrs := insertErrors(d.c(colObservations).InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)))
		for idx, werr := range werrs {
			if idx >= 0 {
				inserting[idx].err = werr
			}
		}
		if werr, ok := werrs[-1]; ok {
			d.settleInserted(ctx, inserting, werr)
		}
	}
	// An entry that failed with an unknown outcome (outcomeUnknown) may
	// be stored by a command that lands after the release: an observation
	// without its claims, or claims left with no intent to hold them.
	for i := range entries {
		e := &entries[i]
		e.maybeStored = e.maybeStored || outcomeUnknown(e.err)
	}
	for i := range entries {
		if r := entries[i].repeats; r != nil {
			entries[i].err = r.err(entries[i].o, entries[r.entry].o, entries[r.entry].err)
		}
	}
	end := writeDone
	var release []string
	var unstored []int64
	for i := range entries {
		e := &entries[i]
		switch {
		case e.err == nil || e.repeats != nil:
		case e.maybeStored:
			end = writeUnknown
		default:
			if end == writeDone {
				end = writeUndone // an entry refused: what it claimed is released
			}
			written := len(release)
			for _, c := range e.claims {
				if !slices.Contains(e.unwritten, c.Key) {
					release = append(release, c.Key)
				}
			}
			if len(release) > written {
				unstored = append(unstored, e.o.ID)
			}
		}
	}
	if err := d.releaseObservationClaims(ctx, release, unstored); err != nil {
		end = writeHalfWay
		for _, id := range unstored {
			e := &entries[id-first]
			e.err = fmt.Errorf("%w (and releasing its claims failed: %v)", e.err, err)
		}
	}
	// Claims the batch could not settle stay for the repair of its intent,
	// given up: the next write that meets one once leaseTimeout has passed
	// repairs it. The entries' outcomes stand whether the intent goes or
	// not.
	_ = d.close(ctx, in, end, nil)
	return outcomes(entries)
}

// batchEntry is one observation of a batch, as CreateObservations writes
// it.
type batchEntry struct {
	o      *domain.Observation
	claims []observationClaimDoc // the keys it claims (observationClaims)
	// repeats, when set, is the earlier entry of the batch with one of its
	// keys: this entry writes nothing, and its outcome follows that one's.
	repeats *repeat
	doc     bson.Raw // the observation's document, once built
	err     error    // the entry's outcome: nil when it is stored
	// unwritten are the keys of its claims that it did not write: their
	// insert was refused (taken by another observation, or the claim
	// itself refused). A refused entry releases only the others: a batch
	// sent again, every claim of which is taken, releases nothing.
	unwritten []string
	// maybeStored marks a failed entry whose documents (observation or
	// claims) may have been stored all the same, or may still be: its
	// claims stay, and so does the intent.
	maybeStored bool
}

// refused marks the claim on key as not written by the entry.
func (e *batchEntry) refused(key string) { e.unwritten = append(e.unwritten, key) }

// claimInsert is one claim of a batch's insert of claims, for its entry.
type claimInsert struct {
	index int // of the claim in the insert
	entry int // of the entry in the batch
	claim observationClaimDoc
}

// failEntries fails every entry not failed yet with err.
func failEntries(entries []batchEntry, err error) []batchEntry {
	for i := range entries {
		if entries[i].err == nil {
			entries[i].err = err
		}
	}
	return entries
}

// outcomes are the entries' errors, in order.
func outcomes(entries []batchEntry) []error {
	errs := make([]error, len(entries))
	for i, e := range entries {
		errs[i] = e.err
	}
	return errs
}

// resolveTaken settles the claims the insert found taken. A claim whose
// observation is stored refuses its entry, with what the claim says of
// it (settledClaims) or, when it does not say enough, what the stored
// observation holds; the rare rest (a claim of the older form, of a write
// cut short or still running) goes through takeClaim. Each thing read is
// read in one query for the whole batch: the claims, the intents of
// observation writes, the claims again, and the observations the claims
// do not speak for (none, for a resend of what this version stored). On
// FerretDB every lookup is a pass over the collection, found or not, and
// the claims are its smallest documents: a resend costs no pass over the
// observations.
func (d *DB) resolveTaken(ctx context.Context, in *intentDoc, entries []batchEntry, taken []claimInsert) {
	keys := make([]string, len(taken))
	for k, t := range taken {
		keys[k] = t.claim.Key
	}
	holders, err := d.claimHolders(ctx, keys)
	var settled map[string]bool
	if err == nil {
		settled, err = d.settledClaims(ctx, holders)
	}
	var stored map[int64]domain.Observation
	if err == nil {
		var owners []int64
		for key, h := range holders {
			if !settled[key] {
				owners = append(owners, h.ObservationID)
			}
		}
		stored, err = d.observationsByID(ctx, owners)
	}
	for _, t := range taken {
		e, c := &entries[t.entry], t.claim
		h := holders[c.Key]
		switch {
		case e.err != nil:
		case err != nil:
			e.err = err
		case settled[c.Key]:
			e.err = duplicateOf(c, h.ObservationID, h.Content)
		default:
			if o, ok := stored[h.ObservationID]; ok {
				e.err = duplicateOf(c, o.ID, observationContent(&o))
			} else if e.err = d.takeClaim(ctx, in, c); e.err == nil {
				e.unwritten = slices.DeleteFunc(e.unwritten, func(key string) bool { return key == c.Key }) // it holds it now
			}
		}
	}
}

// settledClaims returns the keys, among the claims holders read, whose
// observation is stored, told without reading the observations: a claim
// that carries its observation's content, whose observation no intent of
// an observation write names, and that still names it when read again
// after the intents were.
//
// Why that says the observation is stored: a claim naming observation X
// is made only by the write that reserved X, under its intent, which is
// recorded before the claim and removed only once the write is settled,
// that is, once X is stored or the claim released (the write's close, or
// the repair of its intent: intents.go). The claim was read while it
// existed, so the intent was recorded by then; the intents, read after,
// do not hold it, so the write was settled by then; and the claim, read
// after that, still names X, so it was not released. Observations are
// never deleted. A claim without content was written by a version that
// kept none, maybe before intents, whose claims could outlive an
// unstored observation: its observation is read.
func (d *DB) settledClaims(ctx context.Context, holders map[string]storedClaim) (map[string]bool, error) {
	var keys []string
	for key, h := range holders {
		if h.Content != "" {
			keys = append(keys, key)
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	var writes []intentDoc
	err := d.findAll(ctx, colIntents, bson.M{"kind": intentObservations}, &writes, options.Find().SetProjection(bson.M{"firstId": 1, "lastId": 1}))
	if err != nil {
		return nil, err
	}
	keys = slices.DeleteFunc(keys, func(key string) bool {
		id := holders[key].ObservationID
		return slices.ContainsFunc(writes, func(w intentDoc) bool { return w.FirstID <= id && id <= w.LastID })
	})
	if len(keys) == 0 {
		return nil, nil
	}
	again, err := d.claimHolders(ctx, keys)
	if err != nil {
		return nil, err
	}
	settled := make(map[string]bool, len(keys))
	for _, key := range keys {
		if h, ok := again[key]; ok && h.ObservationID == holders[key].ObservationID {
			settled[key] = true
		}
	}
	return settled, nil
}

// claimHolders returns the claims on keys (of the current form), by key.
func (d *DB) claimHolders(ctx context.Context, keys []string) (map[string]storedClaim, error) {
	var found []struct {
		Key           string `bson:"_id"`
		ObservationID int64  `bson:"observationId"`
		Content       string `bson:"content"`
	}
	if err := d.findAll(ctx, colObservationIdentifier, bson.M{"_id": bson.M{"$in": keys}}, &found); err != nil {
		return nil, err
	}
	out := make(map[string]storedClaim, len(found))
	for _, x := range found {
		out[x.Key] = storedClaim{x.Key, x.ObservationID, x.Content}
	}
	return out, nil
}

// observationsByID returns the stored observations among ids, by id.
func (d *DB) observationsByID(ctx context.Context, ids []int64) (map[int64]domain.Observation, error) {
	out := map[int64]domain.Observation{}
	if len(ids) == 0 {
		return out, nil
	}
	var docs []observationDoc
	if err := d.findAll(ctx, colObservations, bson.M{"_id": bson.M{"$in": ids}}, &docs, options.Find().SetProjection(bson.M{"omh": 0})); err != nil {
		return nil, err
	}
	for _, x := range docs {
		out[x.ID] = x.observation()
	}
	return out, nil
}

// takeClaim settles one claim c the insert found taken, for its
// observation, of the write under intent in: nil once the observation
// holds it, else the entry's error.
func (d *DB) takeClaim(ctx context.Context, in *intentDoc, c observationClaimDoc) error {
	for attempt := 0; attempt < 3; attempt++ {
		owner, filter, found, err := d.observationClaim(ctx, c)
		if err != nil {
			return err
		}
		if found {
			if err := d.claimedBy(ctx, c, owner); err != nil {
				return err
			}
			// Its observation is not stored: a write still running, one
			// cut short (its intent is repaired now), or none (an orphan
			// of a version before intents).
			live, err := d.settleObservationClaim(ctx, owner, in)
			if err != nil {
				return err
			}
			if live {
				return domain.Errorf(domain.CodeConflict, "an observation with %s is being stored by another request as Observation/%d; send it again later", claimName(c), owner)
			}
			if err := d.claimedBy(ctx, c, owner); err != nil {
				return err
			}
			if _, err := d.c(colObservationIdentifier).DeleteOne(ctx, filter); err != nil {
				return err
			}
		}
		_, err = d.c(colObservationIdentifier).InsertOne(ctx, c)
		if !isDuplicate(err) {
			return err
		}
	}
	return domain.Errorf(domain.CodeConflict, "observations with %s are being stored by other requests; send it again later", claimName(c))
}

// observationClaim looks up who holds the key of c; filter selects that
// very claim, to take it over.
func (d *DB) observationClaim(ctx context.Context, c observationClaimDoc) (owner int64, filter bson.M, found bool, err error) {
	var x storedClaim
	err = d.c(colObservationIdentifier).FindOne(ctx, bson.M{"_id": c.Key}).Decode(&x)
	if errors.Is(err, mongo.ErrNoDocuments) {
		// A claim of the older form, keyed by an ObjectID.
		err = d.c(colObservationIdentifier).FindOne(ctx, bson.M{"system": c.System, "value": c.Value}).Decode(&x)
	}
	if errors.Is(err, mongo.ErrNoDocuments) {
		return 0, nil, false, nil
	}
	if err != nil {
		return 0, nil, false, err
	}
	return x.ObservationID, bson.M{"_id": x.ID, "observationId": x.ObservationID}, true, nil
}

// claimedBy returns the duplicate error of the observation whose claim c
// is held by owner when owner is stored (or the failure to find out), nil
// when it is not stored.
func (d *DB) claimedBy(ctx context.Context, c observationClaimDoc, owner int64) error {
	stored, err := d.observationsByID(ctx, []int64{owner})
	if err != nil {
		return err
	}
	if s, ok := stored[owner]; ok {
		return duplicateOf(c, s.ID, observationContent(&s))
	}
	return nil
}

// duplicateOf is the error of the observation whose claim c is held by
// the stored observation id, of the content stored: Stored when that is
// the observation's own content (c.Content), sent again.
func duplicateOf(c observationClaimDoc, id int64, stored string) error {
	ref := fmt.Sprintf("Observation/%d", id)
	if stored == c.Content {
		return &domain.Error{Code: domain.CodeDuplicate, Stored: ref,
			Message: fmt.Sprintf("this observation (%s) is stored already, as %s", claimName(c), ref)}
	}
	return &domain.Error{Code: domain.CodeDuplicate, Field: "Observation.identifier",
		Message: fmt.Sprintf("%s belongs to %s, a different observation", claimName(c), ref)}
}

// repeat is an entry of a batch that has a key of an earlier entry: the
// claim on it.
type repeat struct {
	entry int
	claim observationClaimDoc
}

// err is the error of the repeating entry o, given the earlier entry's
// outcome.
func (r repeat) err(o, first *domain.Observation, firstErr error) error {
	ref := fmt.Sprintf("Observation/%d", first.ID)
	switch {
	case firstErr == nil && observationContent(o) == observationContent(first):
		return &domain.Error{Code: domain.CodeDuplicate, Stored: ref,
			Message: fmt.Sprintf("this observation (%s) is stored already, as %s (an earlier entry of the batch)", claimName(r.claim), ref)}
	case firstErr == nil:
		return &domain.Error{Code: domain.CodeDuplicate, Field: "Observation.identifier",
			Message: fmt.Sprintf("%s belongs to %s (an earlier entry of the batch), a different observation", claimName(r.claim), ref)}
	}
	return domain.Errorf(domain.CodeDuplicate, "%s is also in an earlier entry of the batch, which was refused", claimName(r.claim))
}

// claimName says what a claim is about, for messages.
func claimName(c observationClaimDoc) string {
	if c.System == contentClaimSystem {
		return "its content"
	}
	return fmt.Sprintf("identifier %s|%s", c.System, c.Value)
}

// releaseObservationClaims removes the claims on keys of the observations
// ids, which are not stored: one delete, whatever the number of keys. A
// claim another write took over since names another observation, and
// stays.
func (d *DB) releaseObservationClaims(ctx context.Context, keys []string, ids []int64) error {
	if len(keys) == 0 {
		return nil
	}
	_, err := d.c(colObservationIdentifier).DeleteMany(context.WithoutCancel(ctx), bson.M{"_id": bson.M{"$in": keys}, "observationId": bson.M{"$in": ids}})
	return err
}

// repairObservations is the repair of an observation write cut short: it
// removes the claims of the observations of the intent's ids
// (FirstID..LastID) that are not stored. Its claims are found by the ids
// they name (the observation index of the claims; the intent lists no
// keys), and the observations they name are looked up in one query.
func (d *DB) repairObservations(ctx context.Context, in *intentDoc) error {
	ctx, first, last := context.WithoutCancel(ctx), in.FirstID, in.LastID
	var claims []struct {
		ObservationID int64 `bson:"observationId"`
	}
	if err := d.findAll(ctx, colObservationIdentifier, bson.M{"observationId": bson.M{"$gte": first, "$lte": last}}, &claims,
		options.Find().SetProjection(bson.M{"observationId": 1})); err != nil {
		return err
	}
	var owners []int64
	for _, c := range claims {
		if !slices.Contains(owners, c.ObservationID) {
			owners = append(owners, c.ObservationID)
		}
	}
	stored, err := d.observationsByID(ctx, owners)
	if err != nil {
		return err
	}
	var unstored []int64
	for _, id := range owners {
		if _, ok := stored[id]; !ok {
			unstored = append(unstored, id)
		}
	}
	if len(unstored) == 0 {
		return nil
	}
	_, err = d.c(colObservationIdentifier).DeleteMany(ctx, bson.M{"observationId": bson.M{"$in": unstored}})
	return err
}

// exists reports whether a document with the id is in the collection.
func (d *DB) exists(ctx context.Context, col string, id any) (bool, error) {
	err := d.c(col).FindOne(ctx, bson.M{"_id": id}, options.FindOne().SetProjection(bson.M{"_id": 1})).Err()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return false, nil
	}
	return err == nil, err
}

// settleInserted decides the entries of an insert of observations that
// failed as a whole, some of whose documents may be stored: a stored one
// succeeded, a missing one fails with cause. If the lookup fails, the
// undecided entries fail and are marked maybeStored. When cause leaves
// the insert's outcome unknown (outcomeUnknown), a missing document may
// still land: its entry fails with cause, which its caller marks
// maybeStored, keeping its claims.
func (d *DB) settleInserted(ctx context.Context, inserted []*batchEntry, cause error) {
	ids := make([]int64, len(inserted))
	for k, e := range inserted {
		ids[k] = e.o.ID
	}
	var found []idDoc
	err := d.findAll(context.WithoutCancel(ctx), colObservations, bson.M{"_id": bson.M{"$in": ids}}, &found,
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	stored := make(map[int64]bool, len(found))
	for _, x := range found {
		stored[x.ID] = true
	}
	for _, e := range inserted {
		switch {
		case e.err != nil: // refused on its own
		case err != nil:
			e.err = fmt.Errorf("%w (and whether it was stored is unknown: %v)", cause, err)
			e.maybeStored = true
		case !stored[e.o.ID]:
			e.err = cause
		}
	}
}

// insertErrors maps the outcome of an unordered InsertMany to the failed
// indexes; index -1 holds an error that is not about one document.
func insertErrors(_ *mongo.InsertManyResult, err error) map[int]error {
	if err == nil {
		return nil
	}
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
		return map[int]error{-1: err}
	}
	out := map[int]error{}
	for _, we := range bwe.WriteErrors {
		out[we.Index] = mongo.WriteException{WriteErrors: []mongo.WriteError{we.WriteError}}
	}
	return out
}

func failAll(errs []error, err error) []error {
	for i := range errs {
		if errs[i] == nil {
			errs[i] = err
		}
	}
	return errs
}

// ObservationByID implements domain.ObservationStore.
func (d *DB) ObservationByID(ctx context.Context, id int64) (*domain.Observation, error) {
	var x observationDoc
	err := d.findOne(ctx, colObservations, bson.M{"_id": id}, &x, fmt.Sprintf("Observation/%d does not exist", id),
		options.FindOne().SetProjection(bson.M{"omh": 0}))
	if err != nil {
		return nil, err
	}
	o := x.observation()
	return &o, nil
}

// PatientHoldsObservations implements domain.ObservationStore: one
// lookup on the patient_id index, limited to one document.
func (d *DB) PatientHoldsObservations(ctx context.Context, patientID int64) (bool, error) {
	return d.anyObservation(ctx, "patientId", patientID)
}

// DataSourceHoldsObservations implements domain.ObservationStore: one
// lookup on the dataSource index.
func (d *DB) DataSourceHoldsObservations(ctx context.Context, dataSourceID int64) (bool, error) {
	return d.anyObservation(ctx, "dataSourceId", dataSourceID)
}

// anyObservation reports whether an observation has field = id.
func (d *DB) anyObservation(ctx context.Context, field string, id int64) (bool, error) {
	err := d.c(colObservations).FindOne(ctx, bson.D{{Key: field, Value: id}},
		options.FindOne().SetProjection(bson.D{{Key: "_id", Value: 1}})).Err()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return false, nil
	}
	return err == nil, err
}

// SearchObservations implements domain.ObservationStore.
func (d *DB) SearchObservations(ctx context.Context, plan *domain.SearchPlan) (domain.SearchResult[domain.Observation], error) {
	return runSearchRaw(ctx, d, plan, newObservationPage(plan.PageSize+1).read)
}

// ObservationPage reads stored observation documents as SearchObservations
// reads a page of them off the cursor (the documents its pipeline
// returns). Benchmarks measure a search page with it without a database.
func ObservationPage(docs []bson.Raw) ([]domain.Observation, error) {
	p := newObservationPage(len(docs))
	out := make([]domain.Observation, 0, len(docs))
	for _, raw := range docs {
		o, err := p.read(raw)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

// ObservationCodes implements domain.ObservationStore: a distinct over the
// patient's observations (the patient_* indexes narrow it on MongoDB).
func (d *DB) ObservationCodes(ctx context.Context, patientID int64) ([]string, error) {
	var codes []string
	if err := d.c(colObservations).Distinct(ctx, "code", bson.D{{Key: "patientId", Value: patientID}}).Decode(&codes); err != nil {
		return nil, err
	}
	slices.Sort(codes)
	return codes, nil
}

// DataSourcesWithObservations implements domain.ObservationStore: a
// distinct of dataSourceId over the patients' observations from those
// data sources.
func (d *DB) DataSourcesWithObservations(ctx context.Context, dataSourceIDs, patientIDs []int64) ([]int64, error) {
	filter := bson.D{{Key: "patientId", Value: bson.M{"$in": patientIDs}}, {Key: "dataSourceId", Value: bson.M{"$in": dataSourceIDs}}}
	var ids []int64
	if err := d.c(colObservations).Distinct(ctx, "dataSourceId", filter).Decode(&ids); err != nil {
		return nil, err
	}
	slices.Sort(ids)
	return ids, nil
}
