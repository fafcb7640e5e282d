package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
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
	repliesSubject = "gw.replies." // + kind + "." + platform (replySubject)
	refusedSubject = "gw.events.refused"

	// maxAckPending is how many messages a consumer hands out that are not
	// acknowledged yet, those waiting to be tried again included.
	maxAckPending = 1024
)

// platformNames are the platforms the ingress takes messages from, each
// with a subject and a consumer of its own for its notifications.
// otherPlatform stands for any other in a subject.
var platformNames = []string{"telegram", "discord", "slack", "api_server"}

const otherPlatform = "other"

// replySubject is where a notification of kind ("reply", "completion") for
// platform is queued. Each platform has its own, and the router pulls each
// through a consumer of its own (routerConsumers): a notification its
// platform cannot take yet waits for its retry while still counted against
// its consumer's maxAckPending, so with one consumer for every platform, a
// platform down for long enough held every slot and no other platform got
// anything until it came back.
func replySubject(kind, platform string) string {
	if !slices.Contains(platformNames, platform) {
		platform = otherPlatform
	}
	return repliesSubject + kind + "." + platform
}

// routerConsumer is one of the router's consumers: its durable name and the
// subjects it takes.
type routerConsumer struct {
	name    string
	filters []string
}

// routerConsumers are the router's consumers, one per platform and one for
// any other. The first, under the name the single consumer of earlier
// versions had, takes what their workers queued (on repliesSubject + kind,
// without a platform), so that an upgrade delivers what was queued before
// it; it comes first because a work-queue stream allows no two consumers
// whose subjects overlap, and it replaces the earlier version's consumer of
// every subject.
func routerConsumers() []routerConsumer {
	cs := []routerConsumer{{"router", []string{repliesSubject + "reply", repliesSubject + "completion"}}}
	for _, p := range append(slices.Clone(platformNames), otherPlatform) {
		cs = append(cs, routerConsumer{"router-" + p, []string{repliesSubject + "*." + p}})
	}
	return cs
}

// messageKey names one chat message across the deployment: the hash of its
// platform, scope, chat and the platform's message id. The id alone would
// not do: Telegram numbers messages per chat and a Slack ts is unique within
// its channel, so two chats send the same id all the time, and anything
// keyed by it (JetStream's duplicate window, the router's delivery records,
// a platform's idempotency key) would take the second message for the first
// and drop it. The hash is also a name that a Nats-Msg-Id, a key-value key
// and an HTTP header can all hold, whatever characters the id has. The
// fields are valid session values, which hold no NUL, so the separators
// keep them apart.
func messageKey(platform, scope, chat, id string) string {
	h := sha256.New()
	for _, f := range [...]string{platform, scope, chat, id} {
		h.Write([]byte(f))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// keyedAs reports whether a message's body key k is well formed and is the
// one its Nats-Msg-Id (prefix + key) was queued under. The body is anybody's
// to write, but the Nats-Msg-Id is covered by the session's signature: a
// genuine message replayed with another key in its body would otherwise
// slip past JetStream's duplicate window and the router's records, and be
// shown twice.
func keyedAs(msg jetstream.Msg, prefix, k string) bool {
	return validKey(k) && msg.Headers().Get(jetstream.MsgIDHeader) == prefix+k
}

// validKey reports whether k has messageKey's form: a notification that
// names its message otherwise cannot be recorded as delivered.
func validKey(k string) bool {
	if len(k) != 32 {
		return false
	}
	for _, c := range k {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// job is a queued chat message: what the platform sent, normalised. The
// session travels beside it, in the message headers, not in it.
type job struct {
	ID         string `json:"id"`  // the platform's message id, the reply anchor: unique only within its chat
	Key        string `json:"key"` // the message across the deployment: messageKey, set by the ingress
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
	Key    string             `json:"key"` // the job's messageKey
	Origin otelsession.Origin `json:"origin"`
}

// notification is a reply or a completion on its way to the router.
type notification struct {
	Kind          string             `json:"kind"` // "reply" or "completion"
	ID            string             `json:"id"`   // the message it answers, from the job itself
	Key           string             `json:"key"`  // that message's messageKey: what the delivery is recorded by
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
	Key    string `json:"key"` // the message's key, when the notification had one
	Reason string `json:"reason"`
	Forged bool   `json:"forged,omitempty"` // its session did not verify; kind and id are the sender's word
}

// layout is how the streams and the bucket are stored across the cluster.
type layout struct {
	replicas int           // copies of every stream and the bucket; 0 picks from the cluster's size
	update   bool          // raise the replicas of existing streams that have fewer
	maxWait  time.Duration // how long a message may wait in a queue; 0: defaultMaxWait
}

// defaultMaxWait is --max-wait's default: how long a job, background work or
// notification may wait in its queue (behind a platform or service that is
// down, or a router that is) and still be taken.
const defaultMaxWait = time.Hour

// wait is l.maxWait, or its default. It is the age up to which every role
// verifies a queued message's signature (they were verified at the
// library's default of 5 minutes, so anything that waited longer was
// dropped as forged or expired, a router restarted after 6 minutes
// delivering none of what was queued), the streams' duplicate window (so a
// captured message published again while its signature verifies is stored
// once), and how long the router keeps its delivery records (so it is not
// delivered again either).
func (l layout) wait() time.Duration {
	if l.maxWait > 0 {
		return l.maxWait
	}
	return defaultMaxWait
}

// replicasFor is the number of copies a stream gets: --replicas, or 3 when
// the connection knows at least three servers (a cluster: one node can be
// lost and the other two still form a majority), else 1 (a single server).
func replicasFor(nc *nats.Conn, l layout) int {
	if l.replicas > 0 {
		return l.replicas
	}
	seen := map[string]bool{}
	for _, u := range nc.Servers() {
		seen[u] = true
	}
	if len(seen) >= 3 {
		return 3
	}
	return 1
}

// ensureJetStream creates the streams and the bucket, or checks they exist.
// Every one is kept in files (they survive a node restart) on `replicas`
// servers, and a write is acknowledged only once a majority of them stored
// it, so the loss of one node loses no job, reply or delivery record. An
// existing stream with fewer replicas is reported and kept as it is unless
// l.update is set: changing it copies its data, an operator's decision.
//
// Every role calls it as it starts, and a fleet started at once calls it
// from every role together, on a cluster that may still be forming or
// electing a leader: a request then times out, or its answer is lost. Each
// step is idempotent and retried like a consumer (see setupStep); only a
// server without JetStream stops it at once. The gateway and the router
// used to exit with "create stream GW_JOBS with 3 replicas: context
// deadline exceeded" when started together on a new cluster.
func ensureJetStream(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, l layout) error {
	replicas := replicasFor(nc, l)
	log := &onceLog{who: "gateway"}
	for _, s := range []jetstream.StreamConfig{
		{Name: jobsStream, Subjects: []string{jobsSubject + ">"}},
		{Name: bgStream, Subjects: []string{bgSubject + ">"}},
		{Name: repliesStream, Subjects: []string{repliesSubject + ">"}},
	} {
		s.Retention = jetstream.WorkQueuePolicy
		s.Storage = jetstream.FileStorage
		// Publishes carry Nats-Msg-Id and are retried for at most
		// publishDeadline: a retried publish within this window is stored
		// once, and so is a replay of a message whose signature still
		// verifies (see layout.wait).
		s.Duplicates = l.wait()
		var err error
		if s.Replicas, err = keptReplicas(ctx, js, log, s.Name, replicas, l.update); err != nil {
			return err
		}
		if err := setupStep(ctx, log, "create stream "+s.Name, func(ctx context.Context) error {
			_, err := js.CreateOrUpdateStream(ctx, s)
			return err
		}); err != nil {
			return fmt.Errorf("create stream %s with %d replicas: %w", s.Name, s.Replicas, err)
		}
	}
	// The router reads a delivery record to decide whether to deliver, so
	// reads go to the bucket's leader, never to a follower that may not have
	// the latest record yet: direct gets, which any replica may answer, are
	// turned off on the bucket's stream.
	kvReplicas, err := keptReplicas(ctx, js, log, "KV_"+deliveredKV, replicas, l.update)
	if err != nil {
		return err
	}
	var kvs jetstream.Stream
	if err := setupStep(ctx, log, "create bucket "+deliveredKV, func(ctx context.Context) error {
		s, err := js.Stream(ctx, "KV_"+deliveredKV)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: deliveredKV, TTL: l.wait(),
				Storage: jetstream.FileStorage, Replicas: kvReplicas}); err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
				return fmt.Errorf("create key-value bucket %s with %d replicas: %w", deliveredKV, kvReplicas, err)
			}
			s, err = js.Stream(ctx, "KV_"+deliveredKV)
		}
		if err != nil {
			return fmt.Errorf("open the stream of bucket %s: %w", deliveredKV, err)
		}
		kvs = s
		return nil
	}); err != nil {
		return err
	}
	if cfg := kvs.CachedInfo().Config; cfg.AllowDirect || cfg.Replicas != kvReplicas || cfg.MaxAge < l.wait() {
		// Records are kept at least as long as a message may wait: a
		// record gone before its notification's signature expires would
		// let a copy of it be delivered again.
		cfg.AllowDirect, cfg.Replicas, cfg.MaxAge = false, kvReplicas, max(cfg.MaxAge, l.wait())
		if err := setupStep(ctx, log, "configure bucket "+deliveredKV, func(ctx context.Context) error {
			_, err := js.UpdateStream(ctx, cfg)
			return err
		}); err != nil {
			return fmt.Errorf("configure bucket %s: %w", deliveredKV, err)
		}
	}
	return nil
}

// setupStep runs f, one idempotent step of ensureJetStream (what), until it
// succeeds, retried for up to setupDeadline as consumer is, each error
// logged once per kind. A server that answers no JetStream request has
// JetStream turned off, which waiting does not turn on: that stops it at
// once, with what to check.
func setupStep(ctx context.Context, log *onceLog, what string, f func(ctx context.Context) error) error {
	return retry(ctx, setupDeadline, func(ctx context.Context) error {
		err := f(ctx)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrJetStreamNotEnabled):
			// Nothing answers JetStream's API: the server runs without it.
			return permanent{fmt.Errorf("%w: is JetStream enabled on the NATS server "+
				"(nats-server -js, or jetstream {} in its configuration)?", err)}
		}
		log.print(fmt.Errorf("%s: %w (trying again)", what, err))
		return err
	})
}

// keptReplicas is the replica count to configure for a stream: want, unless
// the stream exists with another count and update is false. Fewer than
// wanted is reported. Reading the stream is retried (setupStep): taking a
// stream that could not be read for one that does not exist would change
// its replicas unasked.
func keptReplicas(ctx context.Context, js jetstream.JetStream, log *onceLog, name string, want int, update bool) (int, error) {
	if update {
		return want, nil
	}
	var s jetstream.Stream
	if err := setupStep(ctx, log, "read stream "+name, func(ctx context.Context) error {
		var err error
		if s, err = js.Stream(ctx, name); errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil // not there yet
		}
		return err
	}); err != nil {
		return 0, fmt.Errorf("read stream %s: %w", name, err)
	}
	if s == nil {
		return want, nil
	}
	have := s.CachedInfo().Config.Replicas
	if have < want {
		fmt.Fprintf(os.Stderr, "gateway: stream %s keeps %d replica(s), fewer than the %d asked for: "+
			"losing its server stops it; --update-replicas raises it (JetStream copies its data)\n", name, have, want)
	}
	return have, nil
}

// consumer returns the durable pull consumer of a stream, shared by every
// process of a role. It has as many replicas as its stream.
//
// A role creates it as it starts, which may be while the cluster elects a
// leader (a node was just lost, or the role restarts beside a recovering
// cluster): the request then times out or finds no leader, or the consumer
// is created and the answer is lost with the node. Creating it is
// idempotent, so it is retried for up to setupDeadline; only a stream that
// does not exist stops at once. A role that gave up here used to exit in
// silence, and every message waited for a consumer nobody pulled from.
//
// filters are the subjects it takes (none: every subject of the stream),
// and pending its maxAckPending (0: maxAckPending).
func consumer(ctx context.Context, js jetstream.JetStream, who, stream, name string, ackWait time.Duration, filters []string, pending int) (jetstream.Consumer, error) {
	if pending == 0 {
		pending = maxAckPending
	}
	log := &onceLog{who: who}
	var c jetstream.Consumer
	err := retry(ctx, setupDeadline, func(ctx context.Context) error {
		var err error
		c, err = js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable: name, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxAckPending: pending,
			FilterSubjects: filters,
		})
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return permanent{err}
		}
		if err != nil {
			log.print(fmt.Errorf("create consumer %s on %s: %w (trying again)", name, stream, err))
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create consumer %s on %s: %w", name, stream, err)
	}
	return c, nil
}

// consumeOptions are the pull settings of every consumer: at most max
// messages fetched ahead (see worker.run), and pull requests that expire
// after 10 s with a heartbeat every 2 s. A pull request lives on the
// consumer's leader: when that node is lost, the missing heartbeats (4 s,
// within the 4 to 9 s the survivors take to elect a new leader) make the
// client pull again, from the new leader, instead of waiting out the
// library's default 30 s expiry. A shorter heartbeat would not bring the new
// leader sooner, and on a starved machine a late heartbeat would be taken
// for a lost node, pulling twice. Errors are logged once per kind.
func consumeOptions(who string, max int) []jetstream.PullConsumeOpt {
	log := &onceLog{who: who}
	return []jetstream.PullConsumeOpt{
		jetstream.PullMaxMessages(max),
		jetstream.PullExpiry(10 * time.Second),
		jetstream.PullHeartbeat(2 * time.Second),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			log.print(fmt.Errorf("%w (pulling again)", err))
		}),
	}
}

// onceLog prints each kind of error once in 30 s: a lost node makes the
// same few errors repeat every heartbeat, on every consumer, until the
// cluster has recovered, and a service that is down fails every job or
// delivery that calls it.
type onceLog struct {
	who     string
	like    string    // what its lines are called in their count: "errors" unless set
	out     io.Writer // nil: standard error
	mu      sync.Mutex
	printed map[string]time.Time
	skipped map[string]int // of each kind, since it was last printed
}

// print prints err unless the same error was printed in the last 30 s.
func (l *onceLog) print(err error) { l.printAs(err.Error(), err) }

// printAs prints err unless an error of kind was printed in the last 30 s,
// with the number of that kind it did not print since.
func (l *onceLog) printAs(kind string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	last, seen := l.printed[kind]
	if time.Since(last) < 30*time.Second {
		l.skipped[kind]++
		return
	}
	if l.printed == nil {
		l.printed, l.skipped = map[string]time.Time{}, map[string]int{}
	}
	l.printed[kind] = time.Now()
	out := l.out
	if out == nil {
		out = os.Stderr
	}
	like := l.like
	if like == "" {
		like = "errors"
	}
	switch n := l.skipped[kind]; {
	case !seen:
		fmt.Fprintf(out, "%s: %v [%s like it: one line in 30 s, with a count]\n", l.who, err, like)
	case n > 0:
		fmt.Fprintf(out, "%s: %v [and %d more like it since the last such line]\n", l.who, err, n)
	default:
		fmt.Fprintf(out, "%s: %v\n", l.who, err)
	}
	l.skipped[kind] = 0
}

// retryAfter is how long work that failed (a job, background work, a
// delivery) waits before it is tried again: 200 ms after its first failure,
// doubling with each delivery of the message to at most 5 s. A brief
// failure costs little; a service that is down is called a few times a
// minute for each piece of work, not five times a second, and once it is up
// again everything waiting goes within 5 s.
func retryAfter(msg jetstream.Msg) time.Duration {
	n := uint64(1)
	if md, err := msg.Metadata(); err == nil && md.NumDelivered > 0 {
		n = md.NumDelivered
	}
	return min(200*time.Millisecond<<min(n-1, 5), 5*time.Second)
}

// setupDeadline bounds how long a role retries what it needs before it can
// consume (the streams, its consumers, the delivery bucket): a few leader
// elections on a starved machine.
const setupDeadline = 2 * time.Minute

// permanent is an error retry returns at once: waiting does not make a
// missing stream appear.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// publishDeadline bounds how long a publish is retried: well inside the
// streams' 5-minute duplicate window, so every retry is stored at most once.
const publishDeadline = 30 * time.Second

// retry calls f until it succeeds, ctx ends or within has passed, backing
// off from 50 ms to 1 s: long enough to outlast a JetStream leader election
// (up to about 10 s after a node is lost). Each attempt gets 2 s: a request to
// a stream whose leader is gone is never answered, and waiting for it until
// the deadline would leave no time to try the new leader. It returns f's
// last error.
func retry(ctx context.Context, within time.Duration, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	wait := 50 * time.Millisecond
	for {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		err := f(actx)
		acancel()
		if err == nil {
			return nil
		}
		var p permanent
		if errors.As(err, &p) {
			return p.error
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
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
