package kafkasession_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/baggage"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/internal/sessiontest"
	"github.com/sessionwire/sessionwire/propagation/kafkasession"
)

// fuzzKey signs the fuzzing seeds, at fuzzSignTime.
var (
	fuzzKey      = propagation.Key{ID: "gw-1", Secret: []byte(strings.Repeat("g", 32))}
	fuzzSignTime = time.Unix(1_767_225_600, 0)
)

// headerText writes record headers as the fuzzer's input: one "key: value"
// line per header, in order.
func headerText(hs []kgo.RecordHeader) string {
	var lines []string
	for _, hd := range hs {
		lines = append(lines, hd.Key+": "+string(hd.Value))
	}
	return strings.Join(lines, "\n")
}

// parseHeaderText reads the fuzzer's input back into record headers, any
// key (empty, repeated, in any case) with any bytes up to the line's end; a
// line without a colon is a header with that key and a nil value.
func parseHeaderText(s string) []kgo.RecordHeader {
	var hs []kgo.RecordHeader
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		hd := kgo.RecordHeader{Key: k}
		if ok {
			hd.Value = []byte(strings.TrimPrefix(v, " "))
		}
		hs = append(hs, hd)
	}
	return hs
}

type fuzzSeed struct{ name, header, topic string }

// fuzzSeeds are the seeds around signed, the headers of the signed record;
// testdata/fuzz/FuzzConsumerExtract holds them too, under their names.
func fuzzSeeds(signed string) []fuzzSeed {
	return []fuzzSeed{
		{"signed", signed, "chat-in"},
		{"no-headers", "", "chat-in"},
		{"signed-other-topic", signed, "partner-in"},
		{"signed-other-id", strings.Replace(signed, "message-id: turn-1", "message-id: turn-2", 1), "chat-in"},
		{"signed-id-canonical-spelling", strings.Replace(signed, "message-id: turn-1", "Message-Id: turn-1", 1), "chat-in"},
		{"signed-id-twice-after", signed + "\nmessage-id: turn-2", "chat-in"},
		{"signed-id-twice-before", "message-id: turn-2\n" + signed, "chat-in"},
		{"canonical-baggage-key", strings.Replace(signed, "baggage: ", "Baggage: ", 1), "chat-in"},
		{"forged-canonical-baggage", signed + "\nBaggage: session.chat_id=forged", "chat-in"},
		{"forged-second-baggage", signed + "\nbaggage: session.chat_id=forged", "chat-in"},
		{"signed-value-changed", strings.Replace(signed, "session.platform=telegram", "session.platform=slack", 1), "chat-in"},
		{"duplicate-member", "baggage: session.chat_id=a,session.chat_id=b\ntraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "chat-in"},
		{"odd-keys-empty-topic", "BAGGAGE: session.chat_id=%FF\nbAgGaGe: session.ui_session_id=x\n: \nbaggage", ""},
	}
}

// FuzzConsumerExtract feeds a record's headers (one "key: value" line each,
// any key in any spelling, repeated or not) and topic to Consumer.Extract
// with a policy that trusts no topic and verifies signatures made with
// fuzzKey. The seeds hold one signed record: conversation 3 on topic chat-in,
// bound to the message id "turn-1". Whatever the input:
//   - Extract does not panic and always returns a span to end;
//   - with an error, the error wraps one of propagation's reasons and the
//     session is wholly Unset (the worker's own session gone too);
//   - without one, the session is wholly Unset or exactly conversation 3's,
//     and then the record's message id (as the carrier reads it) is
//     "turn-1" and its topic chat-in;
//   - the same input gives the same outcome twice.
//
// Run it with
//
//	go test ./propagation/kafkasession -run '^$' -fuzz '^FuzzConsumerExtract$' -fuzztime 20s -parallel 1
func FuzzConsumerExtract(f *testing.F) {
	s, err := propagation.NewSigner(fuzzKey, propagation.WithClock(func() time.Time { return fuzzSignTime }))
	if err != nil {
		f.Fatal(err)
	}
	pub := kafkasession.NewPublisher(kafkasession.WithPropagator(w3c), kafkasession.WithTracerProvider(tracenoop.NewTracerProvider()),
		kafkasession.WithOutbound(propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(s))))
	r := &kgo.Record{Topic: "chat-in", Headers: []kgo.RecordHeader{{Key: kafkasession.MessageIDHeader, Value: []byte("turn-1")}}}
	_, span := pub.Inject(otelsession.Bind(context.Background(), sessionFor(3)), r)
	span.End()
	signed := headerText(r.Headers)
	for _, seed := range fuzzSeeds(signed) {
		f.Add(seed.header, seed.topic)
	}
	v, err := propagation.NewVerifier([]propagation.Key{fuzzKey}, propagation.WithClock(func() time.Time { return fuzzSignTime.Add(time.Second) }))
	if err != nil {
		f.Fatal(err)
	}
	reasons := sessiontest.InboundErrors
	want := received(sessionFor(3))
	stateless := sessionFor(3).Stateless
	base := workerBase()
	extract := func(t testing.TB, rec *kgo.Record) (context.Context, error) {
		cons := kafkasession.NewConsumer(propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(v)),
			kafkasession.WithPropagator(w3c), kafkasession.WithTracerProvider(tracenoop.NewTracerProvider()))
		ctx, span, err := cons.Extract(base, rec)
		if span == nil {
			t.Fatal("no span")
		}
		span.End()
		return ctx, err
	}
	// The oracle below is only as good as this seed: it must be accepted.
	if ctx, err := extract(f, &kgo.Record{Topic: "chat-in", Headers: parseHeaderText(signed)}); err != nil || diff(ctx, want, stateless) != "" {
		f.Fatalf("the signed seed is not accepted (%v):\n\t%s", err, diff(ctx, want, stateless))
	}

	f.Fuzz(func(t *testing.T, header, topic string) {
		rec := &kgo.Record{Topic: topic, Headers: parseHeaderText(header)}
		ctx, err := extract(t, rec)
		problems := diff(ctx, nil, false)
		if err != nil {
			if !slices.ContainsFunc(reasons, func(r error) bool { return errors.Is(err, r) }) {
				t.Fatalf("error wraps none of propagation's reasons: %v", err)
			}
			if problems != "" {
				t.Fatalf("refused (%v), but:\n\t%s", err, problems)
			}
		} else if problems != "" {
			if d := diff(ctx, want, stateless); d != "" {
				t.Fatalf("accepted a session that was never signed:\n\t%s", d)
			}
			if id := kafkasession.NewRecordCarrier(rec).Get(kafkasession.MessageIDHeader); id != "turn-1" || topic != "chat-in" {
				t.Fatalf("accepted on record %q of topic %q; the seed is signed for turn-1 on chat-in", id, topic)
			}
			if baggage.FromContext(ctx).Member(otelsession.SignatureKey).Key() != "" {
				t.Fatal("a signature bound to a record is still in the context")
			}
		}
		ctx2, err2 := extract(t, rec)
		if (err == nil) != (err2 == nil) || diff(ctx2, nil, false) != problems {
			t.Fatalf("same input, different outcomes: %v, then %v", err, err2)
		}
	})
}
