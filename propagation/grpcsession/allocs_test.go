package grpcsession_test

import (
	"context"
	"net"
	"testing"

	otelprop "go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/grpcsession"
)

// Allocation budgets of the interceptors' per-call steps in the recommended
// configuration (BenchmarkSteps' otelgrpc_except_baggage+policy rows, the
// interceptor's part only), asserted without timing anything: a change that
// makes a call allocate more fails here, not only in a benchmark. The race
// detector does not change what these allocate.
func TestInterceptorAllocationBudget(t *testing.T) {
	session := otelsession.Bind(bound(), benchSession)
	md := metadata.MD{":authority": {"127.0.0.1:50051"}, "content-type": {"application/grpc"}}
	w3c.Inject(session, otelprop.TextMapCarrier(grpcsession.MetadataCarrier(md)))
	pr := &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 50000}}
	incoming := peer.NewContext(metadata.NewIncomingContext(context.Background(), md), pr)
	// What otelgrpc's server handler, given ExceptBaggage, hands on.
	incoming = grpcsession.ExceptBaggage(w3c).Extract(incoming, grpcsession.MetadataCarrier(md))

	server := grpcsession.UnaryServerInterceptor(grpcsession.WithPropagator(w3c),
		grpcsession.WithInbound(propagation.NewInbound(propagation.TrustLoopback())))
	info := &grpc.UnaryServerInfo{FullMethod: "/grpc.testing.TestService/UnaryCall"}
	var got context.Context
	handler := func(ctx context.Context, _ any) (any, error) { got = ctx; return nil, nil }
	n := testing.AllocsPerRun(100, func() { _, _ = server(incoming, nil, info, handler) })
	if _, st := otelsession.Lookup(got, otelsession.FieldPlatform); st != otelsession.Set {
		t.Fatal("the server interceptor did not accept the session")
	}
	t.Logf("server interceptor: %.0f allocations per call", n)
	if n > serverBudget {
		t.Errorf("the server interceptor allocates %.0f times per call, budget %d", n, serverBudget)
	}

	conn, err := grpc.NewClient("127.0.0.1:50051", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := grpcsession.UnaryClientInterceptor(grpcsession.WithPropagator(w3c),
		grpcsession.WithOutbound(propagation.NewOutbound(propagation.AllowAll)))
	invoker := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		got = ctx
		return nil
	}
	n = testing.AllocsPerRun(100, func() { _ = client(session, info.FullMethod, nil, nil, conn, invoker) })
	if m, _ := metadata.FromOutgoingContext(got); len(m.Get("baggage")) != 1 {
		t.Fatalf("the client interceptor wrote %d baggage lines, want 1", len(m.Get("baggage")))
	}
	t.Logf("client interceptor: %.0f allocations per call", n)
	if n > clientBudget {
		t.Errorf("the client interceptor allocates %.0f times per call, budget %d", n, clientBudget)
	}
}

// Allocation budgets of the Edge's steps, the configuration the package
// recommends, whole: otelgrpc's part (its copy of the metadata, its carrier)
// with the Edge's propagator, and the Edge's interceptor
// (BenchmarkSteps' otelgrpc_given_edge_propagator rows), against raw
// otelgrpc's own step carrying the same session (the otelgrpc rows).
func TestEdgeAllocationBudget(t *testing.T) {
	session := otelsession.Bind(bound(), benchSession)
	md := metadata.MD{":authority": {"127.0.0.1:50051"}, "content-type": {"application/grpc"}}
	w3c.Inject(session, otelprop.TextMapCarrier(grpcsession.MetadataCarrier(md)))
	pr := &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 50000}}
	incoming := peer.NewContext(metadata.NewIncomingContext(context.Background(), md), pr)
	otelExtract := func(ctx context.Context, prop otelprop.TextMapPropagator) context.Context {
		m, _ := metadata.FromIncomingContext(ctx)
		return prop.Extract(ctx, otelgrpcSupplier{m})
	}
	otelInject := func(ctx context.Context, prop otelprop.TextMapPropagator) context.Context {
		m, ok := metadata.FromOutgoingContext(ctx)
		if !ok {
			m = metadata.MD{}
		}
		prop.Inject(ctx, otelgrpcSupplier{m})
		return metadata.NewOutgoingContext(ctx, m)
	}

	edge := grpcsession.New(grpcsession.WithPropagator(w3c), grpcsession.WithInbound(propagation.NewInbound(propagation.TrustLoopback())),
		grpcsession.WithOutbound(propagation.NewOutbound(propagation.AllowAll)))
	server, prop := edge.UnaryServerInterceptor(), edge.Propagator()
	info := &grpc.UnaryServerInfo{FullMethod: "/grpc.testing.TestService/UnaryCall"}
	var got context.Context
	handler := func(ctx context.Context, _ any) (any, error) { got = ctx; return nil, nil }
	raw := testing.AllocsPerRun(100, func() { got = otelExtract(incoming, w3c) })
	n := testing.AllocsPerRun(100, func() { _, _ = server(otelExtract(incoming, prop), nil, info, handler) })
	if _, st := otelsession.Lookup(got, otelsession.FieldPlatform); st != otelsession.Set {
		t.Fatal("the Edge did not accept the session")
	}
	t.Logf("server: raw otelgrpc %.0f allocations per call, with the Edge %.0f", raw, n)
	if n-raw > edgeServerOverRaw {
		t.Errorf("the Edge's server step allocates %.0f times more than raw otelgrpc's, budget %d", n-raw, edgeServerOverRaw)
	}

	conn, err := grpc.NewClient("127.0.0.1:50051", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := edge.UnaryClientInterceptor()
	invoker := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		got = otelInject(ctx, prop)
		return nil
	}
	_ = client(session, info.FullMethod, nil, nil, conn, invoker) // the first call on the connection
	raw = testing.AllocsPerRun(100, func() { got = otelInject(session, w3c) })
	n = testing.AllocsPerRun(100, func() { _ = client(session, info.FullMethod, nil, nil, conn, invoker) })
	if m, _ := metadata.FromOutgoingContext(got); len(m.Get("baggage")) != 1 || len(m.Get("traceparent")) != 1 {
		t.Fatalf("the Edge's client step wrote %d baggage and %d traceparent lines, want 1 each", len(m.Get("baggage")), len(m.Get("traceparent")))
	}
	t.Logf("client: raw otelgrpc %.0f allocations per call, with the Edge %.0f", raw, n)
	if n-raw > edgeClientOverRaw {
		t.Errorf("the Edge's client step allocates %.0f times more than raw otelgrpc's, budget %d", n-raw, edgeClientOverRaw)
	}
}

// The budgets: what the steps allocated when they were set (2026-12-03,
// grpc v1.85.0, otel v1.47.0), for a full session and one application
// member. Most of them are OpenTelemetry's (parsing and writing the
// baggage line); raise them only with a reason, such as a new OpenTelemetry
// release that allocates more.
//
// Server: 46 since 2026-12-04, the record of the accepted session that its
// readers take instead of looking each field up (propagation.Inbound.Extract).
const (
	serverBudget = 46
	clientBudget = 30
	// The Edge over raw otelgrpc. Server: the accepted session's record
	// (since 2026-12-05 the call's baggage lines are read in place, and the
	// record's context carries the Edge's verdict on an accepted session, so
	// no verdict is allocated; the handler's context already holds the
	// judged baggage: it is not set again). Client: what the interceptor tells the propagator (the call, in
	// the context holding it, one allocation; the destination's URL is built
	// once per method and connection since 2026-12-05).
	edgeServerOverRaw = 1
	edgeClientOverRaw = 1
)
