package kafkasession_test

// These tests carry sessions through a Kafka cluster that speaks the wire
// protocol: franz-go's kfake, in-process on 127.0.0.1 with random ports (the
// README says why kfake and not a broker process). Records are produced with
// kgo and consumed in a consumer group, as a gateway and its workers would.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/otelsession/sessiontrace"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/internal/sessiontest"
	"github.com/sessionwire/sessionwire/propagation/kafkasession"
)

// newCluster starts a one-broker kfake cluster with topics of 4 partitions,
// closed with t.
func newCluster(t testing.TB, topics ...string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topics...))
	if err != nil {
		t.Fatalf("start the in-process Kafka cluster (kfake): %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func newClient(t testing.TB, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, opts...)...)
	if err != nil {
		t.Fatalf("kafka client: %v", err)
	}
	return cl
}

// signing returns an outbound policy that signs every record and an inbound
// policy that trusts no topic, so that a session is accepted only through
// its signature, bound to the record's id and topic.
func signing(t testing.TB) (*propagation.Outbound, *propagation.Inbound) {
	t.Helper()
	key := propagation.Key{ID: "gw-1", Secret: []byte(strings.Repeat("k", 32))}
	s, err := propagation.NewSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	v, err := propagation.NewVerifier([]propagation.Key{key})
	if err != nil {
		t.Fatal(err)
	}
	return propagation.NewOutbound(propagation.AllowNames(propagation.TransportKafka, "chat-in"), propagation.WithSigner(s)),
		propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(v))
}

// produce sends records for conversations [0, convs), seq numbers [from, to)
// each, signed, the producer span ended in the produce promise; it returns
// when the broker has acknowledged all of them.
func produce(t *testing.T, cl *kgo.Client, pub *kafkasession.Publisher, convs, from, to int) {
	t.Helper()
	var wg sync.WaitGroup
	for seq := from; seq < to; seq++ {
		for conv := range convs {
			s := sessionFor(conv)
			r := &kgo.Record{
				Topic: "chat-in", Key: []byte(s.ChatID), Value: fmt.Appendf(nil, "%d %d", conv, seq),
				Headers: []kgo.RecordHeader{{Key: kafkasession.MessageIDHeader, Value: fmt.Appendf(nil, "m-%d-%d", conv, seq)}},
			}
			ctx, span := pub.Inject(otelsession.Bind(context.Background(), s), r)
			wg.Add(1)
			cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
				defer wg.Done()
				if err != nil {
					span.RecordError(err)
					span.SetStatus(codes.Error, err.Error())
					t.Errorf("produce %s: %v", r.Headers[0].Value, err)
				}
				span.End()
			})
		}
	}
	wg.Wait()
}

// tally is what the consumer group's members saw.
type tally struct {
	mu        sync.Mutex
	seen      map[string]int                // message id -> deliveries
	byMember  map[string]int                // member -> records processed
	owners    map[int32]map[string]bool     // partition -> members that processed records of it
	misrouted []string                      // what went wrong, per record
	assigned  map[string]map[int32]struct{} // member -> partitions it holds now
}

func newTally() *tally {
	return &tally{seen: map[string]int{}, byMember: map[string]int{}, owners: map[int32]map[string]bool{}, assigned: map[string]map[int32]struct{}{}}
}

func (ta *tally) unique() int {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	return len(ta.seen)
}

// lostAndRepeated counts the records m-<conv>-<seq> the tally never saw,
// and the handlings beyond the first of those it saw more than once. The
// caller holds ta.mu.
func (ta *tally) lostAndRepeated(convs, perConv int) (lost, repeated int) {
	for conv := range convs {
		for seq := range perConv {
			switch n := ta.seen[fmt.Sprintf("m-%d-%d", conv, seq)]; {
			case n == 0:
				lost++
			case n > 1:
				repeated += n - 1
			}
		}
	}
	return lost, repeated
}

func (ta *tally) holds(member string) int {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	return len(ta.assigned[member])
}

// handle is a worker's handler: the record's session must be exactly its
// conversation's, whoever consumes it.
func (ta *tally) handle(member string, cons *kafkasession.Consumer, r *kgo.Record) {
	ctx, span, err := cons.Extract(workerBase(), r)
	defer span.End()
	var conv, seq int
	id := string(kafkasession.NewRecordCarrier(r).Get(kafkasession.MessageIDHeader))
	var problem string
	if _, serr := fmt.Sscanf(string(r.Value), "%d %d", &conv, &seq); serr != nil {
		problem = fmt.Sprintf("record %q: unreadable value %q", id, r.Value)
	} else if err != nil {
		problem = fmt.Sprintf("record %q: %v", id, err)
	} else if d := diff(ctx, received(sessionFor(conv)), sessionFor(conv).Stateless); d != "" {
		problem = fmt.Sprintf("record %q (conversation %d) on partition %d:\n\t%s", id, conv, r.Partition, d)
	}
	ta.mu.Lock()
	defer ta.mu.Unlock()
	ta.seen[id]++
	ta.byMember[member]++
	if ta.owners[r.Partition] == nil {
		ta.owners[r.Partition] = map[string]bool{}
	}
	ta.owners[r.Partition][member] = true
	if problem != "" {
		ta.misrouted = append(ta.misrouted, problem)
	}
}

// member is one worker of the consumer group: it polls, handles, commits,
// and only then lets the group rebalance, so that a partition moving to
// another member resumes exactly after the last handled record.
type member struct {
	name string
	cl   *kgo.Client
	done chan struct{}
	stop context.CancelFunc
}

func startMember(t *testing.T, c *kfake.Cluster, name string, cons *kafkasession.Consumer, ta *tally) *member {
	return startMemberCommitting(t, c, name, cons, ta, true)
}

// startMemberCommitting starts a member that commits what it handled, or,
// when commit is false, one that never does, as if it crashed before each
// commit.
func startMemberCommitting(t *testing.T, c *kfake.Cluster, name string, cons *kafkasession.Consumer, ta *tally, commit bool) *member {
	t.Helper()
	onAssign := func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
		ta.mu.Lock()
		defer ta.mu.Unlock()
		if ta.assigned[name] == nil {
			ta.assigned[name] = map[int32]struct{}{}
		}
		for _, p := range m["chat-in"] {
			ta.assigned[name][p] = struct{}{}
		}
	}
	onRevoke := func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
		ta.mu.Lock()
		defer ta.mu.Unlock()
		for _, p := range m["chat-in"] {
			delete(ta.assigned[name], p)
		}
	}
	cl := newClient(t, c, kgo.ConsumerGroup("workers"), kgo.ConsumeTopics("chat-in"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(onAssign), kgo.OnPartitionsRevoked(onRevoke), kgo.OnPartitionsLost(onRevoke),
		kgo.HeartbeatInterval(200*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{name: name, cl: cl, done: make(chan struct{}), stop: cancel}
	go func() {
		defer close(m.done)
		for {
			fetches := cl.PollRecords(ctx, 64)
			if ctx.Err() != nil || fetches.IsClientClosed() {
				cl.AllowRebalance()
				return
			}
			fetches.EachError(func(topic string, p int32, err error) {
				if !errors.Is(err, context.Canceled) {
					t.Errorf("%s: fetch %s/%d: %v", name, topic, p, err)
				}
			})
			fetches.EachRecord(func(r *kgo.Record) { ta.handle(name, cons, r) })
			if !commit {
				cl.AllowRebalance()
				continue
			}
			if err := cl.CommitUncommittedOffsets(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("%s: commit: %v", name, err)
			}
			cl.AllowRebalance()
		}
	}()
	return m
}

// close stops polling and leaves the group.
func (m *member) close() {
	m.stop()
	<-m.done
	m.cl.Close()
}

func waitFor(t *testing.T, what string, timeout time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Conversations' signed records go through the broker to a consumer group;
// a second member joins mid-stream, so partitions move between members while
// records are in flight, and the first member then leaves, so its partitions
// move back. Every record must be handled once, in exactly its own
// conversation's session: counted as lost, duplicated and misrouted. Every
// consumer span must be the child of its record's producer span, linked to
// it, and carry the messaging attributes and the session.
func TestBrokerConsumerGroupRebalance(t *testing.T) {
	const convs, perConv = 20, 16 // 320 records, half before the second member joins
	c := newCluster(t, "chat-in")
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithSpanProcessor(sessiontrace.NewSpanProcessor(sessiontrace.Redaction{})))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	out, in := signing(t)
	pub := kafkasession.NewPublisher(kafkasession.WithPropagator(w3c), kafkasession.WithTracerProvider(tp), kafkasession.WithOutbound(out))
	cons := kafkasession.NewConsumer(in, kafkasession.WithPropagator(w3c), kafkasession.WithTracerProvider(tp),
		kafkasession.WithConsumerGroup("workers"))

	producer := newClient(t, c, kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	defer producer.Close()
	ta := newTally()

	a := startMember(t, c, "a", cons, ta)
	produce(t, producer, pub, convs, 0, perConv/2)
	waitFor(t, "member a to handle a quarter of the records", 30*time.Second, func() bool { return ta.unique() >= convs*perConv/4 })
	b := startMember(t, c, "b", cons, ta)
	waitFor(t, "the rebalance to give member b partitions", 30*time.Second, func() bool { return ta.holds("b") > 0 })
	produce(t, producer, pub, convs, perConv/2, perConv)
	waitFor(t, "every record to be handled", 60*time.Second, func() bool { return ta.unique() == convs*perConv })
	a.close()
	// b takes over a's partitions from a's committed offsets: anything it
	// reads now was already handled, a duplicate.
	waitFor(t, "member b to hold every partition after a left", 30*time.Second, func() bool { return ta.holds("b") == 4 })
	time.Sleep(500 * time.Millisecond)
	b.close()

	ta.mu.Lock()
	defer ta.mu.Unlock()
	lost, dup := ta.lostAndRepeated(convs, perConv)
	moved := 0
	for _, ms := range ta.owners {
		if len(ms) > 1 {
			moved++
		}
	}
	t.Logf("%d records, %d conversations: lost %d, duplicated %d, misrouted %d; handled by a %d, by b %d; %d of 4 partitions handled by both",
		convs*perConv, convs, lost, dup, len(ta.misrouted), ta.byMember["a"], ta.byMember["b"], moved)
	if lost != 0 || dup != 0 || len(ta.misrouted) != 0 {
		t.Errorf("lost %d, duplicated %d, misrouted %d:\n%s", lost, dup, len(ta.misrouted), strings.Join(ta.misrouted, "\n"))
	}
	if ta.byMember["b"] == 0 || moved == 0 {
		t.Errorf("no partition changed hands (a %d, b %d records; %d partitions handled by both): the test did not rebalance mid-stream",
			ta.byMember["a"], ta.byMember["b"], moved)
	}
	if n := in.Counts().Signed; n != uint64(convs*perConv) {
		t.Errorf("%d sessions accepted through their signature, want %d", n, convs*perConv)
	}

	sessiontest.QueueSpans{
		ProducerName: "send chat-in", ConsumerName: "process chat-in",
		Producer: map[attribute.Key]string{"messaging.system": "kafka", "messaging.destination.name": "chat-in",
			"messaging.operation.type": "send"},
		Consumer: map[attribute.Key]string{"messaging.system": "kafka", "messaging.destination.name": "chat-in",
			"messaging.operation.type": "process", "messaging.consumer.group.name": "workers"},
		Messages: convs * perConv, Deliveries: convs * perConv,
	}.Check(t, exp.GetSpans())
}

// A member that handles records but dies before committing them: its
// partitions go to the next member, which gets those records again. Kafka
// delivers at least once; what this proves is that a record delivered again
// is handled in the same session, its signature bound to the record still
// verifying, and that nothing is lost.
func TestBrokerUncommittedRecordsComeBackInTheirSession(t *testing.T) {
	const convs, perConv = 10, 8
	c := newCluster(t, "chat-in")
	out, in := signing(t)
	pub := kafkasession.NewPublisher(kafkasession.WithPropagator(w3c), kafkasession.WithOutbound(out))
	cons := kafkasession.NewConsumer(in, kafkasession.WithPropagator(w3c), kafkasession.WithConsumerGroup("workers"))
	producer := newClient(t, c)
	defer producer.Close()
	produce(t, producer, pub, convs, 0, perConv)

	ta := newTally()
	a := startMemberCommitting(t, c, "a", cons, ta, false)
	waitFor(t, "member a to handle some records", 30*time.Second, func() bool { return ta.unique() > 0 })
	a.close() // leaves the group without having committed anything
	handledByA := ta.byMember["a"]
	b := startMember(t, c, "b", cons, ta)
	waitFor(t, "member b to handle every record", 60*time.Second, func() bool {
		ta.mu.Lock()
		defer ta.mu.Unlock()
		return ta.byMember["b"] >= convs*perConv
	})
	b.close()

	ta.mu.Lock()
	defer ta.mu.Unlock()
	lost, again := ta.lostAndRepeated(convs, perConv)
	t.Logf("%d records: a handled %d without committing, b %d; delivered again %d, lost %d, misrouted %d",
		convs*perConv, handledByA, ta.byMember["b"], again, lost, len(ta.misrouted))
	if lost != 0 || len(ta.misrouted) != 0 || ta.byMember["b"] != convs*perConv || again != handledByA {
		t.Errorf("lost %d, misrouted %d; b handled %d of %d; %d delivered again, a handled %d:\n%s",
			lost, len(ta.misrouted), ta.byMember["b"], convs*perConv, again, handledByA, strings.Join(ta.misrouted, "\n"))
	}
	if n, want := in.Counts().Signed, uint64(convs*perConv+handledByA); n != want {
		t.Errorf("%d deliveries accepted through their signature, want %d", n, want)
	}
}

// A signed record captured off the broker and produced again, onto another
// topic with its id, or onto the same topic under another id, is refused
// with the reason NATS gives for a moved message (ErrBadSignature); the
// original, consumed as stored, is accepted.
func TestBrokerReplayedRecordIsRefused(t *testing.T) {
	before := sessiontest.Metrics(t)
	c := newCluster(t, "chat-in", "partner-in")
	out, in := signing(t)
	pub := kafkasession.NewPublisher(kafkasession.WithPropagator(w3c), kafkasession.WithOutbound(out))
	cons := kafkasession.NewConsumer(in, kafkasession.WithPropagator(w3c))
	cl := newClient(t, c, kgo.ConsumeTopics("chat-in", "partner-in"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	orig := &kgo.Record{Topic: "chat-in", Value: []byte("hi"), Headers: []kgo.RecordHeader{{Key: kafkasession.MessageIDHeader, Value: []byte("m-1")}}}
	pctx, span := pub.Inject(otelsession.Bind(context.Background(), sessionFor(1)), orig)
	if err := cl.ProduceSync(pctx, orig).FirstErr(); err != nil {
		t.Fatal(err)
	}
	span.End()
	captured := poll(ctx, t, cl, 1)[0]

	replay := func(topic, id string) *kgo.Record {
		r := &kgo.Record{Topic: topic, Value: captured.Value}
		for _, hd := range captured.Headers {
			if hd.Key == kafkasession.MessageIDHeader {
				hd.Value = []byte(id)
			}
			r.Headers = append(r.Headers, hd)
		}
		return r
	}
	if err := cl.ProduceSync(ctx, replay("partner-in", "m-1"), replay("chat-in", "m-2")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	got := append([]*kgo.Record{captured}, poll(ctx, t, cl, 2)...)
	for _, r := range got {
		name := fmt.Sprintf("%s/%s", r.Topic, kafkasession.NewRecordCarrier(r).Get(kafkasession.MessageIDHeader))
		ctx, span, err := cons.Extract(workerBase(), r)
		span.End()
		_, st := otelsession.Lookup(ctx, otelsession.FieldChatID)
		if name == "chat-in/m-1" {
			if err != nil || st != otelsession.Set {
				t.Errorf("%s, the signed record as stored: %v (chat id %s)", name, err, st)
			}
			continue
		}
		if !errors.Is(err, propagation.ErrBadSignature) || st != otelsession.Unset {
			t.Errorf("%s, replayed: err %v, chat id %s; want ErrBadSignature and no session", name, err, st)
		}
	}
	if c := in.Counts(); c.Signed != 1 || c.BadSignature != 2 {
		t.Errorf("counts %+v, want 1 signed and 2 bad signatures", c)
	}
	// The same metrics as every transport, under this one's name.
	sessiontest.MetricsGrew(t, before, map[string]int64{
		"sessionwire.session.outbound sessionwire.outcome=sent sessionwire.signed=true sessionwire.transport=kafka":            1,
		"sessionwire.session.inbound sessionwire.outcome=accepted sessionwire.reason= sessionwire.transport=kafka":             1,
		"sessionwire.session.inbound sessionwire.outcome=refused sessionwire.reason=bad_signature sessionwire.transport=kafka": 2,
	})
}

func poll(ctx context.Context, t *testing.T, cl *kgo.Client, n int) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	for len(out) < n {
		f := cl.PollRecords(ctx, n-len(out))
		if err := ctx.Err(); err != nil {
			t.Fatalf("got %d of %d records: %v", len(out), n, err)
		}
		f.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		out = append(out, f.Records()...)
	}
	return out
}
