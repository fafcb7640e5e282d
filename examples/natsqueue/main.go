// Command natsqueue shows a session crossing a NATS JetStream queue.
//
// It starts an embedded NATS server with JetStream on 127.0.0.1 (a random
// port, its store in a temporary directory removed at exit). A handful of
// conversations publish messages concurrently, each bound to its own session
// (platform, chat, thread, user, message anchor); a small pool of workers
// consumes them. Every worker starts from a context bound to a session of its
// own, to show that nothing leaks from it or from the previous message into
// the next one.
//
// For every message it prints the session the worker saw and whether it is
// the one the message was published with (the message body carries the
// expected session, so the check does not trust the headers). It exits by
// itself, with status 1 if any message was handled with the wrong session.
//
//	go run ./examples/natsqueue
//	go run ./examples/natsqueue -conversations 20 -messages 10 -workers 8
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	otelprop "go.opentelemetry.io/otel/propagation"

	"github.com/sessionwire/sessionwire/examples/internal/exampleflag"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/natssession"
)

func main() {
	conversations := flag.Int("conversations", 5, "concurrent conversations")
	messages := flag.Int("messages", 4, "messages per conversation")
	workers := flag.Int("workers", 3, "consuming workers")
	timeout := flag.Duration("timeout", 30*time.Second, "give up after this long")
	exampleflag.Parse("natsqueue", `Shows a session crossing a NATS JetStream queue. It starts an embedded NATS
server on 127.0.0.1 (its store in a temporary directory, removed at exit);
conversations publish messages concurrently, each in its own session, and a
pool of workers consumes them. For every message it prints the session the
worker saw and whether it is the one the message was published with. Exit
status 1 if any message was handled with the wrong session.`,
		"natsqueue",
		"natsqueue -conversations 20 -messages 10 -workers 8")
	if *conversations < 1 || *messages < 1 || *workers < 1 || *timeout <= 0 {
		exampleflag.Fail("natsqueue", "-conversations, -messages and -workers must be at least 1, -timeout positive")
	}
	os.Exit(run(*conversations, *messages, *workers, *timeout))
}

// expected is a message's session as the publisher bound it, sent in the
// message body so that the worker can check what the headers delivered.
type expected struct {
	Platform, ChatID, ThreadID, UserID, MessageID string
}

// checked are the fields compared, in print order.
var checked = []struct {
	name  string
	field otelsession.Field
	want  func(expected) string
}{
	{"platform", otelsession.FieldPlatform, func(e expected) string { return e.Platform }},
	{"chat", otelsession.FieldChatID, func(e expected) string { return e.ChatID }},
	{"thread", otelsession.FieldThreadID, func(e expected) string { return e.ThreadID }},
	{"user", otelsession.FieldUserID, func(e expected) string { return e.UserID }},
	{"anchor", otelsession.FieldMessageID, func(e expected) string { return e.MessageID }},
}

type handled struct {
	worker  string
	message string
	saw     string
	ok      bool
}

func run(conversations, messages, workers int, timeout time.Duration) int {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	// The session travels as W3C baggage; install the standard propagators
	// once, as any OpenTelemetry program does.
	otel.SetTextMapPropagator(otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{}))

	js, stop, err := startJetStream()
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsqueue:", err)
		return 1
	}
	defer stop()

	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "CHAT", Subjects: []string{"chat.>"}, Storage: jetstream.FileStorage,
	}); err != nil {
		fmt.Fprintln(os.Stderr, "natsqueue: create stream:", err)
		return 1
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "CHAT", jetstream.ConsumerConfig{
		Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsqueue: create consumer:", err)
		return 1
	}

	total := conversations * messages
	results := make(chan handled, total)
	// Only this program publishes to the embedded server, so its sessions are
	// trusted. A real worker names the publishers it trusts.
	worker := natssession.NewConsumer(propagation.NewInbound(propagation.TrustAll))
	for w := range workers {
		name := fmt.Sprintf("worker-%d", w+1)
		base := otelsession.Bind(context.Background(), otelsession.Session{
			Platform: "worker", ChatID: name, ThreadID: name, UserID: name, MessageID: name,
		})
		cc, err := cons.Consume(worker.JetStreamHandler(base, func(ctx context.Context, msg jetstream.Msg) error {
			results <- check(name, ctx, msg.Data())
			return msg.Ack()
		}))
		if err != nil {
			fmt.Fprintln(os.Stderr, "natsqueue: consume:", err)
			return 1
		}
		defer func() {
			cc.Stop()
			<-cc.Closed()
		}()
	}

	// The session may go to this program's own subjects, and nowhere else.
	pub := natssession.NewPublisher(natssession.WithOutbound(
		propagation.NewOutbound(propagation.AllowNames(propagation.TransportNATS, "chat.>"))))
	var wg sync.WaitGroup
	errs := make(chan error, total)
	for c := range conversations {
		wg.Go(func() {
			for m := range messages {
				e := expected{
					Platform:  []string{"telegram", "discord", "slack"}[c%3],
					ChatID:    fmt.Sprintf("chat-%d", c+1),
					ThreadID:  fmt.Sprintf("thread-%d", c+1),
					UserID:    fmt.Sprintf("user-%d", c+1),
					MessageID: fmt.Sprintf("c%d-m%d", c+1, m+1),
				}
				if c%2 == 1 {
					e.ThreadID = "" // a chat without threads: bound Cleared
				}
				sctx := otelsession.Bind(ctx, otelsession.Session{
					Platform: e.Platform, ChatID: e.ChatID, ThreadID: e.ThreadID, UserID: e.UserID, MessageID: e.MessageID,
				})
				body, _ := json.Marshal(e)
				if _, err := pub.PublishJetStream(sctx, js, &nats.Msg{Subject: "chat.in", Data: body}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		fmt.Fprintln(os.Stderr, "natsqueue:", err)
		return 1
	}

	fmt.Printf("%d conversations × %d messages, %d workers\n\n", conversations, messages, workers)
	mismatched := 0
	for range total {
		select {
		case r := <-results:
			verdict := "ok"
			if !r.ok {
				verdict = "MISMATCH"
				mismatched++
			}
			fmt.Printf("%-9s %-7s %s  %s\n", r.worker, r.message, r.saw, verdict)
		case <-ctx.Done():
			fmt.Fprintf(os.Stderr, "natsqueue: timed out after %v waiting for messages\n", timeout)
			return 1
		}
	}
	c := worker.Policy().Counts()
	fmt.Printf("\n%d messages, %d with the right session, %d mismatched (policy: %d accepted, %d refused)\n",
		total, total-mismatched, mismatched, c.Accepted, c.Rejected+c.Untrusted)
	if mismatched > 0 {
		return 1
	}
	return 0
}

// check compares the session a worker saw with the one in the message body.
func check(worker string, ctx context.Context, body []byte) handled {
	var e expected
	if err := json.Unmarshal(body, &e); err != nil {
		return handled{worker: worker, message: "?", saw: "unreadable body: " + err.Error()}
	}
	ok := true
	var saw []string
	for _, c := range checked {
		v, st := otelsession.Lookup(ctx, c.field)
		shown := v
		switch st {
		case otelsession.Cleared:
			shown = "(cleared)"
		case otelsession.Unset:
			shown = "(unset)"
		}
		want := c.want(e)
		// An empty expected value was bound Cleared, never left Unset.
		if v != want || (want == "" && st != otelsession.Cleared) {
			ok = false
		}
		saw = append(saw, c.name+"="+shown)
	}
	return handled{worker: worker, message: e.MessageID, saw: strings.Join(saw, " "), ok: ok}
}

// startJetStream starts an embedded NATS server with JetStream on 127.0.0.1
// and a random port, storing in a new temporary directory, and connects to
// it. stop closes the connection, shuts the server down and removes the
// directory.
func startJetStream() (js jetstream.JetStream, stop func(), err error) {
	dir, err := os.MkdirTemp("", "natsqueue-")
	if err != nil {
		return nil, nil, fmt.Errorf("temporary store directory: %w", err)
	}
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
	})
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("start NATS server: %w", err), os.RemoveAll(dir))
	}
	srv.Start()
	shutdown := func() {
		srv.Shutdown()
		srv.WaitForShutdown()
		_ = os.RemoveAll(dir)
	}
	if !srv.ReadyForConnections(10 * time.Second) {
		shutdown()
		return nil, nil, errors.New("start NATS server: not ready after 10s")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		shutdown()
		return nil, nil, fmt.Errorf("connect to NATS at %s: %w", srv.ClientURL(), err)
	}
	js, err = jetstream.New(nc)
	if err != nil {
		nc.Close()
		shutdown()
		return nil, nil, fmt.Errorf("JetStream: %w", err)
	}
	fmt.Printf("embedded NATS server with JetStream at %s, store %s\n", srv.ClientURL(), dir)
	return js, func() { nc.Close(); shutdown() }, nil
}
