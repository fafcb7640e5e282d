package main

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var errDown = errors.New("503")

// A breaker lets every call through until breakerTrips fail in a row, then
// none for a pause; after it one probe, whose failure doubles the pause (to
// at most 5 s) and whose success closes the breaker.
func TestBreakerOpensProbesAndCloses(t *testing.T) {
	var b breaker
	now := time.Unix(1000, 0)
	fail := func() {
		t.Helper()
		probe, ok := b.allow(now)
		require.True(t, ok)
		b.done(probe, errDown, now)
	}
	for range breakerTrips - 1 {
		fail()
	}
	assert.False(t, b.shut(now), "not yet: one failure short")
	fail()
	assert.True(t, b.shut(now))
	_, ok := b.allow(now.Add(199 * time.Millisecond))
	assert.False(t, ok, "within the first pause, 200 ms")
	assert.ErrorIs(t, b.errShut(), errNotCalled)

	// The pause doubles with each failed probe, to 5 s.
	for _, pause := range []time.Duration{200, 400, 800, 1600, 3200, 5000, 5000} {
		pause *= time.Millisecond
		now = now.Add(pause)
		probe, ok := b.allow(now)
		require.True(t, ok, "the pause of %v is over", pause)
		require.True(t, probe)
		_, ok = b.allow(now)
		assert.False(t, ok, "one probe at a time")
		assert.True(t, b.shut(now))
		b.done(true, errDown, now)
	}
	_, ok = b.allow(now.Add(5*time.Second - time.Millisecond))
	assert.False(t, ok)

	// A probe that succeeds closes it.
	now = now.Add(5 * time.Second)
	probe, ok := b.allow(now)
	require.True(t, ok)
	b.done(probe, nil, now)
	assert.False(t, b.shut(now))
	for range breakerTrips - 1 {
		fail()
	}
	assert.False(t, b.shut(now), "closed: the count of failures starts again")
}

// Calls made before the breaker opened and failing during its pause do not
// extend it; a success among them closes it.
func TestBreakerCallsInFlight(t *testing.T) {
	var b breaker
	now := time.Unix(1000, 0)
	var inFlight []bool
	for range 2 * breakerTrips {
		probe, ok := b.allow(now)
		require.True(t, ok)
		inFlight = append(inFlight, probe)
	}
	for _, probe := range inFlight[:breakerTrips] {
		b.done(probe, errDown, now)
	}
	until := b.until
	for _, probe := range inFlight[breakerTrips : 2*breakerTrips-1] {
		b.done(probe, errDown, now.Add(100*time.Millisecond))
	}
	assert.Equal(t, until, b.until, "failures during the pause change nothing")
	b.done(inFlight[2*breakerTrips-1], nil, now.Add(150*time.Millisecond))
	assert.False(t, b.shut(now.Add(150*time.Millisecond)), "the service answered: closed")
}

func TestBreakerCall(t *testing.T) {
	var b breaker
	calls := 0
	for range breakerTrips + 3 {
		_ = b.call(func() error { calls++; return errDown })
	}
	assert.Equal(t, breakerTrips, calls, "no call once open")
	err := b.call(func() error { calls++; return nil })
	assert.ErrorIs(t, err, errNotCalled)
	var bs breakers
	assert.Same(t, bs.of("telegram"), bs.of("telegram"))
	assert.NotSame(t, bs.of("telegram"), bs.of("slack"))
}

// Failures in a row for one chat alone do not open a platform's breaker:
// the platform answers the others. Failures across chats do.
func TestBreakerForOneChatStaysClosed(t *testing.T) {
	now := time.Now()
	var b breaker
	for range 3 * breakerTrips {
		probe, ok := b.allow(now)
		require.True(t, ok, "a failing chat does not shut the platform")
		b.doneFor(probe, "T1/chat-1", errDown, now)
	}
	probe, ok := b.allow(now)
	require.True(t, ok)
	b.doneFor(probe, "T1/chat-2", errDown, now) // a second chat fails too: the platform
	_, ok = b.allow(now)
	assert.False(t, ok, "failures across chats open it")
}
