package httpsession_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/baggage"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/httpsession"
)

// hostOf returns the host:port of a test server's URL.
func hostOf(t *testing.T, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

func TestTransportSendsSessionOnlyWhereAllowed(t *testing.T) {
	internalGot, thirdGot := make(chan received, 1), make(chan received, 1)
	internal, third := serve(t, recorder(internalGot)), serve(t, recorder(thirdGot))
	ctx := boundContext()
	wantTraceID := "4bf92f3577b34da6a3ce929d0e0e4736"

	cases := []struct {
		name      string
		transport *httpsession.Transport
	}{
		{"explicit propagator", &httpsession.Transport{Propagator: w3c,
			Outbound: propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{Hosts: []string{hostOf(t, internal.URL)}}))}},
		{"global propagator", &httpsession.Transport{
			Outbound: propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{Prefixes: []string{internal.URL + "/v1"}}))}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client := &http.Client{Transport: tc.transport}
			t.Cleanup(client.CloseIdleConnections)

			in := get(t, ctx, client, internal.URL+"/v1/notify", internalGot)
			for _, f := range []otelsession.Field{otelsession.FieldPlatform, otelsession.FieldChatID, otelsession.FieldThreadID} {
				want, _ := otelsession.Lookup(ctx, f)
				if got, ok := in.member(f.Key()); !ok || got != want {
					t.Errorf("allowed host: %s = %q (present %v), want %q", f.Key(), got, ok, want)
				}
			}
			out := get(t, ctx, client, third.URL+"/v1/notify", thirdGot)
			if out.hasSessionMember() {
				t.Errorf("third party got session members: %q", out.baggage)
			}
			for name, r := range map[string]received{"allowed": in, "third party": out} {
				if _, ok := r.member(otelsession.FieldUISessionID.Key()); ok {
					t.Errorf("%s host got a local field", name)
				}
				if v, _ := r.member("app.tenant"); v != "acme" {
					t.Errorf("%s host: app.tenant = %q, want the foreign member everywhere", name, v)
				}
				if !strings.Contains(r.traceparent, wantTraceID) {
					t.Errorf("%s host: traceparent %q, want trace %s", name, r.traceparent, wantTraceID)
				}
			}
		})
	}
}

// Session members that other code already wrote into the request's headers
// (an otelhttp transport in front, a hand-built header) are removed too, and
// the caller's request is left as it was.
func TestTransportStripsSessionItDidNotInject(t *testing.T) {
	got := make(chan received, 1)
	third := serve(t, recorder(got))
	client := &http.Client{Transport: &httpsession.Transport{Propagator: w3c}}
	t.Cleanup(client.CloseIdleConnections)

	// Only a session in the context: without it the baggage is empty and the
	// propagator leaves the header lines the caller wrote in place.
	ctx := otelsession.Bind(context.Background(), otelsession.Session{ChatID: "C024BE91L"})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, third.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Add("Baggage", "session.scope_id=g1,app.legacy=1")
	req.Header.Add("Baggage", "session.user_id=U9")
	req.Header.Add("Baggage", "session.thread_id=not a value,app.kept=1") // not valid baggage: removed by its key alone
	req.Header["baggage"] = []string{"session.key=k1,app.lower=1"}        // a spelling net/http's methods never see
	req.Header["BAGGAGE"] = []string{"SESSION.chat_id=forged,session%2Escope_id=g"}
	req.Header.Set("X-Other", "kept")
	before := req.Header.Clone()

	r := do(t, client, req, got)
	if r.hasSessionMember() {
		t.Errorf("third party got session members: %q", r.baggage)
	}
	if v, _ := r.member("app.legacy"); v != "1" {
		t.Errorf("app.legacy = %q, want the caller's foreign member kept", v)
	}
	for _, k := range []string{"app.kept", "app.lower"} {
		if v, _ := r.member(k); v != "1" {
			t.Errorf("%s = %q, want the caller's foreign member kept", k, v)
		}
	}
	if !reflect.DeepEqual(req.Header, before) {
		t.Errorf("the caller's request was modified: header %v, was %v", req.Header, before)
	}
	if req.Context() != ctx {
		t.Error("the caller's request has another context")
	}
	if v, _ := otelsession.Lookup(req.Context(), otelsession.FieldChatID); v != "C024BE91L" {
		t.Errorf("the caller's context lost its session: chat id %q", v)
	}
}

// redirectServers starts the host a test's policy allows, whose /away
// redirects to a third host, and the third host; each records what it got.
func redirectServers(t *testing.T) (internal *httptest.Server, internalGot, thirdGot chan received) {
	t.Helper()
	thirdGot, internalGot = make(chan received, 1), make(chan received, 1)
	third := serve(t, recorder(thirdGot))
	internal = serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/away" {
			http.Redirect(w, r, third.URL+"/landing", http.StatusFound)
			return
		}
		recorder(internalGot).ServeHTTP(w, r)
	}))
	return internal, internalGot, thirdGot
}

// http.Client asks the Transport again for every redirect: a redirect from
// an allowed host to another one does not carry the session there.
func TestTransportRedirectLeavesSessionBehind(t *testing.T) {
	internal, internalGot, thirdGot := redirectServers(t)
	client := &http.Client{Transport: &httpsession.Transport{Propagator: w3c,
		Outbound: propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{Hosts: []string{hostOf(t, internal.URL)}}))}}
	t.Cleanup(client.CloseIdleConnections)

	if r := get(t, boundContext(), client, internal.URL+"/here", internalGot); !r.hasSessionMember() {
		t.Fatalf("allowed host got no session: %q", r.baggage)
	}
	if r := get(t, boundContext(), client, internal.URL+"/away", thirdGot); r.hasSessionMember() {
		t.Errorf("redirect target got session members: %q", r.baggage)
	}
}

func TestTransportRequestWithoutHeader(t *testing.T) {
	got := make(chan received, 1)
	srv := serve(t, recorder(got))
	client := &http.Client{Transport: &httpsession.Transport{Propagator: w3c,
		Outbound: propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{Hosts: []string{hostOf(t, srv.URL)}}))}}
	t.Cleanup(client.CloseIdleConnections)
	req, err := http.NewRequestWithContext(boundContext(), http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = nil
	if r := do(t, client, req, got); !r.hasSessionMember() {
		t.Errorf("no session sent: %q", r.baggage)
	}
}

// The zero Transport sends through http.DefaultTransport and sends no
// session anywhere.
func TestTransportZeroValue(t *testing.T) {
	got := make(chan received, 1)
	srv := serve(t, recorder(got))
	client := &http.Client{Transport: &httpsession.Transport{}}
	r := get(t, boundContext(), client, srv.URL, got)
	if r.hasSessionMember() {
		t.Errorf("zero Transport sent session members: %q", r.baggage)
	}
	if v, _ := r.member("app.tenant"); v != "acme" {
		t.Errorf("app.tenant = %q, want it sent", v)
	}
}

type countingBase struct {
	http.RoundTripper
	closed atomic.Int32
}

func (c *countingBase) CloseIdleConnections() { c.closed.Add(1) }

func TestTransportCloseIdleConnectionsReachesBase(t *testing.T) {
	base := &countingBase{RoundTripper: http.DefaultTransport}
	(&http.Client{Transport: &httpsession.Transport{Base: base}}).CloseIdleConnections()
	if base.closed.Load() != 1 {
		t.Errorf("Base.CloseIdleConnections called %d times, want 1", base.closed.Load())
	}
}

// A session value that no edge would accept, written into the baggage by
// code other than otelsession's writers, is withheld rather than sent to be
// refused one hop later, and the reason reaches otel.Handle.
func TestTransportWithholdsAnInvalidSession(t *testing.T) {
	got := make(chan received, 1)
	internal := serve(t, recorder(got))
	client := &http.Client{Transport: &httpsession.Transport{Propagator: w3c,
		Outbound: propagation.NewOutbound(propagation.AllowURLs(propagation.Egress{Hosts: []string{hostOf(t, internal.URL)}}))}}
	t.Cleanup(client.CloseIdleConnections)

	m, err := baggage.NewMemberRaw("session.thread_id", "17585\nX-Injected: yes")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := baggage.New(m)
	req, err := http.NewRequestWithContext(baggage.ContextWithBaggage(context.Background(), b), http.MethodGet, internal.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := do(t, client, req, got)
	if r.hasSessionMember() {
		t.Errorf("an invalid session was sent: %q", r.baggage)
	}
	if !reported.contains("httpsession: outgoing request") {
		t.Error("the withheld session was not reported to otel.Handle")
	}
}
