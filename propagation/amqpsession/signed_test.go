package amqpsession_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/amqpsession"
)

// A signed session is bound to its message's MessageId, exchange and routing
// key: the same table on another message, or routed elsewhere, is refused
// with the reason NATS gives (ErrBadSignature).
func TestSignatureIsBoundToTheMessage(t *testing.T) {
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
	pub := amqpsession.NewPublisher(amqpsession.WithPropagator(w3c),
		amqpsession.WithOutbound(propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(signer))))
	cons := amqpsession.NewConsumer(propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier)),
		amqpsession.WithPropagator(w3c))

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
