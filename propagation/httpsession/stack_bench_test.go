package httpsession

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	otelprop "go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/internal/benchcpu"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
)

// BenchmarkServerStack is one request through a whole instrumented server,
// as a program runs it: otelhttp's handler (an SDK tracer provider, every
// span recorded and exported nowhere) around a handler that does nothing,
// the request carrying trace context and a full session.
//
//   - path=raw: otelhttp alone with the W3C propagators: the session
//     arrives as plain baggage, unchecked.
//   - path=session: the recommended configuration, otelhttp given
//     propagation.ExceptBaggage and Handler inside it (the peer trusted, so
//     the session is accepted and the whole policy runs).
//   - path=session_otelhttp_W3C_too: Handler inside otelhttp given the W3C
//     propagators, which parses the baggage a second time.
func BenchmarkServerStack(b *testing.B) {
	w3c := otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	h := http.Header{}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	w3c.Inject(trace.ContextWithSpanContext(otelsession.Bind(context.Background(), benchSession), sc), otelprop.HeaderCarrier(h))
	var app http.HandlerFunc = func(_ http.ResponseWriter, r *http.Request) { sinkCtx = r.Context() }
	policy := propagation.NewInbound(propagation.TrustLoopback(), propagation.WithCacheSize(0)) // see BenchmarkInbound
	run := func(handler http.Handler) func(*testing.B) {
		return func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, "http://notify.internal/notify", nil)
			r.Header = h
			r.RemoteAddr = "127.0.0.1:50000"
			w := httptest.NewRecorder()
			handler.ServeHTTP(w, r)
			if _, st := otelsession.Lookup(sinkCtx, otelsession.FieldChatID); st != otelsession.Set {
				b.Fatal("the handler got no session")
			}
			defer benchcpu.Time(b)()
			b.ReportAllocs()
			for b.Loop() {
				handler.ServeHTTP(w, r)
			}
		}
	}
	otelOpts := func(p otelprop.TextMapPropagator) []otelhttp.Option {
		return []otelhttp.Option{otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(p)}
	}
	b.Run("path=raw", run(otelhttp.NewHandler(app, "notify", otelOpts(w3c)...)))
	b.Run("path=session", run(otelhttp.NewHandler(Handler(app, WithPropagator(w3c), WithInbound(policy)), "notify",
		otelOpts(propagation.ExceptBaggage(w3c))...)))
	b.Run("path=session_otelhttp_W3C_too", run(otelhttp.NewHandler(Handler(app, WithPropagator(w3c), WithInbound(policy)), "notify",
		otelOpts(w3c)...)))
}

// BenchmarkClientStack is one request through a whole instrumented client:
// otelhttp's transport (the same SDK tracer provider) and a base round
// tripper that answers at once, the context carrying a full session to a
// destination the policy allows.
//
//   - path=raw: otelhttp's transport alone with the W3C propagators.
//   - path=session: the recommended configuration, otelhttp given
//     propagation.ExceptBaggage around Transport.
//   - path=session_otelhttp_W3C_too: otelhttp given the W3C propagators
//     around Transport, which writes the baggage that Transport then
//     removes and writes again.
//   - path=client_edge: the recommended configuration, a ClientEdge's
//     Transport around otelhttp given the Edge's propagator, so that the
//     policy writes into otelhttp's own copy of the request. (The first
//     request, before the timer, is the one on which the Edge's Transport
//     learns that otelhttp runs its propagator.)
func BenchmarkClientStack(b *testing.B) {
	w3c := otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx := otelsession.Bind(context.Background(), benchSession)
	answer := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sinkReq = r
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
	})
	out := propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{Hosts: []string{".internal"}}))
	run := func(rt http.RoundTripper) func(*testing.B) {
		return func(b *testing.B) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://notify.internal/v1/send", nil)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := rt.RoundTrip(req); err != nil {
				b.Fatal(err)
			}
			if len(sinkReq.Header.Values("Baggage")) != 1 {
				b.Fatalf("baggage lines sent: %q", sinkReq.Header.Values("Baggage"))
			}
			defer benchcpu.Time(b)()
			b.ReportAllocs()
			for b.Loop() {
				resp, err := rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
			}
		}
	}
	otelOpts := func(p otelprop.TextMapPropagator) []otelhttp.Option {
		return []otelhttp.Option{otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(p)}
	}
	b.Run("path=raw", run(otelhttp.NewTransport(answer, otelOpts(w3c)...)))
	b.Run("path=session", run(otelhttp.NewTransport(&Transport{Base: answer, Propagator: w3c, Outbound: out},
		otelOpts(propagation.ExceptBaggage(w3c))...)))
	b.Run("path=session_otelhttp_W3C_too", run(otelhttp.NewTransport(&Transport{Base: answer, Propagator: w3c, Outbound: out},
		otelOpts(w3c)...)))
	edge := NewClientEdge(WithPropagator(w3c), WithOutbound(out))
	b.Run("path=client_edge", run(edge.Transport(otelhttp.NewTransport(answer, otelOpts(edge.Propagator())...))))
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
