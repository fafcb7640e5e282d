// Package kafkasession carries a session across Kafka records produced and
// consumed with franz-go (github.com/twmb/franz-go/pkg/kgo): a
// [RecordCarrier] over a record's headers, a [Publisher] that injects trace
// context and the session inside a producer span, and a [Consumer] that
// extracts them through the inbound trust policy, inside a consumer span.
//
// It owns the Kafka edge and nothing else: the trust policy is package
// propagation's ([propagation.Inbound]), the session model package
// otelsession's. The wire format is ordinary W3C trace context and baggage in
// record headers (keys traceparent, tracestate, baggage), as the
// OpenTelemetry Kafka instrumentations of other languages write them.
//
//	pub := kafkasession.NewPublisher()
//	ctx, span := pub.Inject(ctx, rec) // then client.Produce; end span in the promise
//
//	cons := kafkasession.NewConsumer(propagation.NewInbound(propagation.TrustAll))
//	fetches.EachRecord(func(r *kgo.Record) {
//		ctx, span, err := cons.Extract(pollCtx, r) // a fresh session per record
//		defer span.End()
//		…
//	})
//
// No session reaches a topic until [WithOutbound] names the topics inside the
// trust domain (propagation's one default for every transport); a session
// already in a record's headers is removed unless the policy writes it. With
// a signer, the signature is bound to the record's topic, and to its
// [MessageIDHeader] when it has one. A nil inbound policy trusts no
// producer. Each record starts from a Reset session, so nothing bound in the
// poll loop's context or by the previous record can leak into it. The default propagator is
// otel.GetTextMapPropagator(), a no-op until the program installs one.
//
// Tested on the record type (hostile headers, moved signatures) and through
// a cluster that speaks the Kafka protocol: franz-go's in-process kfake, on
// 127.0.0.1. Signed records are produced with kgo and consumed in a consumer
// group while a second member joins and the first leaves, with lost,
// duplicated and misrouted records counted (none) and every consumer span
// checked against its record's producer span. Records a member handled but
// never committed come back to the next member in the same session. A record
// captured off the broker and produced again onto another topic or under
// another id is refused, with or without an id of its own.
// FuzzConsumerExtract feeds it headers of any shape.
package kafkasession
