package otelsession_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/baggage"

	"github.com/sessionwire/sessionwire/internal/benchcpu"
	"github.com/sessionwire/sessionwire/otelsession"
)

// Allocation budgets of the hot paths, asserted without timing anything, so
// a change that makes them allocate fails here rather than only in a
// benchmark nobody reruns. The race detector does not change what these
// allocate.

func TestLookupAndGetenvDoNotAllocate(t *testing.T) {
	ctx, _ := envCtx(map[string]string{"HERMES_SESSION_THREAD_ID": "from-env"})
	bound := otelsession.Bind(ctx, fullSession())
	reset := otelsession.Reset(bound)
	for name, fn := range map[string]func(){
		"Lookup remote":    func() { sinkStr, sinkState = otelsession.Lookup(bound, otelsession.FieldThreadID) },
		"Lookup local":     func() { sinkStr, sinkState = otelsession.Lookup(bound, otelsession.FieldUISessionID) },
		"Getenv bound":     func() { sinkStr = otelsession.Getenv(bound, "HERMES_SESSION_THREAD_ID", "") },
		"Getenv fallback":  func() { sinkStr = otelsession.Getenv(reset, "HERMES_SESSION_THREAD_ID", "") },
		"Getenv not field": func() { sinkStr = otelsession.Getenv(bound, "HOME_NOT_A_FIELD", "d") },
	} {
		if n := testing.AllocsPerRun(200, fn); n != 0 {
			t.Errorf("%s allocates %.1f times per call, want 0", name, n)
		}
	}
}

func TestCachedBindAllocations(t *testing.T) {
	s := fullSession()
	bg := context.Background()
	otelsession.Bind(bg, s) // cached from here on
	// The context's baggage (the value and its boxed state) and the local
	// state's context: three allocations, whatever the session's size.
	if n := testing.AllocsPerRun(200, func() { sinkCtx = otelsession.Bind(bg, s) }); n > 3 {
		t.Errorf("a cached Bind allocates %.1f times, want at most 3", n)
	}
	if st := otelsession.BindCache(); st.Hits == 0 {
		t.Errorf("the repeated Bind missed the cache: %+v", st)
	}
}

// The next message of a conversation costs OpenTelemetry's copy of the map
// (Baggage.SetMember, the floor) and, beside it, the new message's local
// state and its context: no copy of the session's 25 recorded values, which
// the state shares with the cache's entry (a copy was 440 bytes of it).
func TestNextMessageBindAllocations(t *testing.T) {
	s := fullSession()
	bg := context.Background()
	ids := [2]string{"msg-1", "msg-2"}
	s.MessageID = "msg-0"
	bound := otelsession.Bind(bg, s)
	s.MessageID = ids[0]
	otelsession.Bind(bg, s) // the entry keeps the session's values from here on
	i := 0
	next := func() {
		i++
		s.MessageID = ids[i%2] // never the last message's id: SetMember every time
		sinkCtx = otelsession.Bind(bg, s)
	}
	bag := baggage.FromContext(bound)
	var members [2]baggage.Member
	for j, id := range ids {
		members[j], _ = baggage.NewMemberRaw(otelsession.FieldMessageID.Key(), id)
	}
	floor := func() {
		i++
		b, _ := bag.SetMember(members[i%2])
		sinkCtx = baggage.ContextWithBaggage(bg, b)
	}
	nAllocs, nBytes := allocated(next)
	fAllocs, fBytes := allocated(floor)
	t.Logf("next message: %.1f allocations, %.0f B; SetMember floor: %.1f, %.0f B", nAllocs, nBytes, fAllocs, fBytes)
	if nAllocs > fAllocs+2 || nBytes > fBytes+256 {
		t.Errorf("the next message's Bind allocates %.1f times and %.0f B, over its SetMember floor's %.1f and %.0f B by more than 2 and 256 B",
			nAllocs, nBytes, fAllocs, fBytes)
	}
	if st := otelsession.BindCache(); st.Hits == 0 {
		t.Errorf("the next messages missed the cache: %+v", st)
	}
}

// allocated returns the allocations and the bytes fn allocates per call,
// each over 500 calls.
func allocated(fn func()) (allocs, bytes float64) {
	return testing.AllocsPerRun(500, fn), benchcpu.BytesPerRun(500, fn)
}
