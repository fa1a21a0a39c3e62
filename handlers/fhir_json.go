package handlers

import (
	"slices"
	"strconv"

	asmbase64 "github.com/segmentio/asm/base64"

	"exchange/domain"
)

// The hot FHIR documents (a searchset Bundle of Observations, the
// batch-response Bundle of an upload) are written by hand rather than by
// encoding/json's reflection, which costs more than everything else a
// search page does. Each writer below appends exactly the bytes marshalJSON
// gives for the same value (tests compare them over varied values), so the
// two paths are one format.

// jsonAppender is a value that writes its own JSON, byte for byte as
// marshalJSON would write it.
type jsonAppender interface {
	appendJSON(b []byte) []byte
}

// jsonObject writes the members of one JSON object, in order, leaving out
// those that encoding/json's omitempty leaves out.
type jsonObject struct {
	b     []byte
	first bool
}

func openObject(b []byte) jsonObject { return jsonObject{b: append(b, '{'), first: true} }

func (o *jsonObject) key(name string) {
	if !o.first {
		o.b = append(o.b, ',')
	}
	o.first = false
	o.b = append(o.b, '"')
	o.b = append(o.b, name...) // names are plain ASCII
	o.b = append(o.b, '"', ':')
}

// str writes a string member; omitempty leaves out "".
func (o *jsonObject) str(name, v string, omitEmpty bool) {
	if v == "" && omitEmpty {
		return
	}
	o.key(name)
	o.b = domain.AppendJSONString(o.b, v)
}

// any writes a member of no known writer by marshalJSON.
func (o *jsonObject) marshalled(name string, v any) {
	o.key(name)
	o.b = appendMarshalled(o.b, v)
}

func (o *jsonObject) close() []byte { return append(o.b, '}') }

// appendOptional writes the member key: v of an object unless v is ""
// (omitempty), after a comma if more says members came before it, and
// reports whether the object now has members. key is the quoted name and
// its colon ("system":). The writers of the small objects a search page
// repeats (codings, identifiers, periods, attachments, entries) use it
// rather than a jsonObject: their slice stays in registers, where a
// jsonObject's is stored through a pointer at each member, and such stores
// take the garbage collector's write barrier while it marks.
func appendOptional(b []byte, more bool, key, v string) ([]byte, bool) {
	if v == "" {
		return b, more
	}
	if more {
		b = append(b, ',')
	}
	return domain.AppendJSONString(append(b, key...), v), true
}

// appendMarshalled appends v as marshalJSON writes it: by its own writer
// when it has one.
func appendMarshalled(b []byte, v any) []byte {
	if a, ok := v.(jsonAppender); ok {
		return a.appendJSON(b)
	}
	data, err := marshalJSON(v)
	if err != nil {
		// Only values that cannot be JSON (channels, NaN) fail, and none
		// is rendered; null keeps the document well-formed all the same.
		return append(b, "null"...)
	}
	return append(b, data...)
}

// appendArray writes a JSON array of n items.
func appendArray(b []byte, n int, item func(b []byte, i int) []byte) []byte {
	b = append(b, '[')
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = item(b, i)
	}
	return append(b, ']')
}

func (c fhirCoding) appendJSON(b []byte) []byte {
	b, more := appendOptional(append(b, '{'), false, `"system":`, c.System)
	b, more = appendOptional(b, more, `"code":`, c.Code)
	b, _ = appendOptional(b, more, `"display":`, c.Display)
	return append(b, '}')
}

func (id fhirIdentifier) appendJSON(b []byte) []byte {
	b, more := appendOptional(append(b, '{'), false, `"system":`, id.System)
	b, _ = appendOptional(b, more, `"value":`, id.Value)
	return append(b, '}')
}

func (p fhirPeriod) appendJSON(b []byte) []byte {
	b, more := appendOptional(append(b, '{'), false, `"start":`, p.Start)
	b, _ = appendOptional(b, more, `"end":`, p.End)
	return append(b, '}')
}

// appendJSON writes the data as encoding/json writes a []byte: standard
// Base64 with padding.
func (a fhirAttachment) appendJSON(b []byte) []byte {
	b, more := appendOptional(append(b, '{'), false, `"contentType":`, a.ContentType)
	if len(a.Data) > 0 {
		if more {
			b = append(b, ',')
		}
		b = appendBase64(append(b, `"data":"`...), a.Data)
		b = append(b, '"')
	}
	return append(b, '}')
}

// appendBase64 appends data in standard Base64 with padding, the bytes of
// encoding/base64's StdEncoding, by segmentio/asm's vector encoder where
// the CPU has one (AVX2, NEON; else it is the standard library's): the
// payloads of a search page are a third of its bytes, and the standard
// library's encoder, a table look-up per character, was a sixth of the
// page's CPU. FuzzObservationJSON compares whole observations, payloads
// of every length included, with encoding/json.
func appendBase64(b, data []byte) []byte {
	n := asmbase64.StdEncoding.EncodedLen(len(data))
	b = slices.Grow(b, n)
	asmbase64.StdEncoding.Encode(b[len(b):len(b)+n], data)
	return b[:len(b)+n]
}

func (l bundleLink) appendJSON(b []byte) []byte {
	o := openObject(b)
	o.str("relation", l.Relation, false)
	o.str("url", l.URL, false)
	return o.close()
}

func (r *bundleResponse) appendJSON(b []byte) []byte {
	o := openObject(b)
	o.str("status", r.Status, false)
	o.str("location", r.Location, true)
	o.str("etag", r.Etag, true)
	o.str("lastModified", r.LastModified, true)
	if r.Outcome != nil {
		o.marshalled("outcome", r.Outcome)
	}
	return o.close()
}

func (e bundleEntry) appendJSON(b []byte) []byte {
	b, more := appendOptional(append(b, '{'), false, `"fullUrl":`, e.FullURL)
	if e.Resource != nil {
		if more {
			b = append(b, ',')
		}
		b, more = appendMarshalled(append(b, `"resource":`...), e.Resource), true
	}
	if e.Search != nil {
		if more {
			b = append(b, ',')
		}
		b, more = append(domain.AppendJSONString(append(b, `"search":{"mode":`...), e.Search.Mode), '}'), true
	}
	if e.Response != nil {
		if more {
			b = append(b, ',')
		}
		b = e.Response.appendJSON(append(b, `"response":`...))
	}
	return append(b, '}')
}

func (bd bundle) appendJSON(b []byte) []byte {
	b = slices.Grow(b, 512+len(bd.Entry)*1280) // an entry of an upload's response is about 1.1 KB: one allocation, not a dozen
	o := openObject(b)
	o.str("resourceType", bd.ResourceType, false)
	o.str("type", bd.Type, false)
	o.str("timestamp", bd.Timestamp, true)
	if bd.Total != nil {
		o.key("total")
		o.b = strconv.AppendInt(o.b, *bd.Total, 10)
	}
	if len(bd.Link) > 0 {
		o.key("link")
		o.b = appendArray(o.b, len(bd.Link), func(b []byte, i int) []byte { return bd.Link[i].appendJSON(b) })
	}
	if bd.Entry != nil {
		o.key("entry")
		o.b = appendArray(o.b, len(bd.Entry), func(b []byte, i int) []byte { return bd.Entry[i].appendJSON(b) })
	}
	return o.close()
}
