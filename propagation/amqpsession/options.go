package amqpsession

import (
	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/propagation/internal/messaging"
)

// ScopeName is the instrumentation scope of the spans this package starts.
const ScopeName = "github.com/sessionwire/sessionwire/propagation/amqpsession"

// Transport is the [propagation.Peer] transport name of an AMQP message.
const Transport = "amqp"

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

// WithSessionEgress decides, per exchange ([DefaultExchange] for the default
// one), whether a [Publisher] may put the session into a message. Refused
// exchanges still get trace context and the baggage members that are not
// session fields, and lose any session already in the message's headers.
// The default allows every exchange (a broker is normally inside the
// publisher's trust domain); a nil allow refuses all. A [Consumer] ignores
// it.
func WithSessionEgress(allow func(exchange string) bool) Option {
	return func(c *config) {
		if allow == nil {
			allow = messaging.RefuseAll
		}
		c.Egress = allow
	}
}
