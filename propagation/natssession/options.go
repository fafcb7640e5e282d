package natssession

import (
	"context"

	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/internal/messaging"
)

// ScopeName is the instrumentation scope of the spans this package starts.
const ScopeName = "github.com/sessionwire/sessionwire/propagation/natssession"

// Transport is the [propagation.Peer] transport name of a NATS message.
const Transport = "nats"

// Option configures a [Publisher] or a [Consumer].
type Option func(*config)

type config struct {
	messaging.Config
	onError func(context.Context, error)
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

// WithPropagator sets the propagator that writes and reads message headers.
// The default is otel.GetTextMapPropagator(), read for every message. That
// global is a no-op until the program calls otel.SetTextMapPropagator, so a
// program that never does must pass one here, typically
//
//	propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
//
// or no session crosses the queue. The propagator must include
// propagation.Baggage{}: the session travels as baggage.
func WithPropagator(p otelprop.TextMapPropagator) Option {
	return func(c *config) { c.Prop = p }
}

// WithOutbound sets the outbound policy a [Publisher] sends every message
// through: which subjects may receive the session, and the signer. The
// default, nil, is propagation's default for every transport, under which
// no session reaches a subject: name the subjects inside your trust domain,
// for example
//
//	natssession.WithOutbound(propagation.NewOutbound(
//		propagation.AllowNames(propagation.TransportNATS, "gw.>"),
//		propagation.WithSigner(signer)))
//
// A subject the policy refuses still gets trace context and the baggage
// members that are not the session's, and any session member already in
// the message's headers is removed, whatever the spelling of the header.
//
// With a signer, every message's signature is bound to its subject and to
// its id, the Nats-Msg-Id header (jetstream.MsgIDHeader) present in
// msg.Header when the message is injected, or to no id when it has none. A
// consumer whose policy verifies signatures (propagation.WithVerifier) binds
// the subject it receives the message on and the same header, so the signed
// session cannot be published again to another subject, nor carried to
// another transport, and with an id it cannot be moved onto another
// message; on JetStream, whose duplicate window drops a second message with
// the same id, it cannot be replayed with its own id either while the window
// lasts. A message without an id can be published again to the same subject
// and is accepted there until the verifier's maximum age: set the id where a
// replay matters. Set it in msg.Header before publishing
// (msg.Header.Set(jetstream.MsgIDHeader, id)): jetstream.WithMsgID writes it
// during the publish, after the session was signed, so the consumer would
// refuse the signature ([Publisher.PublishJetStream] reports that case).
// A [Consumer] ignores this option.
func WithOutbound(o *propagation.Outbound) Option {
	return func(c *config) { c.Out = o }
}

// WithOnError sets a function that a [Consumer]'s handlers call when the
// inbound policy refuses a message's session, before the handler runs (with
// the session Unset). Use it to count, log or reject such messages; the error
// wraps one of the propagation package's Err values and names the subject.
// A [Publisher] ignores this option.
func WithOnError(f func(ctx context.Context, err error)) Option {
	return func(c *config) { c.onError = f }
}
