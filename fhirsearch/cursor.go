package fhirsearch

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"

	"exchange/domain"
)

// cursor is where a next page starts: after the record with this sort
// value and id, in the search it was made for.
type cursor struct {
	Query string     `json:"q"` // hash of the canonical query
	Value *time.Time `json:"v,omitempty"`
	ID    int64      `json:"id,omitempty"`
	UUID  string     `json:"uuid,omitempty"` // the id of an imported resource
}

// Position is what the next page continues after: the last record of a
// page, as the planner sorted it.
type Position struct {
	ID          int64
	UUID        string     // the id of an imported resource (ID is 0)
	Date        *time.Time // the sort date (effective start); nil when none
	LastUpdated time.Time
}

func (t *Translator) sign(payload []byte) string {
	m := hmac.New(sha256.New, t.key)
	m.Write(payload)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}

func queryHash(canonical string) string {
	sum := sha256.Sum256([]byte(canonical))
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

// Next returns the opaque, signed cursor of the page after last.
func (q *Query) Next(last Position) string {
	c := cursor{Query: queryHash(q.canonical), ID: last.ID, UUID: last.UUID}
	if q.sort != nil {
		v := q.sortValue(last)
		c.Value = &v
	}
	payload, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(payload) + "." + q.t.sign(payload)
}

// sortValue is the stored sort field's value for a position, at the
// millisecond precision BSON dates keep.
func (q *Query) sortValue(p Position) time.Time {
	var v time.Time
	switch {
	case q.sort.Name == "_lastUpdated":
		v = p.LastUpdated
	case p.Date != nil:
		v = *p.Date
	case q.desc:
		v = domain.SortLastDescending
	default:
		v = domain.SortLastAscending
	}
	return v.UTC().Truncate(time.Millisecond)
}

// openCursor checks a cursor's signature and that it belongs to this
// search.
func (t *Translator) openCursor(token string, q *Query) (*cursor, error) {
	invalid := domain.Errorf(domain.CodeInvalid, "%s: the page link is not valid for this search", CursorParam)
	enc, sig, ok := strings.Cut(token, ".")
	if !ok {
		return nil, invalid
	}
	payload, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || !hmac.Equal([]byte(sig), []byte(t.sign(payload))) {
		return nil, invalid
	}
	var c cursor
	if err := json.Unmarshal(payload, &c); err != nil || c.Query != queryHash(q.canonical) || (c.Value == nil) != (q.sort == nil) {
		return nil, invalid
	}
	return &c, nil
}
