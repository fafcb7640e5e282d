package kafkasession_test

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/kafkasession"
)

// The producer's session travels in the record's headers; the consumer reads
// it back through its trust policy, in a fresh context per record.
func Example() {
	prop := otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})
	// The session may go to the chat-in topic, and nowhere else.
	pub := kafkasession.NewPublisher(kafkasession.WithPropagator(prop), kafkasession.WithOutbound(
		propagation.NewOutbound(propagation.AllowNames(propagation.TransportKafka, "chat-in"))))
	cons := kafkasession.NewConsumer(propagation.NewInbound(propagation.TrustAll), kafkasession.WithPropagator(prop))

	ctx := otelsession.Bind(context.Background(), otelsession.Session{Platform: "slack", ChatID: "C024BE91L", ThreadID: "1700000000.000100"})
	rec := &kgo.Record{Topic: "chat-in", Value: []byte("hello")}
	_, span := pub.Inject(ctx, rec) // then client.Produce(ctx, rec, promise); end span in the promise
	span.End()
	fmt.Println(kafkasession.NewRecordCarrier(rec).Keys())

	// In the consumer, for each fetched record:
	ctx, span, err := cons.Extract(context.Background(), rec)
	defer span.End()
	if err != nil {
		fmt.Println(err)
	}
	chat, _ := otelsession.Lookup(ctx, otelsession.FieldChatID)
	_, user := otelsession.Lookup(ctx, otelsession.FieldUserID)
	fmt.Println(chat, user)
	// Output:
	// [baggage]
	// C024BE91L cleared
}
