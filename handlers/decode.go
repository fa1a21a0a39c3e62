package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/gofiber/fiber/v2"

	"exchange/domain"
)

// decodeJSON reads the request body into v: a JSON object with only known
// fields. Every failure is a CodeInvalid error naming the field at fault.
func decodeJSON(c *fiber.Ctx, v any) error {
	body := c.Body()
	if len(bytes.TrimSpace(body)) == 0 {
		return domain.Errorf(domain.CodeInvalid, "the request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return domain.Errorf(domain.CodeInvalid, "the request body must hold one JSON object")
	}
	return nil
}

// jsonError turns a decoding error of the request body into a message
// that names the field.
func jsonError(err error) error { return jsonErrorAbout("the request body", "", err) }

// fhirJSONError is jsonError for a FHIR resource: fields are named as
// element paths (Bundle.entry, Observation.code).
func fhirJSONError(resourceType string, err error) error {
	return jsonErrorAbout("the "+resourceType, resourceType+".", err)
}

// jsonErrorAbout words a decoding error of subject; field names get the
// prefix. Never Go's own text, which names Go types.
func jsonErrorAbout(subject, prefix string, err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return domain.Errorf(domain.CodeInvalid, "%s must be a JSON object", subject)
		}
		return domain.FieldErrorf(prefix+field, "must be %s, not %s", jsonKind(typeErr.Type.Kind().String()), typeErr.Value)
	case errors.As(err, &syntaxErr):
		return domain.Errorf(domain.CodeInvalid, "%s is not valid JSON (at byte %d)", subject, syntaxErr.Offset)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return domain.FieldErrorf(prefix+field, "is not a known field")
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return domain.Errorf(domain.CodeInvalid, "%s is truncated JSON", subject)
	default:
		return domain.Errorf(domain.CodeInvalid, "%s is not valid JSON", subject)
	}
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "slice", "array":
		return "an array"
	case "map", "struct", "ptr":
		return "an object"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	default:
		return fmt.Sprintf("a %s", goKind)
	}
}
