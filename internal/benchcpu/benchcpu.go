// Package benchcpu reports the CPU time a benchmark's loop took, per unit of
// work, beside Go's wall-clock ns/op.
//
// The machines the benchmarks run on are shared: wall time counts the
// moments the benchmark waited for a core, and varies by tens of percent
// with the other load. The process's user and system CPU time (getrusage)
// counts only the work done, the garbage collector's included, and is what
// docs/benchmarks.md and the performance targets quote. It is still
// disturbed by contention for caches and memory bandwidth, but far less.
package benchcpu

import (
	"syscall"
	"testing"
	"time"
)

// Process is the CPU time (user and system) of the whole process so far.
func Process() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Per starts measuring and returns the function that stops and reports
// the process CPU time per unit as the metric "cpu-ns/<unit>", where each of
// the b.N operations handles perOp units. Call it right before a b.Loop
// loop and the returned function right after it (or defer it), so that
// nothing but the loop is counted:
//
//	defer benchcpu.Per(b, 1, "op")()
//	for b.Loop() { ... }
func Per(b *testing.B, perOp int, unit string) func() {
	start := Process()
	return func() {
		cpu := Process() - start
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*perOp), "cpu-ns/"+unit)
	}
}
