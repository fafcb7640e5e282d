package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sessionwire/sessionwire/otelsession"
)

// The JetStream layout every role agrees on.
const (
	jobsStream    = "GW_JOBS"    // chat messages, gateway -> workers
	bgStream      = "GW_BG"      // background work, worker -> workers, with its stored origin
	repliesStream = "GW_REPLIES" // replies and completions, workers -> router
	deliveredKV   = "gw-delivered"

	jobsSubject    = "gw.jobs."    // + platform
	bgSubject      = "gw.bg."      // + platform
	repliesSubject = "gw.replies." // + kind
	refusedSubject = "gw.events.refused"
)

// job is a queued chat message: what the platform sent, normalised. The
// session travels beside it, in the message headers, not in it.
type job struct {
	ID         string `json:"id"` // unique message id, the reply anchor
	Text       string `json:"text"`
	Background bool   `json:"background"` // the user asked for work that completes later
	// The routing fields, repeated here only for --propagation=off (the
	// baseline without sessions) and --session-store=env (the old bug).
	Route otelsession.Session `json:"route"`
}

// backgroundJob is work whose completion arrives after the turn ended. It
// stores the routing origin, so any worker and a restarted router can deliver
// it.
type backgroundJob struct {
	ID     string             `json:"id"`
	Origin otelsession.Origin `json:"origin"`
}

// notification is a reply or a completion on its way to the router.
type notification struct {
	Kind          string             `json:"kind"` // "reply" or "completion"
	ID            string             `json:"id"`   // the message it answers, from the job itself
	Origin        otelsession.Origin `json:"origin"`
	Text          string             `json:"text"`
	ToolSaw       string             `json:"tool_saw,omitempty"`       // thread the child process read
	DownstreamSaw string             `json:"downstream_saw,omitempty"` // thread the downstream service read
	Background    string             `json:"background,omitempty"`     // "started", "refused: stateless channel"
}

// delivery is what a chat platform received from the router.
type delivery struct {
	notification
	Platform string    `json:"platform"`
	At       time.Time `json:"-"`
}

// refusal is what the router publishes when it will not deliver.
type refusal struct {
	Kind   string `json:"kind"`
	ID     string `json:"id"`
	Reason string `json:"reason"`
	Forged bool   `json:"forged,omitempty"` // its session did not verify; kind and id are the sender's word
}

// ensureJetStream creates the streams and the bucket, or checks they exist.
func ensureJetStream(ctx context.Context, js jetstream.JetStream) error {
	for _, s := range []jetstream.StreamConfig{
		{Name: jobsStream, Subjects: []string{jobsSubject + ">"}},
		{Name: bgStream, Subjects: []string{bgSubject + ">"}},
		{Name: repliesStream, Subjects: []string{repliesSubject + ">"}},
	} {
		s.Retention = jetstream.WorkQueuePolicy
		s.Storage = jetstream.FileStorage
		s.Duplicates = 5 * time.Minute // publishes carry Nats-Msg-Id: a retried publish is stored once
		if _, err := js.CreateOrUpdateStream(ctx, s); err != nil {
			return fmt.Errorf("create stream %s: %w", s.Name, err)
		}
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: deliveredKV, TTL: time.Hour, Storage: jetstream.FileStorage}); err != nil {
		return fmt.Errorf("create key-value bucket %s: %w", deliveredKV, err)
	}
	return nil
}

// consumer returns the durable pull consumer of a stream, shared by every
// process of a role.
func consumer(ctx context.Context, js jetstream.JetStream, stream, name string, ackWait time.Duration) (jetstream.Consumer, error) {
	c, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: name, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxAckPending: 1024,
	})
	if err != nil {
		return nil, fmt.Errorf("create consumer %s on %s: %w", name, stream, err)
	}
	return c, nil
}

// keepAlive tells JetStream the message is still being worked on, every
// third of its ack wait, until stop is called: under load a job may take
// longer than the ack wait, and a redelivery while the first delivery still
// runs would do the work twice. Only a process that dies stops the signal.
func keepAlive(msg jetstream.Msg, ackWait time.Duration) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(ackWait / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	return func() { close(done) }
}

// pool runs message handlers concurrently, at most n at once, and stops
// cleanly: after close, a message still arriving is left unacknowledged (so
// JetStream redelivers it), and close returns when the running ones are done.
type pool struct {
	sem     chan struct{}
	mu      sync.Mutex
	closing bool
	wg      sync.WaitGroup
}

func newPool(n int) *pool { return &pool{sem: make(chan struct{}, n)} }

func (p *pool) handler(h func(jetstream.Msg)) jetstream.MessageHandler {
	return func(msg jetstream.Msg) {
		p.sem <- struct{}{}
		p.mu.Lock()
		if p.closing {
			p.mu.Unlock()
			<-p.sem
			return
		}
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer func() { <-p.sem; p.wg.Done() }()
			h(msg)
		}()
	}
}

func (p *pool) close() {
	p.mu.Lock()
	p.closing = true
	p.mu.Unlock()
	p.wg.Wait()
}
