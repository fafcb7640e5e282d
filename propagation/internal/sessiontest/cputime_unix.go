//go:build unix

package sessiontest

import (
	"syscall"
	"testing"
	"time"
)

// CPUTime reports, beside ns/op, the processor time the whole process spent
// per iteration, as "cpu-ns/op". On a machine shared with other work, wall
// time also counts the time the benchmark waited for a core, which varies
// from run to run and between a benchmark and its baseline; processor time
// (the garbage collector's included) does not. Use it first in a benchmark:
//
//	defer sessiontest.CPUTime(b)()
func CPUTime(b *testing.B) func() {
	start := processTime()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(processTime()-start)/float64(b.N), "cpu-ns/op")
		}
	}
}

func processTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
