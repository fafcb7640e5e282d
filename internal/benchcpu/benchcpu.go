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
