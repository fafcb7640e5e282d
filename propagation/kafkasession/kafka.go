package kafkasession

import (
	"context"
	"errors"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/internal/messaging"
)

// ErrNilRecord: a nil *kgo.Record was given.
var ErrNilRecord = errors.New("nil Kafka record")

// Publisher writes trace context and the session into the headers of
// outgoing records, inside a producer span. Build one with [NewPublisher] and
// share it; it is safe for concurrent use.
type Publisher struct {
	cfg    config
	tracer trace.Tracer
}

// NewPublisher returns a Publisher configured by opts.
func NewPublisher(opts ...Option) *Publisher {
	cfg := newConfig(opts)
	return &Publisher{cfg: cfg, tracer: cfg.TP.Tracer(ScopeName)}
}

// Inject starts a producer span named "send <topic>" as a child of ctx, and
// writes the span's trace context and ctx's baggage into r's headers through
// the outbound policy ([WithOutbound]): the session only when the policy
// allows the topic, signed for the record's topic and [MessageIDHeader] (when
// it has one) when it signs. A policy error is reported to otel.Handle and
// recorded on the span. Set the message id header and the topic before
// calling Inject, and produce the record to that topic. franz-go produces
// asynchronously, so the caller ends the span in the produce promise:
//
//	ctx, span := pub.Inject(ctx, rec)
//	client.Produce(ctx, rec, func(r *kgo.Record, err error) {
//		if err != nil {
//			span.RecordError(err)
//			span.SetStatus(codes.Error, err.Error())
//		}
//		span.End()
//	})
//
// A nil r starts no span: the returned span is a no-op, safe to end.
func (p *Publisher) Inject(ctx context.Context, r *kgo.Record) (context.Context, trace.Span) {
	if r == nil {
		return ctx, messaging.NoopSpan
	}
	attrs := []attribute.KeyValue{
		semconv.MessagingSystemKafka,
		semconv.MessagingDestinationName(r.Topic),
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName("send"),
	}
	if r.Value == nil {
		attrs = append(attrs, semconv.MessagingKafkaMessageTombstone(true))
	}
	c := NewRecordCarrier(r)
	dest := propagation.Dest{Transport: Transport, Name: r.Topic}
	if p.cfg.Out.Signer() != nil {
		// What a signature is bound to, with or without a message id;
		// built only when there is one.
		dest.MessageID = binding(r.Topic, c.Get(MessageIDHeader))
	}
	ctx, span, _ := messaging.Produce(ctx, &p.cfg.Config, p.tracer, "send "+r.Topic, dest, attrs, c)
	return ctx, span
}

// Consumer reads trace context and the session from consumed records through
// an inbound trust policy, and starts a consumer span for each. Build one with
// [NewConsumer] and share it; it is safe for concurrent use.
type Consumer struct {
	cfg    config
	tracer trace.Tracer
	policy *propagation.Inbound
}

// NewConsumer returns a Consumer that decides every record's session with
// policy, which sees propagation.Peer{Transport: "kafka", Name: topic}. A nil
// policy trusts no producer, which strips every session.
func NewConsumer(policy *propagation.Inbound, opts ...Option) *Consumer {
	if policy == nil {
		policy = propagation.NewInbound(nil)
	}
	cfg := newConfig(opts)
	return &Consumer{cfg: cfg, tracer: cfg.TP.Tracer(ScopeName), policy: policy}
}

// Policy returns the inbound policy, for its counts.
func (c *Consumer) Policy() *propagation.Inbound { return c.policy }

// Extract returns the context a handler of r runs in, and its consumer span.
// The session of ctx is Reset first, so nothing bound before (the previous
// record's session, the poll loop's own) reaches this record; then the
// headers are extracted and the session kept only when the policy accepts it.
// The span, "process <topic>", is a child of the producer's span and links to
// it; without trace context in the record it is a child of ctx with no link.
//
// A refused session comes back as an error wrapping one of the propagation
// package's Err values, with a usable context whose session is Unset and a
// started span that records it. The caller always ends the span.
func (c *Consumer) Extract(ctx context.Context, r *kgo.Record) (context.Context, trace.Span, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if r == nil {
		return messaging.NilMessage(ctx, ErrNilRecord)
	}
	attrs := []attribute.KeyValue{
		semconv.MessagingSystemKafka,
		semconv.MessagingDestinationName(r.Topic),
		semconv.MessagingDestinationPartitionID(strconv.Itoa(int(r.Partition))),
		semconv.MessagingKafkaOffset(int(r.Offset)),
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName("process"),
	}
	if c.cfg.group != "" {
		attrs = append(attrs, semconv.MessagingConsumerGroupName(c.cfg.group))
	}
	carrier := NewRecordCarrier(r)
	peer := propagation.Peer{Transport: Transport, Name: r.Topic, MessageID: binding(r.Topic, carrier.Get(MessageIDHeader))}
	return messaging.Consume(ctx, &c.cfg.Config, c.tracer, c.policy, "process "+r.Topic, attrs, carrier,
		peer, "record from Kafka topic")
}

// MessageIDHeader is the record header that carries a producer-chosen
// message id. Kafka records have no id of their own (offsets are assigned
// by the broker, keys are shared by a conversation's records), so a signed
// session is bound to the topic always, and to this header when the record
// has it. Without it, a captured signed record can be produced again onto
// the same topic, and is accepted there until the verifier's maximum age.
const MessageIDHeader = "message-id"

// binding is what a signature on a record is bound to: the transport, its
// topic and its [MessageIDHeader] ("" when the record has none), in
// [messaging.Binding]'s form, as on NATS and AMQP:
// "kafka\x00"+len(topic)+":"+topic+"\x00"+id. It is never empty, so a
// signature made for a record does not verify on another topic, nor where
// nothing binds a signature (an HTTP request, a child process's
// environment: ""), nor on an AMQP message or a NATS message (whose
// bindings start with "amqp\x00" and "nats\x00"); with an id, not on
// another record either.
func binding(topic, id string) string {
	return messaging.Binding(Transport, id, topic)
}

// Binding is what a signature on a record of topic, with the
// [MessageIDHeader] id ("" for none), is bound to. To check such a
// signature by hand, give it as propagation.Peer.MessageID to an Inbound
// policy with a verifier (sessionctl verify --kafka-topic does).
func Binding(topic, id string) string { return binding(topic, id) }
