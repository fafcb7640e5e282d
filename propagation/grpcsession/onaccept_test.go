package grpcsession_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/otelsession/sessiontrace"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/grpcsession"
)

// otelgrpc given ExceptBaggage starts the server span without a session;
// WithOnAccept puts the accepted one on it (through sessiontrace), and only
// an accepted one: the server that trusts no peer runs the same call with
// a bare server span. The client span carries the session of the caller's
// context, through the span processor alone.
func TestOnAcceptPutsTheSessionOnTheServerSpan(t *testing.T) {
	proc := sessiontrace.NewSpanProcessor(sessiontrace.Redaction{})
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(proc), sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	otelOpts := []otelgrpc.Option{otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(grpcsession.ExceptBaggage(nil))}
	accepted := 0
	annotate := grpcsession.WithOnAccept(func(ctx context.Context, method string) {
		accepted++
		if method != "/grpc.testing.TestService/UnaryCall" {
			t.Errorf("WithOnAccept saw method %q", method)
		}
		proc.Annotate(ctx, trace.SpanFromContext(ctx))
	})
	server := func(trust propagation.TrustFunc) string {
		return serve(t, newService(), append(grpcsession.ServerOptions(grpcsession.WithInbound(propagation.NewInbound(trust)), annotate),
			grpc.StatsHandler(otelgrpc.NewServerHandler(otelOpts...)))...)
	}
	clientOpts := append(grpcsession.DialOptions(allowAll), grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelOpts...)))
	trusting, refusing := server(propagation.TrustLoopback()), server(propagation.TrustNone)

	want := wantSession()[otelsession.FieldChatID]
	for _, addr := range []string{trusting, refusing} {
		unary(t, bound(), dial(t, addr, clientOpts...))
		server, client := spanPair(t, exp)
		exp.Reset()
		if got := attr(client, "session.chat_id"); got != want {
			t.Fatalf("%s: client span session.chat_id %q, want %q", addr, got, want)
		}
		got := attr(server, "session.chat_id")
		if addr == trusting && got != want {
			t.Fatalf("the accepted session is not on the server span: session.chat_id %q", got)
		}
		if addr == refusing && got != "" {
			t.Fatalf("a refused session is on the server span: session.chat_id %q", got)
		}
	}
	if accepted != 1 {
		t.Fatalf("WithOnAccept ran %d times, want 1 (the trusting server's call)", accepted)
	}
}

// spanPair waits for one ended server span and one ended client span.
func spanPair(t *testing.T, exp *tracetest.InMemoryExporter) (server, client tracetest.SpanStub) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var s, c int
		for _, sp := range exp.GetSpans() {
			switch sp.SpanKind {
			case trace.SpanKindServer:
				server, s = sp, s+1
			case trace.SpanKindClient:
				client, c = sp, c+1
			}
		}
		if s == 1 && c == 1 {
			return server, client
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d server and %d client spans, want one each", s, c)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.AsString()
		}
	}
	return ""
}
