package repo

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"exchange/domain"
	"exchange/fhirsearch"
	"exchange/omh"
)

// errUnusual marks a stored observation the fast reader leaves to the
// reflective decoder: a member of a type the service never writes (an
// int32 id, a string date, a null), from an older release or an analyst's
// edit. The reflective decoder knows every conversion the driver allows.
var errUnusual = errors.New("an observation document of an unusual shape")

// observationPage reads the stored observations of one search page as
// bson.Unmarshal(raw, &observationDoc) then observationDoc.observation()
// would, without reflection: a page reads 50 of them, and the reflective
// decoder allocates about a hundred times for each. Members of the types
// the service writes are read here; any other shape goes to the reflective
// decoder, so that both always agree (a test compares them).
//
// The values share the page's buffers: its codings, identifiers, time
// frames, payloads and strings are a few allocations, where each document
// took five of its own (its strings were cut from one copy of it).
type observationPage struct {
	n           int // the documents its buffers are made for
	done        int // the documents read so far
	codings     []domain.Coding
	identifiers []domain.Identifier
	frames      []omh.TimeFrame
	payloads    []byte // a chunk: full, it is left to the payloads cut from it and another one starts
	strings     strings.Builder
	last        [stringMembers]string // each string member's value in the document read before
}

// stringMember names a string member of a stored observation, for the
// page to give a value the same as the previous document's its string.
type stringMember int

const (
	memberStatus stringMember = iota
	memberCode
	memberContentType
	memberCodingSystem
	memberCodingCode
	memberCodingDisplay
	memberIdentifierSystem
	memberIdentifierValue
	memberDateTime
	memberStart
	memberEnd
	stringMembers
)

// newObservationPage reads a page of n documents: its buffers are made for
// n, or for pageHint of a larger page, and grow past that.
func newObservationPage(n int) *observationPage {
	n = min(n, pageHint)
	return &observationPage{n: n, codings: make([]domain.Coding, 0, n), identifiers: make([]domain.Identifier, 0, n), frames: make([]omh.TimeFrame, 0, n)}
}

// read reads one document. raw may be the cursor's buffer: the value keeps
// no byte of it.
func (p *observationPage) read(raw bson.Raw) (domain.Observation, error) {
	p.done++
	r := docReader{raw: raw, page: p}
	o, err := r.observation()
	if errors.Is(err, errUnusual) {
		var x observationDoc
		if err := bson.Unmarshal(slices.Clone(raw), &x); err != nil {
			return domain.Observation{}, err
		}
		return x.observation(), nil
	}
	return o, err
}

// payload copies data into the current chunk, which is never written
// again where a payload was cut (appends only go past it), and returns
// the copy, its capacity limited so that an append to it reallocates. A
// chunk is made for the documents still expected if they are the size of
// this one, but no larger than 64 KiB unless this payload is.
func (p *observationPage) payload(data []byte) []byte {
	if p.payloads == nil || len(p.payloads)+len(data) > cap(p.payloads) {
		left := max(p.n-p.done+1, 1)
		p.payloads = make([]byte, 0, max(len(data), min(len(data)*left, 64<<10)))
	}
	start := len(p.payloads)
	p.payloads = append(p.payloads, data...)
	return p.payloads[start:len(p.payloads):len(p.payloads)]
}

// text returns b as a string of member m: the string of the document read
// before when it is the same text (the status, codes, systems and content
// type of a page's observations mostly are: their copies were a tenth of
// the bytes a page allocates), else a copy cut from the page's strings. A
// strings.Builder only ever appends, so what String returned is never
// written over, even when it grows into a new buffer.
func (p *observationPage) text(m stringMember, b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if last := p.last[m]; last == string(b) {
		return last
	}
	if p.strings.Cap() == 0 {
		// The strings of a heart-rate observation are ~150 bytes, of which
		// ~40 (its identifier's value, its date-time) differ from the
		// document before it.
		p.strings.Grow(160 + p.n*48)
	}
	start := p.strings.Len()
	p.strings.Write(b)
	p.last[m] = p.strings.String()[start:]
	return p.last[m]
}

// cut returns the items of s from start, their capacity limited (so that
// an append to them reallocates rather than writing over the next
// document's), or nil for none.
func cut[T any](s []T, start int) []T {
	if len(s) == start {
		return nil
	}
	return s[start:len(s):len(s)]
}

// docReader reads one stored observation into its page's buffers.
type docReader struct {
	raw  bson.Raw
	page *observationPage
}

// str sets *dest to a string value of member m, kept in the page's text;
// errUnusual for another type, or a string whose length or terminating
// NUL is wrong (which the reflective decoder refuses).
func (r *docReader) str(v bsoncore.Value, m stringMember, dest *string) error {
	length, _, ok := bsoncore.ReadLength(v.Data)
	if v.Type != bsoncore.TypeString || !ok || length < 1 || int(length) != len(v.Data)-4 || v.Data[len(v.Data)-1] != 0 {
		return errUnusual
	}
	*dest = r.page.text(m, v.Data[4:len(v.Data)-1])
	return nil
}

// observation reads the members of an observation document the domain
// value holds; errUnusual for a shape it leaves to the reflective decoder,
// including a malformed document (which that decoder reports). Members it
// skips are not checked: a document the database returns is well formed.
func (r *docReader) observation() (domain.Observation, error) {
	o := domain.Observation{LastUpdated: time.UnixMicro(0).UTC()}
	var effective *omh.TimeFrame
	var start, end time.Time
	var hasStart, hasEnd bool
	err := eachMember(bsoncore.Document(r.raw), func(key []byte, v bsoncore.Value) error {
		var ok bool
		switch string(key) {
		case "_id":
			o.ID, ok = v.Int64OK()
		case "patientId":
			o.PatientID, ok = v.Int64OK()
		case "dataSourceId":
			o.DataSourceID, ok = v.Int64OK()
		case "status":
			return r.str(v, memberStatus, &o.Status)
		case "code":
			return r.str(v, memberCode, &o.Code)
		case "contentType":
			return r.str(v, memberContentType, &o.ContentType)
		case "lastUpdatedMicros":
			var us int64
			us, ok = v.Int64OK()
			o.LastUpdated = time.UnixMicro(us).UTC()
		case "payload":
			var subtype byte
			var data []byte
			subtype, data, ok = v.BinaryOK()
			ok = ok && subtype == bson.TypeBinaryGeneric
			if ok && data != nil {
				o.Payload = r.page.payload(data)
			}
		case "codings":
			// A member named twice: the last one counts.
			start := len(r.page.codings)
			err := eachItem(v, func(item bsoncore.Document) error {
				var c domain.Coding
				err := eachMember(item, func(key []byte, v bsoncore.Value) error {
					switch string(key) {
					case "system":
						return r.str(v, memberCodingSystem, &c.System)
					case "code":
						return r.str(v, memberCodingCode, &c.Code)
					case "display":
						return r.str(v, memberCodingDisplay, &c.Display)
					}
					return unusualKey(key, "system", "code", "display")
				})
				r.page.codings = append(r.page.codings, c)
				return err
			})
			o.Codings = cut(r.page.codings, start)
			return err
		case "identifiers":
			start := len(r.page.identifiers)
			err := eachItem(v, func(item bsoncore.Document) error {
				var id domain.Identifier
				err := eachMember(item, func(key []byte, v bsoncore.Value) error {
					switch string(key) {
					case "system":
						return r.str(v, memberIdentifierSystem, &id.System)
					case "value":
						return r.str(v, memberIdentifierValue, &id.Value)
					}
					return unusualKey(key, "system", "value")
				})
				r.page.identifiers = append(r.page.identifiers, id)
				return err
			})
			o.Identifiers = cut(r.page.identifiers, start)
			return err
		case "effective":
			effective = nil
			if v.Type == bsoncore.TypeNull { // an observation without a time frame
				return nil
			}
			d, isDoc := v.DocumentOK()
			if !isDoc {
				return errUnusual
			}
			r.page.frames = append(r.page.frames, omh.TimeFrame{})
			tf := &r.page.frames[len(r.page.frames)-1] // appends go past it: it stays this document's
			effective = tf
			return eachMember(d, func(key []byte, v bsoncore.Value) error {
				switch string(key) {
				case "dateTime":
					return r.str(v, memberDateTime, &tf.DateTime)
				case "start":
					return r.str(v, memberStart, &tf.PeriodStart)
				case "end":
					return r.str(v, memberEnd, &tf.PeriodEnd)
				}
				return unusualKey(key, "start", "end")
			})
		case "effectiveStart", "effectiveEnd":
			t, has := &start, &hasStart
			if key[len("effective")] == 'E' {
				t, has = &end, &hasEnd
			}
			*has, ok = v.Type != bsoncore.TypeNull, true
			if *has {
				var ms int64
				ms, ok = v.DateTimeOK()
				*t = time.UnixMilli(ms).UTC()
			}
		default: // members the domain value does not hold
			return unusualKey(key, "_id", "status", "code", "codings", "identifiers", "payload", "effective")
		}
		if !ok {
			return errUnusual
		}
		return nil
	})
	if err != nil {
		return domain.Observation{}, err
	}
	if effective != nil && hasStart && hasEnd {
		effective.Start, effective.End = start, end
		o.Effective = effective
	}
	return o, nil
}

// unusualKey is errUnusual for a key that the reflective decoder reads
// as one of names, the lower-case names of its fields that the reader
// reads by their exact names: a key it does not find, it looks up again
// as strings.ToLower gives it (a document holding both "codings" and
// "Codings" has the codings of whichever comes last). A key that lowers
// to one of them is left to it. A document the service writes has none.
func unusualKey(key []byte, names ...string) error {
	for _, name := range names {
		if lowersTo(key, name) {
			return errUnusual
		}
	}
	return nil
}

// lowersTo reports whether strings.ToLower(string(key)) == name for an
// ASCII name, without making the string: a page reads a few such keys in
// every document. Rune by rune as strings.ToLower maps them (unicode.ToLower),
// which lowers more than folds to ASCII (U+0130, the dotted capital I,
// lowers to i); an invalid byte becomes U+FFFD, never ASCII.
func lowersTo(key []byte, name string) bool {
	i := 0
	for len(key) > 0 {
		r, size := utf8.DecodeRune(key)
		if i == len(name) || unicode.ToLower(r) != rune(name[i]) {
			return false
		}
		key, i = key[size:], i+1
	}
	return i == len(name)
}

// eachMember calls f with each member of a BSON document; errUnusual for a
// malformed one.
func eachMember(doc bsoncore.Document, f func(key []byte, v bsoncore.Value) error) error {
	length, _, ok := bsoncore.ReadLength(doc)
	if !ok || length < 5 || int(length) > len(doc) || doc[length-1] != 0 {
		return errUnusual
	}
	rest := doc[4 : length-1]
	for len(rest) > 0 {
		// An element is its type, its key up to NUL, then its value: read
		// in one pass (bsoncore's ReadElement, KeyBytesErr and ValueErr
		// would each look for the end of the key).
		k := bytes.IndexByte(rest[1:], 0)
		if k < 0 {
			return errUnusual
		}
		key := rest[1 : 1+k]
		var v bsoncore.Value
		if v, rest, ok = bsoncore.ReadValue(rest[2+k:], bsoncore.Type(rest[0])); !ok {
			return errUnusual
		}
		if err := f(key, v); err != nil {
			return err
		}
	}
	return nil
}

// eachItem calls f with each document of a BSON array of documents.
func eachItem(v bsoncore.Value, f func(bsoncore.Document) error) error {
	a, ok := v.ArrayOK()
	if !ok {
		return errUnusual
	}
	return eachMember(bsoncore.Document(a), func(_ []byte, v bsoncore.Value) error {
		d, ok := v.DocumentOK()
		if !ok {
			return errUnusual
		}
		return f(d)
	})
}

// observationBSON is the stored document of an observation, exactly as
// bson.Marshal(toObservationDoc(o)) writes it (a test compares them), built
// with bsoncore's appenders: an upload of 1,000 observations spent a sixth
// of its CPU in the reflective encoder and in turning each decoded data
// point into a bson.D first. The data point (o.DataPoint) is JSON as
// omh.Parse decodes it; a value of any other Go type is encoded by the
// driver. An error means a document BSON cannot hold (a key with NUL,
// which omh.Parse refuses).
func observationBSON(o *domain.Observation) (bson.Raw, error) {
	start, b := bsoncore.AppendDocumentStart(make([]byte, 0, observationBSONSize(o)))
	b = bsoncore.AppendInt64Element(b, "_id", o.ID)
	b = bsoncore.AppendInt64Element(b, "patientId", o.PatientID)
	b = bsoncore.AppendInt64Element(b, "dataSourceId", o.DataSourceID)
	b = bsoncore.AppendStringElement(b, "status", o.Status)
	b = bsoncore.AppendStringElement(b, "code", o.Code)
	if o.Codings == nil {
		b = bsoncore.AppendNullElement(b, "codings")
	} else {
		var arr int32
		arr, b = bsoncore.AppendArrayElementStart(b, "codings")
		for i, c := range o.Codings {
			var doc int32
			doc, b = bsoncore.AppendDocumentElementStart(b, arrayKey(i))
			b = bsoncore.AppendStringElement(b, "system", c.System)
			b = bsoncore.AppendStringElement(b, "code", c.Code)
			if c.Display != "" {
				b = bsoncore.AppendStringElement(b, "display", c.Display)
			}
			b, _ = bsoncore.AppendDocumentEnd(b, doc)
		}
		b, _ = bsoncore.AppendArrayEnd(b, arr)
	}
	b = appendCodeTokens(b, o.Codings)
	arr, b := bsoncore.AppendArrayElementStart(b, "identifiers")
	for i, id := range o.Identifiers {
		var doc int32
		doc, b = bsoncore.AppendDocumentElementStart(b, arrayKey(i))
		b = bsoncore.AppendStringElement(b, "system", id.System)
		b = bsoncore.AppendStringElement(b, "value", id.Value)
		b, _ = bsoncore.AppendDocumentEnd(b, doc)
	}
	b, _ = bsoncore.AppendArrayEnd(b, arr)
	b = appendIdentifierTokens(b, o.Identifiers)
	b = bsoncore.AppendStringElement(b, "contentType", o.ContentType)
	if o.Payload == nil {
		b = bsoncore.AppendNullElement(b, "payload")
	} else {
		b = bsoncore.AppendBinaryElement(b, "payload", bson.TypeBinaryGeneric, o.Payload)
	}
	if len(o.DataPoint) > 0 { // omitempty
		var err error
		if b, err = appendJSONDocument(bsoncore.AppendHeader(b, bsoncore.TypeEmbeddedDocument, "omh"), o.DataPoint); err != nil {
			return nil, err
		}
	}
	sortAsc, sortDesc := domain.SortLastAscending, domain.SortLastDescending
	spanClass := fhirsearch.SpanClass(nil, nil)
	if tf := o.Effective; tf != nil {
		var doc int32
		doc, b = bsoncore.AppendDocumentElementStart(b, "effective")
		for _, m := range [...]struct{ key, value string }{{"dateTime", tf.DateTime}, {"start", tf.PeriodStart}, {"end", tf.PeriodEnd}} {
			if m.value != "" {
				b = bsoncore.AppendStringElement(b, m.key, m.value)
			}
		}
		b, _ = bsoncore.AppendDocumentEnd(b, doc)
		b = appendTime(b, "effectiveStart", tf.Start)
		b = appendTime(b, "effectiveEnd", tf.End)
		sortAsc, sortDesc = tf.Start, tf.Start
		spanClass = fhirsearch.SpanClass(&tf.Start, &tf.End)
	} else {
		b = bsoncore.AppendNullElement(b, "effective")
		b = bsoncore.AppendNullElement(b, "effectiveStart")
		b = bsoncore.AppendNullElement(b, "effectiveEnd")
	}
	b = appendTime(b, "sortAsc", sortAsc)
	b = appendTime(b, "sortDesc", sortDesc)
	b = bsoncore.AppendInt32Element(b, fhirsearch.SpanClassField, spanClass)
	if v, unit, ok := omh.SingleQuantity(o.DataPoint); ok {
		b = bsoncore.AppendDoubleElement(b, "valueNumber", v)
		b = bsoncore.AppendStringElement(b, "valueUnit", unit)
	}
	b = appendTime(b, "lastUpdated", o.LastUpdated)
	b = bsoncore.AppendInt64Element(b, "lastUpdatedMicros", o.LastUpdated.UnixMicro())
	b, err := bsoncore.AppendDocumentEnd(b, start)
	return bson.Raw(b), err
}

// observationBSONSize is a bound of the size of o's document, so that it
// is built in one allocation: the payload, its decoding (about half as
// large again in BSON), the fixed members, and the codings and identifiers
// with their token keys (each string of theirs is written up to five
// times, with element headers). A document larger than that only grows.
func observationBSONSize(o *domain.Observation) int {
	text := 0
	for _, c := range o.Codings {
		text += len(c.System) + len(c.Code) + len(c.Display) + 16
	}
	for _, id := range o.Identifiers {
		text += len(id.System) + len(id.Value) + 16
	}
	return 5*len(o.Payload)/2 + 512 + 8*text
}

// arrayKeys are the keys of the first items of a BSON array.
var arrayKeys = [...]string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}

// arrayKey is the key of item i of a BSON array: its index.
func arrayKey(i int) string {
	if i < len(arrayKeys) {
		return arrayKeys[i]
	}
	return strconv.Itoa(i)
}

// appendTime appends a BSON date (milliseconds) as the driver encodes a
// time.Time.
func appendTime(b []byte, key string, t time.Time) []byte {
	return bsoncore.AppendDateTimeElement(b, key, int64(bson.NewDateTimeFromTime(t)))
}

// appendCodeTokens appends the element codeTokens: codeTokens(codings)
// as the driver encodes a []string (nil is null), each key written from
// its parts (fhirsearch.TokenKeyTokens): a document holds a dozen keys,
// and making each a string first cost an allocation apiece.
func appendCodeTokens(b []byte, codings []domain.Coding) []byte {
	if len(codings) == 0 {
		return bsoncore.AppendNullElement(b, "codeTokens") // codeTokens' nil
	}
	arr, b := bsoncore.AppendArrayElementStart(b, "codeTokens")
	n := 0
	add := func(system, code string) {
		tokens, m := fhirsearch.TokenKeyTokens(system, code)
		for _, t := range tokens[:m] {
			if !tokenWritten(b[int(arr)+4:], t) {
				b = appendTokenKey(b, arrayKey(n), t)
				n++
			}
		}
	}
	for _, c := range codings {
		if domain.IsNativeSystem(c.System) {
			add(domain.SystemOpenMHealth, c.Code)
			add(domain.SystemIEEE1752, c.Code)
		} else {
			add(c.System, c.Code)
		}
	}
	b, _ = bsoncore.AppendArrayEnd(b, arr)
	return b
}

// appendIdentifierTokens appends the element identifierTokens:
// identifierTokens(ids) as the driver encodes a []string (an empty array
// when there are none), each key written from its parts.
func appendIdentifierTokens(b []byte, ids []domain.Identifier) []byte {
	arr, b := bsoncore.AppendArrayElementStart(b, "identifierTokens")
	n := 0
	for _, id := range ids {
		tokens, m := fhirsearch.TokenKeyTokens(id.System, id.Value)
		for _, t := range tokens[:m] {
			b = appendTokenKey(b, arrayKey(n), t)
			n++
		}
	}
	b, _ = bsoncore.AppendArrayEnd(b, arr)
	return b
}

// appendTokenKey appends the string element key: t.Key().
func appendTokenKey(b []byte, key string, t fhirsearch.Token) []byte {
	size := len(t.System) + len(t.Code) + 1 // and the NUL
	if t.HasSystem {
		size++ // the bar
	}
	b = bsoncore.AppendHeader(b, bsoncore.TypeString, key)
	b = binary.LittleEndian.AppendUint32(b, uint32(size))
	b = append(b, t.System...)
	if t.HasSystem {
		b = append(b, '|')
	}
	return append(append(b, t.Code...), 0)
}

// tokenWritten reports whether elements, the string elements of an array
// written so far, hold t.Key().
func tokenWritten(elements []byte, t fhirsearch.Token) bool {
	for len(elements) > 0 {
		name := bytes.IndexByte(elements[1:], 0) // after the type byte
		value := elements[1+name+1:]
		size := int(binary.LittleEndian.Uint32(value))
		if tokenIs(value[4:4+size-1], t) {
			return true
		}
		elements = value[4+size:]
	}
	return false
}

// tokenIs reports whether s is t.Key().
func tokenIs(s []byte, t fhirsearch.Token) bool {
	if len(s) < len(t.System) || string(s[:len(t.System)]) != t.System {
		return false
	}
	rest := s[len(t.System):]
	if t.HasSystem {
		if len(rest) == 0 || rest[0] != '|' {
			return false
		}
		rest = rest[1:]
	}
	return string(rest) == t.Code
}

// errNULKey refuses a key BSON cannot hold.
var errNULKey = errors.New("a key with NUL cannot be stored in BSON")

// appendJSONDocument appends m as the value of a document element whose
// header b ends with, as bsonDocument(m) marshals: keys sorted, integers
// that fit as int64, other numbers as doubles.
//
// The members are taken with their values in one iteration of m and sorted
// by key (keys are unique), not looked up again by key; a key's NUL is
// looked for byte by byte: a data point's keys are a few bytes, and the
// lookups and the calls of strings.IndexByte were half of this function.
func appendJSONDocument(b []byte, m map[string]any) ([]byte, error) {
	var small [16]jsonMember // a data point's objects fit: no allocation
	members := small[:0]
	for k, v := range m {
		for i := 0; i < len(k); i++ {
			if k[i] == 0 {
				return nil, errNULKey
			}
		}
		members = append(members, jsonMember{k, v})
	}
	slices.SortFunc(members, func(x, y jsonMember) int { return strings.Compare(x.key, y.key) })
	start, b := bsoncore.AppendDocumentStart(b)
	var err error
	for _, m := range members {
		if b, err = appendJSONValue(b, m.key, m.value); err != nil {
			return nil, err
		}
	}
	return bsoncore.AppendDocumentEnd(b, start)
}

// jsonMember is a member of a decoded JSON object.
type jsonMember struct {
	key   string
	value any
}

// appendJSONValue appends the element key: v, as bsonValue(v) marshals.
// key holds no NUL: appendJSONDocument checked it, or it is an array
// index; so each element's header is written by appendKnownHeader.
func appendJSONValue(b []byte, key string, v any) ([]byte, error) {
	switch v := v.(type) {
	case map[string]any:
		return appendJSONDocument(appendKnownHeader(b, bsoncore.TypeEmbeddedDocument, key), v)
	case []any:
		arr, b := bsoncore.AppendArrayStart(appendKnownHeader(b, bsoncore.TypeArray, key))
		var err error
		for i, x := range v {
			if b, err = appendJSONValue(b, arrayKey(i), x); err != nil {
				return nil, err
			}
		}
		return bsoncore.AppendArrayEnd(b, arr)
	case string:
		return bsoncore.AppendString(appendKnownHeader(b, bsoncore.TypeString, key), v), nil
	case bool:
		return bsoncore.AppendBoolean(appendKnownHeader(b, bsoncore.TypeBoolean, key), v), nil
	case nil:
		return appendKnownHeader(b, bsoncore.TypeNull, key), nil
	case json.Number:
		if n, err := v.Int64(); err == nil {
			return bsoncore.AppendInt64(appendKnownHeader(b, bsoncore.TypeInt64, key), n), nil
		}
		f, _ := v.Float64()
		if math.IsInf(f, 0) {
			return appendKnownHeader(b, bsoncore.TypeNull, key), nil
		}
		return bsoncore.AppendDouble(appendKnownHeader(b, bsoncore.TypeDouble, key), f), nil
	}
	t, data, err := bson.MarshalValue(bsonValue(v))
	if err != nil {
		return nil, err
	}
	return bsoncore.AppendValueElement(b, key, bsoncore.Value{Type: bsoncore.Type(t), Data: data}), nil
}

// appendKnownHeader is bsoncore.AppendHeader (the type, the key and a NUL)
// for a key known to hold no NUL, without looking for one again: a data
// point's two dozen elements each looked for it, a fortieth of a batch
// upload's CPU.
func appendKnownHeader(b []byte, t bsoncore.Type, key string) []byte {
	return append(append(append(b, byte(t)), key...), 0)
}
