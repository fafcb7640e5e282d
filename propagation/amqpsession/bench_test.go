package amqpsession_test

// Each step beside the raw OpenTelemetry path it should be compared with, as
// sub-benchmarks path=raw and path=session run one after the other
// (benchstat -col /path sets them side by side). The raw path
// is what a hand-instrumented client does: start the producer (consumer)
// span with the same attributes and inject (extract) with the stock
// propagator into (from) the same header table. The tracer is a no-op, so
// that only the carrying is measured. Run:
//
//	go test -run '^$' -bench . -benchmem -count 8 -benchtime 0.3s ./propagation/amqpsession/

import (
	"context"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sessionwire/sessionwire/internal/benchcpu"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/amqpsession"
)

var benchTracer = tracenoop.NewTracerProvider().Tracer("bench")

func BenchmarkInject(b *testing.B) {
	ctx := otelsession.Bind(context.Background(), sessionFor(1))
	// Variables, as in a program: both paths build the span name.
	exchange, routingKey := "chat", "in"
	b.Run("Publisher.Inject/path=raw", func(b *testing.B) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			msg := &amqp.Publishing{MessageId: "m-1", Body: []byte("hello")}
			attrs := []attribute.KeyValue{
				semconv.MessagingSystemRabbitMQ, semconv.MessagingDestinationName(exchange),
				semconv.MessagingRabbitMQDestinationRoutingKey(routingKey),
				semconv.MessagingOperationTypeSend, semconv.MessagingOperationName("publish"),
				semconv.MessagingMessageID(msg.MessageId),
			}
			ctx, span := benchTracer.Start(ctx, "publish "+exchange, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
			msg.Headers = amqp.Table{}
			w3c.Inject(ctx, amqpsession.TableCarrier(msg.Headers))
			span.End()
		}
	})
	b.Run("Publisher.Inject/path=session", func(b *testing.B) {
		pub := amqpsession.NewPublisher(amqpsession.WithPropagator(w3c), amqpsession.WithTracerProvider(tracenoop.NewTracerProvider()), amqpsession.WithOutbound(toQueue))
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			_, span := pub.Inject(ctx, &amqp.Publishing{MessageId: "m-1", Body: []byte("hello")}, exchange, routingKey)
			span.End()
		}
	})
}

func BenchmarkExtract(b *testing.B) {
	pub := amqpsession.NewPublisher(amqpsession.WithPropagator(w3c), amqpsession.WithTracerProvider(tracenoop.NewTracerProvider()), amqpsession.WithOutbound(toQueue))
	msg := amqp.Publishing{MessageId: "m-1", Body: []byte("hello")}
	_, span := pub.Inject(otelsession.Bind(context.Background(), sessionFor(1)), &msg, "chat", "in")
	span.End()
	d := &amqp.Delivery{Headers: msg.Headers, Exchange: "chat", RoutingKey: "in", DeliveryTag: 9, MessageId: msg.MessageId, Body: msg.Body}
	base := context.Background()
	want := sessionFor(1).ChatID
	check := func(b *testing.B, ctx context.Context) {
		if v, _ := otelsession.Lookup(ctx, otelsession.FieldChatID); v != want {
			b.Fatalf("chat id %q after extract", v)
		}
	}
	b.Run("Consumer.Extract/path=raw", func(b *testing.B) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			attrs := []attribute.KeyValue{
				semconv.MessagingSystemRabbitMQ, semconv.MessagingDestinationName(d.Exchange),
				semconv.MessagingRabbitMQDestinationRoutingKey(d.RoutingKey),
				semconv.MessagingOperationTypeProcess, semconv.MessagingOperationName("process"),
				semconv.MessagingRabbitMQMessageDeliveryTag(int(d.DeliveryTag)), semconv.MessagingMessageID(d.MessageId),
			}
			ctx := w3c.Extract(base, amqpsession.TableCarrier(d.Headers))
			ctx, span := benchTracer.Start(ctx, "process "+d.Exchange, trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(attrs...), trace.WithLinks(trace.Link{SpanContext: trace.SpanContextFromContext(ctx)}))
			span.End()
			check(b, ctx)
		}
	})
	b.Run("Consumer.Extract/path=session", func(b *testing.B) {
		cons := amqpsession.NewConsumer(propagation.NewInbound(propagation.TrustAll, propagation.WithCacheSize(0)), amqpsession.WithPropagator(w3c), amqpsession.WithTracerProvider(tracenoop.NewTracerProvider()))
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			ctx, span, err := cons.Extract(base, d)
			if err != nil {
				b.Fatal(err)
			}
			span.End()
			check(b, ctx)
		}
	})
}
