package httpsession_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/baggage"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/httpsession"
)

// Both pieces compose with otelhttp in either order, on both sides, with a
// real SDK tracer: the session reaches a server only when the client's egress
// allows it and the server trusts the client; trace context connects client
// and server spans either way; the application's handler runs inside the
// server span.
func TestComposeWithOtelhttp(t *testing.T) {
	serverOrders := []string{"otelhttp(Handler(app))", "Handler(otelhttp(app))"}
	clientOrders := []string{"otelhttp(Transport)", "Transport{Base: otelhttp}"}
	for _, so := range serverOrders {
		for _, co := range clientOrders {
			for _, trusted := range []bool{true, false} {
				for _, foreign := range []bool{true, false} {
					name := fmt.Sprintf("server=%s/client=%s/trusted=%v/foreign=%v", so, co, trusted, foreign)
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						testCompose(t, so, co, trusted, foreign)
					})
				}
			}
		}
	}
}

// site is one server of the composition test.
type site struct {
	url      string
	got      chan received
	wire     chan []string // baggage lines as they arrived, before any handler
	finished chan struct{} // the whole handler chain returned: its spans ended
}

func startSite(t *testing.T, order string, tp trace.TracerProvider, policy *propagation.Inbound) *site {
	s := &site{got: make(chan received, 1), wire: make(chan []string, 1), finished: make(chan struct{}, 1)}
	app := recorder(s.got)
	otelOpts := []otelhttp.Option{otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(w3c)}
	sessOpts := []httpsession.Option{httpsession.WithPropagator(w3c), httpsession.WithInbound(policy)}
	var h http.Handler
	switch order {
	case "otelhttp(Handler(app))":
		h = otelhttp.NewHandler(httpsession.Handler(app, sessOpts...), "server", otelOpts...)
	case "Handler(otelhttp(app))":
		h = httpsession.Handler(otelhttp.NewHandler(app, "server", otelOpts...), sessOpts...)
	default:
		t.Fatalf("unknown server order %q", order)
	}
	s.url = serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.wire <- r.Header.Values("Baggage")
		h.ServeHTTP(w, r)
		s.finished <- struct{}{}
	})).URL
	return s
}

func testCompose(t *testing.T, serverOrder, clientOrder string, trusted, foreign bool) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	trust := propagation.TrustNone
	if trusted {
		trust = propagation.TrustLoopback()
	}
	internal := startSite(t, serverOrder, tp, propagation.NewInbound(trust))
	third := startSite(t, serverOrder, tp, propagation.NewInbound(propagation.TrustAll))

	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	egress := propagation.Egress{Prefixes: []string{internal.url}}
	otelOpts := []otelhttp.Option{otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(w3c)}
	var rt http.RoundTripper
	switch clientOrder {
	case "otelhttp(Transport)":
		rt = otelhttp.NewTransport(&httpsession.Transport{Base: base, Propagator: w3c, Outbound: propagation.NewOutbound(propagation.AllowURLs(egress))}, otelOpts...)
	case "Transport{Base: otelhttp}":
		rt = &httpsession.Transport{Base: otelhttp.NewTransport(base, otelOpts...), Propagator: w3c, Outbound: propagation.NewOutbound(propagation.AllowURLs(egress))}
	default:
		t.Fatalf("unknown client order %q", clientOrder)
	}
	client := &http.Client{Transport: rt}

	ctx := otelsession.Bind(context.Background(), otelsession.Session{
		Platform: "slack", ChatID: "C024BE91L", ThreadID: "1700000000.000100", UserName: "",
		UISessionID: "tab-1", Cwd: "/srv/work", Cron: otelsession.CronOff,
	})
	if foreign {
		app, _ := baggage.NewMemberRaw("app.tenant", "acme")
		b, _ := baggage.FromContext(ctx).SetMember(app)
		ctx = baggage.ContextWithBaggage(ctx, b)
	}
	ctx, root := tp.Tracer("test").Start(ctx, "turn")
	wantSession := make(map[otelsession.Field]string)
	for f, v := range sessionOf(ctx) {
		if f.Scope() == otelsession.Remote {
			wantSession[f] = v
		}
	}

	for _, dest := range []struct {
		name    string
		site    *site
		allowed bool
	}{{"internal", internal, true}, {"third party", third, false}} {
		r := get(t, ctx, client, dest.site.url+"/notify", dest.site.got)
		wire := <-dest.site.wire
		select {
		case <-dest.site.finished:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: handler chain did not return", dest.name)
		}

		// What went over the wire.
		onWire := received{baggage: wire}.hasSessionMember()
		if onWire != dest.allowed {
			t.Errorf("%s: session members on the wire = %v, want %v (%q)", dest.name, onWire, dest.allowed, wire)
		}
		// What the application saw.
		want := map[otelsession.Field]string{}
		if dest.allowed && trusted {
			want = wantSession
		}
		if !maps.Equal(r.session, want) {
			t.Errorf("%s: handler saw session %v, want %v", dest.name, r.session, want)
		}
		if got, ok := r.ctxBaggage["app.tenant"]; foreign && got != "acme" || !foreign && ok {
			t.Errorf("%s: handler saw app.tenant = %q (present %v), want it iff sent", dest.name, got, ok)
		}
		if dest.allowed && !trusted && r.hasSessionMember() {
			t.Errorf("%s: untrusted session left in the headers the application got: %q", dest.name, r.baggage)
		}

		// Trace context: the application runs inside the server span, whose
		// parent is the client span, whose parent is the caller's span.
		if r.spanContext.TraceID() != root.SpanContext().TraceID() {
			t.Errorf("%s: handler trace %s, want %s", dest.name, r.spanContext.TraceID(), root.SpanContext().TraceID())
		}
		server := spanByID(exp.GetSpans(), r.spanContext.SpanID())
		if server == nil || server.SpanKind != trace.SpanKindServer {
			t.Errorf("%s: the handler's current span %s is not the otelhttp server span", dest.name, r.spanContext.SpanID())
			continue
		}
		client := spanByID(exp.GetSpans(), server.Parent.SpanID())
		if client == nil || client.SpanKind != trace.SpanKindClient {
			t.Errorf("%s: the server span's parent %s is not an otelhttp client span", dest.name, server.Parent.SpanID())
			continue
		}
		if client.Parent.SpanID() != root.SpanContext().SpanID() {
			t.Errorf("%s: the client span's parent is %s, want the caller's span %s", dest.name, client.Parent.SpanID(), root.SpanContext().SpanID())
		}
	}
	root.End()
}

func spanByID(spans tracetest.SpanStubs, id trace.SpanID) *tracetest.SpanStub {
	for i := range spans {
		if spans[i].SpanContext.SpanID() == id {
			return &spans[i]
		}
	}
	return nil
}

// The server span says why a session was refused or stripped: an event
// session.refused with its reason. A request that offered no session has none.
func TestServerSpanRecordsRefusals(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	done := make(chan struct{}, 1)
	h := otelhttp.NewHandler(httpsession.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}),
		httpsession.WithPropagator(w3c), httpsession.WithInbound(propagation.NewInbound(propagation.TrustNone))),
		"server", otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(w3c))
	url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		done <- struct{}{}
	})).URL
	for _, tc := range []struct{ baggage, reason string }{
		{"session.chat_id=42", "untrusted: the session carried no valid signature and the peer (http 127.0.0.1"},
		{"session.chat_id=42,session.chat_id=43", "session member repeated"},
		{"tenant=session", ""},
	} {
		exp.Reset()
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("baggage", tc.baggage)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		<-done
		spans := exp.GetSpans()
		if len(spans) != 1 {
			t.Fatalf("%q: %d spans, want the server's", tc.baggage, len(spans))
		}
		var reasons []string
		for _, e := range spans[0].Events {
			for _, kv := range e.Attributes {
				if e.Name == "session.refused" && kv.Key == "session.refusal.reason" {
					reasons = append(reasons, kv.Value.AsString())
				}
			}
		}
		switch {
		case tc.reason == "" && len(reasons) != 0:
			t.Errorf("%q: no session offered, but events say %q", tc.baggage, reasons)
		case tc.reason != "" && (len(reasons) != 1 || !strings.Contains(reasons[0], tc.reason)):
			t.Errorf("%q: refusal events %q, want one saying %q", tc.baggage, reasons, tc.reason)
		}
	}
}
