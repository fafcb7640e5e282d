package kafkasession

import (
	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/internal/messaging"
)

// ScopeName is the instrumentation scope of the spans this package starts.
const ScopeName = "github.com/sessionwire/sessionwire/propagation/kafkasession"

// Transport is the [propagation.Peer] transport name of a Kafka record.
const Transport = propagation.TransportKafka

// Option configures a [Publisher] or a [Consumer].
type Option func(*config)

type config struct {
	messaging.Config
	group string
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

// WithPropagator sets the propagator that writes and reads record headers.
// The default is otel.GetTextMapPropagator(), read for every record; it is a
// no-op until the program calls otel.SetTextMapPropagator, and until then no
// session crosses Kafka. The propagator must include propagation.Baggage{}.
func WithPropagator(p otelprop.TextMapPropagator) Option {
	return func(c *config) { c.Prop = p }
}

// WithOutbound sets the outbound policy a [Publisher] sends every record
// through: which topics may receive the session, and the signer. The
// default, nil, is propagation's default for every transport, under which
// no session reaches a topic: name the topics inside your trust domain
// (propagation.AllowNames(propagation.TransportKafka, "chat-in")). A
// refused topic still gets trace context and the baggage members that are
// not the session's, and any session member already in the record's
// headers is removed, whatever the spelling of the header.
//
// With a signer, every record's signature is bound to its topic: produced
// again onto another topic, or copied to another transport, it no longer
// verifies. A record that carries a [MessageIDHeader] is bound to that id
// too, so its signature cannot be moved onto another record either. A
// record without one can be produced again onto the same topic and is
// accepted there until the verifier's maximum age: set the header where a
// replay matters. A [Consumer] ignores this option.
func WithOutbound(o *propagation.Outbound) Option {
	return func(c *config) { c.Out = o }
}

// WithConsumerGroup names the consumer group on a [Consumer]'s spans
// (messaging.consumer.group.name); a record does not carry it. A [Publisher]
// ignores it.
func WithConsumerGroup(group string) Option {
	return func(c *config) { c.group = group }
}
