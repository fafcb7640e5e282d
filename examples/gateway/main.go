// Command gateway runs a whole distributed chat gateway on one machine and
// proves that every notification goes home.
//
// An HTTP ingress takes chat messages for several platforms (Telegram forum
// topics with a reply anchor, Discord threads under a parent channel in a
// guild, Slack threads in a workspace, and a stateless API), binds each
// message's session and queues it on NATS JetStream. Workers consume the
// jobs: each runs a tool as a child process and calls a downstream HTTP
// service, both of which read the session, and some start background work
// whose completion arrives after the turn has ended. A router delivers every
// reply and completion to its originating platform, chat, thread and message
// anchor; the platforms are small HTTP servers that record what they receive.
// A load driver sends many interleaved conversations and prints what was
// sent, delivered, misrouted, refused and lost.
//
//	go run ./examples/gateway                          # everything, on an embedded NATS server
//	go run ./examples/gateway --session-store=env      # the same load with the original bug
//	go run ./examples/gateway --chaos                  # workers as processes, killed and restarted
//	go run ./examples/gateway --nats-cluster 3 --fault nats-kill   # a NATS node lost mid-run
//	go run ./examples/gateway --downstream=grpc        # workers call the downstream service over gRPC
//	go run ./examples/gateway --json                   # the summary for scripts
//
// The same roles run as separate processes, on separate machines, against a
// NATS cluster (--role gateway|worker|router|load, --nats-url); see the
// README. Exit status 1 means something was misrouted, lost, shown twice or
// never posted; 130, that the run was interrupted (its summary is printed).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sessionwire/sessionwire/examples/internal/demotrace"
	sessionprop "github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/natssession"
)

type config struct {
	auth          webhookAuth // the platforms' secrets, from the environment
	role          string
	natsURL       string
	store         string
	listen        string
	grpcListen    string // role load with --downstream=grpc: the gRPC downstream's address
	ingressURL    string
	platformURL   string
	downstreamURL string
	downstream    string // how workers reach the downstream service: downstreamHTTP or downstreamGRPC
	messages      int
	conversations int
	workers       int // worker processes (--chaos) or in-process workers
	concurrency   int // jobs at once per worker
	think         time.Duration
	ackWait       time.Duration
	timeout       time.Duration
	chaos         bool
	fault         string // a failure injected mid-run (role all): see faultNames
	natsNodes     int    // 0: embedded server; 3 or more: a local cluster of NATS server processes
	layout        layout
	node          nodeConfig // role nats-node
	asJSON        bool
	seed          uint64
	rate          float64               // open loop: messages per second (0: one burst)
	duration      time.Duration         // open loop: how long to post at rate
	trust         sessionprop.TrustFunc // peers the downstream service accepts sessions from
	key           sessionprop.Key       // the gateway signs with it, workers verify with it
	previous      []sessionprop.Key     // verified beside key, during a rotation (SESSIONWIRE_PREVIOUS_SIGNING_KEY)
	previousKeyID string                // --previous-signing-key-id, checked by finish
	routerLog     io.Writer             // where an in-process router logs; nil: standard error (a test's)
	ackPending    int                   // the router's consumers' maxAckPending; 0: maxAckPending (a test's)
}

// demoKey signs sessions when SESSIONWIRE_SIGNING_KEY is not set. It is in
// this source file, so it protects nothing: set a random secret of at least
// 32 bytes, the same for every process of a deployment.
const demoKey = "sessionwire demo key: not a secret, set SESSIONWIRE_SIGNING_KEY"

// childEnv is set (to 1) in the environment of the role processes a
// one-process run starts itself (--chaos, --fault router-kill, the NATS
// nodes): they belong to the demo, which says nothing of its key, while a
// role started by an operator warns about it (warnDemoKey).
const childEnv = "SESSIONWIRE_GATEWAY_CHILD"

// warnDemoKey prints one line on standard error when a role that signs or
// verifies sessions runs with demoKey: a deployment whose key anyone can
// read accepts anyone's jobs and replies.
func warnDemoKey(c config) {
	if string(c.key.Secret) != demoKey || os.Getenv(childEnv) == "1" {
		return
	}
	fmt.Fprintf(os.Stderr, "%s: warning: SESSIONWIRE_SIGNING_KEY is not set: sessions are signed and verified with the demo key "+
		"written in the gateway's source, so anyone can forge jobs and replies. Set it to the same random secret of at least "+
		"32 bytes for every role (such as export SESSIONWIRE_SIGNING_KEY=$(openssl rand -base64 32))\n", c.role)
}

// warnUncheckedPosts prints one line on standard error when the gateway
// role takes posts it cannot tell from a forger's: anyone who can reach it
// could post as any chat, and the gateway would answer there.
func warnUncheckedPosts(c config) {
	if c.role != "gateway" || os.Getenv(childEnv) == "1" {
		return
	}
	if m := c.auth.missing(); len(m) > 0 {
		fmt.Fprintf(os.Stderr, "gateway: warning: posts are not checked for %s: anyone who can reach the ingress can post "+
			"as any chat there. Set the platform's secret in each (see the README, \"Posting to the ingress yourself\")\n",
			strings.Join(m, ", "))
	}
}

func main() {
	err := run(os.Args[1:])
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		fmt.Print(helpText())
	case errors.Is(err, errInterrupted):
		if err != errInterrupted { // not after a summary, which says so: what was interrupted
			fmt.Fprintln(os.Stderr, "gateway:", err)
		}
		os.Exit(130) // as a shell reports a command ended by Ctrl-C
	case errors.Is(err, errFailed):
		os.Exit(1)
	case errors.As(err, new(usageError)):
		fmt.Fprintf(os.Stderr, "gateway: %v\nRun 'gateway --help' for every flag, with an example of each.\n", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

// errFailed: the run completed, but something was misrouted, lost or
// duplicated (the summary says what).
var errFailed = fmt.Errorf("the run misrouted, lost or duplicated deliveries")

// errInterrupted: the run was stopped by SIGINT or SIGTERM; the summary of
// what happened until then was printed.
var errInterrupted = fmt.Errorf("interrupted")

// usageError is a command line that makes no sense: exit status 2, and
// nothing was started.
type usageError struct{ error }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

func parseFlags(args []string) (config, error) {
	var c config
	fs, keyID, trust := newFlagSet(&c)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
			return c, usagef("unknown flag --%s", name)
		}
		// The flag package names a flag with one dash; the gateway's help,
		// errors and README use two.
		msg := strings.Replace(err.Error(), " for flag -", " for flag --", 1)
		msg = strings.Replace(msg, "flag needs an argument: -", "flag needs an argument: --", 1)
		return c, usageError{errors.New(msg)}
	}
	if fs.NArg() > 0 {
		return c, usagef("unexpected argument %q: the gateway takes flags only (such as --messages 600)", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return c, c.finish(set, *keyID, *trust)
}

// newFlagSet declares every flag into c; the help text (cli.go) adds an
// example to each.
func newFlagSet(c *config) (fs *flag.FlagSet, keyID, trust *string) {
	fs = flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and --help are printed by main, once
	fs.StringVar(&c.role, "role", "all", "what this process runs: all, gateway (the ingress: POST /v1/{telegram,discord,slack,api}/messages, see the README), worker, router, load (tool and nats-node are internal)")
	fs.StringVar(&c.natsURL, "nats-url", "", "NATS server or cluster URL; empty starts an embedded server (role all only)")
	fs.StringVar(&c.store, "session-store", storeBaggage, "where workers keep a job's session: baggage (sessionwire), env (the original bug) or off (no session: routing from the job body)")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:0", "address of this role's HTTP server (gateway: ingress; load: platforms and downstream)")
	fs.StringVar(&c.grpcListen, "grpc-listen", "", "address of the gRPC downstream service (role load with --downstream=grpc; default: the host of --listen, a free port)")
	fs.StringVar(&c.ingressURL, "ingress-url", "", "the gateway's URL (role load)")
	fs.StringVar(&c.platformURL, "platform-url", "", "the chat platforms' base URL (role router)")
	fs.StringVar(&c.downstreamURL, "downstream-url", "", "the downstream service's URL, http://… or grpc://host:port (role worker)")
	fs.StringVar(&c.downstream, "downstream", downstreamHTTP, "how workers call the downstream service: http or grpc (roles all and load; a worker follows its --downstream-url)")
	fs.IntVar(&c.messages, "messages", 3000, "messages the load driver sends")
	fs.IntVar(&c.conversations, "conversations", 400, "chats and threads the messages are spread over")
	fs.IntVar(&c.workers, "workers", 2, "worker processes with --chaos, in-process workers otherwise")
	fs.IntVar(&c.concurrency, "concurrency", 16, "jobs each worker handles at once")
	fs.DurationVar(&c.think, "think", 20*time.Millisecond, "longest simulated agent work per job")
	fs.DurationVar(&c.ackWait, "ack-wait", 3*time.Second, "JetStream redelivers a job not acknowledged within this")
	fs.DurationVar(&c.timeout, "timeout", 90*time.Second, "how long the driver waits for every delivery; it stops sooner once deliveries stop arriving (with --chaos or --fault the default is 5m)")
	fs.BoolVar(&c.chaos, "chaos", false, "run workers as processes and kill and restart them during the run")
	fs.StringVar(&c.fault, "fault", "", "inject one failure mid-run: "+strings.Join(faultNames, ", ")+" (the nats- faults need --nats-cluster)")
	fs.IntVar(&c.natsNodes, "nats-cluster", 0, "start a local NATS cluster of this many server processes (at least 3) instead of the embedded server")
	fs.IntVar(&c.layout.replicas, "replicas", 0, "copies of every stream and the bucket; 0: 3 on a cluster of at least three servers, else 1")
	fs.BoolVar(&c.layout.update, "update-replicas", false, "raise the replicas of existing streams that have fewer than --replicas")
	fs.DurationVar(&c.layout.maxWait, "max-wait", defaultMaxWait, "how long a message may wait in a queue (behind a platform, a service or a router that is down) and still be taken; every role of a deployment must agree")
	fs.StringVar(&c.node.name, "node-name", "", "role nats-node: this server's name in the cluster")
	fs.IntVar(&c.node.port, "node-port", 0, "role nats-node: client port on 127.0.0.1")
	fs.IntVar(&c.node.clusterPort, "node-cluster-port", 0, "role nats-node: cluster port on 127.0.0.1")
	fs.StringVar(&c.node.routes, "node-routes", "", "role nats-node: comma-separated nats-route:// URLs of every node")
	fs.StringVar(&c.node.storeDir, "node-store", "", "role nats-node: the JetStream store directory")
	fs.BoolVar(&c.asJSON, "json", false, "print the summary as JSON")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the load plan: the conversations, and which message goes to which (message IDs are new in every run)")
	fs.Float64Var(&c.rate, "rate", 0, "open loop: post this many messages per second, on schedule whatever the replies do, for --duration (0: one burst of --messages)")
	fs.DurationVar(&c.duration, "duration", 0, "open loop: how long to post at --rate (default 30s with --rate)")
	keyID = fs.String("signing-key-id", "demo", "id of the signing key (the secret comes from SESSIONWIRE_SIGNING_KEY)")
	fs.StringVar(&c.previousKeyID, "previous-signing-key-id", "", "during a key rotation: id of the key the roles signed with until now, still verified, never signed with (its secret comes from SESSIONWIRE_PREVIOUS_SIGNING_KEY; see the README)")
	trust = fs.String("trust", "loopback", "peers the downstream service (role load) accepts a session from: loopback, or comma-separated CIDRs such as 10.1.0.0/16")
	return fs, keyID, trust
}

func run(args []string) error {
	c, err := parseFlags(args)
	if err != nil {
		return err
	}
	otel.SetTextMapPropagator(propagatorFor(c.store))
	if c.role == "tool" {
		os.Exit(runTool())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch c.role {
	case "all":
		return runAll(ctx, c)
	case "nats-node":
		return runNATSNode(ctx, c.node)
	case "gateway", "worker", "router":
		warnDemoKey(c)
		warnUncheckedPosts(c)
		return runRole(ctx, c)
	case "load":
		return runLoad(ctx, c)
	}
	return fmt.Errorf("unknown --role %q (want all, gateway, worker, router or load)", c.role)
}

// propagatorFor is the propagator of a session store: only sessionwire's
// sends baggage; the others carry trace context alone.
func propagatorFor(store string) propagation.TextMapPropagator {
	if store == storeBaggage {
		return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	return propagation.TraceContext{}
}

// connectPatience is how long a role waits for a NATS server to answer at
// start-up.
const connectPatience = 30 * time.Second

// connect opens NATS and JetStream and makes sure the streams exist.
func connect(ctx context.Context, url, name string, l layout) (*nats.Conn, jetstream.JetStream, error) {
	// A lost server closes its connections at once: try the others without
	// the default 2 s pause, and forever.
	errs := &onceLog{who: name + ": nats"}
	opts := []nats.Option{nats.Name("sessionwire-gateway-" + name), nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		// The library prints every failed write to a lost server; once per kind is enough.
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs.print(err) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: closed on purpose
				fmt.Fprintf(os.Stderr, "%s: lost the connection to NATS (%v); reconnecting\n", name, err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			fmt.Fprintf(os.Stderr, "%s: reconnected to NATS at %s\n", name, nc.ConnectedUrlRedacted())
		})}
	// Roles may start before NATS does (a fleet started at once): wait a
	// while for it, and say so, before giving up.
	var nc *nats.Conn
	var err error
	for deadline, told := time.Now().Add(connectPatience), false; ; {
		if nc, err = nats.Connect(url, opts...); !errors.Is(err, nats.ErrNoServers) || time.Now().After(deadline) {
			break
		}
		if !told {
			fmt.Fprintf(os.Stderr, "%s: no NATS server answers at %s yet; trying again for %v\n", name, url, connectPatience)
			told = true
		}
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("connect to NATS at %s: %w", url, errInterrupted)
		case <-time.After(time.Second):
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("open JetStream: %w", err)
	}
	if err := ensureJetStream(ctx, nc, js, l); err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// serve starts an HTTP server on addr and returns its URL.
func serve(ctx context.Context, addr string, h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return "http://" + ln.Addr().String(), nil
}

// hop returns what every hop of the gateway signs with and verifies with:
// every message between the roles carries a session signed for its message
// id, and the session goes to the gateway's own subjects only. It signs with
// key alone, and verifies with key and the previous keys (a rotation's).
//
// The verifier takes a queued message's signature up to maxWait old
// (layout.wait): it was signed when the message was queued, and the
// message may wait that long behind a platform, a service or a router that
// is down.
func hop(key sessionprop.Key, maxWait time.Duration, previous ...sessionprop.Key) (*sessionprop.Outbound, *sessionprop.Verifier, error) {
	signer, err := sessionprop.NewSigner(key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing key: %w", err)
	}
	verifier, err := sessionprop.NewVerifier(append([]sessionprop.Key{key}, previous...), sessionprop.WithMaxAge(maxWait))
	if err != nil {
		return nil, nil, fmt.Errorf("signing key: %w", err)
	}
	out := sessionprop.NewOutbound(sessionprop.AllowNames(sessionprop.TransportNATS, "gw.>"), sessionprop.WithSigner(signer))
	return out, verifier, nil
}

// startRole starts one of gateway, worker or router in this process, on an
// open connection; it returns when the role is ready (its run continues until
// ctx ends) and the URL it serves, if any.
func startRole(ctx context.Context, c config, role string, nc *nats.Conn, js jetstream.JetStream, tp *sdktrace.TracerProvider, done chan<- error) (string, error) {
	switch role {
	case "gateway":
		// The gateway signs every session it binds, for the job's message id:
		// workers trust no publisher, only the signature.
		out, _, err := hop(c.key, c.layout.wait())
		if err != nil {
			return "", fmt.Errorf("gateway: %w", err)
		}
		pub := natssession.NewPublisher(natssession.WithTracerProvider(tp), natssession.WithPropagator(propagatorFor(c.store)),
			natssession.WithOutbound(out))
		return serve(ctx, c.listen, ingress(tp.Tracer("gateway/ingress"), pub, js, c.auth))
	case "worker":
		out, verifier, err := hop(c.key, c.layout.wait(), c.previous...)
		if err != nil {
			return "", fmt.Errorf("worker: %w", err)
		}
		w, err := newWorker(workerConfig{store: c.store, concurrency: c.concurrency, downstreamURL: c.downstreamURL,
			think: c.think, ackWait: c.ackWait, verifier: verifier, out: out}, js, tp)
		if err != nil {
			return "", err
		}
		return "", started(done, func(ready func()) error { return w.run(ctx, ready) })
	case "router":
		_, verifier, err := hop(c.key, c.layout.wait(), c.previous...)
		if err != nil {
			return "", fmt.Errorf("router: %w", err)
		}
		rt := newRouter(c.store, verifier, js, nc, c.platformURL, tp)
		rt.errs.out, rt.refusals.out, rt.ackPending = c.routerLog, c.routerLog, c.ackPending
		return "", started(done, func(ready func()) error { return rt.run(ctx, c.ackWait, 4*c.concurrency, ready) })
	}
	return "", fmt.Errorf("unknown role %q", role)
}

// started runs a consuming role in its own goroutine and returns once it is
// consuming, or with the error that kept it from starting: a role is never
// reported ready, nor left to fail in silence, before it pulls messages.
// Its result after that goes to done.
func started(done chan<- error, run func(ready func()) error) error {
	ready, result := make(chan struct{}), make(chan error, 1)
	go func() { result <- run(func() { close(ready) }) }()
	select {
	case <-ready:
		go func() { done <- <-result }()
		return nil
	case err := <-result:
		if err == nil {
			err = errors.New("stopped before it was ready")
		}
		return err
	}
}

// runRole runs one role as its own process until interrupted.
func runRole(ctx context.Context, c config) error {
	nc, js, err := connect(ctx, c.natsURL, c.role, c.layout)
	if err != nil {
		return err
	}
	defer nc.Close()
	sum := &demotrace.Summary{}
	tp, err := demotrace.NewProvider(ctx, "gateway-"+c.role, sum)
	if err != nil {
		return err
	}
	defer func() { _ = tp.Shutdown(context.Background()) }()
	done := make(chan error, 1)
	url, err := startRole(ctx, c, c.role, nc, js, tp, done)
	if err != nil {
		return err
	}
	// The first line says the role is ready (and where), for whoever started it.
	fmt.Println(strings.TrimSpace("ready " + c.role + " " + url))
	select {
	case <-ctx.Done():
		if c.role != "gateway" {
			// Let the work in flight finish (acknowledged, recorded) before the
			// connection closes: a router stopped mid-delivery would otherwise
			// leave it unrecorded, and its successor would deliver it again.
			return <-done
		}
		return nil
	case err := <-done:
		return err
	}
}

func printSummary(c config, s summary) error {
	if c.asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(s); err != nil {
			return fmt.Errorf("write the summary: %w", err)
		}
	} else {
		fmt.Print(s)
	}
	switch {
	case s.Interrupted:
		return errInterrupted
	case !s.ok():
		return errFailed
	}
	return nil
}
