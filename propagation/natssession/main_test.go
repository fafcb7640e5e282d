package natssession_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/sessionwire/sessionwire/otelsession"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// w3c is the propagator every test passes explicitly, so that no test
// depends on (or changes) the process-wide one.
var w3c = otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})

// broker is a real NATS server with JetStream, on 127.0.0.1 and a random
// port, storing in a temporary directory; it and its client connection are
// shut down when the test ends.
type broker struct {
	srv *server.Server
	nc  *nats.Conn
	js  jetstream.JetStream
}

func startBroker(t testing.TB) *broker {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	})
	if err != nil {
		t.Fatalf("new NATS server: %v", err)
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server not ready within 10s")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatalf("connect to NATS: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("JetStream context: %v", err)
	}
	return &broker{srv: srv, nc: nc, js: js}
}

// stream creates a file-backed stream over subjects and a durable,
// explicitly acknowledged consumer on it.
func (b *broker) stream(t testing.TB, name string, ackWait time.Duration, subjects ...string) jetstream.Consumer {
	t.Helper()
	ctx := t.Context()
	if _, err := b.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: subjects, Storage: jetstream.FileStorage,
	}); err != nil {
		t.Fatalf("create stream %s: %v", name, err)
	}
	cfg := jetstream.ConsumerConfig{Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy}
	if ackWait > 0 {
		cfg.AckWait = ackWait
	}
	cons, err := b.js.CreateOrUpdateConsumer(ctx, name, cfg)
	if err != nil {
		t.Fatalf("create consumer on %s: %v", name, err)
	}
	return cons
}

// consume starts a Consume loop on cons and stops it, waiting until it is
// fully closed, when the test ends.
func consume(t testing.TB, cons jetstream.Consumer, h jetstream.MessageHandler) {
	t.Helper()
	cc, err := cons.Consume(h)
	if err != nil {
		t.Fatalf("consume: %v", err)
	}
	t.Cleanup(func() {
		cc.Stop()
		<-cc.Closed()
	})
}

func newTracing(t testing.TB) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

// within waits for a value from ch, failing the test after d.
func within[T any](t testing.TB, d time.Duration, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
		var zero T
		return zero
	}
}

// conversation is what a publisher binds for message i: a full session with
// values that need percent-encoding, some fields Cleared, every cron marker
// state, some cron auto-deliver targets, and some stateless channels.
type conversation struct {
	s           otelsession.Session
	autoDeliver *string // cron auto-deliver chat id bound with With; nil leaves it Unset
}

func conversationFor(i int) conversation {
	s := otelsession.Session{
		Platform:                      []string{"telegram", "discord", "slack"}[i%3],
		Source:                        "gateway",
		ChatID:                        fmt.Sprint("-100", i),
		ChatType:                      "group",
		ChatName:                      fmt.Sprintf("Équipe %d, \"ops\"; 100%% = done", i),
		ThreadID:                      fmt.Sprint("thread-", i),
		UserID:                        fmt.Sprint("user-", i),
		UserIDAlt:                     fmt.Sprint("alt-", i),
		UserName:                      fmt.Sprintf("Zoë %d", i),
		ScopeID:                       fmt.Sprint("guild-", i%7),
		SessionKey:                    fmt.Sprintf("agent:main:%d", i),
		SessionID:                     fmt.Sprint("sess-", i),
		UISessionID:                   fmt.Sprint("tab-", i),
		MessageID:                     fmt.Sprint("msg-", i),
		Profile:                       "default",
		BrowserControlPrincipal:       "principal",
		BrowserControlTransportFamily: "cdp",
		ParentChatID:                  fmt.Sprint("parent-", i),
		Cron:                          otelsession.CronMarker(i % 3),
		Cwd:                           fmt.Sprint("/work/", i),
		Stateless:                     i%4 == 0,
	}
	// Cleared fields must arrive Cleared, not Unset.
	if i%5 == 0 {
		s.ThreadID = ""
	}
	if i%2 == 0 {
		s.UserName = ""
		s.ScopeID = ""
	}
	c := conversation{s: s}
	switch i % 6 {
	case 0:
		v := fmt.Sprint("cron-chat-", i)
		c.autoDeliver = &v
	case 1:
		v := ""
		c.autoDeliver = &v
	}
	return c
}

func (c conversation) bind(ctx context.Context) context.Context {
	ctx = otelsession.Bind(ctx, c.s)
	if c.autoDeliver != nil {
		ctx = otelsession.With(ctx, otelsession.FieldCronAutoDeliverChatID, *c.autoDeliver)
	}
	return ctx
}

type fieldWant struct {
	value string
	state otelsession.State
}

func setOrCleared(v string) fieldWant {
	if v == "" {
		return fieldWant{state: otelsession.Cleared}
	}
	return fieldWant{v, otelsession.Set}
}

// received is what a consumer in another process must read for c: every
// remote field as bound, local fields Unset (they never leave a process).
func (c conversation) received() map[otelsession.Field]fieldWant {
	s := c.s
	w := map[otelsession.Field]fieldWant{
		otelsession.FieldPlatform:     setOrCleared(s.Platform),
		otelsession.FieldSource:       setOrCleared(s.Source),
		otelsession.FieldChatID:       setOrCleared(s.ChatID),
		otelsession.FieldChatType:     setOrCleared(s.ChatType),
		otelsession.FieldChatName:     setOrCleared(s.ChatName),
		otelsession.FieldThreadID:     setOrCleared(s.ThreadID),
		otelsession.FieldUserID:       setOrCleared(s.UserID),
		otelsession.FieldUserIDAlt:    setOrCleared(s.UserIDAlt),
		otelsession.FieldUserName:     setOrCleared(s.UserName),
		otelsession.FieldScopeID:      setOrCleared(s.ScopeID),
		otelsession.FieldSessionKey:   setOrCleared(s.SessionKey),
		otelsession.FieldSessionID:    setOrCleared(s.SessionID),
		otelsession.FieldMessageID:    setOrCleared(s.MessageID),
		otelsession.FieldProfile:      setOrCleared(s.Profile),
		otelsession.FieldParentChatID: setOrCleared(s.ParentChatID),
	}
	switch s.Cron {
	case otelsession.CronOff:
		w[otelsession.FieldCronSession] = fieldWant{state: otelsession.Cleared}
	case otelsession.CronOn:
		w[otelsession.FieldCronSession] = fieldWant{"1", otelsession.Set}
	}
	if c.autoDeliver != nil {
		w[otelsession.FieldCronAutoDeliverChatID] = setOrCleared(*c.autoDeliver)
	}
	return w
}

// diff lists how the session in ctx differs from want, field by field
// (fields absent from want must be Unset), plus the working directory (never
// sent) and the async-delivery capability.
func diff(ctx context.Context, want map[otelsession.Field]fieldWant, stateless bool) []string {
	var out []string
	for _, f := range otelsession.Fields() {
		v, st := otelsession.Lookup(ctx, f)
		if w := want[f]; v != w.value || st != w.state {
			out = append(out, fmt.Sprintf("%s = %q (%s), want %q (%s)", f, v, st, w.value, w.state))
		}
	}
	if cwd := otelsession.Cwd(ctx); cwd != "" {
		out = append(out, fmt.Sprintf("cwd = %q, want none", cwd))
	}
	if got := otelsession.AsyncDeliverySupported(ctx); got == stateless {
		out = append(out, fmt.Sprintf("async delivery supported = %v, want %v", got, !stateless))
	}
	return out
}

// unset is the expectation for a message that carries no session.
var unset = map[otelsession.Field]fieldWant{}

// workerBase is the context a worker starts from: it has a session of its
// own, every field Set, so that any field a message fails to reset shows up.
func workerBase(name string) context.Context {
	ctx := otelsession.Bind(context.Background(), otelsession.Session{
		Platform: "worker", Source: name, ChatID: name, ChatType: name, ChatName: name, ThreadID: name,
		UserID: name, UserIDAlt: name, UserName: name, ScopeID: name, SessionKey: name, SessionID: name,
		UISessionID: name, MessageID: name, Profile: name, BrowserControlPrincipal: name,
		BrowserControlTransportFamily: name, ParentChatID: name, Cron: otelsession.CronOn,
		Cwd: "/" + name, Stateless: true,
	})
	for _, f := range []otelsession.Field{
		otelsession.FieldCronAutoDeliverPlatform, otelsession.FieldCronAutoDeliverChatID, otelsession.FieldCronAutoDeliverThreadID,
	} {
		ctx = otelsession.With(ctx, f, name)
	}
	return otelsession.WithCronJob(ctx, otelsession.CronJob{ID: name, OriginPlatform: name, OriginUserID: name})
}

func joinLines(lines []string) string { return strings.Join(lines, "\n\t") }

func baggageMember(ctx context.Context, key string) string {
	return baggage.FromContext(ctx).Member(key).Value()
}
