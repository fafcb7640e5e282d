package kafkasession

import (
	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/propagation/internal/messaging"
)

// ScopeName is the instrumentation scope of the spans this package starts.
const ScopeName = "github.com/sessionwire/sessionwire/propagation/kafkasession"

// Transport is the [propagation.Peer] transport name of a Kafka record.
const Transport = "kafka"

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
// no-op until the program calls otel.SetTextMapPropagator, and then no
// session crosses Kafka. The propagator must include propagation.Baggage{}.
func WithPropagator(p otelprop.TextMapPropagator) Option {
	return func(c *config) { c.Prop = p }
}

// WithSessionEgress decides, per topic, whether a [Publisher] may put the
// session into a record. Refused topics still get trace context and the
// baggage members that are not session fields, and lose any session already
// in the record's headers. The default allows every topic (a cluster is
// normally inside the producer's trust domain); a nil allow refuses all.
// A [Consumer] ignores it.
func WithSessionEgress(allow func(topic string) bool) Option {
	return func(c *config) {
		if allow == nil {
			allow = messaging.RefuseAll
		}
		c.Egress = allow
	}
}

// WithConsumerGroup names the consumer group on a [Consumer]'s spans
// (messaging.consumer.group.name); a record does not carry it. A [Publisher]
// ignores it.
func WithConsumerGroup(group string) Option {
	return func(c *config) { c.group = group }
}
