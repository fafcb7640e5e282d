package amqpsession_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/amqpsession"
	"github.com/sessionwire/sessionwire/propagation/internal/sessiontest"
)

// A signed session is bound to its message's MessageId, exchange and routing
// key: the same table on another message, or routed elsewhere, is refused
// with the reason NATS gives (ErrBadSignature).
func TestSignatureIsBoundToTheMessage(t *testing.T) {
	t.Parallel()
	pub, cons, _ := signedPair(t)

	msg := amqp.Publishing{MessageId: "m-1", Body: []byte("hi")}
	_, span := pub.Inject(otelsession.Bind(context.Background(), sessionFor(1)), &msg, "chat", "in")
	span.End()

	other := msg
	other.MessageId = "m-2"
	for _, tc := range []struct {
		name          string
		msg           amqp.Publishing
		exchange, key string
		wantOK        bool
	}{
		{"the signed message", msg, "chat", "in", true},
		{"another message id", other, "chat", "in", false},
		{"another exchange", msg, "partner", "in", false},
		{"another routing key", msg, "chat", "admin", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, span, err := cons.Extract(context.Background(), deliver(tc.msg, tc.exchange, tc.key, false))
			span.End()
			_, st := otelsession.Lookup(ctx, otelsession.FieldChatID)
			if tc.wantOK {
				if err != nil || st != otelsession.Set {
					t.Fatalf("refused the signed message: %v (chat id %s)", err, st)
				}
				return
			}
			if !errors.Is(err, propagation.ErrBadSignature) || st != otelsession.Unset {
				t.Fatalf("moved signature: err %v, chat id %s; want ErrBadSignature and no session", err, st)
			}
		})
	}
}

// signedPair returns a Publisher that signs for every destination and a
// Consumer that trusts no peer and accepts a session only through its
// signature; and the signer, for signatures made elsewhere.
func signedPair(t *testing.T) (*amqpsession.Publisher, *amqpsession.Consumer, *propagation.Signer) {
	t.Helper()
	signer, policy := sessiontest.SigningPolicies(t)
	pub := amqpsession.NewPublisher(amqpsession.WithPropagator(w3c),
		amqpsession.WithOutbound(propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(signer))))
	return pub, amqpsession.NewConsumer(policy, amqpsession.WithPropagator(w3c)), signer
}

var (
	wantAccepted     = sessiontest.WantAccepted
	wantNoSignature  = sessiontest.WantNoSignature
	wantBadSignature = sessiontest.WantBadSignature
)

// A message without a MessageId has nothing of its own to bind a signature
// to, but its exchange and routing key still bind it: the message published
// again to another exchange or under another routing key is refused, as one
// with an id is. The message itself is accepted where it was published,
// also once the policy's cache holds its conversation (from its third
// message), which serves the session but still verifies every message's
// signature for its own exchange and routing key.
func TestSignatureWithoutIDIsBoundToTheRoute(t *testing.T) {
	t.Parallel()
	pub, cons, _ := signedPair(t)
	publish := func() amqp.Publishing {
		msg := amqp.Publishing{Body: []byte("hi")}
		_, span := pub.Inject(otelsession.Bind(context.Background(), sessionFor(1)), &msg, "chat", "in")
		span.End()
		if msg.MessageId != "" {
			t.Fatalf("the message has id %q, want none", msg.MessageId)
		}
		if !strings.Contains(amqpsession.TableCarrier(msg.Headers).Get("baggage"), otelsession.SignatureKey+"=") {
			t.Fatal("the message carries no signature")
		}
		return msg
	}
	extract := func(msg amqp.Publishing, exchange, key string) (context.Context, error) {
		ctx, span, err := cons.Extract(workerBase(), deliver(msg, exchange, key, false))
		span.End()
		return ctx, err
	}

	msg := publish()
	t.Run("the signed message", func(t *testing.T) {
		ctx, err := extract(msg, "chat", "in")
		wantAccepted(t, ctx, err, 1)
	})
	t.Run("the signed message's signature is not handed on", func(t *testing.T) {
		ctx, err := extract(msg, "chat", "in")
		wantAccepted(t, ctx, err, 1)
		wantNoSignature(t, ctx)
	})
	for _, tc := range []struct{ name, exchange, key string }{
		{"another exchange", "partner", "in"},
		{"the default exchange", "", "in"},
		{"another routing key", "chat", "admin"},
		{"no routing key", "chat", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, err := extract(msg, tc.exchange, tc.key)
			wantBadSignature(t, ctx, err)
		})
	}
	t.Run("from the cache", func(t *testing.T) {
		for n := range 3 {
			ctx, err := extract(publish(), "chat", "in")
			wantAccepted(t, ctx, err, 1)
			wantNoSignature(t, ctx)
			if n == 2 && cons.Policy().Counts().Cached == 0 {
				t.Fatal("the conversation's third message was not served from the cache")
			}
		}
		ctx, err := extract(publish(), "chat", "admin")
		wantBadSignature(t, ctx, err)
	})
}

// A session signed for an HTTP request (which has no message id, so the
// signature is bound to no message) is refused on a message without a
// MessageId: a signature made for one transport never verifies on another.
func TestHTTPSignatureIsRefusedOnAMessage(t *testing.T) {
	t.Parallel()
	_, cons, signer := signedPair(t)
	out := propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(signer))
	hdr := http.Header{}
	if err := out.Inject(otelsession.Bind(context.Background(), sessionFor(1)), w3c, otelprop.HeaderCarrier(hdr), propagation.Dest{Transport: "http"}); err != nil {
		t.Fatal(err)
	}
	line := hdr.Get("baggage")
	if !strings.Contains(line, otelsession.SignatureKey+"=") {
		t.Fatalf("the request carries no signature: %q", line)
	}
	// The signature is good: it verifies on an HTTP request.
	ctx, err := cons.Policy().Extract(workerBase(), w3c, otelprop.HeaderCarrier(hdr), propagation.Peer{Transport: "http"})
	if _, st := otelsession.Lookup(ctx, otelsession.FieldChatID); err != nil || st != otelsession.Set {
		t.Fatalf("the HTTP signature does not verify on HTTP: %v (chat id %s)", err, st)
	}

	msg := amqp.Publishing{Body: []byte("hi"), Headers: amqp.Table{"baggage": line}}
	ctx, span, err := cons.Extract(workerBase(), deliver(msg, "chat", "in", false))
	span.End()
	wantBadSignature(t, ctx, err)
}

// Exchange names, routing keys and MessageIds may hold a NUL, so the parts
// of a binding cannot be told apart by a separator alone: a message signed
// for exchange "a\x00b" and routing key "c" is refused when delivered from
// exchange "a" with routing key "b\x00c", and likewise when bytes move
// between the routing key and the MessageId. Each message is accepted
// where it was published.
func TestSignatureIsBoundToAnUnambiguousRoute(t *testing.T) {
	t.Parallel()
	pub, cons, _ := signedPair(t)
	for _, tc := range []struct {
		name                       string
		exchange, key, id          string
		movedEx, movedKey, movedID string
	}{
		{"a NUL moved from the exchange into the routing key", "a\x00b", "c", "", "a", "b\x00c", ""},
		{"a NUL moved from the routing key into the exchange", "a", "b\x00c", "", "a\x00b", "c", ""},
		{"a NUL moved from the routing key into the MessageId", "chat", "in\x00m", "1", "chat", "in", "m\x001"},
		{"a NUL moved from the MessageId into the routing key", "chat", "in", "m\x001", "chat", "in\x00m", "1"},
		{"every part shifted, from the exchange into the MessageId", "a\x00b", "c", "d", "a", "b", "c\x00d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := amqp.Publishing{MessageId: tc.id, Body: []byte("hi")}
			_, span := pub.Inject(otelsession.Bind(context.Background(), sessionFor(1)), &msg, tc.exchange, tc.key)
			span.End()
			ctx, span, err := cons.Extract(workerBase(), deliver(msg, tc.exchange, tc.key, false))
			span.End()
			wantAccepted(t, ctx, err, 1)

			moved := msg
			moved.MessageId = tc.movedID
			ctx, span, err = cons.Extract(workerBase(), deliver(moved, tc.movedEx, tc.movedKey, false))
			span.End()
			wantBadSignature(t, ctx, err)
		})
	}
}
