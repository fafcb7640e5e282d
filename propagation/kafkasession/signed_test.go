package kafkasession_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/internal/sessiontest"
	"github.com/sessionwire/sessionwire/propagation/kafkasession"
)

// A signed session is bound to its record's message id and topic: the same
// headers on another record, or the record replayed onto another topic, are
// refused with the reason NATS gives (ErrBadSignature).
func TestSignatureIsBoundToTheRecord(t *testing.T) {
	t.Parallel()
	pub, cons, _ := signedPair(t)

	r := &kgo.Record{Topic: "chat-in", Value: []byte("hi"), Headers: h(kafkasession.MessageIDHeader, "m-1")}
	_, span := pub.Inject(otelsession.Bind(context.Background(), sessionFor(1)), r)
	span.End()

	moved := func(topic, id string) *kgo.Record {
		out := &kgo.Record{Topic: topic, Value: r.Value}
		for _, hd := range r.Headers {
			if hd.Key == kafkasession.MessageIDHeader {
				hd.Value = []byte(id)
			}
			out.Headers = append(out.Headers, hd)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		rec    *kgo.Record
		wantOK bool
	}{
		{"the signed record", moved("chat-in", "m-1"), true},
		{"another record id", moved("chat-in", "m-2"), false},
		{"another topic", moved("partner-in", "m-1"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, span, err := cons.Extract(context.Background(), wire(tc.rec, 0, 1))
			span.End()
			_, st := otelsession.Lookup(ctx, otelsession.FieldChatID)
			if tc.wantOK {
				if err != nil || st != otelsession.Set {
					t.Fatalf("refused the signed record: %v (chat id %s)", err, st)
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
func signedPair(t *testing.T) (*kafkasession.Publisher, *kafkasession.Consumer, *propagation.Signer) {
	t.Helper()
	signer, policy := sessiontest.SigningPolicies(t)
	pub := kafkasession.NewPublisher(kafkasession.WithPropagator(w3c),
		kafkasession.WithOutbound(propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(signer))))
	return pub, kafkasession.NewConsumer(policy, kafkasession.WithPropagator(w3c)), signer
}

var (
	wantAccepted     = sessiontest.WantAccepted
	wantNoSignature  = sessiontest.WantNoSignature
	wantBadSignature = sessiontest.WantBadSignature
)

// A record without a message-id header has nothing of its own to bind a
// signature to, but its topic still binds it: the record produced again
// onto another topic is refused, as one with an id is. The record itself
// is accepted where it was produced, also once the policy's cache holds
// its conversation (from its third record), which serves the session but
// still verifies every record's signature for its own topic.
func TestSignatureWithoutIDIsBoundToTheTopic(t *testing.T) {
	t.Parallel()
	pub, cons, _ := signedPair(t)
	produce := func() *kgo.Record {
		r := &kgo.Record{Topic: "chat-in", Value: []byte("hi")}
		_, span := pub.Inject(otelsession.Bind(context.Background(), sessionFor(1)), r)
		span.End()
		if id := kafkasession.NewRecordCarrier(r).Get(kafkasession.MessageIDHeader); id != "" {
			t.Fatalf("the record has message id %q, want none", id)
		}
		if !strings.Contains(kafkasession.NewRecordCarrier(r).Get("baggage"), otelsession.SignatureKey+"=") {
			t.Fatal("the record carries no signature")
		}
		return r
	}
	onTopic := func(r *kgo.Record, topic string) *kgo.Record {
		out := wire(r, 0, 1)
		out.Topic = topic
		return out
	}
	extract := func(r *kgo.Record) (context.Context, error) {
		ctx, span, err := cons.Extract(workerBase(), r)
		span.End()
		return ctx, err
	}

	r := produce()
	t.Run("the signed record", func(t *testing.T) {
		ctx, err := extract(onTopic(r, "chat-in"))
		wantAccepted(t, ctx, err, 1)
	})
	t.Run("the signed record's signature is not handed on", func(t *testing.T) {
		ctx, err := extract(onTopic(r, "chat-in"))
		wantAccepted(t, ctx, err, 1)
		wantNoSignature(t, ctx)
	})
	for _, topic := range []string{"partner-in", "chat-in2", "chat"} {
		t.Run("produced again onto "+topic, func(t *testing.T) {
			ctx, err := extract(onTopic(r, topic))
			wantBadSignature(t, ctx, err)
		})
	}
	t.Run("from the cache", func(t *testing.T) {
		for n := range 3 {
			ctx, err := extract(onTopic(produce(), "chat-in"))
			wantAccepted(t, ctx, err, 1)
			wantNoSignature(t, ctx)
			if n == 2 && cons.Policy().Counts().Cached == 0 {
				t.Fatal("the conversation's third record was not served from the cache")
			}
		}
		ctx, err := extract(onTopic(produce(), "partner-in"))
		wantBadSignature(t, ctx, err)
	})
}

// A session signed for an HTTP request (which has no message id, so the
// signature is bound to no message) is refused on a record without a
// message id: a signature made for one transport never verifies on another.
func TestHTTPSignatureIsRefusedOnARecord(t *testing.T) {
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

	r := &kgo.Record{Topic: "chat-in", Value: []byte("hi"), Headers: h("baggage", line)}
	ctx, span, err := cons.Extract(workerBase(), r)
	span.End()
	wantBadSignature(t, ctx, err)
}
