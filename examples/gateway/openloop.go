package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// The open-loop load (--rate, --duration): message i is due at start +
// i/rate, posted then whatever the gateway is doing, and its latency counts
// from when it was due, not from when the driver got round to posting it. A
// closed loop (or a driver that waits for a free slot and starts the clock
// then) slows down with the system it measures and hides the queueing
// ("coordinated omission"); this one keeps the offered rate and shows it.

// openLoopInFlight bounds the posts in flight in an open loop: far more
// than the ingress needs at any sustainable rate, so that a slow gateway
// builds a queue the latencies show rather than slowing the schedule.
const openLoopInFlight = 1024

// due returns when message i of an open loop at rate messages per second
// is to be posted.
func due(start time.Time, i int, rate float64) time.Time {
	return start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
}

// waitUntil sleeps until t or until ctx ends.
func waitUntil(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
}

// sustainableP99 is the reply latency an open-loop rate must stay under to
// count as sustained.
const sustainableP99 = time.Second

// openLoop is what an open-loop run offered and whether the gateway kept up.
type openLoop struct {
	Rate      float64 `json:"rate_per_second"`
	Seconds   float64 `json:"duration_seconds"`
	Sustained bool    `json:"sustained"` // everything delivered, reply p99 under sustainableP99
}

// latencyStats are a kind of delivery's latencies.
type latencyStats struct {
	Count     int       `json:"count"`
	P50ms     float64   `json:"p50_ms"`
	P90ms     float64   `json:"p90_ms"`
	P99ms     float64   `json:"p99_ms"`
	MaxMs     float64   `json:"max_ms"`
	Histogram []hbucket `json:"histogram"`
}

// hbucket counts the latencies below UpToMs (and at least the previous
// bucket's bound); the last bucket has no bound (UpToMs 0).
type hbucket struct {
	FromMs float64 `json:"from_ms"`
	UpToMs float64 `json:"up_to_ms,omitempty"`
	Count  int     `json:"count"`
}

// histogramBounds are the buckets' upper bounds in milliseconds: roughly
// three per decade, so that a shift from 200 ms to 2 s is plain to see.
var histogramBounds = []float64{10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000}

func newLatencyStats(ms []float64) latencyStats {
	s := latencyStats{Count: len(ms)}
	if len(ms) == 0 {
		return s
	}
	slices.Sort(ms)
	s.P50ms, s.P90ms, s.P99ms = percentile(ms, 50), percentile(ms, 90), percentile(ms, 99)
	s.MaxMs = ms[len(ms)-1]
	counts := make([]int, len(histogramBounds)+1)
	for _, v := range ms {
		i, _ := slices.BinarySearchFunc(histogramBounds, v, func(b, v float64) int {
			if b <= v {
				return -1
			}
			return 1
		})
		counts[i]++
	}
	// Only the buckets from the first to the last that holds any.
	first, last := slices.IndexFunc(counts, func(n int) bool { return n > 0 }), 0
	for i, n := range counts {
		if n > 0 {
			last = i
		}
	}
	for i := first; i <= last; i++ {
		b := hbucket{Count: counts[i]}
		if i > 0 {
			b.FromMs = histogramBounds[i-1]
		}
		if i < len(histogramBounds) {
			b.UpToMs = histogramBounds[i]
		}
		s.Histogram = append(s.Histogram, b)
	}
	return s
}

// text draws the histogram, one bar per bucket, scaled to the fullest.
func (s latencyStats) text(indent string) string {
	var b strings.Builder
	most := 0
	for _, h := range s.Histogram {
		most = max(most, h.Count)
	}
	for _, h := range s.Histogram {
		label := fmt.Sprintf("%s – %s", fmtMs(h.FromMs), fmtMs(h.UpToMs))
		if h.UpToMs == 0 {
			label = fmt.Sprintf("%s or more", fmtMs(h.FromMs))
		}
		bar := strings.Repeat("#", int(math.Ceil(40*float64(h.Count)/float64(max(most, 1)))))
		fmt.Fprintf(&b, "%s%-14s %6d  %s\n", indent, label, h.Count, bar)
	}
	return b.String()
}

func fmtMs(ms float64) string {
	if ms >= 1000 {
		return fmt.Sprintf("%gs", ms/1000)
	}
	return fmt.Sprintf("%gms", ms)
}
