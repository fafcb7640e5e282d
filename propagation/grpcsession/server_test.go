package grpcsession_test

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	otelprop "go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/grpcsession"
)

var allowAll = grpcsession.WithOutbound(propagation.NewOutbound(propagation.AllowAll))

// A session sent over a real loopback TCP connection, unary and on a
// bidirectional stream, reaches a server that trusts the loopback network:
// every message handler of the stream, also after the client closed its
// side, sees the call's session.
func TestTrustedPeerPlaintext(t *testing.T) {
	svc := newService()
	policy := propagation.NewInbound(propagation.TrustLoopback())
	addr := serve(t, svc, grpcsession.ServerOptions(grpcsession.WithInbound(policy), grpcsession.WithPropagator(w3c))...)
	c := dial(t, addr, grpcsession.DialOptions(allowAll, grpcsession.WithPropagator(w3c))...)
	want := wantSession()

	unary(t, bound(), c)
	got := svc.next(t)
	if !maps.Equal(got.session, want) {
		t.Fatalf("unary: session %v, want %v", got.session, want)
	}
	if v, _ := got.member("app.tenant"); v != "acme" {
		t.Fatalf("the application's own member did not arrive: %q", got.baggage)
	}
	if got.spanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("trace context did not arrive: %v", got.spanContext)
	}

	if err := duplex(t, bound(), c, 3); err != nil {
		t.Fatal(err)
	}
	for i := range 3 + afterClose {
		r := svc.next(t)
		if !maps.Equal(r.session, want) {
			t.Fatalf("stream message %d (%s): session %v, want %v", i, r.method, r.session, want)
		}
	}
	if n := policy.Counts().Accepted; n != 2 {
		t.Fatalf("accepted %d sessions, want 2 (one per call, not per message)", n)
	}
}

// From a peer the policy does not trust, an unsigned session and one signed
// with a key the server does not hold, or with the right key id and the
// wrong secret, are stripped and counted; the call runs, and the metadata
// the handler can read holds no session member either. A session signed
// with the server's key is accepted.
func TestUntrustedPeerSignedForgedUnsigned(t *testing.T) {
	verifier, err := propagation.NewVerifier([]propagation.Key{testKey})
	if err != nil {
		t.Fatal(err)
	}
	svc := newService()
	policy := propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier))
	var mu sync.Mutex
	var refusals []error
	onError := grpcsession.WithOnError(func(_ context.Context, _ string, err error) {
		mu.Lock()
		defer mu.Unlock()
		refusals = append(refusals, err)
	})
	addr := serve(t, svc, grpcsession.ServerOptions(grpcsession.WithInbound(policy), onError)...)

	signer := func(k propagation.Key) grpcsession.Option {
		s, err := propagation.NewSigner(k)
		if err != nil {
			t.Fatal(err)
		}
		return grpcsession.WithOutbound(propagation.NewOutbound(propagation.AllowAll, propagation.WithSigner(s)))
	}
	for _, tc := range []struct {
		name   string
		client grpcsession.Option
		accept bool
		count  func(propagation.Counts) uint64
		is     error
	}{
		{"unsigned", allowAll, false, func(c propagation.Counts) uint64 { return c.Untrusted }, nil},
		{"unknown key", signer(propagation.Key{ID: "k9", Secret: testKey.Secret}), false, func(c propagation.Counts) uint64 { return c.UnknownKey }, propagation.ErrUnknownKey},
		{"forged", signer(propagation.Key{ID: testKey.ID, Secret: []byte("a forger's secret, at least 32 bytes")}), false, func(c propagation.Counts) uint64 { return c.BadSignature }, propagation.ErrBadSignature},
		{"signed", signer(testKey), true, func(c propagation.Counts) uint64 { return c.Signed }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, addr, grpcsession.DialOptions(tc.client)...)
			before := tc.count(policy.Counts())
			mu.Lock()
			refusals = nil
			mu.Unlock()
			for _, call := range []string{"unary", "stream"} {
				if call == "unary" {
					unary(t, bound(), c)
				} else if err := duplex(t, bound(), c, 1); err != nil {
					t.Fatal(err)
				}
				for range map[string]int{"unary": 1, "stream": 1 + afterClose}[call] {
					got := svc.next(t)
					if tc.accept != (len(got.session) > 0) {
						t.Fatalf("%s: session %v, accepted %v", call, got.session, tc.accept)
					}
					if !tc.accept && got.hasSessionMember() {
						t.Fatalf("%s: the handler can still read the refused session in its metadata: %q", call, got.baggage)
					}
					if v, _ := got.member("app.tenant"); v != "acme" {
						t.Fatalf("%s: the application's own member was lost: %q", call, got.baggage)
					}
				}
			}
			if n := tc.count(policy.Counts()) - before; n != 2 {
				t.Fatalf("counted %d, want 2", n)
			}
			mu.Lock()
			defer mu.Unlock()
			if tc.is != nil && (len(refusals) != 2 || !errors.Is(refusals[0], tc.is)) {
				t.Fatalf("WithOnError saw %v, want 2 × %v", refusals, tc.is)
			}
		})
	}
}

// Over TLS, trust follows the verified client certificate: a client whose
// certificate names the trusted workload is accepted, one with another name
// or without a certificate is not, and neither is a plaintext client that
// claims the trusted name as its :authority. The peer's name is the SAN
// only when the certificate was verified.
func TestTLSTrustBySAN(t *testing.T) {
	p := newPKI(t)
	const gateway = "spiffe://test/ns/gw/sa/gateway"
	var mu sync.Mutex
	var peers []propagation.Peer
	trust := grpcsession.TrustSANs(gateway)
	policy := propagation.NewInbound(func(ctx context.Context, peer propagation.Peer) bool {
		mu.Lock()
		peers = append(peers, peer)
		mu.Unlock()
		return trust(ctx, peer)
	})
	svc := newService()
	tlsAddr := serve(t, svc, append(grpcsession.ServerOptions(grpcsession.WithInbound(policy)), p.serverCreds())...)
	plainAddr := serve(t, svc, grpcsession.ServerOptions(grpcsession.WithInbound(policy))...)
	gwCert := p.client(t, 10, gateway)
	otherCert := p.client(t, 11, "spiffe://test/ns/x/sa/intruder")

	for _, tc := range []struct {
		name     string
		addr     string
		opts     []grpc.DialOption
		accept   bool
		peerName string
	}{
		{"gateway certificate", tlsAddr, []grpc.DialOption{p.clientCreds(&gwCert)}, true, gateway},
		{"other certificate", tlsAddr, []grpc.DialOption{p.clientCreds(&otherCert)}, false, "spiffe://test/ns/x/sa/intruder"},
		{"no certificate", tlsAddr, []grpc.DialOption{p.clientCreds(nil)}, false, tlsAddr},
		{"plaintext claiming the name", plainAddr, []grpc.DialOption{grpc.WithAuthority(gateway)}, false, gateway},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, tc.addr, append(tc.opts, grpcsession.DialOptions(allowAll)...)...)
			mu.Lock()
			peers = nil
			mu.Unlock()
			unary(t, bound(), c)
			if got := svc.next(t); tc.accept != (len(got.session) > 0) {
				t.Fatalf("unary: session %v, want accepted %v", got.session, tc.accept)
			}
			if err := duplex(t, bound(), c, 2); err != nil {
				t.Fatal(err)
			}
			for range 2 + afterClose {
				if got := svc.next(t); tc.accept != (len(got.session) > 0) {
					t.Fatalf("stream: session %v, want accepted %v", got.session, tc.accept)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(peers) != 2 {
				t.Fatalf("the trust function ran %d times, want 2", len(peers))
			}
			for _, peer := range peers {
				if peer.Transport != "grpc" || peer.Name != tc.peerName || peer.Addr != netip.MustParseAddr("127.0.0.1") {
					t.Fatalf("peer %+v, want grpc 127.0.0.1 named %q", peer, tc.peerName)
				}
			}
		})
	}
}

// WithUnauthenticated refuses calls without an accepted session, unary and
// streaming, before the handler runs; a trusted session passes.
func TestUnauthenticated(t *testing.T) {
	svc := newService()
	trusted := serve(t, svc, grpcsession.ServerOptions(grpcsession.WithUnauthenticated(),
		grpcsession.WithInbound(propagation.NewInbound(propagation.TrustLoopback())))...)
	untrusted := serve(t, svc, grpcsession.ServerOptions(grpcsession.WithUnauthenticated())...)

	for _, tc := range []struct {
		name string
		addr string
		ctx  context.Context
		opts []grpcsession.Option
	}{
		{"missing", trusted, context.Background(), []grpcsession.Option{allowAll}},
		{"withheld by the client", trusted, bound(), nil},
		{"refused", untrusted, bound(), []grpcsession.Option{allowAll}},
		{"malformed", trusted, metadata.AppendToOutgoingContext(context.Background(), "baggage", "session.chat_id=%FF%FE"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, tc.addr, grpcsession.DialOptions(tc.opts...)...)
			ctx, cancel := context.WithTimeout(tc.ctx, 10*time.Second)
			defer cancel()
			_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
			if status.Code(err) != codes.Unauthenticated {
				t.Fatalf("unary: %v, want Unauthenticated", err)
			}
			if err := duplex(t, tc.ctx, c, 1); status.Code(err) != codes.Unauthenticated {
				t.Fatalf("stream: %v, want Unauthenticated", err)
			}
			svc.idle(t)
		})
	}
	t.Run("accepted", func(t *testing.T) {
		c := dial(t, trusted, grpcsession.DialOptions(allowAll)...)
		unary(t, bound(), c)
		if got := svc.next(t); len(got.session) == 0 {
			t.Fatal("no session")
		}
		if err := duplex(t, bound(), c, 1); err != nil {
			t.Fatal(err)
		}
		for range 1 + afterClose {
			svc.next(t)
		}
	})
}

// A baggage-bin entry refuses the call's baggage: no W3C format is binary,
// so it is tampering or confusion, and nothing behind the interceptor may
// decode it.
func TestBaggageBinRefused(t *testing.T) {
	svc := newService()
	var got error
	addr := serve(t, svc, grpcsession.ServerOptions(
		grpcsession.WithInbound(propagation.NewInbound(propagation.TrustAll)),
		grpcsession.WithOnError(func(_ context.Context, _ string, err error) { got = err }))...)
	// A raw client: nothing filters what it writes.
	c := dial(t, addr)
	ctx := metadata.AppendToOutgoingContext(context.Background(),
		"baggage", "session.chat_id=forged,app.x=1", "baggage-bin", "session.user_id=forged")
	unary(t, ctx, c)
	r := svc.next(t)
	if len(r.session) > 0 || r.hasSessionMember() || len(r.binary) > 0 {
		t.Fatalf("session %v, metadata %q, %q", r.session, r.baggage, r.binary)
	}
	if !errors.Is(got, propagation.ErrMalformedMember) {
		t.Fatalf("WithOnError saw %v", got)
	}
}

// Incoming metadata built by hand (an in-process call, a proxy) can hold
// "Baggage" and "baggage" at once. metadata.FromIncomingContext lower-cases
// them into one key and keeps either list, changing from call to call, so
// the handler must read the lines that were judged, not whichever spelling
// its own read happens to keep: here an invalid line beside a session
// member (found by FuzzServerMetadata). Both server configurations are
// held to it: the interceptor alone, and an Edge whose propagator judged
// the call inside otelgrpc's handler (given, as otelgrpc's copy may be,
// the lower-case spelling's list). Map order varies, so each call is
// repeated.
func TestTwoSpellingsOfBaggageHandlerReadsWhatWasJudged(t *testing.T) {
	opts := []grpcsession.Option{
		grpcsession.WithPropagator(otelprop.Baggage{}),
		grpcsession.WithInbound(propagation.NewInbound(propagation.TrustNone)),
	}
	edge := grpcsession.New(opts...)
	info := &grpc.UnaryServerInfo{FullMethod: "/svc.v1.Svc/Call"}
	for _, withEdge := range []bool{false, true} {
		interceptor := grpcsession.UnaryServerInterceptor(opts...)
		if withEdge {
			interceptor = edge.UnaryServerInterceptor()
		}
		for i := range 200 {
			md := metadata.MD{"Baggage": {"session.chat_id=forged"}, "baggage": {"not a member"}}
			if i%2 == 1 {
				md = metadata.MD{"baggage": {"session.chat_id=forged"}, "Baggage": {"not a member"}}
			}
			ctx := metadata.NewIncomingContext(context.Background(), md)
			if withEdge {
				ctx = edge.Propagator().Extract(ctx, grpcsession.MetadataCarrier{"baggage": md["baggage"]})
			}
			_, err := interceptor(ctx, nil, info, func(ctx context.Context, _ any) (any, error) {
				if _, st := otelsession.Lookup(ctx, otelsession.FieldChatID); st != otelsession.Unset {
					t.Fatalf("edge %v, call %d: an untrusted session was accepted", withEdge, i)
				}
				seen, _ := metadata.FromIncomingContext(ctx)
				for _, key := range []string{"baggage", "Baggage"} {
					seen[key+" (by value)"] = metadata.ValueFromIncomingContext(ctx, key)
				}
				for k, lines := range seen {
					for _, l := range lines {
						if strings.Contains(l, "session.") {
							t.Fatalf("edge %v, call %d: the handler can read %q under %q", withEdge, i, l, k)
						}
					}
				}
				return nil, nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}

// otelgrpc's server span says why a session was refused or stripped: a
// session.refused event with its reason. A call with a session that is
// accepted has none.
func TestServerSpanRecordsRefusals(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	stats := grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(w3c)))
	reasons := func() []string {
		var out []string
		for _, s := range exp.GetSpans() {
			if s.SpanKind != trace.SpanKindServer {
				continue
			}
			for _, e := range s.Events {
				for _, kv := range e.Attributes {
					if e.Name == "session.refused" && kv.Key == "session.refusal.reason" {
						out = append(out, kv.Value.AsString())
					}
				}
			}
		}
		return out
	}
	for _, tc := range []struct {
		trust propagation.TrustFunc
		want  string
	}{
		{propagation.TrustNone, "untrusted: the session carried no valid signature and the peer (grpc"},
		{propagation.TrustLoopback(), ""},
	} {
		exp.Reset()
		svc := newService()
		addr := serve(t, svc, append(grpcsession.ServerOptions(grpcsession.WithInbound(propagation.NewInbound(tc.trust)),
			grpcsession.WithPropagator(w3c)), stats)...)
		c := dial(t, addr, grpcsession.DialOptions(allowAll, grpcsession.WithPropagator(w3c))...)
		unary(t, bound(), c)
		svc.next(t)
		// The server span ends after the handler returns: wait for it.
		deadline := time.Now().Add(5 * time.Second)
		for len(exp.GetSpans()) == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		got := reasons()
		switch {
		case tc.want == "" && len(got) != 0:
			t.Errorf("an accepted session: refusal events %q", got)
		case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
			t.Errorf("refusal events %q, want one saying %q", got, tc.want)
		}
	}
}

// The interceptor reads a call's metadata in place when its keys are
// lower-case, as gRPC delivers them, and must never write that map: gRPC
// and every other reader of the call share it. A refused or stripped
// session, and a binary baggage entry, are taken out of a copy the handler
// reads instead. A reader of the same map runs beside each call, so that
// the race detector sees any write; the map must also be unchanged after.
func TestServerNeverWritesTheCallsMetadata(t *testing.T) {
	info := &grpc.UnaryServerInfo{FullMethod: "/svc.v1.Svc/Call"}
	interceptor := grpcsession.UnaryServerInterceptor(
		grpcsession.WithPropagator(otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})),
		grpcsession.WithInbound(propagation.NewInbound(propagation.TrustNone)))
	for name, tc := range map[string]struct {
		baggage, bin []string
		asItCame     bool // the handler reads the baggage lines as they came
	}{
		"session of an untrusted peer": {baggage: []string{"session.chat_id=C1,app.x=1"}},
		"binary baggage":               {baggage: []string{"app.x=1"}, bin: []string{"session.chat_id=C1"}},
		"the application's baggage":    {baggage: []string{"app.x=1,app.y=2"}, asItCame: true},
		"no baggage":                   {asItCame: true},
	} {
		t.Run(name, func(t *testing.T) {
			md := metadata.MD{":authority": {"127.0.0.1:1"}, "content-type": {"application/grpc"}}
			if tc.baggage != nil {
				md["baggage"] = tc.baggage
			}
			if tc.bin != nil {
				md["baggage-bin"] = tc.bin
			}
			want := md.Copy()
			stop := make(chan struct{})
			read := make(chan int)
			go func() {
				n := 0
				for {
					select {
					case <-stop:
						read <- n
						return
					default:
						for _, vs := range md {
							n += len(vs)
						}
					}
				}
			}()
			for range 50 {
				_, err := interceptor(metadata.NewIncomingContext(context.Background(), md), nil, info,
					func(ctx context.Context, _ any) (any, error) {
						seen, _ := metadata.FromIncomingContext(ctx)
						if len(seen["baggage-bin"]) > 0 {
							t.Errorf("the handler can read baggage-bin %q", seen["baggage-bin"])
						}
						for _, l := range seen["baggage"] {
							if strings.Contains(l, "session.") {
								t.Errorf("the handler can read %q", l)
							}
						}
						if tc.asItCame && !slices.Equal(seen["baggage"], tc.baggage) {
							t.Errorf("the handler reads baggage %q, want %q as it came", seen["baggage"], tc.baggage)
						}
						return nil, nil
					})
				if err != nil {
					t.Fatal(err)
				}
			}
			close(stop)
			<-read
			if !maps.EqualFunc(md, want, slices.Equal) {
				t.Fatalf("the call's metadata became %q, was %q", md, want)
			}
		})
	}
}

// The interceptor leaves the trace context to a stats handler that ran
// before it and extracts it itself only when none did: the handler's span
// context is the server span otelgrpc started (local), the call's own
// trace context as otelgrpc without a tracer provider leaves it (remote),
// or, with no stats handler, the one the interceptor extracted. The
// session is accepted in each case.
func TestServerTraceContextBesideAStatsHandler(t *testing.T) {
	info := &grpc.UnaryServerInfo{FullMethod: "/svc.v1.Svc/Call"}
	interceptor := grpcsession.UnaryServerInterceptor(grpcsession.WithPropagator(w3c),
		grpcsession.WithInbound(propagation.NewInbound(propagation.TrustAll)))
	md := metadata.MD{}
	w3c.Inject(bound(), otelprop.TextMapCarrier(grpcsession.MetadataCarrier(md)))
	sent := trace.SpanContextFromContext(bound())
	incoming := metadata.NewIncomingContext(context.Background(), md)
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	serverCtx, serverSpan := tp.Tracer("test").Start(grpcsession.ExceptBaggage(w3c).Extract(incoming, grpcsession.MetadataCarrier(md)), "server")
	defer serverSpan.End()
	for name, tc := range map[string]struct {
		ctx  context.Context
		want trace.SpanContext
	}{
		"no stats handler":                   {incoming, sent.WithRemote(true)},
		"otelgrpc without a tracer provider": {grpcsession.ExceptBaggage(w3c).Extract(incoming, grpcsession.MetadataCarrier(md)), sent.WithRemote(true)},
		"otelgrpc's server span":             {serverCtx, serverSpan.SpanContext()},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := interceptor(tc.ctx, nil, info, func(ctx context.Context, _ any) (any, error) {
				if got := trace.SpanContextFromContext(ctx); !got.Equal(tc.want) {
					t.Errorf("the handler's span context is %v, want %v", got, tc.want)
				}
				if v, _ := otelsession.Lookup(ctx, otelsession.FieldChatID); v != wantSession()[otelsession.FieldChatID] {
					t.Errorf("the handler's chat id is %q", v)
				}
				return nil, nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
