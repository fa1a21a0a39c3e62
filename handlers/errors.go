package handlers

import (
	"errors"
	"strings"

	"github.com/gofiber/fiber/v2"

	"exchange/domain"
)

// statusOf maps a domain error code to its HTTP status.
var statusOf = map[domain.Code]int{
	domain.CodeInvalid:       fiber.StatusBadRequest,
	domain.CodeNotFound:      fiber.StatusNotFound,
	domain.CodeConflict:      fiber.StatusConflict,
	domain.CodeDuplicate:     fiber.StatusConflict,
	domain.CodeForbidden:     fiber.StatusForbidden,
	domain.CodeLogin:         fiber.StatusUnauthorized,
	domain.CodeThrottled:     fiber.StatusTooManyRequests,
	domain.CodeNotSupported:  fiber.StatusBadRequest,
	domain.CodeUnprocessable: fiber.StatusUnprocessableEntity,
	domain.CodeInternal:      fiber.StatusInternalServerError,
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
	code := domain.ErrorCode(err)
	status := statusOf[code]
	message := domain.ErrorMessage(err)
	var field string
	var de *domain.Error
	var fe *fiber.Error
	switch {
	case errors.As(err, &de):
		field = de.Field
	case errors.As(err, &fe):
		status, code, message = fe.Code, codeOfStatus(fe.Code), fe.Message
	}
	if status == 0 {
		status = fiber.StatusInternalServerError
	}
	if status >= 500 {
		s.log.Error("request failed", "method", c.Method(), "path", c.Path(), "error", err)
		message = "internal error"
	}
	if status == fiber.StatusUnauthorized && len(c.Response().Header.Peek(fiber.HeaderWWWAuthenticate)) == 0 {
		c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="exchange"`)
	}
	if isFHIRPath(c.Path()) {
		issue := fiber.Map{"severity": "error", "code": string(code), "diagnostics": message}
		if field != "" {
			issue["expression"] = []string{field}
		}
		c.Set(fiber.HeaderContentType, "application/fhir+json")
		return c.Status(status).JSON(fiber.Map{"resourceType": "OperationOutcome", "issue": []fiber.Map{issue}}, "application/fhir+json")
	}
	return c.Status(status).JSON(fiber.Map{"detail": message})
}
