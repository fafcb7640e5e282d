// Package natssession carries a session across NATS, core and JetStream:
// a [Publisher] that writes trace context and the session into a message's
// headers inside a producer span, and a [Consumer] that reads them back
// through the inbound trust policy and runs each message in its own context,
// inside a consumer span.
//
// It owns the NATS edge and nothing else. Which publishers are trusted and
// which input is refused is the policy of package propagation
// ([propagation.Inbound]); the session model is package otelsession. The wire
// format is ordinary W3C trace context and baggage in NATS headers, so a
// consumer written with any OpenTelemetry SDK can read and forward it.
//
// # Publishing
//
//	pub := natssession.NewPublisher()
//	ctx = otelsession.Bind(ctx, otelsession.Session{Platform: "telegram", ChatID: "42"})
//	err := pub.Publish(ctx, nc, &nats.Msg{Subject: "chat.in", Data: body})
//	ack, err := pub.PublishJetStream(ctx, js, &nats.Msg{Subject: "chat.in", Data: body})
//
// Publishing starts a producer span, "publish <subject>", with the messaging
// attributes (messaging.system=nats, messaging.destination.name,
// messaging.operation.type=send), and injects that span's trace context and
// the baggage of ctx into the message headers, allocating them if needed.
// [Publisher.Inject] does the same for a publishing call of your own.
//
// Every message goes through the outbound policy ([WithOutbound]), the one
// every transport uses, and its default sends no session to any subject: name
// the subjects inside the gateway's trust domain, typically with
// propagation.AllowNames(propagation.TransportNATS, "gw.>"). Other subjects
// get trace context and non-session baggage only, and a session already in a
// message's headers (in any spelling of the header) is removed unless the
// policy writes it.
//
// # Consuming
//
//	cons := natssession.NewConsumer(propagation.NewInbound(propagation.TrustAll))
//	cc, err := jsConsumer.Consume(cons.JetStreamHandler(ctx, func(ctx context.Context, msg jetstream.Msg) error {
//		chat, _ := otelsession.Lookup(ctx, otelsession.FieldChatID) // this message's chat
//		return msg.Ack()
//	}))
//
// Every message starts from a Reset session, so nothing bound in the base
// context or by a previous message on the same goroutine can leak into it;
// then its session is kept only if the policy trusts the subject
// (propagation.Peer{Transport: "nats", Name: subject}). A nil policy trusts
// nothing, which strips every session: say what you trust. The consumer span,
// "process <subject>", is a child of the producer span and links to it.
// Redelivered messages (after a nak or an ack timeout) carry their stored
// headers, so they arrive with their own session again.
//
// # Signed sessions
//
// Where the NATS account is not enough to trust a publisher, the gateway
// signs and the workers verify:
//
//	pub := natssession.NewPublisher(natssession.WithOutbound(propagation.NewOutbound(
//		propagation.AllowNames(propagation.TransportNATS, "gw.>"), propagation.WithSigner(signer))))
//	msg.Header.Set(jetstream.MsgIDHeader, messageID) // before publishing: the signature binds it
//	cons := natssession.NewConsumer(propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier)))
//
// The signature is bound to the subject the message was published to and,
// when it has one, to its Nats-Msg-Id: it verifies on no other subject,
// where nothing binds a signature (an HTTP request), nor on another
// transport, and with an id not on another message. The consumer removes it
// once it has accepted the session (it could verify nowhere else), with or
// without an id. Keep the stream's duplicate window at least as long as the
// verifier's maximum age: a replay with the same id is then dropped by the
// server for as long as the signature is fresh. A message without an id can
// be published again to the same subject and is accepted there until the
// verifier's maximum age: set the id where a replay matters.
//
// The consumer binds the subject it sees (a JetStream message's is the one it
// was published to): a subject mapping, an import that maps the subject, a
// stream's subject transform or a republish, which deliver the message
// under another subject, make its signature fail there.
//
// # Headers
//
// nats.Header is case-sensitive, and the propagators use lower-case keys
// (baggage, traceparent, tracestate). [HeaderCarrier] writes them exactly so,
// and reads a canonical spelling (Baggage, Traceparent) only when the exact
// key is absent, so messages from publishers that used otel's HTTP header
// carrier still work.
//
// # Propagator
//
// The default propagator is otel.GetTextMapPropagator(), read for every
// message, as in the rest of OpenTelemetry. It is a no-op until the program
// calls otel.SetTextMapPropagator (with propagation.TraceContext{} and
// propagation.Baggage{}, typically); until then no session crosses the queue.
// [WithPropagator] sets one explicitly.
//
// Span names carry the subject. If your subjects embed identifiers (one per
// chat, say) and your tracing backend indexes span names, publish to a few
// fixed subjects and keep identifiers in the session instead.
package natssession
