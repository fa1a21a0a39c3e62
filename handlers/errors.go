package handlers

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"exchange/domain"
	"exchange/handlers/httpstatus"
)

// issueType is the FHIR issue type of a domain error code.
func issueType(code domain.Code) string {
	if code == domain.CodeVersionMismatch {
		return "conflict"
	}
	return string(code)
}

// outcome renders an error as an OperationOutcome: one issue per detail
// when the error lists its problems, else one issue.
func outcome(err error) fiber.Map {
	code, message := issueType(domain.ErrorCode(err)), domain.ErrorMessage(err)
	var de *domain.Error
	var fe *fiber.Error
	switch {
	case errors.As(err, &de) && len(de.Details) > 0:
		issues := make([]fiber.Map, len(de.Details))
		for i, d := range de.Details {
			issues[i] = fhirIssue("error", code, d.Message, d.Field)
		}
		return outcomeOf(issues...)
	case errors.As(err, &de):
		return outcomeOf(fhirIssue("error", code, message, de.Field))
	case errors.As(err, &fe):
		code, message = issueType(codeOfStatus(fe.Code)), fe.Message
	}
	return outcomeOf(fhirIssue("error", code, message, ""))
}

// fhirIssue is one issue of an OperationOutcome; expression, when set,
// is the FHIRPath of the element at fault.
func fhirIssue(severity, code, diagnostics, expression string) fiber.Map {
	issue := fiber.Map{"severity": severity, "code": code, "diagnostics": diagnostics}
	if expression != "" {
		issue["expression"] = []string{expression}
	}
	return issue
}

// outcomeOf is an OperationOutcome of issues.
func outcomeOf(issues ...fiber.Map) fiber.Map {
	return fiber.Map{"resourceType": "OperationOutcome", "issue": issues}
}

// codeOfStatus classifies Fiber's own errors (unknown route, wrong method,
// body too large) in the same vocabulary.
func codeOfStatus(status int) domain.Code {
	switch {
	case status == fiber.StatusNotFound:
		return domain.CodeNotFound
	case status == fiber.StatusMethodNotAllowed, status == fiber.StatusNotAcceptable:
		return domain.CodeNotSupported
	case status == fiber.StatusUnauthorized:
		return domain.CodeLogin
	case status == fiber.StatusForbidden:
		return domain.CodeForbidden
	case status == fiber.StatusRequestEntityTooLarge, status == fiber.StatusRequestHeaderFieldsTooLarge:
		return domain.CodeTooLong
	case status >= 500:
		return domain.CodeInternal
	default:
		return domain.CodeInvalid
	}
}

// isFHIRPath reports whether a path belongs to a FHIR endpoint, whose errors
// are OperationOutcomes.
func isFHIRPath(path string) bool {
	for _, prefix := range []string{"/FHIR/R5", "/fhir/r5", "/fhir-import/R4"} {
		if path == prefix || strings.HasPrefix(path, prefix+"/") {
			return true
		}
	}
	return false
}

// handleError is the one place that turns an error into a response.
func (s *server) handleError(c *fiber.Ctx, err error) error {
	status := httpstatus.Of(err)
	if domain.IsStale(err) {
		// The version a change was made from came from If-Match here
		// (the console's forms carry it in their body and answer 409):
		// a failed precondition, RFC 9110 15.5.13.
		status = fiber.StatusPreconditionFailed
	}
	var fe *fiber.Error
	if errors.As(err, &fe) && !errors.As(err, new(*domain.Error)) {
		status = fe.Code
	}
	message := domain.ErrorMessage(err)
	if fe != nil {
		message = fe.Message
	}
	if wait := domain.RetryAfter(err); wait > 0 {
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(int((wait+time.Second-1)/time.Second)))
	}
	if status >= 500 && domain.ErrorCode(err) != domain.CodeUnavailable {
		s.log.Error("request failed", "request_id", requestID(c), "method", c.Method(), "route", c.Route().Path, "error", err)
		err, message = domain.Errorf(domain.CodeInternal, "internal error"), "internal error"
	}
	if status == fiber.StatusUnauthorized && len(c.Response().Header.Peek(fiber.HeaderWWWAuthenticate)) == 0 {
		c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="exchange"`)
	}
	if isFHIRPath(c.Path()) {
		if stored := domain.StoredAs(err); stored != "" {
			// A 409 that names what the request sends, stored already:
			// the client may count it done.
			c.Set(fiber.HeaderLocation, fhirBase(c)+"/"+stored)
		}
		c.Set(fiber.HeaderContentType, mediaFHIRJSON)
		return c.Status(status).JSON(outcome(err), mediaFHIRJSON)
	}
	return c.Status(status).JSON(fiber.Map{"detail": message})
}
