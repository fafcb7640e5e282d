package otelsession_test

import (
	"context"
	"testing"

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
