// Command amqp shows a session crossing RabbitMQ: conversations publish
// messages with amqp091-go, each bound to its own session, with publisher
// confirms; a worker consumes them with manual acks and handles each in
// exactly that message's session.
//
// It needs a running RabbitMQ broker (Debian: apt-get install
// rabbitmq-server). It declares a non-durable exchange and an exclusive
// queue of its own, prints what the worker saw for every message and exits 1
// if any message was handled in the wrong session.
//
//	go run ./examples/amqp -amqp amqp://guest:guest@127.0.0.1:5672/
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	neturl "net/url"
	"os"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/examples/internal/exampleflag"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/amqpsession"
)

func main() {
	url := flag.String("amqp", "amqp://guest:guest@127.0.0.1:5672/", "URL of a RabbitMQ broker")
	exampleflag.Parse("amqp", `Shows a session crossing RabbitMQ: conversations publish messages with
amqp091-go, each bound to its own session, with publisher confirms, and a
worker consumes them with manual acks, handling each in exactly that
message's session. It needs a running broker (Debian: apt-get install
rabbitmq-server); it declares an exchange and an exclusive queue of its own,
both gone when it ends. It prints what the worker saw for every message; exit
status 1 if any message was handled in the wrong session.`,
		"amqp",
		"amqp -amqp amqp://user:password@rabbit.internal:5672/vhost")
	if _, err := amqp.ParseURI(*url); err != nil {
		exampleflag.Fail("amqp", "-amqp %s is not a RabbitMQ URL: %v", redact(*url), err)
	}
	if err := run(*url, 4, 3); err != nil {
		fmt.Fprintln(os.Stderr, "amqp:", err)
		os.Exit(1)
	}
}

// redact hides a URL's password, which errors and logs must not show.
func redact(raw string) string {
	u, err := neturl.Parse(raw)
	if err != nil {
		return "(an unparsable URL)"
	}
	return u.Redacted()
}

func run(url string, conversations, messages int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	otel.SetTextMapPropagator(otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{}))

	conn, err := amqp.Dial(url)
	var refused *amqp.Error
	switch {
	case errors.As(err, &refused) && refused.Code == amqp.AccessRefused:
		return fmt.Errorf("the RabbitMQ broker at %s refused the user name or password (%w); pass the right ones in the -amqp URL", redact(url), err)
	case errors.As(err, &refused):
		return fmt.Errorf("the RabbitMQ broker at %s refused the connection: %w", redact(url), err)
	case err != nil:
		return fmt.Errorf("cannot connect to a RabbitMQ broker at %s (%w); start one (Debian: apt-get install rabbitmq-server) or pass its URL with -amqp", redact(url), err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open a channel: %w", err)
	}
	const exchange, key = "sessionwire-demo", "chat"
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeDirect, false, true, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", exchange, err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err == nil {
		err = ch.QueueBind(q.Name, key, exchange, false, nil)
	}
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		return fmt.Errorf("set up queue and confirms: %w", err)
	}

	// The session may go to this exchange and nowhere else; the worker
	// trusts it because only the gateway may publish to it.
	pub := amqpsession.NewPublisher(amqpsession.WithOutbound(
		propagation.NewOutbound(propagation.AllowNames(propagation.TransportAMQP, exchange))))
	worker := amqpsession.NewConsumer(propagation.NewInbound(propagation.TrustAll))
	for m := range messages {
		for c := range conversations {
			chat := fmt.Sprintf("chat-%d", c+1)
			msg := amqp.Publishing{MessageId: fmt.Sprintf("%s-m%d", chat, m+1), Body: []byte(chat)}
			session := otelsession.Session{Platform: "telegram", ChatID: chat, UserID: "user-" + chat}
			pctx, span := pub.Inject(otelsession.Bind(ctx, session), &msg, exchange, key)
			dc, err := ch.PublishWithDeferredConfirmWithContext(pctx, exchange, key, true, false, msg)
			if err == nil && !dc.Wait() {
				err = errors.New("the broker refused it")
			}
			span.End()
			if err != nil {
				return fmt.Errorf("publish %s: %w", msg.MessageId, err)
			}
		}
	}

	deliveries, err := ch.Consume(q.Name, "", false, true, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	// The worker's own context has a session, which no message may inherit.
	base := otelsession.Bind(context.Background(), otelsession.Session{Platform: "worker", ChatID: "worker"})
	wrong := 0
	for range conversations * messages {
		var d amqp.Delivery
		select {
		case d = <-deliveries:
		case <-ctx.Done():
			return fmt.Errorf("waiting for deliveries: %w", ctx.Err())
		}
		dctx, span, err := worker.Extract(base, &d)
		chat, _ := otelsession.Lookup(dctx, otelsession.FieldChatID)
		ok := err == nil && chat == string(d.Body)
		if !ok {
			wrong++
		}
		fmt.Printf("%-12s session chat=%s ok=%v\n", d.MessageId, chat, ok)
		span.End()
		if err := d.Ack(false); err != nil {
			return fmt.Errorf("ack %s: %w", d.MessageId, err)
		}
	}
	if wrong > 0 {
		return fmt.Errorf("%d messages handled in the wrong session", wrong)
	}
	fmt.Printf("%d messages, every one in its own session\n", conversations*messages)
	return nil
}
