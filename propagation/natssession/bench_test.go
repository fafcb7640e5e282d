package natssession_test

// Each step beside the raw OpenTelemetry path it should be compared with, as
// sub-benchmarks path=raw and path=session run one after the other
// (benchstat -col /path sets them side by side). The raw path
// is what a hand-instrumented client does: start the producer (consumer)
// span with the same attributes and inject (extract) with the stock
// propagator into (from) the same header. The tracer is a no-op, so that
// only the carrying is measured. Run:
//
//	go test -run '^$' -bench . -benchmem -count 8 -benchtime 0.3s ./propagation/natssession/

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	otelprop "go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sessionwire/sessionwire/internal/benchcpu"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/internal/sessiontest"
	"github.com/sessionwire/sessionwire/propagation/natssession"
)

func benchSession() context.Context {
	return conversationFor(1).bind(context.Background())
}

var benchTracer = tracenoop.NewTracerProvider().Tracer("bench")

// natsAttrs are the attributes natssession puts on its spans, so that the
// raw path builds as many.
func natsAttrs(subject, op string, kind attribute.KeyValue) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("messaging.system", "nats"),
		semconv.MessagingDestinationName(subject),
		kind,
		semconv.MessagingOperationName(op),
	}
}

// benchMsg is a JetStream-style message with its own id, which a signature
// is bound to.
func benchMsg() *nats.Msg {
	return &nats.Msg{Subject: "chat.in", Header: nats.Header{jetstream.MsgIDHeader: []string{"m-1"}}}
}

func BenchmarkInject(b *testing.B) {
	ctx := benchSession()
	s, err := propagation.NewSigner(gatewayKey)
	if err != nil {
		b.Fatal(err)
	}
	// raw is what a hand-instrumented client does; sign, when not nil, signs
	// the session for the message's id before the injection, as a program
	// without sessionwire would (the raw_signed baseline).
	raw := func(sign func(context.Context, string) (context.Context, error)) func(*testing.B) {
		return func(b *testing.B) {
			defer benchcpu.Time(b)()
			b.ReportAllocs()
			for b.Loop() {
				msg := benchMsg()
				ctx, span := benchTracer.Start(ctx, "publish "+msg.Subject, trace.WithSpanKind(trace.SpanKindProducer),
					trace.WithAttributes(natsAttrs(msg.Subject, "publish", semconv.MessagingOperationTypeSend)...))
				if sign != nil {
					var err error
					if ctx, err = sign(ctx, msg.Header.Get(jetstream.MsgIDHeader)); err != nil {
						b.Fatal(err)
					}
				}
				w3c.Inject(ctx, natssession.HeaderCarrier(msg.Header))
				span.End()
			}
		}
	}
	session := func(out *propagation.Outbound) func(*testing.B) {
		return func(b *testing.B) {
			pub := natssession.NewPublisher(natssession.WithPropagator(w3c), natssession.WithTracerProvider(tracenoop.NewTracerProvider()), natssession.WithOutbound(out))
			defer benchcpu.Time(b)()
			b.ReportAllocs()
			for b.Loop() {
				_, span := pub.Inject(ctx, benchMsg())
				span.End()
			}
		}
	}
	b.Run("Publisher.Inject/path=raw", raw(nil))
	b.Run("Publisher.Inject/path=session", session(toQueue))
	b.Run("Publisher.Inject_signed/path=raw", raw(nil))
	b.Run("Publisher.Inject_signed/path=raw_signed", raw(sessiontest.NewRawSigner(gatewayKey.ID, gatewayKey.Secret, time.Now).Sign))
	b.Run("Publisher.Inject_signed/path=session", session(propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(s))))
}

func BenchmarkExtract(b *testing.B) {
	s, err := propagation.NewSigner(gatewayKey)
	if err != nil {
		b.Fatal(err)
	}
	header := func(out *propagation.Outbound) nats.Header {
		pub := natssession.NewPublisher(natssession.WithPropagator(w3c), natssession.WithTracerProvider(tracenoop.NewTracerProvider()), natssession.WithOutbound(out))
		msg := benchMsg()
		_, span := pub.Inject(benchSession(), msg)
		span.End()
		return msg.Header
	}
	plainH := header(toQueue)
	signedH := header(propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(s)))
	base := context.Background()
	check := func(b *testing.B, ctx context.Context) {
		if v, _ := otelsession.Lookup(ctx, otelsession.FieldChatID); v != conversationFor(1).s.ChatID {
			b.Fatalf("chat id %q after extract", v)
		}
	}
	raw := func(h nats.Header) func(*testing.B) {
		return func(b *testing.B) {
			msg := &nats.Msg{Subject: "chat.in", Header: h}
			defer benchcpu.Time(b)()
			b.ReportAllocs()
			for b.Loop() {
				attrs := natsAttrs(msg.Subject, "process", semconv.MessagingOperationTypeProcess)
				if id := natssession.HeaderCarrier(msg.Header).Get(jetstream.MsgIDHeader); id != "" {
					attrs = append(attrs, semconv.MessagingMessageID(id))
				}
				ctx := w3c.Extract(base, natssession.HeaderCarrier(msg.Header))
				ctx, span := benchTracer.Start(ctx, "process "+msg.Subject, trace.WithSpanKind(trace.SpanKindConsumer),
					trace.WithAttributes(attrs...), trace.WithLinks(trace.Link{SpanContext: trace.SpanContextFromContext(ctx)}))
				span.End()
				check(b, ctx)
			}
		}
	}
	session := func(policy *propagation.Inbound, h nats.Header) func(*testing.B) {
		return func(b *testing.B) {
			sub := natssession.NewConsumer(policy, natssession.WithPropagator(w3c), natssession.WithTracerProvider(tracenoop.NewTracerProvider()))
			msg := &nats.Msg{Subject: "chat.in", Header: h}
			defer benchcpu.Time(b)()
			b.ReportAllocs()
			for b.Loop() {
				ctx, span, err := sub.Extract(base, msg)
				if err != nil {
					b.Fatal(err)
				}
				span.End()
				check(b, ctx)
			}
		}
	}
	b.Run("Consumer.Extract/path=raw", raw(plainH))
	// The same message again and again: without the policy's cache, which
	// would serve every extraction but the first (the rows below measure
	// it).
	b.Run("Consumer.Extract/path=session", session(propagation.NewInbound(propagation.TrustAll, propagation.WithCacheSize(0)), plainH))
	// The policy's cache of accepted sessions: the messages of 4,096
	// distinct conversations in turn, more than the cache notes (each
	// session first seen: noted, no entry made), and 1,024 messages of
	// one conversation, each published on its own (its members in another
	// order each time, its own message id: each served from the entry of
	// the one before). The raw path consumes the same messages in turn.
	inTurn := func(n int, out *propagation.Outbound, policy func() *propagation.Inbound, vary func(i int) conversation) func(*testing.B, bool) {
		msgs := make([]*nats.Msg, n)
		chats := make([]string, len(msgs))
		pub := natssession.NewPublisher(natssession.WithPropagator(w3c), natssession.WithTracerProvider(tracenoop.NewTracerProvider()), natssession.WithOutbound(out))
		for i := range msgs {
			c := vary(i)
			msgs[i], chats[i] = benchMsg(), c.s.ChatID
			msgs[i].Header.Set(jetstream.MsgIDHeader, fmt.Sprint("m-", i)) // a signature is bound to it
			_, span := pub.Inject(c.bind(context.Background()), msgs[i])
			span.End()
		}
		return func(b *testing.B, withPolicy bool) {
			sub := natssession.NewConsumer(policy(), natssession.WithPropagator(w3c), natssession.WithTracerProvider(tracenoop.NewTracerProvider()))
			defer benchcpu.Time(b)()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				msg := msgs[i%len(msgs)]
				var ctx context.Context
				if withPolicy {
					var span trace.Span
					var err error
					if ctx, span, err = sub.Extract(base, msg); err != nil {
						b.Fatal(err)
					}
					span.End()
				} else {
					attrs := natsAttrs(msg.Subject, "process", semconv.MessagingOperationTypeProcess)
					if id := natssession.HeaderCarrier(msg.Header).Get(jetstream.MsgIDHeader); id != "" {
						attrs = append(attrs, semconv.MessagingMessageID(id))
					}
					ctx = w3c.Extract(base, natssession.HeaderCarrier(msg.Header))
					var span trace.Span
					ctx, span = benchTracer.Start(ctx, "process "+msg.Subject, trace.WithSpanKind(trace.SpanKindConsumer),
						trace.WithAttributes(attrs...), trace.WithLinks(trace.Link{SpanContext: trace.SpanContextFromContext(ctx)}))
					span.End()
				}
				if v, _ := otelsession.Lookup(ctx, otelsession.FieldChatID); v != chats[i%len(msgs)] {
					b.Fatalf("chat id %q after extract, want %q", v, chats[i%len(msgs)])
				}
				i++
			}
		}
	}
	trustAll := func() *propagation.Inbound { return propagation.NewInbound(propagation.TrustAll) }
	signs := propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(s))
	firstSeen := inTurn(4096, toQueue, trustAll, func(i int) conversation { return conversationFor(1 + 6*i) })
	next := func(i int) conversation {
		c := conversationFor(1)
		c.s.MessageID = fmt.Sprint("msg-1-", i)
		return c
	}
	nextMessage := inTurn(1024, toQueue, trustAll, next)
	// As the gateway's workers receive their jobs: each message signed for
	// its own Nats-Msg-Id, a policy that trusts no subject and verifies.
	nextSigned := inTurn(1024, signs, func() *propagation.Inbound { return verifying(b) }, next)
	b.Run("Consumer.Extract_first_seen/path=raw", func(b *testing.B) { firstSeen(b, false) })
	b.Run("Consumer.Extract_first_seen/path=session", func(b *testing.B) { firstSeen(b, true) })
	b.Run("Consumer.Extract_next_message/path=raw", func(b *testing.B) { nextMessage(b, false) })
	b.Run("Consumer.Extract_next_message/path=session", func(b *testing.B) { nextMessage(b, true) })
	b.Run("Consumer.Extract_verified_next_message/path=raw", func(b *testing.B) { nextSigned(b, false) })
	b.Run("Consumer.Extract_verified_next_message/path=session", func(b *testing.B) { nextSigned(b, true) })
	b.Run("Consumer.Extract_verified/path=raw", raw(signedH))
	// The same signed message again and again, without the policy's cache.
	b.Run("Consumer.Extract_verified/path=session", session(verifying(b, propagation.WithCacheSize(0)), signedH))

	// The inbound policy alone from a MapCarrier (one baggage string, the
	// propagator's single-header path), beside the stock extraction.
	m := otelprop.MapCarrier{}
	w3c.Inject(benchSession(), m)
	policy := propagation.NewInbound(propagation.TrustAll, propagation.WithCacheSize(0))
	b.Run("Inbound.Extract_MapCarrier/path=raw", func(b *testing.B) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			check(b, w3c.Extract(base, m))
		}
	})
	b.Run("Inbound.Extract_MapCarrier/path=session", func(b *testing.B) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			ctx, err := policy.Extract(base, w3c, m, propagation.Peer{Transport: "nats", Name: "chat.in"})
			if err != nil {
				b.Fatal(err)
			}
			check(b, ctx)
		}
	})
}
