package sessiontrace_test

// Run: go test -run '^$' -bench . -benchmem -count 6 ./otelsession/sessiontrace/

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	otellog "go.opentelemetry.io/otel/log"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/internal/benchcpu"
	"github.com/sessionwire/sessionwire/otelsession"
	"github.com/sessionwire/sessionwire/otelsession/sessiontrace"
)

func fullSession() otelsession.Session {
	return otelsession.Session{
		Platform: "telegram", Source: "gateway", ChatID: "-1001234567890", ChatType: "group",
		ChatName: "Ops", ThreadID: "17585", UserID: "5512345678", UserIDAlt: "@alice", UserName: "Alice Example",
		ScopeID: "guild-998877", SessionKey: "agent:main:telegram:group:-1001234567890:17585",
		SessionID: "20261202_152133_a1b2c3", UISessionID: "tab-7", MessageID: "88121", Profile: "default",
		BrowserControlPrincipal: "user:alice", BrowserControlTransportFamily: "cdp", ParentChatID: "-1001234567000",
		Cron: otelsession.CronOff,
	}
}

// exporterStandIn stands for the exporting processor every real provider has:
// with one registered, the SDK snapshots each span at End, as in production.
type exporterStandIn struct{}

func (exporterStandIn) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (exporterStandIn) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (exporterStandIn) Shutdown(context.Context) error                  { return nil }
func (exporterStandIn) ForceFlush(context.Context) error                { return nil }

// setAttributes is a span processor that sets fixed attributes at start.
type setAttributes []attribute.KeyValue

func (a setAttributes) OnStart(_ context.Context, s sdktrace.ReadWriteSpan) { s.SetAttributes(a...) }
func (setAttributes) OnEnd(sdktrace.ReadOnlySpan)                           {}
func (setAttributes) Shutdown(context.Context) error                        { return nil }
func (setAttributes) ForceFlush(context.Context) error                      { return nil }

func BenchmarkSpanStart(b *testing.B) {
	ctx := otelsession.Bind(context.Background(), fullSession())
	// runOver starts each span under the next of ctxs.
	runOver := func(b *testing.B, ctxs []context.Context, startOpts []trace.SpanStartOption, opts ...sdktrace.TracerProviderOption) {
		opts = append(opts, sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(exporterStandIn{}))
		tr := sdktrace.NewTracerProvider(opts...).Tracer("bench")
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			_, span := tr.Start(ctxs[i%len(ctxs)], "work", startOpts...)
			span.End()
			i++
		}
	}
	run := func(b *testing.B, startOpts []trace.SpanStartOption, opts ...sdktrace.TracerProviderOption) {
		runOver(b, []context.Context{ctx}, startOpts, opts...)
	}
	// Sessions in turn, more than a processor remembers (256), so that a
	// span's baggage is almost never the processor's memo: the cost of the
	// first span of each session. The baseline spans over the same contexts,
	// whose baggage is as far from the CPU's caches.
	many := make([]context.Context, 1024)
	for i := range many {
		s := fullSession()
		s.MessageID = strconv.Itoa(1_000_000 + i)
		many[i] = otelsession.Bind(context.Background(), s)
	}
	// They stay alive through every row, not only the rows that span over
	// them: the garbage collector's share of a span's cost grows with the
	// live heap it marks, so rows compared with each other must run beside
	// the same one (about 4 MB here; a gateway holds its sessions, and more).
	// Dead after their last use, they once left the rows run after it a
	// near-empty heap, and "no hash key" looked about 1 µs cheaper than the
	// SDK's own cost of its six attributes.
	defer runtime.KeepAlive(many)
	b.Run("baseline/no_session_attributes", func(b *testing.B) { run(b, nil) })
	b.Run("baseline/no_session_attributes_1024_sessions_in_turn", func(b *testing.B) { runOver(b, many, nil) })
	b.Run("baseline/same_attributes_given_at_start", func(b *testing.B) {
		var attrs []attribute.KeyValue
		otelsession.Range(ctx, func(f otelsession.Field, v string, st otelsession.State) bool {
			if st != otelsession.Unset && f != otelsession.FieldUserName && f != otelsession.FieldBrowserControlPrincipal {
				attrs = append(attrs, attribute.String(f.Key(), v))
			}
			return true
		})
		run(b, []trace.SpanStartOption{trace.WithAttributes(attrs...)})
	})
	// The attributes the processor records by default (the user id as a
	// hash of the same length): seven for this session.
	var defaults []attribute.KeyValue
	otelsession.RangeFields(ctx, sessiontrace.DefaultSpanFields(), func(f otelsession.Field, v string, st otelsession.State) bool {
		if f == otelsession.FieldUserID {
			v = "hmac:0123456789abcdef0123456789abcdef"
		}
		defaults = append(defaults, attribute.String(f.Key(), v))
		return true
	})
	b.Run("baseline/default_attributes_given_at_start", func(b *testing.B) {
		run(b, []trace.SpanStartOption{trace.WithAttributes(defaults...)})
	})
	b.Run("baseline/default_attributes_set_at_start", func(b *testing.B) {
		// The SDK's own cost of them: a processor that sets the same
		// prebuilt attributes and does nothing else, the floor of any
		// span processor recording them.
		run(b, nil, sdktrace.WithSpanProcessor(setAttributes(defaults)))
	})
	// The SDK's own cost of one and two attributes more than the default:
	// it de-duplicates a span's attributes at End through a map, which
	// outgrows its small form past eight.
	for _, n := range []int{8, 9} {
		more := slices.Clone(defaults)
		for i := len(more); i < n; i++ {
			more = append(more, attribute.String("app.extra"+strconv.Itoa(i), "value"))
		}
		b.Run("baseline/"+strconv.Itoa(n)+"_attributes_set_at_start", func(b *testing.B) {
			run(b, nil, sdktrace.WithSpanProcessor(setAttributes(more)))
		})
	}
	key := []byte("k")
	b.Run("sessiontrace/processor", func(b *testing.B) {
		// The default set, user id hashed: what a deployment with a key records.
		run(b, nil, sdktrace.WithSpanProcessor(sessiontrace.NewSpanProcessor(sessiontrace.Redaction{HashKey: key})))
	})
	b.Run("sessiontrace/processor_conversation_id", func(b *testing.B) {
		// The default set and the session key again as gen_ai.conversation.id.
		run(b, nil, sdktrace.WithSpanProcessor(sessiontrace.NewSpanProcessor(sessiontrace.Redaction{HashKey: key, ConversationID: true})))
	})
	b.Run("sessiontrace/processor_1024_sessions_in_turn", func(b *testing.B) {
		runOver(b, many, nil, sdktrace.WithSpanProcessor(sessiontrace.NewSpanProcessor(sessiontrace.Redaction{HashKey: key})))
	})
	b.Run("sessiontrace/processor_no_key", func(b *testing.B) {
		// The default set without a key: the user id is dropped.
		run(b, nil, sdktrace.WithSpanProcessor(sessiontrace.NewSpanProcessor(sessiontrace.Redaction{})))
	})
	b.Run("sessiontrace/processor_all_fields", func(b *testing.B) {
		// Every field opted in, names hashed.
		run(b, nil, sdktrace.WithSpanProcessor(sessiontrace.NewSpanProcessor(sessiontrace.Redaction{HashKey: key, SpanFields: otelsession.Fields()})))
	})
}

func BenchmarkLogRecord(b *testing.B) {
	ctx := otelsession.Bind(context.Background(), fullSession())
	b.Run("baseline/json_handler", func(b *testing.B) {
		l := slog.New(slog.NewJSONHandler(io.Discard, nil))
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			l.InfoContext(ctx, "notified")
		}
	})
	b.Run("sessiontrace/log_handler", func(b *testing.B) {
		l := slog.New(sessiontrace.NewLogHandler(slog.NewJSONHandler(io.Discard, nil), sessiontrace.Redaction{}))
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			l.InfoContext(ctx, "notified")
		}
	})
}

func BenchmarkOTelLogRecord(b *testing.B) {
	ctx := otelsession.Bind(context.Background(), fullSession())
	run := func(b *testing.B, procs ...sdklog.Processor) {
		var opts []sdklog.LoggerProviderOption
		for _, p := range procs {
			opts = append(opts, sdklog.WithProcessor(p))
		}
		// A processor that keeps nothing stands for the exporter.
		opts = append(opts, sdklog.WithProcessor(sdklog.NewSimpleProcessor(discardLogs{})))
		logger := sdklog.NewLoggerProvider(opts...).Logger("bench")
		var rec otellog.Record
		rec.SetBody(attribute.StringValue("notified"))
		defer benchcpu.Time(b)()
		b.ReportAllocs()
		for b.Loop() {
			logger.Emit(ctx, rec)
		}
	}
	b.Run("baseline/no_session_processor", func(b *testing.B) { run(b) })
	b.Run("sessiontrace/log_processor", func(b *testing.B) {
		run(b, sessiontrace.NewLogProcessor(sessiontrace.Redaction{}))
	})
}

type discardLogs struct{}

func (discardLogs) Export(context.Context, []sdklog.Record) error { return nil }
func (discardLogs) Shutdown(context.Context) error                { return nil }
func (discardLogs) ForceFlush(context.Context) error              { return nil }
