package sessiontrace

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sessionwire/sessionwire/otelsession"
)

// SpanProcessor copies the session of a span's parent context onto the span
// when it starts: the fields of [Redaction.SpanFields], by default
// [DefaultSpanFields] with the user id hashed (dropped without a hash key).
// Register it with sdktrace.WithSpanProcessor beside the exporting
// processor. It is safe for concurrent use.
type SpanProcessor struct {
	r *redactor
	// remote and local are the recorded fields that are baggage members
	// and those kept beside the baggage.
	remote, local []otelsession.Field
	cache         spanCache
}

var _ sdktrace.SpanProcessor = (*SpanProcessor)(nil)

// NewSpanProcessor returns a processor applying r (the zero Redaction gives
// the defaults).
func NewSpanProcessor(r Redaction) *SpanProcessor {
	fields := r.SpanFields
	if fields == nil {
		fields = DefaultSpanFields()
	}
	p := &SpanProcessor{
		// A user id on every span is personal data in every trace store:
		// spans correlate it by its keyed hash unless r.Actions says
		// otherwise.
		r: newRedactor(r, map[otelsession.Field]Action{otelsession.FieldUserID: Hash}),
	}
	p.remote, p.local = splitFields(fields)
	return p
}

// OnStart adds the session attributes.
func (p *SpanProcessor) OnStart(parent context.Context, s sdktrace.ReadWriteSpan) {
	// The SDK's span copies what SetAttributes is given (only the SDK
	// implements ReadWriteSpan), so the cache's shared slice is handed over
	// as it is.
	if len(p.local) == 0 {
		if attrs := p.sessionAttributes(parent, nil); len(attrs) > 0 {
			s.SetAttributes(attrs...)
		}
		return
	}
	// Local fields are read for each span, after the cache's attributes,
	// into a slice that is the next span's once the span has copied it:
	// a slice per span (about 1.8 KiB with every field) would be garbage
	// for the collector on every span.
	buf := attrBufs.Get().(*[]attribute.KeyValue)
	attrs := p.sessionAttributes(parent, (*buf)[:0])
	if len(attrs) > 0 {
		s.SetAttributes(attrs...)
	}
	clear(attrs) // keeps no session's values alive in the pool
	*buf = attrs[:0]
	attrBufs.Put(buf)
}

// attrBufs holds the slices OnStart builds a span's attributes in when local
// fields are recorded.
var attrBufs = sync.Pool{New: func() any { return new([]attribute.KeyValue) }}

// Annotate sets on span the session attributes of ctx, redacted as OnStart
// sets them, when span is recording. It is for a span that started before
// its session was decided: a gRPC server span that otelgrpc starts before
// any interceptor runs beside otelgrpc given propagation.ExceptBaggage, or
// an HTTP server span otelhttp starts in front of httpsession.Handler, when
// the policy accepts the session afterwards (grpcsession.WithOnAccept,
// httpsession.WithOnAccept; a grpcsession.Edge decides before otelgrpc
// starts the span, which then needs no Annotate). It records the same fields as
// OnStart. Attributes already on the span
// under the same keys are replaced; a field the session does not hold
// leaves its attribute, if any, as it was.
func (p *SpanProcessor) Annotate(ctx context.Context, span trace.Span) {
	if span == nil || !span.IsRecording() {
		return
	}
	var buf [24]attribute.KeyValue
	attrs := p.sessionAttributes(ctx, buf[:0])
	if len(p.local) == 0 {
		// span may be any implementation: it gets a copy, never the
		// cache's slice.
		attrs = append(buf[:0], attrs...)
	}
	if len(attrs) > 0 {
		span.SetAttributes(attrs...)
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

// ConversationIDKey is the OpenTelemetry GenAI semantic convention's
// conversation attribute. With [Redaction.ConversationID], spans and log
// records carry it beside session.key, holding the same value, so that tools
// which group by the convention's attribute (and know nothing of session.*)
// group by conversation too.
const ConversationIDKey = attribute.Key("gen_ai.conversation.id")

// attributes appends the fields of the session of ctx, redacted, to dst
// (every field when fields is nil), and with [Redaction.ConversationID] the
// session key again as gen_ai.conversation.id: a conversation is what the
// session key names (agent, platform, chat, thread). It follows the session
// key's redaction, and a Cleared or empty key adds no conversation id, since
// "no conversation" is not an id to group by.
func (c *redactor) attributes(ctx context.Context, fields []otelsession.Field, dst []attribute.KeyValue) []attribute.KeyValue {
	add := func(f otelsession.Field, v string) {
		dst = append(dst, keys[f].String(v))
		if c.conversation && f == otelsession.FieldSessionKey && v != "" {
			dst = append(dst, ConversationIDKey.String(v))
		}
	}
	if fields == nil {
		c.visit(ctx, add)
	} else {
		c.visitFields(ctx, fields, add)
	}
	return dst
}
