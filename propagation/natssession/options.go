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
	signer  *propagation.Signer
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

// WithSessionEgress decides, per subject, whether a [Publisher] may put the
// session into a message. Subjects it refuses still carry trace context and
// the baggage members that are not session fields, but no session member,
// even one already present in the message's headers.
//
// The default allows every subject: the NATS account a gateway publishes to
// is normally inside its own trust domain, and a worker that cannot read the
// session cannot route its reply. Refuse the subjects that leave that domain
// (a bridge to a partner's account, a public feed). A nil allow refuses every
// subject. A [Consumer] ignores this option.
func WithSessionEgress(allow func(subject string) bool) Option {
	return func(c *config) {
		if allow == nil {
			allow = messaging.RefuseAll
		}
		c.Egress = allow
	}
}

// WithOnError sets a function that a [Consumer]'s handlers call when the
// inbound policy refuses a message's session, before the handler runs (with
// the session Unset). Use it to count, log or reject such messages; the error
// wraps one of the propagation package's Err values and names the subject.
// A [Publisher] ignores this option.
func WithOnError(f func(ctx context.Context, err error)) Option {
	return func(c *config) { c.onError = f }
}

// WithSigner makes a [Publisher] sign the session of every message it puts a
// session into (see propagation.Signer), bound to the message's id when it
// has one: the Nats-Msg-Id header (jetstream.MsgIDHeader) present in
// msg.Header when the message is injected. A consumer whose policy verifies
// signatures (propagation.WithVerifier) binds the same header, so the
// signed session cannot be moved onto another message; on JetStream, whose
// duplicate window drops a second message with the same id, it cannot be
// replayed with its own id either while the window lasts.
//
// Set the id in msg.Header before publishing
// (msg.Header.Set(jetstream.MsgIDHeader, id)): jetstream.WithMsgID writes it
// during the publish, after the session was signed, so the consumer would
// refuse the signature ([Publisher.PublishJetStream] reports that case). A
// message without an id gets a signature bound to no message, which a
// consumer accepts on any message without an id within the verifier's
// window.
//
// A subject [WithSessionEgress] refuses gets no session and no signature.
// Signing fails only when the signature does not fit the W3C baggage limits;
// Publish and PublishJetStream then return the error without publishing.
// A nil s signs nothing. A [Consumer] ignores this option.
func WithSigner(s *propagation.Signer) Option {
	return func(c *config) { c.signer = s }
}
