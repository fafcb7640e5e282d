package natssession_test

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/natssession"
)

// A gateway publishes a chat message with its session; a worker subscribed
// to the subject handles it in a context bound to that session, and so can
// route its reply to the right thread.
func Example() {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		panic(err)
	}
	srv.Start()
	defer srv.WaitForShutdown()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		panic("NATS server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()

	// Usually installed once with otel.SetTextMapPropagator.
	prop := otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})
	// The session may go to the chat.* subjects, and nowhere else.
	pub := natssession.NewPublisher(natssession.WithPropagator(prop), natssession.WithOutbound(
		propagation.NewOutbound(propagation.AllowNames(propagation.TransportNATS, "chat.>"))))
	// Only the gateway can publish to this account, so its sessions are trusted.
	worker := natssession.NewConsumer(propagation.NewInbound(propagation.TrustAll), natssession.WithPropagator(prop))

	done := make(chan struct{})
	_, err = nc.Subscribe("chat.in", worker.Handler(context.Background(), func(ctx context.Context, msg *nats.Msg) error {
		defer close(done)
		chat, _ := otelsession.Lookup(ctx, otelsession.FieldChatID)
		thread, _ := otelsession.Lookup(ctx, otelsession.FieldThreadID)
		_, user := otelsession.Lookup(ctx, otelsession.FieldUserName)
		fmt.Printf("%s: reply to chat %s, thread %s (user name %s)\n", msg.Data, chat, thread, user)
		return nil
	}))
	if err != nil {
		panic(err)
	}
	if err := nc.Flush(); err != nil {
		panic(err)
	}

	ctx := otelsession.Bind(context.Background(), otelsession.Session{
		Platform: "telegram", ChatID: "-1001234567890", ThreadID: "17585", MessageID: "88121",
	})
	if err := pub.Publish(ctx, nc, &nats.Msg{Subject: "chat.in", Data: []byte("hello")}); err != nil {
		panic(err)
	}
	<-done
	// Output:
	// hello: reply to chat -1001234567890, thread 17585 (user name cleared)
}

// Messages from publishers that used otel's HTTP header carrier have
// canonical keys; they are read when the exact lower-case key is absent.
func ExampleHeaderCarrier() {
	h := nats.Header{"Baggage": {"session.chat_id=42"}}
	c := natssession.HeaderCarrier(h)
	fmt.Println(c.Get("baggage"))

	c.Set("baggage", "session.chat_id=43")
	fmt.Println(h)
	// Output:
	// session.chat_id=42
	// map[baggage:[session.chat_id=43]]
}
