// Package benchcpu reports a benchmark's process CPU time per operation
// (cpu-ns/op) beside its wall time. On a shared machine the wall time of a
// benchmark swings with whatever else runs; the CPU time the process spent
// (its own work and its garbage collection) swings far less, so the
// performance tables compare a row with its baseline on it. It owns nothing
// else.
package benchcpu

import "testing"

// Time starts measuring b's process CPU time; call the function it returns
// when the loop ends: defer benchcpu.Time(b)().
func Time(b *testing.B) func() {
	start := processTime()
	return func() {
		if b.N > 0 && start >= 0 {
			if end := processTime(); end >= start {
				b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
			}
		}
	}
}
