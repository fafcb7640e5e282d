package amqpsession_test

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/amqpsession"
)

// The publisher's session travels in the message's header table; the
// consumer reads it back from the delivery through its trust policy.
func Example() {
	prop := otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})
	// The session may go through the default exchange, and nowhere else.
	pub := amqpsession.NewPublisher(amqpsession.WithPropagator(prop), amqpsession.WithOutbound(
		propagation.NewOutbound(propagation.AllowNames(propagation.TransportAMQP, amqpsession.DefaultExchange))))
	cons := amqpsession.NewConsumer(propagation.NewInbound(propagation.TrustAll), amqpsession.WithPropagator(prop))

	ctx := otelsession.Bind(context.Background(), otelsession.Session{Platform: "discord", ChatID: "1093", ThreadID: "1094"})
	msg := amqp.Publishing{Body: []byte("hello"), Headers: amqp.Table{"x-retries": int32(0)}}
	_, span := pub.Inject(ctx, &msg, "", "jobs") // then ch.PublishWithContext(ctx, "", "jobs", false, false, msg)
	span.End()

	// What the broker delivers to the consumer:
	d := amqp.Delivery{Headers: msg.Headers, RoutingKey: "jobs", Body: msg.Body}
	ctx, span, err := cons.Extract(context.Background(), &d)
	defer span.End()
	if err != nil {
		fmt.Println(err)
	}
	thread, _ := otelsession.Lookup(ctx, otelsession.FieldThreadID)
	fmt.Println(thread, d.Headers["x-retries"])
	// Output:
	// 1094 0
}
