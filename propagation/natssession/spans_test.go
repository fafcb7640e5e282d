package natssession_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/natssession"
)

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value)
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func spanNamed(t *testing.T, exp *tracetest.InMemoryExporter, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans named %q, want 1 (all: %v)", len(found), name, names(exp))
	}
	return found[0]
}

func names(exp *tracetest.InMemoryExporter) []string {
	var n []string
	for _, s := range exp.GetSpans() {
		n = append(n, s.Name)
	}
	return n
}

func checkAttrs(t *testing.T, s tracetest.SpanStub, want map[string]any) {
	t.Helper()
	got := attrs(s)
	for k, w := range want {
		v, ok := got[attribute.Key(k)]
		if !ok {
			t.Errorf("span %q: no attribute %s (has %v)", s.Name, k, s.Attributes)
			continue
		}
		if v.AsInterface() != w {
			t.Errorf("span %q: %s = %v, want %v", s.Name, k, v.AsInterface(), w)
		}
	}
}

// checkMessagingSpans checks the pair the messaging conventions describe: a
// producer span under the caller's span, and a consumer span whose parent is
// the producer span (extracted from the message) and which links to it.
func checkMessagingSpans(t *testing.T, exp *tracetest.InMemoryExporter, parent trace.SpanContext, subject string) (producer, consumer tracetest.SpanStub) {
	t.Helper()
	producer = spanNamed(t, exp, "publish "+subject)
	consumer = spanNamed(t, exp, "process "+subject)
	if producer.SpanKind != trace.SpanKindProducer {
		t.Errorf("producer span kind %v", producer.SpanKind)
	}
	if producer.Parent.SpanID() != parent.SpanID() {
		t.Errorf("producer span's parent %s, want the caller's span %s", producer.Parent.SpanID(), parent.SpanID())
	}
	checkAttrs(t, producer, map[string]any{
		"messaging.system":           "nats",
		"messaging.destination.name": subject,
		"messaging.operation.type":   "send",
		"messaging.operation.name":   "publish",
		"server.address":             "127.0.0.1",
	})
	if consumer.SpanKind != trace.SpanKindConsumer {
		t.Errorf("consumer span kind %v", consumer.SpanKind)
	}
	if !consumer.Parent.IsRemote() || consumer.Parent.SpanID() != producer.SpanContext.SpanID() ||
		consumer.SpanContext.TraceID() != producer.SpanContext.TraceID() {
		t.Errorf("consumer span's parent %v (remote %v), want the producer span %v",
			consumer.Parent.SpanID(), consumer.Parent.IsRemote(), producer.SpanContext.SpanID())
	}
	if len(consumer.Links) != 1 || consumer.Links[0].SpanContext.SpanID() != producer.SpanContext.SpanID() ||
		consumer.Links[0].SpanContext.TraceID() != producer.SpanContext.TraceID() {
		t.Errorf("consumer span links %v, want one link to the producer span %v", consumer.Links, producer.SpanContext.SpanID())
	}
	checkAttrs(t, consumer, map[string]any{
		"messaging.system":           "nats",
		"messaging.destination.name": subject,
		"messaging.operation.type":   "process",
		"messaging.operation.name":   "process",
	})
	return producer, consumer
}

func TestSpansCoreNATS(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	tp, exp := newTracing(t)
	pub := natssession.NewPublisher(natssession.WithPropagator(w3c), natssession.WithTracerProvider(tp), natssession.WithOutbound(toQueue))
	sub := natssession.NewConsumer(propagation.NewInbound(propagation.TrustAll),
		natssession.WithPropagator(w3c), natssession.WithTracerProvider(tp))

	ctx, root := tp.Tracer("test").Start(conversationFor(1).bind(context.Background()), "gateway turn")
	msg := receive(t, b, func(m *nats.Msg) error { return pub.Publish(ctx, b.nc, m) }, &nats.Msg{Subject: "chat.spans"})
	root.End()

	handlerErr := errors.New("tool failed")
	sub.Handler(context.Background(), func(ctx context.Context, _ *nats.Msg) error {
		if !trace.SpanFromContext(ctx).IsRecording() {
			t.Error("handler does not run inside the consumer span")
		}
		return handlerErr
	})(msg)

	_, consumer := checkMessagingSpans(t, exp, root.SpanContext(), "chat.spans")
	if consumer.Status.Code != codes.Error {
		t.Errorf("consumer span status %v, want Error from the handler", consumer.Status)
	}
}

func TestSpansJetStream(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	cons := b.stream(t, "SPANS", 0, "chat.>")
	tp, exp := newTracing(t)
	pub := natssession.NewPublisher(natssession.WithPropagator(w3c), natssession.WithTracerProvider(tp), natssession.WithOutbound(toQueue))
	sub := natssession.NewConsumer(propagation.NewInbound(propagation.TrustAll),
		natssession.WithPropagator(w3c), natssession.WithTracerProvider(tp))

	ctx, root := tp.Tracer("test").Start(conversationFor(2).bind(context.Background()), "gateway turn")
	if _, err := pub.PublishJetStream(ctx, b.js, &nats.Msg{Subject: "chat.js", Data: []byte("2")}, jetstream.WithMsgID("m-2")); err != nil {
		t.Fatal(err)
	}
	root.End()

	// The consumer span ends after the handler returns, so the handler hands
	// the message over and the test ends the span itself through Extract.
	msgs, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got jetstream.Msg
	for m := range msgs.Messages() {
		got = m
	}
	if got == nil {
		t.Fatalf("no message fetched: %v", msgs.Error())
	}
	_, span, err := sub.ExtractJetStream(context.Background(), got)
	if err != nil {
		t.Fatal(err)
	}
	span.End()
	if err := got.Ack(); err != nil {
		t.Fatal(err)
	}

	producer, consumer := checkMessagingSpans(t, exp, root.SpanContext(), "chat.js")
	checkAttrs(t, producer, map[string]any{"messaging.message.id": "m-2"})
	checkAttrs(t, consumer, map[string]any{"messaging.message.id": "m-2", "messaging.client.id": "workers"})
	checkAttrs(t, producer, map[string]any{"server.port": int64(b.srv.Addr().(*net.TCPAddr).Port)})
}

// A message without trace context gets a consumer span under the caller's
// span and no link: there is no creation context to link to.
func TestSpanWithoutTraceContextHasNoLink(t *testing.T) {
	t.Parallel()
	tp, exp := newTracing(t)
	sub := natssession.NewConsumer(propagation.NewInbound(propagation.TrustAll),
		natssession.WithPropagator(w3c), natssession.WithTracerProvider(tp))
	ctx, root := tp.Tracer("test").Start(context.Background(), "poll loop")
	_, span, err := sub.Extract(ctx, &nats.Msg{Subject: "chat.bare"})
	span.End()
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	s := spanNamed(t, exp, "process chat.bare")
	if s.Parent.SpanID() != root.SpanContext().SpanID() || len(s.Links) != 0 {
		t.Errorf("parent %v links %v, want parent %v and no link", s.Parent.SpanID(), s.Links, root.SpanContext().SpanID())
	}
}

// A refused session is recorded on the consumer span, which is not failed
// for it: the message is still processed.
func TestSpanRecordsARefusedSession(t *testing.T) {
	t.Parallel()
	tp, exp := newTracing(t)
	sub := natssession.NewConsumer(propagation.NewInbound(propagation.TrustAll),
		natssession.WithPropagator(w3c), natssession.WithTracerProvider(tp))
	_, span, err := sub.Extract(context.Background(), &nats.Msg{Subject: "chat.bad", Header: nats.Header{
		"baggage": {"session.chat_id=a,session.chat_id=b"},
	}})
	span.End()
	if !errors.Is(err, propagation.ErrDuplicateMember) {
		t.Fatalf("err = %v", err)
	}
	s := spanNamed(t, exp, "process chat.bad")
	if len(s.Events) != 2 || s.Events[0].Name != "exception" || s.Status.Code == codes.Error {
		t.Errorf("events %v status %v: want one recorded error and no failed status", s.Events, s.Status)
	}
	checkRefusal(t, s, "session.chat_id: session member repeated")
}

// checkRefusal checks the session.refused event and its reason.
func checkRefusal(t *testing.T, s tracetest.SpanStub, reason string) {
	t.Helper()
	for _, e := range s.Events {
		if e.Name != "session.refused" {
			continue
		}
		for _, kv := range e.Attributes {
			if kv.Key == "session.refusal.reason" && strings.Contains(kv.Value.AsString(), reason) {
				return
			}
		}
		t.Errorf("span %q: session.refused event %v does not say %q", s.Name, e.Attributes, reason)
		return
	}
	t.Errorf("span %q: no session.refused event (events %v)", s.Name, s.Events)
}

// A session stripped because the publisher is not trusted is recorded too;
// a message that offered none records nothing.
func TestSpanRecordsAStrippedSession(t *testing.T) {
	t.Parallel()
	tp, exp := newTracing(t)
	sub := natssession.NewConsumer(propagation.NewInbound(propagation.TrustNone),
		natssession.WithPropagator(w3c), natssession.WithTracerProvider(tp))
	for _, m := range []*nats.Msg{
		{Subject: "chat.untrusted", Header: nats.Header{"baggage": {"session.chat_id=42,tenant=acme"}}},
		{Subject: "chat.none", Header: nats.Header{"baggage": {"tenant=session"}}},
	} {
		_, span, err := sub.Extract(context.Background(), m)
		span.End()
		if err != nil {
			t.Fatal(err)
		}
	}
	checkRefusal(t, spanNamed(t, exp, "process chat.untrusted"), "untrusted: the session carried no valid signature and the peer (nats chat.untrusted) is not trusted")
	if s := spanNamed(t, exp, "process chat.none"); len(s.Events) != 0 {
		t.Errorf("a message without a session: events %v", s.Events)
	}
}
