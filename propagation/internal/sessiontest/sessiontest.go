// Package sessiontest holds the session fixtures and checks the queue
// transports' tests share: a session per conversation with values that need
// encoding and Cleared fields, what a consumer must read for it, and a diff.
package sessiontest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	otelprop "go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/propagation"
)

// W3C is the propagator the tests configure explicitly.
var W3C = otelprop.NewCompositeTextMapPropagator(otelprop.TraceContext{}, otelprop.Baggage{})

// NewTracing returns a tracer provider recording into memory, shut down with t.
func NewTracing(t testing.TB) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

// SessionFor is conversation i's session: values that need percent-encoding,
// some fields Cleared, every cron marker state, some stateless channels.
func SessionFor(i int) otelsession.Session {
	s := otelsession.Session{
		Platform: "telegram", Source: "gateway", ChatID: fmt.Sprint("-100", i), ChatType: "group",
		ChatName: fmt.Sprintf("Équipe %d, \"ops\"; 100%% = done", i), ThreadID: fmt.Sprint("thread-", i),
		UserID: fmt.Sprint("user-", i), UserIDAlt: fmt.Sprint("alt-", i), UserName: fmt.Sprintf("Zoë %d", i),
		ScopeID: fmt.Sprint("guild-", i), SessionKey: fmt.Sprintf("agent:main:%d", i), SessionID: fmt.Sprint("sess-", i),
		UISessionID: "tab", MessageID: fmt.Sprint("msg-", i), Profile: "default", BrowserControlPrincipal: "p",
		BrowserControlTransportFamily: "cdp", ParentChatID: fmt.Sprint("parent-", i), Cron: otelsession.CronMarker(i % 3),
		Cwd: "/work", Stateless: i%4 == 0,
	}
	if i%2 == 0 {
		s.ThreadID, s.UserName = "", ""
	}
	return s
}

// FieldWant is a field's expected value and state.
type FieldWant struct {
	Value string
	State otelsession.State
}

// Received is what a consumer in another process reads for s: remote fields
// Set or Cleared as bound, local fields Unset.
func Received(s otelsession.Session) map[otelsession.Field]FieldWant {
	w := map[otelsession.Field]FieldWant{}
	for f, v := range map[otelsession.Field]string{
		otelsession.FieldPlatform: s.Platform, otelsession.FieldSource: s.Source, otelsession.FieldChatID: s.ChatID,
		otelsession.FieldChatType: s.ChatType, otelsession.FieldChatName: s.ChatName, otelsession.FieldThreadID: s.ThreadID,
		otelsession.FieldUserID: s.UserID, otelsession.FieldUserIDAlt: s.UserIDAlt, otelsession.FieldUserName: s.UserName,
		otelsession.FieldScopeID: s.ScopeID, otelsession.FieldSessionKey: s.SessionKey, otelsession.FieldSessionID: s.SessionID,
		otelsession.FieldMessageID: s.MessageID, otelsession.FieldProfile: s.Profile, otelsession.FieldParentChatID: s.ParentChatID,
	} {
		if v == "" {
			w[f] = FieldWant{State: otelsession.Cleared}
		} else {
			w[f] = FieldWant{v, otelsession.Set}
		}
	}
	switch s.Cron {
	case otelsession.CronOff:
		w[otelsession.FieldCronSession] = FieldWant{State: otelsession.Cleared}
	case otelsession.CronOn:
		w[otelsession.FieldCronSession] = FieldWant{"1", otelsession.Set}
	}
	return w
}

// Diff lists how ctx's session differs from want (fields absent from want
// must be Unset), the working directory (never sent) and async delivery.
func Diff(ctx context.Context, want map[otelsession.Field]FieldWant, stateless bool) string {
	var out []string
	for _, f := range otelsession.Fields() {
		v, st := otelsession.Lookup(ctx, f)
		if w := want[f]; v != w.Value || st != w.State {
			out = append(out, fmt.Sprintf("%s = %q (%s), want %q (%s)", f, v, st, w.Value, w.State))
		}
	}
	if cwd := otelsession.Cwd(ctx); cwd != "" {
		out = append(out, fmt.Sprintf("cwd = %q, want none", cwd))
	}
	if got := otelsession.AsyncDeliverySupported(ctx); got == stateless {
		out = append(out, fmt.Sprintf("async delivery supported = %v, want %v", got, !stateless))
	}
	return strings.Join(out, "\n\t")
}

// WorkerBase is a poll loop's context with a session of its own, so that any
// field a record fails to reset shows up.
func WorkerBase() context.Context {
	ctx := otelsession.Bind(context.Background(), otelsession.Session{
		Platform: "worker", ChatID: "worker", ThreadID: "worker", UserID: "worker", ScopeID: "worker",
		UISessionID: "worker", Cron: otelsession.CronOn, Cwd: "/worker", Stateless: true,
	})
	ctx = otelsession.With(ctx, otelsession.FieldCronAutoDeliverChatID, "worker")
	return otelsession.WithCronJob(ctx, otelsession.CronJob{ID: "worker"})
}

// WithTenant adds a baggage member that is not a session field.
func WithTenant(ctx context.Context) context.Context {
	m, _ := baggage.NewMemberRaw("app.tenant", "acme")
	b, _ := baggage.New(m)
	return baggage.ContextWithBaggage(ctx, b)
}

// SigningPolicies returns a signer and the policy of a consumer that trusts
// no peer and accepts a session only through a signature made with it.
func SigningPolicies(t testing.TB) (*propagation.Signer, *propagation.Inbound) {
	t.Helper()
	key := propagation.Key{ID: "k1", Secret: []byte(strings.Repeat("s", 32))}
	signer, err := propagation.NewSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := propagation.NewVerifier([]propagation.Key{key})
	if err != nil {
		t.Fatal(err)
	}
	return signer, propagation.NewInbound(propagation.TrustNone, propagation.WithVerifier(verifier))
}

// WantAccepted fails t unless ctx holds exactly conversation i's session.
func WantAccepted(t testing.TB, ctx context.Context, err error, i int) {
	t.Helper()
	if err != nil {
		t.Fatalf("refused the signed message: %v", err)
	}
	if d := Diff(ctx, Received(SessionFor(i)), SessionFor(i).Stateless); d != "" {
		t.Fatalf("accepted, but:\n\t%s", d)
	}
}

// WantNoSignature fails t when ctx still holds a signature: one bound to
// the message it came on verifies nowhere else, so the policy removes it
// once it accepted the session.
func WantNoSignature(t testing.TB, ctx context.Context) {
	t.Helper()
	if baggage.FromContext(ctx).Member(otelsession.SignatureKey).Key() != "" {
		t.Fatal("a signature bound to its message is still in the context")
	}
}

// WantBadSignature fails t unless the message's session was refused as
// ErrBadSignature and stripped: the whole session Unset, the worker's own
// included.
func WantBadSignature(t testing.TB, ctx context.Context, err error) {
	t.Helper()
	if !errors.Is(err, propagation.ErrBadSignature) {
		t.Fatalf("err %v, want ErrBadSignature", err)
	}
	if d := Diff(ctx, nil, false); d != "" {
		t.Fatalf("refused, but the session is not stripped:\n\t%s", d)
	}
}
