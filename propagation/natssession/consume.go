package natssession

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/internal/messaging"
)

// Consumer reads trace context and the session from incoming NATS messages,
// through an inbound trust policy, and starts a consumer span for each. Build
// one with [NewConsumer] and share it; it is safe for concurrent use.
type Consumer struct {
	cfg    config
	tracer trace.Tracer
	policy *propagation.Inbound
}

// NewConsumer returns a Consumer that decides every message's session with
// policy. A nil policy trusts no publisher (propagation.NewInbound(nil)), so
// sessions are stripped until the program says which subjects it trusts, for
// example:
//
//	natssession.NewConsumer(propagation.NewInbound(propagation.TrustAll))
//
// when only the gateway can publish to the account the worker consumes from.
// The policy sees each message as propagation.Peer{Transport: "nats", Name:
// subject, MessageID: what a signature on it is bound to (its subject and
// its Nats-Msg-Id header, if any)}; with a verifier
// (propagation.WithVerifier) a signed session is accepted from any subject
// when its signature was made for that subject and message id (see
// [WithOutbound]).
func NewConsumer(policy *propagation.Inbound, opts ...Option) *Consumer {
	if policy == nil {
		policy = propagation.NewInbound(nil)
	}
	cfg := newConfig(opts)
	return &Consumer{cfg: cfg, tracer: cfg.TP.Tracer(ScopeName), policy: policy}
}

// Policy returns the inbound policy, for its counts.
func (c *Consumer) Policy() *propagation.Inbound { return c.policy }

// Extract returns the context a handler of msg runs in, and its consumer span.
//
// The session of ctx is Reset first: whatever the caller's context held
// (the previous message's session, a worker's own binding) never reaches this
// message. Then the headers are extracted and the session kept only when the
// policy accepts it. The span, named "process <subject>", is a child of the
// extracted trace context (the publisher's producer span) and links to it, as
// the messaging semantic conventions ask; without trace context in the
// message it is a child of ctx and has no link.
//
// A refused session is not a failed message: the error, which wraps one of
// the propagation package's Err values, comes with a usable context whose
// session is Unset and a started span that records it. The caller always ends
// the span. A nil msg returns ErrNilMessage, the Reset ctx and a no-op span.
func (c *Consumer) Extract(ctx context.Context, msg *nats.Msg) (context.Context, trace.Span, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if msg == nil {
		return messaging.NilMessage(ctx, ErrNilMessage)
	}
	return c.extract(ctx, msg.Header, msg.Subject)
}

// ExtractJetStream is [Consumer.Extract] for a message delivered by a
// JetStream consumer. The span also names the JetStream consumer
// (messaging.client.id, as the NATS semantic conventions say) and the message
// id (messaging.message.id) when the publisher set one.
func (c *Consumer) ExtractJetStream(ctx context.Context, msg jetstream.Msg) (context.Context, trace.Span, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if msg == nil {
		return messaging.NilMessage(ctx, ErrNilMessage)
	}
	ctx, span, err := c.extract(ctx, msg.Headers(), msg.Subject())
	if span.IsRecording() {
		if md, mdErr := msg.Metadata(); mdErr == nil && md.Consumer != "" {
			span.SetAttributes(semconv.MessagingClientID(md.Consumer))
		}
	}
	return ctx, span, err
}

// extract is the consumer step for a message published to subject: for a
// JetStream message, the subject it was published to and stored under
// (jetstream.Msg.Subject), not the consumer's delivery subject.
func (c *Consumer) extract(ctx context.Context, h nats.Header, subject string) (context.Context, trace.Span, error) {
	// The signature binds the subject and the exact header JetStream
	// deduplicates on; a spelling in another case is not the message's id.
	id := msgID(h)
	attrs := []attribute.KeyValue{
		systemNATS,
		semconv.MessagingDestinationName(subject),
		semconv.MessagingOperationTypeProcess,
		opNameProcess,
	}
	if shown := HeaderCarrier(h).Get(jetstream.MsgIDHeader); shown != "" {
		attrs = append(attrs, semconv.MessagingMessageID(shown))
	}
	return messaging.Consume(ctx, &c.cfg.Config, c.tracer, c.policy, "process "+subject, attrs, HeaderCarrier(h),
		propagation.Peer{Transport: Transport, Name: subject, MessageID: binding(subject, id)}, "message on NATS subject")
}

// binding is what a signature on a message is bound to: the transport, the
// subject it was published to and its Nats-Msg-Id header ("" when it has
// none), in [messaging.Binding]'s form:
// "nats\x00"+len(subject)+":"+subject+"\x00"+id, the length in decimal.
// It is never empty, so a signature made for a message does not verify on
// another subject, nor where nothing binds a signature (an HTTP request, a
// child process's environment: ""), nor on a Kafka record or an AMQP
// message (whose bindings start with "kafka\x00" and "amqp\x00"), even
// where a Nats-Msg-Id holds another transport's binding; with an id, not
// on another message either. Without one, a captured signed message can be
// published again to the same subject, and is accepted there until the
// verifier's maximum age.
//
// The subject is length-prefixed: nats.go and the server (unless pedantic)
// let a subject hold a NUL, and a header value may hold one too, so with a
// plain separator subject "a\x00b" with id "c" would bind what subject "a"
// with id "b\x00c" binds. The id, last, runs to the end.
func binding(subject, id string) string {
	return messaging.Binding(Transport, id, subject)
}

// Binding is what a signature on a message published to subject, with the
// Nats-Msg-Id msgID ("" for none), is bound to. To check such a signature
// by hand, give it as propagation.Peer.MessageID to an Inbound policy with
// a verifier (sessionctl verify --nats-subject does).
func Binding(subject, msgID string) string { return binding(subject, msgID) }

// Handler returns a nats.MsgHandler (for nc.Subscribe, nc.QueueSubscribe)
// that runs h for each message in a fresh context derived from base, as
// [Consumer.Extract] builds it, inside the message's consumer span. An error
// from h marks the span failed; it is not otherwise handled (reply or log it
// in h). A refused session goes to [WithOnError], then h runs with the session
// Unset. A nil base is context.Background().
func (c *Consumer) Handler(base context.Context, h func(ctx context.Context, msg *nats.Msg) error) nats.MsgHandler {
	return func(msg *nats.Msg) {
		ctx, span, err := c.Extract(base, msg)
		defer span.End()
		c.run(ctx, span, err, func(ctx context.Context) error { return h(ctx, msg) })
	}
}

// JetStreamHandler returns a jetstream.MessageHandler (for
// jetstream.Consumer.Consume) that runs h for each message in a fresh context
// derived from base, as [Consumer.ExtractJetStream] builds it, inside the
// message's consumer span. Acknowledging is h's job (msg.Ack, msg.Nak, …): an
// error from h marks the span failed and nothing else. A refused session goes
// to [WithOnError], then h runs with the session Unset. A nil base is
// context.Background().
func (c *Consumer) JetStreamHandler(base context.Context, h func(ctx context.Context, msg jetstream.Msg) error) jetstream.MessageHandler {
	return func(msg jetstream.Msg) {
		ctx, span, err := c.ExtractJetStream(base, msg)
		defer span.End()
		c.run(ctx, span, err, func(ctx context.Context) error { return h(ctx, msg) })
	}
}

func (c *Consumer) run(ctx context.Context, span trace.Span, extractErr error, h func(context.Context) error) {
	if extractErr != nil && c.cfg.onError != nil {
		c.cfg.onError(ctx, extractErr)
	}
	if err := h(ctx); err != nil {
		_ = fail(span, err)
	}
}
