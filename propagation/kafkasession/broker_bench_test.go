package kafkasession_test

// Produce and consume through the in-process Kafka cluster (kfake), per
// message: the session path (Publisher with the W3C propagators and a
// signing-free outbound policy, Consumer with the inbound policy) beside the
// raw path a program without sessions runs (the same spans, trace context
// only, injected and extracted with the stock propagator), and beside the
// stock W3C propagators carrying the same session as plain baggage with no
// policy (path=rawbaggage). Each iteration
// produces one record asynchronously; the consumer then reads all b.N back.
// cpu-ns/op is the whole process's processor time, the in-process broker's
// included. Interleave the two paths and take medians:
//
//	go test -c -o /tmp/kafkasession.test ./propagation/kafkasession/
//	for i in 1 2 3 4 5 6; do for p in raw rawbaggage session; do /tmp/kafkasession.test -test.run '^$' \
//	  -test.bench "BenchmarkBroker/path=$p" -test.benchtime 3000x -test.benchmem; done; done

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	otelprop "go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/internal/benchcpu"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/kafkasession"
)

// path is one way of producing and consuming a record.
type path struct {
	produce func(ctx context.Context, r *kgo.Record) (context.Context, trace.Span)
	consume func(r *kgo.Record) (context.Context, trace.Span, error)
}

func BenchmarkBroker(b *testing.B) {
	// Spans are recorded by the SDK and exported nowhere: a real span
	// context to propagate, at the same cost on both paths.
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tracer := tp.Tracer("bench")
	traceOnly := otelprop.TraceContext{}
	pub := kafkasession.NewPublisher(kafkasession.WithPropagator(w3c), kafkasession.WithTracerProvider(tp), kafkasession.WithOutbound(toQueue))
	cons := kafkasession.NewConsumer(propagation.NewInbound(propagation.TrustAll), kafkasession.WithPropagator(w3c),
		kafkasession.WithTracerProvider(tp))
	raw := path{
		produce: func(ctx context.Context, r *kgo.Record) (context.Context, trace.Span) {
			ctx, span := tracer.Start(ctx, "send "+r.Topic, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
				semconv.MessagingSystemKafka, semconv.MessagingDestinationName(r.Topic),
				semconv.MessagingOperationTypeSend, semconv.MessagingOperationName("send")))
			traceOnly.Inject(ctx, kafkasession.NewRecordCarrier(r))
			return ctx, span
		},
		consume: func(r *kgo.Record) (context.Context, trace.Span, error) {
			ctx := traceOnly.Extract(context.Background(), kafkasession.NewRecordCarrier(r))
			ctx, span := tracer.Start(ctx, "process "+r.Topic, trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithLinks(trace.Link{SpanContext: trace.SpanContextFromContext(ctx)}), trace.WithAttributes(
					semconv.MessagingSystemKafka, semconv.MessagingDestinationName(r.Topic),
					semconv.MessagingDestinationPartitionID(strconv.Itoa(int(r.Partition))), semconv.MessagingKafkaOffset(int(r.Offset)),
					semconv.MessagingOperationTypeProcess, semconv.MessagingOperationName("process")))
			return ctx, span, nil
		},
	}
	// The stock propagators carrying the same session as plain baggage,
	// with no policy: what the policies add over carrying it at all.
	rawBaggage := path{
		produce: func(ctx context.Context, r *kgo.Record) (context.Context, trace.Span) {
			ctx, span := raw.produce(ctx, r)
			w3c.Inject(ctx, kafkasession.NewRecordCarrier(r))
			return ctx, span
		},
		consume: func(r *kgo.Record) (context.Context, trace.Span, error) {
			_, span, _ := raw.consume(r)
			return w3c.Extract(context.Background(), kafkasession.NewRecordCarrier(r)), span, nil
		},
	}
	session := path{produce: pub.Inject, consume: func(r *kgo.Record) (context.Context, trace.Span, error) {
		return cons.Extract(context.Background(), r)
	}}
	for _, p := range []struct {
		name string
		path path
	}{{"raw", raw}, {"rawbaggage", rawBaggage}, {"session", session}} {
		b.Run("path="+p.name, func(b *testing.B) {
			// A cluster of its own: kfake keeps every record in this
			// process's heap, and a path run beside the records of the
			// paths before it would pay more garbage collection for them.
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			benchBroker(b, c, "bench", p.path, p.name != "raw")
		})
	}
}

func benchBroker(b *testing.B, c *kfake.Cluster, topic string, p path, withSession bool) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.AllowAutoTopicCreation(), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond), kgo.ProducerLinger(0))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := otelsession.Bind(context.Background(), sessionFor(1))
	want := sessionFor(1).ChatID
	// One record through first, so that the topic exists and the
	// connections are up before the clock starts.
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic}).FirstErr(); err != nil {
		b.Fatal(err)
	}
	poll := func(n int, each func(*kgo.Record)) {
		for n > 0 {
			f := cl.PollRecords(ctx, n)
			f.EachError(func(t string, p int32, err error) { b.Fatalf("fetch %s/%d: %v", t, p, err) })
			f.EachRecord(func(r *kgo.Record) { n--; each(r) })
		}
	}
	poll(1, func(*kgo.Record) {})

	var failed atomic.Int64
	defer benchcpu.Time(b)()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := &kgo.Record{Topic: topic, Value: []byte("hello"),
			Headers: []kgo.RecordHeader{{Key: kafkasession.MessageIDHeader, Value: strconv.AppendInt(nil, int64(i), 10)}}}
		pctx, span := p.produce(ctx, r)
		cl.Produce(pctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Add(1)
			}
			span.End()
		})
	}
	poll(b.N, func(r *kgo.Record) {
		rctx, span, err := p.consume(r)
		span.End()
		if err != nil {
			failed.Add(1)
		}
		if withSession {
			if v, _ := otelsession.Lookup(rctx, otelsession.FieldChatID); v != want {
				failed.Add(1)
			}
		}
	})
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d records failed", n)
	}
}
