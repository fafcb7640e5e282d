package amqpsession

import (
	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/internal/messaging"
)

// ScopeName is the instrumentation scope of the spans this package starts.
const ScopeName = "github.com/sessionwire/sessionwire/propagation/amqpsession"

// Transport is the [propagation.Peer] transport name of an AMQP message.
const Transport = propagation.TransportAMQP

// DefaultExchange names the default (nameless) exchange in span names and in
// the [propagation.Peer] a policy sees, as RabbitMQ's own tools do.
const DefaultExchange = "amq.default"

// Option configures a [Publisher] or a [Consumer].
type Option func(*config)

type config struct {
	messaging.Config
}

func newConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	c.Init()
	return c
}

// WithTracerProvider sets where spans are started. The default is
// otel.GetTracerProvider(), read when the Publisher or Consumer is built.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.TP = tp }
}

// WithPropagator sets the propagator that writes and reads header tables. The
// default is otel.GetTextMapPropagator(), read for every message; it is a
// no-op until the program calls otel.SetTextMapPropagator, and then no
// session crosses the broker. The propagator must include
// propagation.Baggage{}.
func WithPropagator(p otelprop.TextMapPropagator) Option {
	return func(c *config) { c.Prop = p }
}

// WithOutbound sets the outbound policy a [Publisher] sends every message
// through: which exchanges ([DefaultExchange] for the default one) may
// receive the session, and the signer. The default, nil, is propagation's
// default for every transport, under which no session reaches an exchange:
// name the exchanges inside your trust domain
// (propagation.AllowNames(propagation.TransportAMQP, "chat")). A refused
// exchange still gets trace context and the baggage members that are not the
// session's, and any session member already in the message's headers is
// removed, whatever the spelling of the header.
//
// With a signer, every message's signature is bound to its exchange and
// routing key: published again elsewhere, or copied to another transport,
// it no longer verifies. A message that has a MessageId is bound to that id
// too, so its signature cannot be moved onto another message either. A
// message without one can be published again to the same exchange and
// routing key and is accepted there until the verifier's maximum age: set
// MessageId where a replay matters. A [Consumer] ignores this option.
func WithOutbound(o *propagation.Outbound) Option {
	return func(c *config) { c.Out = o }
}
