package domain

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Code classifies an error. The values are FHIR issue-type codes
// (http://hl7.org/fhir/issue-type) so the FHIR layer can put them into an
// OperationOutcome unchanged, except version-mismatch, which FHIR reports
// as a conflict; the transport layers map them to HTTP statuses (package
// handlers/httpstatus holds the one table).
type Code string

// The closed set of error codes.
const (
	CodeInvalid         Code = "invalid"          // the input is malformed or breaks a rule
	CodeNotFound        Code = "not-found"        // the addressed thing does not exist (or may not be seen)
	CodeConflict        Code = "conflict"         // the change clashes with the stored state
	CodeDuplicate       Code = "duplicate"        // a unique key is already taken
	CodeForbidden       Code = "forbidden"        // the actor may not do this
	CodeLogin           Code = "login"            // no, or no valid, credentials
	CodeThrottled       Code = "throttled"        // too many attempts
	CodeNotSupported    Code = "not-supported"    // a valid request the service does not do
	CodeUnprocessable   Code = "processing"       // well-formed, but the content breaks its rules (an OMH schema)
	CodeTooLong         Code = "too-long"         // the input exceeds a size limit (a data point, a request body)
	CodeVersionMismatch Code = "version-mismatch" // the expected version (FHIR If-Match, a store's compare-and-set) is not the current one (admin If-Match: Error.Stale)
	CodeUnavailable     Code = "transient"        // busy for now (the embedded database's searches): try again later
	CodeInternal        Code = "exception"        // a fault of ours, logged in full
)

// Error is the error type of the domain. Field names the input at fault
// (a JSON field of the admin API or a FHIRPath expression) when there is one.
// Details lists the problems one by one when there are several (an invalid
// FHIR resource), each with the element at fault.
type Error struct {
	Code    Code
	Message string
	Field   string
	Details []Detail
	// RetryAfter says when a CodeThrottled request may be repeated; the
	// transport layers send it as Retry-After.
	RetryAfter time.Duration
	// Stored names the stored resource a CodeDuplicate is about, as
	// Type/id, when that resource is what the request sends: it is
	// stored already, and a client may count the request done. Empty when
	// the request clashes with something else.
	Stored string
	// Stale marks a CodeConflict that refuses a change made from a
	// version of the record that is no longer the stored one
	// (checkUnchanged): nothing was written. A transport that took that
	// version from a precondition header (If-Match) answers it as the
	// failed precondition it is; one that took it from a form, as the
	// conflict.
	Stale bool
}

// Detail is one problem of an input: the element at fault and what is
// wrong with it.
type Detail struct {
	Field   string
	Message string
}

func (e *Error) Error() string { return e.Message }

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// FieldErrorf returns a CodeInvalid *Error that names the field at fault;
// the message is prefixed with the field so that it reads on its own.
func FieldErrorf(field, format string, args ...any) *Error {
	return &Error{Code: CodeInvalid, Field: field, Message: field + ": " + fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of err: the code of the first *Error in its
// chain, or CodeInternal for any other non-nil error.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// RetryAfter returns the RetryAfter of the first *Error in err's chain:
// zero when there is none.
func RetryAfter(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		return e.RetryAfter
	}
	return 0
}

// StoredAs returns the stored resource a duplicate names (Error.Stored):
// "" unless err says that what the request sends is stored already.
func StoredAs(err error) string {
	var e *Error
	if errors.As(err, &e) && e.Code == CodeDuplicate {
		return e.Stored
	}
	return ""
}

// IsStale reports whether err refuses a change made from a version that
// is no longer the stored one (Error.Stale).
func IsStale(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == CodeConflict && e.Stale
}

// concealedError is a refusal answered as absence: whoever is answered
// sees its CodeNotFound error alone (an id the actor may not see must look
// exactly like one that does not exist), while the audit trail records it
// as what it is, CodeForbidden (auditOutcome).
type concealedError struct{ absent *Error }

func (e *concealedError) Error() string { return e.absent.Message }
func (e *concealedError) Unwrap() error { return e.absent }

// concealed answers a refusal with absent, a CodeNotFound error worded as
// the answer about something that does not exist.
func concealed(absent *Error) error { return &concealedError{absent: absent} }

// auditOutcome is the outcome the audit trail records of err: its code,
// CodeForbidden for a refusal concealed as absence.
func auditOutcome(err error) Code {
	if errors.As(err, new(*concealedError)) {
		return CodeForbidden
	}
	return ErrorCode(err)
}

// IsCode reports whether err carries the code.
func IsCode(err error, code Code) bool { return err != nil && ErrorCode(err) == code }

// ErrorMessage returns the message a client may see: the message of a domain
// error, or "internal error" for anything else, whose text must not leak.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) && e.Code != CodeInternal {
		return e.Message
	}
	return "internal error"
}

// Sentence writes a message (lower case by Go convention) as a sentence
// for a page: capitalized, ending with a full stop.
func Sentence(msg string) string {
	if msg == "" {
		return msg
	}
	msg = strings.ToUpper(msg[:1]) + msg[1:]
	if !strings.HasSuffix(msg, ".") {
		msg += "."
	}
	return msg
}
