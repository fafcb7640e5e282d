package sessiontrace_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/otelsession/sessiontrace"
)

// recorder is one processor under test and the spans it annotated.
type recorder struct {
	tp  *sdktrace.TracerProvider
	rec *tracetest.SpanRecorder
}

func newRecorder(t *testing.T, r sessiontrace.Redaction) *recorder {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sessiontrace.NewSpanProcessor(r)), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	return &recorder{tp: tp, rec: rec}
}

// span starts and ends one span under ctx and returns its attributes.
func (r *recorder) span(ctx context.Context, name string) map[attribute.Key]string {
	_, s := r.tp.Tracer("test").Start(ctx, name)
	s.End()
	for _, ro := range r.rec.Ended() {
		if ro.Name() == name {
			got := map[attribute.Key]string{}
			for _, kv := range ro.Attributes() {
				got[kv.Key] = kv.Value.AsString()
			}
			return got
		}
	}
	return nil
}

// One processor remembers what it recorded per baggage: each span must still
// carry exactly its own context's session, whatever spans came before it,
// however the contexts differ (another session, another baggage beside the
// same session, a changed member, the same baggage with other local fields),
// and after more sessions than the memo holds.
func TestSpanProcessorMemoFollowsEachContext(t *testing.T) {
	t.Parallel()
	key := []byte("test-key-0123456789")
	fields := append(sessiontrace.DefaultSpanFields(), otelsession.FieldUISessionID)
	shared := newRecorder(t, sessiontrace.Redaction{HashKey: key, SpanFields: fields})
	n := 0
	check := func(ctx context.Context, what string) {
		t.Helper()
		n++
		got := shared.span(ctx, fmt.Sprint("span ", n))
		// What a processor that never saw another span records.
		want := newRecorder(t, sessiontrace.Redaction{HashKey: key, SpanFields: fields}).span(ctx, "fresh")
		assert.Equal(t, want, got, what)
	}
	a := otelsession.Bind(context.Background(), session())
	other := session()
	other.ChatID, other.UserID, other.UISessionID = "-100999", "77", "tab-9"
	b := otelsession.Bind(context.Background(), other)
	check(a, "first session")
	check(b, "another session")
	check(a, "the first again")

	m, err := baggage.NewMember("app.tenant", "blue")
	require.NoError(t, err)
	withApp, err := baggage.FromContext(a).SetMember(m)
	require.NoError(t, err)
	check(baggage.ContextWithBaggage(a, withApp), "the same session beside application baggage")
	check(otelsession.With(a, otelsession.FieldChatID, "-100555"), "a member changed")
	local := otelsession.With(a, otelsession.FieldUISessionID, "tab-42")
	got := shared.span(local, "local changed")
	assert.Equal(t, "tab-42", got["session.ui_session_id"], "the same baggage with another local field")
	check(otelsession.Clear(a), "cleared")
	check(context.Background(), "no session")

	// More sessions than the memo has room for, twice over: evicted entries
	// are rebuilt, never mixed up.
	ctxs := make([]context.Context, 600)
	for i := range ctxs {
		s := session()
		s.ChatID, s.MessageID = fmt.Sprint("-100", i), fmt.Sprint(i)
		ctxs[i] = otelsession.Bind(context.Background(), s)
	}
	for round := range 2 {
		for i, ctx := range ctxs {
			got := shared.span(ctx, fmt.Sprint("many ", round, " ", i))
			if got["session.chat_id"] != fmt.Sprint("-100", i) || got["session.message_id"] != fmt.Sprint(i) {
				t.Fatalf("round %d, session %d: span carried %v", round, i, got)
			}
		}
	}
}

// Two processors with different redactions never see each other's
// attributes for the same baggage.
func TestSpanProcessorMemoIsPerProcessor(t *testing.T) {
	t.Parallel()
	ctx := otelsession.Bind(context.Background(), session())
	hashed := newRecorder(t, sessiontrace.Redaction{HashKey: []byte("test-key-0123456789")})
	copied := newRecorder(t, sessiontrace.Redaction{Actions: map[otelsession.Field]sessiontrace.Action{otelsession.FieldUserID: sessiontrace.Copy}})
	for range 3 {
		assert.NotEqual(t, "55", hashed.span(ctx, "h")["session.user_id"])
		assert.Equal(t, "55", copied.span(ctx, "c")["session.user_id"])
	}
}

// Concurrent spans of many sessions through one processor each carry their
// own session and nothing of another's (run with -race): through the memo of
// remote fields, and with every field recorded, local fields included, which
// the processor reads into a slice it reuses from span to span (this fails,
// and -race reports races, should the slice go back to its pool before the
// span has copied it).
func TestSpanProcessorConcurrentSpansKeepTheirSessions(t *testing.T) {
	for _, c := range []struct {
		name            string
		r               sessiontrace.Redaction
		sessions, spans int
	}{
		{"memo", sessiontrace.Redaction{}, 300, 5},
		{"every field", sessiontrace.Redaction{SpanFields: all}, 16, 50},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sessiontrace.NewSpanProcessor(c.r)), sdktrace.WithSpanProcessor(rec))
			defer func() { require.NoError(t, tp.Shutdown(context.Background())) }()
			var wg sync.WaitGroup
			for i := range c.sessions {
				wg.Go(func() {
					s := session()
					s.ChatID = fmt.Sprint("-100", i)
					s.UISessionID = fmt.Sprint("tab-", i)
					ctx := otelsession.Bind(context.Background(), s)
					for range c.spans {
						_, span := tp.Tracer("test").Start(ctx, s.ChatID)
						span.End()
					}
				})
			}
			wg.Wait()
			ended := rec.Ended()
			require.Len(t, ended, c.sessions*c.spans)
			perChat := map[string]int{}
			for _, sp := range ended {
				got := map[attribute.Key]string{}
				for _, kv := range sp.Attributes() {
					got[kv.Key] = kv.Value.AsString()
				}
				chat := got["session.chat_id"]
				require.Equal(t, sp.Name(), chat, "a span of chat %s carried another chat", sp.Name())
				require.Equal(t, "telegram", got["session.platform"])
				if c.r.SpanFields != nil {
					require.Equal(t, "tab-"+strings.TrimPrefix(chat, "-100"), got["session.ui_session_id"],
						"a span of chat %s holds another session's local field", chat)
				}
				perChat[chat]++
			}
			require.Len(t, perChat, c.sessions)
			for chat, n := range perChat {
				require.Equal(t, c.spans, n, chat)
			}
		})
	}
}

// What a processor's memo keeps alive when full: its entries, their
// attribute slices and the baggages they hold. Measured over baggage built
// without Bind, whose own cache would otherwise hold the same maps.
func TestSpanProcessorMemoMemoryBound(t *testing.T) {
	full := baggage.FromContext(otelsession.Bind(context.Background(), fullSession())).Members()
	measure := func(p *sessiontrace.SpanProcessor, sessions int) float64 {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p))
		defer func() { require.NoError(t, tp.Shutdown(context.Background())) }()
		tr := tp.Tracer("test")
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range sessions {
			ms := make([]baggage.Member, 0, len(full))
			for _, m := range full {
				if m.Key() == otelsession.FieldChatID.Key() {
					// A fresh value per session, as a gateway decodes it.
					var err error
					m, err = baggage.NewMemberRaw(m.Key(), fmt.Sprintf("-100%010d", i))
					require.NoError(t, err)
				}
				ms = append(ms, m)
			}
			b, err := baggage.New(ms...)
			require.NoError(t, err)
			_, span := tr.Start(baggage.ContextWithBaggage(context.Background(), b), "work")
			span.End()
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(p)
		return float64(int64(after.HeapAlloc) - int64(before.HeapAlloc))
	}
	// Eight sessions per slot: every slot all but surely filled.
	held := measure(sessiontrace.NewSpanProcessor(sessiontrace.Redaction{HashKey: []byte("k")}), 8*256)
	t.Logf("a full memo of %d-member sessions holds %.0f KiB (%.0f bytes a slot)", len(full), held/1024, held/256)
	if held > 1<<20 {
		t.Errorf("a processor's full memo holds %.0f KiB, want under 1 MiB", held/1024)
	}
}
