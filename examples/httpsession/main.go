// Command httpsession shows a chat session crossing HTTP, and where it stops.
//
// It starts two servers on 127.0.0.1: "notify", an internal service behind
// httpsession.Handler that trusts loopback peers, and "thirdparty", an
// outside API that knows nothing of sessionwire and just prints the headers
// it gets. A gateway binds a session, then calls both through one
// http.Client whose httpsession.Transport may send the session to notify
// only. Last, a forged request with a duplicated session member shows a
// refusal: the request is still served, with no session, and counted.
//
//	go run ./examples/httpsession
//
// It exits by itself, with status 1 if the session went anywhere it must not.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/examples/internal/exampleflag"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/httpsession"
)

func main() {
	exampleflag.Parse("httpsession", `Shows a chat session crossing HTTP, and where it stops. It starts two servers
on 127.0.0.1: "notify", an internal service that trusts loopback peers, and
"thirdparty", an outside API that prints the headers it gets. A gateway binds
a session and calls both through one http.Client that may send the session to
notify only; then a forged request shows a refusal. It prints what each server
received. Exit status 1 if the session went anywhere it must not.`, "httpsession")
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "httpsession:", err)
		os.Exit(1)
	}
}

func run() error {
	// Without a propagator installed, OpenTelemetry propagates nothing.
	otel.SetTextMapPropagator(otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{}))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {})) // refusals are printed below
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())

	// The internal service: the session it may act on comes through the
	// inbound policy, which trusts peers on the loopback interface only.
	policy := propagation.NewInbound(propagation.TrustLoopback())
	report := make(chan string, 1)
	notify, err := start(httpsession.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		report <- describe(r.Context())
	}), httpsession.WithInbound(policy), httpsession.WithOnError(func(_ *http.Request, err error) {
		fmt.Printf("  notify: session refused: %v\n", err)
	})))
	if err != nil {
		return err
	}
	defer notify.Close()

	// The third party runs no sessionwire code; it sees raw headers.
	third, err := start(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		report <- fmt.Sprintf("    baggage header:     %q\n    traceparent header: %q\n",
			strings.Join(r.Header.Values("Baggage"), ","), r.Header.Get("Traceparent"))
	}))
	if err != nil {
		return err
	}
	defer third.Close()

	// The gateway's side: one client for every destination; only notify is
	// allowed to receive the session.
	client := &http.Client{Transport: &httpsession.Transport{
		Outbound: propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{Hosts: []string{notify.host}})),
	}}
	defer client.CloseIdleConnections()

	ctx := otelsession.Bind(context.Background(), otelsession.Session{
		Platform:    "telegram",
		ChatID:      "-1001234567890",
		ThreadID:    "17585",
		UserID:      "u-42",
		MessageID:   "88121",
		UISessionID: "tab-3", // local: never leaves this process
	})
	tenant, _ := baggage.NewMemberRaw("app.tenant", "acme") // the application's own baggage
	b, _ := baggage.FromContext(ctx).SetMember(tenant)
	ctx, span := tp.Tracer("gateway").Start(baggage.ContextWithBaggage(ctx, b), "handle message")
	defer span.End()
	fmt.Printf("gateway: session bound (platform, chat, thread, user, message; UI tab local), trace %s\n\n",
		span.SpanContext().TraceID())

	fmt.Println("GET notify (egress allows it; notify trusts loopback):")
	got, err := call(ctx, client, "http://"+notify.host+"/notify", report)
	if err != nil {
		return err
	}
	fmt.Print(got)
	if !strings.Contains(got, `session.thread_id          set "17585"`) {
		return errors.New("notify did not receive the session")
	}

	fmt.Println("\nGET thirdparty (not in the egress list):")
	got, err = call(ctx, client, "http://"+third.host+"/api", report)
	if err != nil {
		return err
	}
	fmt.Print(got)
	if strings.Contains(got, otelsession.KeyPrefix) {
		return errors.New("the third party received session members")
	}

	fmt.Println("\nGET notify with a forged header (session.chat_id twice), plain client:")
	req, _ := http.NewRequest(http.MethodGet, "http://"+notify.host+"/notify", nil)
	req.Header.Set("Baggage", "session.chat_id=-100999,session.chat_id=-1001234567890")
	if got, err = roundTrip(http.DefaultClient, req, report); err != nil {
		return err
	}
	fmt.Print(got)
	c := policy.Counts()
	fmt.Printf("\nnotify's policy: accepted %d, untrusted %d, rejected %d (duplicate %d)\n",
		c.Accepted, c.Untrusted, c.Rejected, c.Duplicate)
	return nil
}

// describe lists what a handler sees in its request context.
func describe(ctx context.Context) string {
	var sb strings.Builder
	cleared := 0
	for _, f := range otelsession.Fields() {
		v, st := otelsession.Lookup(ctx, f)
		switch st {
		case otelsession.Set:
			fmt.Fprintf(&sb, "    %-26s set %q\n", f.Key(), v)
		case otelsession.Cleared:
			cleared++
		}
	}
	if cleared+countSet(ctx) == 0 {
		sb.WriteString("    every session field is unset: the handler runs without a session\n")
	} else {
		fmt.Fprintf(&sb, "    %d more fields cleared (bound empty by the gateway: no fallback to the environment)\n", cleared)
		_, st := otelsession.Lookup(ctx, otelsession.FieldUISessionID)
		fmt.Fprintf(&sb, "    %-26s %s (a local field: it never travels)\n", otelsession.FieldUISessionID.Key(), st)
	}
	if m := baggage.FromContext(ctx).Member("app.tenant"); m.Key() != "" {
		fmt.Fprintf(&sb, "    %-26s %q (ordinary baggage passes)\n", m.Key(), m.Value())
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		fmt.Fprintf(&sb, "    %-26s %s\n", "trace", sc.TraceID())
	}
	return sb.String()
}

func countSet(ctx context.Context) int {
	n := 0
	for _, f := range otelsession.Fields() {
		if _, st := otelsession.Lookup(ctx, f); st == otelsession.Set {
			n++
		}
	}
	return n
}

func call(ctx context.Context, client *http.Client, url string, report <-chan string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	return roundTrip(client, req, report)
}

// roundTrip sends req and returns what the server's handler reported.
func roundTrip(client *http.Client, req *http.Request, report <-chan string) (string, error) {
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	select {
	case s := <-report: // sent before the handler returned, so before the response
		return s, nil
	default:
		return "", fmt.Errorf("%s: the handler did not run (status %s)", req.URL, resp.Status)
	}
}

type server struct {
	host string // 127.0.0.1:port
	srv  *http.Server
}

// start serves h on 127.0.0.1 and a free port.
func start(h http.Handler) (*server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen on 127.0.0.1: %w", err)
	}
	s := &server{host: ln.Addr().String(), srv: &http.Server{Handler: h}}
	go s.srv.Serve(ln)
	return s, nil
}

func (s *server) Close() { _ = s.srv.Close() }
