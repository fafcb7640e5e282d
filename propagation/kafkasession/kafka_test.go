package kafkasession_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/internal/sessiontest"
	"github.com/sessionwire/sessionwire/propagation/kafkasession"
)

func h(kv ...string) []kgo.RecordHeader {
	var hs []kgo.RecordHeader
	for i := 0; i+1 < len(kv); i += 2 {
		hs = append(hs, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
	}
	return hs
}

func TestRecordCarrierReads(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		headers []kgo.RecordHeader
		get     string
		values  []string
	}{
		{"exact key", h("baggage", "a=1"), "a=1", []string{"a=1"}},
		{"repeated exact key, in order", h("baggage", "a=1", "other", "x", "baggage", "b=2"), "a=1", []string{"a=1", "b=2"}},
		{"canonical key when the exact one is absent", h("Baggage", "a=1"), "a=1", []string{"a=1"}},
		{"exact key wins over other spellings", h("Baggage", "forged=1", "baggage", "a=1", "BAGGAGE", "forged=2"), "a=1", []string{"a=1"}},
		{"several spellings, no exact: all, in order", h("Baggage", "a=1", "BAGGAGE", "b=2"), "a=1", []string{"a=1", "b=2"}},
		{"nil value reads empty", []kgo.RecordHeader{{Key: "baggage"}}, "", []string{""}},
		{"missing key", h("other", "x"), "", nil},
		{"no headers", nil, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := kafkasession.NewRecordCarrier(&kgo.Record{Headers: tc.headers})
			if got := c.Get("baggage"); got != tc.get {
				t.Errorf("Get = %q, want %q", got, tc.get)
			}
			if got := c.Values("baggage"); !slices.Equal(got, tc.values) {
				t.Errorf("Values = %q, want %q", got, tc.values)
			}
		})
	}
	nilc := kafkasession.NewRecordCarrier(nil)
	nilc.Set("baggage", "x") // must not panic
	if nilc.Get("baggage") != "" || nilc.Keys() != nil {
		t.Error("nil record carrier is not empty")
	}
}

func TestRecordCarrierSetReplacesEverySpelling(t *testing.T) {
	t.Parallel()
	r := &kgo.Record{Headers: h("a", "1", "baggage", "old", "Baggage", "stale", "b", "2", "baggage", "old2")}
	c := kafkasession.NewRecordCarrier(r)
	c.Set("baggage", "new")
	want := h("a", "1", "b", "2", "baggage", "new")
	if len(r.Headers) != len(want) {
		t.Fatalf("headers %v, want %v", r.Headers, want)
	}
	for i := range want {
		if r.Headers[i].Key != want[i].Key || string(r.Headers[i].Value) != string(want[i].Value) {
			t.Errorf("header %d = %s=%s, want %s=%s", i, r.Headers[i].Key, r.Headers[i].Value, want[i].Key, want[i].Value)
		}
	}
	if k := c.Keys(); !slices.Equal(k, []string{"a", "b", "baggage"}) {
		t.Errorf("Keys = %v", k)
	}
}

// Keys lists each key once, in order of first appearance, for a record with
// a few headers and for one with many (the two ways it deduplicates).
func TestRecordCarrierKeysAreDistinct(t *testing.T) {
	t.Parallel()
	for _, n := range []int{3, 40} {
		var kv, want []string
		for i := range n {
			k := fmt.Sprint("k", i%(n/2+1))
			kv = append(kv, k, "v")
			if !slices.Contains(want, k) {
				want = append(want, k)
			}
		}
		if got := kafkasession.NewRecordCarrier(&kgo.Record{Headers: h(kv...)}).Keys(); !slices.Equal(got, want) {
			t.Errorf("%d headers: Keys = %v, want %v", n, got, want)
		}
	}
}

// wire returns r as a consumer receives it: a new record with a copy of its
// headers, topic, partition and offset (the broker stores bytes, not Go
// values).
func wire(r *kgo.Record, partition int32, offset int64) *kgo.Record {
	out := &kgo.Record{Topic: r.Topic, Partition: partition, Offset: offset, Value: slices.Clone(r.Value)}
	for _, hd := range r.Headers {
		out.Headers = append(out.Headers, kgo.RecordHeader{Key: strings.Clone(hd.Key), Value: slices.Clone(hd.Value)})
	}
	return out
}

// Records produced by concurrent conversations each carry exactly their own
// session to a consumer whose poll loop has a session of its own; Cleared
// fields stay Cleared.
func TestRoundTripConcurrentSessions(t *testing.T) {
	t.Parallel()
	pub := kafkasession.NewPublisher(kafkasession.WithPropagator(w3c), kafkasession.WithOutbound(toQueue))
	cons := kafkasession.NewConsumer(propagation.NewInbound(propagation.TrustAll), kafkasession.WithPropagator(w3c))
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			s := sessionFor(i)
			ctx := otelsession.Bind(context.Background(), s)
			r := &kgo.Record{Topic: "chat-in", Value: []byte("hi")}
			_, span := pub.Inject(ctx, r)
			span.End()
			got, span, err := cons.Extract(workerBase(), wire(r, 0, int64(i)))
			span.End()
			if err != nil {
				t.Errorf("record %d: %v", i, err)
			}
			if d := diff(got, received(s), s.Stateless); d != "" {
				t.Errorf("record %d:\n\t%s", i, d)
			}
		})
	}
	wg.Wait()
}

// A Cleared session (otelsession.Clear) arrives Cleared, field by field.
func TestClearedSessionStaysCleared(t *testing.T) {
	t.Parallel()
	pub := kafkasession.NewPublisher(kafkasession.WithPropagator(w3c), kafkasession.WithOutbound(toQueue))
	cons := kafkasession.NewConsumer(propagation.NewInbound(propagation.TrustAll), kafkasession.WithPropagator(w3c))
	ctx := otelsession.Clear(otelsession.Bind(context.Background(), sessionFor(1)))
	r := &kgo.Record{Topic: "chat-in"}
	pub.Inject(ctx, r)
	got, span, err := cons.Extract(workerBase(), wire(r, 0, 0))
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

// Records without a session, or with a forged, malformed or oversized one,
// read wholly Unset, never the poll loop's session and never half of one.
func TestHostileAndMissingHeaders(t *testing.T) {
	t.Parallel()
	cons := kafkasession.NewConsumer(propagation.NewInbound(propagation.TrustAll), kafkasession.WithPropagator(w3c))
	for _, tc := range []struct {
		name    string
		headers []kgo.RecordHeader
		err     error
	}{
		{"no headers", nil, nil},
		{"other baggage only", h("baggage", "app.tenant=acme"), nil},
		{"session key repeated across headers", h("baggage", "session.chat_id=a", "baggage", "session.chat_id=b"), propagation.ErrDuplicateMember},
		{"two spellings, no exact key", h("Baggage", "session.chat_id=a", "BAGGAGE", "session.chat_id=b"), propagation.ErrDuplicateMember},
		{"over 8192 bytes", h("baggage", "session.chat_id="+strings.Repeat("x", 9000)), propagation.ErrBaggageTooLarge},
		{"raw byte 0xff in the value", h("baggage", "session.chat_id=\xff"), propagation.ErrMalformedMember},
		{"raw CR LF in the value", h("baggage", "session.chat_id=a\r\nsession.user_id=b"), propagation.ErrMalformedMember},
		{"encoded NUL inside a value", h("baggage", "session.chat_id=a%00b"), propagation.ErrInvalidValue},
		{"local field", h("baggage", "session.ui_session_id=tab"), propagation.ErrLocalField},
		{"binary garbage", []kgo.RecordHeader{{Key: "baggage", Value: []byte{0, 1, 2, 0xfe, '=', ','}}}, nil},
		{"empty key and nil value", []kgo.RecordHeader{{Key: ""}, {Key: "baggage"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, span, err := cons.Extract(workerBase(), &kgo.Record{Topic: "chat-in", Headers: tc.headers})
			span.End()
			if tc.err == nil && err != nil || tc.err != nil && !errors.Is(err, tc.err) {
				t.Errorf("err = %v, want %v", err, tc.err)
			}
			if err != nil && !strings.Contains(err.Error(), `"chat-in"`) {
				t.Errorf("error %q does not name the topic", err)
			}
			if d := diff(got, nil, false); d != "" {
				t.Errorf("session:\n\t%s", d)
			}
		})
	}
}

// Untrusted topics lose the session; trace context and other baggage pass.
func TestUntrustedTopicStripsTheSession(t *testing.T) {
	t.Parallel()
	tp, _ := newTracing(t)
	pub := kafkasession.NewPublisher(kafkasession.WithPropagator(w3c), kafkasession.WithTracerProvider(tp), kafkasession.WithOutbound(toQueue))
	trusted := func(_ context.Context, p propagation.Peer) bool { return p.Transport == "kafka" && p.Name == "chat-in" }
	s := sessionFor(3)
	for _, tc := range []struct {
		name   string
		policy *propagation.Inbound
		topic  string
		want   map[otelsession.Field]sessiontest.FieldWant
	}{
		{"trusted topic", propagation.NewInbound(trusted), "chat-in", received(s)},
		{"untrusted topic", propagation.NewInbound(trusted), "partner-in", nil},
		{"nil policy", nil, "chat-in", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cons := kafkasession.NewConsumer(tc.policy, kafkasession.WithPropagator(w3c))
			ctx := otelsession.Bind(withTenant(context.Background()), s)
			r := &kgo.Record{Topic: tc.topic}
			ctx, span := pub.Inject(ctx, r)
			span.End()
			got, cspan, err := cons.Extract(context.Background(), wire(r, 0, 0))
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

func TestSessionEgressPerTopic(t *testing.T) {
	t.Parallel()
	cons := kafkasession.NewConsumer(propagation.NewInbound(propagation.TrustAll), kafkasession.WithPropagator(w3c))
	internal := kafkasession.WithOutbound(propagation.NewOutbound(func(_ context.Context, d propagation.Dest) bool {
		return d.Transport == propagation.TransportKafka && !strings.HasPrefix(d.Name, "partner-")
	}))
	for _, tc := range []struct {
		name        string
		opt         kafkasession.Option
		topic       string
		bare        bool // ctx has no baggage; the record already carries a session
		wantSession bool
	}{
		{"default withholds, as on every transport", nil, "chat-in", false, false},
		{"allowed topic", internal, "chat-in", false, true},
		{"refused topic", internal, "partner-in", false, false},
		{"refused topic, session already in the record", internal, "partner-in", true, false},
		{"allowed topic, a session already in the record is not forwarded", internal, "chat-in", true, false},
		{"refusing policy", kafkasession.WithOutbound(propagation.NewOutbound(propagation.AllowNone)), "chat-in", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pub := kafkasession.NewPublisher(kafkasession.WithPropagator(w3c), tc.opt)
			ctx := context.Background()
			r := &kgo.Record{Topic: tc.topic}
			if tc.bare {
				r.Headers = h("Baggage", "session.chat_id=stale,app.tenant=acme", "baggage", "session.user_id=stale")
			} else {
				ctx = otelsession.Bind(withTenant(ctx), sessionFor(5))
			}
			pub.Inject(ctx, r)
			got, span, err := cons.Extract(context.Background(), wire(r, 0, 0))
			span.End()
			if err != nil {
				t.Fatal(err)
			}
			_, st := otelsession.Lookup(got, otelsession.FieldChatID)
			if (st != otelsession.Unset) != tc.wantSession {
				t.Errorf("chat id %s after egress, want session = %v (headers %v)", st, tc.wantSession, r.Headers)
			}
			if baggage.FromContext(got).Member("app.tenant").Value() != "acme" {
				t.Errorf("app.tenant lost (headers %v)", r.Headers)
			}
		})
	}
}

func TestSpans(t *testing.T) {
	t.Parallel()
	tp, exp := newTracing(t)
	pub := kafkasession.NewPublisher(kafkasession.WithPropagator(w3c), kafkasession.WithTracerProvider(tp), kafkasession.WithOutbound(toQueue))
	cons := kafkasession.NewConsumer(propagation.NewInbound(propagation.TrustAll), kafkasession.WithPropagator(w3c),
		kafkasession.WithTracerProvider(tp), kafkasession.WithConsumerGroup("workers"))
	r := &kgo.Record{Topic: "chat-in", Value: []byte("x")}
	_, span := pub.Inject(otelsession.Bind(context.Background(), sessionFor(1)), r)
	span.End()
	_, cspan, err := cons.Extract(context.Background(), wire(r, 3, 42))
	cspan.End()
	if err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	prod, proc := spans[0], spans[1]
	if prod.Name != "send chat-in" || prod.SpanKind != trace.SpanKindProducer {
		t.Errorf("producer span %q kind %v", prod.Name, prod.SpanKind)
	}
	if proc.Name != "process chat-in" || proc.SpanKind != trace.SpanKindConsumer {
		t.Errorf("consumer span %q kind %v", proc.Name, proc.SpanKind)
	}
	if proc.Parent.SpanID() != prod.SpanContext.SpanID() || !proc.Parent.IsRemote() {
		t.Errorf("consumer parent %v, want producer %v", proc.Parent.SpanID(), prod.SpanContext.SpanID())
	}
	if len(proc.Links) != 1 || proc.Links[0].SpanContext.SpanID() != prod.SpanContext.SpanID() {
		t.Errorf("consumer links %v, want the producer span", proc.Links)
	}
	want := map[attribute.Key]any{
		"messaging.system": "kafka", "messaging.destination.name": "chat-in", "messaging.operation.type": "process",
		"messaging.destination.partition.id": "3", "messaging.kafka.offset": int64(42), "messaging.consumer.group.name": "workers",
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
	for _, kv := range prod.Attributes {
		if kv.Key == "messaging.operation.type" && kv.Value.AsString() != "send" {
			t.Errorf("producer operation type %v", kv.Value)
		}
	}
}

func TestNilRecord(t *testing.T) {
	t.Parallel()
	_, span := kafkasession.NewPublisher().Inject(context.Background(), nil)
	span.End()
	got, span, err := kafkasession.NewConsumer(nil).Extract(workerBase(), nil)
	span.End()
	if !errors.Is(err, kafkasession.ErrNilRecord) {
		t.Errorf("err = %v", err)
	}
	if d := diff(got, nil, false); d != "" {
		t.Errorf("session:\n\t%s", d)
	}
}
