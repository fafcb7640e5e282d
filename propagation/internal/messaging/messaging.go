// Package messaging is what the queue transports (natssession, kafkasession,
// amqpsession) share: their configuration, the producer step (span, then the
// outbound policy's Inject) and the consumer step (inbound policy, consumer
// span linked to the producer's). Each transport keeps only its carrier, its
// span attributes and what it binds a signature to.
package messaging

import (
	"context"
	"fmt"
	"iter"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/internal/sessionevent"
)

// Config is a transport's configuration. Call Init after the transport's
// options have set what they set.
type Config struct {
	TP   trace.TracerProvider
	Prop otelprop.TextMapPropagator
	// Out is the outbound policy; nil is propagation's default, under which
	// no session reaches a queue.
	Out *propagation.Outbound
}

// Init fills in the defaults: the global tracer provider.
func (c *Config) Init() {
	if c.TP == nil {
		c.TP = otel.GetTracerProvider()
	}
}

// Propagator is the configured propagator, or the global one, read at each
// call.
func (c *Config) Propagator() otelprop.TextMapPropagator {
	if c.Prop != nil {
		return c.Prop
	}
	return otel.GetTextMapPropagator()
}

// DistinctUnderFolding reports whether no two of keys are equal under case
// folding (a carrier's Values joins the spellings of a key); it gives up,
// false, past 16 keys, more than a message's headers normally hold.
func DistinctUnderFolding(keys iter.Seq[string]) bool {
	var seen [16]string
	n := 0
	for k := range keys {
		if n == len(seen) {
			return false
		}
		for _, s := range seen[:n] {
			if strings.EqualFold(s, k) {
				return false
			}
		}
		seen[n] = k
		n++
	}
	return true
}

// Binding returns what a signature on a message is bound to
// ([propagation.Dest.MessageID], [propagation.Peer.MessageID]): the
// transport's name and a NUL, then each part of the destination (a NATS
// subject; an AMQP exchange and routing key) as its length in decimal, a
// colon, its bytes and a NUL, and last the message's id ("" when it has
// none):
//
//	Binding("amqp", "m-1", "chat", "in") == "amqp\x004:chat\x002:in\x00m-1"
//
// The destination's parts are length-prefixed because they may hold any
// byte, NUL included (a NATS server delivers a subject with a NUL; AMQP
// exchange names, routing keys and MessageIds are byte strings): a plain
// separator would let exchange "a\x00b" with routing key "c" bind what
// exchange "a" with routing key "b\x00c" binds. The id, last, runs to the
// end. So the string reads back one way only: two messages bind the same
// string only when their transport, destination and id are all the same.
// It is never "" (what HTTP and a child process's environment bind), and
// starts with its transport's name and a NUL, so no two transports bind the
// same string. The transport's name must hold no NUL. NATS, Kafka and AMQP
// all bind this way.
func Binding(transport, id string, dest ...string) string {
	n := len(transport) + 1 + len(id)
	for _, d := range dest {
		n += digits(len(d)) + 1 + len(d) + 1
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(transport)
	b.WriteByte(0)
	var num [20]byte
	for _, d := range dest {
		b.Write(strconv.AppendInt(num[:0], int64(len(d)), 10))
		b.WriteByte(':')
		b.WriteString(d)
		b.WriteByte(0)
	}
	b.WriteString(id)
	return b.String()
}

// digits is the number of decimal digits of n, which is not negative.
func digits(n int) int {
	d := 1
	for ; n >= 10; n /= 10 {
		d++
	}
	return d
}

// NoopSpan is returned where there is no message to start a span for.
var NoopSpan = trace.SpanFromContext(context.Background())

// Produce starts the producer span and injects its trace context and ctx's
// baggage into carrier through the outbound policy, the session only when
// the policy allows dest (signed when it signs). An error from the policy
// (a signature that did not fit, a value no edge accepts) is reported to
// otel.Handle and recorded on the span; the carrier is written either way.
// It returns the context of the producer span.
func Produce(ctx context.Context, c *Config, tracer trace.Tracer, spanName string, dest propagation.Dest,
	attrs []attribute.KeyValue, carrier otelprop.TextMapCarrier) (context.Context, trace.Span, error) {
	ctx, span := tracer.Start(ctx, spanName, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	err := c.Out.Inject(ctx, c.Propagator(), carrier, dest)
	if err != nil {
		otel.Handle(err)
		span.RecordError(err)
	}
	return ctx, span, err
}

// Consume is the consumer step: the session of ctx is Reset and the carrier
// extracted through policy (which sees peer), then the consumer span starts
// as a child of the producer's span, linked to it, or as a child of ctx
// without a link when the message carried no trace context. A refused
// session is returned as an error prefixed by what and the peer's name
// ("record from Kafka topic \"chat.in\""), recorded on the span, with a
// usable context whose session is Unset; the prefix is formatted only then.
// A refused session, or one stripped because the peer is not trusted,
// is also recorded as a session.refused span event with its reason
// (package sessionevent). The caller ends the span.
func Consume(ctx context.Context, c *Config, tracer trace.Tracer, policy *propagation.Inbound, spanName string,
	attrs []attribute.KeyValue, carrier otelprop.TextMapCarrier, peer propagation.Peer, what string) (context.Context, trace.Span, error) {
	before := trace.SpanContextFromContext(ctx)
	ctx, err := policy.Extract(ctx, c.Propagator(), carrier, peer)
	if err != nil {
		err = fmt.Errorf("%s %q: %w", what, peer.Name, err)
	}
	opts := make([]trace.SpanStartOption, 2, 3) // room for the link
	opts[0], opts[1] = trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...)
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && !sc.Equal(before) {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	ctx, span := tracer.Start(ctx, spanName, opts...)
	if err != nil {
		span.RecordError(err)
		sessionevent.Refused(span, err)
	} else if span.IsRecording() {
		// Only a context without a session can have had one stripped: the
		// carrier is read again on that path alone.
		if b := baggage.FromContext(ctx); !propagation.HasSession(b) {
			sessionevent.StrippedIfOffered(span, b, []string{carrier.Get("baggage")}, peer)
		}
	}
	return ctx, span, err
}

// NilMessage is the consumer step for a nil message: a Reset context, no
// span, and err.
func NilMessage(ctx context.Context, err error) (context.Context, trace.Span, error) {
	return otelsession.Reset(ctx), NoopSpan, fmt.Errorf("extract session: %w", err)
}
