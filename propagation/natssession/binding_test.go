package natssession_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/natssession"
)

// What a signature on a NATS message is bound to, on the message types
// alone: no server is needed to move a message's headers to another
// subject, which is what an attacker who can publish there does.

// signingPublisher signs for every subject with gatewayKey.
func signingPublisher(t *testing.T) *natssession.Publisher {
	t.Helper()
	return natssession.NewPublisher(natssession.WithPropagator(w3c),
		natssession.WithOutbound(propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(signer(t, gatewayKey)))))
}

// signedHeader returns the header of a message to subject, with id as its
// Nats-Msg-Id when it is not "", as a signing publisher wrote it for
// conversation i.
func signedHeader(t *testing.T, pub *natssession.Publisher, i int, subject, id string) nats.Header {
	t.Helper()
	msg := &nats.Msg{Subject: subject, Header: nats.Header{}}
	if id != "" {
		msg.Header.Set(jetstream.MsgIDHeader, id)
	}
	_, span := pub.Inject(conversationFor(i).bind(context.Background()), msg)
	span.End()
	if !strings.Contains(strings.Join(msg.Header.Values("baggage"), ","), otelsession.SignatureKey+"=") {
		t.Fatalf("the message to %q carries no signature", subject)
	}
	return msg.Header
}

// extractOn hands a copy of h to cons as a message received on subject.
func extractOn(cons *natssession.Consumer, h nats.Header, subject string) (context.Context, error) {
	cp := nats.Header{}
	for k, v := range h {
		cp[k] = append([]string(nil), v...)
	}
	ctx, span, err := cons.Extract(workerBase("w"), &nats.Msg{Subject: subject, Header: cp})
	span.End()
	return ctx, err
}

// wantAccepted fails t unless ctx holds exactly conversation i's session,
// and no signature: one bound to its subject verifies nowhere else, so the
// policy removes it once it accepted the session, with or without an id.
func wantAccepted(t *testing.T, ctx context.Context, err error, i int) {
	t.Helper()
	if err != nil {
		t.Fatalf("refused the signed message: %v", err)
	}
	c := conversationFor(i)
	if d := diff(ctx, c.received(), c.s.Stateless); len(d) > 0 {
		t.Fatalf("accepted, but:\n\t%s", joinLines(d))
	}
	if baggageMember(ctx, otelsession.SignatureKey) != "" {
		t.Fatal("a signature bound to its subject is still in the context")
	}
}

// wantBadSignature fails t unless the session was refused as
// ErrBadSignature and stripped: the whole session Unset, the worker's own
// included, and its signature gone.
func wantBadSignature(t *testing.T, ctx context.Context, err error) {
	t.Helper()
	if !errors.Is(err, propagation.ErrBadSignature) {
		t.Fatalf("err %v, want ErrBadSignature", err)
	}
	if d := diff(ctx, unset, false); len(d) > 0 {
		t.Fatalf("refused, but the session is not stripped:\n\t%s", joinLines(d))
	}
	if baggageMember(ctx, otelsession.SignatureKey) != "" {
		t.Fatal("refused, but the signature is still in the context")
	}
}

// A message is accepted on the subject it was signed for, with or without a
// Nats-Msg-Id, and refused on any other, the same id or none: an attacker
// who can publish to another subject (one a less careful worker consumes,
// say) cannot carry a captured signed session there. The message itself is
// accepted where it was published, also once the policy's cache holds its
// conversation (from its third message), which serves the session but still
// verifies every message's signature for its own subject and id.
func TestSignatureIsBoundToTheSubject(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"", "turn-1"} {
		t.Run("id "+id, func(t *testing.T) {
			t.Parallel()
			pub := signingPublisher(t)
			cons := natssession.NewConsumer(verifying(t), natssession.WithPropagator(w3c))
			h := signedHeader(t, pub, 3, "chat.in", id)

			t.Run("the signed message", func(t *testing.T) {
				ctx, err := extractOn(cons, h, "chat.in")
				wantAccepted(t, ctx, err, 3)
			})
			for _, subject := range []string{"chat.admin", "chat.in.x", "chat", "CHAT.IN"} {
				t.Run("published again to "+subject, func(t *testing.T) {
					ctx, err := extractOn(cons, h, subject)
					wantBadSignature(t, ctx, err)
				})
			}
			t.Run("from the cache", func(t *testing.T) {
				for n := range 3 {
					next := id
					if id != "" {
						next = strings.Repeat("n", n+1) // each message its own id
					}
					ctx, err := extractOn(cons, signedHeader(t, pub, 3, "chat.in", next), "chat.in")
					wantAccepted(t, ctx, err, 3)
					if n == 2 && cons.Policy().Counts().Cached == 0 {
						t.Fatal("the conversation's third message was not served from the cache")
					}
				}
				ctx, err := extractOn(cons, signedHeader(t, pub, 3, "chat.in", id), "chat.admin")
				wantBadSignature(t, ctx, err)
			})
		})
	}
}

// A session signed where nothing binds a signature (an HTTP request, a
// child process's environment) is refused on a NATS message without a
// Nats-Msg-Id, and one signed for a NATS message without an id is refused
// on an HTTP request: a signature made for one transport never verifies on
// another.
func TestHTTPSignatureIsRefusedOnAMessage(t *testing.T) {
	t.Parallel()
	s := signer(t, gatewayKey)
	out := propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(s))
	hdr := http.Header{}
	if err := out.Inject(conversationFor(2).bind(context.Background()), w3c, otelprop.HeaderCarrier(hdr), propagation.Dest{Transport: propagation.TransportHTTP}); err != nil {
		t.Fatal(err)
	}
	line := hdr.Get("baggage")
	if !strings.Contains(line, otelsession.SignatureKey+"=") {
		t.Fatalf("the request carries no signature: %q", line)
	}
	policy := verifying(t)
	// The signature is good: it verifies on an HTTP request.
	if _, err := policy.Extract(workerBase("w"), w3c, otelprop.HeaderCarrier(hdr), propagation.Peer{Transport: propagation.TransportHTTP}); err != nil {
		t.Fatalf("the HTTP signature does not verify on HTTP: %v", err)
	}
	cons := natssession.NewConsumer(policy, natssession.WithPropagator(w3c))
	ctx, err := extractOn(cons, nats.Header{"baggage": {line}}, "chat.in")
	wantBadSignature(t, ctx, err)

	t.Run("and the other way", func(t *testing.T) {
		h := signedHeader(t, signingPublisher(t), 2, "chat.in", "")
		_, err := verifying(t).Extract(workerBase("w"), w3c, natssession.HeaderCarrier(h), propagation.Peer{Transport: propagation.TransportHTTP})
		if !errors.Is(err, propagation.ErrBadSignature) {
			t.Fatalf("a NATS signature on an HTTP request: err %v, want ErrBadSignature", err)
		}
	})
}

// A Nats-Msg-Id may hold any byte, so an attacker can write another
// transport's binding into it: a session signed for a Kafka record (bound
// to "kafka\x00<topic>\x00<id>") is still refused on a NATS message whose
// id spells that binding, and so is one signed where nothing binds it on a
// message whose id is empty but present.
func TestOtherTransportsBindingInTheIDIsRefused(t *testing.T) {
	t.Parallel()
	s := signer(t, gatewayKey)
	for _, binding := range []string{"kafka\x00chat-in\x00m-1", "amqp\x00chat\x00in\x00m-1", ""} {
		t.Run(strings.ReplaceAll(binding, "\x00", "|"), func(t *testing.T) {
			t.Parallel()
			signed, err := s.SignFor(conversationFor(4).bind(context.Background()), binding)
			if err != nil {
				t.Fatal(err)
			}
			h := nats.Header{}
			w3c.Inject(signed, natssession.HeaderCarrier(h))
			h[jetstream.MsgIDHeader] = []string{binding}
			cons := natssession.NewConsumer(verifying(t), natssession.WithPropagator(w3c))
			ctx, err := extractOn(cons, h, "chat-in")
			wantBadSignature(t, ctx, err)
		})
	}
}

// A subject may hold a NUL (nats.go and the server deliver it), and so may
// a Nats-Msg-Id: bytes moved from the end of the subject into the id do
// not carry the signature with them.
func TestSubjectAndIDCannotTradeBytes(t *testing.T) {
	t.Parallel()
	pub := signingPublisher(t)
	cons := natssession.NewConsumer(verifying(t), natssession.WithPropagator(w3c))
	for _, tc := range []struct{ name, subject, id, movedSubject, movedID string }{
		{"from the subject into the id", "chat\x00in", "m", "chat", "in\x00m"},
		{"from the id into the subject", "chat", "in\x00m", "chat\x00in", "m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := signedHeader(t, pub, 5, tc.subject, tc.id)
			ctx, err := extractOn(cons, h, tc.subject)
			wantAccepted(t, ctx, err, 5)
			h.Set(jetstream.MsgIDHeader, tc.movedID)
			ctx, err = extractOn(cons, h, tc.movedSubject)
			wantBadSignature(t, ctx, err)
		})
	}
}

// A Nats-Msg-Id entry with no values, which only code can build (the wire
// has no such header), is no id: signing, publishing and consuming such a
// message bind the signature to its subject alone, as without the entry.
// nats.Header.Get, which the package used to read the id with, panics on it.
func TestAMessageIDWithoutValuesIsNoID(t *testing.T) {
	t.Parallel()
	pub := signingPublisher(t)
	msg := &nats.Msg{Subject: "chat.in", Header: nats.Header{jetstream.MsgIDHeader: {}}}
	_, span := pub.Inject(conversationFor(1).bind(context.Background()), msg)
	span.End()
	ctx, err := extractOn(natssession.NewConsumer(verifying(t), natssession.WithPropagator(w3c)), msg.Header, "chat.in")
	wantAccepted(t, ctx, err, 1)

	h := signedHeader(t, pub, 2, "chat.in", "")
	h[jetstream.MsgIDHeader] = []string{}
	ctx, err = extractOn(natssession.NewConsumer(verifying(t), natssession.WithPropagator(w3c)), h, "chat.in")
	wantAccepted(t, ctx, err, 2)
}
