package domain

import "time"

// Every admin-edited record (organization, study, data source, patient,
// a practitioner's or any user's account) is changed the same way: read
// it, apply the patch, and store the result by compare-and-set on the
// version read (its LastUpdated, which the store moves on by a
// millisecond at least at every change, the admin API's ETag); applyAgain
// repeats that when another change came first. A change made from a
// version its user saw (a console form's, the admin API's If-Match) is
// refused by checkUnchanged inside that loop, never applied to a version
// its user did not see.

// updateAttempts bounds how often an update is applied again to a record
// another update changed meanwhile.
const updateAttempts = 5

// applyAgain runs apply, which reads a record, applies a patch to it and
// stores it by compare-and-set on the version it read, again each time
// another update came first (CodeVersionMismatch): updates of different
// fields of one record sent at once each keep their change, instead of
// the last replacing the others' fields with what it read. CodeConflict,
// naming the record by what and args, if other updates keep coming
// first.
func applyAgain[T any](apply func() (T, error), what string, args ...any) (T, error) {
	for attempt := 1; ; attempt++ {
		v, err := apply()
		if !IsCode(err, CodeVersionMismatch) {
			return v, err
		}
		if attempt == updateAttempts {
			var none T
			return none, Errorf(CodeConflict, what+" is being changed by other requests; send the change again", args...)
		}
	}
}

// checkUnchanged refuses a change made from another version of a record
// than the stored one (stored, its LastUpdated; from, the one the change
// was made from, nil for none): CodeConflict, naming the record by what
// and args. applyAgain retries only CodeVersionMismatch, so a change
// whose record moved on between its own read and write is read again
// and refused here, never applied to a version its user did not see. The
// error is Stale, so that the admin API answers it as a failed If-Match.
func checkUnchanged(from *time.Time, stored time.Time, what string, args ...any) error {
	if from == nil || from.Equal(stored) {
		return nil
	}
	err := Errorf(CodeConflict, what+" was changed by someone else since you opened it; nothing was saved: make your change again on the current version", args...)
	err.Stale = true
	return err
}
