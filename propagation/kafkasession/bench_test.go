package kafkasession_test

// Each step beside the raw OpenTelemetry path it should be compared with, as
// sub-benchmarks path=raw and path=session run one after the other
// (benchstat -col /path sets them side by side). The raw path
// is what a hand-instrumented client does: start the producer (consumer)
// span with the same attributes and inject (extract) with the stock
// propagator into (from) the same record headers. The tracer is a no-op, so
// that only the carrying is measured. Run:
//
//	go test -run '^$' -bench . -benchmem -count 8 -benchtime 0.3s ./propagation/kafkasession/

import (
	"context"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sessionwire/sessionwire/internal/benchcpu"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/kafkasession"
)

var benchTracer = tracenoop.NewTracerProvider().Tracer("bench")

func benchRecord() *kgo.Record {
	return &kgo.Record{Topic: "chat.in", Value: []byte("hello"), Headers: []kgo.RecordHeader{{Key: kafkasession.MessageIDHeader, Value: []byte("m-1")}}}
}

func BenchmarkInject(b *testing.B) {
	ctx := otelsession.Bind(context.Background(), sessionFor(1))
	b.Run("Publisher.Inject/path=raw", func(b *testing.B) {
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			r := benchRecord()
			attrs := []attribute.KeyValue{
				semconv.MessagingSystemKafka, semconv.MessagingDestinationName(r.Topic),
				semconv.MessagingOperationTypeSend, semconv.MessagingOperationName("send"),
			}
			ctx, span := benchTracer.Start(ctx, "send "+r.Topic, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
			w3c.Inject(ctx, kafkasession.NewRecordCarrier(r))
			span.End()
		}
	})
	b.Run("Publisher.Inject/path=session", func(b *testing.B) {
		pub := kafkasession.NewPublisher(kafkasession.WithPropagator(w3c), kafkasession.WithTracerProvider(tracenoop.NewTracerProvider()), kafkasession.WithOutbound(toQueue))
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			_, span := pub.Inject(ctx, benchRecord())
			span.End()
		}
	})
}

func BenchmarkExtract(b *testing.B) {
	pub := kafkasession.NewPublisher(kafkasession.WithPropagator(w3c), kafkasession.WithTracerProvider(tracenoop.NewTracerProvider()), kafkasession.WithOutbound(toQueue))
	r := benchRecord()
	_, span := pub.Inject(otelsession.Bind(context.Background(), sessionFor(1)), r)
	span.End()
	r.Partition, r.Offset = 3, 1234
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
				semconv.MessagingSystemKafka, semconv.MessagingDestinationName(r.Topic),
				semconv.MessagingDestinationPartitionID(strconv.Itoa(int(r.Partition))), semconv.MessagingKafkaOffset(int(r.Offset)),
				semconv.MessagingOperationTypeProcess, semconv.MessagingOperationName("process"),
			}
			ctx := w3c.Extract(base, kafkasession.NewRecordCarrier(r))
			ctx, span := benchTracer.Start(ctx, "process "+r.Topic, trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(attrs...), trace.WithLinks(trace.Link{SpanContext: trace.SpanContextFromContext(ctx)}))
			span.End()
			check(b, ctx)
		}
	})
	b.Run("Consumer.Extract/path=session", func(b *testing.B) {
		cons := kafkasession.NewConsumer(propagation.NewInbound(propagation.TrustAll, propagation.WithCacheSize(0)), kafkasession.WithPropagator(w3c), kafkasession.WithTracerProvider(tracenoop.NewTracerProvider()))
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			ctx, span, err := cons.Extract(base, r)
			if err != nil {
				b.Fatal(err)
			}
			span.End()
			check(b, ctx)
		}
	})
}
