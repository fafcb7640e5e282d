package httpsession_test

import (
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
	"github.com/sessionwire/sessionwire/propagation/httpsession"
)

// sendLines makes a GET request to url with the given baggage header lines.
func sendLines(t *testing.T, url string, got <-chan received, lines ...string) received {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header["Baggage"] = lines
	return do(t, http.DefaultClient, req, got)
}

// With no options Handler trusts nobody and reads the global propagator:
// the session is stripped, other baggage and trace context pass.
func TestHandlerDefaults(t *testing.T) {
	got := make(chan received, 1)
	srv := serve(t, httpsession.Handler(recorder(got)))
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Baggage", "session.chat_id=forged,app.tenant=acme")
	req.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	r := do(t, http.DefaultClient, req, got)
	if len(r.session) > 0 {
		t.Errorf("default Handler accepted a session: %v", r.session)
	}
	if v, _ := r.member("app.tenant"); v != "acme" {
		t.Errorf("app.tenant = %q, want it passed", v)
	}
	if tid := r.spanContext.TraceID().String(); tid != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace id in the handler = %s, want the request's", tid)
	}
}

// A refused session never fails the request; OnError sees the reason and a
// request whose context has the session Unset.
func TestHandlerRefusedSessionIsServed(t *testing.T) {
	got := make(chan received, 1)
	policy := propagation.NewInbound(propagation.TrustLoopback())
	var (
		mu       sync.Mutex
		errs     []error
		onErrSes []map[otelsession.Field]string
	)
	srv := serve(t, httpsession.Handler(recorder(got), httpsession.WithPropagator(w3c), httpsession.WithInbound(policy),
		httpsession.WithOnError(func(r *http.Request, err error) {
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, err)
			onErrSes = append(onErrSes, sessionOf(r.Context()))
		})))

	r := sendLines(t, srv.URL, got, "session.platform=slack,session.chat_id=a", "session.chat_id=b")
	if len(r.session) > 0 {
		t.Errorf("refused session reached the handler: %v", r.session)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) != 1 || !errors.Is(errs[0], propagation.ErrDuplicateMember) {
		t.Fatalf("OnError got %v, want one error wrapping %v", errs, propagation.ErrDuplicateMember)
	}
	if len(onErrSes[0]) > 0 {
		t.Errorf("OnError's request has session fields %v", onErrSes[0])
	}
	if c := policy.Counts(); c.Rejected != 1 || c.Duplicate != 1 {
		t.Errorf("counts = %+v", c)
	}
}

// When the session is not accepted, the handler behind gets baggage headers
// without it, so re-extracting them (otelhttp behind Handler, a proxy) cannot
// bring it back. An accepted session, or baggage without one, is handed on
// as it came.
func TestHandlerHandsOnHeadersMatchingItsVerdict(t *testing.T) {
	cases := []struct {
		name  string
		trust propagation.TrustFunc
		lines []string
		want  []string // header lines the next handler gets; nil: as sent
	}{
		{"untrusted session", propagation.TrustNone,
			[]string{"session.chat_id=c,app.tenant=acme"}, []string{"app.tenant=acme"}},
		{"untrusted session alone", propagation.TrustNone,
			[]string{"session.chat_id=c"}, []string{}},
		{"refused session", propagation.TrustAll,
			[]string{"session.chat_id=a,app.tenant=acme", "session.chat_id=b"}, []string{"app.tenant=acme"}},
		{"accepted session", propagation.TrustAll,
			[]string{"session.chat_id=c, app.tenant=acme", "app.x=1"}, nil},
		{"no session", propagation.TrustNone,
			[]string{"app.tenant=acme", "app.x=1;p"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan received, 1)
			srv := serve(t, httpsession.Handler(recorder(got), httpsession.WithPropagator(w3c),
				httpsession.WithInbound(propagation.NewInbound(tc.trust))))
			r := sendLines(t, srv.URL, got, tc.lines...)
			want := tc.want
			if want == nil {
				want = tc.lines
			}
			if !slices.Equal(r.baggage, want) && !(len(want) == 0 && len(r.baggage) == 0) {
				t.Errorf("next handler got baggage %q, want %q", r.baggage, want)
			}
		})
	}
}
