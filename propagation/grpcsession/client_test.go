package grpcsession_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/grpcsession"
	"github.com/sessionwire/sessionwire/propagation/internal/sessiontest"
)

// The outbound policy decides by the target's authority and the call's full
// method: a prefix naming one method of one service at one authority lets
// the session go to that method only; another method of the same service,
// or the same server reached under another authority, gets trace context
// and the application's members but no session member.
func TestEgressByAuthorityAndMethod(t *testing.T) {
	svc := newService()
	addr := serve(t, svc, grpcsession.ServerOptions(grpcsession.WithInbound(propagation.NewInbound(propagation.TrustAll)))...)
	_, port, _ := net.SplitHostPort(addr)
	byURL := propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{
		Prefixes: []string{"grpc://" + addr + "/grpc.testing.TestService/UnaryCall"}}))
	byName := propagation.NewOutbound(propagation.AllowNames(propagation.TransportGRPC, "localhost"))

	for _, tc := range []struct {
		name, target string
		policy       *propagation.Outbound
		unary, empty bool // whether UnaryCall and EmptyCall receive the session
	}{
		{"prefix, its authority", addr, byURL, true, false},
		{"prefix, dns scheme", "dns:///" + addr, byURL, true, false},
		{"prefix, another authority", "localhost:" + port, byURL, false, false},
		{"name, allowed host", "localhost:" + port, byName, true, true},
		{"name, other host", addr, byName, false, false},
		{"default policy", addr, nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, tc.target, grpcsession.DialOptions(grpcsession.WithOutbound(tc.policy))...)
			unary(t, bound(), c)
			check(t, "UnaryCall", svc.next(t), tc.unary)
			ctx, cancel := context.WithTimeout(bound(), 10*time.Second)
			defer cancel()
			if _, err := c.EmptyCall(ctx, &testpb.Empty{}); err != nil {
				t.Fatal(err)
			}
			check(t, "EmptyCall", svc.next(t), tc.empty)
		})
	}
}

func check(t *testing.T, call string, got received, session bool) {
	t.Helper()
	if session {
		if !maps.Equal(got.session, wantSession()) {
			t.Fatalf("%s: session %v, want %v", call, got.session, wantSession())
		}
	} else if got.hasSessionMember() || len(got.session) > 0 {
		t.Fatalf("%s: a session reached a destination the policy does not allow: %q", call, got.baggage)
	}
	if v, _ := got.member("app.tenant"); v != "acme" {
		t.Fatalf("%s: the application's own member did not arrive: %q", call, got.baggage)
	}
	if got.spanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("%s: trace context did not arrive: %v", call, got.spanContext)
	}
}

// Session members other code already wrote into the outgoing metadata,
// through AppendToOutgoingContext, a hand-built MD with a "Baggage" key,
// percent-encoded or upper-case keys, never leave: to an allowed
// destination the session is the context's, elsewhere there is none.
func TestPrewrittenMetadataFiltered(t *testing.T) {
	svc := newService()
	addr := serve(t, svc) // no policy: the handler reads the metadata as it came over the wire
	prewritten := func(ctx context.Context) context.Context {
		ctx = metadata.NewOutgoingContext(ctx, metadata.MD{
			"Baggage": {"session.chat_id=forged-chat,app.y=2"},
			"x-other": {"kept"},
		})
		return metadata.AppendToOutgoingContext(ctx,
			"baggage", "session.user_id=forged-user,app.x=1",
			"baggage", "session%2Echat_id=forged,SESSION.THREAD_ID=forged",
			"baggage-bin", "session.user_id=forged-bin")
	}
	for _, allowed := range []bool{true, false} {
		t.Run(fmt.Sprint("allowed=", allowed), func(t *testing.T) {
			policy := propagation.NewOutbound(propagation.AllowNone)
			if allowed {
				policy = propagation.NewOutbound(propagation.AllowAll)
			}
			c := dial(t, addr, grpcsession.DialOptions(grpcsession.WithOutbound(policy))...)

			unary(t, prewritten(bound()), c)
			got := svc.next(t)
			for key, want := range map[string]string{"session.chat_id": "C024BE91L", "session.user_id": "U1", "app.tenant": "acme"} {
				v, ok := got.member(key)
				if key == "app.tenant" || allowed {
					if v != want {
						t.Fatalf("%s = %q on the wire, want %q: %q", key, v, want, got.baggage)
					}
				} else if ok {
					t.Fatalf("%s reached a destination the policy does not allow: %q", key, got.baggage)
				}
			}
			if len(got.binary) > 0 {
				t.Fatalf("a pre-written baggage-bin entry left: %q", got.binary)
			}
			for _, l := range got.baggage {
				if containsAny(l, "forged", "%2E", "SESSION.") {
					t.Fatalf("a pre-written session member left: %q", got.baggage)
				}
			}
			if n := policy.Counts().Prewritten; n != 4 {
				t.Fatalf("Prewritten = %d, want 4", n)
			}
			before := policy.Counts().Prewritten

			// A pre-written session with nothing in the context to send. The
			// application's pre-written members are kept (when the context
			// has baggage of its own, the propagator replaces the entry with
			// it, as otelgrpc does).
			unary(t, prewritten(context.Background()), c)
			got = svc.next(t)
			if got.hasSessionMember() {
				t.Fatalf("a pre-written session left without a session in the context: %q", got.baggage)
			}
			for _, k := range []string{"app.x", "app.y"} {
				if _, ok := got.member(k); !ok {
					t.Fatalf("the pre-written application member %s was lost: %q", k, got.baggage)
				}
			}
			if n := policy.Counts().Prewritten - before; n != 4 {
				t.Fatalf("Prewritten grew by %d, want 4", n)
			}
		})
	}
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		for i := 0; i+len(sub) <= len(s); i++ {
			if s[i:i+len(sub)] == sub {
				return true
			}
		}
	}
	return false
}

// With otelgrpc's stats handlers on both sides, given before or after the
// interceptors, or given only the trace-context propagator (or
// ExceptBaggage): a signed session reaches the allowed service and verifies
// there (otelgrpc's second injection on the client writes the signed
// session, not the bare one); the service reached under another authority
// gets no session although otelgrpc injects the whole baggage of the
// context; the handler's current span is otelgrpc's server span, a child of
// the client span, for unary calls and streams.
func TestWithOtelgrpc(t *testing.T) {
	signer, err := propagation.NewSigner(testKey)
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := propagation.NewVerifier([]propagation.Key{testKey})
	if err != nil {
		t.Fatal(err)
	}
	for _, order := range []string{"stats first", "interceptors first", "otelgrpc with trace context only", "otelgrpc with ExceptBaggage"} {
		t.Run(order, func(t *testing.T) {
			tp, exp := sessiontest.NewTracing(t)
			otelOpts := []otelgrpc.Option{otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(w3c)}
			switch order {
			case "otelgrpc with trace context only":
				// The cheaper configuration: the interceptors alone carry the baggage.
				otelOpts = []otelgrpc.Option{otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(otelprop.TraceContext{})}
			case "otelgrpc with ExceptBaggage":
				// The same, keeping whatever else the program's propagator carries.
				otelOpts = []otelgrpc.Option{otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(grpcsession.ExceptBaggage(nil))}
			}
			serverOpts := func(policy *propagation.Inbound) []grpc.ServerOption {
				stats := grpc.StatsHandler(otelgrpc.NewServerHandler(otelOpts...))
				mine := grpcsession.ServerOptions(grpcsession.WithInbound(policy))
				if order == "stats first" {
					return append([]grpc.ServerOption{stats}, mine...)
				}
				return append(mine, stats)
			}
			svc := newService()
			policy := propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier))
			addr := serve(t, svc, serverOpts(policy)...)
			out := propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{
				Prefixes: []string{"grpc://" + addr + "/grpc.testing.TestService/"}}), propagation.WithSigner(signer))
			stats := grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelOpts...))
			mine := grpcsession.DialOptions(grpcsession.WithOutbound(out))
			clientOpts := append([]grpc.DialOption{stats}, mine...)
			if order == "interceptors first" {
				clientOpts = append(mine, stats)
			}
			allowed := dial(t, addr, clientOpts...)
			// The other authority is a server without the policy: its handler
			// reads the metadata as it came over the wire.
			rawSvc := newService()
			rawAddr := serve(t, rawSvc, grpc.StatsHandler(otelgrpc.NewServerHandler(otelOpts...)))
			_, rawPort, _ := net.SplitHostPort(rawAddr)
			other := dial(t, "localhost:"+rawPort, clientOpts...)

			unary(t, bound(), allowed)
			got := svc.next(t)
			if !maps.Equal(got.session, wantSession()) {
				t.Fatalf("unary: session %v", got.session)
			}
			if _, ok := got.member(otelsession.SignatureKey); !ok {
				t.Fatalf("no signature on the wire: %q", got.baggage)
			}
			serverSpanIs(t, exp, got.spanContext)

			if err := duplex(t, bound(), allowed, 2); err != nil {
				t.Fatal(err)
			}
			for range 2 + afterClose {
				if got := svc.next(t); !maps.Equal(got.session, wantSession()) {
					t.Fatalf("stream: session %v", got.session)
				}
			}
			if c := policy.Counts(); c.Signed != 2 || c.Accepted != 2 {
				t.Fatalf("counts %+v, want 2 signed and accepted", c)
			}

			unary(t, bound(), other)
			if got := rawSvc.next(t); got.hasSessionMember() || len(got.session) > 0 {
				t.Fatalf("another authority received the session through otelgrpc: %q", got.baggage)
			}
			if err := duplex(t, bound(), other, 1); err != nil {
				t.Fatal(err)
			}
			for range 1 + afterClose {
				if got := rawSvc.next(t); got.hasSessionMember() || len(got.session) > 0 {
					t.Fatalf("stream to another authority: %q", got.baggage)
				}
			}
			if c := out.Counts(); c.Sent != 2 || c.Signed != 2 || c.Withheld != 2 {
				t.Fatalf("outbound counts %+v", c)
			}
		})
	}
}

// serverSpanIs checks that sc, the handler's current span, is otelgrpc's
// server span for UnaryCall, and that its parent is otelgrpc's client span.
// The server span ends after the response was sent: wait for it.
func serverSpanIs(t *testing.T, exp *tracetest.InMemoryExporter, sc trace.SpanContext) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var server, client *tracetest.SpanStub
		spans := exp.GetSpans()
		for i := range spans {
			s := &spans[i]
			if s.SpanContext.SpanID() == sc.SpanID() && s.SpanKind == trace.SpanKindServer {
				server = s
			}
		}
		if server != nil {
			for i := range spans {
				if s := &spans[i]; s.SpanContext.SpanID() == server.Parent.SpanID() && s.SpanKind == trace.SpanKindClient {
					client = s
				}
			}
		}
		switch {
		case server != nil && client != nil:
			if sc.IsRemote() || server.Name != "grpc.testing.TestService/UnaryCall" || client.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
				t.Fatalf("handler span %v, server span %q, client span trace %v", sc, server.Name, client.SpanContext.TraceID())
			}
			return
		case time.Now().After(deadline):
			t.Fatalf("the handler's span %v is not an otelgrpc server span under a client span (%d spans)", sc, len(spans))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Members in the session namespace that the wire-key table does not know
// (session.future, SESSION.chat_id) never leave, even through otelgrpc's
// second injection of the context's baggage, with or without a session in
// the context.
func TestStraysNotReinjectedByOtelgrpc(t *testing.T) {
	svc := newService()
	addr := serve(t, svc) // no policy: the handler reads the metadata as it came over the wire
	c := dial(t, addr, append(grpcsession.DialOptions(allowAll),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithPropagators(w3c))))...)
	stray := func(ctx context.Context) context.Context {
		b := baggage.FromContext(ctx)
		for _, kv := range [][2]string{{"session.future", "x"}, {"SESSION.chat_id", "y"}, {"app.tenant", "acme"}} {
			m, err := baggage.NewMemberRaw(kv[0], kv[1])
			if err != nil {
				t.Fatal(err)
			}
			if b, err = b.SetMember(m); err != nil {
				t.Fatal(err)
			}
		}
		return baggage.ContextWithBaggage(ctx, b)
	}
	for _, ctx := range []context.Context{stray(context.Background()), stray(bound())} {
		unary(t, ctx, c)
		got := svc.next(t)
		for _, l := range got.baggage {
			if containsAny(l, "session.future", "SESSION.") {
				t.Fatalf("a stray session-namespace member left: %q", got.baggage)
			}
		}
		if v, _ := got.member("app.tenant"); v != "acme" {
			t.Fatalf("the application's member was lost: %q", got.baggage)
		}
	}
}
