package natssession_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/baggage"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/natssession"
)

// The keys of these tests; signatures use the real clock, since the
// messages go through a real server.
var (
	gatewayKey = propagation.Key{ID: "gw-1", Secret: []byte("nats test secret, thirty-two bytes long")}
	retiredKey = propagation.Key{ID: "gw-0", Secret: []byte("an older secret, also 32 bytes at least")}
)

func signer(t testing.TB, k propagation.Key) *propagation.Signer {
	t.Helper()
	s, err := propagation.NewSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// verifying is a consumer policy that trusts no subject and accepts signed
// sessions made with gatewayKey.
func verifying(t testing.TB, opts ...propagation.InboundOption) *propagation.Inbound {
	t.Helper()
	v, err := propagation.NewVerifier([]propagation.Key{gatewayKey})
	if err != nil {
		t.Fatal(err)
	}
	return propagation.NewInbound(propagation.TrustNone, append(opts, propagation.WithVerifier(v))...)
}

// Signed sessions over JetStream, to workers that trust no subject: every
// message, with or without a message id, reaches its handler with exactly
// its own session, its signature verified for the subject it was published
// to (which a JetStream consumer delivers it under); the signature, bound to
// that subject, ends there, with or without an id.
func TestJetStreamSignedSessions(t *testing.T) {
	t.Parallel()
	const n, workers = 40, 2
	b := startBroker(t)
	cons := b.stream(t, "SIGNED", 0, "chat.>")
	pub := natssession.NewPublisher(natssession.WithPropagator(w3c), natssession.WithOutbound(propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(signer(t, gatewayKey)))))
	sub := natssession.NewConsumer(verifying(t), natssession.WithPropagator(w3c))

	type result struct {
		seen
		hasID, hasSig bool
	}
	out := make(chan result, n)
	for w := range workers {
		name := fmt.Sprint("worker-", w)
		consume(t, cons, sub.JetStreamHandler(workerBase(name), func(ctx context.Context, msg jetstream.Msg) error {
			i, err := strconv.Atoi(string(msg.Data()))
			if err != nil {
				return err
			}
			c := conversationFor(i)
			out <- result{
				seen:   seen{i: i, worker: name, problems: diff(ctx, c.received(), c.s.Stateless)},
				hasID:  msg.Headers().Get(jetstream.MsgIDHeader) != "",
				hasSig: baggageMember(ctx, otelsession.SignatureKey) != "",
			}
			return msg.Ack()
		}))
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			msg := &nats.Msg{Subject: "chat.in", Data: []byte(strconv.Itoa(i)), Header: nats.Header{}}
			if i%2 == 0 {
				msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprint("turn-", i))
			}
			if _, err := pub.PublishJetStream(conversationFor(i).bind(context.Background()), b.js, msg); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for range n {
		r := within(t, 30*time.Second, out, "a signed message")
		if len(r.problems) > 0 {
			t.Errorf("message %d on %s:\n\t%s", r.i, r.worker, joinLines(r.problems))
		}
		if r.hasSig {
			t.Errorf("message %d (id %v): the signature, bound to its subject, is still in the handler's context", r.i, r.hasID)
		}
	}
	if c := sub.Policy().Counts(); c.Signed != n || c.Accepted != n || c.Untrusted+c.Rejected+c.BadSignature != 0 {
		t.Errorf("policy counts %+v, want %d signed and accepted", c, n)
	}
}

// Attacks on a signed message as it sits on the wire, through a real
// server: an attacker who can publish copies a signed message's headers.
func TestSignedMessageAttacks(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	if _, err := b.js.CreateStream(t.Context(), jetstream.StreamConfig{
		Name: "ATTACK", Subjects: []string{"attack.>"}, Duplicates: time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
	pub := natssession.NewPublisher(natssession.WithPropagator(w3c), natssession.WithOutbound(propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(signer(t, gatewayKey)))))
	c := conversationFor(3)
	ctx := c.bind(context.Background())

	// The genuine message, as it was stored.
	genuine := &nats.Msg{Subject: "attack.in", Header: nats.Header{jetstream.MsgIDHeader: {"turn-1"}}}
	if _, err := pub.PublishJetStream(ctx, b.js, genuine); err != nil {
		t.Fatal(err)
	}
	stored, err := b.js.Stream(t.Context(), "ATTACK")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := stored.GetMsg(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	copyHeader := func() nats.Header {
		h := nats.Header{}
		for k, v := range raw.Header {
			h[k] = append([]string(nil), v...)
		}
		return h
	}
	if line := strings.Join(raw.Header.Values("baggage"), ","); !strings.Contains(line, otelsession.SignatureKey+"=v1.gw-1.") ||
		!strings.Contains(line, "session.thread_id=thread-3") {
		t.Fatalf("the stored message carries no signature or not the thread id the attacks change: %q", line)
	}

	t.Run("replayed with its own id is dropped by the server", func(t *testing.T) {
		ack, err := b.js.PublishMsg(t.Context(), &nats.Msg{Subject: "attack.in", Header: copyHeader()})
		if err != nil {
			t.Fatal(err)
		}
		if !ack.Duplicate {
			t.Errorf("ack %+v: a replay with the same id within the duplicate window must be a duplicate", ack)
		}
	})

	retired := func() nats.Header {
		m := &nats.Msg{Subject: "attack.in", Header: nats.Header{jetstream.MsgIDHeader: {"turn-1"}}}
		_, span := natssession.NewPublisher(natssession.WithPropagator(w3c), natssession.WithOutbound(propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(signer(t, retiredKey))))).Inject(ctx, m)
		span.End()
		return m.Header
	}
	for _, tc := range []struct {
		name    string
		header  func() nats.Header
		want    error
		subject string // "attack.in" when ""
	}{
		{"the genuine message", copyHeader, nil, ""},
		{"published again to another subject", copyHeader, propagation.ErrBadSignature, "copy.in"},
		{"moved onto another message id", func() nats.Header {
			h := copyHeader()
			h.Set(jetstream.MsgIDHeader, "turn-2")
			return h
		}, propagation.ErrBadSignature, ""},
		{"moved onto a message without an id", func() nats.Header {
			h := copyHeader()
			delete(h, jetstream.MsgIDHeader)
			return h
		}, propagation.ErrBadSignature, ""},
		{"an id in another spelling does not stand in for the real one", func() nats.Header {
			h := copyHeader()
			delete(h, jetstream.MsgIDHeader)
			h["nats-msg-id"] = []string{"turn-1"}
			return h
		}, propagation.ErrBadSignature, ""},
		{"a thread id changed", func() nats.Header {
			h := copyHeader()
			h["baggage"] = []string{strings.Replace(strings.Join(h.Values("baggage"), ","), "session.thread_id=thread-3", "session.thread_id=thread-4", 1)}
			return h
		}, propagation.ErrBadSignature, ""},
		{"signed with a retired key", retired, propagation.ErrUnknownKey, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub := natssession.NewConsumer(verifying(t), natssession.WithPropagator(w3c))
			// Core NATS delivery of the copied headers, to the genuine
			// message's subject unless the attack moves it (the stream
			// stores the copies too): the consumer's path is the same for
			// a JetStream message.
			subject := cmp.Or(tc.subject, "attack.in")
			msg := receive(t, b, b.nc.PublishMsg, &nats.Msg{Subject: subject, Header: tc.header()})
			got, span, err := sub.Extract(context.Background(), msg)
			span.End()
			want := c.received()
			if tc.want != nil {
				want = unset
			}
			if !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
			if d := diff(got, want, tc.want == nil && c.s.Stateless); len(d) > 0 {
				t.Errorf("session:\n\t%s", joinLines(d))
			}
		})
	}
}

// jetstream.WithMsgID sets the id during the publish, after the session was
// signed: the publisher says so on its span, and the consumer refuses the
// signature rather than accept it for the wrong message.
func TestMessageIDSetAfterSigning(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	cons := b.stream(t, "LATEID", 0, "late.>")
	tp, exp := newTracing(t)
	pub := natssession.NewPublisher(natssession.WithPropagator(w3c), natssession.WithTracerProvider(tp), natssession.WithOutbound(propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(signer(t, gatewayKey)))))
	errs := make(chan error, 1)
	sub := natssession.NewConsumer(verifying(t), natssession.WithPropagator(w3c),
		natssession.WithOnError(func(_ context.Context, err error) { errs <- err }))
	sessions := make(chan []string, 1)
	consume(t, cons, sub.JetStreamHandler(context.Background(), func(ctx context.Context, msg jetstream.Msg) error {
		sessions <- diff(ctx, unset, false)
		return msg.Ack()
	}))

	ctx := conversationFor(1).bind(context.Background())
	if _, err := pub.PublishJetStream(ctx, b.js, &nats.Msg{Subject: "late.in"}, jetstream.WithMsgID("late-1")); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 10*time.Second, errs, "the refusal"); !errors.Is(err, propagation.ErrBadSignature) {
		t.Errorf("consumer err = %v, want ErrBadSignature", err)
	}
	if d := within(t, 10*time.Second, sessions, "the message"); len(d) > 0 {
		t.Errorf("session:\n\t%s", joinLines(d))
	}
	span := spanNamed(t, exp, "publish late.in")
	found := false
	for _, ev := range span.Events {
		for _, a := range ev.Attributes {
			if a.Key == "exception.message" && strings.Contains(a.Value.AsString(), natssession.ErrMessageIDAfterSigning.Error()) {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("publish span events %v: want ErrMessageIDAfterSigning recorded", span.Events)
	}
}

// A subject the egress rule refuses gets neither the session nor its
// signature, whether the publisher signs or the context already carried a
// signature from upstream.
func TestRefusedSubjectGetsNoSignature(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	internal := func(_ context.Context, d propagation.Dest) bool { return !strings.HasPrefix(d.Name, "partner.") }
	upstream, err := signer(t, gatewayKey).Sign(conversationFor(2).bind(context.Background()))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		pub  *natssession.Publisher
		ctx  context.Context
	}{
		{"signing publisher", natssession.NewPublisher(natssession.WithPropagator(w3c),
			natssession.WithOutbound(propagation.NewOutbound(internal, propagation.WithSigner(signer(t, gatewayKey))))), conversationFor(2).bind(context.Background())},
		{"signature from upstream", natssession.NewPublisher(natssession.WithPropagator(w3c), natssession.WithOutbound(propagation.NewOutbound(internal))), upstream},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, subject := range []string{"chat.in", "partner.in"} {
				msg := &nats.Msg{Subject: subject, Header: nats.Header{jetstream.MsgIDHeader: {"m"}}}
				got := receive(t, b, func(m *nats.Msg) error { return tc.pub.Publish(tc.ctx, b.nc, m) }, msg)
				members := sessionMembers(t, got.Header)
				hasSig := false
				for _, k := range members {
					hasSig = hasSig || k == otelsession.SignatureKey
				}
				if allowed := subject == "chat.in"; allowed != (len(members) > 0) || allowed != hasSig {
					t.Errorf("%s: session members on the wire %v; want session and signature = %v", subject, members, allowed)
				}
			}
		})
	}
}

// Signing fails closed: a session whose signature does not fit the W3C
// limits is not published.
func TestPublishRefusesWhatCannotBeSigned(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	pub := natssession.NewPublisher(natssession.WithPropagator(w3c), natssession.WithOutbound(propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(signer(t, gatewayKey)))))
	ctx := otelsession.Bind(context.Background(), otelsession.Session{ChatID: "c"})
	bg := baggage.FromContext(ctx)
	for i := 0; bg.Len() < otelsession.MaxBaggageMembers; i++ {
		m, _ := baggage.NewMemberRaw(fmt.Sprint("app.k", i), "v")
		bg, _ = bg.SetMember(m)
	}
	ctx = baggage.ContextWithBaggage(ctx, bg)
	sub, err := b.nc.SubscribeSync("full.in")
	if err != nil {
		t.Fatal(err)
	}
	err = pub.Publish(ctx, b.nc, &nats.Msg{Subject: "full.in"})
	if !errors.Is(err, propagation.ErrSignatureNoRoom) {
		t.Fatalf("Publish err = %v, want ErrSignatureNoRoom", err)
	}
	// Messages on one connection arrive in order: if the refused one had
	// been published, it would come before this marker.
	if err := b.nc.Publish("full.in", []byte("marker")); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != "marker" {
		t.Errorf("a message was published anyway: %v", m.Header)
	}
}
