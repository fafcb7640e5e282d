package benchcpu

import (
	"runtime"
	"testing"
)

var sink [][]*int

// TestLiveHeapSeesWhatIsKeptAlive holds LiveHeap to the runtime's count: a
// few MiB kept alive across a collection are in it, and gone from it once
// they are dropped and collected again.
func TestLiveHeapSeesWhatIsKeptAlive(t *testing.T) {
	runtime.GC()
	before, ok := LiveHeap()
	if !ok {
		t.Fatalf("the runtime does not report %s", liveHeapMetric)
	}
	const n = 1 << 16 // 64 Ki pointers to 64 Ki ints: about 1.5 MiB
	kept := make([]*int, n)
	for i := range kept {
		kept[i] = new(int)
	}
	sink = append(sink, kept)
	runtime.GC()
	with, _ := LiveHeap()
	if with < before+n*8 {
		t.Fatalf("with %d pointers kept alive, live heap %d B, before %d B", n, with, before)
	}
	sink = nil
	runtime.GC()
	after, _ := LiveHeap()
	if after >= with-n*8 {
		t.Fatalf("after dropping them, live heap %d B, with them %d B", after, with)
	}
}

func BenchmarkTimeReportsLiveHeap(b *testing.B) {
	defer Time(b)()
	for b.Loop() {
		sink = append(sink[:0], make([]*int, 16))
	}
}

var sinkBytes []byte

// BytesPerRun counts what a call allocates: a kilobyte as about a kilobyte,
// nothing as about nothing.
func TestBytesPerRun(t *testing.T) {
	if got := BytesPerRun(200, func() { sinkBytes = make([]byte, 1024) }); got < 1024 || got > 1024+64 {
		t.Errorf("a call allocating 1,024 bytes: %.0f B per run", got)
	}
	if got := BytesPerRun(200, func() { sinkBytes = sinkBytes[:0] }); got > 64 {
		t.Errorf("a call allocating nothing: %.0f B per run", got)
	}
}
