package natssession

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/internal/messaging"
)

// Errors returned for a missing argument, so that a nil never panics deep
// inside nats.go.
var (
	// ErrNilMessage: a nil *nats.Msg or jetstream.Msg was given.
	ErrNilMessage = errors.New("nil NATS message")
	// ErrNilConnection: a nil *nats.Conn or JetStream publisher was given.
	ErrNilConnection = errors.New("nil NATS connection")
	// ErrMessageIDAfterSigning: a message's Nats-Msg-Id was set by a publish
	// option (jetstream.WithMsgID) after the session was signed for another
	// id (or none); its consumer will refuse the signature. Set the id in
	// msg.Header before publishing instead. It is reported to otel.Handle and
	// recorded on the span; the message has been published.
	ErrMessageIDAfterSigning = errors.New("message id set after the session was signed")
)

// Semantic-convention values that the semconv package has no constant for:
// NATS is not among its well-known messaging systems, and operation names are
// system-specific ("publish" is the NATS verb, PUB on the wire).
var (
	systemNATS    = semconv.MessagingSystemKey.String("nats")
	opNamePublish = semconv.MessagingOperationName("publish")
	opNameProcess = semconv.MessagingOperationName("process")
)

var noopSpan = trace.SpanFromContext(context.Background())

// Publisher writes trace context and the session into the headers of
// outgoing NATS messages, inside a producer span. Build one with
// [NewPublisher] and share it; it is safe for concurrent use.
type Publisher struct {
	cfg    config
	tracer trace.Tracer
}

// NewPublisher returns a Publisher configured by opts.
func NewPublisher(opts ...Option) *Publisher {
	cfg := newConfig(opts)
	return &Publisher{cfg: cfg, tracer: cfg.TP.Tracer(ScopeName)}
}

// Inject starts a producer span named "publish <subject>" as a child of ctx,
// and writes that span's trace context and ctx's baggage into msg.Header
// (allocated when nil) through the outbound policy ([WithOutbound]): the
// session only when the policy allows the subject, signed for the message's
// subject and its Nats-Msg-Id (when it has one) when it signs. Set the
// Nats-Msg-Id in msg.Header before calling Inject, and publish msg to the
// same subject. It returns the span's context and the span;
// the caller publishes msg and then ends the span. Use it for publishing
// calls this package has no helper for (request-reply, PublishMsgAsync);
// otherwise prefer [Publisher.Publish] or [Publisher.PublishJetStream].
//
// A policy error (a signature that does not fit the W3C limits) is reported
// to otel.Handle and recorded on the span, and the message carries the
// session unsigned. A nil msg starts no span: the returned span is a no-op,
// safe to end.
func (p *Publisher) Inject(ctx context.Context, msg *nats.Msg) (context.Context, trace.Span) {
	ctx, span, _ := p.inject(ctx, msg)
	return ctx, span
}

// inject is Inject returning the policy's error too.
func (p *Publisher) inject(ctx context.Context, msg *nats.Msg) (context.Context, trace.Span, error) {
	if msg == nil {
		return ctx, noopSpan, nil
	}
	if msg.Header == nil {
		msg.Header = nats.Header{}
	}
	dest := propagation.Dest{Transport: Transport, Name: msg.Subject}
	if p.cfg.Out.Signer() != nil {
		// What a signature is bound to, with or without a Nats-Msg-Id;
		// built only when there is one.
		dest.MessageID = binding(msg.Subject, msgID(msg.Header))
	}
	attrs := []attribute.KeyValue{
		systemNATS,
		semconv.MessagingDestinationName(msg.Subject),
		semconv.MessagingOperationTypeSend,
		opNamePublish,
	}
	ctx, span, err := messaging.Produce(ctx, &p.cfg.Config, p.tracer, "publish "+msg.Subject, dest, attrs, HeaderCarrier(msg.Header))
	if err != nil {
		err = fmt.Errorf("publish to NATS subject %q: %w", msg.Subject, err)
	}
	return ctx, span, err
}

// Publish publishes msg with nc.PublishMsg inside a producer span, after
// [Publisher.Inject]. When the outbound policy fails (a signature that does
// not fit the W3C limits, a session value no edge accepts), it returns the
// error without publishing. Errors name the subject.
func (p *Publisher) Publish(ctx context.Context, nc *nats.Conn, msg *nats.Msg) error {
	switch {
	case msg == nil:
		return fmt.Errorf("publish to NATS: %w", ErrNilMessage)
	case nc == nil:
		return fmt.Errorf("publish to NATS subject %q: %w", msg.Subject, ErrNilConnection)
	}
	_, span, err := p.inject(ctx, msg)
	defer span.End()
	if err != nil {
		return fail(span, err)
	}
	setServer(span, nc)
	if err := nc.PublishMsg(msg); err != nil {
		return fail(span, fmt.Errorf("publish to NATS subject %q: %w", msg.Subject, err))
	}
	return nil
}

// PublishJetStream publishes msg with js.PublishMsg inside a producer span,
// after [Publisher.Inject], and returns the stream's acknowledgement. opts are
// passed to js.PublishMsg; a message id set by them (jetstream.WithMsgID)
// becomes the span's messaging.message.id. js is usually a
// jetstream.JetStream. As with [Publisher.Publish], a failed outbound policy
// returns its error without publishing.
func (p *Publisher) PublishJetStream(ctx context.Context, js jetstream.Publisher, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	switch {
	case msg == nil:
		return nil, fmt.Errorf("publish to JetStream: %w", ErrNilMessage)
	case js == nil:
		return nil, fmt.Errorf("publish to JetStream subject %q: %w", msg.Subject, ErrNilConnection)
	}
	ctx, span, err := p.inject(ctx, msg)
	defer span.End()
	if err != nil {
		return nil, fail(span, err)
	}
	if c, ok := js.(interface{ Conn() *nats.Conn }); ok {
		setServer(span, c.Conn())
	}
	// The signature is bound to msg.Subject and this id; PublishMsg keeps
	// the subject, but its options may set the id.
	signedFor := msgID(msg.Header)
	ack, err := js.PublishMsg(ctx, msg, opts...)
	id := msgID(msg.Header)
	if id != "" {
		span.SetAttributes(semconv.MessagingMessageID(id))
	}
	if p.cfg.Out.Signer() != nil && p.cfg.Out.Allows(ctx, propagation.Dest{Transport: Transport, Name: msg.Subject}) && id != signedFor {
		// The message has left; say why its consumer will refuse it.
		idErr := fmt.Errorf("publish to JetStream subject %q: %w", msg.Subject, ErrMessageIDAfterSigning)
		otel.Handle(idErr)
		span.RecordError(idErr)
	}
	if err != nil {
		return nil, fail(span, fmt.Errorf("publish to JetStream subject %q: %w", msg.Subject, err))
	}
	return ack, nil
}

// fail marks span as failed with err, and returns err.
func fail(span trace.Span, err error) error {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
	span.SetAttributes(semconv.ErrorType(err))
	return err
}

// setServer records the address of the server nc is connected to.
func setServer(span trace.Span, nc *nats.Conn) {
	if nc == nil || !span.IsRecording() {
		return
	}
	host, port, err := net.SplitHostPort(nc.ConnectedAddr())
	if err != nil {
		return
	}
	attrs := []attribute.KeyValue{semconv.ServerAddress(host)}
	if n, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, semconv.ServerPort(n))
	}
	span.SetAttributes(attrs...)
}
