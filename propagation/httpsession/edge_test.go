package httpsession_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	otelprop "go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/httpsession"
)

// edgeClient is an http.Client in the recommended configuration: the Edge's
// Transport around otelhttp given the Edge's propagator, recording spans in
// exp. extra is appended to otelhttp's options.
func edgeClient(t *testing.T, edge *httpsession.ClientEdge, extra ...otelhttp.Option) (*http.Client, *tracetest.InMemoryExporter, trace.TracerProvider) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	opts := append([]otelhttp.Option{otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(edge.Propagator())}, extra...)
	return &http.Client{Transport: edge.Transport(otelhttp.NewTransport(base, opts...))}, exp, tp
}

// parentOf returns the span id a traceparent header names.
func parentOf(t *testing.T, traceparent string) trace.SpanID {
	t.Helper()
	ctx := otelprop.TraceContext{}.Extract(context.Background(), otelprop.MapCarrier{"traceparent": traceparent})
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		t.Fatalf("traceparent %q is not valid", traceparent)
	}
	return sc.SpanID()
}

// The recommended configuration, against real servers: the allowed host
// receives the session (one baggage line, one traceparent, naming
// otelhttp's client span, a child of the caller's span), the other host
// receives trace context and the application's baggage without any session
// member, also when the caller wrote session members into the request's
// headers itself; the caller's request is left as it was. Several requests
// each, so that both the first request (on which the Edge's Transport
// learns that otelhttp runs its propagator) and the later ones are checked.
func TestClientEdgeSendsSessionOnlyWhereAllowed(t *testing.T) {
	internalGot, thirdGot := make(chan received, 1), make(chan received, 1)
	internal, third := serve(t, recorder(internalGot)), serve(t, recorder(thirdGot))
	out := propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{Hosts: []string{hostOf(t, internal.URL)}}))
	edge := httpsession.NewClientEdge(httpsession.WithPropagator(w3c), httpsession.WithOutbound(out))
	client, exp, tp := edgeClient(t, edge)
	t.Cleanup(client.CloseIdleConnections)

	ctx, root := tp.Tracer("test").Start(boundContext(), "turn")
	defer root.End()
	for i := range 3 {
		for _, preset := range []string{"", "session.chat_id=forged,session.sig=k1.1.AAAA,app.preset=1"} {
			name := fmt.Sprintf("request %d, preset %q", i, preset)
			for _, dest := range []struct {
				url     string
				got     chan received
				allowed bool
			}{{internal.URL, internalGot, true}, {third.URL, thirdGot, false}} {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, dest.url+"/v1/notify", nil)
				if err != nil {
					t.Fatal(err)
				}
				if preset != "" {
					req.Header.Set("Baggage", preset)
				}
				before := req.Header.Clone()
				exp.Reset()
				r := do(t, client, req, dest.got)

				if len(r.baggage) != 1 {
					t.Errorf("%s, allowed=%v: baggage lines %q, want one", name, dest.allowed, r.baggage)
				}
				chat, sent := r.member(otelsession.FieldChatID.Key())
				if dest.allowed && chat != "C024BE91L" {
					t.Errorf("%s: allowed host got chat id %q (present %v)", name, chat, sent)
				}
				if !dest.allowed && r.hasSessionMember() {
					t.Errorf("%s: refused host got session members: %q", name, r.baggage)
				}
				if _, ok := r.member(otelsession.SignatureKey); ok {
					t.Errorf("%s, allowed=%v: a signature nobody signed reached the wire: %q", name, dest.allowed, r.baggage)
				}
				if _, ok := r.member(otelsession.FieldUISessionID.Key()); ok {
					t.Errorf("%s: a local field left the process", name)
				}
				if v, _ := r.member("app.tenant"); v != "acme" {
					t.Errorf("%s, allowed=%v: app.tenant = %q, want the application's member everywhere", name, dest.allowed, v)
				}
				if !reflect.DeepEqual(req.Header, before) {
					t.Errorf("%s: the caller's request was modified: %v, was %v", name, req.Header, before)
				}
				// The traceparent names otelhttp's client span, whose parent
				// is the caller's span.
				spans := exp.GetSpans()
				client := spanByID(spans, parentOf(t, r.traceparent))
				if client == nil || client.SpanKind != trace.SpanKindClient {
					t.Errorf("%s: traceparent %q does not name otelhttp's client span (spans %d)", name, r.traceparent, len(spans))
				} else if client.Parent.SpanID() != root.SpanContext().SpanID() {
					t.Errorf("%s: the client span's parent is %s, want the caller's span", name, client.Parent.SpanID())
				}
			}
		}
	}
	if c := edge.Counts(); c != (httpsession.ClientEdgeCounts{}) {
		t.Errorf("counts %+v, want none: the configuration is the documented one", c)
	}
	if c := out.Counts(); c.Sent != 6 || c.Withheld != 6 || c.Prewritten == 0 {
		t.Errorf("outbound counts %+v, want 6 sent, 6 withheld and the preset members removed", c)
	}
}

// A signing policy through the Edge: the allowed host receives one
// baggage line with one signature, and its Handler, which trusts no peer,
// accepts the session on it; the refused host receives neither session
// nor signature, even one the caller wrote into the headers.
func TestClientEdgeSigns(t *testing.T) {
	signer, verifier := signerAndVerifier(t)
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	policy := propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier))
	internal := startSite(t, "otelhttp(Handler(app))", tp, policy)
	third := startSite(t, "otelhttp(Handler(app))", tp, propagation.NewInbound(propagation.TrustAll, propagation.WithVerifier(verifier)))
	out := propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{Prefixes: []string{internal.url}}), propagation.WithSigner(signer))
	edge := httpsession.NewClientEdge(httpsession.WithPropagator(w3c), httpsession.WithOutbound(out))
	client, _, _ := edgeClient(t, edge)
	t.Cleanup(client.CloseIdleConnections)

	session := otelsession.Session{Platform: "slack", ChatID: "C024BE91L", ThreadID: "1700000000.000100", UserID: "U1"}
	ctx := otelsession.Bind(context.Background(), session)
	const requests = 3
	for i := range requests {
		r := get(t, ctx, client, internal.url+"/notify", internal.got)
		wire := waitSite(t, internal)
		if len(wire) != 1 || strings.Count(wire[0], otelsession.SignatureKey+"=") != 1 {
			t.Errorf("request %d: baggage on the wire %q, want one line with one signature", i, wire)
		}
		if r.session[otelsession.FieldChatID] != session.ChatID {
			t.Errorf("request %d: the handler saw %v", i, r.session)
		}

		req, err := http.NewRequestWithContext(ctx, http.MethodGet, third.url+"/notify", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Baggage", strings.Split(wire[0], ",")[0]+","+otelsession.SignatureKey+"=k1.1.AAAA")
		r = do(t, client, req, third.got)
		if wire := waitSite(t, third); (received{baggage: wire}).hasSessionMember() {
			t.Errorf("request %d: refused host got session or signature: %q", i, wire)
		}
		if len(r.session) != 0 {
			t.Errorf("request %d: refused host's handler saw %v", i, r.session)
		}
	}
	if c := policy.Counts(); c.Signed != requests || c.Accepted != requests {
		t.Errorf("server policy counts %+v, want %d signed sessions accepted", c, requests)
	}
	if c := out.Counts(); c.Signed != requests || c.Withheld != requests {
		t.Errorf("outbound counts %+v", c)
	}
}

// http.Client asks the Edge's Transport again for every redirect: a
// redirect from the allowed host to one the policy refuses does not carry
// the session there, before and after the Transport has learned that
// otelhttp runs the propagator.
func TestClientEdgeRedirectLeavesSessionBehind(t *testing.T) {
	internal, internalGot, thirdGot := redirectServers(t)
	for _, withOtelhttp := range []bool{true, false} {
		edge := httpsession.NewClientEdge(httpsession.WithPropagator(w3c), httpsession.WithOutbound(
			propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{Hosts: []string{hostOf(t, internal.URL)}}))))
		client := &http.Client{Transport: edge.Transport(&http.Transport{})} // the Transport writes the session itself
		if withOtelhttp {
			client, _, _ = edgeClient(t, edge)
		}
		t.Cleanup(client.CloseIdleConnections)
		for i := range 2 {
			if r := get(t, boundContext(), client, internal.URL+"/away", thirdGot); r.hasSessionMember() {
				t.Errorf("otelhttp %v, round %d: the redirect target got session members: %q", withOtelhttp, i, r.baggage)
			} else if v, _ := r.member("app.tenant"); v != "acme" {
				t.Errorf("otelhttp %v, round %d: the redirect target got no application baggage: %q", withOtelhttp, i, r.baggage)
			}
			if r := get(t, boundContext(), client, internal.URL+"/here", internalGot); !r.hasSessionMember() {
				t.Errorf("otelhttp %v, round %d: the allowed host got no session: %q", withOtelhttp, i, r.baggage)
			}
		}
	}
}

// The Edge's propagator given to otelhttp without the Edge's Transport
// around it (or around another Edge's) cannot see the request's URL: it
// fails closed. The server gets the trace context and the application's
// baggage, no session member (not even one the caller wrote into the
// headers), and the mistake is reported and counted.
func TestClientEdgePropagatorWithoutTransportFailsClosed(t *testing.T) {
	got := make(chan received, 1)
	srv := serve(t, recorder(got))
	edge := httpsession.NewClientEdge(httpsession.WithPropagator(w3c), httpsession.WithOutbound(propagation.NewOutbound(propagation.AllowAll)))
	other := httpsession.NewClientEdge(httpsession.WithPropagator(w3c), httpsession.WithOutbound(propagation.NewOutbound(propagation.AllowAll)))
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	otelOpts := []otelhttp.Option{otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(edge.Propagator())}

	for _, tc := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"no Transport", otelhttp.NewTransport(http.DefaultTransport, otelOpts...)},
		{"another Edge's Transport", other.Transport(otelhttp.NewTransport(http.DefaultTransport, otelOpts...))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := edge.Counts().WithoutTransport
			client := &http.Client{Transport: tc.rt}
			req, err := http.NewRequestWithContext(boundContext(), http.MethodGet, srv.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Baggage", "session.user_id=U9,app.preset=1")
			r := do(t, client, req, got)
			if r.hasSessionMember() {
				t.Errorf("session members sent without a destination: %q", r.baggage)
			}
			if v, _ := r.member("app.tenant"); v != "acme" {
				t.Errorf("app.tenant = %q, want the application's baggage sent", v)
			}
			if !strings.Contains(r.traceparent, "4bf92f3577b34da6a3ce929d0e0e4736") {
				t.Errorf("traceparent %q, want the caller's trace", r.traceparent)
			}
			if n := edge.Counts().WithoutTransport - before; n != 1 {
				t.Errorf("WithoutTransport counted %d, want 1", n)
			}
			if !reported.matches(httpsession.ErrWithoutTransport) {
				t.Error("ErrWithoutTransport did not reach otel.Handle")
			}
		})
	}
}

// A response's request keeps the context the Edge's Transport handed on;
// a context kept from it names no destination any more, so the Edge's
// propagator, reached through another transport with it, sends no session.
func TestClientEdgeStaleContextNamesNoDestination(t *testing.T) {
	got := make(chan received, 1)
	srv := serve(t, recorder(got))
	edge := httpsession.NewClientEdge(httpsession.WithPropagator(w3c), httpsession.WithOutbound(propagation.NewOutbound(propagation.AllowAll)))
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	bare := &http.Client{Transport: otelhttp.NewTransport(http.DefaultTransport, otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(edge.Propagator()))}
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
	})
	rt := edge.Transport(otelhttp.NewTransport(base, otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(edge.Propagator())))
	for i := range 2 { // learning, then paired
		req, err := http.NewRequestWithContext(boundContext(), http.MethodGet, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if r := get(t, resp.Request.Context(), bare, srv.URL, got); r.hasSessionMember() {
			t.Errorf("request %d: a kept context sent the session: %q", i, r.baggage)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The Edge's Transport around a RoundTripper that does not run the Edge's
// propagator: no otelhttp at all, otelhttp given ExceptBaggage, or given
// the W3C propagators. The Transport never learns to rely on the
// propagator, writes the session itself as the policy allows, and nothing
// is reported: the allowed host gets the session on one baggage line, the
// refused one none, hand-written session members included.
func TestClientEdgeTransportWithoutPropagator(t *testing.T) {
	internalGot, thirdGot := make(chan received, 1), make(chan received, 1)
	internal, third := serve(t, recorder(internalGot)), serve(t, recorder(thirdGot))
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	for _, tc := range []struct {
		name string
		next func() http.RoundTripper
	}{
		{"no otelhttp", func() http.RoundTripper { return &http.Transport{} }},
		{"otelhttp given ExceptBaggage", func() http.RoundTripper {
			return otelhttp.NewTransport(&http.Transport{}, otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(propagation.ExceptBaggage(w3c)))
		}},
		{"otelhttp given W3C", func() http.RoundTripper {
			return otelhttp.NewTransport(&http.Transport{}, otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(w3c))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			edge := httpsession.NewClientEdge(httpsession.WithPropagator(w3c), httpsession.WithOutbound(
				propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{Hosts: []string{hostOf(t, internal.URL)}}))))
			client := &http.Client{Transport: edge.Transport(tc.next())}
			t.Cleanup(client.CloseIdleConnections)
			for i := range 3 {
				r := get(t, boundContext(), client, internal.URL, internalGot)
				if v, _ := r.member(otelsession.FieldChatID.Key()); v != "C024BE91L" || len(r.baggage) != 1 {
					t.Errorf("request %d: allowed host got baggage %q, want one line with the session", i, r.baggage)
				}
				req, err := http.NewRequestWithContext(boundContext(), http.MethodGet, third.URL, nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Baggage", "session.user_id=U9")
				if r := do(t, client, req, thirdGot); r.hasSessionMember() {
					t.Errorf("request %d: refused host got session members: %q", i, r.baggage)
				}
			}
			if c := edge.Counts(); c != (httpsession.ClientEdgeCounts{}) {
				t.Errorf("counts %+v: nothing went wrong", c)
			}
		})
	}
}

// otelhttp with a Filter that skips some requests: it does not run the
// propagator for them. Before the Edge's Transport has seen the propagator
// run, the session goes anyway (the Transport writes it); once it relies on
// the propagator, a skipped request leaves without its session, which is
// reported and counted, and from then on the Transport writes the session
// itself for every request, filtered or not. Session members the caller
// wrote into a skipped request's headers never leave.
func TestClientEdgeFilterSkippingThePropagator(t *testing.T) {
	got := make(chan received, 1)
	srv := serve(t, recorder(got))
	edge := httpsession.NewClientEdge(httpsession.WithPropagator(w3c), httpsession.WithOutbound(
		propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{Hosts: []string{hostOf(t, srv.URL)}}))))
	client, _, _ := edgeClient(t, edge, otelhttp.WithFilter(func(r *http.Request) bool { return r.URL.Path != "/health" }))
	t.Cleanup(client.CloseIdleConnections)
	sent := func(path string, preset string) received {
		t.Helper()
		req, err := http.NewRequestWithContext(boundContext(), http.MethodGet, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if preset != "" {
			req.Header.Set("Baggage", preset)
		}
		return do(t, client, req, got)
	}
	hasChat := func(r received) bool { v, _ := r.member(otelsession.FieldChatID.Key()); return v == "C024BE91L" }

	// Learning: a skipped request still carries the session.
	if r := sent("/health", ""); !hasChat(r) {
		t.Errorf("skipped request before pairing: baggage %q, want the session", r.baggage)
	}
	if r := sent("/notify", ""); !hasChat(r) { // the Transport learns here
		t.Errorf("first instrumented request: baggage %q, want the session", r.baggage)
	}
	if r := sent("/notify", ""); !hasChat(r) {
		t.Errorf("paired request: baggage %q, want the session", r.baggage)
	}
	// Paired, with a hand-written session: the Transport writes the request
	// itself, so a skipped one does not send it unchecked.
	if r := sent("/health", "session.chat_id=forged,session.user_id=U9"); !hasChat(r) || strings.Contains(strings.Join(r.baggage, ","), "U9") {
		t.Errorf("skipped request with hand-written members: baggage %q, want the context's session only", r.baggage)
	}
	if c := edge.Counts(); c.WithoutPropagator != 0 {
		t.Errorf("counts %+v before any request lost its session", c)
	}
	// Paired, a skipped request: it goes without the session, reported.
	if r := sent("/health", ""); r.hasSessionMember() {
		t.Errorf("skipped paired request: baggage %q, want no session (nobody wrote it)", r.baggage)
	}
	if c := edge.Counts(); c.WithoutPropagator != 1 {
		t.Errorf("WithoutPropagator = %d, want 1", c.WithoutPropagator)
	}
	if !reported.matches(httpsession.ErrWithoutPropagator) {
		t.Error("ErrWithoutPropagator did not reach otel.Handle")
	}
	// Fallen back: every request carries the session again, one line.
	for _, path := range []string{"/health", "/notify", "/health"} {
		if r := sent(path, ""); !hasChat(r) || len(r.baggage) != 1 {
			t.Errorf("%s after the fallback: baggage %q, want one line with the session", path, r.baggage)
		}
	}
	if c := edge.Counts(); c.WithoutPropagator != 1 {
		t.Errorf("WithoutPropagator = %d after the fallback, want still 1", c.WithoutPropagator)
	}
}

// Many goroutines through one fresh Edge, to an allowed and a refused host,
// while its Transport learns: the session reaches the allowed host on
// every request and the refused one never. Run with -race.
func TestClientEdgeConcurrent(t *testing.T) {
	show := func(w http.ResponseWriter, r *http.Request) {
		rec := received{baggage: r.Header.Values("Baggage")}
		v, _ := rec.member(otelsession.FieldChatID.Key())
		fmt.Fprintf(w, "%d %v %s", len(rec.baggage), rec.hasSessionMember(), v)
	}
	internal, third := serve(t, http.HandlerFunc(show)), serve(t, http.HandlerFunc(show))
	out := propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{Hosts: []string{hostOf(t, internal.URL)}}))
	edge := httpsession.NewClientEdge(httpsession.WithPropagator(w3c), httpsession.WithOutbound(out))
	client, _, _ := edgeClient(t, edge)
	t.Cleanup(client.CloseIdleConnections)

	const workers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*each*2)
	for w := range workers {
		wg.Go(func() {
			ctx := otelsession.Bind(context.Background(), otelsession.Session{Platform: "slack", ChatID: fmt.Sprintf("C%d", w)})
			for range each {
				for _, dest := range []struct {
					url, want string
				}{{internal.URL, fmt.Sprintf("1 true C%d", w)}, {third.URL, "0 false "}} {
					req, err := http.NewRequestWithContext(ctx, http.MethodGet, dest.url, nil)
					if err != nil {
						errs <- err
						return
					}
					resp, err := client.Do(req)
					if err != nil {
						errs <- err
						return
					}
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil {
						errs <- err
					} else if string(body) != dest.want {
						errs <- fmt.Errorf("%s got %q, want %q", dest.url, body, dest.want)
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if c := out.Counts(); c.Sent != workers*each || c.Withheld != workers*each {
		t.Errorf("outbound counts %+v, want %d sent and %d withheld", c, workers*each, workers*each)
	}
}
