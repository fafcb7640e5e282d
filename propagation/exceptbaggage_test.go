package propagation_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
)

// ExceptBaggage writes and reads the trace context as the propagator it
// wraps does, and no baggage in either direction, whatever the header's
// spelling; with nil it wraps the global propagator.
func TestExceptBaggage(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(otelsession.Bind(context.Background(), otelsession.Session{
		Platform: "slack", ChatID: "C024BE91L", ThreadID: "1700000000.000100"}), sc)
	// Not parallel: it sets the global propagator that ExceptBaggage(nil) reads.
	old := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(w3cProp)
	t.Cleanup(func() { otel.SetTextMapPropagator(old) })
	for _, p := range []otelprop.TextMapPropagator{propagation.ExceptBaggage(nil), propagation.ExceptBaggage(w3cProp)} {
		h := http.Header{}
		p.Inject(ctx, otelprop.HeaderCarrier(h))
		if len(h.Values("traceparent")) != 1 {
			t.Fatalf("no trace context written: %v", h)
		}
		if len(h.Values("baggage")) != 0 {
			t.Fatalf("baggage written: %v", h.Values("baggage"))
		}
		// The same context through the full propagator writes both: the
		// wrapped one is the one given.
		full := http.Header{}
		w3cProp.Inject(ctx, otelprop.HeaderCarrier(full))
		if len(full.Values("baggage")) != 1 {
			t.Fatalf("the full propagator wrote no baggage: %v", full)
		}

		// Reading: every spelling of the header is hidden, the trace context
		// is read, and a baggage the context already had (the one a session
		// edge in front accepted) stays.
		in := http.Header{"Traceparent": full.Values("traceparent"), "Baggage": full.Values("baggage"), "baggage": full.Values("baggage")}
		had, _ := baggage.Parse("k=v")
		got := p.Extract(baggage.ContextWithBaggage(context.Background(), had), otelprop.HeaderCarrier(in))
		if rsc := trace.SpanContextFromContext(got); !rsc.IsRemote() || rsc.TraceID() != sc.TraceID() || rsc.SpanID() != sc.SpanID() {
			t.Fatalf("trace context not extracted: %+v", rsc)
		}
		if b := baggage.FromContext(got); b.Len() != 1 || b.Member("k").Value() != "v" {
			t.Fatalf("baggage after Extract: %q, want the context's own k=v", b.String())
		}
		// A carrier without Values (the W3C propagators then use Get).
		got = p.Extract(context.Background(), otelprop.MapCarrier{"traceparent": full.Get("traceparent"), "baggage": full.Get("baggage")})
		if b := baggage.FromContext(got); b.Len() != 0 || !trace.SpanContextFromContext(got).IsValid() {
			t.Fatalf("from a MapCarrier: baggage %q, span context %+v", b.String(), trace.SpanContextFromContext(got))
		}
		if f := p.Fields(); slices.Contains(f, "baggage") || !slices.Contains(f, "traceparent") {
			t.Fatalf("fields %v", f)
		}
		// A propagator that reads the carrier through Get, Values and Keys
		// (a custom one, or another baggage format) sees no baggage entry
		// either.
		spy := &carrierSpy{}
		propagation.ExceptBaggage(spy).Extract(context.Background(), otelprop.HeaderCarrier(in))
		if spy.get != "" || len(spy.values) != 0 || slices.ContainsFunc(spy.keys, func(k string) bool { return strings.EqualFold(k, "baggage") }) {
			t.Fatalf("the wrapped propagator read baggage: Get %q, Values %q, Keys %q", spy.get, spy.values, spy.keys)
		}
		if spy.trace == "" {
			t.Fatal("the wrapped propagator could not read traceparent")
		}
	}
}

// carrierSpy is a propagator that records what it could read of a carrier.
type carrierSpy struct {
	get, trace   string
	values, keys []string
}

func (s *carrierSpy) Extract(ctx context.Context, c otelprop.TextMapCarrier) context.Context {
	s.get, s.trace, s.keys = c.Get("baggage")+c.Get("Baggage"), c.Get("traceparent"), c.Keys()
	if vg, ok := c.(otelprop.ValuesGetter); ok {
		s.values = append(vg.Values("baggage"), vg.Values("Baggage")...)
	}
	return ctx
}
func (s *carrierSpy) Inject(context.Context, otelprop.TextMapCarrier) {}
func (s *carrierSpy) Fields() []string                                { return []string{"traceparent", "baggage"} }
