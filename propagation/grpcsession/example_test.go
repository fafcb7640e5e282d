package grpcsession_test

import (
	"context"
	"fmt"
	"net"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/grpcsession"
)

// notify is a service whose handlers read the conversation's session.
type notify struct {
	testpb.UnimplementedTestServiceServer
}

func (notify) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	chat, st := otelsession.Lookup(ctx, otelsession.FieldChatID)
	fmt.Printf("UnaryCall: chat %q (%s)\n", chat, st)
	return &testpb.SimpleResponse{}, nil
}

func (notify) EmptyCall(ctx context.Context, _ *testpb.Empty) (*testpb.Empty, error) {
	chat, st := otelsession.Lookup(ctx, otelsession.FieldChatID)
	fmt.Printf("EmptyCall: chat %q (%s)\n", chat, st)
	return &testpb.Empty{}, nil
}

// A server that trusts the loopback network and a client whose outbound
// policy lets the session go to one method of one service at one address,
// each an Edge whose propagator otelgrpc runs: the other method runs
// without the session.
func Example() {
	// otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(
	//	propagation.TraceContext{}, propagation.Baggage{})) does this for a
	// whole program; the example passes the propagator explicitly.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	inbound := propagation.NewInbound(propagation.TrustLoopback())
	server := grpcsession.New(grpcsession.WithPropagator(w3c), grpcsession.WithInbound(inbound))
	// otelgrpc runs the Edge's propagator: the policy decides where
	// otelgrpc extracts, before it starts the server span.
	srv := grpc.NewServer(append(server.ServerOptions(),
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithPropagators(server.Propagator()))))...)
	testpb.RegisterTestServiceServer(srv, notify{})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	addr := lis.Addr().String()
	outbound := propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{
		Prefixes: []string{"grpc://" + addr + "/grpc.testing.TestService/UnaryCall"}}))
	client := grpcsession.New(grpcsession.WithPropagator(w3c), grpcsession.WithOutbound(outbound))
	conn, err := grpc.NewClient(addr, append(client.DialOptions(),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithPropagators(client.Propagator()))),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	c := testpb.NewTestServiceClient(conn)

	ctx := otelsession.Bind(context.Background(), otelsession.Session{Platform: "telegram", ChatID: "-1001234567890"})
	if _, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
		fmt.Println(err)
	}
	if _, err := c.EmptyCall(ctx, &testpb.Empty{}); err != nil {
		fmt.Println(err)
	}
	fmt.Printf("sent %d, withheld %d; accepted %d\n", outbound.Counts().Sent, outbound.Counts().Withheld, inbound.Counts().Accepted)
	// Output:
	// UnaryCall: chat "-1001234567890" (set)
	// EmptyCall: chat "" (unset)
	// sent 1, withheld 1; accepted 1
}

// The configuration before the Edge, still supported: the interceptors on
// their own beside otelgrpc given everything but the baggage.
func Example_exceptBaggage() {
	// otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(
	//	propagation.TraceContext{}, propagation.Baggage{})) does this for a
	// whole program; the example passes the propagator explicitly.
	opts := []grpcsession.Option{grpcsession.WithPropagator(w3c)}
	// otelgrpc traces the calls and carries the trace context; the
	// interceptors alone carry the baggage, so it is parsed and written once.
	traceOnly := otelgrpc.WithPropagators(grpcsession.ExceptBaggage(w3c))

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	inbound := propagation.NewInbound(propagation.TrustLoopback())
	srv := grpc.NewServer(append(grpcsession.ServerOptions(append(opts, grpcsession.WithInbound(inbound))...),
		grpc.StatsHandler(otelgrpc.NewServerHandler(traceOnly)))...)
	testpb.RegisterTestServiceServer(srv, notify{})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	addr := lis.Addr().String()
	outbound := propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{
		Prefixes: []string{"grpc://" + addr + "/grpc.testing.TestService/UnaryCall"}}))
	conn, err := grpc.NewClient(addr, append(grpcsession.DialOptions(append(opts, grpcsession.WithOutbound(outbound))...),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(traceOnly)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn)

	ctx := otelsession.Bind(context.Background(), otelsession.Session{Platform: "telegram", ChatID: "-1001234567890"})
	if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
		fmt.Println(err)
	}
	if _, err := client.EmptyCall(ctx, &testpb.Empty{}); err != nil {
		fmt.Println(err)
	}
	fmt.Printf("sent %d, withheld %d; accepted %d\n", outbound.Counts().Sent, outbound.Counts().Withheld, inbound.Counts().Accepted)
	// Output:
	// UnaryCall: chat "-1001234567890" (set)
	// EmptyCall: chat "" (unset)
	// sent 1, withheld 1; accepted 1
}
