package propagation

import (
	"context"
	"slices"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/propagation/internal/carrierwrap"
)

// ExceptBaggage returns a propagator that does what p does except carry
// baggage. It is for the instrumentation that runs beside this module's
// session edges (otelhttp beside httpsession, otelgrpc beside grpcsession):
//
//	otelhttp.NewHandler(httpsession.Handler(app, opts...), "op", otelhttp.WithPropagators(propagation.ExceptBaggage(nil)))
//	otelgrpc.NewServerHandler(otelgrpc.WithPropagators(propagation.ExceptBaggage(nil)))
//
// The session edges already extract the baggage (to judge the session) and
// inject it (as the outbound policy allows). Instrumentation given the
// program's full propagator would parse it a second time on the server, and
// start its server span from the session the client sent before the policy
// judged it; on the client it would write the baggage a second time. With
// ExceptBaggage, the instrumentation still starts and parents spans from the
// trace context, and the baggage crosses once, as the policy decides.
//
// p nil is otel.GetTextMapPropagator(), read per call, as the
// instrumentation and the session edges read it, so the program's other
// propagators (B3, Jaeger's trace header) keep working. Inject hands p a
// context without baggage, so no propagator of p writes baggage in any
// format; Extract hides the W3C "baggage" entry, in every spelling of its
// key, from p. Fields lists p's fields without "baggage".
//
// Use it only beside a session edge: on its own, it sends and receives no
// baggage, and so no session.
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
	return e.prop().Extract(ctx, carrierwrap.HideBaggage{C: carrier})
}

func (e exceptBaggage) Fields() []string {
	return slices.DeleteFunc(slices.Clone(e.prop().Fields()), func(f string) bool {
		return strings.EqualFold(f, baggageHeader)
	})
}
