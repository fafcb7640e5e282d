package main

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// errNotCalled is the error of work whose call a breaker refused.
var errNotCalled = errors.New("not called")

// breakerTrips is how many calls in a row must fail before a breaker opens.
const breakerTrips = 5

// breaker stops a process from calling a service that keeps failing (the
// downstream service, a chat platform). Work is retried per message
// (retryAfter), but with many messages queued a worker turns to the next as
// soon as one fails, so without a breaker a service that is down is called
// as fast as work can fail. After breakerTrips failures in a row the
// breaker opens: no call is made for a pause of 200 ms, doubling with each
// failed probe to at most 5 s. When the pause is over, one call probes the
// service while the others still wait; its success closes the breaker, its
// failure opens it for the next pause. The work that was not called waits
// for its next delivery, as work that failed does.
//
// Calls made for someone (callFor: the router's, for a chat) open it only
// when the failures in a row are more than one chat's: a platform that
// keeps failing one chat (a 503 for that chat alone) is up for the others,
// whose deliveries must not wait behind it.
type breaker struct {
	mu       sync.Mutex
	failures int             // in a row
	whos     map[string]bool // for whom the failures in a row were
	until    time.Time       // open until then
	pause    time.Duration
	probing  bool  // a probe's call is under way
	last     error // the last failure, which the work not called is told
}

// tripped reports whether the failures in a row open the breaker: enough of
// them, and not all for one.
func (b *breaker) tripped() bool { return b.failures >= breakerTrips && len(b.whos) != 1 }

// shut reports whether a call now would be refused: the breaker is open and
// its pause not over, or another call is probing. It takes nothing: work
// can ask before doing what leads up to the call.
func (b *breaker) shut(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tripped() && (b.probing || now.Before(b.until))
}

// allow reports whether a call may be made now, and whether it is the
// probe. A caller that is allowed must report the call's outcome to done.
func (b *breaker) allow(now time.Time) (probe, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !b.tripped():
		return false, true
	case b.probing || now.Before(b.until):
		return false, false
	}
	b.probing = true
	return true, true
}

// done records the outcome of a call allow allowed.
func (b *breaker) done(probe bool, err error, now time.Time) { b.doneFor(probe, "", err, now) }

// doneFor records the outcome of a call allow allowed, made for who ("" for
// nobody in particular).
func (b *breaker) doneFor(probe bool, who string, err error, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
	}
	if err == nil {
		b.failures, b.whos, b.pause, b.until, b.last = 0, nil, 0, time.Time{}, nil
		return
	}
	b.failures++
	b.last = err
	if who != "" {
		if b.whos == nil {
			b.whos = map[string]bool{}
		}
		b.whos[who] = true
	}
	// A failed probe, or a failure once the pause is over (a call made
	// before the breaker opened), opens it for the next pause; the calls
	// that fail during a pause were made before it and change nothing.
	if b.tripped() && (probe || !now.Before(b.until)) {
		b.pause = min(max(2*b.pause, 200*time.Millisecond), 5*time.Second)
		b.until = now.Add(b.pause)
	}
}

// errShut is the error of work whose call the breaker refused: the service
// was not called (errNotCalled).
func (b *breaker) errShut() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Errorf("%w: it failed %d times in a row, the last: %v (the next try within %v)", errNotCalled, b.failures, b.last, b.pause)
}

// call makes the call f unless the breaker refuses it.
func (b *breaker) call(f func() error) error { return b.callFor("", f) }

// callFor is call for who: see breaker.
func (b *breaker) callFor(who string, f func() error) error {
	probe, ok := b.allow(time.Now())
	if !ok {
		return b.errShut()
	}
	err := f()
	b.doneFor(probe, who, err, time.Now())
	return err
}

// breakers holds a breaker per service, made on first use.
type breakers struct {
	mu sync.Mutex
	m  map[string]*breaker
}

func (bs *breakers) of(service string) *breaker {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if bs.m == nil {
		bs.m = map[string]*breaker{}
	}
	b := bs.m[service]
	if b == nil {
		b = &breaker{}
		bs.m[service] = b
	}
	return b
}
