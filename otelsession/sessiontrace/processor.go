package sessiontrace

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sessionwire/sessionwire/otelsession"
)

// SpanProcessor copies the session of a span's parent context onto the span
// when it starts: the fields of [Redaction.SpanFields], by default
// [DefaultSpanFields] with the user id hashed (dropped without a hash key).
// Register it with sdktrace.WithSpanProcessor beside the exporting
// processor. It is safe for concurrent use.
type SpanProcessor struct {
	r      *redactor
	fields []otelsession.Field
}

var _ sdktrace.SpanProcessor = (*SpanProcessor)(nil)

// NewSpanProcessor returns a processor applying r (the zero Redaction gives
// the defaults).
func NewSpanProcessor(r Redaction) *SpanProcessor {
	fields := r.SpanFields
	if fields == nil {
		fields = DefaultSpanFields()
	} else {
		fields = append([]otelsession.Field(nil), fields...)
	}
	// A user id on every span is personal data in every trace store: spans
	// correlate it by its keyed hash unless r.Actions says otherwise.
	return &SpanProcessor{r: newRedactor(r, map[otelsession.Field]Action{otelsession.FieldUserID: Hash}), fields: fields}
}

// OnStart adds the session attributes.
func (p *SpanProcessor) OnStart(parent context.Context, s sdktrace.ReadWriteSpan) {
	// The slice escapes through SetAttributes (an interface call), so it is
	// sized for the fields recorded rather than kept on the stack.
	attrs := make([]attribute.KeyValue, 0, len(p.fields))
	p.r.visitFields(parent, p.fields, func(f otelsession.Field, v string) { attrs = append(attrs, keys[f].String(v)) })
	if len(attrs) > 0 {
		s.SetAttributes(attrs...)
	}
}

// OnEnd does nothing: the attributes are set at start, so that child spans
// and an early export see them.
func (*SpanProcessor) OnEnd(sdktrace.ReadOnlySpan) {}

// Shutdown does nothing.
func (*SpanProcessor) Shutdown(context.Context) error { return nil }

// ForceFlush does nothing.
func (*SpanProcessor) ForceFlush(context.Context) error { return nil }

// keys are the attribute keys, indexed by Field.
var keys = func() (k [32]attribute.Key) {
	for _, f := range otelsession.Fields() {
		k[f] = attribute.Key(f.Key())
	}
	return k
}()

// attributes appends the session of ctx, redacted, to dst.
func (c *redactor) attributes(ctx context.Context, dst []attribute.KeyValue) []attribute.KeyValue {
	c.visit(ctx, func(f otelsession.Field, v string) { dst = append(dst, keys[f].String(v)) })
	return dst
}
