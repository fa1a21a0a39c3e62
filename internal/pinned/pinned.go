// Package pinned compares a test's outputs, one line each, with the lines
// a file pins: the outputs of the code before a change that must not
// change them (speed work). It also picks the part of a whole corpus
// (every official example) such a test reads in the short tier (go test
// -short): a sample spread over the corpus, so that the inner loop keeps
// a taste of every golden while CI checks them whole.
package pinned

import (
	"os"
	"strings"
	"testing"
)

// ShortSample is how many items of a corpus a test reads under -short.
const ShortSample = 100

// Sample returns corpus whole, or under -short ShortSample of its items
// spread evenly over it (the first, then every len/ShortSample-th), in
// their order.
func Sample[T any](corpus []T) []T {
	if !testing.Short() || len(corpus) <= ShortSample {
		return corpus
	}
	out := make([]T, 0, ShortSample)
	for i := range ShortSample {
		out = append(out, corpus[i*len(corpus)/ShortSample])
	}
	return out
}

// Lines fails t for each line of got that differs from the line pinned
// in the file at path (the first 20 shown), or rewrites the file with got
// when update is set (for a change of output that is meant). Each line
// starts with the name of what it is the output of, up to a space. Under
// -short got may be the outputs of a Sample: each is compared with the
// pinned line of its name, and -update is refused (it needs them all).
func Lines(t testing.TB, path string, got []string, update bool) {
	t.Helper()
	if update {
		if testing.Short() {
			t.Fatal("-update rewrites every pinned output: run it without -short")
		}
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
	if testing.Short() {
		byName := make(map[string]string, len(want))
		for _, line := range want {
			name, _, _ := strings.Cut(line, " ")
			byName[name] = line
		}
		want = make([]string, len(got))
		for i, line := range got {
			name, _, _ := strings.Cut(line, " ")
			want[i] = byName[name]
		}
	}
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
