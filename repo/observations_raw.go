package repo

import (
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"exchange/domain"
	"exchange/omh"
)

// errUnusual marks a stored observation the fast reader leaves to the
// reflective decoder: a member of a type the service never writes (an
// int32 id, a string date, a null), from an older release or an analyst's
// edit. The reflective decoder knows every conversion the driver allows.
var errUnusual = errors.New("an observation document of an unusual shape")

// observationFromBSON reads a stored observation as
// bson.Unmarshal(raw, &observationDoc) then observationDoc.observation()
// would, without reflection: a search page reads 50 of them, and the
// reflective decoder allocates about a hundred times for each. Members of
// the types the service writes are read here; any other shape goes to the
// reflective decoder, so that both always agree (a test compares them).
// The payload shares raw's bytes: raw must not be reused.
func observationFromBSON(raw bson.Raw) (domain.Observation, error) {
	o, err := readObservation(bsoncore.Document(raw))
	if errors.Is(err, errUnusual) {
		var x observationDoc
		if err := bson.Unmarshal(raw, &x); err != nil {
			return domain.Observation{}, err
		}
		return x.observation(), nil
	}
	return o, err
}

// readObservation reads the members of an observation document the
// domain value holds; errUnusual for a shape it leaves to the reflective
// decoder, including a malformed document (which that decoder reports).
func readObservation(doc bsoncore.Document) (domain.Observation, error) {
	if doc.Validate() != nil {
		return domain.Observation{}, errUnusual
	}
	o := domain.Observation{LastUpdated: time.UnixMicro(0).UTC()}
	var effective *omh.TimeFrame
	var start, end *time.Time
	err := eachMember(doc, func(key []byte, v bsoncore.Value) error {
		var ok bool
		switch string(key) {
		case "_id":
			o.ID, ok = v.Int64OK()
		case "patientId":
			o.PatientID, ok = v.Int64OK()
		case "dataSourceId":
			o.DataSourceID, ok = v.Int64OK()
		case "status":
			ok = readString(v, &o.Status) == nil
		case "code":
			ok = readString(v, &o.Code) == nil
		case "contentType":
			ok = readString(v, &o.ContentType) == nil
		case "lastUpdatedMicros":
			var us int64
			us, ok = v.Int64OK()
			o.LastUpdated = time.UnixMicro(us).UTC()
		case "payload":
			var subtype byte
			subtype, o.Payload, ok = v.BinaryOK()
			ok = ok && subtype == bson.TypeBinaryGeneric
			o.Payload = o.Payload[:len(o.Payload):len(o.Payload)] // appends never reach the next member
		case "codings":
			o.Codings = nil // a member named twice: the last one counts
			return eachItem(v, func(item bsoncore.Document) error {
				var c domain.Coding
				err := eachMember(item, func(key []byte, v bsoncore.Value) error {
					switch string(key) {
					case "system":
						return readString(v, &c.System)
					case "code":
						return readString(v, &c.Code)
					case "display":
						return readString(v, &c.Display)
					}
					return nil
				})
				o.Codings = append(o.Codings, c)
				return err
			})
		case "identifiers":
			o.Identifiers = nil
			return eachItem(v, func(item bsoncore.Document) error {
				var id domain.Identifier
				err := eachMember(item, func(key []byte, v bsoncore.Value) error {
					switch string(key) {
					case "system":
						return readString(v, &id.System)
					case "value":
						return readString(v, &id.Value)
					}
					return nil
				})
				o.Identifiers = append(o.Identifiers, id)
				return err
			})
		case "effective":
			effective = nil
			if v.Type == bsoncore.TypeNull { // an observation without a time frame
				return nil
			}
			d, isDoc := v.DocumentOK()
			if !isDoc {
				return errUnusual
			}
			tf := &omh.TimeFrame{}
			effective = tf
			return eachMember(d, func(key []byte, v bsoncore.Value) error {
				switch string(key) {
				case "dateTime":
					return readString(v, &tf.DateTime)
				case "start":
					return readString(v, &tf.PeriodStart)
				case "end":
					return readString(v, &tf.PeriodEnd)
				}
				return nil
			})
		case "effectiveStart", "effectiveEnd":
			var t *time.Time
			if v.Type != bsoncore.TypeNull {
				var ms int64
				ms, ok = v.DateTimeOK()
				at := time.UnixMilli(ms).UTC()
				t = &at
			} else {
				ok = true
			}
			if key[len("effective")] == 'S' {
				start = t
			} else {
				end = t
			}
		default:
			return nil // members the domain value does not hold
		}
		if !ok {
			return errUnusual
		}
		return nil
	})
	if err != nil {
		return domain.Observation{}, err
	}
	if effective != nil && start != nil && end != nil {
		effective.Start, effective.End = *start, *end
		o.Effective = effective
	}
	return o, nil
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
		var e bsoncore.Element
		if e, rest, ok = bsoncore.ReadElement(rest); !ok {
			return errUnusual
		}
		key, err := e.KeyBytesErr()
		if err != nil {
			return errUnusual
		}
		v, err := e.ValueErr()
		if err != nil {
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

// readString sets *dest to a string value; errUnusual for another type,
// or a string whose terminating NUL is missing (which the reflective
// decoder refuses).
func readString(v bsoncore.Value, dest *string) error {
	s, ok := v.StringValueOK()
	if !ok || v.Data[len(v.Data)-1] != 0 {
		return errUnusual
	}
	*dest = s
	return nil
}
