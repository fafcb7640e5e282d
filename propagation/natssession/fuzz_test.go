package natssession_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/baggage"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/internal/sessiontest"
	"github.com/sessionwire/sessionwire/propagation/natssession"
)

// fuzzSignTime is when the signature of the fuzzing seeds was issued.
var fuzzSignTime = time.Unix(1_767_225_600, 0)

// headerText writes a NATS header as the fuzzer's input: one "Key: value"
// line per value.
func headerText(h nats.Header) string {
	var lines []string
	for k, vs := range h {
		for _, v := range vs {
			lines = append(lines, k+": "+v)
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// parseHeaderText reads the fuzzer's input back into a NATS header, keeping
// every key's spelling.
func parseHeaderText(s string) nats.Header {
	h := nats.Header{}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		h[k] = append(h[k], strings.TrimPrefix(v, " "))
	}
	return h
}

// FuzzConsumerExtract feeds a NATS message's headers (one "Key: value" line
// per value, any spelling of any key) and subject to Consumer.Extract with a
// policy that trusts no subject and verifies signatures made with
// gatewayKey. The seeds hold one signed message: conversation 3, bound to
// the subject "chat.in" and the message id "turn-1". Whatever the input:
//   - Extract does not panic and always returns a span to end;
//   - with an error, the error wraps one of propagation's reasons and the
//     session is wholly Unset (the worker's own session gone too);
//   - without one, the session is wholly Unset or exactly conversation 3's,
//     and then the subject is "chat.in" and the message's exact
//     Nats-Msg-Id header is "turn-1";
//   - the same input gives the same outcome twice.
//
// Run it with
//
//	go test ./propagation/natssession -run '^$' -fuzz '^FuzzConsumerExtract$' -fuzztime 20s -parallel 1
func FuzzConsumerExtract(f *testing.F) {
	s, err := propagation.NewSigner(gatewayKey, propagation.WithClock(func() time.Time { return fuzzSignTime }))
	if err != nil {
		f.Fatal(err)
	}
	pub := natssession.NewPublisher(natssession.WithPropagator(w3c), natssession.WithOutbound(propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(s))),
		natssession.WithTracerProvider(tracenoop.NewTracerProvider()))
	c := conversationFor(3)
	msg := &nats.Msg{Subject: "chat.in", Header: nats.Header{jetstream.MsgIDHeader: {"turn-1"}}}
	_, span := pub.Inject(c.bind(context.Background()), msg)
	span.End()
	signed := headerText(msg.Header)
	for _, seed := range [][2]string{
		{signed, "chat.in"},
		{"", "chat.in"},
		{strings.Replace(signed, "Nats-Msg-Id: turn-1", "Nats-Msg-Id: turn-2", 1), "chat.in"},
		{strings.Replace(signed, "Nats-Msg-Id: turn-1", "nats-msg-id: turn-1", 1), "chat.in"},
		{signed + "\nNats-Msg-Id: turn-2", "chat.in"},
		{strings.Replace(signed, "baggage: ", "Baggage: ", 1), "chat.in"},
		{signed, "chat.admin"},
		{signed, "chat.in\x00"},
		{signed + "\nBaggage: session.chat_id=forged", "chat.in"},
		{signed + "\nbaggage: session.sig=v1.gw-1.1767225600.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "chat.in"},
		{strings.Replace(signed, "session.thread_id=thread-3", "session.thread_id=thread-4", 1), "chat.in"},
		{"baggage: session.chat_id=a,session.chat_id=b\ntraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "chat.in"},
		{"BAGGAGE: session.chat_id=%FF\nbAgGaGe: session.ui_session_id=x", ""},
	} {
		f.Add(seed[0], seed[1])
	}
	v, err := propagation.NewVerifier([]propagation.Key{gatewayKey}, propagation.WithClock(func() time.Time { return fuzzSignTime.Add(time.Second) }))
	if err != nil {
		f.Fatal(err)
	}
	reasons := sessiontest.InboundErrors
	base := workerBase("fuzz")
	{ // The oracle below is only as good as this seed: it must be accepted.
		sub := natssession.NewConsumer(propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(v)), natssession.WithPropagator(w3c))
		ctx, span, err := sub.Extract(base, &nats.Msg{Subject: "chat.in", Header: parseHeaderText(signed)})
		span.End()
		if d := diff(ctx, c.received(), c.s.Stateless); err != nil || len(d) > 0 {
			f.Fatalf("the signed seed is not accepted (%v):\n\t%s", err, joinLines(d))
		}
	}

	f.Fuzz(func(t *testing.T, header, subject string) {
		h := parseHeaderText(header)
		extract := func() (context.Context, error) {
			sub := natssession.NewConsumer(propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(v)),
				natssession.WithPropagator(w3c), natssession.WithTracerProvider(tracenoop.NewTracerProvider()))
			ctx, span, err := sub.Extract(base, &nats.Msg{Subject: subject, Header: h})
			if span == nil {
				t.Fatal("no span")
			}
			span.End()
			return ctx, err
		}
		ctx, err := extract()
		problems := diff(ctx, unset, false)
		if err != nil {
			if !slices.ContainsFunc(reasons, func(r error) bool { return errors.Is(err, r) }) {
				t.Fatalf("error wraps none of propagation's reasons: %v", err)
			}
			if len(problems) > 0 {
				t.Fatalf("refused (%v), but:\n\t%s", err, joinLines(problems))
			}
		} else if len(problems) > 0 {
			if d := diff(ctx, c.received(), c.s.Stateless); len(d) > 0 {
				t.Fatalf("accepted a session that was never signed:\n\t%s", joinLines(d))
			}
			if id := h.Get(jetstream.MsgIDHeader); id != "turn-1" || subject != "chat.in" {
				t.Fatalf("accepted on message %q, subject %q; the seed is signed for turn-1 on chat.in", id, subject)
			}
			if baggage.FromContext(ctx).Member(otelsession.SignatureKey).Key() != "" {
				t.Fatal("a signature bound to a message is still in the context")
			}
		}
		ctx2, err2 := extract()
		if (err == nil) != (err2 == nil) || !slices.Equal(diff(ctx2, unset, false), problems) {
			t.Fatalf("same input, different outcomes: %v, then %v", err, err2)
		}
	})
}
