package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sessionwire/sessionwire/examples/internal/demotrace"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
)

// services is what the load role hosts: the chat platforms and the
// downstream service, on one loopback server.
func services(ctx context.Context, addr string, p *platforms, trust propagation.TrustFunc, down *outage) (platformURL, downstreamURL string, err error) {
	mux := http.NewServeMux()
	mux.Handle("/platforms/", http.StripPrefix("/platforms", p))
	mux.Handle("/downstream", downstream(trust, down))
	base, err := serve(ctx, addr, mux)
	if err != nil {
		return "", "", err
	}
	return base + "/platforms", base + "/downstream", nil
}

// embeddedNATS starts a NATS server with JetStream on a random loopback port,
// its store in a temporary directory removed at shutdown.
func embeddedNATS() (*server.Server, func(), error) {
	dir, err := os.MkdirTemp("", "sessionwire-gateway-*")
	if err != nil {
		return nil, nil, fmt.Errorf("create the JetStream store directory: %w", err)
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("start the embedded NATS server: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		os.RemoveAll(dir)
		return nil, nil, errors.New("the embedded NATS server was not ready within 10s")
	}
	return ns, func() { ns.Shutdown(); ns.WaitForShutdown(); os.RemoveAll(dir) }, nil
}

// topology is every role on one machine: the gateway, the router, the
// workers (in this process, or as child processes with chaos), the platforms
// and the downstream service, on an embedded NATS server unless a URL is given.
type topology struct {
	cfg      config
	cluster  *natsCluster // with --nats-cluster
	router   *roleProc    // with --fault router-kill: the router in its own process
	ingress  *roleProc    // with --fault gateway-kill: the gateway (the ingress) in its own process
	nc       *nats.Conn
	p        *platforms
	procs    *workerProcs
	grpcDown *grpcDownstream                     // with --downstream=grpc
	downOut  outage                              // the downstream service's, HTTP or gRPC (--fault downstream-down)
	tps      map[string]*sdktrace.TracerProvider // by role: each role is its own service in a trace, as when run apart
	traces   *demotrace.Summary
	cancel   context.CancelFunc // stops the roles
	svcStop  context.CancelFunc // then the services they call
	done     chan error         // one value per role goroutine that has ended
	running  int                // role goroutines started
	shutdown func()
}

func startTopology(ctx context.Context, c config) (_ *topology, err error) {
	// The roles and services live until stop, which ends them in order, not
	// until a Ctrl-C cancels ctx: cancelled together, the services would
	// go first and the work in flight would fail on them with pages of
	// connection errors.
	ctx = context.WithoutCancel(ctx)
	t := &topology{cfg: c, traces: &demotrace.Summary{}, shutdown: func() {}}
	defer func() {
		if err != nil {
			t.stop()
		}
	}()
	if t.cfg.natsNodes > 0 {
		if t.cluster, err = startNATSCluster(ctx, t.cfg.natsNodes); err != nil {
			return nil, err
		}
		t.shutdown, t.cfg.natsURL = t.cluster.stop, t.cluster.url()
	} else if t.cfg.natsURL == "" {
		ns, shutdown, err := embeddedNATS()
		if err != nil {
			return nil, err
		}
		t.shutdown = shutdown
		t.cfg.natsURL = ns.ClientURL()
	}
	svcCtx, svcStop := context.WithCancel(ctx)
	t.svcStop = svcStop
	ctx, t.cancel = context.WithCancel(ctx)
	var js jetstream.JetStream
	if t.nc, js, err = connect(ctx, t.cfg.natsURL, "all", t.cfg.layout); err != nil {
		return nil, err
	}
	t.tps = map[string]*sdktrace.TracerProvider{}
	for _, role := range []string{"gateway", "router", "worker", "downstream"} {
		// The names runRole gives the roles run as processes (and the
		// downstream gRPC service's, which runs in this process).
		if t.tps[role], err = demotrace.NewProvider(ctx, "gateway-"+role, t.traces); err != nil {
			return nil, err
		}
	}
	t.p = newPlatforms()
	if t.cfg.platformURL, t.cfg.downstreamURL, err = services(svcCtx, "127.0.0.1:0", t.p, t.cfg.trust, &t.downOut); err != nil {
		return nil, err
	}
	if t.cfg.downstream == downstreamGRPC {
		if t.cfg.downstreamURL, t.grpcDown, err = serveGRPCDownstream(svcCtx, "127.0.0.1:0", t.cfg.trust, t.tps["downstream"], &t.downOut); err != nil {
			return nil, err
		}
	}
	t.done = make(chan error, 2+t.cfg.workers)
	if t.cfg.fault == faultGateway {
		t.ingress = &roleProc{role: "gateway", cfg: t.cfg}
		if t.cfg.ingressURL, err = t.ingress.start(); err != nil {
			return nil, err
		}
	} else if t.cfg.ingressURL, err = startRole(ctx, t.cfg, "gateway", t.nc, js, t.tps["gateway"], t.done); err != nil {
		return nil, err
	}
	if t.cfg.fault == faultRouter {
		t.router = &roleProc{role: "router", cfg: t.cfg}
		if _, err := t.router.start(); err != nil {
			return nil, err
		}
	} else {
		if _, err := startRole(ctx, t.cfg, "router", t.nc, js, t.tps["router"], t.done); err != nil {
			return nil, err
		}
		t.running++
	}
	if t.cfg.chaos {
		t.procs = &workerProcs{cfg: t.cfg}
		if err := t.procs.start(t.cfg.workers); err != nil {
			return nil, err
		}
		go t.procs.chaos(ctx)
		return t, nil
	}
	for range t.cfg.workers {
		if _, err := startRole(ctx, t.cfg, "worker", t.nc, js, t.tps["worker"], t.done); err != nil {
			return nil, err
		}
		t.running++
	}
	return t, nil
}

// drive sends one load through the topology, and injects its fault.
func (t *topology) drive(ctx context.Context, seed uint64, progress io.Writer) (summary, error) {
	c := t.cfg
	var posted atomic.Int64
	clock := &faultClock{}
	fctx, stopFault := context.WithCancel(ctx)
	injected := make(chan struct{})
	go func() { defer close(injected); t.inject(fctx, &posted, clock) }()
	// Silence means loss after 15 s, or 60 s across a fault: losing a NATS
	// node costs leader elections (nats-server waits 4 to 9 s for a lost
	// leader, and a starved machine may need several rounds) and the
	// retries that follow them. --timeout still bounds the run.
	idle := 15 * time.Second
	if c.fault != "" {
		idle = 60 * time.Second
	}
	s, err := drive(ctx, driverConfig{ingressURL: c.ingressURL, messages: c.messages, conversations: c.conversations,
		inFlight: 64, timeout: c.timeout, idle: idle, progress: progress, seed: seed, rate: c.rate,
		posted: &posted, faults: clock, auth: c.auth}, t.nc, t.p)
	stopFault()
	<-injected
	s.Store = c.store
	return s, err
}

// The failures --fault injects, a third of the way through the run.
const (
	faultNATSKill    = "nats-kill"         // SIGKILL a NATS node, not restarted
	faultNATSRestart = "nats-restart"      // SIGKILL a NATS node, restarted 5 s later
	faultNATSPosting = "nats-kill-posting" // SIGKILL a NATS node while the load is still being posted
	faultRouter      = "router-kill"       // SIGKILL the router process, and start another
	faultGateway     = "gateway-kill"      // SIGKILL the gateway (the ingress) while the load is posted, and start another on its address
	faultDownstream  = "downstream-down"   // the downstream service refuses every call for outageFor (503, gRPC Unavailable)
	faultPlatforms   = "platform-down"     // the chat platforms refuse every post for outageFor (503)
)

var faultNames = []string{faultNATSKill, faultNATSRestart, faultNATSPosting, faultRouter, faultGateway, faultDownstream, faultPlatforms}

// outageFor is how long a downstream-down or platform-down outage lasts:
// long enough for every job or delivery in flight to fail several times.
const outageFor = 10 * time.Second

// inject waits for a third of the messages to be delivered (or, for
// nats-kill-posting and gateway-kill, posted), then injects the fault and
// records when.
func (t *topology) inject(ctx context.Context, posted *atomic.Int64, clock *faultClock) {
	if t.cfg.fault == "" {
		return
	}
	at := int64(t.cfg.messages / 3)
	for ctx.Err() == nil {
		var n int64
		if t.cfg.fault == faultNATSPosting || t.cfg.fault == faultGateway {
			n = posted.Load()
		} else {
			t.p.mu.Lock()
			n = int64(len(t.p.deliveries))
			t.p.mu.Unlock()
		}
		if n >= at {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if ctx.Err() != nil {
		return
	}
	switch t.cfg.fault {
	case faultRouter:
		if err := t.router.kill(); err != nil {
			fmt.Fprintln(os.Stderr, "fault:", err)
			return
		}
		clock.set("router SIGKILLed, restarted")
		if _, err := t.router.start(); err != nil {
			fmt.Fprintln(os.Stderr, "fault:", err)
		}
	case faultDownstream, faultPlatforms:
		o, who := &t.downOut, "downstream service"
		if t.cfg.fault == faultPlatforms {
			o, who = &t.p.out, "chat platforms"
		}
		o.begin(outageFor)
		clock.set(fmt.Sprintf("%s refusing every call for %v", who, outageFor))
		// The outage ends by itself; the count of what it refused is added
		// when it has (no run ends before: its work waits for the service),
		// or at once on a Ctrl-C.
		select {
		case <-time.After(outageFor):
		case <-ctx.Done():
		}
		clock.then(fmt.Sprintf(" (%d refused)", o.refused.Load()))
	case faultGateway:
		// The driver's posts fail until another gateway listens on the
		// address: it tries them again, and a message the killed gateway
		// had already queued is queued once (its Nats-Msg-Id).
		if err := t.ingress.kill(); err != nil {
			fmt.Fprintln(os.Stderr, "fault:", err)
			return
		}
		clock.set("gateway (the ingress) SIGKILLed while posting")
		_, err := t.ingress.start()
		if err != nil {
			fmt.Fprintln(os.Stderr, "fault:", err)
			return
		}
		_, at := clock.get()
		clock.then(fmt.Sprintf(" (another listening on its address %.0f ms later)", float64(time.Since(at).Microseconds())/1000))
	default:
		// The node to lose is the leader of the jobs stream, which every
		// message passes through: the worst case, a leader election.
		i := 0
		if js, err := jetstream.New(t.nc); err == nil {
			if s, err := js.Stream(ctx, jobsStream); err == nil && s.CachedInfo().Cluster != nil {
				i = max(0, t.cluster.index(s.CachedInfo().Cluster.Leader))
			}
		}
		if err := t.cluster.kill(i); err != nil {
			fmt.Fprintln(os.Stderr, "fault:", err)
			return
		}
		what := fmt.Sprintf("NATS node %s (leader of %s) SIGKILLed", t.cluster.nodes[i].name, jobsStream)
		if t.cfg.fault == faultNATSPosting {
			what += " while posting"
		}
		if t.cfg.fault != faultNATSRestart {
			clock.set(what)
			return
		}
		clock.set(what + ", restarted 5 s later")
		time.Sleep(5 * time.Second) // even if the run has ended: the restart is part of the fault
		if err := t.cluster.start(i); err != nil {
			fmt.Fprintln(os.Stderr, "fault: restart:", err)
		}
	}
}

// stop ends the roles first, waiting for their work in flight, then the
// services they call, then NATS.
func (t *topology) stop() {
	if t.ingress != nil {
		t.ingress.stop()
	}
	if t.procs != nil {
		t.procs.stop()
	}
	if t.router != nil {
		t.router.stop()
	}
	if t.cancel != nil {
		t.cancel()
	}
	for ; t.running > 0; t.running-- {
		<-t.done
	}
	if t.svcStop != nil {
		t.svcStop()
	}
	for _, tp := range t.tps {
		_ = tp.Shutdown(context.Background())
	}
	if t.nc != nil {
		t.nc.Close()
	}
	t.shutdown()
}

// runAll runs every role and one load, and prints the summary.
func runAll(ctx context.Context, c config) error {
	t, err := startTopology(ctx, c)
	if err != nil {
		return err
	}
	// Progress goes to standard error with --json too: standard output
	// holds the summary alone.
	load := fmt.Sprintf("%d messages", c.messages)
	if c.rate > 0 {
		load = fmt.Sprintf("%d messages (%g a second for %v, open loop)", c.messages, c.rate, c.duration)
	}
	fmt.Fprintf(os.Stderr, "gateway: %s over %d conversations, sessions in %s, NATS at %s\n",
		load, c.conversations, c.store, t.cfg.natsURL)
	s, err := t.drive(ctx, c.seed, os.Stderr)
	kills := 0
	if t.procs != nil {
		t.procs.stop()
		kills = t.procs.kills
	}
	if c.chaos {
		s.WorkersKilled = kills
	}
	t.stop()
	if err != nil {
		return err
	}
	if c.chaos && !c.asJSON {
		fmt.Fprintf(os.Stderr, "chaos: %d worker processes killed with SIGKILL and restarted during the run\n", kills)
	}
	if bc := otelsession.BindCache(); !c.asJSON && bc.Hits+bc.Misses > 0 {
		// Every role of this process binds through one cache: the ingress
		// per message, the workers and the router per job and delivery.
		fmt.Fprintf(os.Stderr, "bind cache (this process): %d of %d binds served from it (%.0f%%), %d sessions held (capacity %d)\n",
			bc.Hits, bc.Hits+bc.Misses, 100*float64(bc.Hits)/float64(bc.Hits+bc.Misses), bc.Entries, bc.Capacity)
	}
	if accepted, cached := workerInboundCounts(); !c.asJSON && accepted > 0 {
		fmt.Fprintf(os.Stderr, "inbound cache (this process's workers): %d of %d signed job sessions accepted served from it (%.0f%%)\n",
			cached, accepted, 100*float64(cached)/float64(accepted))
	}
	if !c.asJSON && os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
		defer fmt.Printf("\nspans by service / name (OTEL_EXPORTER_OTLP_ENDPOINT sends them to a collector instead):\n%s\n", t.traces)
	}
	return printSummary(c, s)
}

// runLoad is the load role on its own: it hosts the platforms and the
// downstream service and drives the load against --ingress-url.
func runLoad(ctx context.Context, c config) error {
	nc, _, err := connect(ctx, c.natsURL, "load", c.layout)
	if err != nil {
		return err
	}
	defer nc.Close()
	p := newPlatforms()
	down := &outage{} // a fault of role all only
	platformURL, downstreamURL, err := services(ctx, c.listen, p, c.trust, down)
	if err != nil {
		return err
	}
	if c.downstream == downstreamGRPC {
		if downstreamURL, _, err = serveGRPCDownstream(ctx, grpcListenAddr(c.listen, c.grpcListen), c.trust, otel.GetTracerProvider(), down); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "load: platforms at %s, downstream at %s\n", platformURL, downstreamURL)
	if err := waitReady(ctx, c.ingressURL+"/healthz", 30*time.Second); err != nil {
		return err
	}
	s, err := drive(ctx, driverConfig{ingressURL: c.ingressURL, messages: c.messages, conversations: c.conversations,
		inFlight: 64, timeout: c.timeout, idle: 15 * time.Second, progress: os.Stderr, seed: c.seed, rate: c.rate, auth: c.auth}, nc, p)
	if err != nil {
		return err
	}
	if s.Interrupted {
		fmt.Fprintln(os.Stderr, "load: interrupted; what happened until then:")
	}
	s.Store = c.store
	return printSummary(c, s)
}

func waitReady(ctx context.Context, url string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within %v: %w", url, within, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped while waiting for %s to answer: %w", url, errInterrupted)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// workerProcs runs workers as child processes of this one, so that they can
// be killed like a crashing host.
type workerProcs struct {
	cfg   config
	mu    sync.Mutex
	procs []*exec.Cmd
	kills int
}

func (w *workerProcs) args() []string {
	c := w.cfg
	args := []string{"--role", "worker", "--nats-url", c.natsURL, "--downstream-url", c.downstreamURL,
		"--session-store", c.store, "--concurrency", fmt.Sprint(c.concurrency), "--think", c.think.String(),
		"--ack-wait", c.ackWait.String(), "--replicas", fmt.Sprint(c.layout.replicas)}
	return append(args, keyArgs(c)...)
}

// keyArgs are the key ids of c for a role process this run starts: the
// secrets reach it in its environment, the ids on its command line.
func keyArgs(c config) []string {
	args := []string{"--signing-key-id", c.key.ID}
	if len(c.previous) > 0 {
		args = append(args, "--previous-signing-key-id", c.previous[0].ID)
	}
	return args
}

// spawn starts one worker process and waits until it says it is ready.
func (w *workerProcs) spawn() (*exec.Cmd, error) {
	cmd, _, err := spawnReady("worker", w.args()...)
	return cmd, err
}

func (w *workerProcs) start(n int) error {
	for range n {
		cmd, err := w.spawn()
		if err != nil {
			return err
		}
		w.mu.Lock()
		w.procs = append(w.procs, cmd)
		w.mu.Unlock()
	}
	return nil
}

// chaos kills a random worker with SIGKILL about every second, and starts a
// new one in its place, until ctx ends.
func (w *workerProcs) chaos(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(700*time.Millisecond + rand.N(600*time.Millisecond)):
		}
		w.mu.Lock()
		if len(w.procs) == 0 {
			w.mu.Unlock()
			return
		}
		i := rand.IntN(len(w.procs))
		victim := w.procs[i]
		_ = victim.Process.Kill()
		_ = victim.Wait()
		w.kills++
		cmd, err := w.spawn()
		if err != nil {
			if ctx.Err() != nil { // the run is being stopped: no replacement is wanted
				w.procs = append(w.procs[:i], w.procs[i+1:]...)
				w.mu.Unlock()
				return
			}
			fmt.Fprintln(os.Stderr, "chaos:", err)
			w.procs = append(w.procs[:i], w.procs[i+1:]...)
		} else {
			w.procs[i] = cmd
		}
		w.mu.Unlock()
	}
}

// stop ends every worker process: SIGTERM, then SIGKILL after 5 s.
func (w *workerProcs) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, cmd := range w.procs {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, cmd := range w.procs {
		t := time.AfterFunc(5*time.Second, func() { _ = cmd.Process.Kill() })
		_ = cmd.Wait()
		t.Stop()
	}
	w.procs = nil
}

// roleProc is one role (the router, or the gateway's ingress) in a child
// process, to be killed like a crash and started again.
type roleProc struct {
	role string // "router" or "gateway"
	cfg  config
	mu   sync.Mutex
	cmd  *exec.Cmd
	// listen is where the gateway listens: a free port at first, then the
	// port it got, so that one started after a kill takes the same address.
	listen string
}

func (r *roleProc) args() []string {
	c := r.cfg
	args := []string{"--role", r.role, "--nats-url", c.natsURL, "--session-store", c.store,
		"--replicas", fmt.Sprint(c.layout.replicas)}
	args = append(args, keyArgs(c)...)
	if r.role == "gateway" {
		return append(args, "--listen", r.listen)
	}
	return append(args, "--platform-url", c.platformURL, "--concurrency", fmt.Sprint(c.concurrency),
		"--ack-wait", c.ackWait.String())
}

// start starts the role's process and returns, once it is ready, the URL it
// serves (the gateway's ingress; "" for the router).
func (r *roleProc) start() (string, error) {
	if r.role == "gateway" && r.listen == "" {
		r.listen = "127.0.0.1:0"
	}
	cmd, url, err := spawnReady(r.role, r.args()...)
	if err != nil {
		return "", err
	}
	if r.role == "gateway" {
		u, err := neturl.Parse(url)
		if err != nil || u.Host == "" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return "", fmt.Errorf("the gateway process said it serves %q, not a URL: %v", url, err)
		}
		r.listen = u.Host
	}
	r.mu.Lock()
	r.cmd = cmd
	r.mu.Unlock()
	return url, nil
}

// kill ends the process with SIGKILL: whatever it was doing is left undone,
// its requests unanswered, its deliveries neither recorded nor acknowledged.
func (r *roleProc) kill() error {
	r.mu.Lock()
	cmd := r.cmd
	r.cmd = nil
	r.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("the %s process is not running", r.role)
	}
	if err := cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill the %s: %w", r.role, err)
	}
	_ = cmd.Wait()
	return nil
}

// stop ends the process: SIGTERM, then SIGKILL after 5 s.
func (r *roleProc) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	t := time.AfterFunc(5*time.Second, func() { _ = r.cmd.Process.Kill() })
	_ = r.cmd.Wait()
	t.Stop()
	r.cmd = nil
}
