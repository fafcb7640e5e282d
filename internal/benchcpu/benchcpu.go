package benchcpu

import (
	"runtime"
	"runtime/metrics"
	"testing"
)

// Time starts measuring b's process CPU time; call the function it returns
// when the loop ends: defer benchcpu.Time(b)(). It reports cpu-ns/op and,
// beside it, live-B: the heap the garbage collector found live in its last
// cycle of the loop (see LiveHeap).
func Time(b *testing.B) func() {
	start := processTime()
	return func() {
		if b.N > 0 && start >= 0 {
			if end := processTime(); end >= start {
				b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
			}
		}
		if live, ok := LiveHeap(); ok {
			b.ReportMetric(float64(live), "live-B")
		}
	}
}

// liveHeapMetric is the runtime's count of the heap its last cycle marked.
const liveHeapMetric = "/gc/heap/live:bytes"

// LiveHeap returns the bytes of heap the garbage collector marked live in its
// last cycle, false when the runtime does not say. The collector's share of
// cpu-ns/op depends on it: each cycle marks what is live, and the pacer
// starts the next one once the heap has grown by as much (GOGC=100), but not
// before it reaches 4 MiB. A loop run beside a few MiB of live data pays
// about one byte marked per byte it allocates; the same loop beside an
// almost empty heap pays next to nothing for the same allocations. Rows
// compared with each other must so run beside comparable live heaps
// (perftables warns when they do not).
func LiveHeap() (uint64, bool) {
	s := []metrics.Sample{{Name: liveHeapMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0, false
	}
	return s[0].Value.Uint64(), true
}

// BytesPerRun is testing.AllocsPerRun's companion for bytes: the bytes
// allocated per call of fn, averaged over runs calls after one to warm up.
// Anything else the process allocates meanwhile is counted too, so the
// figure can be a few bytes over what fn alone allocates; a test holding
// an allocation budget in bytes leaves room for that.
func BytesPerRun(runs int, fn func()) float64 {
	fn()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		fn()
	}
	runtime.ReadMemStats(&after)
	return float64(after.TotalAlloc-before.TotalAlloc) / float64(runs)
}
