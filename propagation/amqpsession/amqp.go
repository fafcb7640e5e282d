package amqpsession

import (
	"context"
	"errors"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/internal/messaging"
)

// ErrNilMessage: a nil *amqp091.Publishing or *amqp091.Delivery was given.
var ErrNilMessage = errors.New("nil AMQP message")

// exchangeName is how spans and policies name an exchange.
func exchangeName(exchange string) string {
	if exchange == "" {
		return DefaultExchange
	}
	return exchange
}

// destination returns the attributes naming where a message goes: the
// exchange (empty for the default one, as the RabbitMQ conventions say) and
// the routing key when there is one.
// The slice has room for extra more, which the caller appends.
func destination(exchange, routingKey string, extra int) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 3+extra)
	attrs = append(attrs, semconv.MessagingSystemRabbitMQ, semconv.MessagingDestinationName(exchange))
	if routingKey != "" {
		attrs = append(attrs, semconv.MessagingRabbitMQDestinationRoutingKey(routingKey))
	}
	return attrs
}

// Publisher writes trace context and the session into the header tables of
// outgoing messages, inside a producer span. Build one with [NewPublisher]
// and share it; it is safe for concurrent use.
type Publisher struct {
	cfg    config
	tracer trace.Tracer
}

// NewPublisher returns a Publisher configured by opts.
func NewPublisher(opts ...Option) *Publisher {
	cfg := newConfig(opts)
	return &Publisher{cfg: cfg, tracer: cfg.TP.Tracer(ScopeName)}
}

// Inject starts a producer span named "publish <exchange>" as a child of ctx,
// and writes the span's trace context and ctx's baggage into msg.Headers
// (allocated when nil) through the outbound policy ([WithOutbound]): the
// session only when the policy allows the exchange, signed for the message's
// exchange, routing key and MessageId (when it has one) when it signs. Set
// MessageId before calling Inject. Publish msg to the same exchange and routing key, then end the span:
//
//	ctx, span := pub.Inject(ctx, &msg, "chat", "in")
//	err := ch.PublishWithContext(ctx, "chat", "in", false, false, msg)
//	span.End()
//
// A nil msg starts no span: the returned span is a no-op, safe to end.
func (p *Publisher) Inject(ctx context.Context, msg *amqp.Publishing, exchange, routingKey string) (context.Context, trace.Span) {
	if msg == nil {
		return ctx, messaging.NoopSpan
	}
	attrs := append(destination(exchange, routingKey, 3),
		semconv.MessagingOperationTypeSend, semconv.MessagingOperationName("publish"))
	if msg.MessageId != "" {
		attrs = append(attrs, semconv.MessagingMessageID(msg.MessageId))
	}
	if msg.Headers == nil {
		msg.Headers = amqp.Table{}
	}
	name := exchangeName(exchange)
	dest := propagation.Dest{Transport: Transport, Name: name}
	if p.cfg.Out.Signer() != nil {
		// What a signature is bound to, with or without a MessageId; built
		// only when there is one.
		dest.MessageID = binding(name, routingKey, msg.MessageId)
	}
	ctx, span, _ := messaging.Produce(ctx, &p.cfg.Config, p.tracer, "publish "+name, dest, attrs, TableCarrier(msg.Headers))
	return ctx, span
}

// Consumer reads trace context and the session from deliveries through an
// inbound trust policy, and starts a consumer span for each. Build one with
// [NewConsumer] and share it; it is safe for concurrent use.
type Consumer struct {
	cfg    config
	tracer trace.Tracer
	policy *propagation.Inbound
}

// NewConsumer returns a Consumer that decides every delivery's session with
// policy, which sees propagation.Peer{Transport: "amqp", Name: exchange}
// ([DefaultExchange] for the default one): RabbitMQ grants publishers
// permission per exchange, so the exchange says who could have written the
// message. A nil policy trusts no publisher, which strips every session.
func NewConsumer(policy *propagation.Inbound, opts ...Option) *Consumer {
	if policy == nil {
		policy = propagation.NewInbound(nil)
	}
	cfg := newConfig(opts)
	return &Consumer{cfg: cfg, tracer: cfg.TP.Tracer(ScopeName), policy: policy}
}

// Policy returns the inbound policy, for its counts.
func (c *Consumer) Policy() *propagation.Inbound { return c.policy }

// Extract returns the context a handler of d runs in, and its consumer span.
// The session of ctx is Reset first, so nothing bound before (the previous
// delivery's session, the consuming goroutine's own) reaches this one; then
// the header table is extracted and the session kept only when the policy
// accepts it. The span, "process <exchange>", is a child of the publisher's
// span and links to it; without trace context it is a child of ctx with no
// link.
//
// A refused session comes back as an error wrapping one of the propagation
// package's Err values, with a usable context whose session is Unset and a
// started span that records it. The caller always ends the span.
func (c *Consumer) Extract(ctx context.Context, d *amqp.Delivery) (context.Context, trace.Span, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if d == nil {
		return messaging.NilMessage(ctx, ErrNilMessage)
	}
	name := exchangeName(d.Exchange)
	attrs := append(destination(d.Exchange, d.RoutingKey, 4),
		semconv.MessagingOperationTypeProcess, semconv.MessagingOperationName("process"))
	if d.DeliveryTag != 0 {
		attrs = append(attrs, semconv.MessagingRabbitMQMessageDeliveryTag(int(d.DeliveryTag)))
	}
	if d.MessageId != "" {
		attrs = append(attrs, semconv.MessagingMessageID(d.MessageId))
	}
	peer := propagation.Peer{Transport: Transport, Name: name, MessageID: binding(name, d.RoutingKey, d.MessageId)}
	return messaging.Consume(ctx, &c.cfg.Config, c.tracer, c.policy, "process "+name, attrs, TableCarrier(d.Headers),
		peer, "delivery from AMQP exchange")
}

// binding is what a signature on a message is bound to: the transport, its
// exchange (as [exchangeName] names it), its routing key and its MessageId
// ("" when it has none), in [messaging.Binding]'s form:
// "amqp\x00"+len(exchange)+":"+exchange+"\x00"+len(routingKey)+":"+routingKey+"\x00"+id,
// the lengths in decimal. It is never empty, so a signature made for a
// message does not verify on another exchange or routing key, nor where
// nothing binds a signature (an HTTP request, a child process's
// environment: ""), nor on a Kafka record or a NATS message (whose
// bindings start with "kafka\x00" and "nats\x00"); with a MessageId, not on
// another message either. Without one, a captured signed message can be
// published again to the same exchange and routing key, and is accepted
// there until the verifier's maximum age.
//
// An exchange name, a routing key and a MessageId are AMQP short strings,
// which may hold any byte, NUL included: the exchange and the routing key
// are length-prefixed, so that exchange "a\x00b" with routing key "c" does
// not bind what exchange "a" with routing key "b\x00c" binds, and the id,
// last, runs to the end.
func binding(exchange, routingKey, id string) string {
	return messaging.Binding(Transport, id, exchange, routingKey)
}

// Binding is what a signature on a message published to exchange ("" for
// the default exchange) with routingKey and MessageId messageID ("" for
// none) is bound to. To check such a signature by hand, give it as
// propagation.Peer.MessageID to an Inbound policy with a verifier
// (sessionctl verify --amqp-exchange does).
func Binding(exchange, routingKey, messageID string) string {
	return binding(exchangeName(exchange), routingKey, messageID)
}
