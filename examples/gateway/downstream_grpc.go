package main

// The downstream service over gRPC (--downstream=grpc): the same service as
// the HTTP one in worker.go (it answers with the thread of the session it
// received; threadrpc is its protocol), behind otelgrpc and a grpcsession
// Edge (otelgrpc runs the Edge's propagator, gRPC its interceptors), called
// by the workers through an Edge of their own.

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sessionwire/sessionwire/examples/internal/threadrpc"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/grpcsession"
)

// How the workers reach the downstream service (--downstream).
const (
	downstreamHTTP = "http"
	downstreamGRPC = "grpc"
)

// envThreadKey is the metadata entry in which a worker of the env store (the
// original bug) sends the thread it read from its environment, as the HTTP
// call sends X-Thread-ID.
const envThreadKey = "x-thread-id"

// grpcDownstream is the downstream service's gRPC server. It counts the
// calls it answered and those that carried a session, so that a test can
// tell "the right session" from "no session" for conversations without a
// thread, where both answer "".
type grpcDownstream struct {
	out      *outage
	inbound  *propagation.Inbound
	calls    atomic.Int64
	sessions atomic.Int64 // calls whose context held an accepted session
}

func (d *grpcDownstream) Thread(ctx context.Context) (string, error) {
	if d.out.refuse() {
		return "", status.Error(codes.Unavailable, "downstream: unavailable (an outage injected by --fault)")
	}
	d.calls.Add(1)
	if hasRoute(ctx) {
		d.sessions.Add(1)
	}
	thread := otelsession.Getenv(ctx, otelsession.FieldThreadID.Name(), "")
	if v := metadata.ValueFromIncomingContext(ctx, envThreadKey); len(v) > 0 && v[0] != "" {
		thread = v[0]
	}
	return thread, nil
}

// serveGRPCDownstream starts the downstream service as a gRPC server on
// addr, accepting a session only from the peers trust names, and returns
// its URL (grpc://host:port, what a worker's --downstream-url takes). It
// stops when ctx ends.
func serveGRPCDownstream(ctx context.Context, addr string, trust propagation.TrustFunc, tp trace.TracerProvider, o *outage) (string, *grpcDownstream, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("downstream: listen for gRPC on %s: %w", addr, err)
	}
	d := &grpcDownstream{out: o, inbound: propagation.NewInbound(trust)}
	prop := propagatorFor(storeBaggage) // it reads W3C baggage whatever store the workers use
	// otelgrpc runs the Edge's propagator, which judges the session where
	// otelgrpc extracts, so its server span starts from the accepted
	// session (and carries it, through demotrace's span processor); the
	// Edge's interceptors act on that verdict.
	edge := grpcsession.New(grpcsession.WithInbound(d.inbound), grpcsession.WithPropagator(prop))
	srv := grpc.NewServer(append(edge.ServerOptions(),
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp),
			otelgrpc.WithPropagators(edge.Propagator()))))...)
	threadrpc.Register(srv, d)
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		stopped := make(chan struct{})
		go func() { srv.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(2 * time.Second):
			srv.Stop()
		}
	}()
	return "grpc://" + ln.Addr().String(), d, nil
}

// grpcListenAddr is where the load role's gRPC downstream listens:
// --grpc-listen, else the host of --listen, on a port of its own.
func grpcListenAddr(listen, grpcListen string) string {
	if grpcListen != "" {
		return grpcListen
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, "0")
}

// grpcClient is a worker's connection to the gRPC downstream service.
type grpcClient struct {
	conn *grpc.ClientConn
}

// newGRPCClient connects to the downstream service at u (grpc://host:port).
// The session goes to that service at that address, signed by signer, and
// nowhere else the connection might be pointed at.
func newGRPCClient(u *url.URL, store string, signer *propagation.Signer, tp trace.TracerProvider) (*grpcClient, error) {
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("worker: the gRPC downstream URL %q has a path; give grpc://host:port", u.String())
	}
	out := propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{
		Prefixes: []string{"grpc://" + u.Host + "/" + threadrpc.Service + "/"}}), propagation.WithSigner(signer))
	prop := propagatorFor(store)
	edge := grpcsession.New(grpcsession.WithOutbound(out), grpcsession.WithPropagator(prop))
	conn, err := grpc.NewClient(u.Host, append(edge.DialOptions(),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp),
			otelgrpc.WithPropagators(edge.Propagator()))),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		return nil, fmt.Errorf("worker: connect to the gRPC downstream at %s: %w", u.Host, err)
	}
	return &grpcClient{conn: conn}, nil
}

// thread calls Thread; envThread, when not empty, goes as x-thread-id.
func (c *grpcClient) thread(ctx context.Context, envThread string) (string, error) {
	if envThread != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, envThreadKey, envThread)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	thread, err := threadrpc.Call(ctx, c.conn)
	if err != nil {
		return "", fmt.Errorf("call the gRPC downstream: %w", err)
	}
	return strings.TrimSpace(thread), nil
}

func (c *grpcClient) close() { _ = c.conn.Close() }
