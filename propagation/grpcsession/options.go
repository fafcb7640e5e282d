package grpcsession

import (
	"context"
	"sync/atomic"

	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/propagation"
)

// Option configures an [Edge] or the interceptors of this package. Server options are
// ignored by the client interceptors and the other way round, so one list
// can configure both ends of a service that also calls others.
type Option struct{ apply func(*config) }

type config struct {
	prop            otelprop.TextMapPropagator
	except          otelprop.TextMapPropagator // prop without baggage
	inbound         *propagation.Inbound
	outbound        *propagation.Outbound
	unauthenticated bool
	onError         func(ctx context.Context, fullMethod string, err error)
	onAccept        func(ctx context.Context, fullMethod string)
	lastTarget      atomic.Pointer[targetNames] // the client's last target, worked out
	edgeState
}

func newConfig(opts []Option) *config {
	c := &config{}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(c)
		}
	}
	if c.inbound == nil {
		c.inbound = propagation.NewInbound(nil)
	}
	c.except = propagation.ExceptBaggage(c.prop) // built once: boxing it per call would allocate
	return c
}

func (c *config) propagator() otelprop.TextMapPropagator {
	if c.prop != nil {
		return c.prop
	}
	return nil // Inbound.Extract and Outbound.Inject read the global one per call
}

// WithPropagator sets the propagator that extracts and injects trace context
// and baggage. The default, nil, is otel.GetTextMapPropagator() at call
// time, as otelgrpc uses.
func WithPropagator(p otelprop.TextMapPropagator) Option {
	return Option{func(c *config) { c.prop = p }}
}

// WithInbound sets the server's trust policy, applied to every call. The
// default, nil, is a policy of its own that trusts no peer
// (propagation.NewInbound(nil)): pass one to choose the trusted peers, to
// verify signatures (propagation.WithVerifier) and to read its Counts.
func WithInbound(p *propagation.Inbound) Option {
	return Option{func(c *config) { c.inbound = p }}
}

// WithOutbound sets the client's outbound policy, applied to every call. The
// default, nil, is propagation's: no session leaves the process. The policy
// sees propagation.Dest{Transport: "grpc", Name: the target's host, URL:
// grpc://<target authority>/<package.Service>/<Method>}, the authority with
// its port as dialled, so for a client of "notify.internal:443" both
//
//	propagation.AllowURLs(propagation.Egress{Prefixes: []string{"grpc://notify.internal:443/notify.v1.Notify/"}})
//	propagation.AllowNames(propagation.TransportGRPC, "notify.internal", "*.svc.internal")
//
// express "this service" or "these hosts" (a prefix without the port
// matches no call to that target: the session is withheld, and counted so).
func WithOutbound(o *propagation.Outbound) Option {
	return Option{func(c *config) { c.outbound = o }}
}

// WithUnauthenticated makes the server interceptors fail every call that has
// no accepted session (none was sent, the peer is not trusted and did not
// sign it, or it was refused) with codes.Unauthenticated, before the handler
// runs. It is for services that must not run without a session; without it a
// call always runs, with whatever session the policy accepted (possibly
// none).
func WithUnauthenticated() Option {
	return Option{func(c *config) { c.unauthenticated = true }}
}

// WithOnError sets a function called, before the handler runs, for each
// call whose session was refused as malformed, for a failed signature, or
// for a binary baggage-bin entry. err wraps one of propagation's Err values
// and names the field, never the value. On the client it is called when the
// outbound policy could not send the session as asked (an invalid value: the
// call goes without it; a signature that does not fit: it goes unsigned).
func WithOnError(fn func(ctx context.Context, fullMethod string, err error)) Option {
	return Option{func(c *config) { c.onError = fn }}
}

// WithOnAccept sets a function called, before the handler runs, with the
// handler's context of every call (unary, or a stream when it opens) whose
// session the policy accepted.
//
// Its use is the server span when otelgrpc runs without an [Edge]'s
// propagator (with it, the span starts from the accepted session and
// needs none of this). otelgrpc's stats handler starts that span
// before any interceptor runs, from the metadata as it arrived: given
// [ExceptBaggage], the span starts without a session; given the full
// propagator, a span processor that copies the session onto spans
// (sessiontrace) copies the one the client sent, accepted or not. The
// accepted session is known only here:
//
//	proc := sessiontrace.NewSpanProcessor(redaction) // also registered with the tracer provider
//	grpcsession.WithOnAccept(func(ctx context.Context, _ string) { proc.Annotate(ctx, trace.SpanFromContext(ctx)) })
func WithOnAccept(fn func(ctx context.Context, fullMethod string)) Option {
	return Option{func(c *config) { c.onAccept = fn }}
}
