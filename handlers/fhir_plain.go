package handlers

import (
	"encoding/json"
	"strings"

	"exchange/internal/plainjson"
)

// The fast readers of a native upload. A batch of 1,000 observations spent
// a third of its CPU reading JSON: the Bundle decoded (a validation pass,
// then a decoding pass copying every resource), each Observation decoded
// again (two more passes, by reflection), then walked for unknown
// elements. These read plain JSON (plainjson: no escapes, valid UTF-8) in
// one pass each and copy nothing but one string per Observation. Anything
// they do not fully understand (an escape, a member they do not know, a
// member named twice, a value of another JSON type, a null) makes them
// give up, and the reference path (encoding/json, unknownElements) reads
// the text as before: its values and its errors stay the answer, and for a
// text the fast readers accept, they give exactly its values
// (TestPlainReadersAgree, FuzzPlainObservation).

// readPlainObservation reads an Observation as json.Unmarshal into
// observationIn would, for a body whose every member is one of
// nativeElements, named once, in its exact case, with a value of its
// type (no null); ok is false for any other body. It and what its
// pointers and slices point to are one plainObservation: an allocation
// apiece was a tenth of an upload's.
func readPlainObservation(raw []byte) (in *observationIn, ok bool) {
	r := plainjson.NewReader(raw, string(raw))
	in, ok = readObservation(r)
	return in, ok && r.End()
}

// readObservation reads the Observation object at r as
// readPlainObservation reads a whole body: the same members, each with
// the same reader. A batch reads its Observations with it in the Bundle's
// own pass (readPlainEntry), which then neither scans nor copies them a
// second time; what it reads of an object equals what
// readPlainObservation reads of that object's bytes alone
// (TestPlainReadersAgree, FuzzPlainBundle).
func readObservation(r *plainjson.Reader) (*observationIn, bool) {
	o := new(plainObservation)
	in, p := &o.in, &o.parts
	ok := plainObject(r, func(key string) bool {
		switch key {
		case "resourceType":
			return plainString(r, &in.ResourceType)
		case "id":
			return plainString(r, &in.ID)
		case "status":
			return plainString(r, &in.Status)
		case "meta":
			in.Meta = &p.meta
			return plainPair(r, "versionId", &in.Meta.VersionID, "lastUpdated", &in.Meta.LastUpdated)
		case "identifier":
			in.Identifier = p.identifiers[:0] // an empty array decodes as an empty slice, not nil
			return r.Array(func() bool {
				in.Identifier = append(in.Identifier, fhirIdentifier{})
				id := &in.Identifier[len(in.Identifier)-1]
				return plainPair(r, "system", &id.System, "value", &id.Value)
			})
		case "subject":
			in.Subject = &p.subject
			return plainPair(r, "reference", &in.Subject.Reference, "", nil)
		case "device":
			in.Device = &p.device
			return plainPair(r, "reference", &in.Device.Reference, "", nil)
		case "code":
			in.Code = &p.code
			return plainObject(r, func(key string) bool {
				if key != "coding" {
					return false
				}
				in.Code.Coding = p.codings[:0]
				return r.Array(func() bool {
					in.Code.Coding = append(in.Code.Coding, observationCoding{})
					c := &in.Code.Coding[len(in.Code.Coding)-1]
					return plainObject(r, func(key string) bool {
						switch key {
						case "system":
							return plainString(r, &c.System)
						case "code":
							return plainString(r, &c.Code)
						case "display":
							return plainString(r, &c.Display)
						}
						return false
					})
				})
			})
		case "effectiveDateTime":
			in.EffectiveDateTime = &p.dateTime
			return plainString(r, in.EffectiveDateTime)
		case "effectiveInstant":
			in.EffectiveInstant = &p.instant
			return plainString(r, in.EffectiveInstant)
		case "effectivePeriod":
			in.EffectivePeriod = &p.period
			return plainPair(r, "start", &in.EffectivePeriod.Start, "end", &in.EffectivePeriod.End)
		case "valueAttachment":
			in.ValueAttachment = &p.attachment
			return plainPair(r, "contentType", &in.ValueAttachment.ContentType, "data", &in.ValueAttachment.Data)
		}
		return false
	})
	return in, ok
}

// plainObservation is an Observation readObservation read and the parts
// its pointers point to, in one allocation.
type plainObservation struct {
	in    observationIn
	parts observationParts
}

// observationParts holds the elements of an Observation readPlainObservation
// reads, each member at most once (plainObject), and room for the
// identifiers and codings an upload usually has (more grow on the heap).
type observationParts struct {
	meta              observationMeta
	subject, device   observationReference
	code              observationCode
	dateTime, instant string
	period            fhirPeriod
	attachment        observationAttachment
	identifiers       [1]fhirIdentifier
	codings           [2]observationCoding
}

// plainObject reads an object, each member with member, and refuses one
// whose members are not each named once.
func plainObject(r *plainjson.Reader, member func(key string) bool) bool {
	var seen members
	return r.Object(func(key string) bool { return seen.add(key) && member(key) })
}

// members are the keys of one JSON object read so far, to refuse one named
// twice: the objects of an Observation have a handful, kept in place (a
// list that grew on the heap was a tenth of an upload's allocations); an
// object of more than it holds is left to the reference path.
type members struct {
	keys [16]string
	n    int
}

// add records key; false when it was there already, or there is no room.
func (m *members) add(key string) bool {
	if m.n == len(m.keys) {
		return false
	}
	for _, k := range m.keys[:m.n] {
		if k == key {
			return false
		}
	}
	m.keys[m.n] = key
	m.n++
	return true
}

// plainString reads a string into dest.
func plainString(r *plainjson.Reader, dest *string) bool {
	s, ok := r.String()
	*dest = s
	return ok
}

// plainPair reads an object of at most two string members, key1 and key2
// (key2 "": only key1), each at most once.
func plainPair(r *plainjson.Reader, key1 string, dest1 *string, key2 string, dest2 *string) bool {
	return plainObject(r, func(key string) bool {
		switch {
		case key == key1:
			return plainString(r, dest1)
		case key == key2 && key2 != "":
			return plainString(r, dest2)
		}
		return false
	})
}

// readPlainBundle reads a request Bundle as json.Unmarshal into batchIn
// would, for a plain body whose members are read with their exact names
// (others are skipped, as encoding/json skips them, unless they could be
// a known member in another case); the entries' resources alias body, and
// their strings, only skipped, may hold escapes (an R4 import's narratives
// do). With observations set (a batch), each resource that reads as a
// plain Observation (readObservation) is read so in the same pass, into
// its entry's observation. ok is false for any other body.
func readPlainBundle(body []byte, observations bool) (in batchIn, ok bool) {
	r := plainjson.NewReader(body, string(body))
	ok = plainObject(r, func(key string) bool {
		switch key {
		case "resourceType":
			return plainString(r, &in.ResourceType)
		case "type":
			return plainString(r, &in.Type)
		case "entry":
			in.Entry = entryList{}
			return r.Array(func() bool {
				if len(in.Entry) > maxBundleEntries {
					return r.Skip() // checked, not kept, as entryList
				}
				in.Entry = append(in.Entry, entryRequest{})
				return readPlainEntry(r, body, observations, &in.Entry[len(in.Entry)-1])
			})
		}
		return skipUnknown(r, key, "resourceType", "type", "entry")
	})
	return in, ok && r.End()
}

// readPlainEntry reads one entry of a request Bundle into e, and its
// resource as a plain Observation too when observations is set and it is
// one; a resource that is not is read again from its start, skipped.
func readPlainEntry(r *plainjson.Reader, body []byte, observations bool, e *entryRequest) bool {
	return plainObject(r, func(key string) bool {
		switch key {
		case "resource":
			start := r.Start()
			if start == len(body) || body[start] != '{' {
				return false // null, or not an object: encoding/json's to judge
			}
			read := false
			if observations {
				if e.observation, read = readObservation(r); !read {
					e.observation = nil
					r.Rewind(start)
				}
			}
			if !read && !r.Skip() {
				return false
			}
			e.Resource = json.RawMessage(body[start:r.Pos():r.Pos()])
			return true
		case "request":
			e.Request = &struct {
				Method string `json:"method"`
				URL    string `json:"url"`
			}{}
			return plainObject(r, func(key string) bool {
				switch key {
				case "method":
					return plainString(r, &e.Request.Method)
				case "url":
					return plainString(r, &e.Request.URL)
				}
				return skipUnknown(r, key, "method", "url")
			})
		}
		return skipUnknown(r, key, "resource", "request")
	})
}

// skipUnknown skips the value of a member a decoding struct does not
// name, unless encoding/json, which matches names without regard to
// case, would read it as one of known.
func skipUnknown(r *plainjson.Reader, key string, known ...string) bool {
	for _, k := range known {
		if strings.EqualFold(key, k) {
			return false
		}
	}
	return r.Skip()
}
