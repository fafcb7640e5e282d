package grpcsession_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sessionwire/sessionwire/internal/benchcpu"
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
//   - grpcsession/off/otelgrpc-w3c-too, grpcsession/on/otelgrpc-w3c-too:
//     otelgrpc (given the W3C propagators, so that the baggage is parsed
//     and written twice) plus this package's interceptors, the server
//     trusting the loopback peer and the client allowing the target: the
//     session is checked and accepted. No row's name is another's with
//     more after it, so that -bench '^BenchmarkUnary$/^grpcsession/on/edge$'
//     selects one row and no other;
//   - grpcsession/on/otelgrpc-except-baggage: the same, with otelgrpc given
//     ExceptBaggage(w3c), so that the baggage is extracted and injected
//     once, by the interceptors (the configuration before the Edge);
//   - grpcsession/off/edge, grpcsession/on/edge: the same through an Edge,
//     otelgrpc given the Edge's propagator on both sides, so that the
//     policy runs inside otelgrpc's own propagation step (the
//     configuration the package recommends), without and with a session;
//   - otelgrpc/app, grpcsession/app/edge: raw otelgrpc and an Edge (its
//     policy's cache off) on a call carrying only the application's own
//     three members of baggage, no session: the policy's fixed work on the
//     whole call, where BenchmarkSteps/server_foreign_baggage isolates the
//     server's step;
//   - grpcsession/signed: the client signs every call, the server, trusting
//     no peer, verifies the signature.
//
// Beside the wall time it reports cpu-ns/op, the process's CPU time (user
// and system, client and server together) per call: on a machine shared
// with other work the wall time mostly measures the wait for a core.
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
	appBag, err := baggage.Parse("app.tenant=t-42,app.plan=pro,app.region=eu-west-1")
	if err != nil {
		b.Fatal(err)
	}
	withAppBaggage := baggage.ContextWithBaggage(context.Background(), appBag)
	for _, c := range []struct {
		name         string
		ctx          context.Context
		server       []grpcsession.Option
		client       []grpcsession.Option
		policy, want bool
		exceptBag    bool // otelgrpc propagates all but the baggage; the interceptors carry it
		edge         bool // an Edge: otelgrpc runs its propagator
	}{
		{name: "otelgrpc/off", ctx: context.Background()},
		{name: "otelgrpc/on", ctx: withSession, want: true},
		{name: "grpcsession/off/otelgrpc-w3c-too", ctx: context.Background(), policy: true},
		{name: "grpcsession/off/edge", ctx: context.Background(), policy: true, edge: true,
			server: []grpcsession.Option{grpcsession.WithInbound(propagation.NewInbound(propagation.TrustLoopback(), propagation.WithCacheSize(0)))},
			client: []grpcsession.Option{grpcsession.WithOutbound(propagation.NewOutbound(propagation.AllowAll))}},
		{name: "otelgrpc/app", ctx: withAppBaggage},
		{name: "grpcsession/app/edge", ctx: withAppBaggage, policy: true, edge: true,
			server: []grpcsession.Option{grpcsession.WithInbound(propagation.NewInbound(propagation.TrustLoopback(), propagation.WithCacheSize(0)))},
			client: []grpcsession.Option{grpcsession.WithOutbound(propagation.NewOutbound(propagation.AllowAll))}},
		{name: "grpcsession/on/otelgrpc-w3c-too", ctx: withSession, policy: true, want: true,
			server: []grpcsession.Option{grpcsession.WithInbound(propagation.NewInbound(propagation.TrustLoopback(), propagation.WithCacheSize(0)))},
			client: []grpcsession.Option{grpcsession.WithOutbound(propagation.NewOutbound(propagation.AllowAll))}},
		{name: "grpcsession/on/otelgrpc-except-baggage", ctx: withSession, policy: true, want: true, exceptBag: true,
			server: []grpcsession.Option{grpcsession.WithInbound(propagation.NewInbound(propagation.TrustLoopback(), propagation.WithCacheSize(0)))},
			client: []grpcsession.Option{grpcsession.WithOutbound(propagation.NewOutbound(propagation.AllowAll))}},
		{name: "grpcsession/on/edge", ctx: withSession, policy: true, want: true, edge: true,
			server: []grpcsession.Option{grpcsession.WithInbound(propagation.NewInbound(propagation.TrustLoopback(), propagation.WithCacheSize(0)))},
			client: []grpcsession.Option{grpcsession.WithOutbound(propagation.NewOutbound(propagation.AllowAll))}},
		{name: "grpcsession/signed", ctx: withSession, policy: true, want: true,
			server: []grpcsession.Option{grpcsession.WithInbound(propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier)))},
			client: []grpcsession.Option{grpcsession.WithOutbound(propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(signer)))}},
	} {
		b.Run(c.name, func(b *testing.B) {
			otelOpts := otelOpts
			if c.exceptBag {
				otelOpts = []otelgrpc.Option{otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(grpcsession.ExceptBaggage(w3c))}
			}
			serverOpts := []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(otelOpts...))}
			dialOpts := []grpc.DialOption{grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelOpts...)),
				grpc.WithTransportCredentials(insecure.NewCredentials())}
			switch {
			case c.edge:
				server, client := grpcsession.New(append(c.server, grpcsession.WithPropagator(w3c))...), grpcsession.New(append(c.client, grpcsession.WithPropagator(w3c))...)
				serverOpts = append(server.ServerOptions(), grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(server.Propagator()))))
				dialOpts = append(client.DialOptions(), grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(client.Propagator()))),
					grpc.WithTransportCredentials(insecure.NewCredentials()))
			case c.policy:
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
			stop := benchcpu.Time(b)
			for b.Loop() {
				if _, err := client.UnaryCall(c.ctx, req); err != nil {
					b.Fatal(err)
				}
			}
			stop()
		})
	}
}

// BenchmarkSteps isolates the per-call work of each side from the network,
// which on a shared machine varies more than the policy costs. Each side has
// three rows:
//
//   - otelgrpc: the raw path, what otelgrpc's handler does with the full W3C
//     propagator for a call carrying a full session (server: extract trace
//     context and baggage from the metadata; client: copy the outgoing
//     metadata, inject both);
//   - otelgrpc_except_baggage+policy: the configuration the package
//     recommends (README "gRPC calls"): otelgrpc given ExceptBaggage(w3c)
//     carries the trace context, the interceptor (trusting the peer,
//     allowing the target) carries the baggage, once each way;
//   - otelgrpc_given_W3C_too+policy: the interceptor beside otelgrpc given
//     the full W3C propagator, so that the baggage is parsed (server) or
//     written (client) twice: what the recommendation avoids;
//   - otelgrpc_given_edge_propagator: an Edge, the configuration the package
//     recommends: otelgrpc runs the Edge's propagator, which applies the
//     policy where otelgrpc extracts (server) or injects (client), and the
//     Edge's interceptor acts on the verdict (server) or names the
//     destination (client, on a connection where it has seen the
//     propagator run).
//
// Run it with
//
//	go test ./propagation/grpcsession -run '^$' -bench BenchmarkSteps -count 5 -cpu 1
func BenchmarkSteps(b *testing.B) {
	session := otelsession.Bind(bound(), benchSession)
	md := metadata.MD{":authority": {"127.0.0.1:50051"}, "content-type": {"application/grpc"}}
	w3c.Inject(session, otelprop.TextMapCarrier(grpcsession.MetadataCarrier(md)))
	// sent is the session on the wire: benchSession without its local fields.
	sent := otelsession.FromContext(w3c.Extract(context.Background(), grpcsession.MetadataCarrier(md)))
	pr := &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 50000}}
	incoming := peer.NewContext(metadata.NewIncomingContext(context.Background(), md), pr)
	info := &grpc.UnaryServerInfo{FullMethod: "/grpc.testing.TestService/UnaryCall"}
	var sink context.Context
	handler := func(ctx context.Context, _ any) (any, error) { sink = ctx; return nil, nil }
	recommended := grpcsession.ExceptBaggage(w3c)
	// otelExtract is what otelgrpc's server handler does with prop.
	otelExtract := func(ctx context.Context, prop otelprop.TextMapPropagator) context.Context {
		m, ok := metadata.FromIncomingContext(ctx)
		if !ok {
			m = metadata.MD{}
		}
		return prop.Extract(ctx, otelgrpcSupplier{m})
	}
	b.Run("server/otelgrpc", func(b *testing.B) {
		b.ReportAllocs()
		defer benchcpu.Time(b)()
		for b.Loop() {
			sink = otelExtract(incoming, w3c)
		}
	})
	for _, c := range []struct {
		name string
		prop otelprop.TextMapPropagator // otelgrpc's
	}{
		{"server/otelgrpc_except_baggage+policy", recommended},
		{"server/otelgrpc_given_W3C_too+policy", w3c},
	} {
		b.Run(c.name, func(b *testing.B) {
			interceptor := grpcsession.UnaryServerInterceptor(grpcsession.WithPropagator(w3c),
				grpcsession.WithInbound(propagation.NewInbound(propagation.TrustLoopback(), propagation.WithCacheSize(0))))
			b.ReportAllocs()
			stop := benchcpu.Time(b)
			for b.Loop() {
				if _, err := interceptor(otelExtract(incoming, c.prop), nil, info, handler); err != nil {
					b.Fatal(err)
				}
			}
			stop()
			if got := otelsession.FromContext(sink); got != sent {
				b.Fatalf("the handler saw %+v, want the session sent", got)
			}
		})
	}
	// edgeCalls is the recommended server configuration's step, with the
	// inbound policy given, for the calls whose incoming contexts are in,
	// in turn; check looks at what the handler got last.
	edgeCalls := func(in []context.Context, policy *propagation.Inbound, check func(b *testing.B)) func(b *testing.B) {
		return func(b *testing.B) {
			edge := grpcsession.New(grpcsession.WithPropagator(w3c), grpcsession.WithInbound(policy))
			interceptor, prop := edge.UnaryServerInterceptor(), edge.Propagator()
			b.ReportAllocs()
			stop := benchcpu.Time(b)
			if len(in) == 1 {
				// One call again and again: the loop of the rows before
				// these took several calls, so that they compare.
				for b.Loop() {
					if _, err := interceptor(otelExtract(in[0], prop), nil, info, handler); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				i := 0
				for b.Loop() {
					if _, err := interceptor(otelExtract(in[i%len(in)], prop), nil, info, handler); err != nil {
						b.Fatal(err)
					}
					i++
				}
			}
			stop()
			check(b)
		}
	}
	// edgeStep is the recommended server configuration's step for a call
	// whose incoming context is in, the policy's cache off; check looks at
	// what the handler got.
	edgeStep := func(in context.Context, check func(b *testing.B)) func(b *testing.B) {
		return edgeCalls([]context.Context{in}, propagation.NewInbound(propagation.TrustLoopback(), propagation.WithCacheSize(0)), check)
	}
	b.Run("server/otelgrpc_given_edge_propagator", edgeStep(incoming, func(b *testing.B) {
		if got := otelsession.FromContext(sink); got != sent {
			b.Fatalf("the handler saw %+v, want the session sent", got)
		}
	}))
	// A conversation's next calls, through the Edge whose policy keeps its
	// cache of accepted sessions (the default): 1,024 calls in turn, each
	// with the session injected on its own (its own message id, its
	// members in another order), beside raw otelgrpc on the same calls.
	nextCalls := make([]context.Context, 1024)
	for i := range nextCalls {
		m := metadata.MD{":authority": {"127.0.0.1:50051"}, "content-type": {"application/grpc"}}
		w3c.Inject(otelsession.With(session, otelsession.FieldMessageID, fmt.Sprint("m-", i)), otelprop.TextMapCarrier(grpcsession.MetadataCarrier(m)))
		nextCalls[i] = peer.NewContext(metadata.NewIncomingContext(context.Background(), m), pr)
	}
	b.Run("server_next_message/otelgrpc", func(b *testing.B) {
		b.ReportAllocs()
		defer benchcpu.Time(b)()
		i := 0
		for b.Loop() {
			sink = otelExtract(nextCalls[i%len(nextCalls)], w3c)
			i++
		}
	})
	b.Run("server_next_message/otelgrpc_given_edge_propagator", func(b *testing.B) {
		policy := propagation.NewInbound(propagation.TrustLoopback())
		edge := grpcsession.New(grpcsession.WithPropagator(w3c), grpcsession.WithInbound(policy))
		interceptor, prop := edge.UnaryServerInterceptor(), edge.Propagator()
		b.ReportAllocs()
		stop := benchcpu.Time(b)
		i := 0
		for b.Loop() {
			if _, err := interceptor(otelExtract(nextCalls[i%len(nextCalls)], prop), nil, info, handler); err != nil {
				b.Fatal(err)
			}
			i++
		}
		stop()
		if got, _ := otelsession.Lookup(sink, otelsession.FieldMessageID); got != fmt.Sprint("m-", (i-1)%len(nextCalls)) {
			b.Fatalf("the handler saw message id %q after %d calls", got, i)
		}
		if n := policy.Counts(); n.Cached != uint64(max(i-2, 0)) {
			b.Fatalf("%d of %d calls served from the cache", n.Cached, i)
		}
	})
	// A call carrying only the application's own baggage, no session: the
	// policy's fixed work on a small baggage. Its metadata spells "baggage"
	// one way, as on the wire, so the handler gets it as it came (see
	// actOn).
	foreignMD := metadata.MD{":authority": {"127.0.0.1:50051"}, "content-type": {"application/grpc"},
		"traceparent": md["traceparent"], "baggage": {"app.tenant=t-42,app.plan=pro,app.region=eu-west-1"}}
	foreign := peer.NewContext(metadata.NewIncomingContext(context.Background(), foreignMD), pr)
	b.Run("server_foreign_baggage/otelgrpc", func(b *testing.B) {
		b.ReportAllocs()
		defer benchcpu.Time(b)()
		for b.Loop() {
			sink = otelExtract(foreign, w3c)
		}
	})
	b.Run("server_foreign_baggage/otelgrpc_given_edge_propagator", edgeStep(foreign, func(b *testing.B) {
		if baggage.FromContext(sink).Member("app.tenant").Value() != "t-42" {
			b.Fatal("the handler lost the application's baggage")
		}
	}))
	// The same call again and again through an Edge whose policy keeps its
	// cache (the default): from the third, the line's baggage is served
	// from the cache of lines that name no session.
	b.Run("server_foreign_baggage/otelgrpc_given_edge_propagator_cached", func(b *testing.B) {
		policy := propagation.NewInbound(propagation.TrustLoopback())
		edgeCalls([]context.Context{foreign}, policy, func(b *testing.B) {
			if baggage.FromContext(sink).Member("app.tenant").Value() != "t-42" {
				b.Fatal("the handler lost the application's baggage")
			}
			// Noted, entry made, then served.
			if n := policy.Counts().CachedNoSession; n != uint64(max(b.N-2, 0)) {
				b.Fatalf("%d of %d calls served from the cache", n, b.N)
			}
		})(b)
	})
	// 4,096 calls in turn, each line of its own (a request id among the
	// application's members), through the Edge with its cache: no line
	// comes back before its note is overwritten, so each costs the cache
	// its hash and a note, beside raw otelgrpc on the same calls.
	uniqueCalls := make([]context.Context, 4096)
	for i := range uniqueCalls {
		m := maps.Clone(foreignMD)
		m["baggage"] = []string{fmt.Sprintf("app.tenant=t-42,app.plan=pro,app.request=r-%06d", i)}
		uniqueCalls[i] = peer.NewContext(metadata.NewIncomingContext(context.Background(), m), pr)
	}
	b.Run("server_foreign_baggage_first_seen/otelgrpc", func(b *testing.B) {
		b.ReportAllocs()
		defer benchcpu.Time(b)()
		i := 0
		for b.Loop() {
			sink = otelExtract(uniqueCalls[i%len(uniqueCalls)], w3c)
			i++
		}
	})
	b.Run("server_foreign_baggage_first_seen/otelgrpc_given_edge_propagator", func(b *testing.B) {
		policy := propagation.NewInbound(propagation.TrustLoopback())
		edgeCalls(uniqueCalls, policy, func(b *testing.B) {
			if baggage.FromContext(sink).Member("app.request").Value() == "" {
				b.Fatal("the handler lost the application's baggage")
			}
			if n := policy.Counts().CachedNoSession; n != 0 {
				b.Fatalf("%d lines seen once served from the cache", n)
			}
		})(b)
	})

	conn, err := grpc.NewClient("127.0.0.1:50051", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	// otelInject is what otelgrpc's client handler does with prop.
	otelInject := func(ctx context.Context, prop otelprop.TextMapPropagator) context.Context {
		m, ok := metadata.FromOutgoingContext(ctx)
		if !ok {
			m = metadata.MD{}
		}
		prop.Inject(ctx, otelgrpcSupplier{m})
		return metadata.NewOutgoingContext(ctx, m)
	}
	b.Run("client/otelgrpc", func(b *testing.B) {
		b.ReportAllocs()
		defer benchcpu.Time(b)()
		for b.Loop() {
			sink = otelInject(session, w3c)
		}
	})
	for _, c := range []struct {
		name string
		prop otelprop.TextMapPropagator // otelgrpc's
	}{
		{"client/otelgrpc_except_baggage+policy", recommended},
		{"client/otelgrpc_given_W3C_too+policy", w3c},
	} {
		b.Run(c.name, func(b *testing.B) {
			interceptor := grpcsession.UnaryClientInterceptor(grpcsession.WithPropagator(w3c),
				grpcsession.WithOutbound(propagation.NewOutbound(propagation.AllowAll)))
			invoker := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
				sink = otelInject(ctx, c.prop)
				return nil
			}
			b.ReportAllocs()
			stop := benchcpu.Time(b)
			for b.Loop() {
				if err := interceptor(session, info.FullMethod, nil, nil, conn, invoker); err != nil {
					b.Fatal(err)
				}
			}
			stop()
			checkSent(b, sink, sent)
		})
	}
	b.Run("client/otelgrpc_given_edge_propagator", func(b *testing.B) {
		edge := grpcsession.New(grpcsession.WithPropagator(w3c),
			grpcsession.WithOutbound(propagation.NewOutbound(propagation.AllowAll)))
		interceptor, prop := edge.UnaryClientInterceptor(), edge.Propagator()
		invoker := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
			sink = otelInject(ctx, prop)
			return nil
		}
		// The first call on a connection shows the interceptor that
		// otelgrpc runs the Edge's propagator; the loop measures the others.
		if err := interceptor(session, info.FullMethod, nil, nil, conn, invoker); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		stop := benchcpu.Time(b)
		for b.Loop() {
			if err := interceptor(session, info.FullMethod, nil, nil, conn, invoker); err != nil {
				b.Fatal(err)
			}
		}
		stop()
		checkSent(b, sink, sent)
	})
	_ = sink
}

// checkSent fails b unless the outgoing context ctx carries the session
// sent once, in one baggage line, as the raw path sends it.
func checkSent(b *testing.B, ctx context.Context, sent otelsession.Session) {
	b.Helper()
	m, _ := metadata.FromOutgoingContext(ctx)
	got := otelsession.FromContext(w3c.Extract(context.Background(), grpcsession.MetadataCarrier(m)))
	if got != sent || len(m.Get("baggage")) != 1 || len(m.Get("traceparent")) != 1 {
		b.Fatalf("the call carries %d baggage lines and the session %+v, want one line with the session sent", len(m.Get("baggage")), got)
	}
}

// otelgrpcSupplier is otelgrpc's own carrier (metadataSupplier, unexported),
// copied so that the steps run what otelgrpc runs: without a Values method,
// the W3C baggage propagator parses the line once.
type otelgrpcSupplier struct{ md metadata.MD }

func (s otelgrpcSupplier) Get(key string) string {
	if v := s.md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (s otelgrpcSupplier) Set(key, value string) { s.md.Set(key, value) }

func (s otelgrpcSupplier) Keys() []string {
	out := make([]string, 0, len(s.md))
	for k := range s.md {
		out = append(out, k)
	}
	return out
}
