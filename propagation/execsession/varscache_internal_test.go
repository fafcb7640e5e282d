package execsession

import (
	"context"
	"slices"
	"testing"

	otelprop "go.opentelemetry.io/otel/propagation"
)

// namedFields is a propagator of another format that writes the keys it
// lists (a slice type: not comparable).
type namedFields []string

func (namedFields) Inject(context.Context, otelprop.TextMapCarrier) {}
func (namedFields) Extract(ctx context.Context, _ otelprop.TextMapCarrier) context.Context {
	return ctx
}
func (n namedFields) Fields() []string { return n }

// holder is a comparable propagator type holding another propagator: == on
// two of them panics when what they hold is a slice.
type holder struct{ inner otelprop.TextMapPropagator }

func (h holder) Inject(ctx context.Context, c otelprop.TextMapCarrier) { h.inner.Inject(ctx, c) }
func (h holder) Extract(ctx context.Context, c otelprop.TextMapCarrier) context.Context {
	return h.inner.Extract(ctx, c)
}
func (h holder) Fields() []string { return h.inner.Fields() }

// The cache of the names a propagator writes must never hand one
// propagator's names to another: only the same composite (the same backing
// array) or an equal comparable value counts as the same propagator.
func TestPropagatorVarsCacheTellsPropagatorsApart(t *testing.T) {
	w3c := otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})
	b3 := otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{}, namedFields{"X-B3-TraceId"})
	jaeger := namedFields{"uber-trace-id"}
	var c varsCache
	for i, p := range []otelprop.TextMapPropagator{
		w3c, w3c, b3, w3c, otelprop.TraceContext{}, otelprop.TraceContext{},
		holder{b3}, holder{b3}, holder{w3c}, jaeger, namedFields{"other"}, jaeger, b3,
	} {
		want := propagatorVars(p)
		if got := c.of(p); !slices.Equal(got, want) {
			t.Fatalf("call %d (%T): names %q, want %q", i, p, got, want)
		}
	}
	if got := c.of(b3); !slices.Contains(got, "X_B3_TRACEID") {
		t.Fatalf("names %q lack X_B3_TRACEID", got)
	}
}
