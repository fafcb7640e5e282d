package amqpsession_test

// These tests carry sessions through a real RabbitMQ server (Debian's
// rabbitmq-server, started by internal/rabbitmqtest on 127.0.0.1 with random
// ports): publisher-confirmed publishes, manual-ack consumes, and messages
// nacked and delivered again.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/otelsession/sessiontrace"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/amqpsession"
	"github.com/sessionwire/sessionwire/propagation/internal/sessiontest"
)

// signing returns an outbound policy that signs every message for the
// exchange "chat" and an inbound policy that trusts no exchange, so that a
// session is accepted only through its signature, bound to the message's
// id, exchange and routing key.
func signing(t testing.TB) (*propagation.Outbound, *propagation.Inbound) {
	t.Helper()
	key := propagation.Key{ID: "gw-1", Secret: []byte(strings.Repeat("k", 32))}
	s, err := propagation.NewSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	v, err := propagation.NewVerifier([]propagation.Key{key})
	if err != nil {
		t.Fatal(err)
	}
	return propagation.NewOutbound(propagation.AllowNames(propagation.TransportAMQP, "chat"), propagation.WithSigner(s)),
		propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(v))
}

// topology connects to the broker and declares the exchange "chat" with a
// queue of the test's own bound to it under keys; it returns a publishing
// channel in confirm mode and the queue's manual-ack deliveries.
func topology(t testing.TB, keys ...string) (*amqp.Channel, <-chan amqp.Delivery) {
	t.Helper()
	conn, err := amqp.Dial(rabbit.URL(t))
	if err != nil {
		t.Fatalf("connect to RabbitMQ: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	pubCh, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := pubCh.Confirm(false); err != nil {
		t.Fatalf("confirm mode: %v", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare("chat", amqp.ExchangeDirect, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if err := ch.QueueBind(q.Name, k, "chat", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch.Qos(16, 0, false); err != nil {
		t.Fatal(err)
	}
	deliveries, err := ch.Consume(q.Name, "", false, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pubCh, deliveries
}

// publishConfirmed publishes msg and waits for the broker's confirm; the
// producer span covers both.
func publishConfirmed(ctx context.Context, t *testing.T, ch *amqp.Channel, pub *amqpsession.Publisher, msg amqp.Publishing, key string) {
	t.Helper()
	ctx, span := pub.Inject(ctx, &msg, "chat", key)
	defer span.End()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "chat", key, true, false, msg)
	if err == nil {
		var ok bool
		if ok, err = dc.WaitContext(ctx); err == nil && !ok {
			err = errors.New("the broker nacked the publish")
		}
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		t.Fatalf("publish %s: %v", msg.MessageId, err)
	}
}

func next(t *testing.T, deliveries <-chan amqp.Delivery) amqp.Delivery {
	t.Helper()
	select {
	case d, ok := <-deliveries:
		if !ok {
			t.Fatal("the broker closed the consumer")
		}
		return d
	case <-time.After(30 * time.Second):
		t.Fatal("no delivery within 30 s")
	}
	panic("unreachable")
}

// Conversations' signed messages are published with confirms and consumed
// with manual acks; every fourth is nacked on its first delivery and comes
// back, redelivered with the same message_id, in the same session, its
// signature still verifying. Counted: lost, acked twice, misrouted; and the
// spans: one consumer span per delivery, each the child of its message's
// producer span.
func TestBrokerConfirmedPublishNackRedelivery(t *testing.T) {
	const convs, perConv = 10, 8
	pubCh, deliveries := topology(t, "in")
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithSpanProcessor(sessiontrace.NewSpanProcessor(sessiontrace.Redaction{})))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	out, in := signing(t)
	pub := amqpsession.NewPublisher(amqpsession.WithPropagator(w3c), amqpsession.WithTracerProvider(tp), amqpsession.WithOutbound(out))
	cons := amqpsession.NewConsumer(in, amqpsession.WithPropagator(w3c), amqpsession.WithTracerProvider(tp))

	for seq := range perConv {
		for conv := range convs {
			msg := amqp.Publishing{MessageId: fmt.Sprintf("m-%d-%d", conv, seq), Body: fmt.Appendf(nil, "%d %d", conv, seq)}
			publishConfirmed(otelsession.Bind(context.Background(), sessionFor(conv)), t, pubCh, pub, msg, "in")
		}
	}

	acked, nacked := map[string]int{}, map[string]bool{}
	var misrouted []string
	redelivered := 0
	for len(acked) < convs*perConv {
		d := next(t, deliveries)
		ctx, span, err := cons.Extract(workerBase(), &d)
		var conv, seq int
		if _, serr := fmt.Sscanf(string(d.Body), "%d %d", &conv, &seq); serr != nil {
			t.Fatalf("unreadable body %q", d.Body)
		}
		if want := fmt.Sprintf("m-%d-%d", conv, seq); d.MessageId != want {
			misrouted = append(misrouted, fmt.Sprintf("message %s arrived with message_id %q", want, d.MessageId))
		}
		if err != nil {
			misrouted = append(misrouted, fmt.Sprintf("%s (redelivered %v): %v", d.MessageId, d.Redelivered, err))
		} else if df := diff(ctx, received(sessionFor(conv)), sessionFor(conv).Stateless); df != "" {
			misrouted = append(misrouted, fmt.Sprintf("%s (redelivered %v):\n\t%s", d.MessageId, d.Redelivered, df))
		}
		if d.Redelivered {
			redelivered++
		}
		if seq%4 == 0 && !nacked[d.MessageId] {
			nacked[d.MessageId] = true
			if d.Redelivered {
				t.Errorf("%s: a first delivery marked redelivered", d.MessageId)
			}
			if err := d.Nack(false, true); err != nil {
				t.Fatal(err)
			}
		} else {
			acked[d.MessageId]++
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		}
		span.End()
	}
	var lost, dup int
	for conv := range convs {
		for seq := range perConv {
			switch n := acked[fmt.Sprintf("m-%d-%d", conv, seq)]; {
			case n == 0:
				lost++
			case n > 1:
				dup += n - 1
			}
		}
	}
	t.Logf("%d messages, %d nacked and delivered again (%d marked redelivered): lost %d, acked twice %d, misrouted %d",
		convs*perConv, len(nacked), redelivered, lost, dup, len(misrouted))
	if lost != 0 || dup != 0 || len(misrouted) != 0 {
		t.Errorf("lost %d, acked twice %d, misrouted %d:\n%s", lost, dup, len(misrouted), strings.Join(misrouted, "\n"))
	}
	if redelivered != len(nacked) || len(nacked) != convs*perConv/4 {
		t.Errorf("%d nacked, %d redelivered, want %d each", len(nacked), redelivered, convs*perConv/4)
	}
	if n, want := in.Counts().Signed, uint64(convs*perConv+len(nacked)); n != want {
		t.Errorf("%d deliveries accepted through their signature, want %d", n, want)
	}
	sessiontest.QueueSpans{
		ProducerName: "publish chat", ConsumerName: "process chat",
		Producer: map[attribute.Key]string{"messaging.system": "rabbitmq", "messaging.destination.name": "chat",
			"messaging.rabbitmq.destination.routing_key": "in", "messaging.operation.type": "send"},
		Consumer: map[attribute.Key]string{"messaging.system": "rabbitmq", "messaging.destination.name": "chat",
			"messaging.rabbitmq.destination.routing_key": "in", "messaging.operation.type": "process"},
		Messages: convs * perConv, Deliveries: convs*perConv + len(nacked),
	}.Check(t, exp.GetSpans())
}

// A signed message captured off the broker and published again under
// another message_id, or with another routing key, is refused with the
// reason NATS gives for a moved message (ErrBadSignature). Published again
// unchanged, it verifies: like a JetStream message outside the stream's
// duplicate window, an exact copy is the consumer's to deduplicate by its
// message_id.
func TestBrokerMovedMessageIsRefused(t *testing.T) {
	before := sessiontest.Metrics(t)
	pubCh, deliveries := topology(t, "in", "audit")
	out, in := signing(t)
	pub := amqpsession.NewPublisher(amqpsession.WithPropagator(w3c), amqpsession.WithOutbound(out))
	cons := amqpsession.NewConsumer(in, amqpsession.WithPropagator(w3c))
	ctx := context.Background()
	publishConfirmed(otelsession.Bind(ctx, sessionFor(1)), t, pubCh, pub, amqp.Publishing{MessageId: "m-1", Body: []byte("hi")}, "in")
	captured := next(t, deliveries)
	if err := captured.Ack(false); err != nil {
		t.Fatal(err)
	}

	// Published raw: the captured table as is, no outbound policy.
	again := func(id, key string) {
		msg := amqp.Publishing{MessageId: id, Headers: captured.Headers, Body: captured.Body}
		if err := pubCh.PublishWithContext(ctx, "chat", key, false, false, msg); err != nil {
			t.Fatal(err)
		}
	}
	again("m-2", "in")
	again("m-1", "audit")
	again("m-1", "in")
	for _, d := range []amqp.Delivery{captured, next(t, deliveries), next(t, deliveries), next(t, deliveries)} {
		name := d.RoutingKey + "/" + d.MessageId
		got, span, err := cons.Extract(workerBase(), &d)
		span.End()
		if d.DeliveryTag != captured.DeliveryTag {
			if aerr := d.Ack(false); aerr != nil {
				t.Fatal(aerr)
			}
		}
		_, st := otelsession.Lookup(got, otelsession.FieldChatID)
		if name == "in/m-1" {
			if err != nil || st != otelsession.Set {
				t.Errorf("%s, signed for this id and key: %v (chat id %s)", name, err, st)
			}
			continue
		}
		if !errors.Is(err, propagation.ErrBadSignature) || st != otelsession.Unset {
			t.Errorf("%s, moved: err %v, chat id %s; want ErrBadSignature and no session", name, err, st)
		}
	}
	if c := in.Counts(); c.Signed != 2 || c.BadSignature != 2 {
		t.Errorf("counts %+v, want 2 signed (the original and its exact copy) and 2 bad signatures", c)
	}
	// The same metrics as every transport, under this one's name.
	sessiontest.MetricsGrew(t, before, map[string]int64{
		"sessionwire.session.outbound sessionwire.outcome=sent sessionwire.signed=true sessionwire.transport=amqp":            1,
		"sessionwire.session.inbound sessionwire.outcome=accepted sessionwire.reason= sessionwire.transport=amqp":             2,
		"sessionwire.session.inbound sessionwire.outcome=refused sessionwire.reason=bad_signature sessionwire.transport=amqp": 2,
	})
}
