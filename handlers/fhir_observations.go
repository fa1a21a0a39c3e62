package handlers

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"exchange/domain"
)

// observationIn is the part of a FHIR Observation the native store reads.
// Other elements are accepted and not kept: the native record is the data
// point, and effective[x] comes from it.
type observationIn struct {
	ResourceType string `json:"resourceType"`
	Identifier   []struct {
		System string `json:"system"`
		Value  string `json:"value"`
	} `json:"identifier"`
	Status  string `json:"status"`
	Subject *struct {
		Reference string `json:"reference"`
	} `json:"subject"`
	Device *struct {
		Reference string `json:"reference"`
	} `json:"device"`
	Code *struct {
		Coding []struct {
			System  string `json:"system"`
			Code    string `json:"code"`
			Display string `json:"display"`
		} `json:"coding"`
	} `json:"code"`
	ValueAttachment *struct {
		ContentType string `json:"contentType"`
		Data        string `json:"data"`
	} `json:"valueAttachment"`
}

// decodeObservation reads one FHIR Observation into the input of the
// native create; a JSON error names the element at fault.
func decodeObservation(raw json.RawMessage) (*domain.NewObservation, []domain.Coding, error) {
	var in observationIn
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&in); err != nil {
		return nil, nil, fhirJSONError("Observation", err)
	}
	if in.ResourceType != "Observation" {
		return nil, nil, domain.FieldErrorf("resourceType", "must be Observation, not %q", in.ResourceType)
	}
	n := &domain.NewObservation{Status: in.Status}
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
	if v := in.ValueAttachment; v != nil {
		n.ContentType = v.ContentType
		data, err := base64.StdEncoding.DecodeString(v.Data)
		if err != nil {
			return nil, nil, domain.FieldErrorf("Observation.valueAttachment.data", "is not Base64")
		}
		n.Data = data
	}
	return n, n.Codings, nil
}

// fhirJSONError names the element a JSON decoding error is about.
func fhirJSONError(resourceType string, err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		return domain.FieldErrorf(resourceType+"."+typeErr.Field, "must be %s, not %s", jsonKind(typeErr.Type.Kind().String()), typeErr.Value)
	}
	return domain.Errorf(domain.CodeInvalid, "the %s is not valid JSON: %v", resourceType, err)
}

// statusLine is the status of a batch entry, as FHIR writes it.
func statusLine(code int) string { return strconv.Itoa(code) + " " + http.StatusText(code) }

// statusOfError is the HTTP status of a domain error.
func statusOfError(err error) int {
	if st, ok := statusOf[domain.ErrorCode(err)]; ok {
		return st
	}
	return fiber.StatusInternalServerError
}

// fhirCreate answers POST [base]/<type>. An Observation coded to Open mHealth
// or IEEE 1752 takes the native path, as a batch entry would.
func (s *server) fhirCreate(c *fiber.Ctx) error {
	resourceType := c.Params("type")
	if resourceType != "Observation" {
		return domain.Errorf(domain.CodeNotSupported, "creating %s is not supported: only native Observations are", resourceType)
	}
	n, codings, err := decodeObservation(c.Body())
	if err != nil {
		return err
	}
	if !domain.IsNativeObservation(codings) {
		return domain.FieldErrorf("Observation.code.coding", "only Observations coded to %s or %s are stored", domain.SystemOpenMHealth, domain.SystemIEEE1752)
	}
	res := s.service.CreateObservations(c.UserContext(), actor(c), []domain.NewObservation{*n})[0]
	if res.Err != nil {
		return res.Err
	}
	o := res.Observation
	c.Set(fiber.HeaderLocation, fhirBase(c)+"/Observation/"+strconv.FormatInt(o.ID, 10)+"/_history/1")
	c.Set(fiber.HeaderETag, `W/"1"`)
	c.Set(fiber.HeaderLastModified, o.LastUpdated.UTC().Format(http.TimeFormat))
	return writeFHIR(c, fiber.StatusCreated, observationFHIR(o))
}

// batchIn is a request Bundle.
type batchIn struct {
	ResourceType string `json:"resourceType"`
	Type         string `json:"type"`
	Entry        []struct {
		Resource json.RawMessage `json:"resource"`
		Request  *struct {
			Method string `json:"method"`
			URL    string `json:"url"`
		} `json:"request"`
	} `json:"entry"`
}

// fhirBatch answers POST [base]/ with a batch Bundle of Observation
// creates: a batch-response Bundle with one entry per request entry, in
// order, each created or refused on its own.
func (s *server) fhirBatch(c *fiber.Ctx) error {
	var in batchIn
	if err := json.Unmarshal(c.Body(), &in); err != nil {
		return fhirJSONError("Bundle", err)
	}
	if in.ResourceType != "Bundle" {
		return domain.FieldErrorf("Bundle.resourceType", "must be Bundle, not %q", in.ResourceType)
	}
	if in.Type != "batch" {
		return domain.FieldErrorf("Bundle.type", "must be batch, not %q (transactions are not supported)", in.Type)
	}
	out := bundle{ResourceType: "Bundle", Type: "batch-response", Entry: make([]bundleEntry, len(in.Entry))}
	var creates []domain.NewObservation
	var where []int
	for i, e := range in.Entry {
		n, err := batchEntry(i, e.Request, e.Resource)
		if err != nil {
			out.Entry[i] = errorEntry(err)
			continue
		}
		creates = append(creates, *n)
		where = append(where, i)
	}
	for k, res := range s.service.CreateObservations(c.UserContext(), actor(c), creates) {
		i := where[k]
		if res.Err != nil {
			if domain.ErrorCode(res.Err) == domain.CodeInternal {
				s.log.Error("batch entry failed", "entry", i, "error", res.Err)
			}
			out.Entry[i] = errorEntry(res.Err)
			continue
		}
		o := res.Observation
		out.Entry[i] = bundleEntry{
			FullURL:  fhirBase(c) + "/Observation/" + strconv.FormatInt(o.ID, 10),
			Resource: observationFHIR(o),
			Response: &bundleResponse{Status: statusLine(fiber.StatusCreated), Location: "Observation/" + strconv.FormatInt(o.ID, 10) + "/_history/1",
				Etag: `W/"1"`, LastModified: instant(o.LastUpdated)},
		}
	}
	return writeFHIR(c, fiber.StatusOK, out)
}

// batchEntry checks one entry of a batch: a POST of a native Observation.
func batchEntry(i int, req *struct {
	Method string `json:"method"`
	URL    string `json:"url"`
}, resource json.RawMessage) (*domain.NewObservation, error) {
	at := fmt.Sprintf("Bundle.entry[%d]", i)
	if req == nil || !strings.EqualFold(req.Method, "POST") || strings.TrimSuffix(req.URL, "/") != "Observation" {
		return nil, domain.FieldErrorf(at+".request", "each entry must be {method: POST, url: Observation}")
	}
	if len(resource) == 0 {
		return nil, domain.FieldErrorf(at+".resource", "is required")
	}
	n, codings, err := decodeObservation(resource)
	if err != nil {
		return nil, err
	}
	if !domain.IsNativeObservation(codings) {
		return nil, domain.FieldErrorf("Observation.code.coding", "a batch creates Observations coded to %s or %s", domain.SystemOpenMHealth, domain.SystemIEEE1752)
	}
	return n, nil
}

// errorEntry is the batch-response entry of a refused request entry.
func errorEntry(err error) bundleEntry {
	return bundleEntry{Response: &bundleResponse{Status: statusLine(statusOfError(err)), Outcome: outcomeOf(err)}}
}
