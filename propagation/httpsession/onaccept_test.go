package httpsession_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/otelsession/sessiontrace"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/httpsession"
)

// The recommended configuration with otelhttp: both otelhttp pieces given
// propagation.ExceptBaggage, the session carried once each way by Handler and
// Transport. The client writes one baggage line (the policy's), trace
// context still joins the spans, and the server span carries the session
// only once the policy accepted it (WithOnAccept, through sessiontrace): a
// server that trusts no peer, and one given a forged or malformed session,
// end with a server span without one. With the full propagator instead,
// otelhttp's server span shows whatever the client sent, accepted or not:
// the case this configuration exists for.
func TestOnAcceptPutsTheSessionOnTheServerSpan(t *testing.T) {
	proc := sessiontrace.NewSpanProcessor(sessiontrace.Redaction{})
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(proc), sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	except := []otelhttp.Option{otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(propagation.ExceptBaggage(w3c))}
	full := []otelhttp.Option{otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(w3c)}

	var accepted atomic.Int32
	type site struct {
		url  string
		wire chan []string
		done chan struct{}
	}
	start := func(trust propagation.TrustFunc, otelOpts []otelhttp.Option) site {
		s := site{wire: make(chan []string, 1), done: make(chan struct{}, 1)}
		app := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
		h := otelhttp.NewHandler(httpsession.Handler(app, httpsession.WithPropagator(w3c),
			httpsession.WithInbound(propagation.NewInbound(trust)),
			httpsession.WithOnAccept(func(r *http.Request) {
				accepted.Add(1)
				proc.Annotate(r.Context(), trace.SpanFromContext(r.Context()))
			})), "server", otelOpts...)
		s.url = serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.wire <- r.Header.Values("Baggage")
			h.ServeHTTP(w, r)
			s.done <- struct{}{}
		})).URL
		return s
	}
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	client := &http.Client{Transport: otelhttp.NewTransport(&httpsession.Transport{Base: base, Propagator: w3c,
		Outbound: propagation.NewOutbound(propagation.AllowAll)}, except...)}
	ctx := otelsession.Bind(context.Background(), otelsession.Session{Platform: "slack", ChatID: "C024BE91L", ThreadID: "1700000000.000100"})
	ctx, root := tp.Tracer("test").Start(ctx, "turn")
	defer root.End()

	// call sends one request, through client or with raw as its baggage
	// header, and returns the baggage lines that arrived and the server span.
	call := func(s site, raw string) ([]string, tracetest.SpanStub) {
		t.Helper()
		exp.Reset()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := client
		if raw != "" {
			c = http.DefaultClient
			req.Header.Set("Baggage", raw)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		wire := <-s.wire
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			t.Fatal("the handler chain did not return")
		}
		for _, sp := range exp.GetSpans() {
			if sp.SpanKind == trace.SpanKindServer {
				return wire, sp
			}
		}
		t.Fatal("no server span")
		return nil, tracetest.SpanStub{}
	}

	trusting := start(propagation.TrustLoopback(), except)
	wire, span := call(trusting, "")
	if len(wire) != 1 || strings.Count(wire[0], "session.chat_id=") != 1 {
		t.Fatalf("the session went over the wire as %q, want one baggage line written once", wire)
	}
	if got := attr(span, "session.chat_id"); got != "C024BE91L" {
		t.Fatalf("the accepted session is not on the server span: session.chat_id %q", got)
	}
	if span.Parent.TraceID() != root.SpanContext().TraceID() || !span.Parent.IsRemote() {
		t.Fatalf("the server span's parent %v is not the client's span in the caller's trace", span.Parent)
	}
	if n := accepted.Load(); n != 1 {
		t.Fatalf("WithOnAccept ran %d times, want 1", n)
	}

	refusing := start(propagation.TrustNone, except)
	if _, span := call(refusing, ""); attr(span, "session.chat_id") != "" {
		t.Fatalf("an untrusted session is on the server span: %q", attr(span, "session.chat_id"))
	}
	for _, forged := range []string{
		"session.chat_id=C1,session.chat_id=C2",    // repeated: refused as a whole
		"session.chat_id=C1,session.thread_id=%0A", // control character
	} {
		if _, span := call(trusting, forged); attr(span, "session.chat_id") != "" {
			t.Fatalf("%q: a refused session is on the server span: session.chat_id %q", forged, attr(span, "session.chat_id"))
		}
	}
	if n := accepted.Load(); n != 1 {
		t.Fatalf("WithOnAccept ran %d times, want 1 (only the trusting server's first call)", n)
	}

	// Why: otelhttp given the full propagator starts its span from what the
	// client sent, before the policy refuses it.
	naive := start(propagation.TrustNone, full)
	if _, span := call(naive, ""); attr(span, "session.chat_id") != "C024BE91L" {
		t.Fatalf("otelhttp with the full propagator: server span session.chat_id %q; the case WithOnAccept exists for no longer arises", attr(span, "session.chat_id"))
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
