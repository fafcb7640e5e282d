package grpcsession_test

import (
	"context"
	"net"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/grpcsession"
)

// benchSession sets every field: 16 baggage members on the wire.
var benchSession = otelsession.Session{
	Platform: "telegram", Source: "gateway", ChatID: "-1001234567890", ChatType: "supergroup",
	ChatName: "Ops – EU", ThreadID: "17585", UserID: "u-42", UserIDAlt: "@ana",
	UserName: "Ana Lúcia", ScopeID: "guild-7", SessionKey: "agent:main:telegram:-1001234567890:17585",
	SessionID: "20261214_101010_ab12cd", UISessionID: "tab-3", MessageID: "88121",
	Profile: "default", BrowserControlPrincipal: "ana", BrowserControlTransportFamily: "cdp",
	ParentChatID: "-1001234567000", Cron: otelsession.CronOn, Cwd: "/srv/work",
}

// benchService answers UnaryCall and reads the session, as a real handler
// would.
type benchService struct {
	testpb.UnimplementedTestServiceServer
}

var sinkPlatform string

func (benchService) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	sinkPlatform, _ = otelsession.Lookup(ctx, otelsession.FieldPlatform)
	return &testpb.SimpleResponse{}, nil
}

// BenchmarkUnary measures one unary call over loopback TCP with otelgrpc's
// stats handlers on both sides (a recording tracer provider, the W3C
// propagators), beside the same call with the session policy added:
//
//   - otelgrpc/off, otelgrpc/on: raw otelgrpc, without and with a full
//     session in the context's baggage (the raw propagation cost);
//   - grpcsession/off, grpcsession/on: otelgrpc plus this package's
//     interceptors, the server trusting the loopback peer and the client
//     allowing the target: the session is checked and accepted;
//   - grpcsession/signed: the client signs every call, the server, trusting
//     no peer, verifies the signature.
//
// Run it with
//
//	go test ./propagation/grpcsession -run '^$' -bench BenchmarkUnary -benchtime 3000x -count 5 -cpu 2
func BenchmarkUnary(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	otelOpts := []otelgrpc.Option{otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(w3c)}
	signer, err := propagation.NewSigner(testKey)
	if err != nil {
		b.Fatal(err)
	}
	verifier, err := propagation.NewVerifier([]propagation.Key{testKey})
	if err != nil {
		b.Fatal(err)
	}
	withSession := otelsession.Bind(context.Background(), benchSession)
	for _, c := range []struct {
		name         string
		ctx          context.Context
		server       []grpcsession.Option
		client       []grpcsession.Option
		policy, want bool
	}{
		{name: "otelgrpc/off", ctx: context.Background()},
		{name: "otelgrpc/on", ctx: withSession, want: true},
		{name: "grpcsession/off", ctx: context.Background(), policy: true},
		{name: "grpcsession/on", ctx: withSession, policy: true, want: true,
			server: []grpcsession.Option{grpcsession.WithInbound(propagation.NewInbound(propagation.TrustLoopback()))},
			client: []grpcsession.Option{grpcsession.WithOutbound(propagation.NewOutbound(propagation.AllowAll))}},
		{name: "grpcsession/signed", ctx: withSession, policy: true, want: true,
			server: []grpcsession.Option{grpcsession.WithInbound(propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier)))},
			client: []grpcsession.Option{grpcsession.WithOutbound(propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(signer)))}},
	} {
		b.Run(c.name, func(b *testing.B) {
			serverOpts := []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(otelOpts...))}
			dialOpts := []grpc.DialOption{grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelOpts...)),
				grpc.WithTransportCredentials(insecure.NewCredentials())}
			if c.policy {
				serverOpts = append(serverOpts, grpcsession.ServerOptions(append(c.server, grpcsession.WithPropagator(w3c))...)...)
				dialOpts = append(dialOpts, grpcsession.DialOptions(append(c.client, grpcsession.WithPropagator(w3c))...)...)
			}
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := grpc.NewServer(serverOpts...)
			testpb.RegisterTestServiceServer(srv, benchService{})
			done := make(chan struct{})
			go func() { _ = srv.Serve(lis); close(done) }()
			defer func() { srv.Stop(); <-done }()
			conn, err := grpc.NewClient(lis.Addr().String(), dialOpts...)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			client := testpb.NewTestServiceClient(conn)
			req := &testpb.SimpleRequest{}
			if _, err := client.UnaryCall(c.ctx, req); err != nil { // connect outside the loop
				b.Fatal(err)
			}
			if got := sinkPlatform != ""; got != c.want {
				b.Fatalf("the handler saw a session: %v, want %v", got, c.want)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.UnaryCall(c.ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
