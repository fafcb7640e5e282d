package grpcsession_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/otelsession/sessiontrace"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/grpcsession"
)

// edgeTracing is a recording tracer provider with sessiontrace's span
// processor, which copies the session of the context a span starts in onto
// the span.
func edgeTracing(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sessiontrace.NewSpanProcessor(sessiontrace.Redaction{})), sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

// edgeServer serves svc with edge's interceptors and otelgrpc given its
// propagator.
func edgeServer(t *testing.T, svc *service, tp trace.TracerProvider, edge *grpcsession.Edge) string {
	t.Helper()
	return serve(t, svc, append(edge.ServerOptions(), grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(edge.Propagator()))))...)
}

func edgeClient(t *testing.T, addr string, tp trace.TracerProvider, edge *grpcsession.Edge) testpb.TestServiceClient {
	t.Helper()
	return dial(t, addr, append(edge.DialOptions(), grpc.WithStatsHandler(otelgrpc.NewClientHandler(
		otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(edge.Propagator()))))...)
}

// serverSpans waits for n ended server spans and returns them.
func serverSpans(t *testing.T, exp *tracetest.InMemoryExporter, n int) []tracetest.SpanStub {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var out []tracetest.SpanStub
		for _, s := range exp.GetSpans() {
			if s.SpanKind == trace.SpanKindServer {
				out = append(out, s)
			}
		}
		if len(out) >= n {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d server spans, want %d", len(out), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// With otelgrpc given the Edge's propagator on both sides, otelgrpc's server
// span starts from the session the policy accepted, without WithOnAccept,
// for unary calls and streams; the handler sees the same session, under that
// span. From a peer the policy does not trust, neither the span nor the
// handler (nor the metadata it can read) holds the session, and the span
// says why.
func TestEdgeSessionOnServerSpan(t *testing.T) {
	tp, exp := edgeTracing(t)
	want := wantSession()
	for _, tc := range []struct {
		name  string
		trust propagation.TrustFunc
	}{{"trusted", propagation.TrustLoopback()}, {"untrusted", propagation.TrustNone}} {
		t.Run(tc.name, func(t *testing.T) {
			exp.Reset()
			svc := newService()
			policy := propagation.NewInbound(tc.trust)
			addr := edgeServer(t, svc, tp, grpcsession.New(grpcsession.WithInbound(policy)))
			c := edgeClient(t, addr, tp, grpcsession.New(allowAll))
			unary(t, bound(), c)
			if err := duplex(t, bound(), c, 2); err != nil {
				t.Fatal(err)
			}
			for i := range 1 + 2 + afterClose {
				got := svc.next(t)
				switch {
				case tc.name == "trusted" && !maps.Equal(got.session, want):
					t.Fatalf("message %d (%s): session %v, want %v", i, got.method, got.session, want)
				case tc.name == "untrusted" && (len(got.session) > 0 || got.hasSessionMember()):
					t.Fatalf("message %d (%s): an untrusted session reached the handler: %v %q", i, got.method, got.session, got.baggage)
				}
				if !got.spanContext.IsValid() || got.spanContext.IsRemote() {
					t.Fatalf("message %d: the handler's span is not otelgrpc's server span: %v", i, got.spanContext)
				}
			}
			for _, s := range serverSpans(t, exp, 2) {
				chat, refused := attr(s, "session.chat_id"), len(s.Events) > 0 && s.Events[0].Name == "session.refused"
				if tc.name == "trusted" && (chat != want[otelsession.FieldChatID] || refused) {
					t.Fatalf("%s: server span session.chat_id %q, refusal event %v", s.Name, chat, refused)
				}
				if tc.name == "untrusted" && (chat != "" || !refused) {
					t.Fatalf("%s: server span session.chat_id %q, refusal event %v", s.Name, chat, refused)
				}
				// The event names the caller: the :authority it addressed
				// and the address it called from.
				if peer := "(grpc " + addr + " from 127.0.0.1)"; tc.name == "untrusted" && !strings.Contains(fmt.Sprint(s.Events[0].Attributes), peer) {
					t.Fatalf("%s: the refusal event %v does not name the peer %s", s.Name, s.Events[0].Attributes, peer)
				}
			}
			n := policy.Counts()
			if tc.name == "trusted" && n.Accepted != 2 || tc.name == "untrusted" && (n.Accepted != 0 || n.Untrusted != 2) {
				t.Fatalf("counts %+v: each call is judged once", n)
			}
		})
	}
}

// A raw client (no policy of its own) sends forged, malformed and
// out-of-table sessions to a server whose Edge trusts the loopback peer:
// each is refused in otelgrpc's handler, reported to WithOnError, and is
// neither on the server span nor in the handler's context or metadata.
func TestEdgeRefusesMalformed(t *testing.T) {
	tp, exp := edgeTracing(t)
	svc := newService()
	var mu sync.Mutex
	var errs []error
	policy := propagation.NewInbound(propagation.TrustLoopback())
	addr := edgeServer(t, svc, tp, grpcsession.New(grpcsession.WithInbound(policy),
		grpcsession.WithOnError(func(_ context.Context, _ string, err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() })))
	c := dial(t, addr)
	for _, tc := range []struct {
		line string
		is   error
	}{
		{"session.platform=slack,session.chat_id=%FF%FE", propagation.ErrInvalidValue},
		{"session.platform=slack,session.future=x", propagation.ErrUnknownSessionKey},
		{"session.platform=slack,session.cwd=/etc", propagation.ErrLocalField},
		{"session.platform=slack,session.chat_id=a,session.chat_id=b", propagation.ErrDuplicateMember},
	} {
		exp.Reset()
		mu.Lock()
		errs = nil
		mu.Unlock()
		unary(t, metadata.AppendToOutgoingContext(context.Background(), "baggage", tc.line), c)
		got := svc.next(t)
		if len(got.session) > 0 || got.hasSessionMember() {
			t.Fatalf("%q: the handler got %v, metadata %q", tc.line, got.session, got.baggage)
		}
		s := serverSpans(t, exp, 1)[0]
		if v := attr(s, "session.platform"); v != "" || len(s.Events) == 0 {
			t.Fatalf("%q: server span session.platform %q, events %v", tc.line, v, s.Events)
		}
		mu.Lock()
		if len(errs) != 1 || !errors.Is(errs[0], tc.is) {
			t.Fatalf("%q: WithOnError saw %v, want one error wrapping %v", tc.line, errs, tc.is)
		}
		mu.Unlock()
	}
	if n := policy.Counts(); n.Accepted != 0 {
		t.Fatalf("counts %+v", n)
	}
}

// Signed end to end through Edges on both sides: the server trusts no peer
// and verifies; the signed session is accepted and on the server span; one
// signed with a key the server does not hold is refused; WithUnauthenticated
// fails the call without an accepted session, unary and streaming, before
// the handler runs.
func TestEdgeSignedAndUnauthenticated(t *testing.T) {
	tp, exp := edgeTracing(t)
	verifier, err := propagation.NewVerifier([]propagation.Key{testKey})
	if err != nil {
		t.Fatal(err)
	}
	svc := newService()
	policy := propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier))
	addr := edgeServer(t, svc, tp, grpcsession.New(grpcsession.WithInbound(policy), grpcsession.WithUnauthenticated()))
	signing := func(k propagation.Key) *grpcsession.Edge {
		s, err := propagation.NewSigner(k)
		if err != nil {
			t.Fatal(err)
		}
		return grpcsession.New(grpcsession.WithOutbound(propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(s))))
	}

	c := edgeClient(t, addr, tp, signing(testKey))
	for range 2 { // the first call on a connection, and the next
		unary(t, bound(), c)
		if got := svc.next(t); !maps.Equal(got.session, wantSession()) {
			t.Fatalf("signed: session %v", got.session)
		}
	}
	if err := duplex(t, bound(), c, 1); err != nil {
		t.Fatal(err)
	}
	for range 1 + afterClose {
		svc.next(t)
	}
	for _, s := range serverSpans(t, exp, 3) {
		if attr(s, "session.chat_id") != wantSession()[otelsession.FieldChatID] {
			t.Fatalf("the verified session is not on the server span %s", s.Name)
		}
	}
	if n := policy.Counts(); n.Signed != 3 || n.Accepted != 3 {
		t.Fatalf("counts %+v, want 3 signed and accepted", n)
	}

	for name, edge := range map[string]*grpcsession.Edge{
		"unsigned":    grpcsession.New(allowAll),
		"unknown key": signing(propagation.Key{ID: "k9", Secret: testKey.Secret}),
		"withheld":    grpcsession.New(),
	} {
		c := edgeClient(t, addr, tp, edge)
		for range 2 {
			ctx, cancel := context.WithTimeout(bound(), 10*time.Second)
			_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
			cancel()
			if status.Code(err) != codes.Unauthenticated {
				t.Fatalf("%s: unary %v, want Unauthenticated", name, err)
			}
		}
		if err := duplex(t, bound(), c, 1); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("%s: stream %v, want Unauthenticated", name, err)
		}
		svc.idle(t)
	}
}

// countingProp counts its injections.
type countingProp struct {
	otelprop.TextMapPropagator
	n *atomic.Int64
}

func (p countingProp) Inject(ctx context.Context, c otelprop.TextMapCarrier) {
	p.n.Add(1)
	p.TextMapPropagator.Inject(ctx, c)
}

// The client Edge's interceptor learns that its connection's otelgrpc
// handler runs the Edge's propagator: the first call carries the session
// as the interceptor-only configuration does (the interceptor writes it),
// every later one only through the propagator, once. Both send the session
// to the allowed method only, remove session members and baggage-bin
// entries written into the outgoing metadata beforehand, and keep the
// application's own members.
func TestEdgeClientPairsWithItsPropagator(t *testing.T) {
	svc := newService()
	addr := serve(t, svc, grpcsession.ServerOptions(grpcsession.WithInbound(propagation.NewInbound(propagation.TrustLoopback())))...)
	var injects atomic.Int64
	out := propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{
		Prefixes: []string{"grpc://" + addr + "/grpc.testing.TestService/UnaryCall"}}))
	edge := grpcsession.New(grpcsession.WithOutbound(out), grpcsession.WithPropagator(countingProp{w3c, &injects}))
	c := edgeClient(t, addr, sdktrace.NewTracerProvider(), edge)
	prewritten := func(ctx context.Context) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "baggage", "session.chat_id=forged,app.x=1", "Baggage", "session%2Euser_id=forged", "baggage-bin", "x")
	}
	for i, wantInjects := range []int64{2, 1, 1} {
		injects.Store(0)
		unary(t, prewritten(bound()), c)
		got := svc.next(t)
		if !maps.Equal(got.session, wantSession()) || len(got.binary) > 0 {
			t.Fatalf("call %d: session %v, metadata %q %q", i, got.session, got.baggage, got.binary)
		}
		for _, l := range got.baggage {
			if containsAny(l, "forged", "%2E") {
				t.Fatalf("call %d: a pre-written session member left: %q", i, got.baggage)
			}
		}
		if n := injects.Load(); n != wantInjects {
			t.Fatalf("call %d: the metadata was written %d times, want %d", i, n, wantInjects)
		}
		if _, err := c.EmptyCall(prewritten(bound()), &testpb.Empty{}); err != nil {
			t.Fatal(err)
		}
		if got := svc.next(t); len(got.session) > 0 || got.hasSessionMember() || len(got.binary) > 0 {
			t.Fatalf("call %d: a refused method got %v %q %q", i, got.session, got.baggage, got.binary)
		}
		// Nothing in the context to send: the application's pre-written
		// member arrives, no session member does.
		unary(t, prewritten(context.Background()), c)
		if got := svc.next(t); got.hasSessionMember() || len(got.binary) > 0 {
			t.Fatalf("call %d: a pre-written session left: %q %q", i, got.baggage, got.binary)
		} else if v, _ := got.member("app.x"); v != "1" {
			t.Fatalf("call %d: the application's member was lost: %q", i, got.baggage)
		}
	}
	if n := out.Counts(); n.Sent != 3 || n.Withheld != 3 || n.Prewritten != 18 {
		t.Fatalf("outbound counts %+v", n)
	}
	if err := duplex(t, bound(), c, 1); err != nil {
		t.Fatal(err)
	}
	for range 1 + afterClose {
		if got := svc.next(t); len(got.session) > 0 {
			t.Fatalf("a refused stream method got %v", got.session)
		}
	}
}

// The client Edge's interceptors on a connection whose otelgrpc was not
// given the Edge's propagator (given the full W3C propagator, or absent):
// the session never leaves unchecked, however many calls are made, and it
// reaches the allowed method as the policy sends it.
func TestEdgeInterceptorWithoutPropagator(t *testing.T) {
	svc := newService()
	addr := serve(t, svc, grpcsession.ServerOptions(grpcsession.WithInbound(propagation.NewInbound(propagation.TrustLoopback())))...)
	out := propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{
		Prefixes: []string{"grpc://" + addr + "/grpc.testing.TestService/UnaryCall"}}))
	edge := grpcsession.New(grpcsession.WithOutbound(out))
	for name, opts := range map[string][]grpc.DialOption{
		"otelgrpc with W3C": append(edge.DialOptions(), grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithPropagators(w3c)))),
		"no otelgrpc":       edge.DialOptions(),
	} {
		c := dial(t, addr, opts...)
		for range 3 {
			unary(t, bound(), c)
			if got := svc.next(t); !maps.Equal(got.session, wantSession()) {
				t.Fatalf("%s: allowed method: session %v", name, got.session)
			}
			if _, err := c.EmptyCall(bound(), &testpb.Empty{}); err != nil {
				t.Fatal(err)
			}
			if got := svc.next(t); len(got.session) > 0 || got.hasSessionMember() {
				t.Fatalf("%s: refused method got %v %q", name, got.session, got.baggage)
			}
		}
	}
}

// The Edge's propagator given to otelgrpc on a connection without the
// Edge's interceptors fails closed: no session member leaves (also none
// the application wrote into the metadata), the trace context and the
// application's own baggage do, and WithOnError hears why. On a server
// without the Edge's interceptors it still decides the handler's session.
func TestEdgePropagatorWithoutInterceptor(t *testing.T) {
	svc := newService()
	tp, exp := edgeTracing(t)
	policy := propagation.NewInbound(propagation.TrustLoopback())
	server := grpcsession.New(grpcsession.WithInbound(policy))
	addr := serve(t, svc, grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(server.Propagator()))))

	// A trusted raw client's session reaches the handler and the span.
	raw := dial(t, addr, grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithPropagators(w3c))))
	unary(t, bound(), raw)
	if got := svc.next(t); !maps.Equal(got.session, wantSession()) {
		t.Fatalf("propagator-only server: session %v", got.session)
	}
	if s := serverSpans(t, exp, 1)[0]; attr(s, "session.chat_id") != wantSession()[otelsession.FieldChatID] {
		t.Fatal("propagator-only server: the accepted session is not on the server span")
	}

	var reported atomic.Value
	client := grpcsession.New(allowAll, grpcsession.WithOnError(func(_ context.Context, _ string, err error) { reported.Store(err) }))
	c := dial(t, addr, grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithPropagators(client.Propagator()))))
	ctx := metadata.AppendToOutgoingContext(bound(), "baggage", "session.user_id=forged,app.x=1")
	unary(t, ctx, c)
	got := svc.next(t)
	if len(got.session) > 0 || got.hasSessionMember() {
		t.Fatalf("a session left without the interceptor: %v %q", got.session, got.baggage)
	}
	if v, _ := got.member("app.tenant"); v != "acme" {
		t.Fatalf("the application's baggage was lost: %q", got.baggage)
	}
	if got.spanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("the trace context was lost: %v", got.spanContext)
	}
	if err, _ := reported.Load().(error); !errors.Is(err, grpcsession.ErrWithoutInterceptor) {
		t.Fatalf("WithOnError saw %v", err)
	}
	if n := policy.Counts(); n.Accepted != 1 {
		t.Fatalf("counts %+v", n)
	}
}

// The Edge's server interceptors beside otelgrpc given ExceptBaggage, or
// otelgrpc given another Edge's propagator: they judge the call themselves,
// as the package-level interceptors do, and never trust a verdict they did
// not reach.
func TestEdgeServerWithoutItsPropagator(t *testing.T) {
	for name, prop := range map[string]otelprop.TextMapPropagator{
		"ExceptBaggage":        grpcsession.ExceptBaggage(w3c),
		"another Edge's":       grpcsession.New(grpcsession.WithInbound(propagation.NewInbound(propagation.TrustAll))).Propagator(),
		"the full W3C, as raw": w3c,
	} {
		svc := newService()
		policy := propagation.NewInbound(propagation.TrustNone)
		edge := grpcsession.New(grpcsession.WithInbound(policy))
		addr := serve(t, svc, append(edge.ServerOptions(), grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithPropagators(prop))))...)
		unary(t, bound(), dial(t, addr, grpcsession.DialOptions(allowAll)...))
		if got := svc.next(t); len(got.session) > 0 || got.hasSessionMember() {
			t.Fatalf("%s: an untrusted session reached the handler: %v %q", name, got.session, got.baggage)
		}
		if n := policy.Counts(); n.Untrusted != 1 {
			t.Fatalf("%s: counts %+v", name, n)
		}
	}
}

// Over mutual TLS, the Edge's propagator judges the call in otelgrpc's
// handler with the peer of the connection, verified certificate included
// (gRPC puts the peer in the context before the stats handlers run): the
// gateway's certificate gets its session accepted, on the server span too;
// another certificate, or a plaintext client claiming the gateway's name as
// its :authority, does not, and the trust function saw the certificate's
// name and the connection's address.
func TestEdgeTLSTrustBySAN(t *testing.T) {
	p := newPKI(t)
	const gateway = "spiffe://test/ns/gw/sa/gateway"
	tp, exp := edgeTracing(t)
	var mu sync.Mutex
	var peers []propagation.Peer
	trust := grpcsession.TrustSANs(gateway)
	policy := propagation.NewInbound(func(ctx context.Context, peer propagation.Peer) bool {
		mu.Lock()
		peers = append(peers, peer)
		mu.Unlock()
		return trust(ctx, peer)
	})
	edge := grpcsession.New(grpcsession.WithInbound(policy))
	svc := newService()
	stats := grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(edge.Propagator())))
	tlsAddr := serve(t, svc, append(edge.ServerOptions(), stats, p.serverCreds())...)
	plainAddr := serve(t, svc, append(edge.ServerOptions(), stats)...)
	gwCert, otherCert := p.client(t, 20, gateway), p.client(t, 21, "spiffe://test/ns/x/sa/intruder")
	client := grpcsession.New(allowAll)
	for _, tc := range []struct {
		name     string
		addr     string
		opt      grpc.DialOption
		accept   bool
		peerName string
	}{
		{"gateway certificate", tlsAddr, p.clientCreds(&gwCert), true, gateway},
		{"other certificate", tlsAddr, p.clientCreds(&otherCert), false, "spiffe://test/ns/x/sa/intruder"},
		{"plaintext claiming the name", plainAddr, grpc.WithAuthority(gateway), false, gateway},
	} {
		exp.Reset()
		mu.Lock()
		peers = nil
		mu.Unlock()
		c := dial(t, tc.addr, append(client.DialOptions(), tc.opt,
			grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(client.Propagator()))))...)
		unary(t, bound(), c)
		if got := svc.next(t); tc.accept != (len(got.session) > 0) || !tc.accept && got.hasSessionMember() {
			t.Fatalf("%s: session %v %q, want accepted %v", tc.name, got.session, got.baggage, tc.accept)
		}
		if got := attr(serverSpans(t, exp, 1)[0], "session.chat_id"); tc.accept != (got != "") {
			t.Fatalf("%s: server span session.chat_id %q, want accepted %v", tc.name, got, tc.accept)
		}
		mu.Lock()
		if len(peers) != 1 || peers[0].Name != tc.peerName || peers[0].Addr.String() != "127.0.0.1" {
			t.Fatalf("%s: the trust function saw %+v, want one peer 127.0.0.1 named %q", tc.name, peers, tc.peerName)
		}
		mu.Unlock()
	}
}

// A session signed with the right key id and the wrong secret, from a peer
// the server does not trust, is neither on otelgrpc's server span nor in the
// handler, and WithOnError hears ErrBadSignature; the same session signed
// with the server's key is accepted.
func TestEdgeForgedSignature(t *testing.T) {
	tp, exp := edgeTracing(t)
	verifier, err := propagation.NewVerifier([]propagation.Key{testKey})
	if err != nil {
		t.Fatal(err)
	}
	var reported atomic.Value
	svc := newService()
	addr := edgeServer(t, svc, tp, grpcsession.New(grpcsession.WithInbound(propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier))),
		grpcsession.WithOnError(func(_ context.Context, _ string, err error) { reported.Store(err) })))
	for _, tc := range []struct {
		key    propagation.Key
		accept bool
	}{
		{propagation.Key{ID: testKey.ID, Secret: []byte("a forger's secret, at least 32 bytes")}, false},
		{testKey, true},
	} {
		exp.Reset()
		s, err := propagation.NewSigner(tc.key)
		if err != nil {
			t.Fatal(err)
		}
		unary(t, bound(), edgeClient(t, addr, tp, grpcsession.New(grpcsession.WithOutbound(propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(s))))))
		got := svc.next(t)
		chat := attr(serverSpans(t, exp, 1)[0], "session.chat_id")
		if tc.accept != (len(got.session) > 0) || tc.accept != (chat != "") || !tc.accept && got.hasSessionMember() {
			t.Fatalf("accept %v: handler %v %q, span session.chat_id %q", tc.accept, got.session, got.baggage, chat)
		}
		if err, _ := reported.Load().(error); !tc.accept && !errors.Is(err, propagation.ErrBadSignature) {
			t.Fatalf("WithOnError saw %v", err)
		}
	}
}

// baggageReplacer is a stats handler that replaces the context's baggage
// when it tags a call, as a second propagating handler registered after
// otelgrpc's would.
type baggageReplacer struct{ b baggage.Baggage }

func (r baggageReplacer) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return baggage.ContextWithBaggage(ctx, r.b)
}
func (baggageReplacer) HandleRPC(context.Context, stats.RPCStats) {}
func (baggageReplacer) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (baggageReplacer) HandleConn(context.Context, stats.ConnStats) {}

// The handler runs with the baggage the Edge judged in otelgrpc's step, even
// when a stats handler registered after otelgrpc's put another one into the
// context since: a session that no policy judged never reaches it.
func TestEdgeHandlerKeepsTheJudgedBaggage(t *testing.T) {
	tp, _ := edgeTracing(t)
	forged, err := baggage.Parse("session.platform=forged,session.chat_id=elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		trust propagation.TrustFunc
	}{{"trusted", propagation.TrustLoopback()}, {"untrusted", propagation.TrustNone}} {
		t.Run(tc.name, func(t *testing.T) {
			svc := newService()
			edge := grpcsession.New(grpcsession.WithInbound(propagation.NewInbound(tc.trust)))
			addr := serve(t, svc, append(edge.ServerOptions(),
				grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(edge.Propagator()))),
				grpc.StatsHandler(baggageReplacer{forged}))...)
			unary(t, bound(), edgeClient(t, addr, tp, grpcsession.New(allowAll)))
			got := svc.next(t)
			want := map[otelsession.Field]string{}
			if tc.name == "trusted" {
				want = wantSession()
			}
			if !maps.Equal(got.session, want) {
				t.Fatalf("the handler's session is %v, want %v", got.session, want)
			}
		})
	}
}

// A conversation's calls through an Edge whose policy keeps its cache of
// accepted sessions (the default): from the third call the policy serves
// the session from the cache, and each handler and server span still holds
// its own call's session, its message id included, with the application's
// own baggage beside it.
func TestEdgeServesAConversationFromTheInboundCache(t *testing.T) {
	tp, exp := edgeTracing(t)
	svc := newService()
	policy := propagation.NewInbound(propagation.TrustLoopback())
	addr := edgeServer(t, svc, tp, grpcsession.New(grpcsession.WithInbound(policy)))
	c := edgeClient(t, addr, tp, grpcsession.New(allowAll))
	const calls = 6
	for i := range calls {
		id := fmt.Sprint("msg-", i)
		unary(t, otelsession.With(bound(), otelsession.FieldMessageID, id), c)
		got := svc.next(t)
		want := wantSession()
		want[otelsession.FieldMessageID] = id
		if !maps.Equal(got.session, want) {
			t.Fatalf("call %d: session %v, want %v", i, got.session, want)
		}
		if !strings.Contains(strings.Join(got.baggage, ","), "app.tenant=acme") {
			t.Fatalf("call %d: the application's baggage is gone: %q", i, got.baggage)
		}
	}
	seen := map[string]bool{}
	for _, s := range serverSpans(t, exp, calls) {
		seen[attr(s, "session.message_id")] = true
	}
	if len(seen) != calls {
		t.Fatalf("the server spans hold the message ids %v, want %d distinct", seen, calls)
	}
	if n := policy.Counts(); n.Accepted != calls || n.Cached != calls-2 {
		t.Fatalf("counts %+v: want %d accepted, %d of them from the cache", n, calls, calls-2)
	}
}

// Calls carrying only the application's own baggage, of two tenants,
// through an Edge whose policy keeps a cache: from each line's third call
// its baggage is served from the cache of lines that name no session, and
// every handler holds its own call's baggage, no session, and its own
// trace. The cache is the smallest, so that both lines share its one set
// (and its four notes of lines seen once: each line comes three times in a
// row first, so that the other's note cannot overwrite its own).
func TestEdgeServesTheApplicationsBaggageFromTheInboundCache(t *testing.T) {
	tp, _ := edgeTracing(t)
	svc := newService()
	policy := propagation.NewInbound(propagation.TrustLoopback(), propagation.WithCacheSize(4))
	addr := edgeServer(t, svc, tp, grpcsession.New(grpcsession.WithInbound(policy)))
	c := edgeClient(t, addr, tp, grpcsession.New(allowAll))
	tenants := []int{0, 0, 0, 1, 1, 1, 0, 1, 0, 1}
	for i, n := range tenants {
		tenant := fmt.Sprint("t-", n)
		m, _ := baggage.NewMemberRaw("app.tenant", tenant)
		b, _ := baggage.New(m)
		ctx := trace.ContextWithSpanContext(baggage.ContextWithBaggage(context.Background(), b), trace.SpanContextFromContext(bound()))
		unary(t, ctx, c)
		got := svc.next(t)
		if got.inContext != "app.tenant="+tenant {
			t.Fatalf("call %d: the handler's baggage is %q, want app.tenant=%s", i, got.inContext, tenant)
		}
		if len(got.session) != 0 {
			t.Fatalf("call %d: the handler holds a session: %v", i, got.session)
		}
		if got.spanContext.TraceID() != trace.SpanContextFromContext(bound()).TraceID() {
			t.Fatalf("call %d: the handler's trace is %s", i, got.spanContext.TraceID())
		}
	}
	if n := policy.Counts(); n.CachedNoSession != uint64(len(tenants)-4) || n.Accepted+n.Untrusted+n.Rejected != 0 {
		t.Fatalf("counts %+v: want %d lines served from the cache, no session judged", n, len(tenants)-4)
	}
}
