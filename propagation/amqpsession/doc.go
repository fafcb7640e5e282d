// Package amqpsession carries a session across AMQP 0-9-1 brokers (RabbitMQ)
// with github.com/rabbitmq/amqp091-go: a [TableCarrier] over a message's
// header table, a [Publisher] that injects trace context and the session
// inside a producer span, and a [Consumer] that extracts them from a delivery
// through the inbound trust policy, inside a consumer span.
//
// It owns the AMQP edge and nothing else: the trust policy is package
// propagation's ([propagation.Inbound]), the session model package
// otelsession's. The wire format is ordinary W3C trace context and baggage as
// header-table entries (traceparent, tracestate, baggage) holding strings, as
// the OpenTelemetry RabbitMQ instrumentations of other languages write them.
//
//	pub := amqpsession.NewPublisher()
//	msg := amqp091.Publishing{Body: body}
//	ctx, span := pub.Inject(ctx, &msg, "chat", "in")
//	err := ch.PublishWithContext(ctx, "chat", "in", false, false, msg)
//	span.End()
//
//	cons := amqpsession.NewConsumer(propagation.NewInbound(propagation.TrustAll))
//	for d := range deliveries {
//		ctx, span, err := cons.Extract(base, &d) // a fresh session per delivery
//		…
//		span.End()
//	}
//
// Header tables hold values of many types; only strings and byte arrays (and
// arrays of them) are read as trace context or baggage, and everything else is
// ignored without a panic. No session reaches an exchange until
// [WithOutbound] names the exchanges inside the trust domain (propagation's
// one default for every transport); with a signer, the signature is bound to
// the message's exchange and routing key, and to its MessageId when it has
// one (not to the CC and BCC headers, which route a message to the queues of
// other routing keys: see SECURITY.md's limits). A nil inbound policy trusts no publisher. Each delivery starts from a
// Reset session. The default propagator is otel.GetTextMapPropagator(), a
// no-op until the program installs one.
//
// Tested on the message types (hostile tables, moved signatures) and through
// a real RabbitMQ broker that the tests start (internal/rabbitmqtest):
// publisher-confirmed publishes, manual-ack consumes, messages nacked and
// delivered again in the same session with their signature still verifying,
// and messages captured off the broker and published again under another id
// or routing key refused, with or without a MessageId of their own. An exact
// copy of a signed message (same id, or none, and same exchange and routing
// key) verifies: RabbitMQ does not deduplicate, so a consumer that must not
// act twice keeps the message ids it has handled.
// FuzzConsumerExtract feeds it tables of any shape.
package amqpsession
