package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sessionwire/sessionwire/examples/internal/demotrace"
	"github.com/sessionwire/sessionwire/examples/internal/threadrpc"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/execsession"
	"github.com/sessionwire/sessionwire/propagation/grpcsession"
	"github.com/sessionwire/sessionwire/propagation/httpsession"
	"github.com/sessionwire/sessionwire/propagation/natssession"
)

// chatMessage is what a chat platform posts to the gateway's ingress.
type chatMessage struct {
	Platform     string `json:"platform"`
	ChatID       string `json:"chat_id"`
	ThreadID     string `json:"thread_id"`
	ParentChatID string `json:"parent_chat_id,omitempty"`
	ScopeID      string `json:"scope_id,omitempty"`
	UserID       string `json:"user_id"`
	UserName     string `json:"user_name"`
	MessageID    string `json:"message_id"`
	Text         string `json:"text"`
}

// delivery is what the stand-in chat platform received.
type delivery struct {
	Kind     string `json:"kind"` // "reply" or "completion"
	ChatID   string `json:"chat_id"`
	ThreadID string `json:"thread_id"`
	AnchorID string `json:"anchor_id"`
	Text     string `json:"text"`
}

// notifyRequest is what the worker sends the router.
type notifyRequest struct {
	Kind   string             `json:"kind"`
	Origin otelsession.Origin `json:"origin"`
	Text   string             `json:"text"`
}

// flow is every role of a small distributed gateway, in one process (the tool
// runs as a child process).
type flow struct {
	ns        *server.Server
	nc        *nats.Conn
	providers []*sdktrace.TracerProvider
	servers   []*http.Server
	grpcSrv   *grpc.Server     // the downstream service over gRPC
	grpcConn  *grpc.ClientConn // the worker's connection to it

	ingressURL, downstreamURL, routerURL, platformURL string

	mu         sync.Mutex
	deliveries []delivery
	arrived    chan struct{}
	toolSeen   map[string]string // message id -> thread id the tool read
	downSeen   map[string]string // message id -> thread id downstream read
	grpcSeen   map[string]string // message id -> thread id the gRPC downstream read
	background sync.WaitGroup
}

const stream = "JOBS"

func startFlow(ctx context.Context, storeDir string, sum *demotrace.Summary) (_ *flow, err error) {
	f := &flow{arrived: make(chan struct{}, 1024), toolSeen: map[string]string{}, downSeen: map[string]string{},
		grpcSeen: map[string]string{}}
	defer func() {
		if err != nil {
			f.stop(context.Background())
		}
	}()
	tp := map[string]*sdktrace.TracerProvider{}
	for _, role := range []string{"gateway", "worker", "downstream", "downstream-grpc", "router"} {
		p, err := demotrace.NewProvider(ctx, "tracedflow-"+role, sum)
		if err != nil {
			return nil, err
		}
		tp[role] = p
		f.providers = append(f.providers, p)
	}

	// The queue: an embedded NATS server with JetStream, on loopback.
	f.ns, err = server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: storeDir, NoSigs: true, NoLog: true})
	if err != nil {
		return nil, fmt.Errorf("start the embedded NATS server: %w", err)
	}
	f.ns.Start()
	if !f.ns.ReadyForConnections(10 * time.Second) {
		return nil, errors.New("the embedded NATS server did not become ready within 10s")
	}
	if f.nc, err = nats.Connect(f.ns.ClientURL()); err != nil {
		return nil, fmt.Errorf("connect to NATS: %w", err)
	}
	js, err := jetstream.New(f.nc)
	if err != nil {
		return nil, fmt.Errorf("open JetStream: %w", err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"jobs.>"}, Storage: jetstream.FileStorage}); err != nil {
		return nil, fmt.Errorf("create stream %s: %w", stream, err)
	}

	// The chat platform stand-in records what it is sent.
	f.platformURL, err = f.serve(http.HandlerFunc(f.platform))
	if err != nil {
		return nil, err
	}
	// The downstream service: trusts loopback peers to set the session.
	downTracer := tp["downstream"].Tracer("tracedflow/downstream")
	f.downstreamURL, err = f.serve(httpsession.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, span := downTracer.Start(r.Context(), "check session")
		defer span.End()
		f.mu.Lock()
		f.downSeen[otelsession.Getenv(r.Context(), "HERMES_SESSION_MESSAGE_ID", "")] = otelsession.Getenv(r.Context(), "HERMES_SESSION_THREAD_ID", "")
		f.mu.Unlock()
	}), httpsession.WithInbound(propagation.NewInbound(propagation.TrustLoopback()))))
	if err != nil {
		return nil, err
	}
	// The same service over gRPC, through a grpcsession Edge on each side:
	// otelgrpc traces the call and runs the Edge's propagator, so the policy
	// judges the session where otelgrpc extracts it, and otelgrpc's server
	// span starts from the session the policy accepted.
	grpcAddr, err := f.serveGRPC(tp["downstream-grpc"])
	if err != nil {
		return nil, err
	}
	down := grpcsession.New(grpcsession.WithOutbound(
		propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{Prefixes: []string{"grpc://" + grpcAddr + "/" + threadrpc.Service + "/"}}))))
	if f.grpcConn, err = grpc.NewClient(grpcAddr, append(down.DialOptions(),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp["worker"]), otelgrpc.WithPropagators(down.Propagator()))),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...); err != nil {
		return nil, fmt.Errorf("connect to the gRPC downstream: %w", err)
	}
	// The router: delivers replies and completions to their origin.
	f.routerURL, err = f.serve(httpsession.Handler(f.router(tp["router"]), httpsession.WithInbound(propagation.NewInbound(propagation.TrustLoopback()))))
	if err != nil {
		return nil, err
	}
	// The ingress: binds each message's session and queues it.
	pub := natssession.NewPublisher(natssession.WithTracerProvider(tp["gateway"]),
		natssession.WithOutbound(propagation.NewOutbound(propagation.AllowNames(propagation.TransportNATS, "jobs.>"))))
	f.ingressURL, err = f.serve(f.ingress(tp["gateway"].Tracer("tracedflow/gateway"), pub, js))
	if err != nil {
		return nil, err
	}
	// The workers.
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		return nil, fmt.Errorf("create the worker consumer: %w", err)
	}
	work := f.worker(tp["worker"])
	w := func(ctx context.Context, msg jetstream.Msg) error {
		err := work(ctx, msg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "tracedflow:", err)
		}
		return err
	}
	// The stream is ours: only the gateway publishes to it, so its sessions are trusted.
	nc := natssession.NewConsumer(propagation.NewInbound(propagation.TrustAll), natssession.WithTracerProvider(tp["worker"]))
	if _, err := cons.Consume(nc.JetStreamHandler(context.Background(), w)); err != nil {
		return nil, fmt.Errorf("start consuming: %w", err)
	}
	return f, nil
}

// serveGRPC starts the gRPC downstream service on loopback and returns its
// address.
func (f *flow) serveGRPC(tp *sdktrace.TracerProvider) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("listen on loopback: %w", err)
	}
	edge := grpcsession.New(grpcsession.WithInbound(propagation.NewInbound(propagation.TrustLoopback())))
	f.grpcSrv = grpc.NewServer(append(edge.ServerOptions(),
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(edge.Propagator()))))...)
	threadrpc.Register(f.grpcSrv, grpcDownstream{f})
	go func() { _ = f.grpcSrv.Serve(ln) }()
	return ln.Addr().String(), nil
}

// grpcDownstream records the thread of the session each call carried.
type grpcDownstream struct{ f *flow }

func (d grpcDownstream) Thread(ctx context.Context) (string, error) {
	thread := otelsession.Getenv(ctx, "HERMES_SESSION_THREAD_ID", "")
	d.f.mu.Lock()
	d.f.grpcSeen[otelsession.Getenv(ctx, "HERMES_SESSION_MESSAGE_ID", "")] = thread
	d.f.mu.Unlock()
	return thread, nil
}

func (f *flow) serve(h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("listen on loopback: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	f.servers = append(f.servers, srv)
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), nil
}

func (f *flow) ingress(tracer trace.Tracer, pub *natssession.Publisher, js jetstream.JetStream) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m chatMessage
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&m); err != nil {
			http.Error(w, "ingress: the body is not a chat message: "+err.Error(), http.StatusBadRequest)
			return
		}
		s := otelsession.Session{
			Platform: m.Platform, ChatID: m.ChatID, ThreadID: m.ThreadID, ParentChatID: m.ParentChatID,
			ScopeID: m.ScopeID, UserID: m.UserID, UserName: m.UserName, MessageID: m.MessageID,
			SessionKey: fmt.Sprintf("agent:main:%s:%s:%s", m.Platform, m.ChatID, m.ThreadID),
		}
		if err := s.Validate(); err != nil {
			http.Error(w, "ingress: "+err.Error(), http.StatusBadRequest)
			return
		}
		ctx := otelsession.Bind(otelsession.Reset(r.Context()), s)
		ctx, span := tracer.Start(ctx, "ingress "+m.Platform)
		defer span.End()
		body, _ := json.Marshal(m)
		if _, err := pub.PublishJetStream(ctx, js, &nats.Msg{Subject: "jobs." + m.Platform, Data: body}); err != nil {
			http.Error(w, "ingress: queue the message: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
}

func (f *flow) worker(tp *sdktrace.TracerProvider) func(context.Context, jetstream.Msg) error {
	tracer := tp.Tracer("tracedflow/worker")
	downstream, _ := url.Parse(f.downstreamURL)
	router, _ := url.Parse(f.routerURL)
	// The policy runs inside otelhttp's injection: one request copy, one
	// traceparent, the baggage written once, as the policy allows.
	edge := httpsession.NewClientEdge(httpsession.WithOutbound(
		propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{Hosts: []string{downstream.Host, router.Host}}))))
	client := &http.Client{Timeout: 10 * time.Second, Transport: edge.Transport(otelhttp.NewTransport(http.DefaultTransport,
		otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(edge.Propagator())))}
	return func(ctx context.Context, msg jetstream.Msg) error {
		var m chatMessage
		if err := json.Unmarshal(msg.Data(), &m); err != nil {
			_ = msg.Term()
			return fmt.Errorf("worker: decode job: %w", err)
		}
		// A tool, as a child process: it reads its session from its environment.
		toolCtx, span := tracer.Start(ctx, "run tool")
		cmd := execsession.Command(toolCtx, os.Args[0])
		cmd.Env = append(cmd.Env, toolEnv+"=1") // this same binary, in its tool role
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		span.End()
		if err != nil {
			_ = msg.Nak()
			return fmt.Errorf("worker: run the tool: %w", err)
		}
		f.mu.Lock()
		f.toolSeen[m.MessageID] = strings.TrimSpace(string(out))
		f.mu.Unlock()
		// A downstream service, which checks the session it received.
		if err := post(ctx, client, f.downstreamURL, nil); err != nil {
			_ = msg.Nak()
			return err
		}
		// The same over gRPC.
		if _, err := threadrpc.Call(ctx, f.grpcConn); err != nil {
			_ = msg.Nak()
			return fmt.Errorf("worker: %w", err)
		}
		// The reply, routed to this message's origin.
		origin := otelsession.OriginFrom(ctx)
		if err := post(ctx, client, f.routerURL, notifyRequest{Kind: "reply", Origin: origin, Text: "done: " + m.Text}); err != nil {
			_ = msg.Nak()
			return err
		}
		if err := msg.Ack(); err != nil {
			return fmt.Errorf("worker: ack: %w", err)
		}
		// Background work whose completion arrives after the turn ended. It
		// keeps only the stored origin (routing and span context), not ctx.
		stored, _ := json.Marshal(notifyRequest{Kind: "completion", Origin: origin, Text: "background result for " + m.MessageID})
		f.background.Go(func() {
			time.Sleep(50 * time.Millisecond)
			var req notifyRequest
			if err := json.Unmarshal(stored, &req); err != nil {
				return
			}
			_ = post(context.Background(), client, f.routerURL, req)
		})
		return nil
	}
}

func (f *flow) router(tp *sdktrace.TracerProvider) http.Handler {
	tracer := tp.Tracer("tracedflow/router")
	client := &http.Client{Timeout: 10 * time.Second}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req notifyRequest
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil {
			http.Error(w, "router: "+err.Error(), http.StatusBadRequest)
			return
		}
		ctx := r.Context()
		opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
		if req.Kind == "completion" {
			// The turn is over: bind the stored origin, start a new trace and
			// link it to the span that promised the completion.
			ctx = req.Origin.Bind(otelsession.Reset(context.Background()))
			opts = append(opts, trace.WithNewRoot(), trace.WithLinks(req.Origin.Link()))
		}
		ctx, span := tracer.Start(ctx, "deliver "+req.Kind, opts...)
		defer span.End()
		d := delivery{Kind: req.Kind, ChatID: req.Origin.ChatID, ThreadID: req.Origin.ThreadID, AnchorID: req.Origin.MessageID, Text: req.Text}
		if err := post(ctx, client, f.platformURL, d); err != nil {
			http.Error(w, "router: "+err.Error(), http.StatusBadGateway)
		}
	})
}

func (f *flow) platform(w http.ResponseWriter, r *http.Request) {
	var d delivery
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&d); err != nil {
		http.Error(w, "platform: "+err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.deliveries = append(f.deliveries, d)
	f.mu.Unlock()
	f.arrived <- struct{}{}
}

func post(ctx context.Context, c *http.Client, u string, v any) error {
	var body []byte
	if v != nil {
		var err error
		if body, err = json.Marshal(v); err != nil {
			return fmt.Errorf("encode request to %s: %w", u, err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build request to %s: %w", u, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("post to %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("post to %s: %s", u, resp.Status)
	}
	return nil
}

// stop shuts everything down and flushes the spans.
func (f *flow) stop(ctx context.Context) {
	f.background.Wait()
	for _, s := range f.servers {
		_ = s.Shutdown(ctx)
	}
	if f.grpcConn != nil {
		_ = f.grpcConn.Close()
	}
	if f.grpcSrv != nil {
		f.grpcSrv.Stop()
	}
	if f.nc != nil {
		f.nc.Close()
	}
	if f.ns != nil {
		f.ns.Shutdown()
		f.ns.WaitForShutdown()
	}
	for _, p := range f.providers {
		_ = p.Shutdown(ctx)
	}
}
