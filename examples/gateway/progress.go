package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// progressState is what the load driver has done so far.
type progressState struct {
	posting   bool // still posting (else waiting for deliveries)
	posted    int  // messages the ingress accepted
	total     int  // messages to post
	delivered int
	expected  int // deliveries expected
	refused   int
}

// progressReporter prints the driver's progress on standard error while a
// run goes on: redrawn in place every quarter second on a terminal, a plain
// line every few seconds otherwise (a CI log, a file), so that a log never
// fills with carriage returns and a terminal never scrolls.
type progressReporter struct {
	w     io.Writer
	tty   bool
	every time.Duration
	snap  func() progressState
	start time.Time

	stopOnce sync.Once
	stopped  chan struct{}
	done     chan struct{}

	// For the rates: the counts at the previous line.
	lastAt                  time.Time
	lastPosted, lastDeliver int
}

// plainProgressEvery is how often a line is printed when standard error is
// not a terminal; SESSIONWIRE_PROGRESS_EVERY (a duration) changes it, for
// tests and for logs that want more or fewer lines.
var plainProgressEvery = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("SESSIONWIRE_PROGRESS_EVERY")); err == nil && d > 0 {
		return d
	}
	return 3 * time.Second
}()

// startProgress prints progress to w until the returned stop is called; a
// nil w prints nothing.
func startProgress(w io.Writer, snap func() progressState) (stop func()) {
	if w == nil {
		return func() {}
	}
	p := &progressReporter{w: w, tty: isTerminal(w), every: plainProgressEvery, snap: snap, start: time.Now(),
		stopped: make(chan struct{}), done: make(chan struct{})}
	if p.tty {
		p.every = 250 * time.Millisecond
	}
	p.lastAt = p.start
	go p.loop()
	return func() {
		p.stopOnce.Do(func() { close(p.stopped) })
		<-p.done
	}
}

func (p *progressReporter) loop() {
	defer close(p.done)
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		select {
		case <-p.stopped:
			if p.tty {
				fmt.Fprint(p.w, "\r\033[K") // leave the terminal as it was
			}
			return
		case <-t.C:
			line := p.line(p.snap(), time.Now())
			if p.tty {
				fmt.Fprintf(p.w, "\r\033[K%s", line)
			} else {
				fmt.Fprintln(p.w, line)
			}
		}
	}
}

// line is one progress report: what is done, how fast, and how long the
// rest should take at that pace.
func (p *progressReporter) line(s progressState, now time.Time) string {
	elapsed := now.Sub(p.start)
	dt := now.Sub(p.lastAt).Seconds()
	postRate := float64(s.posted-p.lastPosted) / max(dt, 1e-3)
	deliverRate := float64(s.delivered-p.lastDeliver) / max(dt, 1e-3)
	p.lastAt, p.lastPosted, p.lastDeliver = now, s.posted, s.delivered
	var b strings.Builder
	fmt.Fprintf(&b, "progress %5.0fs  ", elapsed.Seconds())
	if s.posting {
		fmt.Fprintf(&b, "posting: %d/%d sent (%.0f/s)  delivered %d/%d", s.posted, s.total, postRate, s.delivered, s.expected)
		if postRate > 0 {
			fmt.Fprintf(&b, "  ETA posting %s", eta(float64(s.total-s.posted)/postRate))
		}
	} else {
		fmt.Fprintf(&b, "waiting: delivered %d/%d (%.0f/s)  refused %d", s.delivered, s.expected, deliverRate, s.refused)
		if deliverRate > 0 && s.delivered < s.expected {
			fmt.Fprintf(&b, "  ETA %s", eta(float64(s.expected-s.delivered)/deliverRate))
		}
	}
	return b.String()
}

func eta(seconds float64) string {
	return (time.Duration(seconds) * time.Second).Round(time.Second).String()
}

// isTerminal reports whether w is a terminal that can redraw a line.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
