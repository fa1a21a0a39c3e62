// Package pinned compares a test's outputs, one line each, with the lines
// a file pins: the outputs of the code before a change that must not
// change them (speed work, issue 14).
package pinned

import (
	"os"
	"strings"
	"testing"
)

// Lines fails t for each line of got that differs from the line pinned
// in the file at path (the first 20 shown), or rewrites the file with got
// when update is set (for a change of output that is meant).
func Lines(t testing.TB, path string, got []string, update bool) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("%d outputs, %d pinned", len(got), len(want))
	}
	changed := 0
	for i := range got {
		if got[i] != want[i] {
			if changed++; changed <= 20 {
				t.Errorf("output changed: %s, pinned %s", got[i], want[i])
			}
		}
	}
	if changed > 0 {
		t.Errorf("%d of %d outputs changed", changed, len(got))
	}
}
