package httpstatus_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"exchange/domain"
	"exchange/handlers/httpstatus"
)

// TestOf: each domain code answers its status, wrapped too; an error that
// is no domain error is a 500.
func TestOf(t *testing.T) {
	for code, want := range map[domain.Code]int{
		domain.CodeInvalid: 400, domain.CodeNotFound: 404, domain.CodeConflict: 409, domain.CodeDuplicate: 409,
		domain.CodeForbidden: 403, domain.CodeLogin: 401, domain.CodeThrottled: 429, domain.CodeNotSupported: 400,
		domain.CodeUnprocessable: 422, domain.CodeTooLong: 413, domain.CodeVersionMismatch: 412, domain.CodeUnavailable: 503, domain.CodeInternal: 500,
	} {
		err := domain.Errorf(code, "x")
		if got := httpstatus.Of(err); got != want {
			t.Errorf("%s: %d, want %d", code, got, want)
		}
		if got := httpstatus.Of(fmt.Errorf("wrapped: %w", err)); got != want {
			t.Errorf("%s wrapped: %d, want %d", code, got, want)
		}
	}
	if got := httpstatus.Of(errors.New("disk full")); got != http.StatusInternalServerError {
		t.Errorf("a plain error: %d", got)
	}
}
