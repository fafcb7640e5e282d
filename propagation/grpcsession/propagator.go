package grpcsession

import (
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/propagation"
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
//
// It is propagation.ExceptBaggage, which otelhttp beside httpsession takes
// too.
func ExceptBaggage(p otelprop.TextMapPropagator) otelprop.TextMapPropagator {
	return propagation.ExceptBaggage(p)
}
