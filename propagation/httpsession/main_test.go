package httpsession_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/sessionwire/sessionwire/otelsession"
)

// w3c is what a program installs with otel.SetTextMapPropagator. TestMain
// installs it for the tests of the defaults; the other tests pass it.
var w3c = otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})

func TestMain(m *testing.M) {
	otel.SetTextMapPropagator(w3c)
	otel.SetErrorHandler(reported)
	goleak.VerifyTestMain(m)
}

// reported collects what reaches otel.Handle.
var reported = &errorLog{}

type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) Handle(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

// contains reports whether an error whose text contains s was reported.
func (l *errorLog) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, err := range l.errs {
		if strings.Contains(err.Error(), s) {
			return true
		}
	}
	return false
}

// matches reports whether an error wrapping target was reported.
func (l *errorLog) matches(target error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, err := range l.errs {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// received is what a server got: the request's baggage header lines, its
// traceparent, and the session its handler saw in the request context.
type received struct {
	baggage     []string
	traceparent string
	session     map[otelsession.Field]string // Set fields only, "" for Cleared
	spanContext trace.SpanContext            // the handler's current span
	ctxBaggage  map[string]string            // every member of the handler's context baggage
}

// hasSessionMember reports whether any header line carries a session member.
func (r received) hasSessionMember() bool {
	for _, l := range r.baggage {
		b, _ := baggage.Parse(l)
		for _, m := range b.Members() {
			if otelsession.OwnedKey(m.Key()) {
				return true
			}
		}
	}
	return false
}

// member returns the value of key in the header lines, and whether present.
func (r received) member(key string) (string, bool) {
	for _, l := range r.baggage {
		b, _ := baggage.Parse(l)
		if m := b.Member(key); m.Key() != "" {
			return m.Value(), true
		}
	}
	return "", false
}

// recorder is an application handler that reports what it received on a
// channel, before it writes the response.
func recorder(got chan<- received) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := received{
			baggage:     r.Header.Values("Baggage"),
			traceparent: r.Header.Get("Traceparent"),
			session:     sessionOf(r.Context()),
			spanContext: trace.SpanContextFromContext(r.Context()),
			ctxBaggage:  make(map[string]string),
		}
		for _, m := range baggage.FromContext(r.Context()).Members() {
			rec.ctxBaggage[m.Key()] = m.Value()
		}
		got <- rec
		io.WriteString(w, "ok")
	})
}

// sessionOf lists the fields bound in ctx: Set ones with their value,
// Cleared ones as "".
func sessionOf(ctx context.Context) map[otelsession.Field]string {
	m := make(map[otelsession.Field]string)
	for _, f := range otelsession.Fields() {
		if v, st := otelsession.Lookup(ctx, f); st != otelsession.Unset {
			m[f] = v
		}
	}
	return m
}

// serve starts h on 127.0.0.1 for the duration of the test.
func serve(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

// get makes a GET request to url with ctx through client and returns the
// value the server's recorder sent.
func get(t *testing.T, ctx context.Context, client *http.Client, url string, got <-chan received) received {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, client, req, got)
}

func do(t *testing.T, client *http.Client, req *http.Request, got <-chan received) received {
	t.Helper()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	select {
	case r := <-got:
		return r
	default:
		t.Fatal("the server's handler did not run")
		return received{}
	}
}

// boundContext returns a context with a session, a foreign baggage member
// and a sampled span context, as a gateway's request handler would have.
func boundContext() context.Context {
	ctx := otelsession.Bind(context.Background(), otelsession.Session{
		Platform: "slack", ChatID: "C024BE91L", ThreadID: "1700000000.000100", UserID: "U1",
		UISessionID: "tab-1", Cwd: "/srv/work",
	})
	app, _ := baggage.NewMemberRaw("app.tenant", "acme")
	b, _ := baggage.FromContext(ctx).SetMember(app)
	ctx = baggage.ContextWithBaggage(ctx, b)
	return trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	}))
}
