package sessiontrace_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	otellog "go.opentelemetry.io/otel/log"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/otelsession/sessiontrace"
)

func session() otelsession.Session {
	return otelsession.Session{
		Platform: "telegram", ChatID: "-100123", ThreadID: "", UserID: "55", UserName: "Alice Example",
		MessageID: "881", UISessionID: "tab-3", BrowserControlPrincipal: "user:alice", Cron: otelsession.CronOff,
	}
}

// startSpan records one span started under ctx and returns its attributes.
func startSpan(t *testing.T, r sessiontrace.Redaction, ctx context.Context) map[attribute.Key]string {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sessiontrace.NewSpanProcessor(r)), sdktrace.WithSpanProcessor(rec))
	defer func() { require.NoError(t, tp.Shutdown(context.Background())) }()
	_, span := tp.Tracer("test").Start(ctx, "work")
	span.End()
	spans := rec.Ended()
	require.Len(t, spans, 1)
	got := map[attribute.Key]string{}
	for _, kv := range spans[0].Attributes() {
		got[kv.Key] = kv.Value.AsString()
	}
	return got
}

// all records every field on spans, as before the default narrowed to the
// routing identity.
var all = otelsession.Fields()

func TestSpanProcessorAttributes(t *testing.T) {
	t.Parallel()
	ctx := otelsession.Bind(context.Background(), session())
	got := startSpan(t, sessiontrace.Redaction{SpanFields: all}, ctx)

	assert.Equal(t, "telegram", got["session.platform"])
	assert.Equal(t, "-100123", got["session.chat_id"])
	assert.Equal(t, "tab-3", got["session.ui_session_id"], "local fields reach spans of this process")
	v, ok := got["session.thread_id"]
	assert.True(t, ok, "a Cleared field is recorded")
	assert.Equal(t, "", v, "as the empty string")
	_, ok = got["session.cron_auto_deliver_chat_id"]
	assert.False(t, ok, "an Unset field is not recorded")
	_, ok = got["session.user_name"]
	assert.False(t, ok, "no hash key: the user name is dropped by default")
	_, ok = got["session.browser_control_principal"]
	assert.False(t, ok)
	_, ok = got["session.user_id"]
	assert.False(t, ok, "no hash key: the user id is dropped from spans by default")
	for k, v := range got {
		assert.NotContains(t, v, "\x00", "%s carries the wire marker", k)
		assert.NotContains(t, v, "Alice", k)
	}
}

func TestConversationID(t *testing.T) {
	t.Parallel()
	s := session()
	s.SessionKey = "agent:main:telegram:-100123:"
	got := startSpan(t, sessiontrace.Redaction{}, otelsession.Bind(context.Background(), s))
	_, ok := got["gen_ai.conversation.id"]
	assert.False(t, ok, "opt-in: session.key alone by default")
	assert.Equal(t, s.SessionKey, got["session.key"])

	on := sessiontrace.Redaction{ConversationID: true}
	got = startSpan(t, on, otelsession.Bind(context.Background(), s))
	assert.Equal(t, s.SessionKey, got["gen_ai.conversation.id"], "the conversation is the session key")
	assert.Equal(t, s.SessionKey, got["session.key"])

	// It follows the session key's redaction.
	key := []byte("test-key-0123456789")
	got = startSpan(t, sessiontrace.Redaction{HashKey: key, ConversationID: true, Actions: map[otelsession.Field]sessiontrace.Action{
		otelsession.FieldSessionKey: sessiontrace.Hash}}, otelsession.Bind(context.Background(), s))
	assert.True(t, strings.HasPrefix(got["gen_ai.conversation.id"], "hmac:"))
	assert.Equal(t, got["session.key"], got["gen_ai.conversation.id"])
	got = startSpan(t, sessiontrace.Redaction{ConversationID: true, Actions: map[otelsession.Field]sessiontrace.Action{
		otelsession.FieldSessionKey: sessiontrace.Drop}}, otelsession.Bind(context.Background(), s))
	_, ok = got["gen_ai.conversation.id"]
	assert.False(t, ok, "a dropped session key drops the conversation id")

	// No key, or a Cleared one: no conversation id.
	got = startSpan(t, on, otelsession.Bind(context.Background(), session()))
	_, ok = got["gen_ai.conversation.id"]
	assert.False(t, ok, "an Unset session key")
	cleared := s
	cleared.SessionKey = ""
	got = startSpan(t, on, otelsession.Bind(context.Background(), cleared))
	_, ok = got["gen_ai.conversation.id"]
	assert.False(t, ok, "a Cleared session key")

	// Log records follow the same option.
	for _, opt := range []bool{false, true} {
		var buf bytes.Buffer
		logger := slog.New(sessiontrace.NewLogHandler(slog.NewJSONHandler(&buf, nil), sessiontrace.Redaction{ConversationID: opt}))
		logger.InfoContext(otelsession.Bind(context.Background(), s), "notified")
		var rec map[string]any
		require.NoError(t, json.Unmarshal(buf.Bytes(), &rec))
		if opt {
			assert.Equal(t, s.SessionKey, rec["gen_ai.conversation.id"], "slog, opted in")
		} else {
			assert.NotContains(t, rec, "gen_ai.conversation.id", "slog, by default")
		}
		exp := &recordingLogExporter{}
		lp := sdklog.NewLoggerProvider(
			sdklog.WithProcessor(sessiontrace.NewLogProcessor(sessiontrace.Redaction{ConversationID: opt})),
			sdklog.WithProcessor(sdklog.NewSimpleProcessor(exp)))
		var r otellog.Record
		lp.Logger("test").Emit(otelsession.Bind(context.Background(), s), r)
		require.NoError(t, lp.Shutdown(context.Background()))
		require.Len(t, exp.records, 1)
		var conv string
		exp.records[0].WalkAttributes(func(kv attribute.KeyValue) bool {
			if kv.Key == sessiontrace.ConversationIDKey {
				conv = kv.Value.AsString()
			}
			return true
		})
		if opt {
			assert.Equal(t, s.SessionKey, conv, "OTel log records, opted in")
		} else {
			assert.Empty(t, conv, "OTel log records, by default")
		}
	}
}

// By default a span carries the routing identity (with the scope and the
// conversation) and the user id hashed, nothing else; a Cleared field of the set is still recorded.
func TestSpanProcessorDefaultFields(t *testing.T) {
	t.Parallel()
	ctx := otelsession.Bind(context.Background(), session())
	got := startSpan(t, sessiontrace.Redaction{HashKey: []byte("test-key-0123456789")}, ctx)
	keys := make([]string, 0, len(got))
	for k := range got {
		keys = append(keys, string(k))
	}
	assert.ElementsMatch(t, []string{"session.platform", "session.scope_id", "session.chat_id", "session.thread_id",
		"session.message_id", "session.key", "session.user_id"}, keys)
	assert.Equal(t, "", got["session.key"], "Cleared (Bind clears what the session leaves empty)")
	assert.Equal(t, "881", got["session.message_id"])
	assert.Equal(t, "", got["session.thread_id"], "Cleared")
	assert.True(t, strings.HasPrefix(got["session.user_id"], "hmac:"), "user id hashed: %q", got["session.user_id"])

	// The scope and the conversation are routing identity too.
	scoped := session()
	scoped.ScopeID, scoped.SessionKey = "guild-7", "agent:main:discord:guild-7:c1"
	got = startSpan(t, sessiontrace.Redaction{}, otelsession.Bind(context.Background(), scoped))
	assert.Equal(t, "guild-7", got["session.scope_id"])
	assert.Equal(t, scoped.SessionKey, got["session.key"])
	_, ok := got["gen_ai.conversation.id"]
	assert.False(t, ok, "the GenAI conversation id is opt-in")
	_, ok = got["session.user_id"]
	assert.False(t, ok, "without a hash key the user id is dropped")
	_, ok = got["session.user_name"]
	assert.False(t, ok, "the user name is opt-in")

	// What SpanFields names is recorded, and Actions still decide how.
	got = startSpan(t, sessiontrace.Redaction{
		SpanFields: []otelsession.Field{otelsession.FieldChatID, otelsession.FieldUserID},
		Actions:    map[otelsession.Field]sessiontrace.Action{otelsession.FieldUserID: sessiontrace.Copy},
	}, ctx)
	assert.Equal(t, map[attribute.Key]string{"session.chat_id": "-100123", "session.user_id": "55"}, got)
}

func TestSpanWithoutSession(t *testing.T) {
	t.Parallel()
	assert.Empty(t, startSpan(t, sessiontrace.Redaction{}, context.Background()))
}

// A span started before its session was decided (otelgrpc's server span,
// before grpcsession's policy) gets it from Annotate, redacted the same way;
// a span that is not recording is left alone.
func TestAnnotate(t *testing.T) {
	t.Parallel()
	key := []byte("test-key-0123456789")
	proc := sessiontrace.NewSpanProcessor(sessiontrace.Redaction{HashKey: key})
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(proc), sdktrace.WithSpanProcessor(rec))
	defer func() { require.NoError(t, tp.Shutdown(context.Background())) }()
	_, span := tp.Tracer("test").Start(context.Background(), "server")
	proc.Annotate(otelsession.Bind(context.Background(), session()), span)
	span.End()
	proc.Annotate(otelsession.Bind(context.Background(), session()), span) // ended: not recording
	require.Len(t, rec.Ended(), 1)
	got := map[attribute.Key]string{}
	for _, kv := range rec.Ended()[0].Attributes() {
		got[kv.Key] = kv.Value.AsString()
	}
	want := startSpan(t, sessiontrace.Redaction{HashKey: key}, otelsession.Bind(context.Background(), session()))
	assert.Equal(t, want, got, "the attributes OnStart would have set")
	assert.True(t, strings.HasPrefix(got["session.user_id"], "hmac:"), "the user id hashed, as OnStart does")

	_, bare := tp.Tracer("test").Start(context.Background(), "no session")
	proc.Annotate(context.Background(), bare)
	bare.End()
	assert.Empty(t, rec.Ended()[1].Attributes())
}

func TestRedaction(t *testing.T) {
	t.Parallel()
	ctx := otelsession.Bind(context.Background(), session())
	key := []byte("test-key-0123456789")
	tests := []struct {
		name  string
		r     sessiontrace.Redaction
		check func(t *testing.T, got map[attribute.Key]string)
	}{
		{"hash with a key", sessiontrace.Redaction{HashKey: key, SpanFields: all}, func(t *testing.T, got map[attribute.Key]string) {
			assert.True(t, strings.HasPrefix(got["session.user_name"], "hmac:"))
			assert.Len(t, got["session.user_name"], len("hmac:")+32)
			assert.True(t, strings.HasPrefix(got["session.browser_control_principal"], "hmac:"))
			assert.NotEqual(t, got["session.user_name"], got["session.browser_control_principal"])
		}},
		{"copy overrides the default", sessiontrace.Redaction{SpanFields: all, Actions: map[otelsession.Field]sessiontrace.Action{
			otelsession.FieldUserName: sessiontrace.Copy,
		}}, func(t *testing.T, got map[attribute.Key]string) {
			assert.Equal(t, "Alice Example", got["session.user_name"])
		}},
		{"drop a field, Cleared too", sessiontrace.Redaction{Actions: map[otelsession.Field]sessiontrace.Action{
			otelsession.FieldChatID: sessiontrace.Drop, otelsession.FieldThreadID: sessiontrace.Drop,
		}}, func(t *testing.T, got map[attribute.Key]string) {
			_, chat := got["session.chat_id"]
			_, thread := got["session.thread_id"]
			assert.False(t, chat || thread)
			assert.Equal(t, "telegram", got["session.platform"])
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.check(t, startSpan(t, tt.r, ctx)) })
	}

	// Keyed: the same name correlates under one key and differs under another.
	a := startSpan(t, sessiontrace.Redaction{HashKey: key, SpanFields: all}, ctx)["session.user_name"]
	b := startSpan(t, sessiontrace.Redaction{HashKey: key, SpanFields: all}, ctx)["session.user_name"]
	c := startSpan(t, sessiontrace.Redaction{HashKey: []byte("another-key"), SpanFields: all}, ctx)["session.user_name"]
	assert.Equal(t, a, b)
	assert.NotEqual(t, a, c)
}

func TestLogHandler(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	logger := slog.New(sessiontrace.NewLogHandler(slog.NewJSONHandler(&buf, nil), sessiontrace.Redaction{}))

	tp := sdktrace.NewTracerProvider()
	defer func() { require.NoError(t, tp.Shutdown(context.Background())) }()
	ctx, span := tp.Tracer("test").Start(otelsession.Bind(context.Background(), session()), "work")
	defer span.End()

	logger.InfoContext(ctx, "notified", "n", 1)
	var rec map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &rec))
	assert.Equal(t, "-100123", rec["session.chat_id"])
	assert.Equal(t, "", rec["session.thread_id"])
	assert.Equal(t, span.SpanContext().TraceID().String(), rec["trace_id"])
	assert.Equal(t, span.SpanContext().SpanID().String(), rec["span_id"])
	assert.NotContains(t, buf.String(), "Alice")
	assert.EqualValues(t, 1, rec["n"])

	buf.Reset()
	logger.Info("no context")
	assert.NotContains(t, buf.String(), "session.")
	assert.NotContains(t, buf.String(), "trace_id")

	buf.Reset()
	logger.With("a", 1).WithGroup("g").InfoContext(ctx, "grouped")
	require.NoError(t, json.Unmarshal(buf.Bytes(), &rec))
	assert.Contains(t, rec["g"], "session.chat_id")
}

func TestLogProcessor(t *testing.T) {
	t.Parallel()
	exp := &recordingLogExporter{}
	lp := sdklog.NewLoggerProvider(
		sdklog.WithProcessor(sessiontrace.NewLogProcessor(sessiontrace.Redaction{})),
		sdklog.WithProcessor(sdklog.NewSimpleProcessor(exp)),
	)
	defer func() { require.NoError(t, lp.Shutdown(context.Background())) }()

	ctx := otelsession.Bind(context.Background(), session())
	var rec otellog.Record
	rec.SetBody(attribute.StringValue("notified"))
	lp.Logger("test").Emit(ctx, rec)
	lp.Logger("test").Emit(context.Background(), rec)

	require.Len(t, exp.records, 2)
	got := map[string]string{}
	exp.records[0].WalkAttributes(func(kv attribute.KeyValue) bool {
		got[string(kv.Key)] = kv.Value.AsString()
		return true
	})
	assert.Equal(t, "-100123", got["session.chat_id"])
	v, ok := got["session.thread_id"]
	assert.True(t, ok)
	assert.Equal(t, "", v, "Cleared is the empty string")
	_, ok = got["session.user_name"]
	assert.False(t, ok, "the user name is not copied in clear")
	assert.Equal(t, 0, exp.records[1].AttributesLen(), "no session, no attributes")
}

type recordingLogExporter struct {
	mu      sync.Mutex
	records []sdklog.Record
}

func (e *recordingLogExporter) Export(_ context.Context, rs []sdklog.Record) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range rs {
		e.records = append(e.records, r.Clone())
	}
	return nil
}
func (*recordingLogExporter) Shutdown(context.Context) error   { return nil }
func (*recordingLogExporter) ForceFlush(context.Context) error { return nil }
