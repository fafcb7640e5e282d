package httpsession_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	otelprop "go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/httpsession"
)

// A server accepts sessions from peers on its own machine only; anything
// it refuses leaves the handler running without a session.
func ExampleHandler() {
	// Once per program: propagate W3C trace context and baggage.
	otel.SetTextMapPropagator(otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{}))

	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		thread, state := otelsession.Lookup(r.Context(), otelsession.FieldThreadID)
		fmt.Fprintf(w, "thread %s %q", state, thread)
	})
	policy := propagation.NewInbound(propagation.TrustLoopback())
	srv := httptest.NewServer(otelhttp.NewHandler(httpsession.Handler(app, httpsession.WithInbound(policy)), "notify"))
	defer srv.Close()

	for _, header := range []string{
		"session.platform=slack,session.thread_id=1700000000.000100",
		"session.thread_id=a,session.thread_id=b", // two values for one field
	} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set("Baggage", header)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(resp.Status, readAll(resp))
	}
	c := policy.Counts()
	fmt.Printf("accepted %d, rejected %d\n", c.Accepted, c.Rejected)
	// Output:
	// 200 OK thread set "1700000000.000100"
	// 200 OK thread unset ""
	// accepted 1, rejected 1
}

// A client sends the session to the internal service only; the third-party
// API gets the request with trace context and other baggage, no session.
func ExampleTransport() {
	otel.SetTextMapPropagator(otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{}))

	show := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s got session: %v", name, strings.Contains(r.Header.Get("Baggage"), "session.chat_id"))
		})
	}
	internal := httptest.NewServer(show("internal"))
	defer internal.Close()
	thirdParty := httptest.NewServer(show("third party"))
	defer thirdParty.Close()

	u, _ := url.Parse(internal.URL)
	client := &http.Client{Transport: otelhttp.NewTransport(&httpsession.Transport{
		Outbound: propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{Hosts: []string{u.Host}})),
	})}
	ctx := otelsession.Bind(context.Background(), otelsession.Session{Platform: "slack", ChatID: "C024BE91L"})
	for _, target := range []string{internal.URL, thirdParty.URL} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(readAll(resp))
	}
	// Output:
	// internal got session: true
	// third party got session: false
}

// The recommended client with otelhttp: the ClientEdge's propagator runs
// the outbound policy inside otelhttp's injection, and its Transport, around
// otelhttp's, names each request's destination for it. The internal service
// gets the session, the third-party API trace context and no session, also
// when the caller put a session member into the request's headers by hand.
func ExampleClientEdge() {
	otel.SetTextMapPropagator(otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{}))

	show := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s got session: %v, trace context: %v", name,
				strings.Contains(r.Header.Get("Baggage"), "session."), r.Header.Get("Traceparent") != "")
		})
	}
	internal := httptest.NewServer(show("internal"))
	defer internal.Close()
	thirdParty := httptest.NewServer(show("third party"))
	defer thirdParty.Close()

	u, _ := url.Parse(internal.URL)
	edge := httpsession.NewClientEdge(httpsession.WithOutbound(
		propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{Hosts: []string{u.Host}}))))
	tp := sdktrace.NewTracerProvider() // the program's tracer provider: otelhttp's client spans
	defer func() { _ = tp.Shutdown(context.Background()) }()
	client := &http.Client{Transport: edge.Transport(otelhttp.NewTransport(http.DefaultTransport,
		otelhttp.WithPropagators(edge.Propagator()), otelhttp.WithTracerProvider(tp)))}

	ctx := otelsession.Bind(context.Background(), otelsession.Session{Platform: "slack", ChatID: "C024BE91L"})
	for _, target := range []string{internal.URL, thirdParty.URL} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		req.Header.Set("Baggage", "session.user_id=U-by-hand") // removed: only the policy writes a session
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(readAll(resp))
	}
	fmt.Printf("%+v\n", edge.Counts())
	// Output:
	// internal got session: true, trace context: true
	// third party got session: false, trace context: true
	// {WithoutTransport:0 WithoutPropagator:0}
}

func readAll(resp *http.Response) string {
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
