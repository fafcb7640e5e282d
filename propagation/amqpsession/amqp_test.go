package amqpsession_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/amqpsession"
	"github.com/sessionwire/sessionwire/propagation/internal/sessiontest"
)

func TestTableCarrierReads(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		table  amqp.Table
		get    string
		values []string
	}{
		{"string", amqp.Table{"baggage": "a=1"}, "a=1", []string{"a=1"}},
		{"byte array", amqp.Table{"baggage": []byte("a=1")}, "a=1", []string{"a=1"}},
		{"array of text, other types skipped", amqp.Table{"baggage": []any{"a=1", int32(5), []byte("b=2"), nil}}, "a=1", []string{"a=1", "b=2"}},
		{"integer", amqp.Table{"baggage": int32(7)}, "", nil},
		{"boolean", amqp.Table{"baggage": true}, "", nil},
		{"nil", amqp.Table{"baggage": nil}, "", nil},
		{"timestamp", amqp.Table{"baggage": time.Unix(0, 0)}, "", nil},
		{"nested table", amqp.Table{"baggage": amqp.Table{"session.chat_id": "x"}}, "", nil},
		{"decimal", amqp.Table{"baggage": amqp.Decimal{Scale: 1, Value: 5}}, "", nil},
		{"canonical key when the exact one is absent", amqp.Table{"Baggage": "a=1"}, "a=1", []string{"a=1"}},
		{"exact key wins, even when not text", amqp.Table{"baggage": int64(1), "Baggage": "forged=1"}, "", nil},
		{"several spellings: all, in key order", amqp.Table{"bAGGAGE": "c=3", "BAGGAGE": "b=2", "Baggage": "a=1"}, "b=2", []string{"b=2", "a=1", "c=3"}},
		{"missing", amqp.Table{"other": "x"}, "", nil},
		{"nil table", nil, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := amqpsession.TableCarrier(tc.table)
			if got := c.Get("baggage"); got != tc.get {
				t.Errorf("Get = %q, want %q", got, tc.get)
			}
			if got := c.Values("baggage"); !slices.Equal(got, tc.values) {
				t.Errorf("Values = %q, want %q", got, tc.values)
			}
		})
	}
}

func TestTableCarrierSetReplacesEverySpelling(t *testing.T) {
	t.Parallel()
	tb := amqp.Table{"Baggage": "stale", "BAGGAGE": []byte("stale"), "baggage": int32(1), "x-retry": int32(2)}
	c := amqpsession.TableCarrier(tb)
	c.Set("baggage", "new=1")
	if len(tb) != 2 || tb["baggage"] != "new=1" || tb["x-retry"] != int32(2) {
		t.Errorf("after Set: %v", tb)
	}
	keys := c.Keys()
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"baggage", "x-retry"}) {
		t.Errorf("Keys = %v", keys)
	}
	var nilc amqpsession.TableCarrier
	nilc.Set("baggage", "x") // must not panic
}

// deliver returns the Delivery a consumer gets for msg: the broker stores
// the table's bytes, and some publishers send text as byte arrays.
func deliver(msg amqp.Publishing, exchange, key string, asBytes bool) *amqp.Delivery {
	h := amqp.Table{}
	for k, v := range msg.Headers {
		if s, ok := v.(string); ok && asBytes {
			v = []byte(s)
		}
		h[strings.Clone(k)] = v
	}
	return &amqp.Delivery{Headers: h, Exchange: exchange, RoutingKey: key, DeliveryTag: 9, MessageId: msg.MessageId, Body: msg.Body}
}

// Concurrent conversations each carry exactly their own session, with
// Cleared fields Cleared, whether the table holds strings or byte arrays.
func TestRoundTripConcurrentSessions(t *testing.T) {
	t.Parallel()
	pub := amqpsession.NewPublisher(amqpsession.WithPropagator(w3c), amqpsession.WithOutbound(toQueue))
	cons := amqpsession.NewConsumer(propagation.NewInbound(propagation.TrustAll), amqpsession.WithPropagator(w3c))
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			s := sessionFor(i)
			msg := amqp.Publishing{Body: []byte("hi"), Headers: amqp.Table{"x-retry": int32(1)}}
			_, span := pub.Inject(otelsession.Bind(context.Background(), s), &msg, "chat", "in")
			span.End()
			got, span, err := cons.Extract(workerBase(), deliver(msg, "chat", "in", i%2 == 1))
			span.End()
			if err != nil {
				t.Errorf("message %d: %v", i, err)
			}
			if d := diff(got, received(s), s.Stateless); d != "" {
				t.Errorf("message %d:\n\t%s", i, d)
			}
		})
	}
	wg.Wait()
}

func TestClearedSessionStaysCleared(t *testing.T) {
	t.Parallel()
	pub := amqpsession.NewPublisher(amqpsession.WithPropagator(w3c), amqpsession.WithOutbound(toQueue))
	cons := amqpsession.NewConsumer(propagation.NewInbound(propagation.TrustAll), amqpsession.WithPropagator(w3c))
	var msg amqp.Publishing
	pub.Inject(otelsession.Clear(otelsession.Bind(context.Background(), sessionFor(1))), &msg, "", "jobs")
	got, span, err := cons.Extract(workerBase(), deliver(msg, "", "jobs", false))
	span.End()
	if err != nil {
		t.Fatal(err)
	}
	want := map[otelsession.Field]sessiontest.FieldWant{}
	for _, f := range otelsession.Fields() {
		if f.InSession() && f.Scope() == otelsession.Remote {
			want[f] = sessiontest.FieldWant{State: otelsession.Cleared}
		}
	}
	if d := diff(got, want, false); d != "" {
		t.Errorf("cleared session:\n\t%s", d)
	}
}

func TestHostileAndMissingTables(t *testing.T) {
	t.Parallel()
	cons := amqpsession.NewConsumer(propagation.NewInbound(propagation.TrustAll), amqpsession.WithPropagator(w3c))
	for _, tc := range []struct {
		name  string
		table amqp.Table
		err   error
	}{
		{"no table", nil, nil},
		{"other baggage only", amqp.Table{"baggage": "app.tenant=acme"}, nil},
		{"baggage of the wrong types", amqp.Table{"baggage": int32(1), "traceparent": 3.5, "tracestate": amqp.Table{}}, nil},
		{"session key repeated in an array", amqp.Table{"baggage": []any{"session.chat_id=a", []byte("session.chat_id=b")}}, propagation.ErrDuplicateMember},
		{"two spellings, no exact key", amqp.Table{"Baggage": "session.chat_id=a", "BAGGAGE": "session.chat_id=b"}, propagation.ErrDuplicateMember},
		{"over 8192 bytes", amqp.Table{"baggage": "session.chat_id=" + strings.Repeat("x", 9000)}, propagation.ErrBaggageTooLarge},
		{"raw byte 0xff", amqp.Table{"baggage": []byte("session.chat_id=\xff")}, propagation.ErrMalformedMember},
		{"encoded CR LF", amqp.Table{"baggage": "session.chat_id=a%0D%0Ab"}, propagation.ErrInvalidValue},
		{"local field", amqp.Table{"baggage": "session.browser_control_principal=p"}, propagation.ErrLocalField},
		{"bad traceparent", amqp.Table{"traceparent": "00-zz-zz-01", "baggage": "session.chat_id=a%"}, propagation.ErrMalformedMember},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, span, err := cons.Extract(workerBase(), &amqp.Delivery{Headers: tc.table, Exchange: "chat"})
			span.End()
			if tc.err == nil && err != nil || tc.err != nil && !errors.Is(err, tc.err) {
				t.Errorf("err = %v, want %v", err, tc.err)
			}
			if err != nil && !strings.Contains(err.Error(), `"chat"`) {
				t.Errorf("error %q does not name the exchange", err)
			}
			if d := diff(got, nil, false); d != "" {
				t.Errorf("session:\n\t%s", d)
			}
		})
	}
}

func TestUntrustedExchangeStripsTheSession(t *testing.T) {
	t.Parallel()
	tp, _ := newTracing(t)
	pub := amqpsession.NewPublisher(amqpsession.WithPropagator(w3c), amqpsession.WithTracerProvider(tp), amqpsession.WithOutbound(toQueue))
	trusted := func(_ context.Context, p propagation.Peer) bool {
		return p.Transport == "amqp" && p.Name == amqpsession.DefaultExchange
	}
	s := sessionFor(3)
	for _, tc := range []struct {
		name     string
		policy   *propagation.Inbound
		exchange string
		want     map[otelsession.Field]sessiontest.FieldWant
	}{
		{"trusted default exchange", propagation.NewInbound(trusted), "", received(s)},
		{"untrusted exchange", propagation.NewInbound(trusted), "partner", nil},
		{"nil policy", nil, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cons := amqpsession.NewConsumer(tc.policy, amqpsession.WithPropagator(w3c))
			var msg amqp.Publishing
			ctx, span := pub.Inject(otelsession.Bind(withTenant(context.Background()), s), &msg, tc.exchange, "jobs")
			span.End()
			got, cspan, err := cons.Extract(context.Background(), deliver(msg, tc.exchange, "jobs", false))
			cspan.End()
			if err != nil {
				t.Fatal(err)
			}
			if d := diff(got, tc.want, s.Stateless && tc.want != nil); d != "" {
				t.Errorf("session:\n\t%s", d)
			}
			if baggage.FromContext(got).Member("app.tenant").Value() != "acme" {
				t.Error("app.tenant lost")
			}
			if trace.SpanContextFromContext(got).TraceID() != trace.SpanContextFromContext(ctx).TraceID() {
				t.Error("trace context lost")
			}
		})
	}
}

func TestSessionEgressPerExchange(t *testing.T) {
	t.Parallel()
	cons := amqpsession.NewConsumer(propagation.NewInbound(propagation.TrustAll), amqpsession.WithPropagator(w3c))
	internal := amqpsession.WithOutbound(propagation.NewOutbound(func(_ context.Context, d propagation.Dest) bool {
		return d.Transport == propagation.TransportAMQP && d.Name != "partner"
	}))
	for _, tc := range []struct {
		name        string
		opt         amqpsession.Option
		exchange    string
		bare        bool // ctx has no baggage; the message already carries a session
		wantSession bool
	}{
		{"default withholds, as on every transport", nil, "chat", false, false},
		{"allowed exchange", internal, "chat", false, true},
		{"refused exchange", internal, "partner", false, false},
		{"refused exchange, session already in the table", internal, "partner", true, false},
		{"allowed exchange, a session already in the table is not forwarded", internal, "chat", true, false},
		{"refusing policy", amqpsession.WithOutbound(propagation.NewOutbound(propagation.AllowNone)), "chat", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pub := amqpsession.NewPublisher(amqpsession.WithPropagator(w3c), tc.opt)
			ctx := context.Background()
			var msg amqp.Publishing
			if tc.bare {
				msg.Headers = amqp.Table{"Baggage": []byte("session.chat_id=stale,app.tenant=acme"), "baggage": "session.user_id=stale"}
			} else {
				ctx = otelsession.Bind(withTenant(ctx), sessionFor(5))
			}
			pub.Inject(ctx, &msg, tc.exchange, "k")
			got, span, err := cons.Extract(context.Background(), deliver(msg, tc.exchange, "k", false))
			span.End()
			if err != nil {
				t.Fatal(err)
			}
			_, st := otelsession.Lookup(got, otelsession.FieldChatID)
			if (st != otelsession.Unset) != tc.wantSession {
				t.Errorf("chat id %s, want session = %v (table %v)", st, tc.wantSession, msg.Headers)
			}
			if _, st := otelsession.Lookup(got, otelsession.FieldUserID); (st != otelsession.Unset) != tc.wantSession {
				t.Errorf("user id %s, want session = %v (table %v)", st, tc.wantSession, msg.Headers)
			}
			if baggage.FromContext(got).Member("app.tenant").Value() != "acme" {
				t.Errorf("app.tenant lost (table %v)", msg.Headers)
			}
		})
	}
}

func TestSpans(t *testing.T) {
	t.Parallel()
	tp, exp := newTracing(t)
	pub := amqpsession.NewPublisher(amqpsession.WithPropagator(w3c), amqpsession.WithTracerProvider(tp), amqpsession.WithOutbound(toQueue))
	cons := amqpsession.NewConsumer(propagation.NewInbound(propagation.TrustAll), amqpsession.WithPropagator(w3c), amqpsession.WithTracerProvider(tp))
	msg := amqp.Publishing{MessageId: "m-1"}
	_, span := pub.Inject(otelsession.Bind(context.Background(), sessionFor(1)), &msg, "", "jobs")
	span.End()
	_, cspan, err := cons.Extract(context.Background(), deliver(msg, "", "jobs", false))
	cspan.End()
	if err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	prod, proc := spans[0], spans[1]
	if prod.Name != "publish amq.default" || prod.SpanKind != trace.SpanKindProducer {
		t.Errorf("producer span %q kind %v", prod.Name, prod.SpanKind)
	}
	if proc.Name != "process amq.default" || proc.SpanKind != trace.SpanKindConsumer {
		t.Errorf("consumer span %q kind %v", proc.Name, proc.SpanKind)
	}
	if proc.Parent.SpanID() != prod.SpanContext.SpanID() || !proc.Parent.IsRemote() {
		t.Errorf("consumer parent %v, want producer %v", proc.Parent.SpanID(), prod.SpanContext.SpanID())
	}
	if len(proc.Links) != 1 || proc.Links[0].SpanContext.SpanID() != prod.SpanContext.SpanID() {
		t.Errorf("consumer links %v, want the producer span", proc.Links)
	}
	want := map[attribute.Key]any{
		"messaging.system": "rabbitmq", "messaging.destination.name": "", "messaging.operation.type": "process",
		"messaging.rabbitmq.destination.routing_key": "jobs", "messaging.rabbitmq.message.delivery_tag": int64(9),
		"messaging.message.id": "m-1",
	}
	got := map[attribute.Key]any{}
	for _, kv := range proc.Attributes {
		got[kv.Key] = kv.Value.AsInterface()
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("consumer %s = %v, want %v", k, got[k], v)
		}
	}
}

func TestNilMessages(t *testing.T) {
	t.Parallel()
	_, span := amqpsession.NewPublisher().Inject(context.Background(), nil, "x", "y")
	span.End()
	got, span, err := amqpsession.NewConsumer(nil).Extract(workerBase(), nil)
	span.End()
	if !errors.Is(err, amqpsession.ErrNilMessage) {
		t.Errorf("err = %v", err)
	}
	if d := diff(got, nil, false); d != "" {
		t.Errorf("session:\n\t%s", d)
	}
}
