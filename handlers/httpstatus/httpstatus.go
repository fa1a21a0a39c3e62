// Package httpstatus maps the domain's error codes to HTTP statuses: one
// table for every surface that renders errors over HTTP (the admin API
// and FHIR in package handlers, the web console), so that a refusal
// answers alike wherever it is made. Package domain speaks only its codes
// and knows nothing of HTTP.
package httpstatus

import (
	"net/http"

	"exchange/domain"
)

var statuses = map[domain.Code]int{
	domain.CodeInvalid:         http.StatusBadRequest,
	domain.CodeNotFound:        http.StatusNotFound,
	domain.CodeConflict:        http.StatusConflict,
	domain.CodeDuplicate:       http.StatusConflict,
	domain.CodeForbidden:       http.StatusForbidden,
	domain.CodeLogin:           http.StatusUnauthorized,
	domain.CodeThrottled:       http.StatusTooManyRequests,
	domain.CodeNotSupported:    http.StatusBadRequest,
	domain.CodeUnprocessable:   http.StatusUnprocessableEntity,
	domain.CodeTooLong:         http.StatusRequestEntityTooLarge,
	domain.CodeVersionMismatch: http.StatusPreconditionFailed,
	domain.CodeUnavailable:     http.StatusServiceUnavailable,
	domain.CodeInternal:        http.StatusInternalServerError,
}

// Of returns the HTTP status of err's domain code; 500 for an error that
// is no domain error.
func Of(err error) int {
	if st, ok := statuses[domain.ErrorCode(err)]; ok {
		return st
	}
	return http.StatusInternalServerError
}
