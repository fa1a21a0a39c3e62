package handlers

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"exchange/domain"
)

// observationIn is what the native store reads of a FHIR Observation: the
// elements it keeps (identifier, status, code, subject, device,
// valueAttachment), those it derives from the data point and checks
// (effective[x]), and those FHIR's create tells a server to ignore (id,
// meta.versionId, meta.lastUpdated). Any other element would be lost, so
// it is refused.
type observationIn struct {
	ResourceType      string                 `json:"resourceType"`
	ID                string                 `json:"id"`
	Meta              *observationMeta       `json:"meta"`
	Identifier        []fhirIdentifier       `json:"identifier"`
	Status            string                 `json:"status"`
	Subject           *observationReference  `json:"subject"`
	Device            *observationReference  `json:"device"`
	Code              *observationCode       `json:"code"`
	EffectiveDateTime *string                `json:"effectiveDateTime"`
	EffectiveInstant  *string                `json:"effectiveInstant"`
	EffectivePeriod   *fhirPeriod            `json:"effectivePeriod"`
	ValueAttachment   *observationAttachment `json:"valueAttachment"`
}

// The elements of an observationIn, named so that readPlainObservation
// can keep them in one allocation (observationParts).
type (
	observationMeta struct {
		VersionID   string `json:"versionId"`
		LastUpdated string `json:"lastUpdated"`
	}
	observationReference struct {
		Reference string `json:"reference"`
	}
	observationCode struct {
		Coding []observationCoding `json:"coding"`
	}
	observationAttachment struct {
		ContentType string `json:"contentType"`
		Data        string `json:"data"`
	}
)

type observationCoding struct {
	System  string `json:"system"`
	Code    string `json:"code"`
	Display string `json:"display"`
}

// elements names the members of a FHIR JSON object a reader knows, each
// with the members of its own value when that is an object (or an array
// of objects); nil for a primitive.
type elements map[string]elements

// elementsOf lists the elements a decoding struct reads, by its json tags.
func elementsOf(t reflect.Type) elements {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	out := elements{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		out[name] = elementsOf(f.Type)
	}
	return out
}

// nativeElements are the elements of an Observation the native store
// reads: those of observationIn.
var nativeElements = elementsOf(reflect.TypeFor[observationIn]())

// unknownElements returns the FHIR paths (under at) of the members of the
// JSON object raw that known does not name, at any depth, sorted; raw is
// valid JSON (json.Valid). It reads the object as the imported store does
// (domain.EachValidJSONMember), so a member named twice is refused by its path,
// where encoding/json would keep the last value; and names match exactly,
// so "Status" is an unknown element, where encoding/json would read it as
// status. Values of the wrong JSON type are left to the typed decoding to
// report.
func unknownElements(at string, raw []byte, known elements) ([]string, error) {
	w := unknownWalk{path: []byte(at)}
	if err := w.object(raw, known); err != nil {
		return nil, err
	}
	slices.Sort(w.out)
	return w.out, nil
}

// unknownWalk gathers unknown elements; path is the FHIR path of the
// value walked, a buffer grown and cut back as the walk descends, so that
// only the paths reported are made into strings.
type unknownWalk struct {
	path []byte
	out  []string
}

// object walks a JSON object, or does nothing for any other value.
func (w *unknownWalk) object(raw []byte, known elements) error {
	at := len(w.path)
	err := domain.EachValidJSONMember(raw, func(name, value []byte) error {
		w.path = append(append(w.path[:at], '.'), name...)
		inner, ok := known[string(name)]
		switch {
		case !ok:
			w.out = append(w.out, string(w.path))
		case inner == nil:
		case value[0] == '[':
			member := len(w.path)
			i := 0
			return domain.EachValidJSONItem(value, func(item []byte) error {
				w.path = append(strconv.AppendInt(append(w.path[:member], '['), int64(i), 10), ']')
				i++
				return w.object(item, inner)
			})
		case value[0] == '{':
			return w.object(value, inner)
		}
		return nil
	})
	var deeper *domain.Error
	var dup *domain.DuplicateMemberError
	switch {
	case errors.As(err, &deeper):
		return err // a member named twice deeper down, by its path
	case errors.As(err, &dup):
		return domain.FieldErrorf(string(w.path[:at])+"."+dup.Key, "is given twice: a JSON object names each member once")
	}
	return nil // nil, or not a JSON object: the typed decoding says why
}

// routeCreate reads the body of a create of resourceType for the native
// store when it belongs there, as domain.CreatesNative decides: native
// reports whether it does, and n and err are then its decoding. Only an
// Observation is read. One that decodes is read once, and its decoded
// codings say where it goes, exactly as domain.CodingSystems would read
// them (an upload's Base64 is the bulk of its JSON: reading it twice cost
// a tenth of an upload); only a body that does not decode is probed.
//
// A plain body of native elements only, as clients send, is read in one
// pass (readPlainObservation); any other body is decoded and walked as
// the reference path does, which then says what is wrong with it.
//
// in is raw already read so (a batch's entry.observation), or nil.
func (s *server) routeCreate(resourceType string, raw []byte, in *observationIn) (n domain.NewObservation, native bool, err error) {
	plain := in != nil
	var decodeErr error
	native = domain.CreatesNative(resourceType, func(yield func(string) bool) {
		if !plain {
			in, plain = readPlainObservation(raw)
		}
		if !plain {
			in = new(observationIn)
			decodeErr = json.Unmarshal(raw, in)
		}
		if decodeErr != nil {
			domain.CodingSystems(raw)(yield)
			return
		}
		if in.Code == nil {
			return
		}
		for _, c := range in.Code.Coding {
			if !yield(c.System) {
				return
			}
		}
	})
	if !native {
		return domain.NewObservation{}, false, nil
	}
	if !plain {
		if err := checkObservationJSON(raw, decodeErr); err != nil {
			return domain.NewObservation{}, true, err
		}
	}
	n, err = s.newObservation(in)
	return n, true, err
}

// checkObservationJSON refuses a native Observation's JSON that did not
// decode (decodeErr), naming the element at fault, or that has elements
// the native store does not keep, by name.
func checkObservationJSON(raw []byte, decodeErr error) error {
	if decodeErr == nil || json.Valid(raw) { // else the decoding says why
		unknown, err := unknownElements("Observation", raw, nativeElements)
		if err != nil {
			return err
		}
		if len(unknown) > 0 {
			return unknownElementsError(unknown)
		}
	}
	if decodeErr != nil {
		return fhirJSONError("Observation", decodeErr)
	}
	return nil
}

// newObservation turns a decoded Observation into the input of the native
// create. A data point over the service's bound is refused before its
// Base64 is decoded.
func (s *server) newObservation(in *observationIn) (domain.NewObservation, error) {
	if in.ResourceType != "Observation" {
		return domain.NewObservation{}, domain.FieldErrorf("resourceType", "must be Observation, not %q", in.ResourceType)
	}
	n := domain.NewObservation{Status: in.Status} // a value: a pointer cost every upload an allocation
	if in.Subject != nil {
		n.Subject = in.Subject.Reference
	}
	if in.Device != nil {
		n.Device = in.Device.Reference
	}
	for _, id := range in.Identifier {
		n.Identifiers = append(n.Identifiers, domain.Identifier{System: id.System, Value: id.Value})
	}
	if in.Code != nil {
		for _, c := range in.Code.Coding {
			n.Codings = append(n.Codings, domain.Coding{System: c.System, Code: c.Code, Display: c.Display})
		}
	}
	var given []string
	if in.EffectiveDateTime != nil {
		given = append(given, "effectiveDateTime")
		n.Effective = &domain.EffectiveClaim{Element: "effectiveDateTime", DateTime: *in.EffectiveDateTime}
	}
	if in.EffectiveInstant != nil {
		given = append(given, "effectiveInstant")
		n.Effective = &domain.EffectiveClaim{Element: "effectiveInstant", DateTime: *in.EffectiveInstant}
	}
	if p := in.EffectivePeriod; p != nil {
		given = append(given, "effectivePeriod")
		n.Effective = &domain.EffectiveClaim{Element: "effectivePeriod", Start: p.Start, End: p.End}
	}
	if len(given) > 1 {
		return domain.NewObservation{}, domain.FieldErrorf("Observation.effective[x]", "has one form, not %s", strings.Join(given, " and "))
	}
	if v := in.ValueAttachment; v != nil {
		n.ContentType = v.ContentType
		size, spaced := base64BinaryLen(v.Data)
		if err := s.service.CheckDataPointSize(size); err != nil {
			return domain.NewObservation{}, err
		}
		data, err := decodeBase64Binary(v.Data, spaced)
		if err != nil {
			return domain.NewObservation{}, domain.FieldErrorf("Observation.valueAttachment.data", "is not Base64")
		}
		n.Data = data
	}
	return n, nil
}

// unknownElementsError refuses the elements of a native Observation that
// its store would not keep, each by its path.
func unknownElementsError(paths []string) error {
	const kept = "the native store keeps identifier (system, value), status, code.coding (system, code, display), subject.reference, " +
		"device.reference and valueAttachment (contentType, data); effective[x] comes from the data point"
	details := make([]domain.Detail, len(paths))
	for i, p := range paths {
		details[i] = domain.Detail{Field: p, Message: p + ": is not an element of a native Observation (" + kept + ")"}
	}
	return &domain.Error{Code: domain.CodeInvalid, Field: paths[0], Details: details,
		Message: "unknown elements of a native Observation: " + strings.Join(paths, ", ") + " (" + kept + ")"}
}

// decodeBase64Binary reads a FHIR base64Binary, which may hold whitespace
// (line breaks of MIME-style Base64 among it) between its characters;
// spaced says whether it does (base64BinaryLen).
func decodeBase64Binary(s string, spaced bool) ([]byte, error) {
	if spaced {
		s = strings.Map(func(r rune) rune {
			if r == ' ' || r == '\t' || r == '\r' || r == '\n' {
				return -1
			}
			return r
		}, s)
	}
	return base64.StdEncoding.DecodeString(s)
}

// base64BinaryLen is the number of bytes a base64Binary holds, counted
// without decoding it: whitespace aside, every four characters hold three
// bytes, less the padding; spaced reports whether it holds whitespace.
// Malformed Base64 is left to decoding to refuse. Each byte value is
// counted with strings.Count, a vectorised pass: the Base64 is the bulk of
// an upload, and a loop over its bytes, then a search for whitespace, cost
// half a microsecond an upload.
func base64BinaryLen(s string) (size int, spaced bool) {
	spaces := strings.Count(s, " ") + strings.Count(s, "\t") + strings.Count(s, "\r") + strings.Count(s, "\n")
	return (len(s)-spaces)/4*3 - strings.Count(s, "="), spaces > 0
}

// createNativeObservation creates an Observation coded to Open mHealth or
// IEEE 1752 in the native store, as a batch entry would.
func (s *server) createNativeObservation(c *fiber.Ctx, n domain.NewObservation) error {
	res := s.service.CreateObservations(c.UserContext(), actor(c), []domain.NewObservation{n})[0]
	s.metrics.observation(res.Err)
	if res.Err != nil {
		return res.Err
	}
	o := res.Observation
	c.Set(fiber.HeaderLocation, fhirBase(c)+"/Observation/"+strconv.FormatInt(o.ID, 10)+"/_history/1")
	c.Set(fiber.HeaderETag, `W/"1"`)
	c.Set(fiber.HeaderLastModified, o.LastUpdated.UTC().Format(http.TimeFormat))
	return writeFHIR(c, fiber.StatusCreated, observationFHIR(o))
}
