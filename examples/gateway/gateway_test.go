package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sessionwire/sessionwire/internal/syncbuf"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/natssession"
)

func TestMain(m *testing.M) {
	// The command-line tests (cli_test.go) run this binary as the gateway.
	if os.Getenv(cliEnv) == "1" {
		main()
		os.Exit(0)
	}
	// The test binary plays every role it starts as a process (workers, the
	// gateway, the router, the tool), as the real binary does.
	if len(os.Args) > 1 && os.Args[1] == "--role" {
		if err := run(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "gateway:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// Race-enabled children otherwise sleep a second at exit.
	os.Setenv("GORACE", "atexit_sleep_ms=0")
	os.Exit(m.Run())
}

func testConfig(t *testing.T, extra ...string) config {
	t.Helper()
	c, err := parseFlags(append([]string{"--messages", "400", "--conversations", "80", "--think", "5ms",
		"--ack-wait", "1s", "--timeout", "120s"}, extra...))
	require.NoError(t, err)
	return c
}

func runTopology(t *testing.T, c config) summary {
	t.Helper()
	top, err := startTopology(context.Background(), c)
	require.NoError(t, err)
	defer top.stop()
	s, err := top.drive(context.Background(), c.seed, nil)
	require.NoError(t, err)
	t.Logf("\n%s", s)
	return s
}

func TestEveryNotificationGoesHome(t *testing.T) {
	s := runTopology(t, testConfig(t))
	assert.Equal(t, 400, s.Sent)
	assert.Zero(t, s.Misrouted)
	assert.Zero(t, s.Lost)
	assert.Zero(t, s.Duplicates)
	assert.Equal(t, s.Expected, s.Delivered)
	assert.Equal(t, s.ExpectedRefused, s.Refused, "scoped messages without their scope are refused, and only they")
	assert.Zero(t, s.ToolMismatch)
	assert.Zero(t, s.DownstreamMismatch)
	assert.Zero(t, s.BrokenPromises, "a stateless channel never gets a completion")
	assert.Greater(t, s.ExpectedRefused, 0, "the plan includes messages that must be refused")
}

// A deployment outlives a run: a second run on the same seed, against the
// same NATS, gateway, workers and router, is new messages to them, none
// dropped as a repeat of the first run's (JetStream's duplicate window, the
// router's delivery records) and so counted lost.
func TestASecondRunOnTheSameSeedIsDeliveredToo(t *testing.T) {
	c := testConfig(t, "--messages", "120", "--conversations", "30")
	top, err := startTopology(context.Background(), c)
	require.NoError(t, err)
	defer top.stop()
	for run := range 2 {
		s, err := top.drive(context.Background(), c.seed, nil)
		require.NoError(t, err)
		assert.Equal(t, s.Expected, s.Delivered, "run %d:\n%s", run+1, s)
		assert.True(t, s.ok(), "run %d:\n%s", run+1, s)
	}
}

// A run that stops early leaves its work queued, and its replies arrive
// during the next run on the same deployment: they are that earlier run's,
// counted apart, neither misrouted nor settling the next run's wait. The
// workers are slow here, so the next run's messages wait behind that backlog
// for longer than the driver's 15 s of silence: the earlier run's replies
// arriving meanwhile show the deployment at work, and nothing is called lost.
func TestAnEarlierRunsLateRepliesAreNotThisRuns(t *testing.T) {
	c := testConfig(t, "--messages", "140", "--conversations", "40", "--think", "1s", "--concurrency", "2")
	top, err := startTopology(context.Background(), c)
	require.NoError(t, err)
	defer top.stop()
	first, stopFirst := context.WithCancel(context.Background())
	go func() {
		defer stopFirst()
		for first.Err() == nil {
			top.p.mu.Lock()
			n := len(top.p.deliveries)
			top.p.mu.Unlock()
			if n >= 10 {
				return // the first run stops waiting with most of its work queued
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	s1, err := top.drive(first, c.seed, nil)
	require.NoError(t, err)
	require.True(t, s1.Interrupted)
	top.cfg.messages, top.cfg.conversations = 40, 20 // a smaller second run: the backlog is the test
	s2, err := top.drive(context.Background(), c.seed, nil)
	require.NoError(t, err)
	t.Logf("\n%s", s2)
	assert.Positive(t, s2.EarlierRuns, "the first run's replies arrived during the second")
	assert.Zero(t, s2.Misrouted)
	assert.Zero(t, s2.Lost)
	assert.Equal(t, s2.Expected, s2.Delivered)
	assert.Equal(t, s2.ExpectedRefused, s2.Refused)
}

func TestOfRun(t *testing.T) {
	const run = 450_899_421
	assert.True(t, ofRun("450899421000002", run))
	assert.True(t, ofRun("450899421999999", run))
	assert.False(t, ofRun("450899422000002", run), "another run's")
	assert.False(t, ofRun("100000000000000", run), "the first message of the smallest run")
	assert.False(t, ofRun("999999999999999", run), "the last message of the largest run")
	for _, id := range []string{"victim", "-5", "5", "10000042", "1000000000000000"} {
		assert.True(t, ofRun(id, run), "%s is no number plan makes: judged, and misrouted", id)
	}
}

// The seed decides the load, the run its message IDs: two runs on one seed
// send the same conversations and kinds of message, and no message of
// either run has another's key (its platform, scope, chat and ID). Telegram
// chats and Slack channels number their own messages, so their IDs repeat
// across chats, as the platforms' do; each ID is a number Telegram's int64
// and any JSON reader (exact to 2^53) hold.
func TestPlanNumbersEachRunAnew(t *testing.T) {
	a, b := plan(500, 40, 7, minRun), plan(500, 40, 7, 10*minRun-1)
	keys := map[string]bool{}
	inChat := map[string]bool{} // platform/chat/id
	chatsOf := map[string]map[string]bool{}
	for i := range a {
		assert.Equal(t, a[i].conv, b[i].conv)
		assert.Equal(t, a[i].background, b[i].background)
		for _, m := range []message{a[i], b[i]} {
			assert.False(t, keys[m.key()], "message %s in %s sent twice", m.id, m.conv.chat)
			keys[m.key()] = true
			where := m.conv.platform + "/" + m.conv.chat + "/" + m.id
			assert.False(t, inChat[where], "ID %s twice in one chat", where)
			inChat[where] = true
			if chatsOf[m.conv.platform+"/"+m.id] == nil {
				chatsOf[m.conv.platform+"/"+m.id] = map[string]bool{}
			}
			chatsOf[m.conv.platform+"/"+m.id][m.conv.chat] = true
			n, err := strconv.ParseInt(m.id, 10, 64)
			require.NoError(t, err)
			assert.Less(t, n, int64(1)<<53, m.id)
		}
	}
	for id, chats := range chatsOf {
		p, _, _ := strings.Cut(id, "/")
		if p == "discord" || p == "api" {
			assert.Len(t, chats, 1, "%s: Discord's and the API's IDs are unique across chats", id)
		}
	}
	first := fmt.Sprint(minRun * runIDSpan)
	assert.Greater(t, len(chatsOf["telegram/"+first]), 1, "Telegram chats share their first message's ID")
	assert.Greater(t, len(chatsOf["slack/"+first]), 1, "Slack channels share their first message's ts")
	last := plan(maxMessages, 1, 1, 10*minRun-1)[maxMessages-1]
	n, err := strconv.ParseInt(last.id, 10, 64)
	require.NoError(t, err)
	assert.Less(t, n, int64(1)<<53, "the largest ID of the largest run")
	for range 1000 {
		r := newRun()
		require.True(t, r >= minRun && r < 10*minRun, "run %d", r)
	}
}

// The original bug, on the same load: the process environment is shared by
// every job a worker runs at once.
func TestEnvironmentStoreMisroutes(t *testing.T) {
	s := runTopology(t, testConfig(t, "--session-store", "env", "--think", "20ms"))
	assert.Greater(t, s.Misrouted, 0)
	assert.False(t, s.ok())
}

// A delivery the router refused, though the message was sent with all it
// needs, never reaches its chat: the run fails, and says why.
func TestAWrongRefusalFailsTheRun(t *testing.T) {
	s := summary{Sent: 1, Expected: 1, Refused: 1, WronglyRefused: 1,
		FirstWrongRefusal: "reply 7: scoped platform without a scope"}
	assert.False(t, s.ok())
	assert.Contains(t, s.String(), "refused wrongly      1")
	assert.Contains(t, s.String(), "the first: reply 7: scoped platform without a scope")
}

// The flags are checked before anything starts.
func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--session-store", "disk"}, {"--messages", "0"}, {"--workers", "0"}, {"--role", "worker"}, {"--bogus"},
		{"--trust", "10.0.0.0/33"}, {"--nats-cluster", "2"}, {"--nats-cluster", "3", "--nats-url", "nats://127.0.0.1:4222"},
		{"--fault", "disk-full"}, {"--fault", "nats-kill"}, {"--replicas", "7"}, {"--role", "nats-node", "--node-port", "x"},
		{"--role", "router", "--nats-url", "nats://127.0.0.1:4222"}, {"--role", "worker", "--nats-url", "nats://127.0.0.1:4222"},
		{"--role", "load", "--nats-url", "nats://127.0.0.1:4222"},
	} {
		_, err := parseFlags(args)
		assert.Error(t, err, "%v", args)
	}
	assert.ErrorContains(t, run([]string{"--role", "nats-node", "--node-name", "n1"}), "--node-port")
}

// proc is a role running as its own OS process.
type proc struct {
	cmd *exec.Cmd
	url string
}

// spawnProc starts a role process and waits for its "ready" line. It is safe
// to call from any goroutine; the process is stopped when the test ends.
func spawnProc(t *testing.T, args ...string) (*proc, error) {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	fields := strings.Fields(line)
	if err != nil || len(fields) < 2 || fields[0] != "ready" {
		return nil, fmt.Errorf("%v did not start: first line %q: %v", args, line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	if len(fields) > 2 {
		p.url = fields[2]
	}
	return p, nil
}

func startProc(t *testing.T, args ...string) *proc {
	t.Helper()
	p, err := spawnProc(t, args...)
	require.NoError(t, err)
	return p
}

// The multi-process topology: gateway, two workers and the router each in
// its own process, against an embedded JetStream server; one worker is
// killed with SIGKILL in the middle of the run, and the router is restarted.
// JetStream redelivers the dead worker's unacknowledged jobs to the other, the
// new router delivers what queued meanwhile from the stored origins, and
// nothing is lost, misrouted or delivered twice.
func TestMultiProcessTopologySurvivesAKilledWorker(t *testing.T) {
	ns, shutdown, err := embeddedNATS()
	require.NoError(t, err)
	defer shutdown()
	url := ns.ClientURL()
	// Cleanups run last-in first-out: the role processes stop before the
	// services they call and the NATS connection.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	nc, _, err := connect(ctx, url, "test", layout{})
	require.NoError(t, err)
	t.Cleanup(nc.Close)

	p := newPlatforms()
	platformURL, downstreamURL, err := services(ctx, "127.0.0.1:0", p, propagation.TrustLoopback(), &outage{})
	require.NoError(t, err)
	common := []string{"--nats-url", url, "--ack-wait", "1s", "--think", "10ms", "--concurrency", "8"}
	gw := startProc(t, append([]string{"--role", "gateway"}, common...)...)
	routerArgs := append([]string{"--role", "router", "--platform-url", platformURL}, common...)
	oldRouter := startProc(t, routerArgs...)
	victim := startProc(t, append([]string{"--role", "worker", "--downstream-url", downstreamURL}, common...)...)
	startProc(t, append([]string{"--role", "worker", "--downstream-url", downstreamURL}, common...)...)

	// Kill one worker once a fifth of the deliveries have arrived; at half,
	// restart the router, which then delivers from the stored origins.
	const messages = 500
	var killed, restarted atomic.Bool
	delivered := func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.deliveries)
	}
	faultsCtx, stopFaults := context.WithCancel(ctx)
	faults := make(chan struct{})
	go func() {
		defer close(faults)
		ctx := faultsCtx
		for ctx.Err() == nil && delivered() <= messages/5 {
			time.Sleep(20 * time.Millisecond)
		}
		killed.Store(victim.cmd.Process.Kill() == nil)
		for ctx.Err() == nil && delivered() <= messages/2 {
			time.Sleep(20 * time.Millisecond)
		}
		if oldRouter.cmd.Process.Signal(syscall.SIGTERM) == nil && oldRouter.cmd.Wait() == nil {
			_, err := spawnProc(t, routerArgs...)
			restarted.Store(err == nil)
		}
	}()
	s, err := drive(ctx, driverConfig{ingressURL: gw.url, messages: messages, conversations: 100, inFlight: 32,
		timeout: 90 * time.Second, idle: 20 * time.Second, seed: 3}, nc, p)
	require.NoError(t, err)
	t.Logf("\n%s", s)
	stopFaults()
	<-faults
	assert.True(t, killed.Load(), "a worker was killed during the run")
	assert.True(t, restarted.Load(), "the router was restarted during the run")
	assert.Zero(t, s.Misrouted)
	assert.Zero(t, s.Lost)
	assert.Zero(t, s.Duplicates)
	assert.Equal(t, s.Expected, s.Delivered)
	assert.Equal(t, s.ExpectedRefused, s.Refused)
}

// Throughput with session propagation on and off, on the same load:
//
//	go test -run '^$' -bench Throughput -benchtime 5x -count 3 ./examples/gateway/
func BenchmarkThroughput(b *testing.B) {
	for _, store := range []string{storeBaggage, storeOff} {
		b.Run("sessions="+store, func(b *testing.B) {
			c, err := parseFlags([]string{"--session-store", store, "--messages", "600", "--conversations", "120",
				"--think", "5ms", "--timeout", "60s"})
			if err != nil {
				b.Fatal(err)
			}
			top, err := startTopology(context.Background(), c)
			if err != nil {
				b.Fatal(err)
			}
			defer top.stop()
			var msgs, secs, p99 float64
			seed := uint64(100)
			for b.Loop() {
				seed++
				s, err := top.drive(context.Background(), seed, nil)
				if err != nil {
					b.Fatal(err)
				}
				if !s.ok() || s.Delivered != s.Expected {
					b.Fatalf("a run lost or misrouted deliveries:\n%s", s)
				}
				msgs += float64(s.Sent)
				secs += s.Seconds
				p99 = max(p99, s.ReplyP99ms)
			}
			b.ReportMetric(msgs/secs, "msgs/s")
			b.ReportMetric(p99, "p99-reply-ms")
		})
	}
}

// toolRuns counts the tools a worker ran: one "run tool" span each.
func toolRuns(spans *tracetest.SpanRecorder) int {
	n := 0
	for _, s := range spans.Ended() {
		if s.Name() == "run tool" {
			n++
		}
	}
	return n
}

// A job queued by anyone but the gateway, unsigned or signed with another
// key, is never run: no tool, no downstream call, no reply. The genuine job
// queued beside them is run and answered. (Workers used to run both
// forgeries, tool and downstream call included, for a session nobody
// signed.)
func TestForgedJobsAreNeverRun(t *testing.T) {
	c := testConfig(t)
	ns, shutdown, err := embeddedNATS()
	require.NoError(t, err)
	defer shutdown()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nc, js, err := connect(ctx, ns.ClientURL(), "test", layout{})
	require.NoError(t, err)
	defer nc.Close()

	// The downstream stand-in, counting its calls, and a worker whose spans
	// are recorded: one "run tool" span for each tool it runs.
	var calls atomic.Int64
	down := downstream(propagation.TrustLoopback(), &outage{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		down.ServeHTTP(w, r)
	}))
	defer srv.Close()
	spans := tracetest.NewSpanRecorder()
	c.downstreamURL = srv.URL
	wctx, stopWorker := context.WithCancel(ctx)
	done := make(chan error, 1)
	_, err = startRole(wctx, c, "worker", nc, js, sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)), done)
	require.NoError(t, err)
	defer func() { stopWorker(); <-done }()

	gateway, _, err := hop(c.key, c.layout.wait())
	require.NoError(t, err)
	otherKey, err := propagation.NewSigner(propagation.Key{ID: c.key.ID, Secret: []byte(strings.Repeat("x", 32))})
	require.NoError(t, err)
	prop := natssession.WithPropagator(propagatorFor(storeBaggage))
	queue := func(pub *natssession.Publisher, id, thread string) {
		t.Helper()
		s := otelsession.Session{Platform: "telegram", ChatID: "-100999", ThreadID: thread, MessageID: id}
		key := messageKey(s.Platform, s.ScopeID, s.ChatID, id) // the forger knows the form
		body, _ := json.Marshal(job{ID: id, Key: key, Text: "send me their replies", Route: s})
		msg := &nats.Msg{Subject: jobsSubject + "telegram", Data: body, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, "job-"+key)
		_, err := pub.PublishJetStream(otelsession.Bind(ctx, s), js, msg)
		require.NoError(t, err)
	}
	queue(natssession.NewPublisher(prop, natssession.WithOutbound(propagation.NewOutbound(propagation.AllowAll))), "forged-unsigned", "victim")
	queue(natssession.NewPublisher(prop, natssession.WithOutbound(propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(otherKey)))),
		"forged-other-key", "victim")
	queue(natssession.NewPublisher(prop, natssession.WithOutbound(gateway)), "genuine", "genuine-thread")

	replies, err := js.Stream(ctx, repliesStream)
	require.NoError(t, err)
	queued := func() uint64 {
		info, err := replies.Info(ctx)
		require.NoError(t, err)
		return info.State.Msgs
	}
	require.Eventually(t, func() bool { return queued() > 0 }, 60*time.Second, 20*time.Millisecond, "the genuine job was answered")
	// The forgeries were pulled with it: give them time to do what they would.
	assert.Never(t, func() bool { return queued() > 1 || calls.Load() > 1 || toolRuns(spans) > 1 }, 3*time.Second, 20*time.Millisecond,
		"a forged job was run")
	assert.EqualValues(t, 1, calls.Load(), "downstream calls: the genuine job's alone")
	assert.Equal(t, 1, toolRuns(spans), "tools run: the genuine job's alone")
	raw, err := replies.GetMsg(ctx, 1)
	require.NoError(t, err)
	var n notification
	require.NoError(t, json.Unmarshal(raw.Data, &n))
	assert.Equal(t, "genuine", n.ID)
	assert.Equal(t, "genuine-thread", n.Origin.ThreadID)
	assert.Equal(t, "genuine-thread", n.DownstreamSaw, "the downstream service saw the genuine job's thread")
	assert.Equal(t, "genuine-thread", n.ToolSaw)

	// The unsigned job was dropped; the one signed with another key is put
	// back, again and again, for a worker that might hold that key.
	jobs, err := js.Stream(ctx, jobsStream)
	require.NoError(t, err)
	workers, err := js.Consumer(ctx, jobsStream, "workers")
	require.NoError(t, err)
	assert.Eventually(t, func() bool {
		si, err := jobs.Info(ctx)
		require.NoError(t, err)
		ci, err := workers.Info(ctx)
		require.NoError(t, err)
		return si.State.Msgs == 1 && ci.NumRedelivered > 0
	}, 30*time.Second, 50*time.Millisecond, "only the job signed with another key is left, offered again")
}

// A worker started with another SESSIONWIRE_SIGNING_KEY, beside one that
// holds the gateway's, runs nothing and loses nothing: what it pulls it puts
// back, and the other worker runs it. (It used to run every job it pulled
// without a session, and the replies, with nowhere to go, were refused and
// lost.)
func TestAWorkerWithAnotherKeyLosesNothing(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	driveBesideAnotherKey(t, "worker", sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)), nil,
		"--messages", "60", "--conversations", "20", "--workers", "1")
	assert.Zero(t, toolRuns(spans), "the worker with another key ran nothing")
}

// A router started with another SESSIONWIRE_SIGNING_KEY, beside one that
// holds the workers', delivers nothing and loses nothing: what it pulls it
// puts back, and the other router delivers it. (It used to refuse every
// notification it pulled as forged: a second router with another key beside
// the right one lost 120 of 227.)
func TestARouterWithAnotherKeyLosesNothing(t *testing.T) {
	log := &syncbuf.Buffer{}
	driveBesideAnotherKey(t, "router", nil, log, "--messages", "60", "--conversations", "20")
	assert.Contains(t, log.String(), "its signature does not verify with this router's key",
		"the router with another key pulled some, and said why it put them back")
	assert.Contains(t, log.String(), "every role must share SESSIONWIRE_SIGNING_KEY")
}

// driveBesideAnotherKey drives a load through a topology beside one more
// process of role started with another signing key (its tracer provider
// tp, the topology's for the role when nil; its log, when a router, to
// log), and checks that nothing was lost, misrouted or refused as forged.
func driveBesideAnotherKey(t *testing.T, role string, tp *sdktrace.TracerProvider, log *syncbuf.Buffer, flags ...string) {
	t.Helper()
	c := testConfig(t, flags...)
	top, err := startTopology(context.Background(), c)
	require.NoError(t, err)
	defer top.stop()
	js, err := jetstream.New(top.nc)
	require.NoError(t, err)
	misconfigured := top.cfg
	misconfigured.key.Secret = []byte(strings.Repeat("x", 32))
	if log != nil {
		misconfigured.routerLog = log
	}
	if tp == nil {
		tp = top.tps[role]
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	_, err = startRole(ctx, misconfigured, role, top.nc, js, tp, done)
	require.NoError(t, err)
	defer func() { stop(); <-done }() // before the topology stops

	s, err := top.drive(context.Background(), c.seed, nil)
	require.NoError(t, err)
	t.Logf("\n%s", s)
	assert.Zero(t, s.Lost)
	assert.Zero(t, s.Misrouted)
	assert.Zero(t, s.ForgedRefused, "no genuine notification was refused as forged, and no reply without a session reached the router")
	assert.Equal(t, s.Expected, s.Delivered)
	assert.Equal(t, s.ExpectedRefused, s.Refused)
}

// A key rotation loses nothing queued: a job and a reply signed with the
// old key, queued while no role ran, are delivered by roles restarted with
// the new key and the old one as previous (SESSIONWIRE_PREVIOUS_SIGNING_KEY,
// --previous-signing-key-id), which sign with the new key only. (Every role
// restarted with a new key used to refuse everything queued before, 117 of
// 117 notifications, as forged.)
func TestKeyRotationDeliversWhatTheOldKeyQueued(t *testing.T) {
	ns, shutdown, err := embeddedNATS()
	require.NoError(t, err)
	defer shutdown()
	ctx := context.Background()
	nc, js, err := connect(ctx, ns.ClientURL(), "test", layout{})
	require.NoError(t, err)
	defer nc.Close()

	oldKey := propagation.Key{ID: "2026-11", Secret: []byte(strings.Repeat("o", 32))}
	newKey := propagation.Key{ID: "2026-12", Secret: []byte(strings.Repeat("n", 32))}
	signedOld, _, err := hop(oldKey, layout{}.wait())
	require.NoError(t, err)
	pub := natssession.NewPublisher(natssession.WithPropagator(propagatorFor(storeBaggage)), natssession.WithOutbound(signedOld))
	queue := func(subject, msgID string, body any, s otelsession.Session) {
		t.Helper()
		b, err := json.Marshal(body)
		require.NoError(t, err)
		msg := &nats.Msg{Subject: subject, Data: b, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, msgID)
		_, err = pub.PublishJetStream(otelsession.Bind(ctx, s), js, msg)
		require.NoError(t, err)
	}
	// A job the old gateway queued, and a reply an old worker queued.
	jobS := otelsession.Session{Platform: "telegram", ChatID: "-100777", ThreadID: "job-thread", MessageID: "queued-job"}
	jobKey := messageKey(jobS.Platform, jobS.ScopeID, jobS.ChatID, jobS.MessageID)
	queue(jobsSubject+"telegram", "job-"+jobKey, job{ID: "queued-job", Key: jobKey, Text: "hello", Route: jobS}, jobS)
	replyS := otelsession.Session{Platform: "telegram", ChatID: "-100777", ThreadID: "reply-thread", MessageID: "queued-reply"}
	replyKey := messageKey(replyS.Platform, replyS.ScopeID, replyS.ChatID, replyS.MessageID)
	queue(replySubject("reply", "telegram"), "reply-"+replyKey, notification{Kind: "reply", ID: "queued-reply", Key: replyKey,
		Origin: otelsession.Origin{Platform: "telegram", ChatID: "-100777", ThreadID: "reply-thread"}, Text: "done: earlier"}, replyS)

	// Every role restarted with the new key, and the old one as previous.
	t.Setenv("SESSIONWIRE_SIGNING_KEY", string(newKey.Secret))
	t.Setenv("SESSIONWIRE_PREVIOUS_SIGNING_KEY", string(oldKey.Secret))
	c := testConfig(t, "--signing-key-id", newKey.ID, "--previous-signing-key-id", oldKey.ID)
	require.Equal(t, []propagation.Key{oldKey}, c.previous)
	c.natsURL = ns.ClientURL()
	top, err := startTopology(ctx, c)
	require.NoError(t, err)
	defer top.stop()

	delivered := func() map[string]string {
		top.p.mu.Lock()
		defer top.p.mu.Unlock()
		got := map[string]string{}
		for _, d := range top.p.deliveries {
			got[d.ID] = d.Origin.ThreadID
		}
		return got
	}
	assert.Eventually(t, func() bool { return len(delivered()) == 2 }, 30*time.Second, 50*time.Millisecond,
		"what the old key signed is delivered")
	assert.Equal(t, map[string]string{"queued-job": "job-thread", "queued-reply": "reply-thread"}, delivered())

	// The roles sign with the new key alone, and verify with both.
	out, verifier, err := hop(c.key, c.layout.wait(), c.previous...)
	require.NoError(t, err)
	assert.Equal(t, newKey.ID, out.Signer().KeyID())
	assert.Equal(t, []string{oldKey.ID, newKey.ID}, verifier.KeyIDs())
}

// verdictMsg is a queued message that records what a worker did with it.
type verdictMsg struct {
	jetstream.Msg
	h      nats.Header
	stored time.Time
	did    string
}

func (m *verdictMsg) Subject() string      { return jobsSubject + "telegram" }
func (m *verdictMsg) Headers() nats.Header { return m.h }
func (m *verdictMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{NumDelivered: 1, Timestamp: m.stored}, nil
}
func (m *verdictMsg) Term() error                        { m.did = "term"; return nil }
func (m *verdictMsg) NakWithDelay(d time.Duration) error { m.did = "nak " + d.String(); return nil }

// Work without the gateway's signature is never run, and the worker says
// which message it was and why, once per kind. A signature that fails only
// against this worker's key may be the worker's own misconfiguration: it is
// put back for a minute, for another worker, and the line says what to
// check; anything else is dropped at once.
func TestUnverifiedWorkSaysWhy(t *testing.T) {
	var out strings.Builder
	w := &worker{errs: onceLog{who: "worker", out: &out}}
	key := messageKey("telegram", "", "-100999", "7")
	msg := func(age time.Duration) *verdictMsg {
		h := nats.Header{}
		h.Set(jetstream.MsgIDHeader, "job-"+key)
		return &verdictMsg{h: h, stored: time.Now().Add(-age)}
	}
	where := `job "7" (subject gw.jobs.telegram, Nats-Msg-Id "job-` + key + `")`
	for _, tc := range []struct {
		age       time.Duration
		err       error
		did, says string
	}{
		{0, nil, "term", "not running " + where + ": it carries no session signed by the gateway"},
		{time.Second, fmt.Errorf("session.sig: MAC mismatch: %w", propagation.ErrBadSignature), "nak 200ms",
			"not running " + where + ": its signature does not verify with this worker's key (session.sig: MAC mismatch: " +
				"session signature does not verify). Either it is forged, or this worker's key differs from the gateway's: " +
				"every role must share SESSIONWIRE_SIGNING_KEY"},
		{2 * time.Minute, fmt.Errorf("key id %q: %w", "2027", propagation.ErrUnknownKey), "term",
			"dropping " + where + ": no worker verified its signature within 1m0s"},
		{0, fmt.Errorf("issued 61m ago: %w", propagation.ErrSignatureExpired), "term", "not running " + where + ": its signature expired (issued 61m ago"},
		{0, fmt.Errorf("session.sig: %w", propagation.ErrMalformedMember), "term", "not running " + where + ": its session was refused (session.sig"},
	} {
		out.Reset()
		m := msg(tc.age)
		w.refuseUnverified(m, "job", "7", tc.err)
		assert.Equal(t, tc.did, m.did, "%v", tc.err)
		assert.Contains(t, out.String(), "worker: "+tc.says, "%v", tc.err)
		assert.Equal(t, 1, strings.Count(out.String(), "\n"), "one line")
	}
	out.Reset()
	w.refuseUnverified(msg(0), "job", "8", nil)
	assert.Empty(t, out.String(), "the same kind again within 30 s: counted, not printed")
}

// Replies and completions published straight onto the replies subject by
// someone without the gateway's key (unsigned, signed with another key, or a
// genuine signed session moved from its own message) are refused and
// counted during a real run; none reaches the chat the forger named, and the
// real load still goes home whole.
func TestForgedRepliesAreRefused(t *testing.T) {
	c := testConfig(t, "--messages", "200", "--conversations", "40")
	top, err := startTopology(context.Background(), c)
	require.NoError(t, err)
	defer top.stop()
	js, err := jetstream.New(top.nc)
	require.NoError(t, err)

	otherKey, err := propagation.NewSigner(propagation.Key{ID: c.key.ID, Secret: []byte(strings.Repeat("x", 32))})
	require.NoError(t, err)
	realKey, err := propagation.NewSigner(c.key)
	require.NoError(t, err)
	prop := natssession.WithPropagator(propagatorFor(storeBaggage))
	unsigned := natssession.NewPublisher(prop, natssession.WithOutbound(propagation.NewOutbound(propagation.AllowAll)))
	wrongKey := natssession.NewPublisher(prop, natssession.WithOutbound(propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(otherKey))))
	victim := otelsession.Session{Platform: "telegram", ChatID: "-100999", ThreadID: "victim-thread", MessageID: "1"}

	// A genuine signature, made for another message id, then moved.
	var moved nats.Header
	{
		msg := &nats.Msg{Subject: replySubject("reply", victim.Platform), Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, "the-real-one")
		ctx, err := realKey.SignFor(otelsession.Bind(context.Background(), victim), "the-real-one")
		require.NoError(t, err)
		propagatorFor(storeBaggage).Inject(ctx, natssession.HeaderCarrier(msg.Header))
		moved = msg.Header
	}

	var forgedMu sync.Mutex
	forgedSeen := map[string]bool{} // a refusal whose Term was lost is refused again
	sub, err := top.nc.Subscribe(refusedSubject, func(m *nats.Msg) {
		var r refusal
		if json.Unmarshal(m.Data, &r) == nil && r.Forged {
			forgedMu.Lock()
			forgedSeen[r.Kind+"."+r.ID] = true
			forgedMu.Unlock()
		}
	})
	require.NoError(t, err)
	defer sub.Unsubscribe()
	require.NoError(t, top.nc.Flush())

	const forgeries = 30
	forge := func(i int) {
		n := notification{Kind: []string{"reply", "completion"}[i%2], ID: fmt.Sprint("forged-", i),
			Origin: otelsession.Origin{Platform: victim.Platform, ChatID: victim.ChatID, ThreadID: victim.ThreadID}, Text: "forged"}
		body, _ := json.Marshal(n)
		msg := &nats.Msg{Subject: replySubject(n.Kind, victim.Platform), Data: body, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprint("forged-", i))
		ctx := otelsession.Bind(context.Background(), victim)
		var perr error
		switch i % 3 {
		case 0:
			_, perr = unsigned.PublishJetStream(ctx, js, msg)
		case 1:
			_, perr = wrongKey.PublishJetStream(ctx, js, msg)
		default:
			for k, v := range moved {
				if k != jetstream.MsgIDHeader {
					msg.Header[k] = v
				}
			}
			_, perr = js.PublishMsg(context.Background(), msg)
		}
		assert.NoError(t, perr)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range forgeries {
			forge(i)
			time.Sleep(20 * time.Millisecond) // spread over the run
		}
	}()
	s, err := top.drive(context.Background(), c.seed, nil)
	<-done
	require.NoError(t, err)
	t.Logf("\n%s", s)
	assert.Eventually(t, func() bool {
		forgedMu.Lock()
		defer forgedMu.Unlock()
		return len(forgedSeen) == forgeries
	}, unverifiedPatience+90*time.Second, 50*time.Millisecond, "every forgery is refused as forged (one signed with another "+
		"key, or moved, once no router verified it for unverifiedPatience)")
	assert.Positive(t, s.ForgedRefused, "the summary counts forged refusals")
	assert.LessOrEqual(t, s.ForgedRefused, forgeries)
	assert.Equal(t, s.ExpectedRefused, s.Refused, "forgeries are not counted as expected refusals")

	assert.Zero(t, s.Misrouted, "no forged reply reached a chat")
	assert.Zero(t, s.Lost)
	assert.Zero(t, s.Duplicates)
	assert.Equal(t, s.Expected, s.Delivered)
	top.p.mu.Lock()
	for _, d := range top.p.deliveries {
		assert.NotEqual(t, victim.ThreadID, d.Origin.ThreadID, "a forged notification was delivered")
		assert.NotEqual(t, "forged", d.Text)
	}
	top.p.mu.Unlock()
}

// A real three-node NATS cluster (this test binary re-executed as each
// server), and one fault in the middle of each run: a node SIGKILLed and
// left dead, killed and restarted 5 s later, killed while the load is still
// being posted, the router SIGKILLed, the gateway (the ingress) SIGKILLed
// while the load is posted, and the downstream service or the chat
// platforms refusing every call for 10 s. The node killed is the leader of the
// jobs stream, so every run goes through a leader election. Each run must
// end with every delivery made: none lost, misrouted, or shown twice in a
// chat, and no message the ingress could not take.
func TestClusterSurvivesFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a NATS cluster four times")
	}
	for _, f := range faultNames {
		t.Run(f, func(t *testing.T) {
			// 300 s bounds a run: on a quiet machine each takes well under a
			// minute, but at a load average near 100 (other jobs on a 2-core
			// machine) 150 jobs, each starting a child process under -race,
			// have taken 135 s, and a delivery still on its way at the
			// deadline is counted lost.
			s := runTopology(t, testConfig(t, "--nats-cluster", "3", "--fault", f, "--messages", "150",
				"--conversations", "40", "--timeout", "300s"))
			require.NotNil(t, s.Fault, "the fault was injected during the run")
			assert.Zero(t, s.Misrouted)
			assert.Zero(t, s.Lost)
			assert.Zero(t, s.Duplicates, "nothing is shown twice in a chat")
			assert.Zero(t, s.NotPosted)
			assert.Equal(t, s.Expected, s.Delivered)
			assert.Equal(t, s.ExpectedRefused, s.Refused)
			if f == faultDownstream || f == faultPlatforms {
				// The outage came while work was on its way: calls were refused.
				assert.NotContains(t, s.Fault.What, "(0 refused)")
			}
			if f == faultGateway {
				// The kill came while messages were being posted: some were
				// posted again to the gateway started in its place.
				assert.Positive(t, s.PostedAgain, "posts tried again after the gateway was killed")
			}
			if f != faultRouter {
				// A router that lives acknowledges only what it recorded: a
				// lost node delays the record, and never makes it send again.
				assert.Zero(t, s.RouterResends, "deliveries the router sent twice")
			}
		})
	}
}

// The streams and the bucket are replicated on every node of a cluster,
// and kept as they are on a single server; an existing stream with fewer
// replicas is kept until asked to change.
func TestReplicas(t *testing.T) {
	c, err := startNATSCluster(context.Background(), 3)
	require.NoError(t, err)
	defer c.stop()
	ctx := context.Background()
	check := func(l layout, want int) {
		t.Helper()
		nc, js, err := connect(ctx, c.url(), "test", l)
		require.NoError(t, err)
		defer nc.Close()
		for _, name := range []string{jobsStream, bgStream, repliesStream, "KV_" + deliveredKV} {
			s, err := js.Stream(ctx, name)
			require.NoError(t, err)
			assert.Equal(t, want, s.CachedInfo().Config.Replicas, name)
		}
	}
	check(layout{replicas: 1}, 1)
	check(layout{}, 1)             // fewer than the cluster allows, but not raised unasked
	check(layout{update: true}, 3) // 3: the cluster has three servers
	check(layout{replicas: 1}, 3)  // never lowered unasked either
}

// A role that starts while the cluster elects a new leader (its node was
// just lost) must still come up and consume, not exit: the kill-while-posting
// fault used to land while the workers and the router were creating their
// consumers, and a role whose request timed out stopped in silence, leaving
// every job queued with nobody pulling. Here the jobs stream's leader is
// killed and, at once, the workers' and the router's consumers are created
// and the bucket opened, as the roles do when they start; each must succeed
// and the worker's consumer must then receive a job.
func TestRolesStartDuringLeaderElection(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a NATS cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := startNATSCluster(ctx, 3)
	require.NoError(t, err)
	defer c.stop()
	nc, js, err := connect(ctx, c.url(), "test", layout{})
	require.NoError(t, err)
	defer nc.Close()

	s, err := js.Stream(ctx, jobsStream)
	require.NoError(t, err)
	require.NotNil(t, s.CachedInfo().Cluster)
	leader := c.index(s.CachedInfo().Cluster.Leader)
	require.GreaterOrEqual(t, leader, 0, "the jobs stream has a leader")
	require.NoError(t, c.kill(leader))

	type result struct {
		what string
		err  error
		c    jetstream.Consumer
	}
	results := make(chan result, 4)
	for _, r := range []struct {
		stream, name string
		filters      []string
	}{
		{jobsStream, "workers", nil}, {bgStream, "background", nil}, {repliesStream, "router-telegram", []string{replySubject("*", "telegram")}},
	} {
		go func() {
			cons, err := consumer(ctx, js, "test", r.stream, r.name, 3*time.Second, r.filters, 0)
			results <- result{r.name, err, cons}
		}()
	}
	go func() {
		rt := &router{js: js}
		rt.errs.who = "test"
		err := retry(ctx, setupDeadline, func(ctx context.Context) error {
			_, err := rt.js.KeyValue(ctx, deliveredKV)
			return err
		})
		results <- result{"bucket", err, nil}
	}()
	var workers jetstream.Consumer
	for range 4 {
		r := <-results
		require.NoError(t, r.err, "%s: a role must start while a leader is elected", r.what)
		if r.what == "workers" {
			workers = r.c
		}
	}

	require.NoError(t, retry(ctx, publishDeadline, func(ctx context.Context) error {
		msg := &nats.Msg{Subject: jobsSubject + "slack", Data: []byte(`{"id":"m1"}`), Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, "m1")
		_, err := js.PublishMsg(ctx, msg)
		return err
	}))
	got := make(chan string, 1)
	cc, err := workers.Consume(func(m jetstream.Msg) {
		_ = m.Ack()
		select {
		case got <- string(m.Data()):
		default:
		}
	}, consumeOptions("test", 4)...)
	require.NoError(t, err)
	defer cc.Stop()
	select {
	case d := <-got:
		assert.JSONEq(t, `{"id":"m1"}`, d)
	case <-time.After(60 * time.Second):
		t.Fatal("the job was not delivered within 60 s of the leader's loss")
	}
}

// Roles started together on a new deployment each create the streams and
// the bucket, at once, on a cluster that has just formed: every one must
// come up. (The gateway and the router used to exit with "create stream
// GW_JOBS with 3 replicas: context deadline exceeded": only the consumers
// were retried, not the streams and the bucket.)
func TestRolesStartedTogetherCreateTheStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a NATS cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := startNATSCluster(ctx, 3)
	require.NoError(t, err)
	defer c.stop()

	const roles = 3 // the gateway, the router and a worker, each its own process
	rolesCtx, stopRoles := context.WithCancel(context.Background())
	defer stopRoles()
	errs := make(chan error, roles)
	for i := range roles {
		go func() {
			nc, err := nats.Connect(c.url(), nats.Name(fmt.Sprint("role-", i)))
			if err != nil {
				errs <- err
				return
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				errs <- err
				return
			}
			// As connect calls it: a role's context has no deadline.
			errs <- ensureJetStream(rolesCtx, nc, js, layout{})
		}()
	}
	for range roles {
		assert.NoError(t, <-errs, "a role started with the others must come up")
	}

	nc, err := nats.Connect(c.url())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	for _, name := range []string{jobsStream, bgStream, repliesStream, "KV_" + deliveredKV} {
		var s jetstream.Stream
		require.NoError(t, retry(ctx, publishDeadline, func(ctx context.Context) (err error) {
			s, err = js.Stream(ctx, name)
			return err
		}), name)
		assert.Equal(t, 3, s.CachedInfo().Config.Replicas, name)
		assert.False(t, s.CachedInfo().Config.AllowDirect, name)
	}
}

// fakeMsg is a JetStream message that says how many times it was delivered.
type fakeMsg struct {
	jetstream.Msg
	delivered uint64
	err       error
}

func (m fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	if m.err != nil {
		return nil, m.err
	}
	return &jetstream.MsgMetadata{NumDelivered: m.delivered}, nil
}

// Work that fails waits longer each time it is delivered, up to 5 s.
func TestRetryAfterBacksOff(t *testing.T) {
	for delivered, want := range map[uint64]time.Duration{
		0: 200 * time.Millisecond, 1: 200 * time.Millisecond, 2: 400 * time.Millisecond, 3: 800 * time.Millisecond,
		5: 3200 * time.Millisecond, 6: 5 * time.Second, 7: 5 * time.Second, 1 << 40: 5 * time.Second,
	} {
		assert.Equal(t, want, retryAfter(fakeMsg{delivered: delivered}), "delivered %d times", delivered)
	}
	assert.Equal(t, 200*time.Millisecond, retryAfter(fakeMsg{err: jetstream.ErrNotJSMessage}), "no metadata: as the first time")
}

// An error repeated while a service is down is printed once, and then once
// in 30 s with the count of those not printed.
func TestOnceLogCountsWhatItDoesNotPrint(t *testing.T) {
	var out strings.Builder
	l := onceLog{who: "worker", out: &out}
	for i := range 5 {
		l.printAs("job: call downstream", fmt.Errorf("job %d: call downstream: it answered 503", i))
	}
	l.printAs("job: run the tool", errors.New("job 9: run the tool: exit status 1"))
	assert.Equal(t, "worker: job 0: call downstream: it answered 503 [errors like it: one line in 30 s, with a count]\n"+
		"worker: job 9: run the tool: exit status 1 [errors like it: one line in 30 s, with a count]\n", out.String())
	out.Reset()
	l.printed["job: call downstream"] = time.Now().Add(-31 * time.Second)
	l.printAs("job: call downstream", errors.New("job 7: call downstream: it answered 503"))
	assert.Equal(t, "worker: job 7: call downstream: it answered 503 [and 4 more like it since the last such line]\n", out.String())
}

// Platforms number messages per chat, not globally: Telegram's message_id and
// Slack's ts are unique only within their chat, so two chats post the same
// id all the time. Each message is still queued, answered and delivered to
// its own chat; and an id with characters a NATS key cannot hold (Discord's
// are digits, but the ingress takes any valid session value) is delivered
// like any other, not retried for ever.
func TestMessageIDsAreUniqueOnlyWithinTheirChat(t *testing.T) {
	c := testConfig(t, "--messages", "1", "--conversations", "1")
	top, err := startTopology(context.Background(), c)
	require.NoError(t, err)
	defer top.stop()

	posts := []struct{ platform, body, chat string }{
		{"telegram", `{"message_id":7,"chat":{"id":-1001},"from":{"id":1},"text":"hi"}`, "-1001"},
		{"telegram", `{"message_id":7,"chat":{"id":-1002},"from":{"id":2},"text":"hi"}`, "-1002"},
		{"slack", `{"team":"T1","channel":"C1","ts":"1700000000.000100","user":"U1","text":"hi"}`, "C1"},
		{"slack", `{"team":"T1","channel":"C2","ts":"1700000000.000100","user":"U2","text":"hi"}`, "C2"},
		{"slack", `{"team":"T2","channel":"C1","ts":"1700000000.000100","user":"U3","text":"hi"}`, "C1"},
		{"discord", `{"id":"a b/ä","guild_id":"G1","channel_id":"D1","author":{"id":"u1"},"content":"hi"}`, "D1"},
	}
	for _, p := range posts {
		resp, err := http.Post(top.cfg.ingressURL+"/v1/"+p.platform+"/messages", "application/json", strings.NewReader(p.body))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusAccepted, resp.StatusCode, "%s %s", p.platform, p.body)
	}
	want := map[string]int{} // deliveries by platform/scope/chat
	for _, p := range posts {
		var scope struct {
			Team    string `json:"team"`
			GuildID string `json:"guild_id"`
		}
		require.NoError(t, json.Unmarshal([]byte(p.body), &scope))
		want[p.platform+"/"+scope.Team+scope.GuildID+"/"+p.chat]++
	}
	got := func() map[string]int {
		top.p.mu.Lock()
		defer top.p.mu.Unlock()
		m := map[string]int{}
		for _, d := range top.p.deliveries {
			m[d.Platform+"/"+d.Origin.ScopeID+"/"+d.Origin.ChatID]++
		}
		return m
	}
	assert.Eventually(t, func() bool { return assert.ObjectsAreEqual(want, got()) }, 30*time.Second, 100*time.Millisecond)
	assert.Equal(t, want, got(), "one reply in each chat")
}

// A direct message has no scope: Discord sends one without a guild. Its
// reply and its completion go out for its user, like the original's "scope_id
// (or a user binding)"; a guild thread that arrives without its guild is
// still refused, never sent to a default tenant. Telegram's and Slack's own
// kinds of chat name the session's chat type.
func TestDirectMessagesGoToTheirUser(t *testing.T) {
	c := testConfig(t, "--messages", "1", "--conversations", "1")
	top, err := startTopology(context.Background(), c)
	require.NoError(t, err)
	defer top.stop()
	refusals := watchRefusals(t, top.nc)

	posts := []struct{ platform, body string }{
		{"discord", `{"id":"900","channel_id":"DM1","author":{"id":"u7"},"content":"hi","background":true}`},
		{"discord", `{"id":"901","channel_id":"T9","parent_id":"C9","author":{"id":"u7"},"content":"hi"}`}, // a thread without its guild
		// As the platforms post them to a webhook: a Telegram Update, a
		// Slack Events API envelope.
		{"telegram", `{"update_id":1,"message":{"message_id":5,"chat":{"id":555,"type":"private"},"from":{"id":555},"text":"hi"}}`},
		{"slack", `{"type":"event_callback","team_id":"T1","event":{"type":"message","channel":"D01","channel_type":"im","ts":"1700000000.000200","user":"U1","text":"hi"}}`},
		{"slack", `{"team":"T1","channel":"C01","channel_type":"group","ts":"1700000000.000300","user":"U1","text":"hi"}`},
	}
	for _, p := range posts {
		resp, err := http.Post(top.cfg.ingressURL+"/v1/"+p.platform+"/messages", "application/json", strings.NewReader(p.body))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusAccepted, resp.StatusCode, "%s %s", p.platform, p.body)
	}
	want := map[string]string{ // kind platform/chat: chat type, user, scope
		"reply discord/DM1":      "dm u7 ",
		"completion discord/DM1": "dm u7 ",
		"reply telegram/555":     "dm 555 ",
		"reply slack/D01":        "dm U1 T1",
		"reply slack/C01":        "channel U1 T1",
	}
	got := func() map[string]string {
		top.p.mu.Lock()
		defer top.p.mu.Unlock()
		m := map[string]string{}
		for _, d := range top.p.deliveries {
			m[d.Kind+" "+d.Platform+"/"+d.Origin.ChatID] = d.Origin.ChatType + " " + d.Origin.UserID + " " + d.Origin.ScopeID
		}
		return m
	}
	reason := func() string { return refusals()["reply.901"] }
	assert.Eventually(t, func() bool { return assert.ObjectsAreEqual(want, got()) && reason() != "" }, 30*time.Second, 100*time.Millisecond)
	assert.Equal(t, want, got(), "every direct message answered, for its user; the guild-less thread not at all")
	assert.Contains(t, reason(), "without a scope")
}

// A message key tells apart what the message id alone does not, stays the
// same for the same message, and always has the form validKey accepts.
func TestMessageKey(t *testing.T) {
	seen := map[string]string{}
	for _, m := range [][4]string{
		{"telegram", "", "-1001", "7"},
		{"telegram", "", "-1002", "7"},
		{"slack", "T1", "C1", "1700000000.000100"},
		{"slack", "T2", "C1", "1700000000.000100"},
		{"slack", "T1", "C11", "700000000.000100"}, // the same characters, cut elsewhere
		{"discord", "G1", "D1", "a b/ä"},
		{"api_server", "", "r-1", "r-1"},
	} {
		k := messageKey(m[0], m[1], m[2], m[3])
		assert.True(t, validKey(k), "%v: %q", m, k)
		assert.Equal(t, k, messageKey(m[0], m[1], m[2], m[3]), "the same message, the same key")
		if other, dup := seen[k]; dup {
			t.Errorf("%v and %s share the key %s", m, other, k)
		}
		seen[k] = fmt.Sprint(m)
	}
	for _, bad := range []string{"", "7", "job-7", strings.Repeat("A", 32), strings.Repeat("g", 32), strings.Repeat("a", 33)} {
		assert.False(t, validKey(bad), "%q", bad)
	}
}

// What the ingress cannot take it answers with a 4xx that says why, and
// queues nothing: a platform does not retry a 4xx, and a bad message must
// not become a job. (No NATS here: a refused message never reaches it.)
func TestIngressRefusesBadMessages(t *testing.T) {
	h := ingress(noop.NewTracerProvider().Tracer("test"), nil, nil, webhookAuth{})
	for _, c := range []struct {
		platform, body string
		code           int
		says           string
	}{
		{"telegram", `{"message_id":`, http.StatusBadRequest, "decode a telegram update"},
		{"telegram", `[1,2]`, http.StatusBadRequest, "decode a telegram update"},
		{"telegram", `{"chat":{"id":5}}`, http.StatusBadRequest, "telegram message without an id"},
		{"telegram", `{"message_id":0,"chat":{"id":5}}`, http.StatusBadRequest, "telegram message without an id"}, // Telegram's ids start at 1
		{"telegram", `{"message_id":7}`, http.StatusBadRequest, "telegram message without a chat"},
		{"slack", `{"team":"T","ts":"1.2"}`, http.StatusBadRequest, "slack message without a chat"},
		{"discord", `{"guild_id":"G","channel_id":"C"}`, http.StatusBadRequest, "discord message without an id"},
		{"slack", `{"channel":"C\u0001","ts":"1.2"}`, http.StatusBadRequest, "session.chat_id"},
		{"slack", `{"channel":"C","ts":"` + strings.Repeat("9", 513) + `"}`, http.StatusBadRequest, "session.message_id"},
		{"api", `{"request_id":"r\ufffd"}`, http.StatusBadRequest, "session.chat_id"},
		{"telegram", `{"message_id":1,"text":"` + strings.Repeat("x", maxMessageBytes) + `"}`, http.StatusRequestEntityTooLarge, "too large"},
		{"irc", `{}`, http.StatusNotFound, `unknown platform "irc"`},
		{"discord", `{"id":"1","channel_id":"C"} {"id":"2"}`, http.StatusBadRequest, "data after the JSON value"},
		{"slack", `{"type":"event_callback","team_id":"T1"}`, http.StatusBadRequest, "slack event_callback without an event"},
		// What a platform must not post again: answered 200, nothing queued.
		{"telegram", `{"update_id":9,"edited_message":{"message_id":7,"chat":{"id":5},"text":"hi!"}}`, http.StatusOK, "ignored: an edit"},
		{"telegram", `{"update_id":9,"callback_query":{"id":"q1"}}`, http.StatusOK, "ignored: an update without a message"},
		{"slack", `{"type":"event_callback","team_id":"T1","event":{"type":"message","bot_id":"B1","channel":"C1","ts":"1.2"}}`, http.StatusOK, "ignored: a bot's message"},
		{"slack", `{"type":"event_callback","team_id":"T1","event":{"type":"message","subtype":"message_changed","channel":"C1","ts":"1.2"}}`, http.StatusOK, `ignored: a "message_changed" message`},
		{"slack", `{"type":"event_callback","team_id":"T1","event":{"type":"reaction_added"}}`, http.StatusOK, `ignored: a "reaction_added" event`},
		{"slack", `{"type":"url_verification","challenge":"3eZbrw1aB"}`, http.StatusOK, `{"challenge":"3eZbrw1aB"}`},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/"+c.platform+"/messages", strings.NewReader(c.body)))
		assert.Equal(t, c.code, rec.Code, "%s %.60s: %s", c.platform, c.body, rec.Body)
		assert.Contains(t, rec.Body.String(), c.says, "%s %.60s", c.platform, c.body)
	}
}

// The ingress takes what the platforms post to a webhook, not only the bare
// message: a Telegram Update and a Slack Events API envelope give the same
// session as the message they hold.
func TestIngressTakesThePlatformsWebhooks(t *testing.T) {
	for _, c := range []struct{ platform, webhook, bare string }{
		{"telegram", `{"update_id":812,"message":{"message_id":7,"chat":{"id":555,"type":"private"},"from":{"id":555,"first_name":"Ada"},"text":"hi"}}`,
			`{"message_id":7,"chat":{"id":555,"type":"private"},"from":{"id":555,"first_name":"Ada"},"text":"hi"}`},
		{"telegram", `{"update_id":813,"channel_post":{"message_id":8,"chat":{"id":-1009,"type":"channel"},"text":"hi"}}`,
			`{"message_id":8,"chat":{"id":-1009,"type":"channel"},"text":"hi"}`},
		{"slack", `{"type":"event_callback","team_id":"T1","event_id":"Ev1","event":{"type":"message","channel":"C1","channel_type":"channel","user":"U1","text":"hi","ts":"1700000001.000200","thread_ts":"1700000000.000100"}}`,
			`{"team":"T1","channel":"C1","channel_type":"channel","user":"U1","text":"hi","ts":"1700000001.000200","thread_ts":"1700000000.000100"}`},
		{"slack", `{"type":"event_callback","team_id":"T1","event":{"type":"message","subtype":"thread_broadcast","channel":"C1","user":"U1","text":"hi","ts":"1700000002.000200","thread_ts":"1700000000.000100"}}`,
			`{"team":"T1","channel":"C1","user":"U1","text":"hi","ts":"1700000002.000200","thread_ts":"1700000000.000100"}`},
	} {
		post := func(body string) (otelsession.Session, job) {
			s, j, err := normalise(c.platform, []byte(body))
			require.NoError(t, err, body)
			return s, j
		}
		ws, wj := post(c.webhook)
		bs, bj := post(c.bare)
		assert.Equal(t, bs, ws, c.webhook)
		assert.Equal(t, bj, wj, c.webhook)
		assert.NotEmpty(t, ws.ChatID)
	}
}

// A load balancer asks /healthz: while NATS is away the ingress can queue
// nothing, and says so instead of taking posts it would answer 503 after 8 s.
func TestHealthzFollowsNATS(t *testing.T) {
	ns, stop, err := embeddedNATS()
	require.NoError(t, err)
	defer stop()
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	h := ingress(noop.NewTracerProvider().Tracer("test"), nil, js, webhookAuth{})
	health := func() int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		return rec.Code
	}
	assert.Equal(t, http.StatusNoContent, health())
	ns.Shutdown()
	assert.Eventually(t, func() bool { return health() == http.StatusServiceUnavailable }, 5*time.Second, 20*time.Millisecond)
}

// watchRefusals subscribes to the router's refusals, forged ones left out,
// until the test ends; what it returns reads them so far, by kind.id.
func watchRefusals(t *testing.T, nc *nats.Conn) func() map[string]string {
	t.Helper()
	var mu sync.Mutex
	refused := map[string]string{} // kind.id: reason
	sub, err := nc.Subscribe(refusedSubject, func(m *nats.Msg) {
		var r refusal
		if json.Unmarshal(m.Data, &r) == nil && !r.Forged {
			mu.Lock()
			refused[r.Kind+"."+r.ID] = r.Reason
			mu.Unlock()
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, nc.Flush())
	return func() map[string]string { mu.Lock(); defer mu.Unlock(); return maps.Clone(refused) }
}

// headerMsg is a JetStream message with headers and nothing else.
type headerMsg struct {
	jetstream.Msg
	h nats.Header
}

func (m headerMsg) Headers() nats.Header { return m.h }

// A body's key counts only when it is the one its Nats-Msg-Id, which the
// session's signature covers, was queued under.
func TestKeyedAs(t *testing.T) {
	k := messageKey("telegram", "", "-1001", "7")
	other := messageKey("telegram", "", "-1002", "7")
	with := func(id string) headerMsg {
		h := nats.Header{}
		if id != "" {
			h.Set(jetstream.MsgIDHeader, id)
		}
		return headerMsg{h: h}
	}
	assert.True(t, keyedAs(with("job-"+k), "job-", k))
	assert.True(t, keyedAs(with("reply-"+k), "reply-", k))
	assert.False(t, keyedAs(with("job-"+k), "job-", other), "a body key other than the queued one")
	assert.False(t, keyedAs(with("reply-"+k), "completion-", k), "another kind's id")
	assert.False(t, keyedAs(with(""), "job-", k), "no Nats-Msg-Id")
	assert.False(t, keyedAs(headerMsg{}, "job-", k), "no headers at all")
	assert.False(t, keyedAs(with("job-7"), "job-", "7"), "an id where a key belongs")
}
