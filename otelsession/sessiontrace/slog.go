package sessiontrace

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/otelsession"
)

// LogHandler wraps an slog.Handler: every record logged with a context
// (slog.InfoContext, Logger.Log with ctx, …) gains the session fields of that
// context, redacted like spans, and trace_id and span_id when the context
// holds a valid span context.
type LogHandler struct {
	next slog.Handler
	r    *redactor
}

// NewLogHandler wraps next, applying r (the zero Redaction gives the
// defaults).
func NewLogHandler(next slog.Handler, r Redaction) *LogHandler {
	return &LogHandler{next: next, r: newRedactor(r, nil)}
}

// Enabled reports whether the wrapped handler handles level.
func (h *LogHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle adds the session and trace ids, then passes the record on.
func (h *LogHandler) Handle(ctx context.Context, rec slog.Record) error {
	if ctx == nil {
		return h.next.Handle(ctx, rec)
	}
	rec = rec.Clone()
	var buf [2 + otelsession.NumFields + 1]slog.Attr // trace and span ids, the fields, the conversation id
	attrs := buf[:0]
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	h.r.visit(ctx, func(f otelsession.Field, v string) {
		attrs = append(attrs, slog.String(f.Key(), v))
		if h.r.conversation && f == otelsession.FieldSessionKey && v != "" {
			attrs = append(attrs, slog.String(string(ConversationIDKey), v))
		}
	})
	rec.AddAttrs(attrs...)
	return h.next.Handle(ctx, rec)
}

// WithAttrs returns a handler whose wrapped handler has attrs.
func (h *LogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &LogHandler{next: h.next.WithAttrs(attrs), r: h.r}
}

// WithGroup returns a handler whose wrapped handler opens group. The session
// attributes of later records go inside the group too.
func (h *LogHandler) WithGroup(name string) slog.Handler {
	return &LogHandler{next: h.next.WithGroup(name), r: h.r}
}
