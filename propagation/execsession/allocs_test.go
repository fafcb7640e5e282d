package execsession_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation/execsession"
)

// TestEnvironAllocationBudget holds Environ to what it allocated when the
// budget was set (2026-12-03, otel v1.47.0), for a full session and an
// inherited environment that holds some of the variables it manages: a
// change that makes it allocate more fails here, not only in
// BenchmarkEnviron. The race detector does not change what it allocates.
// Most of the allocations are OpenTelemetry's (writing the baggage line,
// the composite propagator's Fields); Environ's own entries share one.
func TestEnvironAllocationBudget(t *testing.T) {
	const budget = 33
	prop := otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})
	ctx := trace.ContextWithSpanContext(otelsession.Bind(context.Background(), fullSession("/srv/work/alice")), testTrace)
	inherited := []string{"PATH=/usr/bin:/bin", "HOME=/home/alice", "LANG=C.UTF-8", "TERM=xterm",
		"BAGGAGE=session.chat_id=foreign", "TRACEPARENT=00-ffffffffffffffffffffffffffffffff-ffffffffffffffff-01",
		"HERMES_SESSION_THREAD_ID=foreign", "HERMES_KANBAN_TASK=t-1", "SHELL=/bin/sh", "USER=alice"}
	cfg := execsession.Config{Propagator: prop}
	var env []string
	n := testing.AllocsPerRun(100, func() { env = cfg.Environ(ctx, inherited) })
	if !slices.Contains(env, "HERMES_SESSION_THREAD_ID=17585") || !slices.ContainsFunc(env, func(kv string) bool {
		return strings.HasPrefix(kv, "BAGGAGE=") && strings.Contains(kv, "session.chat_id=-1001234567890")
	}) {
		t.Fatalf("Environ did not write the session: %q", env)
	}
	t.Logf("Environ: %.0f allocations per call", n)
	if n > budget {
		t.Errorf("Environ allocates %.0f times per call, budget %d", n, budget)
	}
}
