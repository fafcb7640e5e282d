package grpcsession

import (
	"context"
	"slices"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
)

// ExceptBaggage returns a propagator that does what p does except carry
// baggage, for otelgrpc.WithPropagators beside this package's interceptors:
//
//	otelgrpc.NewServerHandler(otelgrpc.WithPropagators(grpcsession.ExceptBaggage(nil)))
//	otelgrpc.NewClientHandler(otelgrpc.WithPropagators(grpcsession.ExceptBaggage(nil)))
//
// The interceptors already extract the baggage (to judge the session) and
// inject it (as the outbound policy allows); otelgrpc with the program's
// full propagator would parse it a second time on the server and write it a
// second time on the client, which costs more than the policy itself (see
// BenchmarkUnary and the README). With ExceptBaggage, otelgrpc still starts
// and parents spans from the trace context, and the baggage crosses once,
// as the policy decides.
//
// p nil is otel.GetTextMapPropagator(), read per call, as otelgrpc and the
// interceptors read it, so the program's other propagators (B3, Jaeger's
// trace header) keep working. Inject hands p a context without baggage, so
// no propagator of p writes baggage in any format; Extract hides the W3C
// "baggage" entry, in every spelling of its key, from p. Fields lists p's
// fields without "baggage".
//
// Use it only beside the interceptors: on its own, it sends and receives no
// baggage, and so no session. An [Edge] does better: its propagator, given
// to otelgrpc instead of ExceptBaggage, runs the policies inside otelgrpc's
// propagation step, so the metadata is copied and the trace context written
// once, and otelgrpc's server span starts from the accepted session.
func ExceptBaggage(p otelprop.TextMapPropagator) otelprop.TextMapPropagator {
	return exceptBaggage{p: p}
}

type exceptBaggage struct{ p otelprop.TextMapPropagator }

func (e exceptBaggage) prop() otelprop.TextMapPropagator {
	if e.p != nil {
		return e.p
	}
	return otel.GetTextMapPropagator()
}

func (e exceptBaggage) Inject(ctx context.Context, carrier otelprop.TextMapCarrier) {
	if baggage.FromContext(ctx).Len() > 0 {
		ctx = baggage.ContextWithoutBaggage(ctx)
	}
	e.prop().Inject(ctx, carrier)
}

func (e exceptBaggage) Extract(ctx context.Context, carrier otelprop.TextMapCarrier) context.Context {
	return e.prop().Extract(ctx, hideBaggage{carrier})
}

func (e exceptBaggage) Fields() []string {
	return slices.DeleteFunc(slices.Clone(e.prop().Fields()), func(f string) bool {
		return strings.EqualFold(f, baggageKey)
	})
}

// hideBaggage is a carrier without its "baggage" entry, for extraction. It
// keeps Values (the W3C propagators prefer it to Get when a carrier has it)
// only when the carrier has it.
type hideBaggage struct{ c otelprop.TextMapCarrier }

func (h hideBaggage) Get(key string) string {
	if strings.EqualFold(key, baggageKey) {
		return ""
	}
	return h.c.Get(key)
}

func (h hideBaggage) Values(key string) []string {
	if strings.EqualFold(key, baggageKey) {
		return nil
	}
	if vg, ok := h.c.(otelprop.ValuesGetter); ok {
		return vg.Values(key)
	}
	if v := h.c.Get(key); v != "" {
		return []string{v}
	}
	return nil
}

func (h hideBaggage) Set(key, value string) { h.c.Set(key, value) }

func (h hideBaggage) Keys() []string {
	return slices.DeleteFunc(slices.Clone(h.c.Keys()), func(k string) bool { return strings.EqualFold(k, baggageKey) })
}
