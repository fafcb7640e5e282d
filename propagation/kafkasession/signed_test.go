package kafkasession_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/kafkasession"
)

// A signed session is bound to its record's message id and topic: the same
// headers on another record, or the record replayed onto another topic, are
// refused with the reason NATS gives (ErrBadSignature).
func TestSignatureIsBoundToTheRecord(t *testing.T) {
	t.Parallel()
	key := propagation.Key{ID: "k1", Secret: []byte(strings.Repeat("s", 32))}
	signer, err := propagation.NewSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := propagation.NewVerifier([]propagation.Key{key})
	if err != nil {
		t.Fatal(err)
	}
	pub := kafkasession.NewPublisher(kafkasession.WithPropagator(w3c),
		kafkasession.WithOutbound(propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(signer))))
	cons := kafkasession.NewConsumer(propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier)),
		kafkasession.WithPropagator(w3c))

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
