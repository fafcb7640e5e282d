package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/execsession"
	"github.com/sessionwire/sessionwire/propagation/httpsession"
	"github.com/sessionwire/sessionwire/propagation/natssession"
)

// Where a worker keeps the session of the job it is working on.
const (
	storeBaggage = "baggage" // in the job's context: sessionwire
	storeEnv     = "env"     // in the process environment: the original bug
	storeOff     = "off"     // nowhere: routing read from the job body, no session propagated (the baseline)
)

type workerConfig struct {
	store         string
	concurrency   int           // jobs handled at once by this process
	downstreamURL string        // the downstream service each job calls: http://… or grpc://host:port
	think         time.Duration // longest simulated agent work per job
	ackWait       time.Duration
	verifier      *propagation.Verifier // checks the signature on each job's session
	out           *propagation.Outbound // signs what the worker publishes (see hop)
}

type worker struct {
	cfg    workerConfig
	js     jetstream.JetStream
	pub    *natssession.Publisher
	cons   *natssession.Consumer
	tracer trace.Tracer
	client *http.Client
	grpc   *grpcClient // when the downstream URL is grpc://
	exec   execsession.Config
	envMu  sync.Mutex // serialises whole-environment writes, as os.Setenv does; not the job
	errs   onceLog    // failed work, once per kind
	down   breaker    // the downstream service's
}

// parseDownstreamURL reads the downstream service's URL: http://…, https://…
// or grpc://host:port, absolute. --downstream-url is checked with it before
// anything starts (cli.go).
func parseDownstreamURL(s string) (*url.URL, error) {
	down, err := url.Parse(s)
	if err != nil || down.Host == "" {
		return nil, fmt.Errorf("the downstream URL %q is not an absolute URL", s)
	}
	if down.Scheme != "http" && down.Scheme != "https" && down.Scheme != downstreamGRPC {
		return nil, fmt.Errorf("the downstream URL %q must start with http://, https:// or grpc://", s)
	}
	return down, nil
}

func newWorker(cfg workerConfig, js jetstream.JetStream, tp *sdktrace.TracerProvider) (*worker, error) {
	down, err := parseDownstreamURL(cfg.downstreamURL)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	var grpcDown *grpcClient
	if down.Scheme == downstreamGRPC {
		if grpcDown, err = newGRPCClient(down, cfg.store, cfg.out.Signer(), tp); err != nil {
			return nil, err
		}
	}
	prop := natssession.WithPropagator(propagatorFor(cfg.store))
	// The downstream service, and only it, receives the session, signed.
	httpEdge := httpsession.NewClientEdge(httpsession.WithPropagator(propagatorFor(cfg.store)), httpsession.WithOutbound(
		propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{Hosts: []string{down.Host}}), propagation.WithSigner(cfg.out.Signer()))))
	// No publisher is trusted as such: a job's session is accepted only
	// with the gateway's signature for that job's message id. From a
	// conversation's third job on, the policy's cache of accepted sessions
	// serves it (propagation.WithCacheSize), its signature verified still.
	inbound := propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(cfg.verifier))
	workerInbounds.Lock()
	workerInbounds.p = append(workerInbounds.p, inbound)
	workerInbounds.Unlock()
	return &worker{
		cfg: cfg, js: js, grpc: grpcDown, errs: onceLog{who: "worker"},
		pub:    natssession.NewPublisher(natssession.WithTracerProvider(tp), prop, natssession.WithOutbound(cfg.out)),
		cons:   natssession.NewConsumer(inbound, natssession.WithTracerProvider(tp), prop),
		tracer: tp.Tracer("gateway/worker"),
		client: &http.Client{Timeout: 10 * time.Second, Transport: httpEdge.Transport(otelhttp.NewTransport(http.DefaultTransport,
			// The policy runs inside otelhttp's injection: one request copy,
			// one traceparent, the baggage written once, as the policy allows.
			otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(httpEdge.Propagator())))},
		exec: execsession.Config{Propagator: propagatorFor(cfg.store)},
	}, nil
}

// workerInbounds holds the inbound policies of this process's workers, for
// the run's summary of their cache (workerInboundCounts).
var workerInbounds struct {
	sync.Mutex
	p []*propagation.Inbound
}

// workerInboundCounts sums what this process's workers' inbound policies
// accepted, and how many of those sessions their caches served.
func workerInboundCounts() (accepted, cached uint64) {
	workerInbounds.Lock()
	defer workerInbounds.Unlock()
	for _, p := range workerInbounds.p {
		c := p.Counts()
		accepted += c.Accepted
		cached += c.Cached
	}
	return accepted, cached
}

// run consumes jobs and background work until ctx ends. It calls ready
// once it is consuming both; an error before that is returned at once.
func (w *worker) run(ctx context.Context, ready func()) error {
	if w.grpc != nil {
		defer w.grpc.close() // after the jobs in flight (p.close), which may still call it
	}
	jobs, err := consumer(ctx, w.js, "worker", jobsStream, "workers", w.cfg.ackWait, nil, 0)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	bg, err := consumer(ctx, w.js, "worker", bgStream, "background", w.cfg.ackWait, nil, 0)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	p := newPool(w.cfg.concurrency)
	// Fetch no more than can be worked on: JetStream's ack wait starts when a
	// message is delivered, so a message waiting in a local buffer would be
	// redelivered, and done twice, while still queued here.
	cc1, err := jobs.Consume(p.handler(w.handleJob), consumeOptions("worker: jobs", w.cfg.concurrency)...)
	if err != nil {
		return fmt.Errorf("worker: consume jobs: %w", err)
	}
	cc2, err := bg.Consume(p.handler(w.handleBackground), consumeOptions("worker: background work", w.cfg.concurrency)...)
	if err != nil {
		cc1.Stop()
		p.close()
		return fmt.Errorf("worker: consume background work: %w", err)
	}
	ready()
	<-ctx.Done()
	cc1.Stop()
	cc2.Stop()
	p.close()
	return nil
}

func (w *worker) handleJob(msg jetstream.Msg) {
	defer keepAlive(msg, w.cfg.ackWait)()
	var j job
	if err := json.Unmarshal(msg.Data(), &j); err != nil {
		fmt.Fprintln(os.Stderr, "worker: dropping a job that is not JSON:", err)
		_ = msg.Term()
		return
	}
	if !keyedAs(msg, "job-", j.Key) {
		// Not from this gateway's ingress: its reply could not be recorded.
		fmt.Fprintf(os.Stderr, "worker: dropping job %q: its message key %q is malformed or not the one it was queued under\n", j.ID, j.Key)
		_ = msg.Term()
		return
	}
	// Every job starts from a fresh context: Reset, extract, inbound policy.
	ctx, span, err := w.cons.ExtractJetStream(context.Background(), msg)
	defer span.End()
	if w.cfg.store == storeBaggage {
		if err != nil || !hasRoute(ctx) {
			// Never run: its tool, its downstream call and its reply would
			// act for a session nobody signed.
			w.refuseUnverified(msg, "job", j.ID, err)
			return
		}
	} else if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
	}
	if w.cfg.store == storeEnv {
		w.setEnv(j.Route) // the original: one process-wide copy, last writer wins
	}
	if err := w.work(ctx, j); err != nil {
		// The kind is what failed ("call downstream", "run the tool"):
		// when a service is down, every job fails the same way.
		kind, _, _ := strings.Cut(err.Error(), ":")
		w.errs.printAs("job: "+kind, fmt.Errorf("job %s: %w (trying it again)", j.ID, err))
		_ = msg.NakWithDelay(retryAfter(msg))
		return
	}
	if err := msg.Ack(); err != nil {
		fmt.Fprintln(os.Stderr, "worker: ack job", j.ID+":", err)
	}
}

// work is one turn: a tool, a downstream call, the reply, maybe background work.
func (w *worker) work(ctx context.Context, j job) error {
	n := notification{Kind: "reply", ID: j.ID, Key: j.Key, Text: "done: " + j.Text}
	if w.down.shut(time.Now()) {
		// The turn could not finish: do not run its tool for nothing.
		return fmt.Errorf("call downstream: %w", w.down.errShut())
	}

	toolCtx, span := w.tracer.Start(ctx, "run tool")
	cmd := w.exec.Command(toolCtx, os.Args[0], "--role", "tool")
	if w.cfg.store == storeEnv {
		cmd.Env = os.Environ() // the original inherited the process environment
	}
	cmd.Stderr = os.Stderr
	// Its own process group, as every child of the gateway: a Ctrl-C on the
	// terminal reaches the gateway alone, which ends its work in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.Output()
	span.End()
	if err != nil {
		return fmt.Errorf("run the tool: %w", err)
	}
	n.ToolSaw = strings.TrimSpace(string(out))

	if w.cfg.think > 0 {
		time.Sleep(rand.N(w.cfg.think)) // the agent thinks; other jobs run meanwhile
	}
	if err := w.down.call(func() (err error) {
		n.DownstreamSaw, err = w.callDownstream(ctx)
		return err
	}); errors.Is(err, errNotCalled) {
		return fmt.Errorf("call downstream: %w", err)
	} else if err != nil {
		return err
	}

	n.Origin = w.origin(ctx, j)
	if j.Background {
		if w.asyncSupported(ctx, j) {
			// The stored origin goes with the work; in baggage mode the session
			// goes beside it, signed, and is what the completion is routed by.
			b, _ := json.Marshal(backgroundJob{ID: j.ID, Key: j.Key, Origin: n.Origin})
			msg := &nats.Msg{Subject: bgSubject + n.Origin.Platform, Data: b, Header: nats.Header{}}
			msg.Header.Set(jetstream.MsgIDHeader, "bg-"+j.Key)
			if err := w.publish(ctx, msg); err != nil {
				return fmt.Errorf("queue background work: %w", err)
			}
			n.Background = "started"
		} else {
			n.Background = "refused: stateless channel"
		}
	}
	return w.notify(ctx, n)
}

// origin is where the reply goes: from the session in the context, or, for
// the other stores, from the process environment or the job body.
func (w *worker) origin(ctx context.Context, j job) otelsession.Origin {
	switch w.cfg.store {
	case storeEnv:
		get := func(f otelsession.Field) string { return os.Getenv(f.Name()) }
		o := otelsession.Origin{Platform: get(otelsession.FieldPlatform), ChatID: get(otelsession.FieldChatID),
			ChatType: get(otelsession.FieldChatType), ThreadID: get(otelsession.FieldThreadID), ParentChatID: get(otelsession.FieldParentChatID),
			MessageID: get(otelsession.FieldMessageID), ScopeID: get(otelsession.FieldScopeID),
			UserID: get(otelsession.FieldUserID), SessionKey: get(otelsession.FieldSessionKey)}
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			o.TraceParent = otelsession.OriginFrom(ctx).TraceParent
		}
		return o
	case storeOff:
		s := j.Route
		o := otelsession.OriginFrom(ctx) // trace context only: no session in ctx
		o.Platform, o.ChatID, o.ChatType, o.ThreadID, o.ParentChatID = s.Platform, s.ChatID, s.ChatType, s.ThreadID, s.ParentChatID
		o.MessageID, o.ScopeID, o.UserID, o.SessionKey = s.MessageID, s.ScopeID, s.UserID, s.SessionKey
		return o
	}
	return otelsession.OriginFrom(ctx)
}

func (w *worker) asyncSupported(ctx context.Context, j job) bool {
	switch w.cfg.store {
	case storeEnv:
		return os.Getenv(otelsession.FieldPlatform.Name()) != "api_server"
	case storeOff:
		return !j.Route.Stateless
	}
	return otelsession.AsyncDeliverySupported(ctx)
}

func (w *worker) setEnv(s otelsession.Session) {
	w.envMu.Lock()
	defer w.envMu.Unlock()
	for f, v := range map[otelsession.Field]string{
		otelsession.FieldPlatform: s.Platform, otelsession.FieldChatID: s.ChatID, otelsession.FieldChatType: s.ChatType,
		otelsession.FieldThreadID:     s.ThreadID,
		otelsession.FieldParentChatID: s.ParentChatID, otelsession.FieldMessageID: s.MessageID,
		otelsession.FieldScopeID: s.ScopeID, otelsession.FieldUserID: s.UserID, otelsession.FieldSessionKey: s.SessionKey,
	} {
		_ = os.Setenv(f.Name(), v)
	}
}

func (w *worker) callDownstream(ctx context.Context) (string, error) {
	if w.grpc != nil {
		var envThread string
		if w.cfg.store == storeEnv {
			envThread = os.Getenv(otelsession.FieldThreadID.Name())
		}
		return w.grpc.thread(ctx, envThread)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.cfg.downstreamURL, nil)
	if err != nil {
		return "", fmt.Errorf("build the downstream request: %w", err)
	}
	if w.cfg.store == storeEnv {
		req.Header.Set("X-Thread-ID", os.Getenv(otelsession.FieldThreadID.Name()))
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("call downstream: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch {
	case resp.StatusCode != http.StatusOK:
		return "", fmt.Errorf("call downstream: it answered %s", resp.Status)
	case err != nil:
		return "", fmt.Errorf("call downstream: read the answer: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// notify queues a reply or a completion for the router.
func (w *worker) notify(ctx context.Context, n notification) error {
	b, err := json.Marshal(n)
	if err != nil {
		return fmt.Errorf("encode the %s: %w", n.Kind, err)
	}
	msg := &nats.Msg{Subject: replySubject(n.Kind, n.Origin.Platform), Data: b, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, n.Kind+"-"+n.Key)
	if err := w.publish(ctx, msg); err != nil {
		return fmt.Errorf("queue the %s: %w", n.Kind, err)
	}
	return nil
}

// publish stores msg in its stream, retried with the same Nats-Msg-Id (so
// stored once) until a stream leader acknowledges it or publishDeadline
// passes: a node lost mid-publish costs a leader election, not the message.
// An error leaves the job unacknowledged, and JetStream redelivers it.
func (w *worker) publish(ctx context.Context, msg *nats.Msg) error {
	return retry(ctx, publishDeadline, func(ctx context.Context) error {
		_, err := w.pub.PublishJetStream(ctx, w.js, msg)
		return err
	})
}

// handleBackground finishes background work after its turn has ended. It has
// only the stored origin: it binds it, so its logs and spans belong to the
// conversation, and links its span to the turn that promised the work.
func (w *worker) handleBackground(msg jetstream.Msg) {
	defer keepAlive(msg, w.cfg.ackWait)()
	var b backgroundJob
	if err := json.Unmarshal(msg.Data(), &b); err != nil {
		fmt.Fprintln(os.Stderr, "worker: dropping background work that is not JSON:", err)
		_ = msg.Term()
		return
	}
	if err := b.Origin.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "worker: dropping background work", b.ID+":", err)
		_ = msg.Term()
		return
	}
	if !keyedAs(msg, "bg-", b.Key) {
		fmt.Fprintf(os.Stderr, "worker: dropping background work %q: its message key %q is malformed or not the one it was queued under\n", b.ID, b.Key)
		_ = msg.Term()
		return
	}
	var ctx context.Context
	if w.cfg.store == storeBaggage {
		// The session that came with the work, verified like a job's: the
		// stored origin in the body is for the span link only.
		var span trace.Span
		var err error
		ctx, span, err = w.cons.ExtractJetStream(context.Background(), msg)
		span.End()
		if err != nil || !hasRoute(ctx) {
			w.refuseUnverified(msg, "background work", b.ID, err)
			return
		}
	} else {
		ctx = b.Origin.Bind(otelsession.Reset(context.Background()))
	}
	ctx, span := w.tracer.Start(ctx, "background work", trace.WithNewRoot(), trace.WithLinks(b.Origin.Link()))
	defer span.End()
	if w.cfg.think > 0 {
		time.Sleep(2 * rand.N(w.cfg.think)) // longer than a turn
	}
	n := notification{Kind: "completion", ID: b.ID, Key: b.Key, Origin: b.Origin, Text: "background result for " + b.ID}
	if w.cfg.store == storeBaggage {
		n.Origin = otelsession.OriginFrom(ctx) // what the signed session says
		n.Origin.TraceParent, n.Origin.TraceState = b.Origin.TraceParent, b.Origin.TraceState
	}
	if err := w.notify(ctx, n); err != nil {
		kind, _, _ := strings.Cut(err.Error(), ":")
		w.errs.printAs("background: "+kind, fmt.Errorf("background %s: %w (trying it again)", b.ID, err))
		_ = msg.NakWithDelay(retryAfter(msg))
		return
	}
	_ = msg.Ack()
}

// unverifiedPatience is how long work whose signature fails against this
// process's keys is left for another process of its role (see
// heldForAnotherKey) before it is dropped: time for a worker or a router
// that holds the right key to take it, while a forgery holds a place among
// the consumer's unacknowledged messages for no longer than this.
const unverifiedPatience = time.Minute

// refuseUnverified disposes of work (a job, or background work; what, with
// the id its body gives) that arrived, with the baggage store, without a
// session signed by the gateway's key for its message id (err is what the
// inbound policy said; nil when there was no signed session at all). It is
// never run: its tool, downstream call and reply would act for a session
// nobody signed. Each kind of refusal is printed once in 30 s, with the
// subject, the Nats-Msg-Id and the reason.
//
//   - No signed session, or one that is malformed, expired or unusable: no
//     worker could run it. Terminated at once.
//   - A signature made with a key this worker does not hold, or whose MAC
//     does not match: put back for another worker (heldForAnotherKey) until
//     it is unverifiedPatience old, and dropped then.
func (w *worker) refuseUnverified(msg jetstream.Msg, what, id string, err error) {
	where := unverifiedWhere(msg, what, id)
	switch {
	case err == nil:
		w.errs.printAs(what+": unsigned", fmt.Errorf("not running %s: it carries no session signed by the gateway "+
			"(a forgery, or a gateway not started with --session-store baggage); dropped", where))
		_ = msg.Term()
	case heldForAnotherKey(&w.errs, msg, "worker", "gateway's", "running", what, where, err):
	case signedWithAnotherKey(err):
		w.errs.printAs(what+": another key, dropped", fmt.Errorf("dropping %s: no worker verified its signature within %v (%v); "+
			"if it is genuine, the gateway's SESSIONWIRE_SIGNING_KEY differs from the workers'", where, unverifiedPatience, err))
		_ = msg.Term()
	case errors.Is(err, propagation.ErrSignatureExpired):
		w.errs.printAs(what+": expired", fmt.Errorf("not running %s: its signature expired (%v): it waited in the queue "+
			"longer than --max-wait, or the gateway's clock is wrong; dropped", where, err))
		_ = msg.Term()
	default:
		w.errs.printAs(what+": refused", fmt.Errorf("not running %s: its session was refused (%v); dropped", where, err))
		_ = msg.Term()
	}
}

// unverifiedWhere names a message whose session did not verify, for a log
// line: what it is and the id its body gives, its subject and Nats-Msg-Id.
func unverifiedWhere(msg jetstream.Msg, what, id string) string {
	return fmt.Sprintf("%s %q (subject %s, Nats-Msg-Id %q)", what, id, msg.Subject(), msg.Headers().Get(jetstream.MsgIDHeader))
}

// signedWithAnotherKey reports whether a session failed to verify only for
// its key: made with a key id this process does not hold, or whose MAC does
// not match under the key it holds by that id.
func signedWithAnotherKey(err error) bool {
	return errors.Is(err, propagation.ErrBadSignature) || errors.Is(err, propagation.ErrUnknownKey)
}

// heldForAnotherKey puts back a message whose session failed to verify only
// for its key (signedWithAnotherKey), while it is younger than
// unverifiedPatience, for another process of the same role (who: "worker",
// "router") to take, offered again within a second (sooner at first); it
// reports whether it did. Such a message is a forgery, or this process (or
// the one that signed it, signer) was started with another
// SESSIONWIRE_SIGNING_KEY, which is easy to do and which this process cannot
// tell apart. Were it terminated, every message a misconfigured process
// pulls would be lost, though one holding the right key could take it. The
// line it prints (once in 30 s per kind, to log) says what (the doing, such
// as "running", and the message, where) and what to check.
func heldForAnotherKey(log *onceLog, msg jetstream.Msg, who, signer, doing, what, where string, err error) bool {
	if !signedWithAnotherKey(err) {
		return false
	}
	md, mdErr := msg.Metadata()
	if mdErr != nil || time.Since(md.Timestamp) >= unverifiedPatience {
		return false
	}
	log.printAs(what+": another key", fmt.Errorf("not %s %s: its signature does not verify with this %s's key (%v). "+
		"Either it is forged, or this %s's key differs from the %s: every role must share SESSIONWIRE_SIGNING_KEY "+
		"(and --signing-key-id; while keys are rotated, the old one as SESSIONWIRE_PREVIOUS_SIGNING_KEY). "+
		"Left for another %s for up to %v, then dropped", doing, where, who, err, who, signer, who, unverifiedPatience))
	_ = msg.NakWithDelay(min(retryAfter(msg), time.Second))
	return true
}

// hasRoute reports whether ctx holds a session with somewhere to deliver to.
func hasRoute(ctx context.Context) bool {
	_, st := otelsession.Lookup(ctx, otelsession.FieldPlatform)
	return st == otelsession.Set
}

// runTool is the child process: one call restores the session; it reports
// the thread it works for.
func runTool() int {
	ctx, err := execsession.FromEnvironment(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "tool:", err)
	}
	fmt.Println(otelsession.Getenv(ctx, otelsession.FieldThreadID.Name(), ""))
	return 0
}

// downstream is a service the worker calls: it reports the thread of the
// session it received, accepted only from the peers trust names.
func downstream(trust propagation.TrustFunc, o *outage) http.Handler {
	// It reads the session propagated as W3C baggage; it does not care which
	// store the workers use.
	prop := propagatorFor(storeBaggage)
	return httpsession.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o.refuse() {
			http.Error(w, "downstream: unavailable (an outage injected by --fault)", http.StatusServiceUnavailable)
			return
		}
		thread := otelsession.Getenv(r.Context(), otelsession.FieldThreadID.Name(), "")
		if v := r.Header.Get("X-Thread-ID"); v != "" { // the env-store worker's header
			thread = v
		}
		fmt.Fprintln(w, thread)
	}), httpsession.WithInbound(propagation.NewInbound(trust)), httpsession.WithPropagator(prop))
}
