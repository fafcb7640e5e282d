package natssession_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/natssession"
)

// Core NATS (no JetStream): conversations published concurrently to a queue
// group of three subscribers each reach their handler with their own session.
func TestCoreNATSRoundTrip(t *testing.T) {
	t.Parallel()
	const n = 60
	b := startBroker(t)
	pub := natssession.NewPublisher(natssession.WithPropagator(w3c), natssession.WithOutbound(toQueue))
	sub := natssession.NewConsumer(propagation.NewInbound(propagation.TrustAll), natssession.WithPropagator(w3c))

	out := make(chan seen, n)
	for w := range 3 {
		name := fmt.Sprint("worker-", w)
		h := sub.Handler(workerBase(name), func(ctx context.Context, msg *nats.Msg) error {
			i, err := strconv.Atoi(string(msg.Data))
			if err != nil {
				return err
			}
			c := conversationFor(i)
			out <- seen{i: i, worker: name, problems: diff(ctx, c.received(), c.s.Stateless)}
			return nil
		})
		if _, err := b.nc.QueueSubscribe("chat.in", "workers", h); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx := conversationFor(i).bind(context.Background())
			if err := pub.Publish(ctx, b.nc, &nats.Msg{Subject: "chat.in", Data: []byte(strconv.Itoa(i))}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got := make(map[int]bool)
	for len(got) < n {
		s := within(t, 10*time.Second, out, "core NATS message")
		if len(s.problems) > 0 {
			t.Errorf("message %d on %s:\n\t%s", s.i, s.worker, joinLines(s.problems))
		}
		got[s.i] = true
	}
}

// receive publishes msg with pub and returns it as a subscriber on the same
// subject receives it.
func receive(t *testing.T, b *broker, send func(*nats.Msg) error, msg *nats.Msg) *nats.Msg {
	t.Helper()
	s, err := b.nc.SubscribeSync(msg.Subject)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Unsubscribe() }()
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := send(msg); err != nil {
		t.Fatalf("publish: %v", err)
	}
	got, err := s.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("receive on %s: %v", msg.Subject, err)
	}
	return got
}

// The server's policy decides, per subject, whether a message's session is
// believed. An untrusted subject's session is stripped; trace context and
// other baggage still arrive.
func TestInboundPolicyDecidesPerSubject(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	tp, _ := newTracing(t)
	pub := natssession.NewPublisher(natssession.WithPropagator(w3c), natssession.WithTracerProvider(tp), natssession.WithOutbound(toQueue))
	chatOnly := func(_ context.Context, p propagation.Peer) bool {
		return p.Transport == "nats" && strings.HasPrefix(p.Name, "chat.")
	}
	c := conversationFor(7)
	for _, tc := range []struct {
		name    string
		policy  *propagation.Inbound
		subject string
		want    map[otelsession.Field]fieldWant
	}{
		{"trusted subject keeps the session", propagation.NewInbound(chatOnly), "chat.in", c.received()},
		{"untrusted subject strips it", propagation.NewInbound(chatOnly), "partner.in", unset},
		{"nil policy trusts nothing", nil, "chat.in", unset},
		{"TrustNone strips it", propagation.NewInbound(propagation.TrustNone), "chat.in", unset},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub := natssession.NewConsumer(tc.policy, natssession.WithPropagator(w3c))
			member, _ := baggage.NewMemberRaw("app.tenant", "acme")
			bg, _ := baggage.New(member)
			ctx := baggage.ContextWithBaggage(context.Background(), bg)
			ctx = c.bind(ctx)
			ctx, span := tp.Tracer("test").Start(ctx, "gateway")
			defer span.End()

			msg := receive(t, b, func(m *nats.Msg) error { return pub.Publish(ctx, b.nc, m) }, &nats.Msg{Subject: tc.subject})
			got, cspan, err := sub.Extract(workerBase("w"), msg)
			cspan.End()
			if err != nil {
				t.Fatalf("Extract: %v", err)
			}
			stateless := c.s.Stateless && len(tc.want) > 0
			if d := diff(got, tc.want, stateless); len(d) > 0 {
				t.Errorf("session:\n\t%s", joinLines(d))
			}
			if v := baggageMember(got, "app.tenant"); v != "acme" {
				t.Errorf("app.tenant = %q, want acme (only session members are stripped)", v)
			}
			if tid := trace.SpanContextFromContext(got).TraceID(); tid != span.SpanContext().TraceID() {
				t.Errorf("trace id %s, want the publisher's %s", tid, span.SpanContext().TraceID())
			}
		})
	}
}

// Malformed or forged headers are refused as a whole: the error names the
// reason, the handler still runs, and the session is Unset, never a mix.
func TestHostileHeadersLeaveTheSessionUnset(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	long := "session.chat_id=" + strings.Repeat("x", 9000)
	for _, tc := range []struct {
		name   string
		header nats.Header
		err    error
	}{
		{"session key repeated", nats.Header{"baggage": {"session.chat_id=a,session.chat_id=b"}}, propagation.ErrDuplicateMember},
		{"session key repeated across lines", nats.Header{"baggage": {"session.chat_id=a", "session.chat_id=b"}}, propagation.ErrDuplicateMember},
		{"over 8192 bytes", nats.Header{"baggage": {long}}, propagation.ErrBaggageTooLarge},
		{"local field from the network", nats.Header{"baggage": {"session.chat_id=a,session.ui_session_id=tab"}}, propagation.ErrLocalField},
		{"encoded CR LF in a value", nats.Header{"baggage": {"session.chat_id=a%0D%0Ainjected"}}, propagation.ErrInvalidValue},
		{"not UTF-8", nats.Header{"baggage": {"session.chat_id=%FF%FE"}}, propagation.ErrInvalidValue},
		{"malformed member", nats.Header{"baggage": {"session.chat_id=a b,session.thread_id=t"}}, propagation.ErrMalformedMember},
		{"canonical key, repeated", nats.Header{"Baggage": {"session.chat_id=a", "session.chat_id=b"}}, propagation.ErrDuplicateMember},
		{"two spellings, both without the exact key", nats.Header{"Baggage": {"session.chat_id=a"}, "BAGGAGE": {"session.chat_id=b"}}, propagation.ErrDuplicateMember},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var onErr []error
			var mu sync.Mutex
			sub := natssession.NewConsumer(propagation.NewInbound(propagation.TrustAll), natssession.WithPropagator(w3c),
				natssession.WithOnError(func(_ context.Context, err error) {
					mu.Lock()
					defer mu.Unlock()
					onErr = append(onErr, err)
				}))
			msg := receive(t, b, b.nc.PublishMsg, &nats.Msg{Subject: "chat.hostile", Header: tc.header})

			ctx, span, err := sub.Extract(workerBase("w"), msg)
			span.End()
			if !errors.Is(err, tc.err) {
				t.Errorf("Extract error = %v, want %v", err, tc.err)
			}
			if err != nil && !strings.Contains(err.Error(), `"chat.hostile"`) {
				t.Errorf("error %q does not name the subject", err)
			}
			if d := diff(ctx, unset, false); len(d) > 0 {
				t.Errorf("session after refusal:\n\t%s", joinLines(d))
			}

			ran := false
			sub.Handler(workerBase("w"), func(ctx context.Context, _ *nats.Msg) error {
				ran = true
				if d := diff(ctx, unset, false); len(d) > 0 {
					t.Errorf("handler's session after refusal:\n\t%s", joinLines(d))
				}
				return nil
			})(msg)
			mu.Lock()
			defer mu.Unlock()
			if !ran || len(onErr) != 1 || !errors.Is(onErr[0], tc.err) {
				t.Errorf("handler ran = %v, OnError saw %v; want it run after one %v", ran, onErr, tc.err)
			}
		})
	}
}

// Headers are exact-case; when the exact key is present it is the only one
// read, so a second spelling cannot add or replace members.
func TestExactKeyWinsOverOtherSpellings(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	sub := natssession.NewConsumer(propagation.NewInbound(propagation.TrustAll), natssession.WithPropagator(w3c))
	msg := receive(t, b, b.nc.PublishMsg, &nats.Msg{Subject: "chat.in", Header: nats.Header{
		"baggage": {"session.chat_id=mine"},
		"Baggage": {"session.chat_id=forged,session.user_id=forged"},
	}})
	ctx, span, err := sub.Extract(context.Background(), msg)
	span.End()
	if err != nil {
		t.Fatal(err)
	}
	want := map[otelsession.Field]fieldWant{otelsession.FieldChatID: {"mine", otelsession.Set}}
	if d := diff(ctx, want, false); len(d) > 0 {
		t.Errorf("session:\n\t%s", joinLines(d))
	}
}

// A publisher that used otel's HTTP header carrier wrote "Baggage" and
// "Traceparent"; the consumer still reads the session and the trace.
func TestCanonicalHeaderKeysFromOtherPublishers(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	tp, _ := newTracing(t)
	sub := natssession.NewConsumer(propagation.NewInbound(propagation.TrustAll), natssession.WithPropagator(w3c))

	c := conversationFor(11)
	ctx, span := tp.Tracer("test").Start(c.bind(context.Background()), "foreign publisher")
	defer span.End()
	h := http.Header{}
	w3c.Inject(ctx, otelprop.HeaderCarrier(h))
	if _, ok := h["Baggage"]; !ok {
		t.Fatalf("otel's HTTP carrier wrote %v, want canonical keys", h)
	}

	msg := receive(t, b, b.nc.PublishMsg, &nats.Msg{Subject: "chat.in", Header: nats.Header(h)})
	got, cspan, err := sub.Extract(context.Background(), msg)
	cspan.End()
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(got, c.received(), c.s.Stateless); len(d) > 0 {
		t.Errorf("session:\n\t%s", joinLines(d))
	}
	if tid := trace.SpanContextFromContext(got).TraceID(); tid != span.SpanContext().TraceID() {
		t.Errorf("trace id %s, want %s", tid, span.SpanContext().TraceID())
	}
}

// sessionMembers returns the session members found in a message's raw
// baggage headers, whatever their spelling.
func sessionMembers(t *testing.T, h nats.Header) []string {
	t.Helper()
	var keys []string
	for k, lines := range h {
		if !strings.EqualFold(k, "baggage") {
			continue
		}
		for _, l := range lines {
			bg, err := baggage.Parse(l)
			if err != nil {
				t.Fatalf("baggage header %q: %v", l, err)
			}
			for _, m := range bg.Members() {
				if strings.HasPrefix(m.Key(), otelsession.KeyPrefix) {
					keys = append(keys, m.Key())
				}
			}
		}
	}
	return keys
}

// The egress rule decides which subjects receive the session. Refused
// subjects still get trace context and other baggage, and lose a session that
// was already in the message's headers.
func TestSessionEgressPerSubject(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	tp, _ := newTracing(t)
	internalOnly := natssession.WithOutbound(propagation.NewOutbound(func(_ context.Context, d propagation.Dest) bool {
		return d.Transport == propagation.TransportNATS && !strings.HasPrefix(d.Name, "partner.")
	}))
	for _, tc := range []struct {
		name        string
		opt         natssession.Option
		subject     string
		bare        bool   // ctx carries no baggage at all, so nothing overwrites the header
		staleKey    string // the message already carries a session under this header key
		wantSession bool
	}{
		{"default withholds, as on every transport", nil, "chat.in", false, "", false},
		{"allowed subject", internalOnly, "chat.in", false, "", true},
		{"refused subject", internalOnly, "partner.in", false, "", false},
		{"refused subject, session already in headers", internalOnly, "partner.in", false, "baggage", false},
		{"refused subject, bare context, session already in headers", internalOnly, "partner.in", true, "baggage", false},
		{"refused subject, bare context, session in a canonical header", internalOnly, "partner.in", true, "Baggage", false},
		{"allowed subject, bare context, a session already in headers is not forwarded", internalOnly, "chat.in", true, "baggage", false},
		{"allowed subject, session already in two spellings", internalOnly, "chat.in", true, "BAGGAGE", false},
		{"refusing policy", natssession.WithOutbound(propagation.NewOutbound(propagation.AllowNone)), "chat.in", false, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pub := natssession.NewPublisher(natssession.WithPropagator(w3c), natssession.WithTracerProvider(tp), tc.opt)
			ctx := context.Background()
			if !tc.bare {
				member, _ := baggage.NewMemberRaw("app.tenant", "acme")
				bg, _ := baggage.New(member)
				ctx = conversationFor(5).bind(baggage.ContextWithBaggage(ctx, bg))
			}

			msg := &nats.Msg{Subject: tc.subject}
			if tc.staleKey != "" {
				msg.Header = nats.Header{tc.staleKey: {"session.chat_id=stale,app.tenant=acme,session.user_id=stale"}}
			}
			got := receive(t, b, func(m *nats.Msg) error { return pub.Publish(ctx, b.nc, m) }, msg)

			members := sessionMembers(t, got.Header)
			if tc.wantSession != (len(members) > 0) {
				t.Errorf("session members on the wire: %v, want session = %v", members, tc.wantSession)
			}
			if got.Header.Get("traceparent") == "" {
				t.Errorf("no traceparent in %v", got.Header)
			}
			bgs, err := baggage.Parse(strings.Join(got.Header.Values("baggage"), ","))
			if err != nil || bgs.Member("app.tenant").Value() != "acme" {
				t.Errorf("baggage %v (%v): want app.tenant=acme kept", got.Header.Values("baggage"), err)
			}
			if !tc.bare && otelsession.FromContext(ctx).ChatID != conversationFor(5).s.ChatID {
				t.Error("the publisher's own context lost its session")
			}
		})
	}
}

// Nil arguments are errors, never panics.
func TestNilArguments(t *testing.T) {
	t.Parallel()
	pub := natssession.NewPublisher(natssession.WithOutbound(toQueue))
	sub := natssession.NewConsumer(nil)
	ctx := context.Background()
	if err := pub.Publish(ctx, nil, &nats.Msg{Subject: "x"}); !errors.Is(err, natssession.ErrNilConnection) {
		t.Errorf("Publish(nil conn) = %v", err)
	}
	if err := pub.Publish(ctx, &nats.Conn{}, nil); !errors.Is(err, natssession.ErrNilMessage) {
		t.Errorf("Publish(nil msg) = %v", err)
	}
	if _, err := pub.PublishJetStream(ctx, nil, &nats.Msg{Subject: "x"}); !errors.Is(err, natssession.ErrNilConnection) {
		t.Errorf("PublishJetStream(nil js) = %v", err)
	}
	if _, err := pub.PublishJetStream(ctx, nil, nil); !errors.Is(err, natssession.ErrNilMessage) {
		t.Errorf("PublishJetStream(nil msg) = %v", err)
	}
	_, span := pub.Inject(ctx, nil)
	span.End()
	got, span, err := sub.Extract(workerBase("w"), nil)
	span.End()
	if !errors.Is(err, natssession.ErrNilMessage) {
		t.Errorf("Extract(nil) = %v", err)
	}
	if d := diff(got, unset, false); len(d) > 0 {
		t.Errorf("session after Extract(nil):\n\t%s", joinLines(d))
	}
	if _, _, err := sub.ExtractJetStream(ctx, nil); !errors.Is(err, natssession.ErrNilMessage) {
		t.Errorf("ExtractJetStream(nil) = %v", err)
	}
}
