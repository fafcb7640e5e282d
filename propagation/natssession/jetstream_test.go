package natssession_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/natssession"
)

type seen struct {
	i         int
	worker    string
	delivered uint64
	problems  []string
}

// checker returns a JetStream handler that compares each message's session
// (message i in its data) with what conversation i bound, reports it on out,
// and then settles the message with settle.
func checker(worker string, out chan<- seen, settle func(jetstream.Msg, uint64) error) func(context.Context, jetstream.Msg) error {
	return func(ctx context.Context, msg jetstream.Msg) error {
		i, err := strconv.Atoi(string(msg.Data()))
		if err != nil {
			return fmt.Errorf("message data %q: %w", msg.Data(), err)
		}
		md, err := msg.Metadata()
		if err != nil {
			return err
		}
		c := conversationFor(i)
		out <- seen{i: i, worker: worker, delivered: md.NumDelivered, problems: diff(ctx, c.received(), c.s.Stateless)}
		return settle(msg, md.NumDelivered)
	}
}

func ack(msg jetstream.Msg, _ uint64) error { return msg.Ack() }

// 200 conversations publish concurrently; a pool of four workers, each
// starting from a context bound to its own session, consumes them. Every
// handler must see exactly its message's session: every Set field, every
// Cleared field as Cleared, every other field Unset.
func TestJetStreamConcurrentSessionsReachTheirOwnHandler(t *testing.T) {
	t.Parallel()
	const n, workers = 200, 4
	b := startBroker(t)
	cons := b.stream(t, "CHAT", 0, "chat.>")
	tp, _ := newTracing(t)
	pub := natssession.NewPublisher(natssession.WithPropagator(w3c), natssession.WithTracerProvider(tp), natssession.WithOutbound(toQueue))
	sub := natssession.NewConsumer(propagation.NewInbound(propagation.TrustAll),
		natssession.WithPropagator(w3c), natssession.WithTracerProvider(tp))

	out := make(chan seen, n)
	for w := range workers {
		name := fmt.Sprint("worker-", w)
		consume(t, cons, sub.JetStreamHandler(workerBase(name), checker(name, out, ack)))
	}

	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			ctx := conversationFor(i).bind(context.Background())
			msg := &nats.Msg{Subject: fmt.Sprintf("chat.%d", i%10), Data: []byte(strconv.Itoa(i))}
			if _, err := pub.PublishJetStream(ctx, b.js, msg); err != nil {
				errs <- err
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	got := make(map[int]bool)
	byWorker := make(map[string]int)
	for len(got) < n {
		s := within(t, 30*time.Second, out, fmt.Sprintf("message %d of %d", len(got)+1, n))
		if len(s.problems) > 0 {
			t.Errorf("message %d on %s (delivery %d):\n\t%s", s.i, s.worker, s.delivered, joinLines(s.problems))
		}
		got[s.i] = true
		byWorker[s.worker]++
	}
	t.Logf("messages per worker: %v", byWorker)
	if c := sub.Policy().Counts(); c.Accepted < n || c.Rejected != 0 || c.Untrusted != 0 {
		t.Errorf("policy counts %+v, want %d accepted and nothing refused", c, n)
	}
}

// A message the broker delivers again, after a nak or after its ack wait
// expired, is read from the stream with its stored headers: it carries its own
// session again, whatever the worker handled in between.
func TestJetStreamRedeliveryKeepsTheMessagesSession(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		ackWait time.Duration
		// first settles a message on its first delivery so that it comes again.
		first func(jetstream.Msg) error
	}{
		{"after nak", 0, func(m jetstream.Msg) error { return m.Nak() }},
		{"after ack timeout", 300 * time.Millisecond, func(jetstream.Msg) error { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := startBroker(t)
			cons := b.stream(t, "REDELIVER", tc.ackWait, "chat.>")
			pub := natssession.NewPublisher(natssession.WithPropagator(w3c), natssession.WithOutbound(toQueue))
			sub := natssession.NewConsumer(propagation.NewInbound(propagation.TrustAll), natssession.WithPropagator(w3c))

			out := make(chan seen, 16)
			consume(t, cons, sub.JetStreamHandler(workerBase("w"), checker("w", out, func(m jetstream.Msg, delivered uint64) error {
				if delivered == 1 {
					return tc.first(m)
				}
				return m.Ack()
			})))

			// Two messages of different conversations, so that the worker
			// handles the other one between a message's two deliveries.
			for _, i := range []int{1, 2} {
				ctx := conversationFor(i).bind(context.Background())
				if _, err := pub.PublishJetStream(ctx, b.js, &nats.Msg{Subject: "chat.in", Data: []byte(strconv.Itoa(i))}); err != nil {
					t.Fatal(err)
				}
			}
			deliveries := make(map[int][]uint64)
			for len(deliveries[1]) < 2 || len(deliveries[2]) < 2 {
				s := within(t, 10*time.Second, out, "redelivery")
				if len(s.problems) > 0 {
					t.Errorf("message %d, delivery %d:\n\t%s", s.i, s.delivered, joinLines(s.problems))
				}
				deliveries[s.i] = append(deliveries[s.i], s.delivered)
			}
			for i, d := range deliveries {
				if d[0] != 1 || d[1] != 2 {
					t.Errorf("message %d delivered as %v, want [1 2 …]", i, d)
				}
			}
		})
	}
}

// One worker handles message A, which has a session, and then messages that
// carry none (published without headers, with trace context only, with only
// other baggage). They read every field Unset: neither A's session nor the
// worker's own base session leaks into them.
func TestJetStreamSessionNeverLeaksIntoTheNextMessage(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	cons := b.stream(t, "LEAK", 0, "chat.>")
	tp, _ := newTracing(t)
	pub := natssession.NewPublisher(natssession.WithPropagator(w3c), natssession.WithTracerProvider(tp), natssession.WithOutbound(toQueue))
	sub := natssession.NewConsumer(propagation.NewInbound(propagation.TrustAll), natssession.WithPropagator(w3c))

	type result struct {
		name     string
		problems []string
		tenant   string
	}
	out := make(chan result, 8)
	consume(t, cons, sub.JetStreamHandler(workerBase("w"), func(ctx context.Context, msg jetstream.Msg) error {
		name := string(msg.Data())
		var problems []string
		if name == "A" {
			c := conversationFor(3)
			problems = diff(ctx, c.received(), c.s.Stateless)
		} else {
			problems = diff(ctx, unset, false)
		}
		out <- result{name, problems, baggageMember(ctx, "app.tenant")}
		return msg.Ack()
	}))

	ctx := t.Context()
	publish := []struct {
		name string
		send func(data []byte) error
	}{
		{"A", func(d []byte) error {
			_, err := pub.PublishJetStream(conversationFor(3).bind(ctx), b.js, &nats.Msg{Subject: "chat.a", Data: d})
			return err
		}},
		{"no headers", func(d []byte) error {
			_, err := b.js.PublishMsg(ctx, &nats.Msg{Subject: "chat.b", Data: d})
			return err
		}},
		{"trace context only", func(d []byte) error {
			_, err := pub.PublishJetStream(ctx, b.js, &nats.Msg{Subject: "chat.c", Data: d})
			return err
		}},
		{"other baggage only", func(d []byte) error {
			_, err := b.js.PublishMsg(ctx, &nats.Msg{Subject: "chat.d", Data: d, Header: nats.Header{"baggage": {"app.tenant=acme"}}})
			return err
		}},
	}
	for _, p := range publish {
		if err := p.send([]byte(p.name)); err != nil {
			t.Fatalf("publish %s: %v", p.name, err)
		}
	}
	for _, p := range publish {
		r := within(t, 10*time.Second, out, p.name)
		if r.name != p.name {
			t.Fatalf("handled %q, want %q (one worker handles the stream in order)", r.name, p.name)
		}
		if len(r.problems) > 0 {
			t.Errorf("message %q:\n\t%s", r.name, joinLines(r.problems))
		}
		if wantTenant := map[bool]string{true: "acme"}[p.name == "other baggage only"]; r.tenant != wantTenant {
			t.Errorf("message %q: app.tenant = %q, want %q", r.name, r.tenant, wantTenant)
		}
	}
}
