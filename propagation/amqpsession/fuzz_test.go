package amqpsession_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/baggage"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/amqpsession"
	"github.com/sessionwire/sessionwire/propagation/internal/sessiontest"
)

// fuzzKey signs the fuzzing seeds, at fuzzSignTime.
var (
	fuzzKey      = propagation.Key{ID: "gw-1", Secret: []byte(strings.Repeat("g", 32))}
	fuzzSignTime = time.Unix(1_767_225_600, 0)
)

// tableText writes a header table of strings as the fuzzer's input, one
// "key: s<value>" line per entry, in sorted key order.
func tableText(t amqp.Table) string {
	var lines []string
	for k, v := range t {
		s, _ := v.(string)
		lines = append(lines, k+": s"+s)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// parseTableText reads the fuzzer's input into a header table of values of
// any type an AMQP table can hold, one "key: <type><value>" line per entry:
// s string, b byte array, i integer, f float, t boolean, a array of strings
// split at '|', x an array of a string and a number, m a nested table of
// one entry "baggage", and nothing a void (nil) value. A later line with the
// same key replaces an earlier one, as in any table.
func parseTableText(s string) amqp.Table {
	t := amqp.Table{}
	for _, line := range strings.Split(s, "\n") {
		k, rest, _ := strings.Cut(line, ":")
		rest = strings.TrimPrefix(rest, " ")
		if rest == "" {
			t[k] = nil
			continue
		}
		v := rest[1:]
		switch rest[0] {
		case 's':
			t[k] = v
		case 'b':
			t[k] = []byte(v)
		case 'i':
			n, _ := strconv.ParseInt(v, 10, 64)
			t[k] = n
		case 'f':
			f, _ := strconv.ParseFloat(v, 64)
			t[k] = f
		case 't':
			t[k] = v != ""
		case 'a':
			var a []any
			for _, e := range strings.Split(v, "|") {
				a = append(a, e)
			}
			t[k] = a
		case 'x':
			t[k] = []any{v, int32(len(v))}
		case 'm':
			t[k] = amqp.Table{"baggage": v}
		default:
			t[k] = rest
		}
	}
	return t
}

type fuzzSeed struct{ name, table, id, exchange, key string }

// fuzzSeeds are the seeds around signed, the table of the signed message;
// testdata/fuzz/FuzzConsumerExtract holds them too, under their names.
func fuzzSeeds(signed string) []fuzzSeed {
	return []fuzzSeed{
		{"signed", signed, "turn-1", "chat", "in"},
		{"no-headers", "", "turn-1", "chat", "in"},
		{"signed-other-id", signed, "turn-2", "chat", "in"},
		{"signed-other-routing-key", signed, "turn-1", "chat", "audit"},
		{"signed-default-exchange", signed, "turn-1", "", "in"},
		{"signed-no-id", signed, "", "chat", "in"},
		{"baggage-as-bytes", strings.Replace(signed, "baggage: s", "baggage: b", 1), "turn-1", "chat", "in"},
		{"canonical-baggage-key", strings.Replace(signed, "baggage: s", "Baggage: s", 1), "turn-1", "chat", "in"},
		{"baggage-as-array", strings.Replace(signed, "baggage: s", "baggage: a", 1), "turn-1", "chat", "in"},
		{"forged-canonical-baggage", signed + "\nBaggage: ssession.chat_id=forged", "turn-1", "chat", "in"},
		{"baggage-a-number", signed + "\nbaggage: i42", "turn-1", "chat", "in"},
		{"duplicate-member-in-array", "baggage: asession.chat_id=a|session.chat_id=b\ntraceparent: s00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "m", "chat", "in"},
		{"every-type", "baggage: msession.chat_id=a\nBAGGAGE: f1.5\nbAgGaGe: t1\ntraceparent: x00-01\nbaggage:", "", "", ""},
		{"odd-spellings", "BAGGAGE: bsession.chat_id=%FF\nbaggage: ssession.ui_session_id=x", "m", "chat", "in"},
	}
}

// FuzzConsumerExtract feeds a delivery's header table (entries of any type,
// keys in any spelling), message id, exchange and routing key to
// Consumer.Extract with a policy that trusts no exchange and verifies
// signatures made with fuzzKey. The seeds hold one signed message:
// conversation 3, published to exchange chat with routing key in and
// message id "turn-1". Whatever the input:
//   - Extract does not panic and always returns a span to end;
//   - with an error, the error wraps one of propagation's reasons and the
//     session is wholly Unset (the worker's own session gone too);
//   - without one, the session is wholly Unset or exactly conversation 3's,
//     and then the delivery's message id, exchange and routing key are the
//     signed message's;
//   - the same input gives the same outcome twice.
//
// Run it with
//
//	go test ./propagation/amqpsession -run '^$' -fuzz '^FuzzConsumerExtract$' -fuzztime 20s -parallel 1
func FuzzConsumerExtract(f *testing.F) {
	s, err := propagation.NewSigner(fuzzKey, propagation.WithClock(func() time.Time { return fuzzSignTime }))
	if err != nil {
		f.Fatal(err)
	}
	pub := amqpsession.NewPublisher(amqpsession.WithPropagator(w3c), amqpsession.WithTracerProvider(tracenoop.NewTracerProvider()),
		amqpsession.WithOutbound(propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(s))))
	msg := amqp.Publishing{MessageId: "turn-1"}
	_, span := pub.Inject(otelsession.Bind(context.Background(), sessionFor(3)), &msg, "chat", "in")
	span.End()
	signed := tableText(msg.Headers)
	for _, seed := range fuzzSeeds(signed) {
		f.Add(seed.table, seed.id, seed.exchange, seed.key)
	}
	v, err := propagation.NewVerifier([]propagation.Key{fuzzKey}, propagation.WithClock(func() time.Time { return fuzzSignTime.Add(time.Second) }))
	if err != nil {
		f.Fatal(err)
	}
	reasons := sessiontest.InboundErrors
	want := received(sessionFor(3))
	stateless := sessionFor(3).Stateless
	base := workerBase()
	extract := func(t testing.TB, d *amqp.Delivery) (context.Context, error) {
		cons := amqpsession.NewConsumer(propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(v)),
			amqpsession.WithPropagator(w3c), amqpsession.WithTracerProvider(tracenoop.NewTracerProvider()))
		ctx, span, err := cons.Extract(base, d)
		if span == nil {
			t.Fatal("no span")
		}
		span.End()
		return ctx, err
	}
	// The oracle below is only as good as this seed: it must be accepted.
	seed := &amqp.Delivery{Headers: parseTableText(signed), MessageId: "turn-1", Exchange: "chat", RoutingKey: "in"}
	if ctx, err := extract(f, seed); err != nil || diff(ctx, want, stateless) != "" {
		f.Fatalf("the signed seed is not accepted (%v):\n\t%s", err, diff(ctx, want, stateless))
	}

	f.Fuzz(func(t *testing.T, table, id, exchange, key string) {
		d := &amqp.Delivery{Headers: parseTableText(table), MessageId: id, Exchange: exchange, RoutingKey: key}
		ctx, err := extract(t, d)
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
			if id != "turn-1" || exchange != "chat" || key != "in" {
				t.Fatalf("accepted on message %q to %q/%q; the seed is signed for turn-1 to chat/in", id, exchange, key)
			}
			if baggage.FromContext(ctx).Member(otelsession.SignatureKey).Key() != "" {
				t.Fatal("a signature bound to a message is still in the context")
			}
		}
		ctx2, err2 := extract(t, d)
		if (err == nil) != (err2 == nil) || diff(ctx2, nil, false) != problems {
			t.Fatalf("same input, different outcomes: %v, then %v", err, err2)
		}
	})
}
