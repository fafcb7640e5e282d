package amqpsession_test

// Publish and consume through a real RabbitMQ broker, per message: the
// session path (Publisher with the W3C propagators and an outbound policy,
// Consumer with the inbound policy) beside the raw path a program without
// sessions runs (the same spans, trace context only, with the stock
// propagator), and beside the stock W3C propagators carrying the same
// session as plain baggage with no policy (path=rawbaggage). Each iteration
// publishes one message on a confirm-mode channel; then the confirms are
// awaited and all b.N messages consumed and acked one by one. cpu-ns/op is
// this process's processor time (the broker runs in its own). Interleave
// the paths and take medians:
//
//	go test -c -o /tmp/amqpsession.test ./propagation/amqpsession/
//	SESSIONWIRE_AMQP_URL=amqp://guest:guest@127.0.0.1:PORT/ # a running broker, or each run starts one
//	for i in 1 2 3 4 5 6; do for p in raw rawbaggage session; do /tmp/amqpsession.test -test.run '^$' \
//	  -test.bench "BenchmarkBroker/path=$p" -test.benchtime 3000x -test.benchmem; done; done

import (
	"context"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	otelprop "go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/internal/benchcpu"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/amqpsession"
)

// path is one way of publishing and consuming a message.
type path struct {
	publish func(ctx context.Context, msg *amqp.Publishing, exchange, key string) (context.Context, trace.Span)
	consume func(d *amqp.Delivery) (context.Context, trace.Span, error)
}

func BenchmarkBroker(b *testing.B) {
	tp := sdktrace.NewTracerProvider() // real span contexts, exported nowhere
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tracer := tp.Tracer("bench")
	traceOnly := otelprop.TraceContext{}
	unsigned := propagation.NewOutbound(propagation.AllowNames(propagation.TransportAMQP, "chat"))
	pub := amqpsession.NewPublisher(amqpsession.WithPropagator(w3c), amqpsession.WithTracerProvider(tp), amqpsession.WithOutbound(unsigned))
	cons := amqpsession.NewConsumer(propagation.NewInbound(propagation.TrustAll), amqpsession.WithPropagator(w3c),
		amqpsession.WithTracerProvider(tp))
	raw := path{
		publish: func(ctx context.Context, msg *amqp.Publishing, exchange, key string) (context.Context, trace.Span) {
			ctx, span := tracer.Start(ctx, "publish "+exchange, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
				semconv.MessagingSystemRabbitMQ, semconv.MessagingDestinationName(exchange), semconv.MessagingRabbitMQDestinationRoutingKey(key),
				semconv.MessagingOperationTypeSend, semconv.MessagingOperationName("publish"), semconv.MessagingMessageID(msg.MessageId)))
			if msg.Headers == nil {
				msg.Headers = amqp.Table{}
			}
			traceOnly.Inject(ctx, amqpsession.TableCarrier(msg.Headers))
			return ctx, span
		},
		consume: func(d *amqp.Delivery) (context.Context, trace.Span, error) {
			ctx := traceOnly.Extract(context.Background(), amqpsession.TableCarrier(d.Headers))
			ctx, span := tracer.Start(ctx, "process "+d.Exchange, trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithLinks(trace.Link{SpanContext: trace.SpanContextFromContext(ctx)}), trace.WithAttributes(
					semconv.MessagingSystemRabbitMQ, semconv.MessagingDestinationName(d.Exchange), semconv.MessagingRabbitMQDestinationRoutingKey(d.RoutingKey),
					semconv.MessagingOperationTypeProcess, semconv.MessagingOperationName("process"),
					semconv.MessagingRabbitMQMessageDeliveryTag(int(d.DeliveryTag)), semconv.MessagingMessageID(d.MessageId)))
			return ctx, span, nil
		},
	}
	rawBaggage := path{
		publish: func(ctx context.Context, msg *amqp.Publishing, exchange, key string) (context.Context, trace.Span) {
			ctx, span := raw.publish(ctx, msg, exchange, key)
			w3c.Inject(ctx, amqpsession.TableCarrier(msg.Headers))
			return ctx, span
		},
		consume: func(d *amqp.Delivery) (context.Context, trace.Span, error) {
			_, span, _ := raw.consume(d)
			return w3c.Extract(context.Background(), amqpsession.TableCarrier(d.Headers)), span, nil
		},
	}
	session := path{publish: pub.Inject, consume: func(d *amqp.Delivery) (context.Context, trace.Span, error) {
		return cons.Extract(context.Background(), d)
	}}
	for _, p := range []struct {
		name string
		path path
	}{{"raw", raw}, {"rawbaggage", rawBaggage}, {"session", session}} {
		b.Run("path="+p.name, func(b *testing.B) { benchBroker(b, p.path, p.name != "raw") })
	}
}

func benchBroker(b *testing.B, p path, withSession bool) {
	pubCh, deliveries := topology(b, "in")
	ctx := otelsession.Bind(context.Background(), sessionFor(1))
	want := sessionFor(1).ChatID
	confirms := make([]*amqp.DeferredConfirmation, 0, b.N)
	failed := 0
	defer benchcpu.Time(b)()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		msg := amqp.Publishing{MessageId: strconv.Itoa(i), Body: []byte("hello")}
		pctx, span := p.publish(ctx, &msg, "chat", "in")
		dc, err := pubCh.PublishWithDeferredConfirmWithContext(pctx, "chat", "in", false, false, msg)
		span.End()
		if err != nil {
			b.Fatal(err)
		}
		confirms = append(confirms, dc)
	}
	for _, dc := range confirms {
		if !dc.Wait() {
			failed++
		}
	}
	for range b.N {
		var d amqp.Delivery
		select {
		case d = <-deliveries:
		case <-time.After(30 * time.Second):
			b.Fatal("no delivery within 30 s")
		}
		dctx, span, err := p.consume(&d)
		span.End()
		if err != nil {
			failed++
		}
		if withSession {
			if v, _ := otelsession.Lookup(dctx, otelsession.FieldChatID); v != want {
				failed++
			}
		}
		if err := d.Ack(false); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if failed > 0 {
		b.Fatalf("%d messages failed", failed)
	}
}
